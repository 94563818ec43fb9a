"""export(): a jitted JAX function, with the shardings of its inputs, its
requested out_shardings and its sharding constraints, as Polymesh IR."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
from typing import Any, Callable, Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, SingleDeviceSharding
from jaxlib.mlir import ir

from ._attrs import MeshDef, Sharding, _quote, parse_mesh, symbol_text
from ._emit import ExportError, FunctionEmitter, TensorType, caller_site, export_site, signless_text
from ._meshes import MeshTable, ShardingError, mesh_of_jax

# The axis that marks each mesh when JAX cannot lower the function as is
# (see _lower_detached): `<axes of mesh k>, "__polymesh_mesh_k"=1`.
_MARKER = "__polymesh_mesh_"


@dataclasses.dataclass
class Leaf:
    """One flattened argument or result of the exported function."""

    path: str
    type: str
    sharding: Optional[Sharding]


@dataclasses.dataclass
class Program:
    """An exported function: the Polymesh IR text and what maps it back to
    the user's JAX objects."""

    text: str
    function_name: str
    meshes: MeshTable
    arguments: list[Leaf]
    results: list[Leaf]
    out_tree: Any
    ambient_mesh: Optional[str]
    # "jax": lowered by JAX as is; "detached": JAX refused the program's
    # device sets, so it was lowered without them (see docs/jax.md).
    lowering: str
    # Ops written as opaque ops (export_program(unmapped="opaque")): the IR
    # then needs polymesh-opt --allow-unregistered-dialect, and cannot run.
    opaque_ops: list = dataclasses.field(default_factory=list)


# --------------------------------------------------------------------------
# Pytree paths as leaf names.


def format_path(path: Sequence[Any]) -> str:
    """`params.dense.kernel`, `source_device_map[0]`, `[1].w`."""
    out = ""
    for key in path:
        if isinstance(key, jax.tree_util.DictKey):
            k = key.key
            out += f".{k}" if isinstance(k, str) else f"[{k!r}]"
        elif isinstance(key, jax.tree_util.GetAttrKey):
            out += f".{key.name}"
        elif isinstance(key, jax.tree_util.SequenceKey):
            out += f"[{key.idx}]"
        elif isinstance(key, jax.tree_util.FlattenedIndexKey):
            out += f"[{key.key}]"
        else:
            out += f".{key}"
    return out[1:] if out.startswith(".") else out


def _argument_path(path: Sequence[Any], parameters: list[str]) -> str:
    """Argument leaves are `(args, kwargs)` paths; name them after the
    function's parameters where it has names."""
    if len(path) >= 2 and isinstance(path[0], jax.tree_util.SequenceKey):
        if path[0].idx == 0 and isinstance(path[1], jax.tree_util.SequenceKey):
            index = path[1].idx
            head = parameters[index] if index < len(parameters) else f"args[{index}]"
            rest = format_path(path[2:])
            return head + ("" if not rest else rest if rest.startswith("[") else "." + rest)
        if path[0].idx == 1 and isinstance(path[1], jax.tree_util.DictKey):
            rest = format_path(path[2:])
            head = str(path[1].key)
            return head + ("" if not rest else rest if rest.startswith("[") else "." + rest)
    return format_path(path)


def _parameter_names(fn: Callable) -> list[str]:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return []
    names = []
    for p in signature.parameters.values():
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            names.append(p.name)
    return names


def _function_name(fn: Callable) -> str:
    name = getattr(fn, "__name__", None) or getattr(getattr(fn, "__wrapped__", None), "__name__", None) or "main"
    name = re.sub(r"[^A-Za-z0-9_]", "_", name).strip("_") or "main"
    if name[0].isdigit():
        name = "f_" + name
    return name


# --------------------------------------------------------------------------
# The ambient mesh.


def ambient_mesh() -> Optional[Mesh]:
    """The mesh of `jax.set_mesh`, else of a `with mesh:` block, else None."""
    mesh = jax.sharding.get_mesh()
    if isinstance(mesh, Mesh) and not mesh.empty:
        return mesh
    try:
        from jax._src import mesh as mesh_lib

        legacy = mesh_lib.thread_resources.env.physical_mesh
        if isinstance(legacy, Mesh) and not legacy.empty:
            return legacy
    except Exception:  # noqa: BLE001 - the legacy context is optional
        pass
    return None


