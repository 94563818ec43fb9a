// RUN: polymesh-opt %s --polymesh-propagate --polymesh-plan --polymesh-partition --polymesh-exchange-to-mpi -split-input-file -verify-diagnostics | FileCheck %s

// The MPI lowering names the MPI implementation in the module's #dlti.map:
// the other entries of a map the module has stay.
// CHECK: module attributes {dlti.map = #dlti.map<"polymesh.test" = 7 : i64, "MPI:Implementation" = "OpenMPI">}
// CHECK: mpi.send
module attributes {dlti.map = #dlti.map<"polymesh.test" = 7 : i64, "MPI:Implementation" = "MPICH">} {
  polymesh.mesh @a = <["x"=2], device_ids=[0, 1]>
  polymesh.mesh @b = <["y"=2], device_ids=[3, 2]>
  func.func @kept(%x: tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>})
      -> (tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@b, [{}, {"y"}]>}) {
    return %x : tensor<8x6xf32>
  }
}

// -----

// A dlti.map that is not a map: refused at the module (by the DLTI
// dialect's verifier, before any pass runs).
// expected-error @+1 {{'dlti.map' is expected to be a #dlti.map attribute}}
module attributes {dlti.map = 3 : i64} {
  polymesh.mesh @a = <["x"=2], device_ids=[0, 1]>
  polymesh.mesh @b = <["y"=2], device_ids=[3, 2]>
  func.func @not_a_map(%x: tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@a, [{"x"}, {}]>})
      -> (tensor<8x6xf32> {polymesh.sharding = #polymesh.sharding<@b, [{}, {"y"}]>}) {
    return %x : tensor<8x6xf32>
  }
}
