#!/usr/bin/env python3
"""Bridge benchmark (issue 15): for each program of the bridge's pytest
suites, the wall time of `polymesh_jax.resolve` (export to Polymesh IR, then
`polymesh-opt --polymesh-propagate` in a subprocess, then the pytree of
NamedShardings) next to `jax.jit(fn).lower(*args).compile()` of the same
function, run alternately in this process; medians of REPS runs and their
ratio. Each run wraps the function anew, so neither side reuses JAX's
tracing or compilation caches.

    utils/run-python-tests.sh's environment, then:
    benchmarks/bridge/bench_bridge.py [--reps 5] [--devices 8] [NAME ...]

Goal (issue 15): export + resolve at most 0.25x of JAX's compile.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "python"), str(ROOT / "python" / "tests")]
os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=32")
os.environ.setdefault("POLYMESH_BIN_DIR", str(ROOT / "build" / "bin"))

import jax  # noqa: E402

import polymesh_jax as pj  # noqa: E402
import test_control_flow  # noqa: E402
import test_slices  # noqa: E402


def programs(devices: int) -> dict:
    found = {}
    for module in (test_control_flow, test_slices):
        for name, case in module.cases(devices).items():
            found[name] = case
    return found


def fresh(fn):
    # A new function object each time: JAX caches traces and executables by
    # the function's identity.
    return lambda *args: fn(*args)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--devices", type=int, default=8, choices=(8, 32))
    parser.add_argument("names", nargs="*")
    options = parser.parse_args()
    cases = programs(options.devices)
    names = options.names or sorted(cases)
    print(f"# {options.reps} runs each, medians; {options.devices} fake CPU devices; JAX {jax.__version__}")
    # JAX's own trace and lower, which resolve needs too: its ratio to the
    # compile is the floor of resolve's.
    print(f"{'program':<24} {'resolve ms':>11} {'jit compile ms':>15} {'ratio':>7} "
          f"{'trace+lower ms':>15} {'floor':>7}")
    ratios, floors = [], []
    for name in names:
        fn, args = cases[name]
        ours, theirs, lowering = [], [], []
        for _ in range(options.reps):
            start = time.perf_counter()
            pj.resolve(fresh(fn), args)
            ours.append(time.perf_counter() - start)
            start = time.perf_counter()
            jax.jit(fresh(fn)).lower(*args).compile()
            theirs.append(time.perf_counter() - start)
            start = time.perf_counter()
            jax.jit(fresh(fn)).trace(*args).lower()
            lowering.append(time.perf_counter() - start)
        a, b, c = (statistics.median(t) * 1e3 for t in (ours, theirs, lowering))
        ratios.append(a / b)
        floors.append(c / b)
        print(f"{name:<24} {a:>11.1f} {b:>15.1f} {a / b:>6.2f}x {c:>15.1f} {c / b:>6.2f}x")
    print(f"{'median':<24} {'':>11} {'':>15} {statistics.median(ratios):>6.2f}x {'':>15} "
          f"{statistics.median(floors):>6.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