@contextlib.contextmanager
def _no_ambient_mesh():
    """Neither `jax.set_mesh` nor `with mesh:` in effect."""
    with contextlib.ExitStack() as stack:
        if not jax.sharding.get_mesh().empty:
            stack.enter_context(jax.set_mesh(None))
        try:
            from jax._src import mesh as mesh_lib

            if not mesh_lib.thread_resources.env.physical_mesh.empty:
                stack.enter_context(mesh_lib.empty_concrete_mesh)
        except (ImportError, AttributeError):
            pass
        yield


# --------------------------------------------------------------------------
# Meshes named inside a traced program.


def _is_jitted(fn: Any) -> bool:
    return hasattr(fn, "trace") and hasattr(fn, "lower")


def _collect_meshes(obj: Any, found: list, seen: set) -> None:
    """Every concrete Mesh and single device named in jaxpr params."""
    from jax.extend import core as jcore

    if id(obj) in seen:
        return
    if isinstance(obj, NamedSharding):
        if isinstance(obj.mesh, Mesh) and not obj.mesh.empty:
            found.append(obj.mesh)
    elif isinstance(obj, Mesh):
        if not obj.empty:
            found.append(obj)
    elif isinstance(obj, SingleDeviceSharding):
        found.append(next(iter(obj.device_set)))
    elif isinstance(obj, jcore.ClosedJaxpr):
        seen.add(id(obj))
        _collect_meshes(obj.jaxpr, found, seen)
    elif isinstance(obj, jcore.Jaxpr):
        seen.add(id(obj))
        for eqn in obj.eqns:
            for value in eqn.params.values():
                _collect_meshes(value, found, seen)
    elif isinstance(obj, (tuple, list)):
        for item in obj:
            _collect_meshes(item, found, seen)


# --------------------------------------------------------------------------
# Lowering.


@dataclasses.dataclass
class _Lowered:
    module: ir.Module
    mesh_of_symbol: dict[str, str]
    drop_axis: Callable[[str], bool]
    kept: Optional[Sequence[int]]
    mode: str


def _sdy_meshes(module: ir.Module) -> dict[str, MeshDef]:
    meshes = {}
    for op in module.body.operations:
        if op.operation.name == "sdy.mesh":
            name = ir.StringAttr(op.operation.attributes["sym_name"]).value
            meshes[name] = parse_mesh(str(op.operation.attributes["mesh"]))
    return meshes


def _lower_with_jax(traced, table: MeshTable, used: list, ambient: Optional[Mesh]) -> _Lowered:
    lowered = traced.lower()
    module = lowered.compiler_ir("stablehlo")
    kept = None
    try:
        kept = sorted(lowered._lowering.compile_args["kept_var_idx"])
    except Exception:  # noqa: BLE001 - private; only needed when args are pruned
        pass
    candidates: list[tuple[MeshDef, Any]] = []
    for obj in used + ([ambient] if ambient is not None else []):
        if isinstance(obj, Mesh):
            candidates.append((mesh_of_jax(obj), obj))
        else:
            candidates.append((MeshDef((), (int(obj.id),)), obj))
    # The jit's device list: Shardy's meshes number their devices in it.
    try:
        device_list = [int(d.id) for d in lowered._lowering._device_list]
    except Exception:  # noqa: BLE001 - private; the meshes' axes decide then
        device_list = None
    by_id = {d.id: d for d in jax.devices()}
    mapping = {}
    for symbol, sdy_mesh in _sdy_meshes(module).items():
        logical = sdy_mesh.device_ids if sdy_mesh.device_ids is not None else tuple(range(sdy_mesh.size))
        if device_list is not None and all(i < len(device_list) for i in logical):
            ids = tuple(device_list[i] for i in logical)
            match = next(((m, obj) for m, obj in candidates if m.axes == sdy_mesh.axes and m.ids() == ids), None)
        else:
            # Every sharding of a program that JAX lowers is over one device
            # list, so a mesh's axes tell which of the user's meshes it is.
            match = next(((m, obj) for m, obj in candidates if m.axes == sdy_mesh.axes), None)
            ids = match[0].ids() if match else None
        if match is not None:
            mapping[symbol] = table.add(match[0], match[1])
        elif ids is not None:
            # A mesh JAX made (from types, or a reordering): the user has no
            # object for it, so the export makes one over the same devices.
            mesh = MeshDef(sdy_mesh.axes, ids)
            obj = (Mesh(np.array([by_id[i] for i in ids]).reshape([s for _, s in mesh.axes]),
                        tuple(n for n, _ in mesh.axes)) if mesh.axes else by_id[ids[0]])
            mapping[symbol] = table.add(mesh, obj)
        else:
            raise ExportError(
                f"Shardy mesh @{symbol} = {sdy_mesh.text()} matches none of the meshes the "
                "function's inputs, out_shardings and constraints name")
    return _Lowered(module, mapping, lambda name: False, kept, "jax")


