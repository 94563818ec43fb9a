#!/usr/bin/env bash
# The main job: Polymesh on the bundled examples of the two user reports,
# building what is missing first. For each example it prints the leaf table
# of --polymesh-print-leaves after --polymesh-propagate (every function
# result: its mesh, sharding, local tile and tile map) and the plans of
# --polymesh-plan (which box goes from which device to which, by which
# collective, and the bytes moved against the lower bound). Then
# polymesh-run --verify compiles each example for the CPU
# (--polymesh-pipeline=target=cpu: partition, lowering, JIT) and runs every
# function on as many loopback devices as its meshes name, comparing every
# device's tile of every leaf bit for bit with the unsharded reference.
# Any failure makes the exit code non-zero.
set -euo pipefail
cd "$(dirname "$0")/.."
utils/build.sh >/dev/null
examples=("$@")
[ ${#examples[@]} -gt 0 ] || examples=(examples/flax-multi-mesh-init.mlir
                                       examples/orbax-single-replica-restore.mlir)
for file in "${examples[@]}"; do
  echo "== $file: leaves and plans"
  build/bin/polymesh-opt "$file" --polymesh-propagate \
    --polymesh-print-leaves=output=- --polymesh-plan=print-plan -o /dev/null
done
for file in "${examples[@]}"; do
  echo "== $file: polymesh-run --verify on the loopback backend"
  build/bin/polymesh-run "$file" --verify
done
