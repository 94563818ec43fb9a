#!/usr/bin/env python3
"""Order-independence check for --polymesh-propagate.

Generates random multi-mesh programs (seeded), runs the pass on each program
and on copies whose arguments and results are permuted, and checks that
every leaf (named by its polymesh.leaf path) gets the same sharding and that
every op gets the same placement whatever the order.

usage: permutation-check.py POLYMESH_OPT [--programs N] [--perms K] [--seed S]
"""
import argparse
import random
import re
import subprocess
import sys

MESHES = [
    ('m1', '["a"=2, "b"=4]', ['a', 'b']),
    ('m2', '["x"=2, "y"=2, "z"=2]', ['x', 'y', 'z']),
    ('m3', '["c"=8], device_ids=[7, 6, 5, 4, 3, 2, 1, 0]', ['c']),
    ('pair', '["p"=2], device_ids=[0, 1]', ['p']),
    ('dev3', '[], device_ids=[3]', []),
]
SHAPE = (16, 16)
TYPE = 'tensor<16x16xf32>'


def random_sharding(rng):
    name, _, axes = rng.choice(MESHES)
    free = list(axes)
    rng.shuffle(free)
    dims = []
    for _ in range(2):
        take = rng.randint(0, min(2, len(free)))
        dims.append(free[:take])
        free = free[take:]
    text = ', '.join('{%s}' % ', '.join('"%s"' % a for a in d) for d in dims)
    return '#polymesh.sharding<@%s, [%s]>' % (name, text)


def random_program(rng):
    """Returns (args, body lines, results) with symbolic names."""
    num_args = rng.randint(2, 5)
    args = []
    for i in range(num_args):
        sharding = random_sharding(rng) if rng.random() < 0.8 else None
        args.append(('a%d' % i, sharding))
    values = [a for a, _ in args]
    body = []
    for i in range(rng.randint(3, 10)):
        kind = rng.random()
        name = 'v%d' % i
        if kind < 0.4:
            x, y = rng.choice(values), rng.choice(values)
            op = rng.choice(['arith.addf', 'arith.mulf', 'arith.subf'])
            body.append('%%%s = %s %%%s, %%%s : %s' % (name, op, x, y, TYPE))
        elif kind < 0.7:
            x = rng.choice(values)
            op = rng.choice(['math.exp', 'arith.negf', 'math.sqrt'])
            body.append('%%%s = %s %%%s : %s' % (name, op, x, TYPE))
        elif kind < 0.85:
            x = rng.choice(values)
            sharding = random_sharding(rng)[len('#polymesh.sharding'):]
            body.append('%%%s = polymesh.sharding_constraint %%%s %s : %s'
                        % (name, x, sharding, TYPE))
        else:
            body.append('%%%s = arith.constant dense<%d.0> : %s'
                        % (name, i, TYPE))
        values.append(name)
    results = []
    for i in range(rng.randint(1, 5)):
        declared = random_sharding(rng) if rng.random() < 0.3 else None
        results.append(('leaf%d' % i, rng.choice(values), declared))
    return args, body, results


def render(args, body, results, arg_order, result_order):
    meshes = '\n'.join('polymesh.mesh @%s = <%s>' % (n, m) for n, m, _ in MESHES)
    arg_text = ', '.join(
        '%%%s: %s%s' % (args[i][0], TYPE,
                        ' {polymesh.sharding = %s}' % args[i][1] if args[i][1] else '')
        for i in arg_order)
    res_text = ', '.join(
        '%s {polymesh.leaf = "%s"%s}' % (
            TYPE, results[i][0],
            ', polymesh.sharding = %s' % results[i][2] if results[i][2] else '')
        for i in result_order)
    ret = ', '.join('%%%s' % results[i][1] for i in result_order)
    ret_types = ', '.join(TYPE for _ in result_order)
    lines = [meshes,
             'func.func @f(%s) -> (%s) attributes {polymesh.ambient_mesh = @m1} {'
             % (arg_text, res_text)]
    lines += ['  ' + line for line in body]
    lines.append('  return %s : %s' % (ret, ret_types))
    lines.append('}')
    return '\n'.join(lines) + '\n'


LEAF = re.compile(r'polymesh\.leaf = "(leaf\d+)", polymesh\.sharding = (#polymesh\.sharding<[^>]*>)')
OP = re.compile(r'^\s*%\S+ = (\S+) .*?\{polymesh\.sharding = (.*?)\} :')
RESHARD = re.compile(r'^\s*%\S+ = polymesh\.reshard %\S+ (<.*>) :')


def summarize(output):
    leaves = dict(LEAF.findall(output))
    # Placements of computing ops by their source order: the pass never
    # reorders ops, and SSA names are renumbered identically.
    ops = []
    for line in output.splitlines():
        m = OP.match(line) or RESHARD.match(line)
        if m:
            ops.append(' '.join(m.groups()))
    reshards = output.count('polymesh.reshard')
    return leaves, sorted(ops), reshards


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument('tool')
    parser.add_argument('--programs', type=int, default=40)
    parser.add_argument('--perms', type=int, default=4)
    parser.add_argument('--seed', type=int, default=1)
    opts = parser.parse_args()
    rng = random.Random(opts.seed)
    failures = 0
    checked = 0
    for program in range(opts.programs):
        args, body, results = random_program(rng)
        base = None
        for perm in range(opts.perms + 1):
            arg_order = list(range(len(args)))
            result_order = list(range(len(results)))
            if perm:
                rng.shuffle(arg_order)
                rng.shuffle(result_order)
            text = render(args, body, results, arg_order, result_order)
            run = subprocess.run([opts.tool, '--polymesh-propagate', '-'],
                                 input=text.encode(), capture_output=True)
            if run.returncode != 0:
                print('program %d perm %d: polymesh-opt failed:\n%s\n%s'
                      % (program, perm, run.stderr.decode(), text))
                failures += 1
                break
            summary = summarize(run.stdout.decode())
            if len(summary[0]) != len(results):
                print('program %d: %d leaves placed, expected %d\n%s'
                      % (program, len(summary[0]), len(results), run.stdout.decode()))
                failures += 1
                break
            if base is None:
                base = (summary, text)
            elif summary != base[0]:
                print('program %d: permutation %d changes decisions\n'
                      'original:\n%s\npermuted:\n%s\n%s\nvs\n%s'
                      % (program, perm, base[1], text, base[0], summary))
                failures += 1
                break
            checked += 1
    print('%d passed, %d failed' % (opts.programs - failures, failures))
    print('(%d propagations compared)' % checked, file=sys.stderr)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
