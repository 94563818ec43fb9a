#!/usr/bin/env bash
# Builds the tools (polymesh-opt, polymesh-run, polymesh-translate) and every
# GoogleTest binary
# with AddressSanitizer + UndefinedBehaviorSanitizer in build-asan/
# (RelWithDebInfo, so reports have line numbers) and runs ctest there: the
# lit suite against the instrumented tools (lit reads their paths from
# build-asan/test/lit.site.cfg.py), and every GoogleTest binary. Any
# sanitizer report, leaks included, fails the run. Debian's LLVM/MLIR
# libraries are not instrumented: errors inside them go unseen, but Polymesh's
# code and the LLVM/MLIR templates it instantiates are checked.
set -euo pipefail
cd "$(dirname "$0")/.."
utils/install-deps.sh
build=build-asan
[ -f $build/build.ninja ] ||
  cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DPOLYMESH_ENABLE_ASAN=ON

# Exactly what ctest runs: the lit suite's tools, and every GoogleTest
# binary and tool ctest runs (a test is named after its target, or after its
# target and a variant: PolymeshNcclBackendTests.Gpu). Not the benchmarks.
tests=$(ctest --test-dir $build -N | sed -n 's/^ *Test *#[0-9]*: //p' |
  sed 's/\..*//' | sort -u | grep -vx polymesh-lit)
# shellcheck disable=SC2086 # one target per word
cmake --build $build -j"${ASAN_JOBS:-$(nproc)}" \
  --target polymesh-opt polymesh-run polymesh-translate $tests

# lit passes these variables on to the tools it runs. allow_user_poisoning=0:
# LLVM's BumpPtrAllocator poisons its slabs in code built with ASan (ours,
# from LLVM's headers) but not in Debian's libMLIR.so, which allocates from
# the same slabs; every tool would stop at a false use-after-poison.
# use_sigaltstack=0: the tools run main on a thread of their own
# (LargeStack.h), on which LLVM's signal handling installs an alternate
# signal stack from malloc; ASan's thread teardown would unmap it as if it
# were its own and abort ("unable to unmap", seen with Debian's LLVM
# 22.1.8). ASan then reports stack overflows less precisely, nothing else.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:allow_user_poisoning=0:use_sigaltstack=0:${ASAN_OPTIONS:-}"
# abort_on_error for UBSan too: g++'s separate UBSan runtime otherwise exits
# with 1, which `not` tests and the robustness test take for an ordinary
# diagnostic ("runtime error: ...").
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1:${UBSAN_OPTIONS:-}"
command -v llvm-symbolizer >/dev/null ||
  export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-22/bin/llvm-symbolizer
ctest --test-dir $build --output-on-failure
