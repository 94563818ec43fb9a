#!/usr/bin/env bash
# Builds the libFuzzer targets in build-fuzz/ (clang 22, ASan + UBSan, every
# library instrumented) and runs each for FUZZ_SECONDS (default 60):
#   polymesh-fuzz-parser    bytes -> parse + verify + print round trip
#   polymesh-fuzz-pipeline  bytes -> parse -> --polymesh-propagate -> --polymesh-plan
#   polymesh-fuzz-planner   bytes -> a reshard -> planReshard -> host simulation
# The parser and pipeline corpora start from every .mlir file of test/ and
# examples/, split at `// -----` as polymesh-opt -split-input-file does.
# Corpora live in build-fuzz/corpus/ and grow from run to run; crash, timeout
# and out-of-memory inputs land in build-fuzz/artifacts/<target>/, and any of
# them makes the exit code non-zero. Prints the executions of each target.
#
# Environment: FUZZ_SECONDS (per target), FUZZ_TARGETS (a subset, by short
# name: "parser pipeline planner"), FUZZ_JOBS (build parallelism).
set -euo pipefail
cd "$(dirname "$0")/.."
utils/install-fuzz-deps.sh

seconds=${FUZZ_SECONDS:-60}
targets=${FUZZ_TARGETS:-parser pipeline planner}
build=build-fuzz

[ -f $build/build.ninja ] ||
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_C_COMPILER=clang-22 -DCMAKE_CXX_COMPILER=clang++-22 \
    -DPOLYMESH_ENABLE_FUZZ=ON
# Build only the targets that run (the planner's needs no MLIR).
cmake --build $build -j"${FUZZ_JOBS:-$(nproc)}" \
  --target $(for target in $targets; do echo polymesh-fuzz-$target; done)

# Seeds: every test and example, whole and split into its `// -----` chunks
# (most chunks of the error tests parse only on their own).
seeds=$build/corpus/seeds
rm -rf $seeds && mkdir -p $seeds
python3 - "$seeds" test examples <<'PY'
import hashlib, os, re, sys
out = sys.argv[1]
for top in sys.argv[2:]:
    for root, _, files in os.walk(top):
        for name in sorted(files):
            if not name.endswith(".mlir"):
                continue
            data = open(os.path.join(root, name), "rb").read()
            for chunk in [data] + re.split(rb"(?m)^// -----.*\n", data):
                if chunk.strip():
                    key = hashlib.sha1(chunk).hexdigest()[:16]
                    open(os.path.join(out, key + ".mlir"), "wb").write(chunk)
PY

failed=0
summary=()
for target in $targets; do
  corpus=$build/corpus/$target
  artifacts=$build/artifacts/$target
  rm -rf "$artifacts"
  mkdir -p "$corpus" "$artifacts"
  dirs=("$corpus")
  extra=()
  case $target in
  parser | pipeline)
    dirs+=("$seeds")
    extra+=(-dict=fuzz/mlir.dict)
    ;;
  esac
  log=$build/fuzz-$target.log
  echo "== polymesh-fuzz-$target: ${seconds}s (log: $log)"
  # New inputs go to the first directory (the target's own corpus); the
  # seeds are read only. ASan reports leaks, and aborts like UBSan.
  status=0
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:${ASAN_OPTIONS:-}" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:${UBSAN_OPTIONS:-}" \
    $build/bin/polymesh-fuzz-$target "${dirs[@]}" "${extra[@]}" \
    -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$artifacts/" >"$log" 2>&1 ||
    status=$?
  # libFuzzer's last line on a normal exit; after a crash, its final stats.
  runs=$(sed -n 's/^Done \([0-9]*\) runs in \([0-9]*\) second.*/\1 runs in \2 s/p' "$log" | tail -1)
  [ -n "$runs" ] || runs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\)/\1 runs/p' "$log" | tail -1)
  found=$(find "$artifacts" -type f | wc -l)
  if [ "$status" -ne 0 ] || [ "$found" -ne 0 ]; then
    failed=1
    tail -n 60 "$log"
    summary+=("polymesh-fuzz-$target: FAILED after ${runs:-? runs} (exit $status, $found artifact(s) in $artifacts)")
  else
    summary+=("polymesh-fuzz-$target: ${runs:-? runs}, corpus $(ls "$corpus" | wc -l) inputs")
  fi
done
printf '%s\n' "${summary[@]}"
exit $failed
