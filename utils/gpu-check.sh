#!/usr/bin/env bash
# Everything Polymesh checks on a GPU machine, in one command, for a short
# GPU lease: builds the GPU targets (CUDA and NCCL on), then runs
# nvidia-smi -L, the GPU ctest entries, the seeds on the NCCL backend
# (polymesh-run --backend=nccl --verify) and polymesh-gpu-bench, collecting
# every log and the bench's JSON lines in one directory.
#
#   utils/gpu-check.sh                      build in build-gpu/, out in
#                                           gpu-check-out/
#   BUILD=build OUT=/tmp/out utils/gpu-check.sh
#
# Variables: BUILD (build dir; configured with -DPOLYMESH_ENABLE_CUDA=ON,
# default build-gpu), OUT (output dir, default gpu-check-out), JOBS (build
# jobs, default nproc), BENCH_ARGS (extra polymesh-gpu-bench options, e.g.
# "--sizes=64M"), CTEST_REGEX (default 'Nccl|nccl|Gpu|gpu|Cuda'),
# BUILD_TIMEOUT / STAGE_TIMEOUT / DEPS_TIMEOUT (seconds, default 1200 /
# 300 / 120).
#
# Each stage is timed and logged to $OUT/<stage>.log; a failed stage does
# not stop the next. Exit code 77 of a tool is "skipped" (no GPU, too few
# GPUs), not a failure. The summary ($OUT/summary.txt) lists every stage;
# the exit code is 1 when any stage failed or timed out, else 0.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
ROOT=$(pwd)
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-gpu-check-out}
JOBS=${JOBS:-$(nproc)}
BUILD_TIMEOUT=${BUILD_TIMEOUT:-1200}
STAGE_TIMEOUT=${STAGE_TIMEOUT:-300}
BENCH_ARGS=${BENCH_ARGS:-}
CTEST_REGEX=${CTEST_REGEX:-Nccl|nccl|Gpu|gpu|Cuda}
began=$(date +%s)
mkdir -p "$OUT" || exit 1
OUT=$(cd "$OUT" && pwd)
case "$BUILD" in /*) ;; *) BUILD="$ROOT/$BUILD" ;; esac
BIN="$BUILD/bin"

names=()
states=()
seconds=()
failures=0

# record NAME STATE SECONDS
record() {
  names+=("$1")
  states+=("$2")
  seconds+=("$3")
  case "$2" in
  FAIL* | TIMEOUT*) failures=$((failures + 1)) ;;
  esac
}

# stage NAME TIMEOUT COMMAND...: runs COMMAND with its output in
# $OUT/NAME.log (and on the terminal), records pass / skipped (77) / FAIL /
# TIMEOUT and the time taken.
stage() {
  local name=$1 limit=$2
  shift 2
  local log="$OUT/$name.log" start end rc state
  echo "== $name: $*"
  start=$(date +%s)
  if declare -F "$1" >/dev/null; then
    # A function of this script: timeout runs it in a child bash (exported).
    timeout --kill-after=10 "$limit" bash -c '"$@"' gpu-check "$@" \
      </dev/null >"$log" 2>&1
  else
    # No stdin: nothing may wait for a password or a prompt.
    timeout --kill-after=10 "$limit" "$@" </dev/null >"$log" 2>&1
  fi
  rc=$?
  end=$(date +%s)
  case $rc in
  0) state=pass ;;
  77) state=skipped ;;
  124 | 137) state="TIMEOUT after ${limit}s" ;;
  *) state="FAIL (exit code $rc)" ;;
  esac
  # The tail is enough to see why; the whole output is in the log.
  tail -n 15 "$log" | sed 's/^/   | /'
  echo "   -> $state ($((end - start)) s)"
  record "$name" "$state" $((end - start))
  return "$rc"
}

# needs NAME FILE...: records NAME as not run when a binary is missing (the
# build stage has already failed, which is what counts).
needs() {
  local name=$1 file
  shift
  for file in "$@"; do
    if [ ! -x "$file" ]; then
      echo "== $name: not run: $file was not built"
      record "$name" "not run (no $(basename "$file"))" 0
      return 1
    fi
  done
}

# Is there an NVIDIA GPU? Decides whether 77 from a GPU stage is expected.
gpu_present=0
if [ -e /dev/nvidiactl ] || ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  gpu_present=1
fi

{
  echo "date: $(date -u)"
  echo "commit: $(git -C "$ROOT" rev-parse HEAD 2>/dev/null || echo unknown)"
  echo "host: $(uname -a)"
  echo "gpu device files: $gpu_present"
  echo "BUILD=$BUILD JOBS=$JOBS BENCH_ARGS=$BENCH_ARGS"
} >"$OUT/environment.txt"

# The stages' own functions run in a child bash under timeout.
export ROOT BUILD STAGE_TIMEOUT CTEST_REGEX gpu_present

# 1. Dependencies (Debian packages; idempotent, quick when present). Short
# timeout: a machine without network would otherwise spend the lease in
# apt-get.
stage install-deps "${DEPS_TIMEOUT:-120}" "$ROOT/utils/install-deps.sh"

# 2. nvidia-smi: 77 when there is no GPU or no nvidia-smi at all.
nvidia_smi() {
  if ! command -v nvidia-smi >/dev/null; then
    echo "skipped: nvidia-smi is not installed (no NVIDIA driver)"
    return 77
  fi
  nvidia-smi -L
  local rc=$?
  if [ $rc -ne 0 ] && [ $gpu_present -eq 0 ]; then
    echo "skipped: no NVIDIA device files (/dev/nvidia*)"
    return 77
  fi
  [ $rc -ne 0 ] || nvidia-smi
  return $rc
}
export -f nvidia_smi
stage nvidia-smi 60 nvidia_smi

# 3. Configure (CUDA and NCCL required) and build the GPU targets.
configure() {
  local generator=()
  [ -f "$BUILD/CMakeCache.txt" ] || generator=(-G Ninja)
  cmake -S "$ROOT" -B "$BUILD" "${generator[@]}" -DPOLYMESH_ENABLE_CUDA=ON
}
export -f configure
build_targets=(polymesh-run polymesh-opt polymesh-translate
               polymesh-nccl-check polymesh-gpu-bench PolymeshNcclBackendTests)
if stage configure "$STAGE_TIMEOUT" configure; then
  stage build "$BUILD_TIMEOUT" cmake --build "$BUILD" -j"$JOBS" \
    --target "${build_targets[@]}"
else
  record build "not run (configure failed)" 0
fi

# 4. The GPU ctest entries. ctest counts 77 as skipped and still exits 0:
# the stage says "skipped" when entries were skipped on a machine without a
# GPU, and flags skips on a machine with one.
ctest_gpu() {
  local log rc skipped
  log=$(mktemp)
  (cd "$BUILD" && ctest -R "$CTEST_REGEX" --output-on-failure \
    --timeout "$STAGE_TIMEOUT") 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  skipped=$(grep -c -- '\*\*\*Skipped' "$log")
  rm -f "$log"
  [ "$rc" -eq 0 ] || return "$rc"
  if [ "$skipped" -gt 0 ]; then
    echo "gpu-check: $skipped ctest entries skipped"
    [ $gpu_present -eq 1 ] || return 77
    echo "gpu-check: WARNING: entries skipped although a GPU is present"
  fi
  return 0
}
export -f ctest_gpu
if needs ctest-gpu "$BIN/polymesh-nccl-check" "$BIN/polymesh-gpu-bench"; then
  stage ctest-gpu "$STAGE_TIMEOUT" ctest_gpu
fi

# 5. The seeds on GPUs through the NCCL backend, verified against the
# unsharded reference (utils/run-example.sh runs them on loopback devices).
# A function needs one GPU per device, so on a machine with fewer it is
# skipped; the one-device program runs the generated kernels on one GPU.
if needs examples "$BIN/polymesh-run"; then
  for example in "$ROOT"/test/Run/backend-nccl-one-gpu.mlir \
    "$ROOT"/examples/flax-multi-mesh-init.mlir \
    "$ROOT"/examples/orbax-single-replica-restore.mlir; do
    stage "nccl-$(basename "$example" .mlir)" "$STAGE_TIMEOUT" \
      "$BIN/polymesh-run" "$example" --backend=nccl --verify
  done
fi

# 6. The bench: table in its log, JSON lines in gpu-bench.json.
if needs gpu-bench "$BIN/polymesh-gpu-bench"; then
  # shellcheck disable=SC2086 # BENCH_ARGS is a list of options.
  stage gpu-bench "$STAGE_TIMEOUT" "$BIN/polymesh-gpu-bench" \
    --json="$OUT/gpu-bench.json" $BENCH_ARGS
fi

# Summary.
{
  echo "gpu-check summary ($(date -u), $(($(date +%s) - began)) s in all)," \
    "logs in $OUT"
  printf '%-40s %8s  %s\n' stage seconds result
  for i in "${!names[@]}"; do
    printf '%-40s %8s  %s\n' "${names[$i]}" "${seconds[$i]}" "${states[$i]}"
  done
  if [ "$failures" -eq 0 ]; then
    echo "gpu-check: nothing failed"
  else
    echo "gpu-check: $failures stage(s) failed"
  fi
} | tee "$OUT/summary.txt"
[ "$failures" -eq 0 ]