def _tagged(table: MeshTable, sharding: Any) -> Any:
    """The sharding over an abstract mesh that carries its mesh's identity in
    a marker axis of size 1, so that JAX lowers shardings over different
    device sets into one module."""
    from jax.sharding import AbstractMesh, AxisType, PartitionSpec

    if isinstance(sharding, (jax.Device, SingleDeviceSharding)):
        device = sharding if isinstance(sharding, jax.Device) else next(iter(sharding.device_set))
        name = table.add_device(device)
        mesh = AbstractMesh((1,), (_MARKER + name,), axis_types=(AxisType.Auto,))
        return NamedSharding(mesh, PartitionSpec())
    if isinstance(sharding, NamedSharding) and isinstance(sharding.mesh, Mesh):
        name = table.add_jax_mesh(sharding.mesh)
        mesh = AbstractMesh(
            tuple(sharding.mesh.axis_sizes) + (1,),
            tuple(sharding.mesh.axis_names) + (_MARKER + name,),
            axis_types=(AxisType.Auto,) * (len(sharding.mesh.axis_sizes) + 1))
        spec = PartitionSpec(*sharding.spec)
        return NamedSharding(mesh, spec)
    return None


@contextlib.contextmanager
def _source_context(eqn):
    """The equation's source location and name stack, so that the lowered
    ops still point at the user's code (as jax.core.eval_jaxpr does)."""
    try:
        from jax._src import source_info_util

        name_stack = source_info_util.current_name_stack() + eqn.source_info.name_stack
        context = source_info_util.user_context(eqn.source_info.traceback, name_stack=name_stack)
    except Exception:  # noqa: BLE001 - private API; locations are only cosmetic
        context = contextlib.nullcontext()
    with context, eqn.ctx.manager:
        yield


def _eval_tagged(jaxpr, consts, args, table: MeshTable):
    """Re-traces `jaxpr`, with every concrete sharding in a constraint,
    device_put or nested jit replaced by its tagged form."""
    from jax._src import pjit as pjit_lib
    from jax.extend import core as jcore

    env: dict = {}

    def read(v):
        return v.val if isinstance(v, jcore.Literal) else env[v]

    def constrain(x, sharding):
        tagged = _tagged(table, sharding)
        if tagged is None:
            return x
        return jax.lax.with_sharding_constraint(x, tagged)

    for var, val in zip(jaxpr.constvars, consts):
        env[var] = val
    for var, val in zip(jaxpr.invars, args):
        env[var] = val
    for eqn in jaxpr.eqns:
        invals = [read(v) for v in eqn.invars]
        name = eqn.primitive.name
        if name == "sharding_constraint":
            sharding = eqn.params["sharding"]
            tagged = _tagged(table, sharding)
            if tagged is None:
                outs = [invals[0]]
            else:
                params = dict(eqn.params, sharding=tagged)
                outs = [pjit_lib.sharding_constraint_p.bind(invals[0], **params)]
        elif name == "device_put":
            outs = [constrain(x, d) for x, d in zip(invals, eqn.params["devices"])]
        elif name in ("jit", "pjit"):
            inner = eqn.params["jaxpr"]
            ins = [constrain(x, s) for x, s in zip(invals, eqn.params["in_shardings"])]
            outs = _eval_tagged(inner.jaxpr, inner.consts, ins, table)
            outs = [constrain(x, s) for x, s in zip(outs, eqn.params["out_shardings"])]
        else:
            params = eqn.primitive.get_bind_params(eqn.params)
            with _source_context(eqn):
                result = eqn.primitive.bind(*invals, **params)
            outs = list(result) if eqn.primitive.multiple_results else [result]
        for var, val in zip(eqn.outvars, outs):
            if not isinstance(var, jcore.DropVar):
                env[var] = val
    return [read(v) for v in jaxpr.outvars]


