// RUN: polymesh-opt %s | FileCheck %s
// RUN: polymesh-opt %s | polymesh-opt | FileCheck %s
// RUN: polymesh-opt %s --mlir-print-op-generic | polymesh-opt | FileCheck %s

// Every construct of DESIGN.md's syntax, printed back in the same form.

// CHECK: polymesh.mesh @mesh1 = <["a"=2, "b"=4]>
polymesh.mesh @mesh1   = <["a"=2, "b"=4]>
// CHECK: polymesh.mesh @mesh2 = <["x"=4, "y"=2, "z"=2]>
polymesh.mesh @mesh2   = <["x"=4, "y"=2, "z"=2]>
// CHECK: polymesh.mesh @mesh3 = <["c"=8]>
polymesh.mesh @mesh3   = <["c"=8]>
// CHECK: polymesh.mesh @stage1 = <["dp"=2, "tp"=2], device_ids=[4, 5, 6, 7]>
polymesh.mesh @stage1  = <["dp"=2, "tp"=2], device_ids=[4, 5, 6, 7]>
// CHECK: polymesh.mesh @reversed = <["r"=4], device_ids=[3, 2, 1, 0]>
polymesh.mesh @reversed = <["r"=4], device_ids=[3, 2, 1, 0]>
// CHECK: polymesh.mesh @dev3 = <[], device_ids=[3]>
polymesh.mesh @dev3    = <[], device_ids=[3]>
// CHECK: polymesh.mesh @empty = <[]>
polymesh.mesh @empty   = <[]>
// CHECK: polymesh.mesh @mesh_data = <["data"=4, "context"=2]>
polymesh.mesh @mesh_data = <["data"=4, "context"=2]>

// CHECK-LABEL: func.func @init
// CHECK-SAME: %arg0: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@mesh1, [{"a", "b"}, {?}]>}
// CHECK-SAME: -> (tensor<16x16xf32> {polymesh.leaf = "small_linear1.value", polymesh.sharding = #polymesh.sharding<@mesh1, [{"a"}, {"b"}]>},
// CHECK-SAME: tensor<16x16x16xf32> {polymesh.sharding = #polymesh.sharding<@mesh2, [{"x":(1)2}, {"y", ?}, {}], replicated={"z"}, unreduced={"x":(2)2}>}
// CHECK-SAME: attributes {polymesh.ambient_mesh = @mesh_data}
func.func @init(%arg0: tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@mesh1, [{"a", "b"}, {?}], replicated={}>})
    -> (tensor<16x16xf32> {polymesh.sharding = #polymesh.sharding<@mesh1, [{"a"}, {"b"}]>,
                           polymesh.leaf = "small_linear1.value"},
        tensor<16x16x16xf32> {polymesh.sharding = #polymesh.sharding<@mesh2, [{"x":(1)2}, {"y", ?}, {}], replicated={"z"}, unreduced={"x":(2)2}>})
    attributes {polymesh.ambient_mesh = @mesh_data} {
  // CHECK: %[[Y:.*]] = polymesh.sharding_constraint %arg0 <@mesh1, [{"a"}, {}]> : tensor<16x16xf32>
  %y = polymesh.sharding_constraint %arg0 <@mesh1, [{"a"}, {}]> : tensor<16x16xf32>
  // CHECK: %[[Z:.*]] = polymesh.reshard %[[Y]] <@mesh3, [{"c"}, {}]> : tensor<16x16xf32>
  %z = polymesh.reshard %y <@mesh3, [{"c"}, {}]> : tensor<16x16xf32>
  // CHECK: polymesh.reshard %[[Z]] <@stage1, [{"dp"}, {"tp"}]> : tensor<16x16xf32>
  %s = polymesh.reshard %z <@stage1, [{"dp"}, {"tp"}]> : tensor<16x16xf32>
  // CHECK: polymesh.reshard %{{.*}} <@dev3, [{}, {}]> : tensor<16x16xf32>
  %d = polymesh.reshard %s <@dev3, [{}, {}]> : tensor<16x16xf32>
  // CHECK: polymesh.reshard %{{.*}} <@empty, [{?}, {?}]> : tensor<16x16xf32>
  %e = polymesh.reshard %d <@empty, [{?}, {?}]> : tensor<16x16xf32>
  // CHECK: arith.constant {polymesh.sharding = #polymesh.sharding<@mesh2, [{"x"}, {"y"}, {"z"}]>} dense<1.000000e+00> : tensor<16x16x16xf32>
  %c = arith.constant {polymesh.sharding = #polymesh.sharding<@mesh2, [{"x"}, {"y"}, {"z"}]>} dense<1.0> : tensor<16x16x16xf32>
  // CHECK: arith.addf %{{.*}}, %{{.*}} {polymesh.sharding = [#polymesh.sharding<@mesh2, [{"x":(1)2}, {}, {}], unreduced={"y"}>]}
  %w = arith.addf %c, %c {polymesh.sharding = [#polymesh.sharding<@mesh2, [{"x":(1)2}, {}, {}], unreduced={"y"}>]} : tensor<16x16x16xf32>
  return %e, %w : tensor<16x16xf32>, tensor<16x16x16xf32>
}

// The ambient mesh may also sit on the module; standalone attributes parse.
// CHECK-LABEL: func.func @standalone_attrs
// CHECK-SAME: polymesh.axis = #polymesh.axis_ref<"x":(1)2>
// CHECK-SAME: polymesh.dim = #polymesh.dim_sharding<{"a", ?}>
// CHECK-SAME: polymesh.mesh = #polymesh.mesh<["q"=3], device_ids=[9, 8, 7]>
func.func @standalone_attrs() attributes {
    test.attrs = {polymesh.axis = #polymesh.axis_ref<"x":(1)2>,
                  polymesh.dim = #polymesh.dim_sharding<{"a", ?}>,
                  polymesh.mesh = #polymesh.mesh<["q"=3], device_ids=[9, 8, 7]>}} {
  return
}
