#!/usr/bin/env python3
"""Splits `polymesh-translate --polymesh-to-ptx -split-input-file` output
(one PTX module per gpu.binary, each starting with a `// gpu.binary` line)
into PREFIX0.ptx, PREFIX1.ptx, ... and, given --ptxas, assembles every one
of them, so that a test checks all modules whatever their number.

Stale PREFIX*.ptx files of an earlier run are removed first: a test that
names a module which is no longer generated must fail, not read a left-over.
"""
import argparse
import glob
import os
import subprocess
import sys

parser = argparse.ArgumentParser(description=__doc__)
parser.add_argument("input")
parser.add_argument("prefix")
parser.add_argument("--ptxas", help="ptxas binary to assemble each module with")
parser.add_argument("--arch", default="sm_90")
args = parser.parse_args()

for stale in glob.glob(glob.escape(args.prefix) + "[0-9]*.ptx"):
    os.remove(stale)
    cubin = stale[: -len(".ptx")] + ".cubin"
    if os.path.exists(cubin):
        os.remove(cubin)

text = open(args.input).read()
modules = [part for part in text.split("// gpu.binary ") if ".target" in part]
if not modules:
    sys.exit("no PTX module in " + args.input)
for index, module in enumerate(modules):
    path = f"{args.prefix}{index}.ptx"
    with open(path, "w") as out:
        out.write("// gpu.binary " + module)
    if args.ptxas:
        result = subprocess.run(
            [args.ptxas, f"-arch={args.arch}", path, "-o", path[:-4] + ".cubin"],
            capture_output=True, text=True)
        if result.returncode != 0:
            sys.stderr.write(result.stdout + result.stderr)
            sys.exit(f"ptxas rejected module {index} ({path})")
print(f"{len(modules)} PTX modules")
