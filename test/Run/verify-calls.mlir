// RUN: polymesh-run %s --verify | FileCheck %s

// Programs with calls, run sharded on the loopback devices and compared with
// the unsharded reference: every call site is specialized for the
// shardings it is called with (docs/propagation.md, "Calls").

polymesh.mesh @m = <["a"=2, "b"=4]>
polymesh.mesh @pod = <["x"=3], device_ids=[11, 5, 8]>

// A dense layer: matmul, bias, GELU-ish tanh.
func.func private @dense(%x: tensor<24x64xf32>, %w: tensor<64x48xf32>, %bias: tensor<24x48xf32>) -> tensor<24x48xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<24x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<24x48xf32>) -> tensor<24x48xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<24x64xf32>, tensor<64x48xf32>) outs(%init : tensor<24x48xf32>) -> tensor<24x48xf32>
  %sum = arith.addf %mm, %bias : tensor<24x48xf32>
  %act = math.tanh %sum : tensor<24x48xf32>
  return %act : tensor<24x48xf32>
}

// The same layer on two meshes at once (10 devices: @pod shares device 5
// with @m): each site stays on its operands' mesh, so nothing crosses
// between @m and @pod.
// CHECK: @two_meshes: 2 leaves, 0 bytes moved, {{.*}} on 10 devices, PASS
func.func @two_meshes(%x: tensor<24x64xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>},
                      %w: tensor<64x48xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>},
                      %bias: tensor<24x48xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>},
                      %y: tensor<24x64xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{"x"}, {}]>},
                      %v: tensor<64x48xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{}, {}]>},
                      %c: tensor<24x48xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{"x"}, {}]>})
    -> (tensor<24x48xf32>, tensor<24x48xf32>) {
  %0 = func.call @dense(%x, %w, %bias) : (tensor<24x64xf32>, tensor<64x48xf32>, tensor<24x48xf32>) -> tensor<24x48xf32>
  %1 = func.call @dense(%y, %v, %c) : (tensor<24x64xf32>, tensor<64x48xf32>, tensor<24x48xf32>) -> tensor<24x48xf32>
  return %0, %1 : tensor<24x48xf32>, tensor<24x48xf32>
}

// A residual block calling the layer twice, itself called twice. (No
// contraction dimension is sharded: a reordered float sum that feeds
// further arithmetic is compared bit for bit, docs/execution.md.)
func.func private @residual(%x: tensor<24x64xf32>, %w1: tensor<64x48xf32>, %w2: tensor<48x64xf32>,
                            %b1: tensor<24x48xf32>) -> tensor<24x64xf32> {
  %h = func.call @dense(%x, %w1, %b1) : (tensor<24x64xf32>, tensor<64x48xf32>, tensor<24x48xf32>) -> tensor<24x48xf32>
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<24x64xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<24x64xf32>) -> tensor<24x64xf32>
  %back = linalg.matmul ins(%h, %w2 : tensor<24x48xf32>, tensor<48x64xf32>) outs(%init : tensor<24x64xf32>) -> tensor<24x64xf32>
  %out = arith.addf %back, %x : tensor<24x64xf32>
  return %out : tensor<24x64xf32>
}
// CHECK: @nested: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} on 8 devices, PASS
func.func @nested(%x: tensor<24x64xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>},
                  %w1: tensor<64x48xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>},
                  %w2: tensor<48x64xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>},
                  %b1: tensor<24x48xf32>) -> tensor<24x64xf32> {
  %0 = func.call @residual(%x, %w1, %w2, %b1) : (tensor<24x64xf32>, tensor<64x48xf32>, tensor<48x64xf32>, tensor<24x48xf32>) -> tensor<24x64xf32>
  %1 = func.call @residual(%0, %w1, %w2, %b1) : (tensor<24x64xf32>, tensor<64x48xf32>, tensor<48x64xf32>, tensor<24x48xf32>) -> tensor<24x64xf32>
  return %1 : tensor<24x64xf32>
}

