#!/usr/bin/env python3
"""Runs a Shardy lit file (e.g. Shardy's own
shardy/dialect/sdy/transforms/export/test/reshard_to_collectives.mlir) through
Polymesh with the `sdy.` prefix renamed to `polymesh.`: the file must parse
as one module, every reshard must plan at its lower bound, and
`polymesh-run --verify` must pass on every function.

    utils/check-shardy-file.py PATH/TO/reshard_to_collectives.mlir [--bin build/bin]

Shardy's files are not copied into this repository (issue 14); the renamed
module is written to a temporary directory and removed. Prints one line of
figures and exits non-zero on the first check that fails. Python 3 standard
library only.
"""

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path


def rename(text: str) -> str:
    """Shardy's spelling in Polymesh's: the dialect prefix of ops and
    attributes, and the `sdy.sharding` argument attribute. Comments (lit's
    RUN and CHECK lines, which name Shardy's collectives) are dropped."""
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("//")]
    text = "\n".join(lines) + "\n"
    return re.sub(r"\bsdy\.", "polymesh.", text)


# Dialects of ops that polymesh-opt reads; a function using another (Shardy's
# tests use stablehlo.while) is left out, and named.
_KNOWN_DIALECTS = {"polymesh", "func", "arith", "tensor", "linalg", "math", "tosa", "scf", "shard"}


def split_functions(text: str) -> tuple[str, list[tuple[str, str]]]:
    """The top-level lines that are not functions (meshes), and each
    `func.func` (name, text), split where a line starting with `}` closes it."""
    header, functions, current = [], [], None
    for line in text.splitlines(keepends=True):
        if current is None and line.startswith("func.func"):
            current = [line]
            continue
        if current is None:
            header.append(line)
            continue
        current.append(line)
        if line.startswith("}"):
            body = "".join(current)
            functions.append((re.match(r"func\.func\s+@([\w$.]+)", body).group(1), body))
            current = None
    return "".join(header), functions


def foreign_ops(function: str) -> set[str]:
    ops = set(re.findall(r"\b([a-z_]+)\.([a-z_]+)\s*[(%\"]", function))
    ops |= set(re.findall(r"=\s*\"?([a-z_]+)\.([a-z_]+)", function))
    return {f"{d}.{o}" for d, o in ops if d not in _KNOWN_DIALECTS and d != "polymesh"}


def run(command: list[str], what: str) -> subprocess.CompletedProcess:
    process = subprocess.run(command, capture_output=True, text=True)
    if process.returncode != 0:
        sys.stderr.write(f"{what} failed (exit code {process.returncode}):\n{process.stdout}{process.stderr}")
        sys.exit(1)
    return process


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file", type=Path)
    parser.add_argument("--bin", type=Path, default=Path(__file__).resolve().parents[1] / "build" / "bin")
    args = parser.parse_args()
    opt, runner = str(args.bin / "polymesh-opt"), str(args.bin / "polymesh-run")

    header, all_functions = split_functions(rename(args.file.read_text()))
    kept, left_out = [], []
    for name, body in all_functions:
        foreign = foreign_ops(body)
        (left_out if foreign else kept).append((name, body, foreign))
    reshards_in_source = sum(len(re.findall(r"\bpolymesh\.reshard\b", b)) for _, b, _ in kept)
    functions = len(kept)
    for name, body, foreign in left_out:
        print(f"left out: @{name} (uses {', '.join(sorted(foreign))}, not a dialect polymesh-opt reads)")
    with tempfile.TemporaryDirectory(prefix="polymesh-shardy-") as tmp:
        module = Path(tmp) / "renamed.mlir"
        module.write_text(header + "".join(body for _, body, _ in kept))

        # One module: one parse, no split.
        run([opt, str(module), "-o", "/dev/null"], "parsing the renamed file")

        stats_path = Path(tmp) / "stats.jsonl"
        run([opt, str(module), "--polymesh-propagate", f"--polymesh-plan=stats-file={stats_path}", "-o",
             "/dev/null"], "propagate and plan")
        stats = [json.loads(line) for line in stats_path.read_text().splitlines() if line.strip()]
        above = [s for s in stats if s["bytes_moved"] != s["lower_bound_bytes"]]
        moved = sum(s["bytes_moved"] for s in stats)
        bound = sum(s["lower_bound_bytes"] for s in stats)

        verify = run([runner, str(module), "--verify"], "polymesh-run --verify")
        summary = verify.stdout.strip().splitlines()[-1]
        match = re.fullmatch(r"(\d+) passed, (\d+) failed", summary)

    print(f"{args.file.name}: {functions} of {len(all_functions)} functions, {reshards_in_source} reshards in them, "
          f"{len(stats)} planned ({moved} bytes moved, lower bound {bound} bytes, "
          f"{len(above)} above it); polymesh-run --verify: {summary}")
    if len(stats) < reshards_in_source:
        print(f"error: {reshards_in_source - len(stats)} reshards were not planned", file=sys.stderr)
        return 1
    for s in above:
        print(f"error: above the lower bound: {s['function']} at {s['location']}: {s['bytes_moved']} bytes, "
              f"bound {s['lower_bound_bytes']}", file=sys.stderr)
    if above:
        return 1
    if not match or int(match.group(2)) != 0 or int(match.group(1)) != functions:
        print("error: not every function passed --verify", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
