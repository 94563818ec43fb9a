#!/usr/bin/env bash
# Builds the runtime's unit tests and the plan executor's tests (and, with
# CUDA and NCCL, the NCCL backend's) with ThreadSanitizer in build-tsan/ and
# runs them. Only the runtime and planner
# libraries and their tests are built there, so this stays fast on a small
# machine; any data race fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
utils/install-deps.sh
[ -f build-tsan/build.ninja ] ||
  cmake -S . -B build-tsan -G Ninja -DPOLYMESH_ENABLE_TSAN=ON
cmake --build build-tsan --target PolymeshRuntimeTests PolymeshPlanExecutorTests -j"$(nproc)"
# With the CUDA toolkit and NCCL: the NCCL backend and the runtime of
# CUDA-generated code on the simulated CUDA, driver and NCCL (one thread per
# device, as on GPUs); the real-GPU cases need a GPU and are left out.
nccl=0
if grep -q '^build bin/PolymeshNcclBackendTests' build-tsan/build.ninja; then
  cmake --build build-tsan --target PolymeshNcclBackendTests -j"$(nproc)"
  nccl=1
fi
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
build-tsan/bin/PolymeshRuntimeTests
build-tsan/bin/PolymeshPlanExecutorTests
if [ "$nccl" = 1 ]; then
  build-tsan/bin/PolymeshNcclBackendTests --gtest_filter='-*/Gpu'
fi
