//===- PolymeshBase.td - Polymesh dialect definition -------*- tablegen -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_DIALECT_POLYMESH_BASE_TD
#define POLYMESH_DIALECT_POLYMESH_BASE_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Polymesh_Dialect : Dialect {
  let name = "polymesh";
  let cppNamespace = "::polymesh";
  let summary = "Shardings over several device meshes at once";
  let description = [{
    The `polymesh` dialect describes how tensors are laid out over device
    meshes. Unlike upstream `shard` and Shardy, a program may name any number
    of meshes, each with arbitrary device ids, so sub-meshes, disjoint
    pipeline stages and single devices are ordinary meshes, and a value keeps
    the identity of the mesh it was placed on.

    Discardable attributes verified by the dialect:

    * `polymesh.sharding` — a `#polymesh.sharding` on a function argument or
      result, or on an op: a single sharding for a single-result op, or an
      array with one sharding per result.
    * `polymesh.leaf` — a string naming the pytree path of a function result
      (used in reports and diagnostics).
    * `polymesh.ambient_mesh` — a flat symbol reference to a `polymesh.mesh`,
      on a function or on the module: the default placement for values that
      nothing else places.
  }];
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;
  let hasRegionResultAttrVerify = 1;
  let extraClassDeclaration = [{
    static constexpr llvm::StringLiteral kShardingAttrName = "polymesh.sharding";
    static constexpr llvm::StringLiteral kLeafAttrName = "polymesh.leaf";
    static constexpr llvm::StringLiteral kAmbientMeshAttrName =
        "polymesh.ambient_mesh";
    /// On a function made by --polymesh-partition: the global function it
    /// runs a part of (a string) ...
    static constexpr llvm::StringLiteral kPartitionOfAttrName =
        "polymesh.partition_of";
    /// ... the sorted ids of the devices that run it (an i64 array; with
    /// --polymesh-partition's `devices`, those of them that were asked
    /// for) ...
    static constexpr llvm::StringLiteral kDevicesAttrName = "polymesh.devices";
    /// ... and the meshes the global function names (an array of symbol
    /// references): the sorted union of their device ids is the function's
    /// devices, whose indices are the positions its classes are called with.
    static constexpr llvm::StringLiteral kMeshesAttrName = "polymesh.meshes";
    /// On the llvm.alloca that holds a lowered function's collective
    /// groups (a unit attribute; the CPU and CUDA lowerings drop it).
    static constexpr llvm::StringLiteral kGroupBufferAttrName =
        "polymesh.group_buffer";
    /// On a private function whose body is one planned polymesh.transfer,
    /// which polymesh.exchange ops refer to (a unit attribute).
    static constexpr llvm::StringLiteral kPlanAttrName = "polymesh.plan";
    /// Whether `sharding` was already verified against `mesh` for `type`.
    /// All three are uniqued in the context, so a success stays valid; the
    /// verifier checks every sharding of every op after every pass.
    bool isVerifiedSharding(mlir::Attribute sharding, mlir::Attribute mesh,
                            mlir::Type type);
    void markVerifiedSharding(mlir::Attribute sharding, mlir::Attribute mesh,
                              mlir::Type type);
  private:
    void registerAttributes();
    llvm::sys::SmartRWMutex<true> verifiedMutex;
    llvm::DenseSet<std::tuple<const void *, const void *, const void *>>
        verifiedShardings;
  public:
  }];
}

class Polymesh_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Polymesh_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

class Polymesh_Op<string mnemonic, list<Trait> traits = []>
    : Op<Polymesh_Dialect, mnemonic, traits>;

#endif // POLYMESH_DIALECT_POLYMESH_BASE_TD
