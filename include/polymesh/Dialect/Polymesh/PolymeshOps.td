//===- PolymeshOps.td - Polymesh operations ----------------*- tablegen -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_DIALECT_POLYMESH_OPS_TD
#define POLYMESH_DIALECT_POLYMESH_OPS_TD

include "polymesh/Dialect/Polymesh/PolymeshBase.td"
include "polymesh/Dialect/Polymesh/PolymeshAttrs.td"
include "mlir/IR/OpBase.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def Polymesh_MeshOp : Polymesh_Op<"mesh",
    [Symbol, HasParent<"mlir::ModuleOp">]> {
  let summary = "Declares a named device mesh";
  let description = [{
    ```mlir
    polymesh.mesh @mesh1  = <["a"=2, "b"=4]>
    polymesh.mesh @stage1 = <["dp"=2, "tp"=2], device_ids=[4, 5, 6, 7]>
    polymesh.mesh @dev3   = <[], device_ids=[3]>
    ```
    Declares a mesh that shardings refer to by symbol. Any number of meshes
    may coexist, over the same, overlapping or disjoint devices.
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Polymesh_MeshAttr:$mesh);
  let assemblyFormat = "$sym_name `=` $mesh attr-dict";
}

class Polymesh_ShardingOpBase<string mnemonic, list<Trait> traits = []>
    : Polymesh_Op<mnemonic, traits # [SameOperandsAndResultType,
        DeclareOpInterfaceMethods<SymbolUserOpInterface>]> {
  let arguments = (ins AnyRankedTensor:$input,
                       Polymesh_ShardingAttr:$sharding);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$input $sharding attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Polymesh_ShardingConstraintOp
    : Polymesh_ShardingOpBase<"sharding_constraint", [Pure]> {
  let summary = "Constrains the sharding of a value";
  let description = [{
    ```mlir
    %y = polymesh.sharding_constraint %x <@mesh1, [{"a"}, {} ]> : tensor<16x16xf32>
    ```
    The result has exactly the given sharding; its closed dimensions are
    fixed, its open ones may be extended by propagation. Propagation may
    insert a `polymesh.reshard` in front of it when the operand arrives with
    another sharding.
  }];
}

def Polymesh_ReshardOp : Polymesh_ShardingOpBase<"reshard", [Pure]> {
  let summary = "Moves a value to another sharding, possibly on another mesh";
  let description = [{
    ```mlir
    %z = polymesh.reshard %y <@mesh3, [{"c"}, {} ]> : tensor<16x16xf32>
    ```
    An explicit data movement: the result holds the operand's value laid out
    with the given sharding, which may name a different mesh (other axes,
    other devices). `--polymesh-plan` turns it into device-level transfers.
  }];
}

#endif // POLYMESH_DIALECT_POLYMESH_OPS_TD
