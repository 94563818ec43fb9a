//===- PolymeshAttrs.td - Mesh and sharding attributes -----*- tablegen -*-===//
//
// Part of Polymesh.
//
//===----------------------------------------------------------------------===//

#ifndef POLYMESH_DIALECT_POLYMESH_ATTRS_TD
#define POLYMESH_DIALECT_POLYMESH_ATTRS_TD

include "polymesh/Dialect/Polymesh/PolymeshBase.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/EnumAttr.td"

def Polymesh_MeshAxisAttr : Polymesh_Attr<"MeshAxis", "mesh_axis"> {
  let summary = "A named mesh axis with a size";
  let description = [{
    One axis of a mesh, written `"name"=size` inside a mesh.
  }];
  let parameters = (ins StringRefParameter<"axis name">:$name,
                        "int64_t":$size);
  let assemblyFormat = "`<` $name `=` $size `>`";
}

def Polymesh_MeshAttr : Polymesh_Attr<"Mesh", "mesh"> {
  let summary = "A device mesh: named axes and device ids";
  let description = [{
    A row-major grid of named axes, `<["a"=2, "b"=4]>`, optionally followed by
    the device id at each position, `device_ids=[4, 5, 6, 7]`. Without
    `device_ids` the ids are `0..N-1`. Any distinct non-negative ids are
    allowed, so a mesh may be a sub-mesh (a pipeline stage), a set of devices
    disjoint from every other mesh, or a single device (`<[],
    device_ids=[3]>`). The empty mesh `<[]>` is device 0.

    The verifier checks that axis sizes are positive, names are unique, the
    product of the sizes fits in int64, and the device ids are as many as the
    product, distinct and non-negative.
  }];
  let parameters = (ins
    ArrayRefParameter<"MeshAxisAttr", "mesh axes">:$axes,
    ArrayRefParameter<"int64_t", "device ids (empty: 0..N-1)">:$deviceIds);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Product of the axis sizes; meaningful only on a verified mesh.
    int64_t getNumDevices() const;
    /// The axis called `name`, or null.
    MeshAxisAttr getAxis(llvm::StringRef name) const;
    /// Device id at row-major position `position`.
    int64_t getDeviceId(int64_t position) const;
  }];
}

def Polymesh_AxisRefAttr : Polymesh_Attr<"AxisRef", "axis_ref"> {
  let summary = "A whole mesh axis or a sub-axis";
  let description = [{
    `"x"` names a whole axis; `"x":(m)k` names the sub-axis of size `k` whose
    major pre-size is `m`: the axis of size `n` is viewed as `m x k x
    n/(m*k)`, major to minor, and the sub-axis is the middle factor. `k` must
    be greater than 1 and `m*k` must divide `n`.
  }];
  let parameters = (ins StringRefParameter<"axis name">:$name,
                        DefaultValuedParameter<"int64_t", "0">:$preSize,
                        DefaultValuedParameter<"int64_t", "0">:$size);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    bool isSubAxis() const { return getSize() != 0; }
    /// Size in the given mesh: the sub-axis size, or the whole axis size.
    int64_t getSizeIn(MeshAttr mesh) const;
    void print(llvm::raw_ostream &os) const;
  }];
}

def Polymesh_DimShardingAttr : Polymesh_Attr<"DimSharding", "dim_sharding"> {
  let summary = "The axes that split one tensor dimension";
  let description = [{
    `{"a", "b"}` splits a dimension over axes `a` then `b`, major to minor.
    A trailing `?` (`{"a", ?}`, `{?}`) marks the dimension open: propagation
    may add further axes. Without it the dimension is closed.

    A user priority may follow, as in Shardy: `{"a"}p1`, `{?}p0`. Lower
    numbers propagate first: every dimension sharding of priority `i` reaches
    as far as it can before those of priority `i + 1` are looked at, and a
    dimension without a priority is `p0`. Propagation's own shardings carry
    none.
  }];
  let parameters = (ins
    ArrayRefParameter<"AxisRefAttr", "axes, major to minor">:$axes,
    "bool":$isClosed,
    DefaultValuedParameter<"int64_t", "-1",
                           "user priority (-1: none written)">:$priority);
  let builders = [
    AttrBuilder<(ins "llvm::ArrayRef<AxisRefAttr>":$axes, "bool":$isClosed),
                [{ return $_get($_ctxt, axes, isClosed, /*priority=*/-1); }]>
  ];
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    void print(llvm::raw_ostream &os) const;
    /// The priority propagation uses: the written one, or 0.
    int64_t getEffectivePriority() const {
      return getPriority() < 0 ? 0 : getPriority();
    }
    /// The same dimension sharding without a priority.
    DimShardingAttr withoutPriority() const;
  }];
}