def _lower_detached(traced, table: MeshTable) -> _Lowered:
    """Lowers the function without the device sets that JAX refuses to mix:
    inputs as bare shapes, no ambient mesh, and every sharding inside the
    function over an abstract mesh tagged with its mesh's name. The
    boundary's shardings come from the JAX objects (export_program)."""
    closed = traced.jaxpr
    avals = [v.aval for v in closed.jaxpr.invars]
    specs = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals]

    def body(*flat):
        return _eval_tagged(closed.jaxpr, closed.consts, flat, table)

    with _no_ambient_mesh():
        lowered = jax.jit(body, keep_unused=True).lower(*specs)
    module = lowered.compiler_ir("stablehlo")
    mapping = {}
    for symbol, sdy_mesh in _sdy_meshes(module).items():
        marker = [n for n, _ in sdy_mesh.axes if n.startswith(_MARKER)]
        if len(marker) != 1 or table.get(marker[0][len(_MARKER):]) is None:
            raise ExportError(f"Shardy mesh @{symbol} = {sdy_mesh.text()} is not one of the function's meshes")
        mapping[symbol] = marker[0][len(_MARKER):]
    return _Lowered(module, mapping, lambda name: name.startswith(_MARKER), None, "detached")


def _is_device_mismatch(error: Exception) -> bool:
    return "incompatible devices" in str(error) or "device assignment" in str(error)


def _abstract(x: Any) -> Any:
    if isinstance(x, (jax.Array, np.ndarray, jax.ShapeDtypeStruct)):
        return jax.ShapeDtypeStruct(x.shape, x.dtype)
    return x


# --------------------------------------------------------------------------
# export


def export_program(fn: Callable, args: Sequence[Any] = (), kwargs: Optional[dict] = None, *,
                   mesh_names: Optional[dict] = None, function_name: Optional[str] = None,
                   lowering: str = "auto", unmapped: str = "error") -> Program:
    """Exports `fn(*args, **kwargs)`; see `export`. Options:

    mesh_names: {jax Mesh or Device: "name"} for the `polymesh.mesh` symbols
      (default: from the axes and device ids, e.g. `@mesh_a2_b4`).
    function_name: the `func.func` name (default: the function's name).
    lowering: "auto" (JAX's own lowering, else the detached one when JAX
      refuses the program's device sets), "jax" or "detached".
    unmapped: "error" (an op that is not mapped raises UnmappedOpError) or
      "opaque" (it is written as an opaque op: enough to resolve shardings,
      not to run; see Program.opaque_ops).
    """
    if unmapped not in ("error", "opaque"):
        raise ValueError(f"unmapped must be 'error' or 'opaque', got {unmapped!r}")
    token = export_site.set(caller_site())
    try:
        return _export_program(fn, args, kwargs, mesh_names, function_name, lowering, unmapped)
    finally:
        export_site.reset(token)


