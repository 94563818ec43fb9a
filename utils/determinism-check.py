#!/usr/bin/env python3
"""Determinism check for polymesh-opt (issue #7).

Runs one polymesh-opt pipeline on each input under several configurations
that change what a nondeterministic program would depend on, and checks that
every output is byte-identical to the first run's:

  threads-off   --mlir-disable-threading
  threads-1     taskset to one CPU: MLIR's thread pool gets one thread
                (llvm::hardware_concurrency() reads the CPU affinity)
  threads-all   every CPU of the machine (one thread each)
  no-aslr       setarch -R: fixed addresses, so pointer-keyed DenseMaps and
                Abseil's per-process hash seed (an address) repeat
  heap          glibc malloc tunables that move every heap allocation, so
                pointer order differs from the other runs
  rerun         threads-all again: with ASLR, each process has other
                pointers and another Abseil hash seed
Each configuration runs --repeat times (default 1). With --runs N, the
configurations run in turn until N runs in all (N=10: every configuration
once, then threads-off, threads-1, threads-all and no-aslr again).

Compared outputs: the IR written with -o, stdout (stats, plans, leaf
tables), stderr (diagnostics), the exit code, and every file the pipeline
writes into the run's directory (stats-file, comm-matrix, leaf tables):
name them with the placeholder {out} in --arg, e.g.
--arg=--polymesh-plan=stats-file={out}/stats.json.

Prints one line per input and a summary ("N inputs, R runs each, 0
differ"); on a difference, the first differing line and the run's
configuration. Exits with 1 when anything differs.

usage: determinism-check.py POLYMESH_OPT WORKDIR INPUT... [--arg=ARG ...]
                            [--repeat K | --runs N]
"""
import argparse
import difflib
import os
import shutil
import subprocess
import sys

HEAP_TUNABLES = ('glibc.malloc.tcache_count=0:glibc.malloc.mxfast=0:'
                 'glibc.malloc.top_pad=1048576:'
                 'glibc.malloc.mmap_threshold=65536')


def configurations():
    cpus = sorted(os.sched_getaffinity(0))
    configs = [
        ('threads-off', [], ['--mlir-disable-threading'], {}),
        ('threads-1', ['taskset', '-c', str(cpus[0])], [], {}),
        ('threads-all', [], [], {}),
        ('no-aslr', ['setarch', '-R'], [], {}),
        ('heap', [], [], {'GLIBC_TUNABLES': HEAP_TUNABLES}),
        ('rerun', [], [], {}),
    ]
    return configs, len(cpus)


def run_once(tool, input_path, args, out_dir, prefix, extra, env_extra):
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    ir_path = os.path.join(out_dir, 'output.mlir')
    command = prefix + [tool, input_path, '-o', ir_path] + extra + [
        arg.replace('{out}', out_dir) for arg in args]
    env = dict(os.environ)
    env.update(env_extra)
    result = subprocess.run(command, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=env, timeout=600)
    outputs = {
        'exit code': str(result.returncode).encode(),
        'stdout': result.stdout,
        # Diagnostics name the input by its path, the same in every run.
        'stderr': result.stderr,
    }
    for name in sorted(os.listdir(out_dir)):
        with open(os.path.join(out_dir, name), 'rb') as f:
            outputs[name] = f.read()
    return outputs


def first_difference(expected, actual):
    a = expected.decode(errors='replace').splitlines()
    b = actual.decode(errors='replace').splitlines()
    for line in difflib.unified_diff(a, b, lineterm='', n=0):
        if line.startswith(('-', '+')) and not line.startswith(('---', '+++')):
            return line[:300]
    return '(same lines, different bytes)'


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('tool')
    parser.add_argument('workdir')
    parser.add_argument('inputs', nargs='+')
    parser.add_argument('--arg', action='append', default=[])
    parser.add_argument('--repeat', type=int, default=1)
    parser.add_argument('--runs', type=int, default=0)
    options = parser.parse_args()

    configs, num_cpus = configurations()
    if options.runs:
        # (configuration, its run number) in turn until --runs in all.
        schedule = [(configs[i % len(configs)], i // len(configs))
                    for i in range(options.runs)]
        print('configurations: %s; up to %d threads; %d runs in turn' % (
            ', '.join(name for name, _, _, _ in configs), num_cpus,
            options.runs))
    else:
        schedule = [(config, r) for config in configs
                    for r in range(options.repeat)]
        print('configurations: %s; up to %d threads; %d run(s) each' % (
            ', '.join(name for name, _, _, _ in configs), num_cpus,
            options.repeat))
    differing = 0
    runs = len(schedule)
    for input_path in options.inputs:
        base = None
        base_config = None
        problem = None
        for (name, prefix, extra, env), r in schedule:
            out_dir = os.path.join(options.workdir, '%s.%s.%d' % (
                os.path.basename(input_path), name, r))
            outputs = run_once(options.tool, input_path, options.arg,
                               out_dir, prefix, extra, env)
            if base is None:
                base, base_config = outputs, '%s #%d' % (name, r)
                continue
            for key in sorted(set(base) | set(outputs)):
                if base.get(key) != outputs.get(key):
                    problem = '%s differs between %s and %s #%d: %s' % (
                        key, base_config, name, r,
                        first_difference(base.get(key, b''),
                                         outputs.get(key, b'')))
                    break
            if problem:
                break
        size = sum(len(v) for v in base.values())
        if problem:
            differing += 1
            print('DIFFERS %s: %s' % (input_path, problem))
        else:
            print('identical %s: %d runs, %d output bytes, exit code %s' % (
                os.path.basename(input_path), runs, size,
                base['exit code'].decode()))
    print('%d inputs, %d runs each, %d differ' % (
        len(options.inputs), runs, differing))
    return 1 if differing else 0


if __name__ == '__main__':
    sys.exit(main())
