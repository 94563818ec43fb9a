"""StableHLO -> Polymesh IR: the ops of a lowered JAX function, rewritten as
the upstream ops (`arith`, `math`, `tensor`, `linalg`) that
`polymesh-opt --polymesh-propagate` propagates shardings through, with
Shardy's constraints and reshards as `polymesh.sharding_constraint` and
`polymesh.reshard`.

The module is walked with jaxlib's own MLIR bindings (`jaxlib.mlir.ir`); the
output is text. Every op that is not mapped raises `UnmappedOpError`, naming
the op and where the user's code created it.
"""

from __future__ import annotations

import contextvars
import os
import re
import sys
from typing import Callable, Optional, Sequence

from jaxlib.mlir import ir

from ._attrs import Sharding, parse_sharding, parse_sharding_list


class ExportError(RuntimeError):
    """The function cannot be written as Polymesh IR."""


class UnmappedOpError(ExportError):
    """A StableHLO (or other) op that the exporter does not map."""

    def __init__(self, op_name: str, location: str, detail: str = ""):
        self.op_name = op_name
        self.location = location
        message = f"'{op_name}' is not mapped to Polymesh IR"
        if detail:
            message += f" ({detail})"
        message += f", at {location}"
        super().__init__(message)


_FILE_LOC = re.compile(r'"([^"]+)":(\d+):(\d+)')
_NAME_LOC = re.compile(r'loc\("([^"]*)"')

# Frames in the bridge's own files are never the user's line: JAX records
# them for what it creates while the bridge lowers (hoisted constants).
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep

# Where the user called export (set by export_program): the location of
# last resort for an op with no user frame of its own.
export_site: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("polymesh_export_site", default=None)


def _is_bridge_file(path: str) -> bool:
    return os.path.abspath(path).startswith(_PACKAGE_DIR)


def caller_site() -> Optional[str]:
    """`file.py:12` of the innermost frame outside the bridge."""
    frame = sys._getframe(1)
    while frame is not None and _is_bridge_file(frame.f_code.co_filename):
        frame = frame.f_back
    return f"{frame.f_code.co_filename}:{frame.f_lineno}" if frame is not None else None


def _user_frame(location: ir.Location) -> Optional[str]:
    """The innermost frame, unless it is the bridge's own: then the op was
    made while the bridge lowered, and the outer frames are only the way to
    the export call."""
    text = str(location)
    files = _FILE_LOC.findall(text)
    if not files or _is_bridge_file(files[0][0]):
        return None
    where = f"{files[0][0]}:{files[0][1]}:{files[0][2]}"
    names = _NAME_LOC.findall(text)
    if names:
        where += f" ({names[0]})"
    return where


def describe_location(location: ir.Location, op: Optional[ir.Operation] = None) -> str:
    """`file.py:12:8 (jit(f)/cos)`: the first frame of `location` in the
    user's code; else (a constant JAX hoisted) that of the first op using
    `op`'s results; else the user's export call."""
    where = _user_frame(location)
    if where is not None:
        return where
    if op is not None:
        for result in op.results:
            for use in result.uses:
                where = _user_frame(use.owner.location)
                if where is not None:
                    return f"{where}, where its value is used"
    site = export_site.get()
    return f"{site} (the export call)" if site else "unknown location"


# Element types the emitted arithmetic supports.
_FLOAT_TYPES = {"f16", "bf16", "f32", "f64"}
_INT_TYPES = {"i1", "i8", "i16", "i32", "i64"}
_UNSIGNED_TYPES = {"ui8", "ui16", "ui32", "ui64"}

# The arith ops that read their integers as unsigned, for those that read
# them as signed.
_UNSIGNED_OPS = {
    "arith.divsi": "arith.divui", "arith.remsi": "arith.remui", "arith.maxsi": "arith.maxui",
    "arith.minsi": "arith.minui", "arith.sitofp": "arith.uitofp", "arith.fptosi": "arith.fptoui",
    "arith.extsi": "arith.extui",
}

