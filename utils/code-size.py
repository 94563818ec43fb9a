#!/usr/bin/env python3
"""Code size of a partitioned, lowered program at several device counts.

Generates one program per device count N: an input sharded over a mesh of
N/2 devices, an elementwise op there, a reshard to a mesh of the other N/2
devices (reversed ids, other dimension), an elementwise op there. Runs
`polymesh-opt --polymesh-pipeline=target=cpu` and reports, for the lowered
module: the number of functions, the number of ops inside function bodies
(the code), and the number of elements in global tables (the data). Exits 1
when the code differs between device counts.
"""
import argparse
import re
import subprocess
import sys


def program(devices):
    half = devices // 2
    first = ", ".join(str(i) for i in range(half))
    second = ", ".join(str(i) for i in reversed(range(half, devices)))
    rows, cols = 4 * devices, 2 * devices
    t = f"tensor<{rows}x{cols}xf32>"
    return f"""
polymesh.mesh @a = <["x"={half}], device_ids=[{first}]>
polymesh.mesh @b = <["y"={half}], device_ids=[{second}]>
func.func @step(%in: {t} {{polymesh.sharding = #polymesh.sharding<@a, [{{"x"}}, {{}}]>}})
    -> ({t} {{polymesh.sharding = #polymesh.sharding<@b, [{{}}, {{"y"}}]>}}) {{
  %0 = arith.negf %in : {t}
  %1 = polymesh.reshard %0 <@b, [{{}}, {{"y"}}]> : {t}
  %2 = math.absf %1 : {t}
  return %2 : {t}
}}
"""


def measure(opt, devices):
    lowered = subprocess.run(
        [opt, "--polymesh-pipeline=target=cpu", "-"],
        input=program(devices), capture_output=True, text=True)
    if lowered.returncode != 0:
        sys.exit(f"polymesh-opt failed at {devices} devices:\n{lowered.stderr}")
    text = lowered.stdout
    functions = len(re.findall(r"^\s*llvm\.func @\w+\(.*\{$", text, re.M))
    code_ops = 0
    depth = 0
    body_lines = []
    for line in text.splitlines():
        stripped = line.strip()
        if re.match(r"llvm\.func @\w+\(.*\{$", stripped):
            depth = 1
            continue
        if depth:
            depth += stripped.count("{") - stripped.count("}")
            if depth <= 0:
                depth = 0
                continue
            if re.match(r"(%[\w#:, ]+ = )?[\w.]+", stripped) and not stripped.startswith("^"):
                code_ops += 1
                body_lines.append(re.sub(r"\d+", "#", stripped))
    table_elements = 0
    for match in re.finditer(r"!llvm\.array<([^>]*)>", text):
        sizes = [int(n) for n in re.findall(r"(\d+) x", match.group(1))]
        product = 1
        for size in sizes:
            product *= size
        table_elements += product
    return functions, code_ops, table_elements, body_lines


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--opt", default="polymesh-opt")
    parser.add_argument("--devices", type=int, nargs="+", default=[8, 1024])
    args = parser.parse_args()
    results = []
    for devices in args.devices:
        functions, ops, tables, body = measure(args.opt, devices)
        print(f"devices={devices} functions={functions} code_ops={ops} "
              f"table_elements={tables}")
        results.append((functions, ops, body))
    same = all(r[0] == results[0][0] and r[1] == results[0][1] for r in results)
    print("same code: " + ("yes" if same else "no"))
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
