#!/usr/bin/env bash
# Builds the runtime's unit tests and the plan executor's tests with
# ThreadSanitizer in build-tsan/ and runs them. Only the runtime and planner
# libraries and their tests are built there, so this stays fast on a small
# machine; any data race fails the run.
set -euo pipefail
cd "$(dirname "$0")/.."
utils/install-deps.sh
[ -f build-tsan/build.ninja ] ||
  cmake -S . -B build-tsan -G Ninja -DPOLYMESH_ENABLE_TSAN=ON
cmake --build build-tsan --target PolymeshRuntimeTests PolymeshPlanExecutorTests -j"$(nproc)"
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1 ${TSAN_OPTIONS:-}"
build-tsan/bin/PolymeshRuntimeTests
build-tsan/bin/PolymeshPlanExecutorTests
