#!/usr/bin/env bash
# Runs a program as P processes of one MPI job on this machine:
# polymesh-run --backend=mpi --verify under mpirun, building (and installing
# Open MPI) first when needed. Device id d runs in rank d / K (K: the
# devices per process, by default the device ids split into P equal
# blocks); every rank checks its own devices' tiles and rank 0 prints the
# lines and the total over all ranks (docs/multi-process.md).
#
#   utils/run-mpi.sh 4 examples/orbax-single-replica-restore.mlir
#   utils/run-mpi.sh 2 FILE --devices-per-process=4 --entry=f
#
# More processes than cores are allowed (--oversubscribe), and running as
# root (containers, CI). Several hosts: see docs/multi-process.md.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 2 ]; then
  echo "usage: utils/run-mpi.sh PROCESSES FILE [polymesh-run flags...]" >&2
  exit 2
fi
processes=$1
shift
utils/build.sh >/dev/null
root=()
[ "$(id -u)" -ne 0 ] || root=(--allow-run-as-root)
exec mpirun -np "$processes" --oversubscribe "${root[@]}" --bind-to none \
  build/bin/polymesh-run --backend=mpi --verify "$@"
