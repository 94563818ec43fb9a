#!/usr/bin/env bash
# Scale benchmark (docs/benchmarks.md, "Scale"): the four reshards of
# gen_pod_program.py on a pod mesh ["dp"=N/256, "fsdp"=16, "tp"=16], at each
# device count N given (default 256 1024 4096 16384 65536).
#
#   benchmarks/scale/run_scale_bench.sh [N ...]
#
# For each N it prints the medians over REPS runs of:
#   plan ms/reshard  --polymesh-plan's own time (--mlir-timing) over the 4
#                    reshards, divided by 4
#   cpu s, cpu MiB, cpu out MB
#                    --polymesh-pipeline=target=cpu: wall time, peak resident
#                    memory, size of the output (bytecode)
#   cuda s, cuda MiB, cuda out MB  the same for target=cuda
# A run that exceeds TIMEOUT seconds or LIMIT_MIB of memory is reported as
# such ("timeout", "memory"), as is a reshard refused because its plan would
# exceed the transfer budget of docs/limits.md ("refused"); the larger N are
# then skipped for that measure.
#
# With PROCESS_DEVICES=K the pipeline runs as one process of a
# multi-process job would: partitioned and lowered for the devices 0..K-1
# only (--polymesh-pipeline's devices=...; docs/multi-process.md).
#
# With BATCH_MIN_DEVICES=N, --polymesh-plan and the pipelines get
# batch-min-devices=N (0: no batched plans, each reshard planned whole, as
# before they existed; docs/planner.md, "Batched plans").
#
# With REDUCTION_PIECES=0, reductions are written out as every transfer
# instead of their pieces (reduction-pieces=false; docs/planner.md); with
# EXCHANGE_TILES=0, exchanges of whole tiles likewise (exchange-tiles=false).
#
# With PROGRAM=data-parallel, the program is gen_pod_program.py's
# --data-parallel one instead: an all-reduce and a reduce-scatter over a
# flat mesh of N devices (any N); planning time is per reshard all the same.
# With PROGRAM=transpose, its --transpose one: the all-to-alls of sequence
# parallelism over a flat mesh of N devices, rows to columns and back;
# with PROGRAM=permuted-transpose, one such all-to-all over the pod mesh
# with each dimension's axes in another order (--permuted-transpose).
#
# Environment: REPS=5, TIMEOUT=300, LIMIT_MIB=16384, BUILD_DIR=build,
# POLYMESH_OPT, KEEP_DIR (keep the programs and outputs there),
# PROCESS_DEVICES, BATCH_MIN_DEVICES, REDUCTION_PIECES, EXCHANGE_TILES,
# PROGRAM.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../.." && pwd)
reps=${REPS:-5}
timeout_s=${TIMEOUT:-300}
limit_mib=${LIMIT_MIB:-16384}
build_dir=${BUILD_DIR:-$root/build}
polymesh_opt=${POLYMESH_OPT:-$build_dir/bin/polymesh-opt}
python=${PYTHON:-python3}
if [ "$#" -gt 0 ]; then ns=("$@"); else ns=(256 1024 4096 16384 65536); fi
own=""
if [ -n "${PROCESS_DEVICES:-}" ]; then
  own=" devices=$(seq -s, 0 $((PROCESS_DEVICES - 1)))"
fi
plan_pass=--polymesh-plan
plan_options=""
if [ -n "${BATCH_MIN_DEVICES:-}" ]; then
  plan_options="batch-min-devices=$BATCH_MIN_DEVICES"
  own="$own batch-min-devices=$BATCH_MIN_DEVICES"
fi
if [ "${EXCHANGE_TILES:-1}" = 0 ]; then
  plan_options="${plan_options:+$plan_options }exchange-tiles=false"
  own="$own exchange-tiles=false"
fi
if [ "${REDUCTION_PIECES:-1}" = 0 ]; then
  plan_options="${plan_options:+$plan_options }reduction-pieces=false"
  own="$own reduction-pieces=false"
fi
if [ -n "$plan_options" ]; then
  plan_pass="--polymesh-plan=$plan_options"
fi

if [ ! -x "$polymesh_opt" ]; then
  echo "== building polymesh-opt in $build_dir" >&2
  [ -f "$build_dir/build.ninja" ] || cmake -S "$root" -B "$build_dir" -G Ninja >&2
  cmake --build "$build_dir" --target polymesh-opt >&2
fi
if [ -n "${KEEP_DIR:-}" ]; then
  work=$KEEP_DIR; mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/polymesh-scale-bench.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi

