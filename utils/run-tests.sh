#!/usr/bin/env bash
# Runs every test, building and installing what is missing: lit and every
# GoogleTest binary through ctest (check-polymesh), then the JAX bridge's
# pytest suite against JAX and Flax from PyPI (utils/run-python-tests.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
utils/build.sh
cmake --build build --target check-polymesh
utils/run-python-tests.sh -q