def Polymesh_ShardingAttr : Polymesh_Attr<"Sharding", "sharding"> {
  let summary = "A tensor sharding over one named mesh";
  let description = [{
    `#polymesh.sharding<@mesh, [{"a"}, {"b", ?} ], replicated={"c"},
    unreduced={"d"}>`: the mesh symbol, one dimension sharding per tensor
    dimension, the axes propagation must not use (`replicated`), and the
    axes over which the value is a partial sum still to be reduced
    (`unreduced`). Checks that need the mesh (axes exist, sub-axes divide,
    no factor used twice, rank matches) run where the attribute is used.

    As in Shardy, `#polymesh.sharding<@dev, []>` on a mesh without axes (one
    device) is a *maximal* sharding: the whole tensor on that device, for a
    tensor of any rank. It prints as written; consumers that need one
    dimension sharding per tensor dimension use `withRank`.
  }];
  let parameters = (ins
    "mlir::FlatSymbolRefAttr":$meshName,
    ArrayRefParameter<"DimShardingAttr", "per-dimension shardings">:$dims,
    ArrayRefParameter<"AxisRefAttr", "replicated axes">:$replicated,
    ArrayRefParameter<"AxisRefAttr", "unreduced axes">:$unreduced);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    /// Verifies this sharding against `mesh` for a value of type `type`;
    /// `emitError` prefixes every message with where the sharding is used.
    mlir::LogicalResult verifyFor(
        llvm::function_ref<mlir::InFlightDiagnostic()> emitError,
        MeshAttr mesh, mlir::Type type) const;
    /// Whether this is a maximal sharding (`[]`, no replicated or unreduced
    /// axes): valid for a tensor of any rank on a mesh without axes.
    bool isMaximal() const;
    /// This sharding with one dimension sharding per dimension of a tensor
    /// of rank `rank`: a maximal sharding becomes `rank` closed, unsharded
    /// dimensions; any other sharding is returned unchanged.
    ShardingAttr withRank(int64_t rank) const;
    /// A fully replicated, closed sharding of rank `rank` on `meshName`.
    static ShardingAttr getReplicated(mlir::MLIRContext *context,
                                      mlir::FlatSymbolRefAttr meshName,
                                      int64_t rank);
    void printBody(mlir::AsmPrinter &printer) const;
    static ShardingAttr parseBody(mlir::AsmParser &parser);
  }];
}


def Polymesh_TransferStepKind : I32EnumAttr<"TransferStepKind",
    "How the transfers of a plan step are carried", [
      I32EnumAttrCase<"LocalCopy", 0, "local_copy">,
      I32EnumAttrCase<"ZeroFill", 1, "zero_fill">,
      I32EnumAttrCase<"AllGather", 2, "all_gather">,
      I32EnumAttrCase<"AllToAll", 3, "all_to_all">,
      I32EnumAttrCase<"CollectivePermute", 4, "collective_permute">,
      I32EnumAttrCase<"Broadcast", 5, "broadcast">,
      I32EnumAttrCase<"SendRecv", 6, "send_recv">,
      I32EnumAttrCase<"AllReduce", 7, "all_reduce">,
      I32EnumAttrCase<"ReduceScatter", 8, "reduce_scatter">,
    ]> {
  let cppNamespace = "::polymesh";
  let genSpecializedAttr = 0;
}

def Polymesh_BoxTransferAttr : Polymesh_Attr<"BoxTransfer", "box_transfer"> {
  let summary = "One box moved from one device to one or more devices";
  let description = [{
    `<0 -> [2, 4], [0, 0] : [4096, 512]>`: device 0 sends the half-open box
    `[0, 4096) x [0, 512)` (global tensor coordinates) to devices 2 and 4.
    Optional flags after the box: `from_destination` (read the sender's
    destination buffer instead of its source buffer), `into_source` (write
    the receivers' source buffers), `accumulate` (add instead of overwrite,
    for reductions) and `phase = N` (phase 0 of a step completes before
    phase 1 starts).
  }];
  let parameters = (ins
    "int64_t":$srcDevice,
    ArrayRefParameter<"int64_t", "receiving devices">:$dstDevices,
    ArrayRefParameter<"int64_t", "box lower corner">:$lo,
    ArrayRefParameter<"int64_t", "box upper corner">:$hi,
    "bool":$fromDestination,
    "bool":$intoSource,
    "bool":$accumulate,
    "int64_t":$phase);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    void printBody(llvm::raw_ostream &os) const;
    static BoxTransferAttr parseBody(mlir::AsmParser &parser);
    int64_t getNumElements() const;
  }];
}

