#!/usr/bin/env bash
# Propagation benchmark: Polymesh's --polymesh-propagate against upstream
# MLIR's sharding-propagation on the same N-leaf program (see
# gen_propagation_bench.py and docs/benchmarks.md, "## Propagation").
#
#   benchmarks/propagation/run_propagation_bench.sh [N ...]
#
# For each N (default 1000 10000 100000) it generates both versions of the
# program into a temporary directory, then runs ours and upstream
# alternately, REPS times each, and prints the medians of the pass's own wall
# time as reported by --mlir-timing (the PolymeshPropagate and
# ShardingPropagation lines) and of the whole run ("Total").
#
# Environment:
#   REPS=5              repetitions per N, tool and verifier mode
#   VERIFY_MODES="1 0"  1: default run, the verifier after the pass is inside
#                       the pass's timing line; 0: --verify-each=0, the pass
#                       alone
#   BUILD_DIR=build     where polymesh-opt is built if POLYMESH_OPT is unset
#   POLYMESH_OPT        polymesh-opt to use (default $BUILD_DIR/bin/polymesh-opt,
#                       built with `cmake --build $BUILD_DIR --target
#                       polymesh-opt` if missing)
#   MLIR_OPT            upstream mlir-opt (default /usr/lib/llvm-22/bin/mlir-opt)
#   KEEP_DIR            keep the generated files and raw timings there
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
reps=${REPS:-5}
verify_modes=${VERIFY_MODES:-"1 0"}
build_dir=${BUILD_DIR:-$root/build}
polymesh_opt=${POLYMESH_OPT:-$build_dir/bin/polymesh-opt}
mlir_opt=${MLIR_OPT:-/usr/lib/llvm-22/bin/mlir-opt}
python=${PYTHON:-python3}
if [ "$#" -gt 0 ]; then ns=("$@"); else ns=(1000 10000 100000); fi

if [ ! -x "$polymesh_opt" ]; then
  echo "== building polymesh-opt in $build_dir" >&2
  if [ ! -f "$build_dir/build.ninja" ] && [ ! -f "$build_dir/Makefile" ]; then
    cmake -S "$root" -B "$build_dir" -G Ninja >&2
  fi
  cmake --build "$build_dir" --target polymesh-opt >&2
fi
[ -x "$mlir_opt" ] || { echo "error: no mlir-opt at $mlir_opt" >&2; exit 1; }

if [ -n "${KEEP_DIR:-}" ]; then
  work=$KEEP_DIR; mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/polymesh-propagation-bench.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
raw=$work/timings.tsv
: > "$raw"

upstream_pipeline='builtin.module(func.func(sharding-propagation))'

# Prints "<pass seconds> <total seconds>" from a --mlir-timing report.
extract() {
  awk -v name="$1" '
    $NF == name  { pass = $1 }
    $NF == "Total" && $2 == "(100.0%)" { total = $1 }
    END { if (pass == "" || total == "") exit 1; print pass, total }' "$2"
}

run_one() { # tool n verify rep
  local tool=$1 n=$2 verify=$3 rep=$4 log=$work/log.txt times
  if [ "$tool" = ours ]; then
    "$polymesh_opt" --polymesh-propagate --mlir-timing --verify-each="$verify" \
      --emit-bytecode -o /dev/null "$work/polymesh-$n.mlir" 2> "$log" || {
      cat "$log" >&2; echo "error: polymesh-opt failed at N=$n" >&2; exit 1; }
    times=$(extract PolymeshPropagate "$log")
  else
    "$mlir_opt" --pass-pipeline="$upstream_pipeline" --mlir-timing \
      --verify-each="$verify" --emit-bytecode -o /dev/null \
      "$work/shard-$n.mlir" 2> "$log" || {
      cat "$log" >&2; echo "error: mlir-opt failed at N=$n" >&2; exit 1; }
    times=$(extract ShardingPropagation "$log")
  fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$n" "$verify" "$tool" "$rep" \
    "${times// /$'\t'}" >> "$raw"
}

echo "== $(nproc) cores; $reps repetitions; polymesh-opt: $polymesh_opt; mlir-opt: $mlir_opt" >&2
for n in "${ns[@]}"; do
  "$python" "$here/gen_propagation_bench.py" "$n" "$work" > /dev/null
  for verify in $verify_modes; do
    echo "== N=$n verify-each=$verify" >&2
    for ((rep = 1; rep <= reps; ++rep)); do
      # Alternate which tool goes first so that neither always follows the
      # other's cache and page-cache state.
      if ((rep % 2)); then order="ours upstream"; else order="upstream ours"; fi
      for tool in $order; do run_one "$tool" "$n" "$verify" "$rep"; done
    done
  done
  rm -f "$work/polymesh-$n.mlir" "$work/shard-$n.mlir"
done

"$python" - "$raw" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    n, verify, tool, _, pass_s, total_s = line.split()
    rows.setdefault((int(n), verify, tool), []).append(
        (float(pass_s), float(total_s)))
def med(key, i):
    return statistics.median(v[i] for v in rows[key])
def low(key):
    return min(v[0] for v in rows[key])
for verify in sorted({k[1] for k in rows}, reverse=True):
    title = ("default run (pass + verifier after it)" if verify == "1"
             else "--verify-each=0 (pass alone)")
    print("\n%s, medians of %d runs (min: fastest run, the least disturbed "
          "by other load)" % (title, len(next(
              v for k, v in rows.items() if k[1] == verify))))
    print("| N | ours (s) | upstream (s) | ours/upstream | ours per leaf (µs) "
          "| ours min (s) | upstream min (s) | ours/upstream (min) "
          "| ours total (s) | upstream total (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sorted({k[0] for k in rows if k[1] == verify}):
        o, u = (n, verify, "ours"), (n, verify, "upstream")
        print("| %d | %.4f | %.4f | %.2f | %.1f | %.4f | %.4f | %.2f "
              "| %.4f | %.4f |" % (
            n, med(o, 0), med(u, 0), med(o, 0) / med(u, 0),
            med(o, 0) / n * 1e6, low(o), low(u), low(o) / low(u),
            med(o, 1), med(u, 1)))
PY
