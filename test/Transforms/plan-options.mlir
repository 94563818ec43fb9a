// The options of --polymesh-plan: stats-file, print-plan, comm-matrix and
// memory-limit-bytes, and the planned IR parsing and verifying again.

// Stats to stdout, one JSON object per reshard in program order, the no-op
// included; then the same to a file, which must hold valid JSON lines.
// RUN: polymesh-opt %s --polymesh-plan=stats-file=- -o /dev/null | FileCheck %s --check-prefix=STATS
// RUN: polymesh-opt %s --polymesh-plan=stats-file=%t.json -o /dev/null
// RUN: FileCheck %s --check-prefix=STATS --input-file=%t.json
// RUN: count 4 < %t.json
// RUN: %python -c "import json, sys; [json.loads(line) for line in open(sys.argv[1])]" %t.json

// A readable plan of every reshard.
// RUN: polymesh-opt %s --polymesh-plan=print-plan -o /dev/null | FileCheck %s --check-prefix=PLAN

// The device x device bytes matrix over all reshards, as SVG.
// RUN: polymesh-opt %s --polymesh-plan=comm-matrix=%t.svg -o /dev/null
// RUN: FileCheck %s --check-prefix=SVG --input-file=%t.svg

// A memory limit of 40 bytes per device: plans split into chunks.
// RUN: polymesh-opt %s '--polymesh-plan=memory-limit-bytes=40 stats-file=- print-plan' -o /dev/null | FileCheck %s --check-prefix=LIMIT

// The planned IR parses and verifies again (transfer verifier included),
// in custom and generic form, chunked or not.
// RUN: polymesh-opt %s --polymesh-plan | polymesh-opt | FileCheck %s --check-prefix=REPARSE
// RUN: polymesh-opt %s --polymesh-plan=memory-limit-bytes=40 | polymesh-opt --verify-roundtrip | FileCheck %s --check-prefix=REPARSE-LIMIT
// RUN: polymesh-opt %s --polymesh-plan=memory-limit-bytes=40 --mlir-print-op-generic | polymesh-opt | FileCheck %s --check-prefix=REPARSE-LIMIT

polymesh.mesh @replica0 = <["tp"=2], device_ids=[0, 1]>
polymesh.mesh @train = <["dp"=4, "tp"=2]>
polymesh.mesh @pair23 = <["p"=2], device_ids=[2, 3]>

