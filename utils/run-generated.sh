#!/usr/bin/env bash
# Runs a batch of generated programs (utils/gen-programs.py) through
# polymesh-run --verify (loopback, executor, simulated NCCL) and
# polymesh-opt --polymesh-pipeline=target=cpu, shrinking every distinct
# failure into a lit test under build/generated/<seed>/shrunk/.
#
#   utils/run-generated.sh                 # 1000 programs, random seed
#   utils/run-generated.sh 5000            # 5000 programs, random seed
#   utils/run-generated.sh 1000 42         # reproducible: seed 42
#   GEN_ARGS=--avoid-known utils/run-generated.sh   # leave out known bugs
#
# Two jobs by default (GEN_JOBS); exit code 1 when any program failed.
set -euo pipefail
cd "$(dirname "$0")/.."
count=${1:-1000}
seed=${2:-$(python3 -c 'import random; print(random.SystemRandom().randrange(1 << 31))')}
out=build/generated/$seed
[ -x build/bin/polymesh-run ] || utils/build.sh
echo "gen-programs: seed $seed, $count programs, output in $out"
# shellcheck disable=SC2086
exec python3 utils/gen-programs.py --seed "$seed" --count "$count" --jobs "${GEN_JOBS:-2}" \
  --out "$out" --shrink ${GEN_ARGS:-}
