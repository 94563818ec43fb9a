#!/usr/bin/env bash
# Installs the toolchain of the fuzz build (utils/run-fuzz.sh) from Debian's
# packages: clang 22, whose libFuzzer and sanitizer runtimes come in
# libclang-rt-22-dev, and lld. It matches the LLVM/MLIR 22 that Polymesh
# builds against. Idempotent: does nothing when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."
utils/install-deps.sh clang-22 libclang-rt-22-dev lld-22