// The Orbax restore on 8 devices: 0 and 1 each broadcast a 128-byte half to
// three devices.
func.func @restore(%x: tensor<8x8xf32> {polymesh.sharding = #polymesh.sharding<@replica0, [{}, {"tp"}]>}) -> tensor<8x8xf32> {
  // STATS: {"function": "restore", "location": "loc(\"{{.*}}plan-options.mlir\":[[@LINE+5]]:8)",
  // STATS-SAME: "shape": [8, 8], "dtype": "f32",
  // STATS-SAME: "source": "#polymesh.sharding<@replica0, [{}, {\"tp\"}]>", "destination": "#polymesh.sharding<@train, [{}, {\"tp\"}]>",
  // STATS-SAME: "bytes_moved": 768, "lower_bound_bytes": 768, "max_device_recv_bytes": 128, "max_device_send_bytes": 384,
  // STATS-SAME: "peak_temp_bytes": 128, "steps": {"local_copy": 1, "broadcast": 2}}{{$}}
  %0 = polymesh.reshard %x <@train, [{}, {"tp"}]> : tensor<8x8xf32>
  return %0 : tensor<8x8xf32>
}

// PLAN: restore loc("{{.*}}plan-options.mlir":{{[0-9]+}}:8): #polymesh.sharding<@replica0, [{}, {"tp"}]> -> #polymesh.sharding<@train, [{}, {"tp"}]>
// PLAN-NEXT: plan for 8x8 x 4B: 3 steps in 1 chunks
// PLAN-NEXT:   bytes moved 768 (lower bound 768), max send 384, max recv 128, peak temp 128
// PLAN-NEXT:   chunk 0 local_copy devices=[0, 1]
// PLAN-NEXT:     0 -> [0] [0:8, 0:4] 128B
// PLAN-NEXT:     1 -> [1] [0:8, 4:8] 128B
// PLAN-NEXT:   chunk 0 broadcast root=0 devices=[0, 2, 4, 6]
// PLAN-NEXT:     0 -> [2, 4, 6] [0:8, 0:4] 128B
// PLAN-NEXT:   chunk 0 broadcast root=1 devices=[1, 3, 5, 7]
// PLAN-NEXT:     1 -> [3, 5, 7] [0:8, 4:8] 128B

// Under the limit each broadcast is cut along rows into 2x4 boxes of 32 B:
// four chunks, each holding the pair of broadcasts, so that no device
// stages more than one 32-byte box per chunk.
// LIMIT: {"function": "restore"
// LIMIT-SAME: "bytes_moved": 768, "lower_bound_bytes": 768, "max_device_recv_bytes": 128, "max_device_send_bytes": 384,
// LIMIT-SAME: "peak_temp_bytes": 32, "steps": {"local_copy": 1, "broadcast": 8}}

// Identical shardings: no step, but a stats line all the same.
func.func @noop(%x: tensor<8xi16> {polymesh.sharding = #polymesh.sharding<@train, [{"dp"}]>}) -> tensor<8xi16> {
  // STATS-NEXT: {"function": "noop", "location": "loc(\"{{.*}}plan-options.mlir\":[[@LINE+4]]:8)",
  // STATS-SAME: "shape": [8], "dtype": "i16", "source": "#polymesh.sharding<@train, [{\"dp\"}]>", "destination": "#polymesh.sharding<@train, [{\"dp\"}]>",
  // STATS-SAME: "bytes_moved": 0, "lower_bound_bytes": 0, "max_device_recv_bytes": 0, "max_device_send_bytes": 0,
  // STATS-SAME: "peak_temp_bytes": 0, "steps": {}}{{$}}
  %0 = polymesh.reshard %x <@train, [{"dp"}]> : tensor<8xi16>
  return %0 : tensor<8xi16>
}

// PLAN: noop loc("{{.*}}plan-options.mlir":{{[0-9]+}}:8): #polymesh.sharding<@train, [{"dp"}]> -> #polymesh.sharding<@train, [{"dp"}]>
// PLAN-NEXT: plan for 8 x 2B: 0 steps in 0 chunks (identity: device-equivalent layouts)
// PLAN-NEXT:   bytes moved 0 (lower bound 0), max send 0, max recv 0, peak temp 0

// LIMIT-NEXT: {"function": "noop"
// LIMIT-SAME: "peak_temp_bytes": 0, "steps": {}}

// A bf16 all-gather on devices 2 and 3 (4 elements, 8 B each way).
func.func @gather(%x: tensor<8xbf16> {polymesh.sharding = #polymesh.sharding<@pair23, [{"p"}]>}) -> tensor<8xbf16> {
  // STATS-NEXT: {"function": "gather", "location": "loc(\"{{.*}}plan-options.mlir\":[[@LINE+4]]:8)",
  // STATS-SAME: "shape": [8], "dtype": "bf16", "source": "#polymesh.sharding<@pair23, [{\"p\"}]>", "destination": "#polymesh.sharding<@pair23, [{}]>",
  // STATS-SAME: "bytes_moved": 16, "lower_bound_bytes": 16, "max_device_recv_bytes": 8, "max_device_send_bytes": 8,
  // STATS-SAME: "peak_temp_bytes": 16, "steps": {"local_copy": 1, "all_gather": 1}}{{$}}
  %0 = polymesh.reshard %x <@pair23, [{}]> : tensor<8xbf16>
  return %0 : tensor<8xbf16>
}

// PLAN: gather loc("{{.*}}plan-options.mlir":{{[0-9]+}}:8): #polymesh.sharding<@pair23, [{"p"}]> -> #polymesh.sharding<@pair23, [{}]>
// PLAN-NEXT: plan for 8 x 2B: 2 steps in 1 chunks
// PLAN-NEXT:   bytes moved 16 (lower bound 16), max send 8, max recv 8, peak temp 16
// PLAN-NEXT:   chunk 0 local_copy devices=[2, 3]
// PLAN-NEXT:     2 -> [2] [0:4] 8B
// PLAN-NEXT:     3 -> [3] [4:8] 8B
// PLAN-NEXT:   chunk 0 all_gather devices=[2, 3]
// PLAN-NEXT:     2 -> [3] [0:4] 8B
// PLAN-NEXT:     3 -> [2] [4:8] 8B

// Fits the limit whole (16 B per device): one chunk.
// LIMIT-NEXT: {"function": "gather"
// LIMIT-SAME: "peak_temp_bytes": 16, "steps": {"local_copy": 1, "all_gather": 1}}

// An all-reduce of partial sums over devices 0 and 1: each device reduces
// one half (phase 0) and sends it back (phase 1); 32 B each way per phase.
func.func @reduce(%x: tensor<16xf32> {polymesh.sharding = #polymesh.sharding<@replica0, [{}], unreduced={"tp"}>}) -> tensor<16xf32> {
  // STATS-NEXT: {"function": "reduce", "location": "loc(\"{{.*}}plan-options.mlir\":[[@LINE+5]]:8)",
  // STATS-SAME: "shape": [16], "dtype": "f32",
  // STATS-SAME: "source": "#polymesh.sharding<@replica0, [{}], unreduced={\"tp\"}>", "destination": "#polymesh.sharding<@replica0, [{}]>",
  // STATS-SAME: "bytes_moved": 128, "lower_bound_bytes": 128, "max_device_recv_bytes": 64, "max_device_send_bytes": 64,
  // STATS-SAME: "peak_temp_bytes": 128, "steps": {"local_copy": 1, "all_reduce": 1}}{{$}}
  %0 = polymesh.reshard %x <@replica0, [{}]> : tensor<16xf32>
  return %0 : tensor<16xf32>
}

// PLAN: reduce loc("{{.*}}plan-options.mlir":{{[0-9]+}}:8): #polymesh.sharding<@replica0, [{}], unreduced={"tp"}> -> #polymesh.sharding<@replica0, [{}]>
// PLAN-NEXT: plan for 16 x 4B: 2 steps in 2 chunks
// PLAN-NEXT:   bytes moved 128 (lower bound 128), max send 64, max recv 64, peak temp 128
// PLAN-NEXT:   reduces in place to <["tp"=2]> [{}] : 16
// A symbolic step prints its pieces, not the transfers they stand for.
// PLAN-NEXT:   chunk 0 all_reduce devices=[0, 1]
// PLAN-NEXT:     piece [0:8] summed onto 0
// PLAN-NEXT:     piece [8:16] summed onto 1
// PLAN-NEXT:   chunk 1 local_copy devices=[0, 1]
// PLAN-NEXT:     0 -> [0] [0:16] 64B
// PLAN-NEXT:     1 -> [1] [0:16] 64B
// PLAN-NOT: {{.}}

// Under the limit the all-reduce is cut into four chunks of 2-element
// pieces: per device and chunk, 8 B packed and 8 B received in each phase.
// LIMIT-NEXT: {"function": "reduce"
// LIMIT-SAME: "peak_temp_bytes": 32, "steps": {"local_copy": 1, "all_reduce": 4}}

// The readable plans under the limit, after the stats.
// LIMIT: restore loc(
// LIMIT-NEXT: plan for 8x8 x 4B: 9 steps in 4 chunks
// LIMIT-NEXT:   bytes moved 768 (lower bound 768), max send 384, max recv 128, peak temp 32 (limit 40)
// LIMIT-NEXT:   chunk 0 local_copy devices=[0, 1]
// LIMIT-NEXT:     0 -> [0] [0:8, 0:4] 128B
// LIMIT-NEXT:     1 -> [1] [0:8, 4:8] 128B
// LIMIT-NEXT:   chunk 0 broadcast root=0 devices=[0, 2, 4, 6]
// LIMIT-NEXT:     0 -> [2, 4, 6] [0:2, 0:4] 32B
// LIMIT-NEXT:   chunk 0 broadcast root=1 devices=[1, 3, 5, 7]
// LIMIT-NEXT:     1 -> [3, 5, 7] [0:2, 4:8] 32B
// LIMIT-NEXT:   chunk 1 broadcast root=0 devices=[0, 2, 4, 6]
// LIMIT-NEXT:     0 -> [2, 4, 6] [2:4, 0:4] 32B
// LIMIT-NEXT:   chunk 1 broadcast root=1 devices=[1, 3, 5, 7]
// LIMIT-NEXT:     1 -> [3, 5, 7] [2:4, 4:8] 32B
// LIMIT-NEXT:   chunk 2 broadcast root=0 devices=[0, 2, 4, 6]
// LIMIT-NEXT:     0 -> [2, 4, 6] [4:6, 0:4] 32B
// LIMIT-NEXT:   chunk 2 broadcast root=1 devices=[1, 3, 5, 7]
// LIMIT-NEXT:     1 -> [3, 5, 7] [4:6, 4:8] 32B
// LIMIT-NEXT:   chunk 3 broadcast root=0 devices=[0, 2, 4, 6]
// LIMIT-NEXT:     0 -> [2, 4, 6] [6:8, 0:4] 32B
// LIMIT-NEXT:   chunk 3 broadcast root=1 devices=[1, 3, 5, 7]
// LIMIT-NEXT:     1 -> [3, 5, 7] [6:8, 4:8] 32B
// LIMIT-NEXT: noop loc(
// LIMIT: reduce loc(
// LIMIT-NEXT: plan for 16 x 4B: 5 steps in 5 chunks
// LIMIT-NEXT:   bytes moved 128 (lower bound 128), max send 64, max recv 64, peak temp 32 (limit 40)
// LIMIT-NEXT:   reduces in place to <["tp"=2]> [{}] : 16
// LIMIT-NEXT:   chunk 0 all_reduce devices=[0, 1]
// LIMIT-NEXT:     0 -> [1](src) += [8:10] 8B
// LIMIT-NEXT:     1 -> [0](src) += [0:2] 8B
// LIMIT-NEXT:     phase 1: 0 -> [1](src) [0:2] 8B
// LIMIT-NEXT:     phase 1: 1 -> [0](src) [8:10] 8B
// LIMIT-NEXT:   chunk 1 all_reduce devices=[0, 1]
// LIMIT-NEXT:     0 -> [1](src) += [10:12] 8B
// LIMIT-NEXT:     1 -> [0](src) += [2:4] 8B
// LIMIT-NEXT:     phase 1: 0 -> [1](src) [2:4] 8B
// LIMIT-NEXT:     phase 1: 1 -> [0](src) [10:12] 8B
// LIMIT-NEXT:   chunk 2 all_reduce devices=[0, 1]
// LIMIT-NEXT:     0 -> [1](src) += [12:14] 8B
// LIMIT-NEXT:     1 -> [0](src) += [4:6] 8B
// LIMIT-NEXT:     phase 1: 0 -> [1](src) [4:6] 8B
// LIMIT-NEXT:     phase 1: 1 -> [0](src) [12:14] 8B
// LIMIT-NEXT:   chunk 3 all_reduce devices=[0, 1]
// LIMIT-NEXT:     0 -> [1](src) += [14:16] 8B
// LIMIT-NEXT:     1 -> [0](src) += [6:8] 8B
// LIMIT-NEXT:     phase 1: 0 -> [1](src) [6:8] 8B
// LIMIT-NEXT:     phase 1: 1 -> [0](src) [14:16] 8B
// LIMIT-NEXT:   chunk 4 local_copy devices=[0, 1]

// The matrix covers devices 0-7 (rows: senders, columns: receivers), in
// row-major order. 0 -> 2: the restore's 128 B; 0 -> 1: the all-reduce's
// two phases, 32 B each; 2 -> 3: the bf16 gather's 8 B; 2 -> 0: nothing.
// SVG: <svg xmlns="http://www.w3.org/2000/svg"
// SVG: max 128 B
// SVG: <title>0 -> 0: 0 B</title>
// SVG: <title>0 -> 1: 64 B</title>
// SVG: <title>0 -> 2: 128 B</title>
// SVG: <title>0 -> 4: 128 B</title>
// SVG: <title>0 -> 6: 128 B</title>
// SVG: <title>1 -> 0: 64 B</title>
// SVG: <title>1 -> 7: 128 B</title>
// SVG: <title>2 -> 0: 0 B</title>
// SVG: <title>2 -> 3: 8 B</title>
// SVG: <title>3 -> 2: 8 B</title>
// SVG: <title>7 -> 7: 0 B</title>
// SVG-NEXT: </svg>

// REPARSE-LABEL: func.func @restore
// REPARSE: polymesh.transfer %arg0 <@replica0, [{}, {"tp"}]> -> <@train, [{}, {"tp"}]> steps [
// REPARSE-NEXT: local_copy chunk 0 devices [0, 1]
// REPARSE-NEXT: broadcast chunk 0 devices [0, 2, 4, 6] {0 -> [2, 4, 6], [0, 0] : [8, 4]},
// REPARSE-NEXT: broadcast chunk 0 devices [1, 3, 5, 7] {1 -> [3, 5, 7], [0, 4] : [8, 8]}
// REPARSE-NEXT: ] : tensor<8x8xf32>
// REPARSE-LABEL: func.func @noop
// REPARSE: polymesh.transfer %arg0 <@train, [{"dp"}]> -> <@train, [{"dp"}]> steps [] : tensor<8xi16>
// REPARSE-LABEL: func.func @gather
// REPARSE: all_gather chunk 0 devices [2, 3] {2 -> [3], [0] : [4]} {3 -> [2], [4] : [8]}
// REPARSE-LABEL: func.func @reduce
// REPARSE: all_reduce chunk 0 devices [0, 1] pieces {0: [0] : [8]} {1: [8] : [16]},
// REPARSE-NEXT: local_copy chunk 1 devices [0, 1] {0 -> [0], [0] : [16]} {1 -> [1], [0] : [16]}

// REPARSE-LIMIT-LABEL: func.func @restore
// REPARSE-LIMIT: broadcast chunk 3 devices [1, 3, 5, 7] {1 -> [3, 5, 7], [6, 4] : [8, 8]}
// REPARSE-LIMIT-NEXT: ] : tensor<8x8xf32>
// REPARSE-LIMIT-LABEL: func.func @reduce
// REPARSE-LIMIT: all_reduce chunk 3 devices [0, 1]
// REPARSE-LIMIT-NEXT: local_copy chunk 4 devices [0, 1]