def _export_program(fn: Callable, args: Sequence[Any], kwargs: Optional[dict], mesh_names: Optional[dict],
                    function_name: Optional[str], lowering: str, unmapped: str) -> Program:
    kwargs = dict(kwargs or {})
    if lowering not in ("auto", "jax", "detached"):
        raise ValueError(f"lowering must be 'auto', 'jax' or 'detached', got {lowering!r}")
    table = MeshTable(mesh_names)
    ambient = ambient_mesh()
    jitted, traced = fn, None
    if _is_jitted(fn):
        traced = fn.trace(*args, **kwargs)
    if not all(hasattr(traced, a) for a in ("args_info", "out_info", "jaxpr", "lower")):
        # A plain function, or another library's jit (nnx.jit): JAX's jit
        # of it, which keeps unused inputs.
        jitted = jax.jit(fn, keep_unused=True)
        traced = jitted.trace(*args, **kwargs)
    params = getattr(traced, "_params", {}) or {}
    ctx_mesh = params.get("ctx_mesh")
    if ambient is None and isinstance(ctx_mesh, Mesh) and not ctx_mesh.empty:
        ambient = ctx_mesh

    # The inputs: each leaf's own sharding, or the jit's in_shardings.
    arg_paths = jax.tree_util.tree_flatten_with_path(traced.args_info)[0]
    user_leaves = dict(jax.tree_util.tree_flatten_with_path((tuple(args), kwargs))[0])
    in_shardings = params.get("in_shardings") or (None,) * len(arg_paths)
    parameters = _parameter_names(fn)
    arguments: list[Leaf] = []
    used: list = []
    for (path, info), jit_sharding in zip(arg_paths, in_shardings):
        aval = info._aval if hasattr(info, "_aval") else info.aval
        leaf_path = _argument_path(path, parameters)
        type_text = _type_of(aval.shape, aval.dtype, leaf_path)
        sharding_obj = None
        if jit_sharding is not None and type(jit_sharding).__name__ != "UnspecifiedValue":
            sharding_obj = jit_sharding
        else:
            user = user_leaves.get(tuple(path))
            if isinstance(user, jax.Array) and getattr(user, "committed", getattr(user, "_committed", True)):
                sharding_obj = user.sharding
            elif isinstance(user, jax.ShapeDtypeStruct):
                sharding_obj = user.sharding
        sharding = table.from_jax(sharding_obj, len(aval.shape), f"argument {leaf_path}")
        if sharding is not None:
            used.append(table[sharding.mesh].jax_object)
        arguments.append(Leaf(leaf_path, type_text, sharding))

    # The results: pytree paths, and the jit's out_shardings.
    out_paths = jax.tree_util.tree_flatten_with_path(traced.out_info)[0]
    out_shardings = params.get("out_shardings") or (None,) * len(out_paths)
    results: list[Leaf] = []
    for index, ((path, info), jit_sharding) in enumerate(zip(out_paths, out_shardings)):
        leaf_path = format_path(path) or ("result" if len(out_paths) == 1 else f"[{index}]")
        type_text = _type_of(info.shape, info.dtype, leaf_path)
        sharding = table.from_jax(jit_sharding, len(info.shape), f"result {leaf_path}")
        if sharding is not None:
            used.append(table[sharding.mesh].jax_object)
        results.append(Leaf(leaf_path, type_text, sharding))

    found: list = []
    _collect_meshes(traced.jaxpr, found, set())
    used.extend(found)
    distinct: list = []
    for candidate in used:
        if not any(candidate is m or candidate == m for m in distinct):
            distinct.append(candidate)
    if ambient is None and len(distinct) == 1 and isinstance(distinct[0], Mesh):
        # As in JAX: a jit whose every placed value is on one mesh computes
        # what nothing places (a loop counter, a constant) on all of it.
        ambient = distinct[0]
    ambient_name = table.add_jax_mesh(ambient) if ambient is not None else None

    def detached() -> _Lowered:
        # Traced again without the ambient mesh and with inputs as bare
        # shapes, so that nothing is typed on the devices JAX would refuse.
        try:
            with _no_ambient_mesh():
                bare = jitted.trace(*jax.tree.map(_abstract, tuple(args)),
                                    **jax.tree.map(_abstract, kwargs))
        except Exception:  # noqa: BLE001 - the function may need its mesh context
            bare = traced
        return _lower_detached(bare, table)

    if lowering == "detached":
        lowered = detached()
    else:
        try:
            lowered = _lower_with_jax(traced, table, used, ambient)
        except ValueError as error:
            if lowering == "jax" or not _is_device_mismatch(error):
                raise
            lowered = detached()

    name = function_name or _function_name(fn)
    text, opaque = _write(lowered, table, name, arguments, results, ambient_name, unmapped)
    return Program(text, name, table, arguments, results, traced.out_tree, ambient_name, lowered.mode, opaque)


def _type_of(shape, dtype, what: str) -> Optional[str]:
    try:
        name = np.dtype(dtype).name
    except TypeError:
        name = str(dtype)
    elem = {
        "float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
        "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64", "bool": "i1",
    }.get(name)
    if elem is None:
        return None  # taken from the lowered module (PRNG keys, unsigned integers)
    return "tensor<" + "".join(f"{int(d)}x" for d in shape) + elem + ">"


def _padded(leaf: Leaf, type_text: str) -> None:
    """The leaf's type as lowered; a sharding written for fewer dimensions
    (a PRNG key array lowers with a trailing key dimension) gets whole
    trailing dimensions."""
    leaf.type = type_text
    if leaf.sharding is None or not type_text.startswith("tensor<"):
        return
    rank = TensorType(type_text).rank
    if len(leaf.sharding.dims) < rank:
        from ._attrs import DimSharding

        extra = tuple(DimSharding() for _ in range(rank - len(leaf.sharding.dims)))
        leaf.sharding = dataclasses.replace(leaf.sharding, dims=leaf.sharding.dims + extra)


