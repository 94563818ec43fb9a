#!/usr/bin/env python3
"""Splits `polymesh-translate --polymesh-to-ptx -split-input-file` output
(one PTX module per gpu.binary, each starting with a `// gpu.binary` line)
into PREFIX0.ptx, PREFIX1.ptx, ... so that ptxas checks each one."""
import sys

text = open(sys.argv[1]).read()
modules = [part for part in text.split("// gpu.binary ") if ".target" in part]
if not modules:
    sys.exit("no PTX module in " + sys.argv[1])
for index, module in enumerate(modules):
    with open(f"{sys.argv[2]}{index}.ptx", "w") as out:
        out.write("// gpu.binary " + module)
print(f"{len(modules)} PTX modules")