median() { sort -g | awk '{ v[NR] = $1 } END {
  if (NR == 0) { print "-"; exit }
  print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# Why a run of polymesh-opt failed, from its exit code and stderr file:
# "timeout", "refused" (a plan over the budget of docs/limits.md, whose
# diagnostic mentions "memory limit": tested first), "memory" or "error".
failure() { # rc stderr-file
  if [ "$1" -eq 124 ]; then echo timeout
  elif grep -q "cannot be planned" "$2"; then echo refused
  elif grep -q -i "alloc\|memory" "$2"; then echo memory
  else echo error; sed -n 1,5p "$2" >&2; fi
}

# Runs polymesh-opt under the time and memory limits; prints
# "<wall s> <peak MiB> <output bytes>" or why it failed (failure above).
measure() { # input output args...
  local input=$1 output=$2; shift 2
  local stats=$work/time.txt rc=0
  ( ulimit -v $((limit_mib * 1024))
    exec timeout "$timeout_s" /usr/bin/time -f '%e %M' -o "$stats" \
      "$polymesh_opt" "$@" --emit-bytecode -o "$output" "$input" \
      2> "$work/stderr.txt" ) || rc=$?
  if [ "$rc" -ne 0 ]; then failure "$rc" "$work/stderr.txt"; return; fi
  read -r wall kib < <(tail -1 "$stats")
  echo "$wall $((kib / 1024)) $(stat -c %s "$output")"
}

printf '%-8s %14s | %8s %9s %10s | %8s %9s %10s\n' devices "plan ms/reshard" \
  "cpu s" "cpu MiB" "cpu out MB" "cuda s" "cuda MiB" "cuda out MB"
declare -A stopped
for n in "${ns[@]}"; do
  program=$work/pod-$n.mlir
  if [ "${PROGRAM:-pod}" = data-parallel ]; then
    "$python" "$here/gen_pod_program.py" "$n" --data-parallel > "$program"
  elif [ "${PROGRAM:-pod}" = transpose ]; then
    "$python" "$here/gen_pod_program.py" "$n" --transpose > "$program"
  elif [ "${PROGRAM:-pod}" = permuted-transpose ]; then
    "$python" "$here/gen_pod_program.py" "$n" --permuted-transpose > "$program"
  else
    "$python" "$here/gen_pod_program.py" "$n" > "$program"
  fi
  reshards=$(grep -c "polymesh.reshard" "$program")
  row=()
  # Planning: --polymesh-plan's own time, from --mlir-timing.
  if [ -z "${stopped[plan]:-}" ]; then
    plans=()
    for _ in $(seq "$reps"); do
      rc=0
      timeout "$timeout_s" "$polymesh_opt" "$plan_pass" --mlir-timing \
        --emit-bytecode -o /dev/null "$program" 2> "$work/timing.txt" || rc=$?
      if [ "$rc" -ne 0 ]; then
        stopped[plan]=$(failure "$rc" "$work/timing.txt"); break
      fi
      plans+=("$(awk -v k="$reshards" \
        '$NF == "PolymeshPlan" { print $1 * 1000 / k }' "$work/timing.txt")")
    done
    if [ -n "${stopped[plan]:-}" ]; then row+=("${stopped[plan]}")
    else row+=("$(printf '%s\n' "${plans[@]}" | median)"); fi
  else
    row+=("skipped")
  fi
  for target in cpu cuda; do
    if [ -n "${stopped[$target]:-}" ]; then row+=(skipped - -); continue; fi
    walls=(); mibs=(); sizes=()
    for _ in $(seq "$reps"); do
      result=$(measure "$program" "$work/out-$target-$n.mlirbc" \
        "--polymesh-pipeline=target=$target$own")
      case $result in
        timeout|memory|error|refused) stopped[$target]=$result; break ;;
      esac
      read -r wall mib size <<< "$result"
      walls+=("$wall"); mibs+=("$mib"); sizes+=("$size")
    done
    if [ -n "${stopped[$target]:-}" ]; then
      row+=("${stopped[$target]}" - -)
    else
      row+=("$(printf '%s\n' "${walls[@]}" | median)"
            "$(printf '%s\n' "${mibs[@]}" | median)"
            "$(printf '%s\n' "${sizes[@]}" | median | awk '{ printf "%.2f", $1 / 1e6 }')")
    fi
  done
  printf '%-8s %14s | %8s %9s %10s | %8s %9s %10s\n' "$n" "${row[@]}"
done