// The callee's declared shardings hold at the site: its argument is moved
// onto @pod (uneven tiles: 10 rows over 3 devices) and its result back.
func.func private @on_pod(%x: tensor<10x16xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{"x"}, {}]>})
    -> (tensor<10x16xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{}, {"x"}]>}) {
  %0 = math.exp %x : tensor<10x16xf32>
  return %0 : tensor<10x16xf32>
}
// CHECK: @declared: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} on 10 devices, PASS
func.func @declared(%x: tensor<10x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>})
    -> tensor<10x16xf32> {
  %0 = func.call @on_pod(%x) : (tensor<10x16xf32>) -> tensor<10x16xf32>
  %1 = arith.negf %0 : tensor<10x16xf32>
  return %1 : tensor<10x16xf32>
}
// The alternative to specialization, for comparison: one placement of the
// layer (@two_meshes' first site, on @m) shared by both sites, so the
// second site's operands cross to @m and its result back to @pod at the
// call boundary: 53,888 bytes where specialization moves none.
// CHECK: @boundary: 2 leaves, 53888 bytes moved, {{.*}} on 10 devices, PASS
func.func @boundary(%x: tensor<24x64xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {}]>},
                    %w: tensor<64x48xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {"b"}]>},
                    %bias: tensor<24x48xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"a"}, {"b"}]>},
                    %y: tensor<24x64xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{"x"}, {}]>},
                    %v: tensor<64x48xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{}, {}]>},
                    %c: tensor<24x48xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{"x"}, {}]>})
    -> (tensor<24x48xf32>, tensor<24x48xf32> {polymesh.sharding = #polymesh.sharding<@pod, [{"x"}, {}]>}) {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<24x48xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<24x48xf32>) -> tensor<24x48xf32>
  %mm = linalg.matmul ins(%x, %w : tensor<24x64xf32>, tensor<64x48xf32>) outs(%init : tensor<24x48xf32>) -> tensor<24x48xf32>
  %sum = arith.addf %mm, %bias : tensor<24x48xf32>
  %act = math.tanh %sum : tensor<24x48xf32>
  %y2 = polymesh.sharding_constraint %y <@m, [{"a"}, {}]> : tensor<24x64xf32>
  %v2 = polymesh.sharding_constraint %v <@m, [{}, {"b"}]> : tensor<64x48xf32>
  %c2 = polymesh.sharding_constraint %c <@m, [{"a"}, {"b"}]> : tensor<24x48xf32>
  %empty2 = tensor.empty() : tensor<24x48xf32>
  %init2 = linalg.fill ins(%zero : f32) outs(%empty2 : tensor<24x48xf32>) -> tensor<24x48xf32>
  %mm2 = linalg.matmul ins(%y2, %v2 : tensor<24x64xf32>, tensor<64x48xf32>) outs(%init2 : tensor<24x48xf32>) -> tensor<24x48xf32>
  %sum2 = arith.addf %mm2, %c2 : tensor<24x48xf32>
  %act2 = math.tanh %sum2 : tensor<24x48xf32>
  %r2 = polymesh.sharding_constraint %act2 <@m, [{"a"}, {"b"}]> : tensor<24x48xf32>
  return %act, %r2 : tensor<24x48xf32>, tensor<24x48xf32>
}
// A reordered float sum (a contraction split over "b") inside a callee,
// returned by the caller, which has linalg ops of its own before the call:
// --verify finds the sum's bound in the reference by the numbering of the
// specialized program (it said "reordered sum #1 is not a linalg op"
// before, and could have picked another op's magnitudes).
func.func private @project(%h: tensor<16x32xf32>, %w: tensor<32x8xf32>) -> tensor<16x8xf32> {
  %zero = arith.constant 0.0 : f32
  %empty = tensor.empty() : tensor<16x8xf32>
  %init = linalg.fill ins(%zero : f32) outs(%empty : tensor<16x8xf32>) -> tensor<16x8xf32>
  %mm = linalg.matmul ins(%h, %w : tensor<16x32xf32>, tensor<32x8xf32>) outs(%init : tensor<16x8xf32>) -> tensor<16x8xf32>
  return %mm : tensor<16x8xf32>
}
// CHECK: @sum_in_callee: 1 leaf, {{[0-9]+}} bytes moved, {{.*}} on 8 devices, PASS
func.func @sum_in_callee(%x: tensor<32x16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>},
                         %w: tensor<32x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"b"}, {}]>})
    -> (tensor<16x8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{}, {}]>}) {
  %empty = tensor.empty() : tensor<16x32xf32>
  %t = linalg.transpose ins(%x : tensor<32x16xf32>) outs(%empty : tensor<16x32xf32>) permutation = [1, 0]
  %e = math.exp %t : tensor<16x32xf32>
  %r = func.call @project(%e, %w) : (tensor<16x32xf32>, tensor<32x8xf32>) -> tensor<16x8xf32>
  return %r : tensor<16x8xf32>
}
// CHECK: 5 passed, 0 failed
