#!/usr/bin/env bash
# Installs missing packages, then configures and builds Polymesh in build/.
set -euo pipefail
cd "$(dirname "$0")/.."
utils/install-deps.sh
[ -f build/build.ninja ] || cmake -S . -B build -G Ninja
cmake --build build -j"$(nproc)"