# An unsigned element type outside a string literal.
_UNSIGNED_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|(?<![A-Za-wyz0-9_.%#@$])ui(\d+)\b')


def signless_text(line: str) -> str:
    """`line` with every unsigned element type written signless (`ui32` ->
    `i32`): arith computes on signless integers, and the ops the bridge
    picks for an unsigned type read them as unsigned."""
    return _UNSIGNED_TOKEN.sub(lambda m: m.group(0) if m.group(1) is None else f"i{m.group(1)}", line)


# MLIR element types by the name NumPy and JAX give them.
_DTYPE_NAMES = {
    "f16": "float16", "bf16": "bfloat16", "f32": "float32", "f64": "float64", "i1": "bool",
    "complex<f32>": "complex64", "complex<f64>": "complex128",
    "f8E4M3FN": "float8_e4m3fn", "f8E5M2": "float8_e5m2", "f8E4M3FNUZ": "float8_e4m3fnuz",
    "f8E5M2FNUZ": "float8_e5m2fnuz", "f8E4M3B11FNUZ": "float8_e4m3b11fnuz", "f8E4M3": "float8_e4m3",
    "f8E3M4": "float8_e3m4", "f8E8M0FNU": "float8_e8m0fnu", "f4E2M1FN": "float4_e2m1fn",
}


def dtype_name(elem: str) -> str:
    """`uint8` for `ui8`, `complex64` for `complex<f32>`; the MLIR name
    where NumPy has none."""
    if elem in _DTYPE_NAMES:
        return _DTYPE_NAMES[elem]
    match = re.fullmatch(r"(ui|si|i)(\d+)", elem)
    if match:
        return ("uint" if match.group(1) == "ui" else "int") + match.group(2)
    return elem


def _supported_dtypes() -> str:
    ints = sorted(_INT_TYPES, key=_bitwidth) + sorted(_UNSIGNED_TYPES, key=_bitwidth)
    return ", ".join(dtype_name(e) for e in sorted(_FLOAT_TYPES) + ints)


class UnsupportedDtypeError(UnmappedOpError):
    """An op computing on an element type Polymesh IR is not written for."""

    def __init__(self, op_name: str, elem: str, location: str):
        self.op_name = op_name
        self.location = location
        self.dtype = dtype_name(elem)
        ExportError.__init__(
            self, f"dtype {self.dtype} is not supported by the bridge (in '{op_name}'), at {location}; "
            f"it maps {_supported_dtypes()}")


_SHAPE = re.compile(r"^tensor<(?P<dims>(?:(?:\d+|\?)x)*)(?P<elem>[^<>x][^<>]*(?:<[^<>]*>)?)>$")


class TensorType:
    def __init__(self, text: str):
        match = _SHAPE.match(text)
        if not match:
            raise ExportError(f"type {text} is not a ranked tensor type the bridge reads")
        dims = match.group("dims")
        if "?" in dims:
            raise ExportError(f"type {text} is not a static-shaped tensor (dynamic dimensions are not supported)")
        self.text = text
        self.shape = tuple(int(d) for d in dims.split("x") if d)
        self.elem = match.group("elem")

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_float(self) -> bool:
        return self.elem in _FLOAT_TYPES

    @property
    def is_int(self) -> bool:
        return self.elem in _INT_TYPES or self.elem in _UNSIGNED_TYPES

    @property
    def is_unsigned(self) -> bool:
        """`ui32` and the like: written signless (`i32`) with the unsigned
        arith ops (signless_text)."""
        return self.elem in _UNSIGNED_TYPES

    def with_shape(self, shape: Sequence[int]) -> str:
        return tensor_type(shape, self.elem)

    def __str__(self) -> str:
        return self.text


def tensor_type(shape: Sequence[int], elem: str) -> str:
    return "tensor<" + "".join(f"{d}x" for d in shape) + elem + ">"


def _i64s(attr: ir.Attribute) -> list[int]:
    try:
        return [int(v) for v in ir.DenseI64ArrayAttr(attr)]
    except Exception:  # noqa: BLE001 - older attribute kinds print the same
        return [int(v) for v in re.findall(r"-?\d+", str(attr).split(":", 1)[-1])]


def _bitwidth(elem: str) -> int:
    return {"f16": 16, "bf16": 16, "f32": 32, "f64": 64}.get(elem, 0) or int(elem.lstrip("u")[1:])


def reassociation(source: Sequence[int], target: Sequence[int]) -> Optional[tuple[list[list[int]], list[list[int]], list[int]]]:
    """Groups of consecutive dimensions with equal products: the source's
    groups, the target's groups, and the product of each group. None if the
    two shapes do not hold the same number of elements."""
    src_groups: list[list[int]] = []
    dst_groups: list[list[int]] = []
    sizes: list[int] = []
    i = j = 0
    while i < len(source) or j < len(target):
        sg: list[int] = []
        dg: list[int] = []
        sp = dp = 1
        if i < len(source):
            sg.append(i)
            sp *= source[i]
            i += 1
        if j < len(target):
            dg.append(j)
            dp *= target[j]
            j += 1
        while sp != dp:
            if sp < dp and i < len(source):
                sg.append(i)
                sp *= source[i]
                i += 1
            elif dp < sp and j < len(target):
                dg.append(j)
                dp *= target[j]
                j += 1
            else:
                return None
        # Trailing size-1 dimensions join the group that precedes them.
        while i < len(source) and source[i] == 1 and (j >= len(target) or target[j] != 1):
            sg.append(i)
            i += 1
        while j < len(target) and target[j] == 1 and (i >= len(source) or source[i] != 1):
            dg.append(j)
            j += 1
        if not sg or not dg:
            # One side ran out: only size-1 dimensions remain on the other.
            if sg and sp == 1 and src_groups:
                src_groups[-1].extend(sg)
                continue
            if dg and dp == 1 and dst_groups:
                dst_groups[-1].extend(dg)
                continue
            if (sg and sp == 1 and not dst_groups) or (dg and dp == 1 and not src_groups):
                # rank-0 on one side: every dimension is size 1.
                if sg:
                    src_groups.append(sg)
                if dg:
                    dst_groups.append(dg)
                sizes.append(1)
                continue
            return None
        src_groups.append(sg)
        dst_groups.append(dg)
        sizes.append(sp)
    return src_groups, dst_groups, sizes


class FunctionEmitter:
    """Writes the body of one Polymesh function from a StableHLO function."""

    def __init__(self, module: ir.Module, mesh_of_symbol: Callable[[str], str],
                 drop_axes: Callable[[str], bool] = lambda name: False, unmapped: str = "error"):
        self.module = module
        # "error": an op that is not mapped raises UnmappedOpError;
        # "opaque": it is written in generic form, without its attributes and
        # regions, as an op of an unregistered dialect (see emit_opaque).
        self.unmapped = unmapped
        self.opaque: list[UnmappedOpError] = []
        self.mesh_of_symbol = mesh_of_symbol
        self.drop_axes = drop_axes
        self.functions = {}
        for op in module.body.operations:
            if op.operation.name == "func.func":
                name = ir.StringAttr(op.operation.attributes["sym_name"]).value
                self.functions[name] = op.operation
        self.statements: list[list[str]] = []
        self.names: dict = {}
        self.constants: dict = {}  # value -> DenseElementsAttr text (lazy)
        self.counter = 0
        self.inline_depth = 0
        # name of a reshape's result -> (its source name, source type)
        self.reshaped: dict[str, tuple[str, TensorType]] = {}

    # -- helpers ----------------------------------------------------------

    def fresh(self) -> str:
        name = f"%{self.counter}"
        self.counter += 1
        return name

    def emit(self, text: str) -> None:
        """Starts a statement (one op)."""
        self.statements.append(["  " + text])

    def define(self, text: str) -> str:
        """Emits `%name = text` for a fresh name and returns the name."""
        name = self.fresh()
        self.emit(f"{name} = {text}")
        return name

    def cont(self, text: str) -> None:
        """Continues the last statement (an op's region)."""
        self.statements[-1].append("  " + text)

    def emit_opaque(self, op: ir.Operation, error: UnmappedOpError) -> list[str]:
        """The op as `"dialect.name"(operands) : (types) -> types`, with no
        attributes (but a constant's value) and no regions: enough for
        propagation, which computes an op it has no rule for replicated on
        a mesh of its operands (with a warning); not enough to run it."""
        self.opaque.append(error)
        operands = [self.value(v) for v in op.operands]
        in_types = ", ".join(str(v.type) for v in op.operands)
        out_types = [str(r.type) for r in op.results]
        attrs = ""
        if "value" in op.attributes and str(op.attributes["value"]).startswith("dense<"):
            attrs = f" {{value = {op.attributes['value']}}}"
        signature = f"({in_types}) -> " + (out_types[0] if len(out_types) == 1 else "(" + ", ".join(out_types) + ")")
        call = f'"{op.name}"({", ".join(operands)}){attrs} : {signature}'
        if not op.results:
            self.emit(call)
            return []
        name = self.fresh()
        if len(op.results) == 1:
            self.emit(f"{name} = {call}")
            return [name]
        self.emit(f"{name}:{len(op.results)} = {call}")
        return [f"{name}#{i}" for i in range(len(op.results))]

    def body_lines(self, returned: Sequence[str]) -> list[str]:
        """The statements, less those whose result nothing uses (every
        emitted op is pure, so they are dead)."""
        defines = [re.match(r"\s*(%\d+)(?::\d+)? =", st[0]) for st in self.statements]
        uses = [set(re.findall(r"%\d+\b", "\n".join(st))) for st in self.statements]
        for index, match in enumerate(defines):
            if match:
                uses[index].discard(match.group(1))
        live = [True] * len(self.statements)
        changed = True
        while changed:
            changed = False
            needed = {r.split("#")[0] for r in returned}
            for index, used in enumerate(uses):
                if live[index]:
                    needed |= used
            for index, match in enumerate(defines):
                if live[index] and match and match.group(1) not in needed:
                    live[index] = False
                    changed = True
        return [line for index, st in enumerate(self.statements) if live[index] for line in st]

    def value(self, v: ir.Value) -> str:
        name = self.names.get(v)
        if name is not None:
            return name
        if v in self.constants:
            name = self.fresh()
            self.emit(f"{name} = arith.constant {self.constants[v]}")
            self.names[v] = name
            return name
        raise ExportError(f"internal error: value {v} used before it is defined")

    def sharding(self, text: str, what: str) -> Sharding:
        sharding, inline = parse_sharding(text)
        if inline is not None:
            raise ExportError(f"{what}: an inline Shardy mesh ({text}) is not supported")
        return self._rename(sharding)

    def _rename(self, sharding: Sharding) -> Sharding:
        import dataclasses

        dims = tuple(dataclasses.replace(d, axes=tuple(a for a in d.axes if not self.drop_axes(a.name)))
                     for d in sharding.dims)
        return Sharding(self.mesh_of_symbol(sharding.mesh), dims,
                        tuple(a for a in sharding.replicated if not self.drop_axes(a.name)),
                        tuple(a for a in sharding.unreduced if not self.drop_axes(a.name)))

    def splat_constant(self, scalar: str, type_text: str) -> str:
        name = self.fresh()
        self.emit(f"{name} = arith.constant dense<{scalar}> : {type_text}")
        return name

    def scalar_constant(self, scalar: str, elem: str) -> str:
        name = self.fresh()
        if elem == "i1":
            self.emit(f"{name} = arith.constant {scalar}")
        else:
            self.emit(f"{name} = arith.constant {scalar} : {elem}")
        return name

    def filled(self, type_text: str, scalar_name: str, elem: str) -> str:
        empty = self.fresh()
        self.emit(f"{empty} = tensor.empty() : {type_text}")
        fill = self.fresh()
        self.emit(f"{fill} = linalg.fill ins({scalar_name} : {elem}) outs({empty} : {type_text}) -> {type_text}")
        return fill

    def empty(self, type_text: str) -> str:
        name = self.fresh()
        self.emit(f"{name} = tensor.empty() : {type_text}")
        return name

    @staticmethod
    def splat_value(const_text: str) -> Optional[str]:
        """`1.000000e+00` from `dense<1.000000e+00> : tensor<f32>`, or None
        when the constant is not a splat."""
        match = re.match(r"^dense<([^\[\]<>\"]+)>\s*:", const_text)
        return match.group(1).strip() if match else None

    # -- entry points ------------------------------------------------------

    def emit_main(self, func: ir.Operation, arg_names: Sequence[str]) -> list[str]:
        """Emits `func`'s body with its arguments named `arg_names`; returns
        the names of the returned values."""
        block = func.regions[0].blocks[0]
        if len(block.arguments) != len(arg_names):
            raise ExportError("internal error: argument count mismatch")
        for arg, name in zip(block.arguments, arg_names):
            self.names[arg] = name
        return self.emit_block(block)

    def emit_block(self, block: ir.Block) -> list[str]:
        for op in block.operations:
            operation = op.operation
            if operation.name in ("func.return", "stablehlo.return"):
                return [self.value(v) for v in operation.operands]
            self.emit_op(operation)
        raise ExportError("internal error: block without a return")

    # -- ops ---------------------------------------------------------------

    def emit_op(self, op: ir.Operation) -> None:
        name = op.name
        where = describe_location(op.location, op)
        try:
            computes = name not in _ANY_DTYPE
            for result in op.results:
                if not str(result.type).startswith("tensor<"):
                    raise UnmappedOpError(name, where, f"result of type {result.type}")
                result_type = TensorType(str(result.type))  # static shapes only
                if computes:
                    _check_dtype(name, result_type, where)
            for operand in op.operands:
                if computes and str(operand.type).startswith("tensor<"):
                    _check_dtype(name, TensorType(str(operand.type)), where)
            handler = _HANDLERS.get(name)
            if handler is None:
                raise UnmappedOpError(name, where)
            outputs = handler(self, op)
        except UnmappedOpError as error:
            if self.unmapped != "opaque":
                raise
            # What the handler emitted before giving up is dead code now.
            outputs = self.emit_opaque(op, error)
        except ExportError as error:
            raise ExportError(f"{error} (in '{name}' at {where})") from None
        if outputs is None:
            return
        if "sdy.sharding" in op.attributes:
            shardings = [self._rename(s) for s in parse_sharding_list(str(op.attributes["sdy.sharding"]))]
            if len(shardings) == 1 and len(outputs) == 1:
                out = outputs[0]
                pinned = self.fresh()
                self.emit(f"{pinned} = polymesh.sharding_constraint {out} {shardings[0].body_text()} : {op.results[0].type}")
                outputs = [pinned]
        for result, out in zip(op.results, outputs):
            self.names[result] = out


# Ops that only move, place or forward values: what they become is written
# for any element type (a PRNG key's uint32 words are resharded, sliced and
# passed to calls like any tensor).
_ANY_DTYPE = {
    "func.call", "stablehlo.optimization_barrier", "sdy.sharding_constraint", "sdy.reshard",
    "stablehlo.reshape", "stablehlo.transpose", "stablehlo.broadcast_in_dim", "stablehlo.slice",
    "stablehlo.concatenate", "stablehlo.reverse", "stablehlo.while", "stablehlo.case", "stablehlo.if",
    "stablehlo.gather",
}


def _check_dtype(op_name: str, t: TensorType, where: str) -> None:
    if not (t.is_float or t.is_int):
        raise UnsupportedDtypeError(op_name, t.elem, where)


_HANDLERS: dict[str, Callable[[FunctionEmitter, ir.Operation], Optional[list[str]]]] = {}


def handles(*names: str):
    def register(fn):
        for n in names:
            _HANDLERS[n] = fn
        return fn
    return register


@handles("stablehlo.constant")
def _constant(e: FunctionEmitter, op: ir.Operation):
    text = str(op.attributes["value"])
    if "dense_resource" in text or "__elided__" in text:
        raise UnmappedOpError(op.name, describe_location(op.location, op), "an elided or resource constant")
    # Materialized where first used: a constant only broadcast is folded.
    e.constants[op.results[0]] = text
    return None


# Elementwise: (float op, signed int op, i1 op); None where not defined.
_BINARY = {
    "stablehlo.add": ("arith.addf", "arith.addi", None),
    "stablehlo.subtract": ("arith.subf", "arith.subi", None),
    "stablehlo.multiply": ("arith.mulf", "arith.muli", "arith.andi"),
    "stablehlo.divide": ("arith.divf", "arith.divsi", None),
    "stablehlo.remainder": ("arith.remf", "arith.remsi", None),
    "stablehlo.maximum": ("arith.maximumf", "arith.maxsi", "arith.ori"),
    "stablehlo.minimum": ("arith.minimumf", "arith.minsi", "arith.andi"),
    "stablehlo.and": (None, "arith.andi", "arith.andi"),
    "stablehlo.or": (None, "arith.ori", "arith.ori"),
    "stablehlo.xor": (None, "arith.xori", "arith.xori"),
    "stablehlo.power": ("math.powf", None, None),
    "stablehlo.atan2": ("math.atan2", None, None),
}

_UNARY = {
    "stablehlo.negate": ("arith.negf", None, None),
    "stablehlo.exponential": ("math.exp", None, None),
    "stablehlo.exponential_minus_one": ("math.expm1", None, None),
    "stablehlo.log": ("math.log", None, None),
    "stablehlo.log_plus_one": ("math.log1p", None, None),
    "stablehlo.tanh": ("math.tanh", None, None),
    "stablehlo.sqrt": ("math.sqrt", None, None),
    "stablehlo.rsqrt": ("math.rsqrt", None, None),
    "stablehlo.cbrt": ("math.cbrt", None, None),
    "stablehlo.sine": ("math.sin", None, None),
    "stablehlo.cosine": ("math.cos", None, None),
    "stablehlo.tan": ("math.tan", None, None),
    "stablehlo.abs": ("math.absf", "math.absi", None),
    "stablehlo.floor": ("math.floor", None, None),
    "stablehlo.ceil": ("math.ceil", None, None),
    "stablehlo.round_nearest_even": ("math.roundeven", None, None),
    "stablehlo.round_nearest_afz": ("math.round", None, None),
    "chlo.erf": ("math.erf", None, None),
    "chlo.erfc": ("math.erfc", None, None),
    "stablehlo.popcnt": (None, "math.ctpop", None),
}


def _pick(table_entry, t: TensorType, op: ir.Operation) -> str:
    float_op, int_op, bool_op = table_entry
    chosen = float_op if t.is_float else bool_op if t.elem == "i1" else int_op if t.is_int else None
    if chosen is None:
        raise UnmappedOpError(op.name, describe_location(op.location, op), f"on {t.elem}")
    return _UNSIGNED_OPS.get(chosen, chosen) if t.is_unsigned else chosen


@handles(*_BINARY)
def _binary(e: FunctionEmitter, op: ir.Operation):
    t = TensorType(str(op.results[0].type))
    arith = _pick(_BINARY[op.name], t, op)
    lhs, rhs = (e.value(v) for v in op.operands)
    name = e.fresh()
    e.emit(f"{name} = {arith} {lhs}, {rhs} : {t}")
    return [name]


@handles(*_UNARY)
def _unary(e: FunctionEmitter, op: ir.Operation):
    t = TensorType(str(op.results[0].type))
    fn = _pick(_UNARY[op.name], t, op)
    operand = e.value(op.operands[0])
    name = e.fresh()
    e.emit(f"{name} = {fn} {operand} : {t}")
    return [name]


@handles("stablehlo.logistic")
def _logistic(e: FunctionEmitter, op: ir.Operation):
    t = TensorType(str(op.results[0].type))
    if not t.is_float:
        raise UnmappedOpError(op.name, describe_location(op.location, op), f"on {t.elem}")
    x = e.value(op.operands[0])
    neg, exp, den, out = e.fresh(), e.fresh(), e.fresh(), e.fresh()
    e.emit(f"{neg} = arith.negf {x} : {t}")
    e.emit(f"{exp} = math.exp {neg} : {t}")
    one = e.splat_constant("1.0", str(t))
    e.emit(f"{den} = arith.addf {one}, {exp} : {t}")
    one_again = e.splat_constant("1.0", str(t))
    e.emit(f"{out} = arith.divf {one_again}, {den} : {t}")
    return [out]


@handles("stablehlo.not")
def _not(e: FunctionEmitter, op: ir.Operation):
    t = TensorType(str(op.results[0].type))
    if not t.is_int:
        raise UnmappedOpError(op.name, describe_location(op.location, op), f"on {t.elem}")
    ones = e.splat_constant("true" if t.elem == "i1" else "-1", str(t))
    name = e.fresh()
    e.emit(f"{name} = arith.xori {e.value(op.operands[0])}, {ones} : {t}")
    return [name]


_CMP_FLOAT = {"EQ": "oeq", "NE": "une", "LT": "olt", "LE": "ole", "GT": "ogt", "GE": "oge"}
_CMP_SIGNED = {"EQ": "eq", "NE": "ne", "LT": "slt", "LE": "sle", "GT": "sgt", "GE": "sge"}
_CMP_UNSIGNED = {"EQ": "eq", "NE": "ne", "LT": "ult", "LE": "ule", "GT": "ugt", "GE": "uge"}


def _comparison(op: ir.Operation, lhs: str, rhs: str, type_text: str) -> str:
    """`arith.cmpf`/`cmpi` of `lhs` and `rhs` (of `type_text`, a tensor or
    its element) as `op` compares them."""
    direction = re.search(r"comparison_direction\s+(\w+)", str(op.attributes["comparison_direction"])).group(1)
    kind = "FLOAT"
    if "compare_type" in op.attributes:
        kind = re.search(r"comparison_type\s+(\w+)", str(op.attributes["compare_type"])).group(1)
    t = TensorType(str(op.operands[0].type))
    if t.is_float:
        if kind == "TOTALORDER":
            raise ExportError("internal error: a total-order comparison goes through _total_order")
        return f"arith.cmpf {_CMP_FLOAT[direction]}, {lhs}, {rhs} : {type_text}"
    if t.is_int:
        table = _CMP_UNSIGNED if (kind == "UNSIGNED" or t.elem == "i1") else _CMP_SIGNED
        return f"arith.cmpi {table[direction]}, {lhs}, {rhs} : {type_text}"
    raise UnmappedOpError(op.name, describe_location(op.location, op), f"on {t.elem}")


def _is_total_order(op: ir.Operation) -> bool:
    return ("compare_type" in op.attributes and "TOTALORDER" in str(op.attributes["compare_type"])
            and TensorType(str(op.operands[0].type)).is_float)


def _total_order(define: Callable[[str], str], op: ir.Operation, lhs: str, rhs: str, type_text: str) -> str:
    """A TOTALORDER float comparison (what JAX's sort writes): -NaN < -inf
    < ... < -0 < +0 < ... < +inf < +NaN. The bits as a signed integer, with
    all but the sign flipped where the sign is set, order the same way."""
    direction = re.search(r"comparison_direction\s+(\w+)", str(op.attributes["comparison_direction"])).group(1)
    return _total_order_compare(define, direction, TensorType(str(op.operands[0].type)).elem, lhs, rhs, type_text)


def _total_order_compare(define: Callable[[str], str], direction: str, elem: str, lhs: str, rhs: str,
                         type_text: str) -> str:
    width = _bitwidth(elem)
    shape_text = type_text[:-len(elem) - 1] if type_text.startswith("tensor<") else None
    int_type = f"{shape_text}i{width}>" if shape_text else f"i{width}"

    def constant(value: int) -> str:
        return define(f"arith.constant dense<{value}> : {int_type}" if shape_text else f"arith.constant {value} : {int_type}")

    sign_shift, one = constant(width - 1), constant(1)
    keys = []
    for value in (lhs, rhs):
        bits = define(f"arith.bitcast {value} : {type_text} to {int_type}")
        sign = define(f"arith.shrsi {bits}, {sign_shift} : {int_type}")
        low = define(f"arith.shrui {sign}, {one} : {int_type}")
        keys.append(define(f"arith.xori {bits}, {low} : {int_type}"))
    return define(f"arith.cmpi {_CMP_SIGNED[direction]}, {keys[0]}, {keys[1]} : {int_type}")


@handles("stablehlo.compare")
def _compare(e: FunctionEmitter, op: ir.Operation):
    lhs, rhs = (e.value(v) for v in op.operands)
    if _is_total_order(op):
        return [_total_order(e.define, op, lhs, rhs, str(op.operands[0].type))]
    name = e.fresh()
    e.emit(f"{name} = {_comparison(op, lhs, rhs, str(op.operands[0].type))}")
    return [name]


@handles("stablehlo.select")
def _select(e: FunctionEmitter, op: ir.Operation):
    pred = TensorType(str(op.operands[0].type))
    t = TensorType(str(op.results[0].type))
    # A scalar predicate picks a whole operand: broadcast it.
    c = _as_shape(e, op.operands[0], TensorType(tensor_type(t.shape, pred.elem)))
    pred = TensorType(tensor_type(t.shape, pred.elem))
    a, b = (e.value(v) for v in op.operands[1:])
    name = e.fresh()
    e.emit(f"{name} = arith.select {c}, {a}, {b} : {pred}, {t}")
    return [name]


@handles("stablehlo.clamp")
def _clamp(e: FunctionEmitter, op: ir.Operation):
    t = TensorType(str(op.results[0].type))
    lo, x, hi = op.operands
    lo_name = _as_shape(e, lo, t)
    hi_name = _as_shape(e, hi, t)
    mx = "arith.maximumf" if t.is_float else "arith.maxsi"
    mn = "arith.minimumf" if t.is_float else "arith.minsi"
    a, b = e.fresh(), e.fresh()
    e.emit(f"{a} = {mx} {e.value(x)}, {lo_name} : {t}")
    e.emit(f"{b} = {mn} {a}, {hi_name} : {t}")
    return [b]


def _as_shape(e: FunctionEmitter, v: ir.Value, t: TensorType) -> str:
    """`v` (of `t`'s shape, or rank 0) as a value of `t`'s shape."""
    vt = TensorType(str(v.type))
    if vt.shape == t.shape:
        return e.value(v)
    if vt.rank != 0:
        raise ExportError(f"cannot broadcast {vt} to {t}")
    if v in e.constants and e.splat_value(e.constants[v]) is not None:
        return e.splat_constant(e.splat_value(e.constants[v]), str(t))
    out = e.empty(str(t))
    name = e.fresh()
    dims = ", ".join(str(i) for i in range(t.rank))
    e.emit(f"{name} = linalg.broadcast ins({e.value(v)} : {vt}) outs({out} : {t}) dimensions = [{dims}]")
    return name


@handles("stablehlo.convert")
def _convert(e: FunctionEmitter, op: ir.Operation):
    src = TensorType(str(op.operands[0].type))
    dst = TensorType(str(op.results[0].type))
    x = e.value(op.operands[0])
    if src.elem == dst.elem:
        return [x]
    where = describe_location(op.location, op)

    def cast(opname: str, value: str, from_t: str, to_t: str) -> str:
        name = e.fresh()
        e.emit(f"{name} = {opname} {value} : {from_t} to {to_t}")
        return name

    if src.is_float and dst.is_float:
        sb, db = _bitwidth(src.elem), _bitwidth(dst.elem)
        if sb < db:
            return [cast("arith.extf", x, str(src), str(dst))]
        if sb > db:
            return [cast("arith.truncf", x, str(src), str(dst))]
        wide = tensor_type(dst.shape, "f32")
        mid = cast("arith.extf", x, str(src), wide)
        return [cast("arith.truncf", mid, wide, str(dst))]
    if src.is_int and dst.is_float:
        unsigned = src.elem == "i1" or src.is_unsigned
        return [cast("arith.uitofp" if unsigned else "arith.sitofp", x, str(src), str(dst))]
    if src.is_float and dst.is_int:
        if dst.elem == "i1":
            zero = e.splat_constant("0.0", str(src))
            name = e.fresh()
            e.emit(f"{name} = arith.cmpf une, {x}, {zero} : {src}")
            return [name]
        return [cast("arith.fptoui" if dst.is_unsigned else "arith.fptosi", x, str(src), str(dst))]
    if src.is_int and dst.is_int:
        if dst.elem == "i1":
            zero = e.splat_constant("0", str(src))
            name = e.fresh()
            e.emit(f"{name} = arith.cmpi ne, {x}, {zero} : {src}")
            return [name]
        sb, db = _bitwidth(src.elem), _bitwidth(dst.elem)
        if sb == db:  # uint32 <-> int32: the same bits
            return [x]
        if sb < db:
            unsigned = src.elem == "i1" or src.is_unsigned
            return [cast("arith.extui" if unsigned else "arith.extsi", x, str(src), str(dst))]
        return [cast("arith.trunci", x, str(src), str(dst))]
    raise UnmappedOpError(op.name, where, f"from {src.elem} to {dst.elem}")


def _collapse(e: FunctionEmitter, x: str, src: TensorType, groups: list[list[int]], sizes: Sequence[int]) -> str:
    name = e.fresh()
    reassoc = "[" + ", ".join("[" + ", ".join(str(i) for i in g) + "]" for g in groups) + "]"
    e.emit(f"{name} = tensor.collapse_shape {x} {reassoc} : {src} into {src.with_shape(sizes)}")
    return name


def _expand(e: FunctionEmitter, x: str, src: TensorType, groups: list[list[int]], shape: Sequence[int]) -> str:
    name = e.fresh()
    reassoc = "[" + ", ".join("[" + ", ".join(str(i) for i in g) + "]" for g in groups) + "]"
    out = src.with_shape(shape)
    e.emit(f"{name} = tensor.expand_shape {x} {reassoc} output_shape [{', '.join(str(d) for d in shape)}] : {src} into {out}")
    return name


def reshape(e: FunctionEmitter, x: str, src: TensorType, shape: Sequence[int]) -> str:
    """`x` reshaped: a collapse to the common coarsening of both shapes, then
    an expand; either is left out when it would change nothing."""
    shape = tuple(shape)
    # A reshape of a reshape starts from the first one's operand.
    origin = e.reshaped.get(x)
    if origin is not None:
        x, src = origin
    if src.shape == shape:
        return x
    result = _reshape_steps(e, x, src, shape)
    e.reshaped[result] = (x, src)
    return result


def _reshape_steps(e: FunctionEmitter, x: str, src: TensorType, shape: tuple) -> str:
    if src.rank == 0 or len(shape) == 0:
        if src.rank == 0:
            return _expand(e, x, src, [], shape)
        return _collapse(e, x, src, [], ())
    groups = reassociation(src.shape, shape)
    if groups is None:
        raise ExportError(f"cannot reshape {src} to {shape}")
    src_groups, dst_groups, sizes = groups
    current, current_type = x, src
    if len(src_groups) != src.rank:
        current = _collapse(e, current, src, src_groups, sizes)
        current_type = TensorType(src.with_shape(sizes))
    if len(dst_groups) != len(shape):
        current = _expand(e, current, current_type, dst_groups, shape)
    return current


@handles("stablehlo.reshape")
def _reshape(e: FunctionEmitter, op: ir.Operation):
    src = TensorType(str(op.operands[0].type))
    dst = TensorType(str(op.results[0].type))
    v = op.operands[0]
    if v in e.constants and v not in e.names and e.splat_value(e.constants[v]) is not None:
        return [e.splat_constant(e.splat_value(e.constants[v]), str(dst))]
    return [reshape(e, e.value(v), src, dst.shape)]


def transpose(e: FunctionEmitter, x: str, src: TensorType, perm: Sequence[int]) -> tuple[str, TensorType]:
    if list(perm) == list(range(src.rank)):
        return x, src
    shape = [src.shape[p] for p in perm]
    out_type = TensorType(src.with_shape(shape))
    init = e.empty(str(out_type))
    name = e.fresh()
    e.emit(f"{name} = linalg.transpose ins({x} : {src}) outs({init} : {out_type}) permutation = [{', '.join(str(p) for p in perm)}]")
    return name, out_type


@handles("stablehlo.shift_left", "stablehlo.shift_right_logical", "stablehlo.shift_right_arithmetic")
def _shift(e: FunctionEmitter, op: ir.Operation):
    # StableHLO defines shifts by the bit width or more (0, or the sign for
    # an arithmetic right shift); arith's are poison there, so the amount
    # is checked.
    t = TensorType(str(op.results[0].type))
    if not t.is_int or t.elem == "i1":
        raise UnmappedOpError(op.name, describe_location(op.location, op), f"on {t.elem}")
    x, amount = (e.value(v) for v in op.operands)
    width = e.splat_constant(str(_bitwidth(t.elem)), str(t))
    name = e.fresh()
    if op.name == "stablehlo.shift_right_arithmetic":
        last = e.splat_constant(str(_bitwidth(t.elem) - 1), str(t))
        clamped = e.fresh()
        e.emit(f"{clamped} = arith.minui {amount}, {last} : {t}")
        e.emit(f"{name} = arith.shrsi {x}, {clamped} : {t}")
        return [name]
    arith_op = "arith.shli" if op.name == "stablehlo.shift_left" else "arith.shrui"
    shifted, big = e.fresh(), e.fresh()
    e.emit(f"{shifted} = {arith_op} {x}, {amount} : {t}")
    e.emit(f"{big} = arith.cmpi uge, {amount}, {width} : {t}")
    zero = e.splat_constant("0", str(t))
    e.emit(f"{name} = arith.select {big}, {zero}, {shifted} : {tensor_type(t.shape, 'i1')}, {t}")
    return [name]


@handles("stablehlo.bitcast_convert")
def _bitcast(e: FunctionEmitter, op: ir.Operation):
    src = TensorType(str(op.operands[0].type))
    dst = TensorType(str(op.results[0].type))
    x = e.value(op.operands[0])
    if src.shape != dst.shape or _bitwidth(src.elem) != _bitwidth(dst.elem):
        raise UnmappedOpError(op.name, describe_location(op.location, op), "between element types of other widths")
    if signless_text(src.elem) == signless_text(dst.elem):
        return [x]
    name = e.fresh()
    e.emit(f"{name} = arith.bitcast {x} : {src} to {dst}")
    return [name]


@handles("stablehlo.reverse")
def _reverse(e: FunctionEmitter, op: ir.Operation):
    # A linalg.generic that reads `n - 1 - i` along each reversed dimension:
    # a dimension indexed so has no factor (it is replicated), the others
    # keep their sharding.
    t = TensorType(str(op.results[0].type))
    dims = set(_i64s(op.attributes["dimensions"]))
    x = e.value(op.operands[0])
    dims = {d for d in dims if t.shape[d] > 1}
    if not dims:
        return [x]
    loops = ", ".join(f"d{i}" for i in range(t.rank))
    reads = ", ".join(f"-d{i} + {t.shape[i] - 1}" if i in dims else f"d{i}" for i in range(t.rank))
    iterators = ", ".join(['"parallel"'] * t.rank)
    init = e.empty(str(t))
    name = e.fresh()
    e.emit(f"{name} = linalg.generic {{indexing_maps = [affine_map<({loops}) -> ({reads})>, "
           f"affine_map<({loops}) -> ({loops})>], iterator_types = [{iterators}]}} "
           f"ins({x} : {t}) outs({init} : {t}) {{")
    e.cont(f"^bb0(%in: {t.elem}, %out: {t.elem}):")
    e.cont(f"  linalg.yield %in : {t.elem}")
    e.cont(f"}} -> {t}")
    return [name]


@handles("stablehlo.transpose")
def _transpose(e: FunctionEmitter, op: ir.Operation):
    src = TensorType(str(op.operands[0].type))
    perm = _i64s(op.attributes["permutation"])
    name, _ = transpose(e, e.value(op.operands[0]), src, perm)
    return [name]


@handles("stablehlo.broadcast_in_dim")
def _broadcast(e: FunctionEmitter, op: ir.Operation):
    src = TensorType(str(op.operands[0].type))
    dst = TensorType(str(op.results[0].type))
    dims = _i64s(op.attributes["broadcast_dimensions"])
    v = op.operands[0]
    # A splat constant broadcast is a bigger splat constant.
    if v in e.constants and e.splat_value(e.constants[v]) is not None:
        return [e.splat_constant(e.splat_value(e.constants[v]), str(dst))]
    x = e.value(v)
    # 1. Put the kept dimensions in result order.
    order = sorted(range(src.rank), key=lambda i: dims[i])
    x, src = transpose(e, x, src, order)
    dims = [dims[i] for i in order]
    # 2. Drop size-1 dimensions that the broadcast expands.
    keep = [i for i in range(src.rank) if src.shape[i] == dst.shape[dims[i]]]
    if len(keep) != src.rank:
        kept_shape = [src.shape[i] for i in keep]
        x = reshape(e, x, src, kept_shape)
        src = TensorType(src.with_shape(kept_shape))
        dims = [dims[i] for i in keep]
    # 3. Add the new dimensions: a reshape when they all have size 1
    # (expand_dims), else a linalg.broadcast.
    added = [d for d in range(dst.rank) if d not in dims]
    if not added:
        return [x]
    if all(dst.shape[d] == 1 for d in added):
        return [reshape(e, x, src, dst.shape)]
    init = e.empty(str(dst))
    name = e.fresh()
    e.emit(f"{name} = linalg.broadcast ins({x} : {src}) outs({init} : {dst}) dimensions = [{', '.join(str(d) for d in added)}]")
    return [name]


@handles("stablehlo.iota")
def _iota(e: FunctionEmitter, op: ir.Operation):
    t = TensorType(str(op.results[0].type))
    if not (t.is_float or t.is_int):
        raise UnmappedOpError(op.name, describe_location(op.location, op), f"of {t.elem}")
    return [_emit_iota(e, t, int(ir.IntegerAttr(op.attributes["iota_dimension"]).value))]


def _emit_iota(e: FunctionEmitter, t: TensorType, dim: int) -> str:
    """A tensor of type `t` (integers or floats) holding each element's
    index along `dim`: a linalg.generic over linalg.index."""
    init = e.empty(str(t))
    name = e.fresh()
    loops = ", ".join(f"d{i}" for i in range(t.rank))
    iterators = ", ".join(['"parallel"'] * t.rank)
    e.emit(f"{name} = linalg.generic {{indexing_maps = [affine_map<({loops}) -> ({loops})>], "
           f"iterator_types = [{iterators}]}} outs({init} : {t}) {{")
    e.cont(f"^bb0(%out: {t.elem}):")
    e.cont(f"  %i = linalg.index {dim} : index")
    if t.is_float:
        e.cont("  %n = arith.index_cast %i : index to i64")
        e.cont(f"  %v = arith.sitofp %n : i64 to {t.elem}")
    else:
        e.cont(f"  %v = arith.index_cast %i : index to {t.elem}")
    e.cont(f"  linalg.yield %v : {t.elem}")
    e.cont(f"}} -> {t}")
    return name


def _cast_scalar(src: str, dst: str, value: str, out: str) -> list[str]:
    if src == dst:
        return []
    if src in _FLOAT_TYPES and dst in _FLOAT_TYPES:
        op = "arith.extf" if _bitwidth(src) < _bitwidth(dst) else "arith.truncf"
        return [f"{out} = {op} {value} : {src} to {dst}"]
    if src in _INT_TYPES and dst in _FLOAT_TYPES:
        return [f"{out} = arith.sitofp {value} : {src} to {dst}"]
    if src in _INT_TYPES and dst in _INT_TYPES and _bitwidth(src) < _bitwidth(dst):
        return [f"{out} = arith.extsi {value} : {src} to {dst}"]
    raise ExportError(f"cannot accumulate {src} in {dst}")


@handles("stablehlo.dot_general")
def _dot_general(e: FunctionEmitter, op: ir.Operation):
    from jaxlib.mlir.dialects import stablehlo

    numbers = stablehlo.DotDimensionNumbers(op.attributes["dot_dimension_numbers"])
    lb, rb = list(numbers.lhs_batching_dimensions), list(numbers.rhs_batching_dimensions)
    lc, rc = list(numbers.lhs_contracting_dimensions), list(numbers.rhs_contracting_dimensions)
    lt, rt = TensorType(str(op.operands[0].type)), TensorType(str(op.operands[1].type))
    ot = TensorType(str(op.results[0].type))
    if not ((lt.is_float and ot.is_float) or (lt.is_int and ot.is_int and lt.elem != "i1")):
        raise UnmappedOpError(op.name, describe_location(op.location, op), f"on {lt.elem} -> {ot.elem}")
    lhs, rhs = e.value(op.operands[0]), e.value(op.operands[1])
    zero = e.scalar_constant("0.0" if ot.is_float else "0", ot.elem)
    acc = e.filled(str(ot), zero, ot.elem)
    same = lt.elem == rt.elem == ot.elem
    if same and not lb and lc == [1] and rc == [0] and lt.rank == 2 and rt.rank == 2:
        name = e.fresh()
        e.emit(f"{name} = linalg.matmul ins({lhs}, {rhs} : {lt}, {rt}) outs({acc} : {ot}) -> {ot}")
        return [name]
    if same and lb == [0] and rb == [0] and lc == [2] and rc == [1] and lt.rank == 3 and rt.rank == 3:
        name = e.fresh()
        e.emit(f"{name} = linalg.batch_matmul ins({lhs}, {rhs} : {lt}, {rt}) outs({acc} : {ot}) -> {ot}")
        return [name]
    # General case: one loop per result dimension (batch, lhs free, rhs free)
    # then one per contracted pair.
    lfree = [d for d in range(lt.rank) if d not in lb and d not in lc]
    rfree = [d for d in range(rt.rank) if d not in rb and d not in rc]
    nb, nl, nr, nc = len(lb), len(lfree), len(rfree), len(lc)
    loops = nb + nl + nr + nc
    lmap = [""] * lt.rank
    rmap = [""] * rt.rank
    for k, (a, b) in enumerate(zip(lb, rb)):
        lmap[a] = rmap[b] = f"d{k}"
    for k, a in enumerate(lfree):
        lmap[a] = f"d{nb + k}"
    for k, b in enumerate(rfree):
        rmap[b] = f"d{nb + nl + k}"
    for k, (a, b) in enumerate(zip(lc, rc)):
        lmap[a] = rmap[b] = f"d{nb + nl + nr + k}"
    dvars = ", ".join(f"d{i}" for i in range(loops))
    omap = ", ".join(f"d{i}" for i in range(nb + nl + nr))
    iters = ", ".join(['"parallel"'] * (nb + nl + nr) + ['"reduction"'] * nc)
    name = e.fresh()
    e.emit(f"{name} = linalg.generic {{indexing_maps = [affine_map<({dvars}) -> ({', '.join(lmap)})>, "
           f"affine_map<({dvars}) -> ({', '.join(rmap)})>, affine_map<({dvars}) -> ({omap})>], "
           f"iterator_types = [{iters}]}} ins({lhs}, {rhs} : {lt}, {rt}) outs({acc} : {ot}) {{")
    e.cont(f"^bb0(%a: {lt.elem}, %b: {rt.elem}, %acc: {ot.elem}):")
    body = _cast_scalar(lt.elem, ot.elem, "%a", "%ca") + _cast_scalar(rt.elem, ot.elem, "%b", "%cb")
    for line in body:
        e.cont("  " + line)
    a = "%ca" if lt.elem != ot.elem else "%a"
    b = "%cb" if rt.elem != ot.elem else "%b"
    mul, add = ("arith.mulf", "arith.addf") if ot.is_float else ("arith.muli", "arith.addi")
    e.cont(f"  %p = {mul} {a}, {b} : {ot.elem}")
    e.cont(f"  %s = {add} %acc, %p : {ot.elem}")
    e.cont(f"  linalg.yield %s : {ot.elem}")
    e.cont(f"}} -> {ot}")
    return [name]


_COMBINERS = {
    "stablehlo.add": ("arith.addf", "arith.addi", "arith.ori"),
    "stablehlo.multiply": ("arith.mulf", "arith.muli", "arith.andi"),
    "stablehlo.maximum": ("arith.maximumf", "arith.maxsi", "arith.ori"),
    "stablehlo.minimum": ("arith.minimumf", "arith.minsi", "arith.andi"),
    "stablehlo.and": (None, "arith.andi", "arith.andi"),
    "stablehlo.or": (None, "arith.ori", "arith.ori"),
}


def _single_combiner(op: ir.Operation, t: TensorType, where: str, what: str) -> str:
    """The arith op of a region that combines its two arguments with one
    add/mul/max/min/and/or and returns the result (a reduce's or a
    reduce_window's body)."""
    body = [o.operation for o in op.regions[0].blocks[0].operations]
    block_args = list(op.regions[0].blocks[0].arguments)
    if (len(body) != 2 or body[0].name not in _COMBINERS or body[1].name != "stablehlo.return"
            or set(body[0].operands) != set(block_args) or list(body[1].operands) != [body[0].results[0]]):
        raise UnmappedOpError(op.name, where, f"{what} other than one add/mul/max/min/and/or")
    return _pick(_COMBINERS[body[0].name], t, op)


@handles("stablehlo.reduce")
def _reduce(e: FunctionEmitter, op: ir.Operation):
    where = describe_location(op.location, op)
    if len(op.results) != 1:
        return _reduce_several(e, op, where)
    x_value, init_value = op.operands
    xt = TensorType(str(x_value.type))
    ot = TensorType(str(op.results[0].type))
    dims = sorted(_i64s(op.attributes["dimensions"]))
    combiner = _single_combiner(op, xt, where, "a reduction body")
    # The initial value: a scalar for linalg.fill.
    init = _scalar_of(e, init_value, ot.elem)
    acc = e.filled(str(ot), init, ot.elem)
    x = e.value(x_value)
    name = e.fresh()
    e.emit(f"{name} = linalg.reduce ins({x} : {xt}) outs({acc} : {ot}) dimensions = [{', '.join(str(d) for d in dims)}]")
    e.cont(f"  (%in: {xt.elem}, %init: {ot.elem}) {{")
    e.cont(f"    %r = {combiner} %in, %init : {ot.elem}")
    e.cont(f"    linalg.yield %r : {ot.elem}")
    e.cont("  }")
    return [name]


def _scalar_body(block: ir.Block, names: dict, where: str, prefix: str = "%s") -> tuple[list[str], list[str]]:
    """A reduction body on 0-d tensors as scalar `arith` statements, the
    block's arguments named by `names`; returns the statements and the
    names of the returned scalars. Compares, selects, the binary ops and
    splat constants: what JAX's argmax/argmin and multi-value reductions
    write."""
    lines: list[str] = []
    counter = 0

    def fresh() -> str:
        nonlocal counter
        counter += 1
        return f"{prefix}{counter}"

    def define(text: str) -> str:
        name = fresh()
        lines.append(f"{name} = {text}")
        return name

    for operation in block.operations:
        op = operation.operation
        if op.name == "stablehlo.return":
            return lines, [names[v] for v in op.operands]
        if any(TensorType(str(v.type)).rank for v in list(op.operands) + list(op.results)):
            raise UnmappedOpError(op.name, where, "a reduction body op on a tensor of rank > 0")
        if op.name in ("sdy.sharding_constraint", "sdy.reshard"):
            # Explicit axes pin the body's scalars to the mesh: a no-op.
            names[op.results[0]] = names[op.operands[0]]
            continue
        t = TensorType(str(op.results[0].type))
        out = fresh()
        args = [names[v] for v in op.operands]
        if op.name == "stablehlo.constant":
            value = FunctionEmitter.splat_value(str(op.attributes["value"]))
            lines.append(f"{out} = arith.constant {value}" + ("" if t.elem == "i1" else f" : {t.elem}"))
        elif op.name == "stablehlo.compare" and _is_total_order(op):
            elem = TensorType(str(op.operands[0].type)).elem
            out = _total_order(define, op, args[0], args[1], elem)
        elif op.name == "stablehlo.compare":
            elem = TensorType(str(op.operands[0].type)).elem
            lines.append(f"{out} = {_comparison(op, args[0], args[1], elem)}")
        elif op.name == "stablehlo.select":
            lines.append(f"{out} = arith.select {args[0]}, {args[1]}, {args[2]} : {t.elem}")
        elif op.name in _BINARY or op.name in _COMBINERS:
            chosen = _pick(_BINARY.get(op.name) or _COMBINERS[op.name], t, op)
            lines.append(f"{out} = {chosen} {args[0]}, {args[1]} : {t.elem}")
        else:
            raise UnmappedOpError(op.name, where, "in a reduction body")
        names[op.results[0]] = out
    raise ExportError("internal error: a reduction body without a return")


def _reduce_several(e: FunctionEmitter, op: ir.Operation, where: str):
    """A reduction of N values at once (argmax: values and their indices):
    one `linalg.reduce` with N inputs and N accumulators, its body the
    StableHLO reducer as scalar code. XLA calls the reducer with the
    accumulators first, then the elements."""
    n = len(op.results)
    inputs, inits = list(op.operands[:n]), list(op.operands[n:])
    input_types = [TensorType(str(v.type)) for v in inputs]
    result_types = [TensorType(str(r.type)) for r in op.results]
    dims = sorted(_i64s(op.attributes["dimensions"]))
    accs = [e.filled(str(t), _scalar_of(e, init, t.elem), t.elem) for init, t in zip(inits, result_types)]
    xs = [e.value(v) for v in inputs]
    block = op.regions[0].blocks[0]
    arguments = list(block.arguments)
    names = {arg: f"%init{k}" for k, arg in enumerate(arguments[:n])}
    names.update({arg: f"%in{k}" for k, arg in enumerate(arguments[n:])})
    lines, returned = _scalar_body(block, names, where)
    name = e.fresh()
    e.emit(f"{name}:{n} = linalg.reduce ins({', '.join(xs)} : {', '.join(str(t) for t in input_types)}) "
           f"outs({', '.join(accs)} : {', '.join(str(t) for t in result_types)}) "
           f"dimensions = [{', '.join(str(d) for d in dims)}]")
    block_args = [f"%in{k}: {t.elem}" for k, t in enumerate(input_types)]
    block_args += [f"%init{k}: {t.elem}" for k, t in enumerate(result_types)]
    e.cont(f"  ({', '.join(block_args)}) {{")
    for line in lines:
        e.cont(f"    {line}")
    e.cont(f"    linalg.yield {', '.join(returned)} : {', '.join(t.elem for t in result_types)}")
    e.cont("  }")
    return [f"{name}#{k}" for k in range(n)]


@handles("sdy.sharding_constraint")
def _constraint(e: FunctionEmitter, op: ir.Operation):
    sharding = e.sharding(str(op.attributes["sharding"]), "sharding constraint")
    name = e.fresh()
    e.emit(f"{name} = polymesh.sharding_constraint {e.value(op.operands[0])} {sharding.body_text()} : {op.results[0].type}")
    return [name]


@handles("sdy.reshard")
def _reshard(e: FunctionEmitter, op: ir.Operation):
    sharding = e.sharding(str(op.attributes["sharding"]), "reshard")
    name = e.fresh()
    e.emit(f"{name} = polymesh.reshard {e.value(op.operands[0])} {sharding.body_text()} : {op.results[0].type}")
    return [name]


@handles("func.call")
def _call(e: FunctionEmitter, op: ir.Operation):
    callee = ir.FlatSymbolRefAttr(op.attributes["callee"]).value
    func = e.functions.get(callee)
    if func is None:
        raise UnmappedOpError(op.name, describe_location(op.location, op), f"call of unknown @{callee}")
    if e.inline_depth > 64:
        raise ExportError(f"calls nest too deeply at @{callee}")
    block = func.regions[0].blocks[0]
    for arg, operand in zip(block.arguments, op.operands):
        e.names.pop(arg, None)
        e.constants.pop(arg, None)
        if operand in e.constants and operand not in e.names:
            e.constants[arg] = e.constants[operand]
        else:
            e.names[arg] = e.value(operand)
    e.inline_depth += 1
    try:
        outputs = e.emit_block(block)
    finally:
        e.inline_depth -= 1
    return outputs


@handles("stablehlo.optimization_barrier")
def _barrier(e: FunctionEmitter, op: ir.Operation):
    # Only scheduling: every operand is returned unchanged.
    return [e.value(v) for v in op.operands]


@handles("chlo.square")
def _square(e: FunctionEmitter, op: ir.Operation):
    t = TensorType(str(op.results[0].type))
    x = e.value(op.operands[0])
    name = e.fresh()
    e.emit(f"{name} = {'arith.mulf' if t.is_float else 'arith.muli'} {x}, {x} : {t}")
    return [name]


@handles("stablehlo.slice")
def _slice(e: FunctionEmitter, op: ir.Operation):
    # Dimensions taken whole keep their sharding (docs/propagation.md). A
    # slice that takes every element is left out.
    src = TensorType(str(op.operands[0].type))
    dst = TensorType(str(op.results[0].type))
    starts = _i64s(op.attributes["start_indices"])
    strides = _i64s(op.attributes["strides"])
    x = e.value(op.operands[0])
    if src.shape == dst.shape:
        return [x]
    name = e.fresh()
    join = lambda values: ", ".join(str(v) for v in values)  # noqa: E731
    e.emit(f"{name} = tensor.extract_slice {x}[{join(starts)}] [{join(dst.shape)}] [{join(strides)}] : {src} to {dst}")
    return [name]


@handles("stablehlo.concatenate")
def _concatenate(e: FunctionEmitter, op: ir.Operation):
    dim = int(ir.IntegerAttr(op.attributes["dimension"]).value)
    dst = TensorType(str(op.results[0].type))
    names = [e.value(v) for v in op.operands]
    types = ", ".join(str(v.type) for v in op.operands)
    if len(names) == 1:
        return names
    name = e.fresh()
    e.emit(f"{name} = tensor.concat dim({dim}) {', '.join(names)} : ({types}) -> {dst}")
    return [name]


def _scalar_of(e: FunctionEmitter, v: ir.Value, elem: str) -> str:
    """A 0-d tensor operand as a scalar: the constant itself where it is a
    splat, else `tensor.extract`."""
    if v in e.constants and e.splat_value(e.constants[v]) is not None:
        return e.scalar_constant(e.splat_value(e.constants[v]), elem)
    name = e.fresh()
    e.emit(f"{name} = tensor.extract {e.value(v)}[] : {v.type}")
    return name


@handles("stablehlo.pad")
def _pad(e: FunctionEmitter, op: ir.Operation):
    # tensor.pad by a constant value: dimensions padded by nothing keep
    # their sharding (docs/propagation.md).
    src = TensorType(str(op.operands[0].type))
    dst = TensorType(str(op.results[0].type))
    low = _i64s(op.attributes["edge_padding_low"])
    high = _i64s(op.attributes["edge_padding_high"])
    interior = _i64s(op.attributes["interior_padding"])
    if any(interior) or any(p < 0 for p in low + high):
        raise UnmappedOpError(op.name, describe_location(op.location, op),
                              "interior or negative padding (a strided or cropping pad)")
    x = e.value(op.operands[0])
    if not any(low) and not any(high):
        return [x]
    value = _scalar_of(e, op.operands[1], src.elem)
    name = e.fresh()
    join = lambda values: ", ".join(str(v) for v in values)  # noqa: E731
    indices = ", ".join(f"%i{d}: index" for d in range(src.rank))
    e.emit(f"{name} = tensor.pad {x} low[{join(low)}] high[{join(high)}] {{")
    e.cont(f"^bb0({indices}):")
    e.cont(f"  tensor.yield {value} : {src.elem}")
    e.cont(f"}} : {src} to {dst}")
    return [name]


def _clamped_starts(e: FunctionEmitter, op: ir.Operation, starts: Sequence[ir.Value], shape: Sequence[int],
                    sizes: Sequence[int]) -> list[str]:
    """StableHLO's start indices, clamped to [0, dim - size] as its dynamic
    slices define them; a dimension taken whole starts at a static 0, so
    that its sharding is kept."""
    offsets = []
    for start, extent, size in zip(starts, shape, sizes):
        if size == extent:
            offsets.append("0")
            continue
        start_type = TensorType(str(start.type))
        if not start_type.is_int or start_type.elem == "i1":
            raise UnmappedOpError(op.name, describe_location(op.location, op), f"start index of type {start.type}")
        scalar = _scalar_of(e, start, start_type.elem)
        index = e.fresh()
        e.emit(f"{index} = arith.index_cast {scalar} : {start_type.elem} to index")
        low, high = e.fresh(), e.fresh()
        e.emit(f"{low} = arith.constant 0 : index")
        e.emit(f"{high} = arith.constant {extent - size} : index")
        above, clamped = e.fresh(), e.fresh()
        e.emit(f"{above} = arith.maxsi {index}, {low} : index")
        e.emit(f"{clamped} = arith.minsi {above}, {high} : index")
        offsets.append(clamped)
    return offsets


@handles("stablehlo.dynamic_slice")
def _dynamic_slice(e: FunctionEmitter, op: ir.Operation):
    src = TensorType(str(op.operands[0].type))
    dst = TensorType(str(op.results[0].type))
    offsets = _clamped_starts(e, op, list(op.operands[1:]), src.shape, dst.shape)
    x = e.value(op.operands[0])
    if src.shape == dst.shape:
        return [x]
    name = e.fresh()
    e.emit(f"{name} = tensor.extract_slice {x}[{', '.join(offsets)}] [{', '.join(str(d) for d in dst.shape)}] "
           f"[{', '.join('1' for _ in dst.shape)}] : {src} to {dst}")
    return [name]


@handles("stablehlo.dynamic_update_slice")
def _dynamic_update_slice(e: FunctionEmitter, op: ir.Operation):
    dst = TensorType(str(op.operands[0].type))
    update = TensorType(str(op.operands[1].type))
    offsets = _clamped_starts(e, op, list(op.operands[2:]), dst.shape, update.shape)
    x, u = e.value(op.operands[0]), e.value(op.operands[1])
    if dst.shape == update.shape:
        return [u]
    name = e.fresh()
    e.emit(f"{name} = tensor.insert_slice {u} into {x}[{', '.join(offsets)}] "
           f"[{', '.join(str(d) for d in update.shape)}] [{', '.join('1' for _ in update.shape)}] : {update} into {dst}")
    return [name]


_INFINITY = {"f32": "0x7F800000", "f64": "0x7FF0000000000000", "f16": "0x7C00", "bf16": "0x7F80"}


@handles("stablehlo.is_finite")
def _is_finite(e: FunctionEmitter, op: ir.Operation):
    # |x| < inf, ordered: false for infinities and NaN.
    t = TensorType(str(op.operands[0].type))
    x = e.value(op.operands[0])
    magnitude = e.fresh()
    e.emit(f"{magnitude} = math.absf {x} : {t}")
    infinity = e.splat_constant(_INFINITY[t.elem], str(t))
    name = e.fresh()
    e.emit(f"{name} = arith.cmpf olt, {magnitude}, {infinity} : {t}")
    return [name]


@handles("stablehlo.sign")
def _sign(e: FunctionEmitter, op: ir.Operation):
    # 1 above zero, -1 below, x itself otherwise (keeps -0, 0 and NaN).
    t = TensorType(str(op.results[0].type))
    if not (t.is_float or (t.is_int and t.elem != "i1")):
        raise UnmappedOpError(op.name, describe_location(op.location, op), f"on {t.elem}")
    x = e.value(op.operands[0])
    i1 = tensor_type(t.shape, "i1")
    zero = e.splat_constant("0.0" if t.is_float else "0", str(t))
    above, below, inner, name = e.fresh(), e.fresh(), e.fresh(), e.fresh()
    cmp, gt, lt = ("arith.cmpf", "ogt", "olt") if t.is_float else ("arith.cmpi", "sgt", "slt")
    e.emit(f"{above} = {cmp} {gt}, {x}, {zero} : {t}")
    e.emit(f"{below} = {cmp} {lt}, {x}, {zero} : {t}")
    one = e.splat_constant("1.0" if t.is_float else "1", str(t))
    minus_one = e.splat_constant("-1.0" if t.is_float else "-1", str(t))
    e.emit(f"{inner} = arith.select {below}, {minus_one}, {x} : {i1}, {t}")
    e.emit(f"{name} = arith.select {above}, {one}, {inner} : {i1}, {t}")
    return [name]


_GATHER_KEYS = ("offset_dims", "collapsed_slice_dims", "operand_batching_dims", "start_indices_batching_dims",
                "start_index_map")
_SCATTER_KEYS = ("update_window_dims", "inserted_window_dims", "input_batching_dims",
                 "scatter_indices_batching_dims", "scatter_dims_to_operand_dims")


def _gather_numbers(op: ir.Operation, keys: Sequence[str] = _GATHER_KEYS, attribute: str = "dimension_numbers") -> dict:
    text = str(op.attributes[attribute])
    numbers = {}
    for key in keys:
        match = re.search(key + r" = \[([^\]]*)\]", text)
        numbers[key] = [int(v) for v in match.group(1).split(",") if v.strip()] if match else []
    # Printed only where it is not 0.
    match = re.search(r"index_vector_dim = (\d+)", text)
    numbers["index_vector_dim"] = int(match.group(1)) if match else 0
    return numbers


def _index_components(e: FunctionEmitter, indices_value: ir.Value, ivd: int) -> tuple[list[str], str]:
    """A gather's or scatter's start indices as one tensor per index vector
    component, each over the indices' other dimensions in order (the
    unit dimension dropped): inputs of a linalg.generic, so that they keep
    their sharding along those dimensions. Returns them and their type."""
    indices = TensorType(str(indices_value.type))
    index_dims = [d for d in range(indices.rank) if d != ivd]
    components = indices.shape[ivd] if ivd < indices.rank else 1
    elem = indices.elem
    batch_type = tensor_type([indices.shape[d] for d in index_dims], elem)
    x = e.value(indices_value)
    if ivd == indices.rank:
        return [x], batch_type
    inputs = []
    one = [1 if d == ivd else n for d, n in enumerate(indices.shape)]
    # Drop the unit dimension: it joins its neighbour's group.
    groups = [[d] for d in index_dims]
    if groups and ivd > 0:
        groups[ivd - 1].append(ivd)
    elif groups:
        groups[0].insert(0, ivd)
    for k in range(components):
        offsets = [k if d == ivd else 0 for d in range(indices.rank)]
        sliced = e.define(f"tensor.extract_slice {x}[{', '.join(map(str, offsets))}] "
                          f"[{', '.join(map(str, one))}] [{', '.join('1' for _ in one)}] : {indices} to "
                          f"{tensor_type(one, elem)}")
        inputs.append(e.define(
            f"tensor.collapse_shape {sliced} [{', '.join('[' + ', '.join(map(str, g)) + ']' for g in groups)}]"
            f" : {tensor_type(one, elem)} into {batch_type}"))
    return inputs, batch_type


@handles("stablehlo.gather")
def _gather(e: FunctionEmitter, op: ir.Operation):
    """A `linalg.generic` over the result: each index vector component is an
    input (a slice of the indices along index_vector_dim) read at the
    result's batch dimensions; the body computes the operand index (the
    start, clamped to [0, dim - slice size] as StableHLO defines it, plus the
    offset from linalg.index) and reads the operand from above with
    tensor.extract. Propagation places the operand whole on the op's mesh
    (docs/propagation.md, section 11)."""
    where = describe_location(op.location, op)
    operand_value, indices_value = op.operands
    operand = TensorType(str(operand_value.type))
    indices = TensorType(str(indices_value.type))
    out = TensorType(str(op.results[0].type))
    if not indices.is_int or indices.elem == "i1":
        raise UnmappedOpError(op.name, where, f"indices of {indices.elem}")
    numbers = _gather_numbers(op)
    sizes = _i64s(op.attributes["slice_sizes"])
    ivd = numbers["index_vector_dim"]
    offset_dims = numbers["offset_dims"]
    batch_out = [d for d in range(out.rank) if d not in offset_dims]
    # The indices' dimensions other than index_vector_dim, in order, are the
    # result's batch dimensions.
    index_dims = [d for d in range(indices.rank) if d != ivd]
    components = indices.shape[ivd] if ivd < indices.rank else 1
    elem = indices.elem
    inputs, batch_type = _index_components(e, indices_value, ivd)
    loops = ", ".join(f"d{i}" for i in range(out.rank))
    batch_map = f"affine_map<({loops}) -> ({', '.join(f'd{d}' for d in batch_out)})>"
    out_map = f"affine_map<({loops}) -> ({loops})>"
    empty = e.empty(str(out))
    table = e.value(operand_value)
    cast = "arith.index_castui" if indices.is_unsigned else "arith.index_cast"
    arguments = [f"%s{k}: {elem}" for k in range(components)] + [f"%o: {out.elem}"]
    body = [f"^bb0({', '.join(arguments)}):"]
    body.append("  %zero = arith.constant 0 : index")
    offset_operand_dims = [d for d in range(operand.rank)
                           if d not in numbers["collapsed_slice_dims"] and d not in numbers["operand_batching_dims"]]
    coordinates = []
    for d in range(operand.rank):
        terms = []
        if d in numbers["start_index_map"]:
            k = numbers["start_index_map"].index(d)
            body.append(f"  %start{d} = {cast} %s{k} : {elem} to index")
            body.append(f"  %high{d} = arith.constant {operand.shape[d] - sizes[d]} : index")
            body.append(f"  %above{d} = arith.maxsi %start{d}, %zero : index")
            body.append(f"  %clamped{d} = arith.minsi %above{d}, %high{d} : index")
            terms.append(f"%clamped{d}")
        if d in numbers["operand_batching_dims"]:
            indices_dim = numbers["start_indices_batching_dims"][numbers["operand_batching_dims"].index(d)]
            body.append(f"  %batch{d} = linalg.index {batch_out[index_dims.index(indices_dim)]} : index")
            terms.append(f"%batch{d}")
        if d in offset_operand_dims:
            body.append(f"  %offset{d} = linalg.index {offset_dims[offset_operand_dims.index(d)]} : index")
            terms.append(f"%offset{d}")
        if not terms:
            coordinates.append("%zero")
        elif len(terms) == 1:
            coordinates.append(terms[0])
        else:
            body.append(f"  %at{d} = arith.addi {terms[0]}, {terms[1]} : index")
            coordinates.append(f"%at{d}")
    body.append(f"  %read = tensor.extract {table}[{', '.join(coordinates)}] : {operand}")
    body.append(f"  linalg.yield %read : {out.elem}")
    name = e.fresh()
    maps = ", ".join([batch_map] * components + [out_map])
    iterators = ", ".join(['"parallel"'] * out.rank)
    e.emit(f"{name} = linalg.generic {{indexing_maps = [{maps}], iterator_types = [{iterators}]}} "
           + (f"ins({', '.join(inputs)} : {', '.join([batch_type] * components)}) " if inputs else "")
           + f"outs({empty} : {out}) {{")
    for line in body:
        e.cont(line)
    e.cont(f"}} -> {out}")
    return [name]


# The identity of a scatter's combiner where its contributions are summed
# apart from the operand: -0.0 is the one float x with x + -0.0 == x for
# every x (+0.0 turns -0.0 into +0.0).
_ADD_IDENTITY = {"f32": "-0.0", "f64": "-0.0", "f16": "-0.0", "bf16": "-0.0"}


def _update_kind(op: ir.Operation, where: str) -> str:
    """What a scatter's update_computation does with (current, update):
    "set" when it returns the update, else the StableHLO combiner's name."""
    block = op.regions[0].blocks[0]
    current, update = list(block.arguments)
    body = [o.operation for o in block.operations]
    if len(body) == 1 and list(body[0].operands) == [update]:
        return "set"
    if (len(body) == 2 and body[0].name in _COMBINERS and body[1].name == "stablehlo.return"
            and set(body[0].operands) == {current, update} and list(body[1].operands) == [body[0].results[0]]):
        return body[0].name
    raise UnmappedOpError(op.name, where, "an update computation other than set or one add/mul/max/min/and/or")


@handles("stablehlo.scatter")
def _scatter(e: FunctionEmitter, op: ir.Operation):
    """A `linalg.generic` over the operand's dimensions (parallel) and the
    updates' scatter dimensions (reductions, but those tied to an operand
    batching dimension): each point of the result takes the updates whose
    window covers it. Index components are inputs read at the scatter
    dimensions; updates are an input too where every window dimension
    spans its operand dimension (x.at[i].set(v), an embedding's gradient),
    else read from above. An add is summed from -0.0 and then added to the
    operand, so that a split scatter dimension is an ordinary partial sum;
    set and the other combiners start from the operand and keep the scatter
    dimensions whole (docs/jax.md)."""
    where = describe_location(op.location, op)
    if len(op.operands) != 3:
        raise UnmappedOpError(op.name, where, "a scatter of several operands")
    operand_value, indices_value, updates_value = op.operands
    operand = TensorType(str(operand_value.type))
    indices = TensorType(str(indices_value.type))
    updates = TensorType(str(updates_value.type))
    if not indices.is_int or indices.elem == "i1":
        raise UnmappedOpError(op.name, where, f"indices of {indices.elem}")
    kind = _update_kind(op, where)
    combiner = None if kind == "set" else _pick(_COMBINERS[kind], operand, op)
    numbers = _gather_numbers(op, _SCATTER_KEYS, "scatter_dimension_numbers")
    ivd = numbers["index_vector_dim"]
    window_dims = numbers["update_window_dims"]
    scattered = numbers["scatter_dims_to_operand_dims"]
    batching = numbers["input_batching_dims"]
    window_operand_dims = [d for d in range(operand.rank)
                           if d not in numbers["inserted_window_dims"] and d not in batching]
    update_scatter_dims = [d for d in range(updates.rank) if d not in window_dims]
    index_dims = [d for d in range(indices.rank) if d != ivd]
    window_size = {d: updates.shape[window_dims[i]] for i, d in enumerate(window_operand_dims)}
    # Loops: the operand's dimensions, then one reduction per scatter
    # dimension of the indices that is not a batching dimension (those
    # run with the operand's batching dimension).
    loop_of_index_dim, reductions = {}, []
    for j in index_dims:
        if j in numbers["scatter_indices_batching_dims"]:
            loop_of_index_dim[j] = batching[numbers["scatter_indices_batching_dims"].index(j)]
        else:
            loop_of_index_dim[j] = operand.rank + len(reductions)
            reductions.append(indices.shape[j])
    loops = [f"d{i}" for i in range(operand.rank + len(reductions))]
    index_map = f"affine_map<({', '.join(loops)}) -> ({', '.join(f'd{loop_of_index_dim[j]}' for j in index_dims)})>"
    out_map = f"affine_map<({', '.join(loops)}) -> ({', '.join(loops[:operand.rank])})>"
    components, batch_type = _index_components(e, indices_value, ivd)
    # Updates as an input: their window dimensions run with the operand's.
    updates_affine = all(window_size[d] == operand.shape[d] for d in window_operand_dims)
    update_loops = []
    for u in range(updates.rank):
        if u in window_dims:
            update_loops.append(f"d{window_operand_dims[window_dims.index(u)]}")
        else:
            update_loops.append(f"d{loop_of_index_dim[index_dims[update_scatter_dims.index(u)]]}")
    update_map = f"affine_map<({', '.join(loops)}) -> ({', '.join(update_loops)})>"
    cast = "arith.index_castui" if indices.is_unsigned else "arith.index_cast"
    elem = operand.elem
    identity = None
    if kind == "stablehlo.add":
        identity = _ADD_IDENTITY.get(elem, "false" if elem == "i1" else "0")
    arguments = [f"%s{k}: {indices.elem}" for k in range(len(components))]
    if updates_affine:
        arguments.append(f"%u: {elem}")
    arguments.append(f"%acc: {elem}")
    body = [f"^bb0({', '.join(arguments)}):", "  %zero = arith.constant 0 : index",
            "  %true = arith.constant true"]
    hit = "%true"
    starts = {}
    for k, d in enumerate(scattered):
        size = window_size.get(d, 1)
        body += [f"  %start{d} = {cast} %s{k} : {indices.elem} to index",
                 f"  %p{d} = linalg.index {d} : index",
                 f"  %last{d} = arith.constant {operand.shape[d] - size} : index",
                 f"  %ge{d} = arith.cmpi sge, %start{d}, %zero : index",
                 f"  %le{d} = arith.cmpi sle, %start{d}, %last{d} : index",
                 f"  %w{d} = arith.subi %p{d}, %start{d} : index",
                 f"  %size{d} = arith.constant {size} : index",
                 f"  %wlo{d} = arith.cmpi sge, %w{d}, %zero : index",
                 f"  %whi{d} = arith.cmpi slt, %w{d}, %size{d} : index",
                 f"  %in{d}a = arith.andi %ge{d}, %le{d} : i1",
                 f"  %in{d}b = arith.andi %wlo{d}, %whi{d} : i1",
                 f"  %in{d}c = arith.andi %in{d}a, %in{d}b : i1",
                 f"  %hit{d} = arith.andi {hit}, %in{d}c : i1"]
        hit = f"%hit{d}"
        starts[d] = f"%w{d}"
    if updates_affine:
        value = "%u"
    else:
        # Read the update from above at the window position, clamped into
        # the updates where this point takes none.
        table = e.value(updates_value)
        coordinates = []
        for u in range(updates.rank):
            if u not in window_dims:
                loop = loop_of_index_dim[index_dims[update_scatter_dims.index(u)]]
                body.append(f"  %q{u} = linalg.index {loop} : index")
                coordinates.append(f"%q{u}")
                continue
            d = window_operand_dims[window_dims.index(u)]
            if d in starts:
                position = starts[d]
            else:
                body.append(f"  %p{d} = linalg.index {d} : index")
                body += [f"  %size{d} = arith.constant {window_size[d]} : index",
                         f"  %inside{d} = arith.cmpi slt, %p{d}, %size{d} : index",
                         f"  %hit{d} = arith.andi {hit}, %inside{d} : i1"]
                hit = f"%hit{d}"
                position = f"%p{d}"
            body += [f"  %top{u} = arith.constant {updates.shape[u] - 1} : index",
                     f"  %lo{u} = arith.maxsi {position}, %zero : index",
                     f"  %q{u} = arith.minsi %lo{u}, %top{u} : index"]
            coordinates.append(f"%q{u}")
        body.append(f"  %v = tensor.extract {table}[{', '.join(coordinates)}] : {updates}")
        value = "%v"
    if identity is not None:
        body += [f"  %identity = arith.constant {identity} : {elem}",
                 f"  %taken = arith.select {hit}, {value}, %identity : {elem}",
                 f"  %r = {combiner} %acc, %taken : {elem}"]
    elif combiner is None:
        body.append(f"  %r = arith.select {hit}, {value}, %acc : {elem}")
    else:
        body += [f"  %c = {combiner} %acc, {value} : {elem}",
                 f"  %r = arith.select {hit}, %c, %acc : {elem}"]
    body.append(f"  linalg.yield %r : {elem}")
    x = e.value(operand_value)
    init = e.filled(str(operand), e.scalar_constant(identity, elem), elem) if identity is not None else x
    inputs = list(components) + ([e.value(updates_value)] if updates_affine else [])
    types = [batch_type] * len(components) + ([str(updates)] if updates_affine else [])
    maps = [index_map] * len(components) + ([update_map] if updates_affine else []) + [out_map]
    iterators = ['"parallel"'] * operand.rank + ['"reduction"'] * len(reductions)
    name = e.fresh()
    e.emit(f"{name} = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{', '.join(iterators)}]}} "
           f"ins({', '.join(inputs)} : {', '.join(types)}) outs({init} : {operand}) {{")
    for line in body:
        e.cont(line)
    e.cont(f"}} -> {operand}")
    if identity is None:
        return [name]
    return [e.define(f"{combiner} {x}, {name} : {operand}")]


def _dense_ints(attr: ir.Attribute, count: int) -> list[int]:
    """The integers of a dense elements attribute (`dense<[[1, 0]]> :
    tensor<1x2xi64>`, or a splat), `count` of them."""
    match = re.match(r"dense<(.*)>\s*:", str(attr), re.S)
    values = [int(v) for v in re.findall(r"-?\d+", match.group(1))] if match else []
    if len(values) == 1 and count > 1:
        values *= count
    if len(values) != count:
        raise ExportError(f"internal error: expected {count} integers in {attr}")
    return values


def _sum_identity(elem: str) -> tuple[str, str]:
    """The add that sums exactly one non-identity term among identities,
    and that identity: -0.0 for floats (see _ADD_IDENTITY), 0, or false."""
    if elem == "i1":
        return "arith.ori", "false"
    if elem in _ADD_IDENTITY:
        return "arith.addf", _ADD_IDENTITY[elem]
    return "arith.addi", "0"


@handles("stablehlo.sort")
def _sort(e: FunctionEmitter, op: ir.Operation):
    """Two `linalg.generic`s (_emit_sort) with the comparator as scalar
    code."""
    where = describe_location(op.location, op)
    types = [TensorType(str(v.type)) for v in op.operands]
    dim = int(ir.IntegerAttr(op.attributes["dimension"]).value) % types[0].rank
    block = op.regions[0].blocks[0]
    arguments = list(block.arguments)

    def less(lhs: list[str], rhs: list[str], prefix: str) -> tuple[list[str], str]:
        names = {arguments[2 * k]: name for k, name in enumerate(lhs)}
        names.update({arguments[2 * k + 1]: name for k, name in enumerate(rhs)})
        lines, (result,) = _scalar_body(block, names, where, prefix)
        return lines, result
    return _emit_sort(e, [e.value(v) for v in op.operands], types, dim, less)


@handles("chlo.top_k")
def _top_k(e: FunctionEmitter, op: ir.Operation):
    """The k largest along the last dimension, largest first, and their
    positions (the first position among equal values first): a stable
    sort by a total order, descending, of the values and an iota, then
    the first k."""
    where = describe_location(op.location, op)
    xt = TensorType(str(op.operands[0].type))
    values_type, indices_type = (TensorType(str(r.type)) for r in op.results)
    if not (xt.is_float or xt.is_int):
        raise UnmappedOpError(op.name, where, f"on {xt.elem}")
    dim = xt.rank - 1
    iota_type = TensorType(tensor_type(xt.shape, indices_type.elem))
    positions = _emit_iota(e, iota_type, dim)

    def greater(lhs: list[str], rhs: list[str], prefix: str) -> tuple[list[str], str]:
        lines: list[str] = []

        def define(text: str) -> str:
            name = f"{prefix}{len(lines)}"
            lines.append(f"{name} = {text}")
            return name
        if xt.is_float:
            result = _total_order_compare(define, "GT", xt.elem, lhs[0], rhs[0], xt.elem)
        else:
            result = define(f"arith.cmpi {'ugt' if xt.is_unsigned else 'sgt'}, {lhs[0]}, {rhs[0]} : {xt.elem}")
        return lines, result
    values, indices = _emit_sort(e, [e.value(op.operands[0]), positions], [xt, iota_type], dim, greater)
    k = values_type.shape[-1]
    out = []
    for name, t, rt in ((values, xt, values_type), (indices, iota_type, indices_type)):
        out.append(e.define(f"tensor.extract_slice {name}[{', '.join('0' for _ in t.shape)}] "
                            f"[{', '.join(str(d) for d in t.shape[:-1] + (k,))}] [{', '.join('1' for _ in t.shape)}] "
                            f": {t} to {rt}"))
    return out


def _emit_sort(e: FunctionEmitter, xs: list[str], types: list[TensorType], dim: int,
               less: Callable[[list[str], list[str], str], tuple[list[str], str]]) -> list[str]:
    """Two `linalg.generic`s. The first counts, for every element, the
    elements of its row that sort before it (`less(lhs, rhs, prefix)`: the
    comparator as scalar statements and its i1 result; ties by position,
    so the order is stable): its rank, a sum over the row. The second
    moves each element to its rank: a sum over the row in which exactly
    one term is not the identity, so it is exact. Both keep the sharding of
    every dimension but the sorted one (docs/jax.md); O(n^2) in the row
    length n."""
    shape = types[0].shape
    rank = len(shape)
    n = len(xs)
    others, owns = [f"%o{k}" for k in range(n)], [f"%t{k}" for k in range(n)]
    less_lines, less_result = less(others, owns, "%a")
    greater_lines, greater_result = less(owns, others, "%b")
    loops = [f"d{i}" for i in range(rank + 1)]
    own = [f"d{i}" for i in range(rank)]
    other = [f"d{rank}" if i == dim else f"d{i}" for i in range(rank)]
    affine = lambda results: f"affine_map<({', '.join(loops)}) -> ({', '.join(results)})>"  # noqa: E731
    ranks_type = tensor_type(shape, "i64")
    ranks_init = e.filled(ranks_type, e.scalar_constant("0", "i64"), "i64")
    iterators = ", ".join(['"parallel"'] * rank + ['"reduction"'])
    ranks = e.fresh()
    e.emit(f"{ranks} = linalg.generic {{indexing_maps = [{', '.join([affine(other)] * n + [affine(own)] * n + [affine(own)])}], "
           f"iterator_types = [{iterators}]}} ins({', '.join(xs + xs)} : {', '.join(str(t) for t in types + types)}) "
           f"outs({ranks_init} : {ranks_type}) {{")
    e.cont(f"^bb0({', '.join([f'%o{k}: {t.elem}' for k, t in enumerate(types)] + [f'%t{k}: {t.elem}' for k, t in enumerate(types)])}, %acc: i64):")
    for line in less_lines + greater_lines:
        e.cont(f"  {line}")
    for line in ("%true = arith.constant true", f"%m = linalg.index {rank} : index", f"%j = linalg.index {dim} : index",
                 "%before = arith.cmpi slt, %m, %j : index", f"%not_less = arith.xori {less_result}, %true : i1",
                 f"%not_greater = arith.xori {greater_result}, %true : i1", "%tie = arith.andi %not_less, %not_greater : i1",
                 "%tie_before = arith.andi %tie, %before : i1", f"%counts = arith.ori {less_result}, %tie_before : i1",
                 "%count = arith.extui %counts : i1 to i64", "%r = arith.addi %acc, %count : i64", "linalg.yield %r : i64"):
        e.cont(f"  {line}")
    e.cont(f"}} -> {ranks_type}")
    inits, adds = [], []
    for t in types:
        add, identity = _sum_identity(t.elem)
        adds.append((add, identity))
        inits.append(e.filled(str(t), e.scalar_constant(identity, t.elem), t.elem))
    name = e.fresh()
    e.emit(f"{name}:{n} = linalg.generic {{indexing_maps = [{', '.join([affine(other)] * (n + 1) + [affine(own)] * n)}], "
           f"iterator_types = [{iterators}]}} ins({', '.join([ranks] + xs)} : {', '.join([ranks_type] + [str(t) for t in types])}) "
           f"outs({', '.join(inits)} : {', '.join(str(t) for t in types)}) {{")
    e.cont(f"^bb0(%rank: i64, {', '.join(f'%x{k}: {t.elem}' for k, t in enumerate(types))}, "
           f"{', '.join(f'%acc{k}: {t.elem}' for k, t in enumerate(types))}):")
    e.cont(f"  %i = linalg.index {dim} : index")
    e.cont("  %position = arith.index_cast %i : index to i64")
    e.cont("  %hit = arith.cmpi eq, %rank, %position : i64")
    for k, (t, (add, identity)) in enumerate(zip(types, adds)):
        e.cont(f"  %identity{k} = arith.constant {identity}" + ("" if t.elem == "i1" else f" : {t.elem}"))
        e.cont(f"  %taken{k} = arith.select %hit, %x{k}, %identity{k} : {t.elem}")
        e.cont(f"  %r{k} = {add} %acc{k}, %taken{k} : {t.elem}")
    e.cont(f"  linalg.yield {', '.join(f'%r{k}' for k in range(n))} : {', '.join(t.elem for t in types)}")
    e.cont(f"}} -> ({', '.join(str(t) for t in types)})")
    return [f"{name}#{k}" for k in range(n)]


@handles("stablehlo.reduce_window")
def _reduce_window(e: FunctionEmitter, op: ir.Operation):
    """Padding (by the init value) as tensor.pad, then a `linalg.generic`
    over the result and the window: the input is read at o * stride +
    w * dilation. Dimensions whose window is 1 with stride 1 keep their
    sharding; a windowed or strided dimension is whole (propagation blocks
    a loop that indexes through a compound expression)."""
    where = describe_location(op.location, op)
    if len(op.operands) != 2:
        raise UnmappedOpError(op.name, where, "a reduce_window of several inputs")
    x_value, init_value = op.operands
    xt = TensorType(str(x_value.type))
    ot = TensorType(str(op.results[0].type))
    rank = xt.rank
    window = _i64s(op.attributes["window_dimensions"])
    ones = [1] * rank
    strides = _i64s(op.attributes["window_strides"]) if "window_strides" in op.attributes else ones
    base = _i64s(op.attributes["base_dilations"]) if "base_dilations" in op.attributes else ones
    dilations = _i64s(op.attributes["window_dilations"]) if "window_dilations" in op.attributes else ones
    padding = _dense_ints(op.attributes["padding"], 2 * rank) if "padding" in op.attributes else [0] * (2 * rank)
    if any(b != 1 for b in base):
        raise UnmappedOpError(op.name, where, "base dilations (a transposed convolution's window)")
    if any(p < 0 for p in padding):
        raise UnmappedOpError(op.name, where, "negative padding")
    combiner = _single_combiner(op, xt, where, "a window body")
    init = _scalar_of(e, init_value, ot.elem)
    x = e.value(x_value)
    low, high = padding[0::2], padding[1::2]
    padded_shape = [d + lo + hi for d, lo, hi in zip(xt.shape, low, high)]
    if any(padding):
        padded = e.fresh()
        e.emit(f"{padded} = tensor.pad {x} low[{', '.join(map(str, low))}] high[{', '.join(map(str, high))}] {{")
        e.cont(f"^bb0({', '.join(f'%i{d}: index' for d in range(rank))}):")
        e.cont(f"  tensor.yield {init} : {xt.elem}")
        e.cont(f"}} : {xt} to {xt.with_shape(padded_shape)}")
        x = padded
    windowed = [d for d in range(rank) if window[d] > 1]
    loops = [f"d{i}" for i in range(rank + len(windowed))]
    reads = []
    for d in range(rank):
        expr = f"d{d}" if strides[d] == 1 else f"d{d} * {strides[d]}"
        if d in windowed:
            w = f"d{rank + windowed.index(d)}"
            expr += f" + {w}" if dilations[d] == 1 else f" + {w} * {dilations[d]}"
        reads.append(expr)
    in_map = f"affine_map<({', '.join(loops)}) -> ({', '.join(reads)})>"
    out_map = f"affine_map<({', '.join(loops)}) -> ({', '.join(loops[:rank])})>"
    acc = e.filled(str(ot), init, ot.elem)
    iterators = ", ".join(['"parallel"'] * rank + ['"reduction"'] * len(windowed))
    name = e.fresh()
    # The window loops' extents come from a shape-only operand: a linalg
    # loop's bounds must be read off some operand's dimension.
    window_shape = tensor_type([window[d] for d in windowed], "i1")
    extents = e.empty(window_shape) if windowed else None
    window_map = f"affine_map<({', '.join(loops)}) -> ({', '.join(loops[rank:])})>"
    ins = f"ins({x}, {extents} : {xt.with_shape(padded_shape)}, {window_shape})" if windowed else \
        f"ins({x} : {xt.with_shape(padded_shape)})"
    maps = [in_map] + ([window_map] if windowed else []) + [out_map]
    e.emit(f"{name} = linalg.generic {{indexing_maps = [{', '.join(maps)}], iterator_types = [{iterators}]}} "
           f"{ins} outs({acc} : {ot}) {{")
    e.cont(f"^bb0(%in: {xt.elem}, " + ("%unused: i1, " if windowed else "") + f"%init: {ot.elem}):")
    e.cont(f"  %r = {combiner} %in, %init : {ot.elem}")
    e.cont(f"  linalg.yield %r : {ot.elem}")
    e.cont(f"}} -> {ot}")
    return [name]


# Giles' single-precision erfinv ("Approximating the erfinv function", GPU
# Computing Gems, 2011): the polynomials CHLO's own decomposition uses, so
# the values match JAX's.
_ERF_INV_CENTRAL = ("2.81022636e-08", "3.43273939e-07", "-3.5233877e-06", "-4.39150654e-06", "2.1858087e-04",
                    "-1.25372503e-03", "-4.17768164e-03", "2.46640727e-01", "1.50140941e+00")
_ERF_INV_TAIL = ("-2.00214257e-04", "1.00950558e-04", "1.34934322e-03", "-3.67342844e-03", "5.73950773e-03",
                 "-7.6224613e-03", "9.43887047e-03", "1.00167406e+00", "2.83297682e+00")


@handles("chlo.erf_inv")
def _erf_inv(e: FunctionEmitter, op: ir.Operation):
    """w = -log1p(-x^2); p(w - 2.5) for w < 5, else q(sqrt(w) - 3), times x;
    +-inf at +-1. Computed in f32 (f16 and bf16 are widened first, as CHLO
    does); f64 needs other polynomials and is not mapped."""
    t = TensorType(str(op.results[0].type))
    if t.elem not in ("f32", "f16", "bf16"):
        raise UnmappedOpError(op.name, describe_location(op.location, op), f"on {t.elem}")
    f = tensor_type(t.shape, "f32")
    i1 = tensor_type(t.shape, "i1")
    x = e.value(op.operands[0])
    if t.elem != "f32":
        wide = e.fresh()
        e.emit(f"{wide} = arith.extf {x} : {t} to {f}")
        x = wide
    emit = e.define
    square = emit(f"arith.mulf {x}, {x} : {f}")
    negated = emit(f"arith.negf {square} : {f}")
    log = emit(f"math.log1p {negated} : {f}")
    w = emit(f"arith.negf {log} : {f}")
    central = emit(f"arith.cmpf olt, {w}, {e.splat_constant('5.0', f)} : {f}")
    shifted = emit(f"arith.subf {w}, {e.splat_constant('2.5', f)} : {f}")
    root = emit(f"math.sqrt {w} : {f}")
    tail = emit(f"arith.subf {root}, {e.splat_constant('3.0', f)} : {f}")
    w = emit(f"arith.select {central}, {shifted}, {tail} : {i1}, {f}")

    def coefficient(k: int) -> str:
        return emit(f"arith.select {central}, {e.splat_constant(_ERF_INV_CENTRAL[k], f)}, "
                    f"{e.splat_constant(_ERF_INV_TAIL[k], f)} : {i1}, {f}")

    p = coefficient(0)
    for k in range(1, len(_ERF_INV_CENTRAL)):
        product = emit(f"arith.mulf {p}, {w} : {f}")
        p = emit(f"arith.addf {coefficient(k)}, {product} : {f}")
    result = emit(f"arith.mulf {p}, {x} : {f}")
    magnitude = emit(f"math.absf {x} : {f}")
    at_one = emit(f"arith.cmpf oeq, {magnitude}, {e.splat_constant('1.0', f)} : {f}")
    infinite = emit(f"arith.mulf {x}, {e.splat_constant(_INFINITY['f32'], f)} : {f}")
    result = emit(f"arith.select {at_one}, {infinite}, {result} : {i1}, {f}")
    if t.elem != "f32":
        result = emit(f"arith.truncf {result} : {f} to {t}")
    return [result]


@handles("chlo.next_after")
def _next_after(e: FunctionEmitter, op: ir.Operation):
    """The float after x towards y, on the bits: +-1 on x's magnitude (down
    when the signs differ or |x| > |y|), the smallest subnormal with y's
    sign from zero, y where x == y, NaN where either is NaN."""
    t = TensorType(str(op.results[0].type))
    if not t.is_float:
        raise UnmappedOpError(op.name, describe_location(op.location, op), f"on {t.elem}")
    width = _bitwidth(t.elem)
    n = tensor_type(t.shape, f"i{width}")
    i1 = tensor_type(t.shape, "i1")
    x, y = (e.value(v) for v in op.operands)
    emit = e.define

    def integer(value: int) -> str:
        # Signless: the bit pattern as a signed constant of the width.
        if value >= 1 << (width - 1):
            value -= 1 << width
        return e.splat_constant(str(value), n)

    sign = 1 << (width - 1)
    x_bits = emit(f"arith.bitcast {x} : {t} to {n}")
    y_bits = emit(f"arith.bitcast {y} : {t} to {n}")
    x_abs = emit(f"arith.andi {x_bits}, {integer(sign - 1)} : {n}")
    y_abs = emit(f"arith.andi {y_bits}, {integer(sign - 1)} : {n}")
    x_sign = emit(f"arith.andi {x_bits}, {integer(sign)} : {n}")
    y_sign = emit(f"arith.andi {y_bits}, {integer(sign)} : {n}")
    signs_differ = emit(f"arith.cmpi ne, {x_sign}, {y_sign} : {n}")
    larger = emit(f"arith.cmpi ugt, {x_abs}, {y_abs} : {n}")
    smaller_result = emit(f"arith.ori {signs_differ}, {larger} : {i1}")
    step = emit(f"arith.select {smaller_result}, {integer(-1 & ((1 << width) - 1))}, {integer(1)} : {i1}, {n}")
    stepped = emit(f"arith.addi {x_bits}, {step} : {n}")
    from_zero = emit(f"arith.ori {y_sign}, {integer(1)} : {n}")
    x_zero = emit(f"arith.cmpi eq, {x_abs}, {integer(0)} : {n}")
    bits = emit(f"arith.select {x_zero}, {from_zero}, {stepped} : {i1}, {n}")
    result = emit(f"arith.bitcast {bits} : {n} to {t}")
    equal = emit(f"arith.cmpf oeq, {x}, {y} : {t}")
    result = emit(f"arith.select {equal}, {y}, {result} : {i1}, {t}")
    unordered = emit(f"arith.cmpf uno, {x}, {y} : {t}")
    nan = emit(f"arith.addf {x}, {y} : {t}")
    return [emit(f"arith.select {unordered}, {nan}, {result} : {i1}, {t}")]


# -- Control flow --------------------------------------------------------------
#
# `stablehlo.while` (lax.while_loop, fori_loop, scan), `stablehlo.case`
# (lax.cond, switch) and `stablehlo.if` become scf.while, scf.index_switch and
# scf.if, which Polymesh propagates (one sharding per carried value), plans
# and partitions. Their values stay tensors (a counter is a tensor<i32>, like
# JAX's); the decision is read with tensor.extract.


def _region(e: FunctionEmitter, block: ir.Block, arg_names: Sequence[str]) -> tuple[list[str], list[str]]:
    """The statements of `block`, its arguments named `arg_names`, and the
    names of the values it returns. Names made inside (constants the region
    is the first to use, among them) are forgotten afterwards: the values
    they name are not visible outside the region."""
    saved_statements, saved_names = e.statements, dict(e.names)
    e.statements = []
    try:
        for arg, name in zip(block.arguments, arg_names):
            e.names[arg] = name
        returned = e.emit_block(block)
        lines = e.body_lines(returned)
    finally:
        e.statements, e.names = saved_statements, saved_names
    return ["  " + line for line in lines], returned


def _results(e: FunctionEmitter, count: int) -> tuple[str, list[str]]:
    """The left-hand side for an op with `count` results, and their names."""
    if count == 0:
        return "", []
    name = e.fresh()
    if count == 1:
        return f"{name} = ", [name]
    return f"{name}:{count} = ", [f"{name}#{k}" for k in range(count)]


def _types(values) -> str:
    return ", ".join(str(v.type) for v in values)


def _yield(returned: Sequence[str], values) -> str:
    return f"  scf.yield {', '.join(returned)} : {_types(values)}" if returned else "  scf.yield"


@handles("stablehlo.while")
def _while(e: FunctionEmitter, op: ir.Operation):
    inits = [e.value(v) for v in op.operands]
    types = _types(op.operands)
    before = [e.fresh() for _ in inits]
    condition_lines, (predicate,) = _region(e, op.regions[0].blocks[0], before)
    flag = e.fresh()
    after = [e.fresh() for _ in inits]
    body_lines, yielded = _region(e, op.regions[1].blocks[0], after)
    lhs, outputs = _results(e, len(op.results))
    pairs = ", ".join(f"{a} = {i}" for a, i in zip(before, inits))
    e.emit(f"{lhs}scf.while ({pairs}) : ({types}) -> ({types}) {{")
    for line in condition_lines:
        e.cont(line)
    e.cont(f"  {flag} = tensor.extract {predicate}[] : tensor<i1>")
    e.cont(f"  scf.condition({flag}) {', '.join(before)} : {types}" if before else f"  scf.condition({flag})")
    e.cont("} do {")
    e.cont(f"^bb0({', '.join(f'{a}: {v.type}' for a, v in zip(after, op.operands))}):")
    for line in body_lines:
        e.cont(line)
    e.cont(_yield(yielded, op.operands))
    e.cont("}")
    return outputs


def _branches(e: FunctionEmitter, op: ir.Operation, openers: Sequence[str], closer: str) -> None:
    """Continues the current statement with each region of `op` after its
    opener (`case 0 {`, `} else {`), yielding what the region returns."""
    for opener, region in zip(openers, op.regions):
        lines, returned = _region(e, region.blocks[0], [])
        e.cont(opener)
        for line in lines:
            e.cont(line)
        e.cont(_yield(returned, op.results))
    e.cont(closer)


@handles("stablehlo.case")
def _case(e: FunctionEmitter, op: ir.Operation):
    # An index outside [0, n) takes the last branch, as scf.index_switch's
    # default does for any index without a case.
    index = e.define(f"tensor.extract {e.value(op.operands[0])}[] : {op.operands[0].type}")
    position = e.define(f"arith.index_cast {index} : {TensorType(str(op.operands[0].type)).elem} to index")
    lhs, outputs = _results(e, len(op.results))
    arrow = f" -> {_types(op.results)}" if op.results else ""
    e.emit(f"{lhs}scf.index_switch {position}{arrow}")
    openers = [f"case {k} {{" for k in range(len(op.regions) - 1)] + ["default {"]
    _branches(e, op, openers[:1] + ["} " + opener for opener in openers[1:]], "}")
    return outputs


@handles("stablehlo.if")
def _if(e: FunctionEmitter, op: ir.Operation):
    flag = e.define(f"tensor.extract {e.value(op.operands[0])}[] : tensor<i1>")
    lhs, outputs = _results(e, len(op.results))
    arrow = f" -> ({_types(op.results)})" if op.results else ""
    e.emit(f"{lhs}scf.if {flag}{arrow}")
    _branches(e, op, ["{", "} else {"], "}")
    return outputs
