#!/usr/bin/env python3
"""Writes the pod-scale program of docs/benchmarks.md ("Scale"): four
reshards on a 3D-parallel mesh ["dp"=D, "fsdp"=16, "tp"=16] of 256*D devices.

  gen_pod_program.py DEVICES [--only=NAME] > pod.mlir
  gen_pod_program.py DEVICES --data-parallel > sums.mlir
  gen_pod_program.py DEVICES --transpose > transpose.mlir

With --data-parallel, two reductions over a flat mesh ["x"=DEVICES]
instead, the gradient sums of data parallelism: each device holds partial
sums of a DEVICES x 64 f32 tensor,
  @grad_sum       unreduced={"x"} -> replicated      (one all-reduce)
  @grad_scatter   unreduced={"x"} -> rows over "x"   (one reduce-scatter)

With --transpose, the all-to-alls of sequence (Ulysses) parallelism over
a flat mesh ["x"=DEVICES]: activations of 4*DEVICES x 4*DEVICES f32 (16
elements a device per peer: the chunks stay small at 65,536 devices)
  @seq_to_heads   rows over "x" -> columns over "x"
  @heads_to_seq   columns over "x" -> rows over "x"

With --permuted-transpose, the same all-to-all over the pod mesh
["dp"=DEVICES/256, "fsdp"=16, "tp"=16] with each dimension's axes in
another order (chunks out of id order: the schedule loops over the
digits of the peers' ranks), 4*DEVICES x 4*DEVICES f32:
  @permuted       [{"tp","fsdp","dp"},{}] -> [{},{"dp","fsdp","tp"}]

The four functions (each one reshard, so that a run can time them alone):
  @fsdp_to_tp     [{"dp","fsdp"},{"tp"}] -> [{"dp"},{"fsdp","tp"}]
  @gather_fsdp    [{"dp","fsdp"},{"tp"}] -> [{"dp"},{"tp"}]  (all-gather of fsdp)
  @reduce_dp      [{"fsdp"},{"tp"}], unreduced={"dp"} -> [{"fsdp"},{"tp"}]
  @stage_handoff  the first half of the pod -> the second half, same sharding
"""
import argparse
import sys

FUNCTIONS = ("fsdp_to_tp", "gather_fsdp", "reduce_dp", "stage_handoff")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("devices", type=int,
                        help="256 times a power of two")
    parser.add_argument("--only", choices=FUNCTIONS)
    parser.add_argument("--data-parallel", action="store_true")
    parser.add_argument("--transpose", action="store_true")
    parser.add_argument("--permuted-transpose", action="store_true")
    args = parser.parse_args()
    n = args.devices
    if args.data_parallel:
        return data_parallel(n)
    if args.transpose:
        return transpose(n)
    dp = n // 256
    if n % 256 or dp & (dp - 1):
        sys.exit("error: DEVICES must be 256 times a power of two")
    if args.permuted_transpose:
        return permuted_transpose(n, dp)
    half = n // 2
    # Each stage is half the pod: half of "dp", or of "fsdp" when dp is 1.
    stage_axes = (f'["dp"={dp // 2}, "fsdp"=16, "tp"=16]' if dp > 1 else
                  '["dp"=1, "fsdp"=8, "tp"=16]')
    # dim 0 divides by dp*fsdp, dim 1 by fsdp*tp; 64 KiB rows keep every tile
    # a few KiB at 65,536 devices.
    rows = 64 * dp * 16
    cols = 16 * 16 * 8
    t = f"tensor<{rows}x{cols}xf32>"
    out = sys.stdout.write
    out(f'polymesh.mesh @pod = <["dp"={dp}, "fsdp"=16, "tp"=16]>\n')
    out(f'polymesh.mesh @stage0 = <{stage_axes}, device_ids=[{", ".join(map(str, range(half)))}]>\n')
    out(f'polymesh.mesh @stage1 = <{stage_axes}, device_ids=[{", ".join(map(str, range(half, n)))}]>\n')

    def func(name, src, dst):
        if args.only and args.only != name:
            return
        out(f"\nfunc.func @{name}(%x: {t} {{polymesh.sharding = "
            f"#polymesh.sharding<{src}>}}) -> {t} {{\n"
            f"  %0 = polymesh.reshard %x <{dst}> : {t}\n"
            f"  return %0 : {t}\n}}\n")

    func("fsdp_to_tp", '@pod, [{"dp", "fsdp"}, {"tp"}]',
         '@pod, [{"dp"}, {"fsdp", "tp"}]')
    func("gather_fsdp", '@pod, [{"dp", "fsdp"}, {"tp"}]',
         '@pod, [{"dp"}, {"tp"}]')
    func("reduce_dp", '@pod, [{"fsdp"}, {"tp"}], unreduced={"dp"}',
         '@pod, [{"fsdp"}, {"tp"}]')
    func("stage_handoff", '@stage0, [{"dp", "fsdp"}, {"tp"}]',
         '@stage1, [{"dp", "fsdp"}, {"tp"}]')


def data_parallel(n):
    t = f"tensor<{n}x64xf32>"
    out = sys.stdout.write
    out(f'polymesh.mesh @data = <["x"={n}]>\n')
    for name, dst in (("grad_sum", "[{}, {}]"), ("grad_scatter", '[{"x"}, {}]')):
        out(f"\nfunc.func @{name}(%g: {t} {{polymesh.sharding = "
            f'#polymesh.sharding<@data, [{{}}, {{}}], unreduced={{"x"}}>}}) -> {t} {{\n'
            f"  %0 = polymesh.reshard %g <@data, {dst}> : {t}\n"
            f"  return %0 : {t}\n}}\n")



def transpose(n):
    t = f"tensor<{4 * n}x{4 * n}xf32>"
    out = sys.stdout.write
    out(f'polymesh.mesh @seq = <["x"={n}]>\n')
    for name, src, dst in (("seq_to_heads", '[{"x"}, {}]', '[{}, {"x"}]'),
                           ("heads_to_seq", '[{}, {"x"}]', '[{"x"}, {}]')):
        out(f"\nfunc.func @{name}(%a: {t} {{polymesh.sharding = "
            f"#polymesh.sharding<@seq, {src}>}}) -> {t} {{\n"
            f"  %0 = polymesh.reshard %a <@seq, {dst}> : {t}\n"
            f"  return %0 : {t}\n}}\n")


def permuted_transpose(n, dp):
    t = f"tensor<{4 * n}x{4 * n}xf32>"
    out = sys.stdout.write
    out(f'polymesh.mesh @pod = <["dp"={dp}, "fsdp"=16, "tp"=16]>\n')
    out(f"\nfunc.func @permuted(%a: {t} {{polymesh.sharding = "
        f'#polymesh.sharding<@pod, [{{"tp", "fsdp", "dp"}}, {{}}]>}}) -> {t} {{\n'
        f'  %0 = polymesh.reshard %a <@pod, [{{}}, {{"dp", "fsdp", "tp"}}]> : {t}\n'
        f"  return %0 : {t}\n}}\n")


if __name__ == "__main__":
    main()