def Polymesh_TransferStepAttr : Polymesh_Attr<"TransferStep", "transfer_step"> {
  let summary = "One step of a transfer plan";
  let description = [{
    `<broadcast chunk 0 devices [0, 2, 4] {0 -> [2, 4], [0, 0] : [8, 8]}>`:
    the collective that carries the step (`local_copy`, `zero_fill`,
    `all_gather`, `all_to_all`, `collective_permute`, `broadcast`,
    `send_recv`, `all_reduce`, `reduce_scatter`), the chunk it belongs to
    (steps of one chunk share the staging-memory budget), its participant
    devices (sorted) and its box transfers. A backend can always run a step
    as grouped sends and receives of packed boxes; the kind says which
    collective carries it where one does.

    A reduction step (`all_reduce`, `reduce_scatter`) may instead be
    symbolic: `<all_reduce chunk 0 devices [0, 2, 4, 6] pieces
    {0: [0, 0] : [4, 4]} {2: [4, 0] : [8, 4]} ...>` names, in order, the
    pieces of the group's box and the member each is summed onto. Its
    transfers follow from them (`planner::expandReductionPieces`): every
    member sends each piece it does not own to the piece's owner, which adds
    it into its source buffer (phase 0); an `all_reduce` then sends each
    reduced piece from its owner into every other member's source buffer
    (phase 1). A group of n members is n pieces instead of about n^2
    transfers. `--polymesh-plan` writes this form for every reduction step
    whose transfers are exactly that expansion.

    An `all_to_all` step may be symbolic too: `<all_to_all chunk 0 devices
    [0, 1, 2, 3] tiles>` exchanges whole tiles. Every member sends each
    other member the part of its source tile that the other's destination
    tile holds (`planner::expandExchangeTiles`), from source to destination
    buffer. The verifier accepts it where that is a whole reshard: the
    members are every device of both shardings, and each sharding's tiles
    are distinct (no partial sums, no replication), so each member receives
    all of its destination tile but what its own source tile holds. A group
    of n members is its n ids instead of n(n-1) transfers.
    `--polymesh-plan{exchange-tiles}` writes it for every reshard that is
    such an exchange and every pair of whose tiles meet.
  }];
  let parameters = (ins
    "TransferStepKind":$kind,
    "int64_t":$chunk,
    ArrayRefParameter<"int64_t", "participant devices">:$devices,
    ArrayRefParameter<"BoxTransferAttr", "box transfers">:$transfers,
    OptionalArrayRefParameter<"int64_t",
                              "owners of a symbolic reduction's pieces">:$pieceOwners,
    OptionalArrayRefParameter<"int64_t",
                              "each piece's lower then upper corner">:$pieceCorners,
    DefaultValuedParameter<"bool", "false",
                           "an all-to-all of whole tiles">:$tiles);
  let hasCustomAssemblyFormat = 1;
  let extraClassDeclaration = [{
    void printBody(llvm::raw_ostream &os) const;
    static TransferStepAttr parseBody(mlir::AsmParser &parser);
    /// Whether the step is a reduction written as its pieces.
    bool hasPieces() const { return !getPieceOwners().empty(); }
    /// Whether the step is written as its pieces or its tiles.
    bool isSymbolic() const { return hasPieces() || getTiles(); }
    /// The lower and upper corners of piece `index`.
    std::pair<llvm::ArrayRef<int64_t>, llvm::ArrayRef<int64_t>>
    getPiece(size_t index) const;
  }];
}

def Polymesh_BatchAxisAttr : Polymesh_Attr<"BatchAxis", "batch_axis"> {
  let summary = "A mesh axis over which a planned transfer repeats";
  let description = [{
    `#polymesh.batch_axis<"dp" -> "dp", dim = 0>`: the transfer's steps are
    those of cell 0 (coordinate 0 on every batch axis) and repeat for every
    coordinate of source axis `"dp"` paired with destination axis `"dp"`,
    on the devices of that coordinate and, since both shardings split
    dimension 0 first over the axis, on its slab of dimension 0.
    `#polymesh.batch_axis<"r" -> "s">` (no `dim`) pairs axes that neither
    sharding uses: every cell holds the whole value.
  }];
  let parameters = (ins StringRefParameter<"source mesh axis">:$source,
                        StringRefParameter<"destination mesh axis">:$destination,
                        DefaultValuedParameter<"int64_t", "-1">:$dim);
  let assemblyFormat = "`<` $source `->` $destination (`,` `dim` `=` $dim^)? `>`";
}

#endif // POLYMESH_DIALECT_POLYMESH_ATTRS_TD
