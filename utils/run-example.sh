#!/usr/bin/env bash
# The main job: Polymesh on the bundled examples of the two user reports,
# building what is missing first.
set -euo pipefail
cd "$(dirname "$0")/.."
utils/build.sh >/dev/null
for example in "${@:-examples/flax-multi-mesh-init.mlir examples/orbax-single-replica-restore.mlir}"; do
  for file in $example; do
    echo "== $file"
    build/bin/polymesh-opt "$file"
  done
done