def _write(lowered: _Lowered, table: MeshTable, name: str, arguments: list[Leaf],
           results: list[Leaf], ambient_name: Optional[str], unmapped: str = "error") -> tuple[str, list]:
    module = lowered.module
    main = None
    for op in module.body.operations:
        if op.operation.name == "func.func" and ir.StringAttr(op.operation.attributes["sym_name"]).value == "main":
            main = op.operation
    if main is None:
        raise ExportError("the lowered module has no @main")
    block = main.regions[0].blocks[0]
    kept = lowered.kept if lowered.kept is not None else list(range(len(arguments)))
    if len(block.arguments) != len(kept):
        raise ExportError(
            f"the lowered @main has {len(block.arguments)} arguments for {len(arguments)} inputs "
            "(unused inputs were dropped; wrap the function with keep_unused=True)")
    for index, arg in zip(kept, block.arguments):
        expected = arguments[index].type
        if expected is not None and str(arg.type) != expected:
            raise ExportError(f"argument {arguments[index].path}: lowered as {arg.type}, expected {expected}")
        _padded(arguments[index], str(arg.type))
    for leaf in arguments:
        if leaf.type is None:
            raise ExportError(f"argument {leaf.path}: its element type is not supported")
    result_types = ir.FunctionType(ir.TypeAttr(main.attributes["function_type"]).value).results
    if len(result_types) != len(results):
        raise ExportError(f"the lowered @main returns {len(result_types)} values for {len(results)} leaves")
    for leaf, type_ in zip(results, result_types):
        if leaf.type is not None and str(type_) != leaf.type:
            raise ExportError(f"result {leaf.path}: lowered as {type_}, expected {leaf.type}")
        _padded(leaf, str(type_))

    emitter = FunctionEmitter(module, lambda symbol: lowered.mesh_of_symbol[symbol], lowered.drop_axis,
                              unmapped)
    returned = emitter.emit_main(main, [f"%arg{i}" for i in kept])
    if len(returned) != len(results):
        raise ExportError(f"the lowered @main returns {len(returned)} values for {len(results)} leaves")

    def attrs(leaf: Leaf) -> str:
        entries = [f"polymesh.leaf = {_quote(leaf.path)}"]
        if leaf.sharding is not None:
            entries.append(f"polymesh.sharding = {leaf.sharding.attr_text()}")
        return "{" + ", ".join(entries) + "}"

    lines = [f"// Exported by polymesh_jax from JAX {jax.__version__} ({lowered.mode} lowering)."]
    if emitter.opaque:
        kinds = sorted({error.op_name for error in emitter.opaque})
        lines.append(f"// Opaque ops (not mapped; polymesh-opt needs --allow-unregistered-dialect): {', '.join(kinds)}.")
    lines.append(table.text().rstrip("\n"))
    args_text = ",\n    ".join(f"%arg{i}: {leaf.type} {attrs(leaf)}" for i, leaf in enumerate(arguments))
    results_text = ",\n    ".join(f"{leaf.type} {attrs(leaf)}" for leaf in results)
    header = f"func.func {symbol_text(name)}({args_text})\n    -> ({results_text})"
    if ambient_name is not None:
        header += f"\n    attributes {{polymesh.ambient_mesh = {symbol_text(ambient_name)}}}"
    lines.append(header + " {")
    lines.extend(emitter.body_lines(returned))
    types = ", ".join(leaf.type for leaf in results)
    if returned:
        lines.append(f"  return {', '.join(returned)} : {types}")
    else:
        lines.append("  return")
    lines.append("}")
    return "\n".join(signless_text(line) for line in lines if line) + "\n", list(emitter.opaque)


def export(fn: Callable, *args: Any, **kwargs: Any) -> str:
    """Polymesh IR for `fn(*args, **kwargs)`.

    `fn` is lowered with `jax.jit(fn).lower(*args, **kwargs)` (or its own
    `.lower` if it is already jitted, so its out_shardings count). The IR
    declares every mesh with its real device ids, gives each argument the
    sharding of its input (a committed `jax.Array`'s, or a
    `ShapeDtypeStruct`'s) and each result its requested out_sharding, keeps
    every sharding constraint, names every leaf by its pytree path
    (`polymesh.leaf`) and records the ambient mesh of `jax.set_mesh` as
    `polymesh.ambient_mesh`.
    """
    return export_program(fn, args, kwargs).text


__all__ = ["export", "export_program", "Program", "Leaf", "ExportError", "ShardingError", "ambient_mesh", "format_path"]
