#!/usr/bin/env bash
# The main job: Polymesh on the bundled examples of the two user reports,
# building what is missing first. For each example it runs
# --polymesh-propagate, prints the leaf table of --polymesh-print-leaves
# (every function result: its mesh, sharding, local tile and tile map), then
# plans every reshard with --polymesh-plan and prints the plans (which box
# goes from which device to which, by which collective, and the bytes moved
# against the lower bound). The IR itself is dropped. Last, it runs the Orbax
# restore's broadcast for real on 32 loopback devices and compares every
# device's tile with the unsharded reference (polymesh-run --verify). Any
# failure makes the exit code non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
utils/build.sh >/dev/null
for example in "${@:-examples/flax-multi-mesh-init.mlir examples/orbax-single-replica-restore.mlir}"; do
  for file in $example; do
    echo "== $file"
    build/bin/polymesh-opt "$file" --polymesh-propagate \
      --polymesh-print-leaves=output=- --polymesh-plan=print-plan -o /dev/null
  done
done
echo "== polymesh-run --verify: the Orbax restore on the loopback backend"
build/bin/polymesh-run examples/orbax-single-replica-restore.mlir \
  --entry=restore --verify
