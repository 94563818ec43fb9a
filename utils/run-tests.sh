#!/usr/bin/env bash
# Runs every test (lit + GoogleTest through ctest), building what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
utils/build.sh
cmake --build build --target check-polymesh
