#!/usr/bin/env python3
"""Differential program generator for Polymesh (issue 13, item 15).

Generates seeded, reproducible random modules (several meshes, random
shardings, chains of the compute ops the passes support, reshards and
constraints), runs every module through

  * polymesh-run --verify                         (loopback, partitioned path)
  * polymesh-run --verify --sharded-path=executor (movement-only modules)
  * polymesh-run --verify --backend=nccl --simulate-gpus (movement/placement)
  * polymesh-opt --polymesh-pipeline=target=cpu   (must exit 0)

and reports every failure: a FAIL line, a crash or signal, or a module the
tools refuse. A failure is shrunk (--shrink) by delta debugging over the
structured program -- functions, results, ops, shardings, dims, meshes --
and saved as a lit test with a RUN line and CHECK lines expecting PASS.

Programs are kept as Python objects, not text, so that every shrinking step
produces a program that is valid by construction (types are re-inferred and
shardings re-checked; a candidate that no longer type-checks is skipped).

Python 3 standard library only. See docs/testing.md.
"""

import argparse
import concurrent.futures
import os
import random
import re
import shutil
import shlex
import subprocess
import sys
import tempfile
import time

# --------------------------------------------------------------------------
# Program model
# --------------------------------------------------------------------------

FLOATS = ["f32", "f16", "bf16", "f64"]
INTS = ["i1", "i8", "i32", "i64"]
DTYPES = FLOATS + INTS
BYTES = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i1": 1, "i8": 1,
         "i32": 4, "i64": 8, "i17": 3}

# Features that hit bugs being fixed right now; --avoid-known leaves them out
# so that a CI batch passes, the default generation still hunts them.
KNOWN = {
    # Refused by design since issue 13 (item 4): --polymesh-plan refuses to
    # move element types that LLVM pads (i17, i12), with a diagnostic; the
    # round trip through them is only valid where nothing moves them.
    "odd-width": "element widths LLVM pads (i17, i12): refused when moved",
}
# Fixed, and generated again: maximal `[]` shardings of any rank (issue 14,
# item 1), index ops (global indices), the exchange
# clobber, `x op x` that folds (test/Generated/self-fold-returned-twice.mlir,
# broadcast-constant-from-one-device.mlir), size-1 axes
# (size-one-axis-used-twice.mlir).


# Features left out of generation (set from --avoid / --avoid-known).
AVOID = set()
# --calls: outline some ops into private helpers called with func.call (the
# same computation; propagation specializes each call site).
OUTLINE = {"calls": False}
# --gathers: also generate gathers, linalg.generic bodies that read a table
# from above with tensor.extract at clamped indices (an embedding lookup,
# jnp.take): the table must be whole wherever the op runs.
GATHERS = {"on": False}
# With --exchanges, moves include transposes of a sharding over every axis
# of a mesh (docs/planner.md, "Exchanges of whole tiles").
EXCHANGES = {"on": False}
# --inexact-sums: float sums (matmuls, reductions) of values that are not
# exact, which a sharded run adds in another order: polymesh-run --verify
# checks each within its bound where it is made and continues from it
# (lock-step), so everything computed after must still match bit for bit.
INEXACT = {"on": False}


class Invalid(Exception):
    """A candidate program that does not type-check (shrinking skips it)."""


class Mesh:
    def __init__(self, name, axes, ids):
        self.name, self.axes, self.ids = name, list(axes), ids  # ids None: 0..n-1

    def size(self):
        n = 1
        for _, s in self.axes:
            n *= s
        return n

    def devices(self):
        return list(self.ids) if self.ids is not None else list(range(self.size()))

    def axis_size(self, a):
        for n, s in self.axes:
            if n == a:
                return s
        raise Invalid("no axis %s on @%s" % (a, self.name))

    def text(self):
        axes = ", ".join('"%s"=%d' % a for a in self.axes)
        ids = "" if self.ids is None else ", device_ids=[%s]" % ", ".join(map(str, self.ids))
        return "polymesh.mesh @%s = <[%s]%s>" % (self.name, axes, ids)


class Sharding:
    """dims: one list per dimension of (axis, pre, k) refs, pre None = whole
    axis; unreduced: list of refs. maximal: the `[]` form on an axis-less mesh."""

    def __init__(self, mesh, dims, unreduced=(), maximal=False):
        self.mesh, self.dims, self.unreduced = mesh, [list(d) for d in dims], list(unreduced)
        self.maximal = maximal

    def copy(self):
        return Sharding(self.mesh, self.dims, self.unreduced, self.maximal)

    def refs(self):
        return [r for d in self.dims for r in d] + self.unreduced

    @staticmethod
    def ref_text(r):
        a, pre, k = r
        return '"%s"' % a if pre is None else '"%s":(%d)%d' % (a, pre, k)

    def body(self):
        if self.maximal:
            return "@%s, []" % self.mesh
        dims = ", ".join("{%s}" % ", ".join(self.ref_text(r) for r in d) for d in self.dims)
        s = "@%s, [%s]" % (self.mesh, dims)
        if self.unreduced:
            s += ", unreduced={%s}" % ", ".join(self.ref_text(r) for r in self.unreduced)
        return s

    def attr(self):
        return "#polymesh.sharding<%s>" % self.body()


def check_sharding(sh, rank, meshes):
    """Raises Invalid unless `sh` is a legal sharding of a rank-`rank` tensor."""
    mesh = meshes.get(sh.mesh)
    if mesh is None:
        raise Invalid("unknown mesh")
    if sh.maximal:
        if mesh.axes or len(mesh.devices()) != 1:
            raise Invalid("maximal sharding on a mesh with axes")
        return
    if len(sh.dims) != rank:
        raise Invalid("rank")
    used = {}
    for a, pre, k in sh.refs():
        n = mesh.axis_size(a)
        pre2, k2 = (1, n) if pre is None else (pre, k)
        if pre is not None and (k < 2 or n % (pre * k) or k == n):
            raise Invalid("bad sub-axis")
        # The generator only uses pieces of one factorization, whole axis or
        # disjoint [pre, pre*k) intervals in log space: check they do not overlap.
        for p, q in used.get(a, []):
            if not (p * q <= pre2 or pre2 * k2 <= p):
                raise Invalid("overlapping axes")
        used.setdefault(a, []).append((pre2, k2))


class Value:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype

    def type(self):
        dims = "x".join(map(str, self.shape))
        return "tensor<%s%s%s>" % (dims, "x" if self.shape else "", self.dtype)


class Op:
    """kind and attrs; operands are value ids; the result type is inferred."""

    def __init__(self, kind, operands, **attrs):
        self.kind, self.operands, self.attrs = kind, list(operands), dict(attrs)

    def copy(self):
        a = dict(self.attrs)
        if "sharding" in a:
            a["sharding"] = a["sharding"].copy()
        return Op(self.kind, self.operands, **a)


class Func:
    def __init__(self, name):
        self.name = name
        self.args = []        # list of (Value, Sharding|None)
        self.ops = []         # list of (result id, Op); ids follow the args
        self.results = []     # list of (value id, Sharding|None)
        self.ambient = None   # mesh name
        self.movement_only = True

    def copy(self):
        f = Func(self.name)
        f.args = [(Value(v.shape, v.dtype), s.copy() if s else None) for v, s in self.args]
        f.ops = [(i, op.copy()) for i, op in self.ops]
        f.results = [(v, s.copy() if s else None) for v, s in self.results]
        f.ambient, f.movement_only = self.ambient, self.movement_only
        return f


UNARY_F = ["arith.negf", "math.absf", "math.floor", "math.ceil"]
BINARY_F = ["arith.addf", "arith.subf", "arith.mulf", "arith.maximumf", "arith.minimumf"]
BINARY_I = ["arith.addi", "arith.subi", "arith.muli", "arith.andi", "arith.ori",
            "arith.xori", "arith.maxsi", "arith.minsi"]
BINARY_I1 = ["arith.andi", "arith.ori", "arith.xori"]
# Ops whose float results stay exact when fed exact inputs (so reductions over
# them keep the reference's sum bit for bit whatever the order).
EXACT_KINDS = {"arith.negf", "math.absf", "math.floor", "math.ceil", "transpose",
               "expand", "collapse", "reshard", "constraint", "arith.maximumf",
               "arith.minimumf"}
CASTS = {  # kind -> (from dtypes, to dtype)
    "arith.extf": (["f16", "bf16"], "f32"),
    "arith.truncf": (["f64"], "f32"),
    "arith.sitofp": (["i8", "i32"], "f32"),
    "arith.extsi": (["i8"], "i32"),
    "arith.trunci": (["i32", "i64"], "i8"),
}


def infer(func, meshes):
    """Types of every value (list indexed by id); raises Invalid."""
    types = [v for v, _ in func.args]
    for v, s in func.args:
        if s:
            check_sharding(s, len(v.shape), meshes)
    for rid, op in func.ops:
        if rid != len(types):
            raise Invalid("ids")
        ins = []
        for o in op.operands:
            if o >= len(types):
                raise Invalid("use before def")
            ins.append(types[o])
        types.append(infer_op(op, ins, meshes))
    if not func.results:
        raise Invalid("no results")
    for v, s in func.results:
        if v >= len(types):
            raise Invalid("result")
        if s:
            check_sharding(s, len(types[v].shape), meshes)
    return types


def infer_op(op, ins, meshes):
    k, a = op.kind, op.attrs
    if k in ("reshard", "constraint"):
        check_sharding(a["sharding"], len(ins[0].shape), meshes)
        return ins[0]
    if k in UNARY_F:
        return ins[0]
    if k in BINARY_F or k in BINARY_I or k == "const-binary":
        if ins[0].shape != ins[1].shape or ins[0].dtype != ins[1].dtype:
            raise Invalid("binary types")
        return ins[0]
    if k in ("arith.cmpf", "arith.cmpi"):
        if ins[0].shape != ins[1].shape or ins[0].dtype != ins[1].dtype:
            raise Invalid("cmp types")
        return Value(ins[0].shape, "i1")
    if k == "select":
        if not (ins[0].shape == ins[1].shape == ins[2].shape) or ins[0].dtype != "i1" \
                or ins[1].dtype != ins[2].dtype:
            raise Invalid("select types")
        return ins[1]
    if k in CASTS:
        return Value(ins[0].shape, CASTS[k][1])
    if k == "odd-width":  # extsi to iN then trunci back: an internal iN value
        return ins[0]
    if k == "transpose":
        perm = a["perm"]
        if sorted(perm) != list(range(len(ins[0].shape))):
            raise Invalid("perm")
        return Value([ins[0].shape[p] for p in perm], ins[0].dtype)
    if k == "expand":
        d, p = a["dim"], a["factor"]
        sh = list(ins[0].shape)
        if d >= len(sh) or p < 1 or sh[d] % p:
            raise Invalid("expand")
        return Value(sh[:d] + [p, sh[d] // p] + sh[d + 1:], ins[0].dtype)
    if k == "collapse":
        d = a["dim"]
        sh = list(ins[0].shape)
        if d + 1 >= len(sh):
            raise Invalid("collapse")
        return Value(sh[:d] + [sh[d] * sh[d + 1]] + sh[d + 2:], ins[0].dtype)
    if k == "matmul":
        x, y = ins
        if len(x.shape) != 2 or len(y.shape) != 2 or x.shape[1] != y.shape[0] \
                or x.dtype != y.dtype:
            raise Invalid("matmul")
        return Value((x.shape[0], y.shape[1]), x.dtype)
    if k == "reduce":
        d = a["dim"]
        if d >= len(ins[0].shape):
            raise Invalid("reduce dim")
        return Value(ins[0].shape[:d] + ins[0].shape[d + 1:], ins[0].dtype)
    if k in ("fill", "splat"):
        return Value(a["shape"], a["dtype"])
    if k == "generate":
        return Value(a["shape"], a["dtype"])
    if k == "gather":  # table[clamp(ids), ...]: ids' shape, then the table's rest
        table, ids = ins
        if not table.shape or ids.dtype not in ("i32", "i64"):
            raise Invalid("gather")
        return Value(ids.shape + table.shape[1:], table.dtype)
    if k == "index-add":  # x + linalg.index(dim) (integer x)
        if a["dim"] >= len(ins[0].shape):
            raise Invalid("index dim")
        return ins[0]
    raise Invalid("unknown op " + k)


# --------------------------------------------------------------------------
# Text emission
# --------------------------------------------------------------------------

def scalar_text(value, dtype):
    if dtype == "i1":
        return "true" if value else "false"
    if dtype in FLOATS:
        return "%.1f" % value
    return str(int(value))


def const_values(shape, dtype, salt):
    """Small exact constants, deterministic in (shape, salt)."""
    n = 1
    for d in shape:
        n *= d
    vals = []
    for g in range(n):
        h = ((g + 7919 * salt) * 2654435761) % (1 << 32)
        if dtype == "i1":
            vals.append(h >> 31)
        else:
            vals.append((h >> 28) - 8)  # [-8, 8): exact in every type
    return vals


def dense_text(shape, dtype, vals):
    if len(set(vals)) == 1 or not shape:
        return "dense<%s>" % scalar_text(vals[0], dtype)

    def rec(dim, off):
        if dim == len(shape):
            return scalar_text(vals[off], dtype)
        stride = 1
        for d in shape[dim + 1:]:
            stride *= d
        return "[" + ", ".join(rec(dim + 1, off + i * stride) for i in range(shape[dim])) + "]"
    return "dense<%s>" % rec(0, 0)


def emit_func(func, types):
    out = []
    sig = []
    for i, (v, s) in enumerate(func.args):
        attr = " {polymesh.sharding = %s}" % s.attr() if s else ""
        sig.append("%%v%d: %s%s" % (i, v.type(), attr))
    res = []
    for v, s in func.results:
        attr = " {polymesh.sharding = %s}" % s.attr() if s else ""
        res.append(types[v].type() + attr)
    amb = " attributes {polymesh.ambient_mesh = @%s}" % func.ambient if func.ambient else ""
    helpers = []
    out.append("func.func @%s(%s) -> (%s)%s {" % (func.name, ", ".join(sig), ", ".join(res), amb))
    for rid, op in func.ops:
        lines = emit_op(rid, op, types)
        if OUTLINE["calls"] and outlined(func, rid, op):
            helper, call = outline(func, rid, op, types, lines)
            helpers.extend(helper)
            lines = [call]
        out.extend("  " + line for line in lines)
    out.append("  return %s : %s" % (", ".join("%%v%d" % v for v, _ in func.results),
                                     ", ".join(types[v].type() for v, _ in func.results)))
    out.append("}")
    return helpers + out


def outlined(func, rid, op):
    """Whether --calls moves op `rid` into a helper: about a third of the
    computing ops, chosen by name so that a shrunk module keeps its calls."""
    if op.kind in ("reshard", "constraint") or not op.operands:
        return False
    return random.Random("call:%s:%d" % (func.name, rid)).random() < 0.35


def outline(func, rid, op, types, lines):
    """The helper holding `lines` (the op as emitted, operands as
    parameters) and the call that replaces them."""
    params = list(dict.fromkeys(op.operands))
    name = "%s_call%d" % (func.name, rid)
    sig = ", ".join("%%v%d: %s" % (o, types[o].type()) for o in params)
    helper = ["func.func private @%s(%s) -> %s {" % (name, sig, types[rid].type())]
    helper.extend("  " + line for line in lines)
    helper.append("  return %%v%d : %s" % (rid, types[rid].type()))
    helper.append("}")
    helper.append("")
    call = "%%v%d = func.call @%s(%s) : (%s) -> %s" % (
        rid, name, ", ".join("%%v%d" % o for o in params),
        ", ".join(types[o].type() for o in params), types[rid].type())
    return helper, call


def emit_op(rid, op, types):
    k, a = op.kind, op.attrs
    r = "%%v%d" % rid
    t = types[rid]
    ops = ["%%v%d" % o for o in op.operands]
    it = [types[o] for o in op.operands]
    p = "%%t%d_" % rid  # prefix for helper values
    if k == "reshard":
        return ["%s = polymesh.reshard %s <%s> : %s" % (r, ops[0], a["sharding"].body(), t.type())]
    if k == "constraint":
        return ["%s = polymesh.sharding_constraint %s <%s> : %s" % (r, ops[0], a["sharding"].body(), t.type())]
    if k in UNARY_F:
        return ["%s = %s %s : %s" % (r, k, ops[0], t.type())]
    if k in BINARY_F or k in BINARY_I:
        return ["%s = %s %s, %s : %s" % (r, k, ops[0], ops[1], t.type())]
    if k in ("arith.cmpf", "arith.cmpi"):
        pred = a["pred"]
        return ["%s = %s %s, %s, %s : %s" % (r, k, pred, ops[0], ops[1], it[0].type())]
    if k == "select":
        return ["%s = arith.select %s, %s, %s : %s, %s" % (r, ops[0], ops[1], ops[2], it[0].type(), t.type())]
    if k in CASTS:
        return ["%s = %s %s : %s to %s" % (r, k, ops[0], it[0].type(), t.type())]
    if k == "odd-width":
        # A wider odd width round-trips exactly; a narrower one wraps.
        w = Value(t.shape, a["width"])
        up, down = ("arith.extsi", "arith.trunci")
        if int(a["width"][1:]) < int(t.dtype[1:]):
            up, down = down, up
        return ["%sw = %s %s : %s to %s" % (p, up, ops[0], t.type(), w.type()),
                "%s = %s %sw : %s to %s" % (r, down, p, w.type(), t.type())]
    if k == "transpose":
        perm = ", ".join(map(str, a["perm"]))
        return ["%se = tensor.empty() : %s" % (p, t.type()),
                "%s = linalg.transpose ins(%s : %s) outs(%se : %s) permutation = [%s]"
                % (r, ops[0], it[0].type(), p, t.type(), perm)]
    if k == "expand":
        d = a["dim"]
        rank = len(it[0].shape)
        groups = []
        j = 0
        for i in range(rank):
            if i == d:
                groups.append("[%d, %d]" % (j, j + 1))
                j += 2
            else:
                groups.append("[%d]" % j)
                j += 1
        return ["%s = tensor.expand_shape %s [%s] output_shape [%s] : %s into %s"
                % (r, ops[0], ", ".join(groups), ", ".join(map(str, t.shape)), it[0].type(), t.type())]
    if k == "collapse":
        d = a["dim"]
        rank = len(it[0].shape)
        groups = []
        i = 0
        while i < rank:
            if i == d:
                groups.append("[%d, %d]" % (i, i + 1))
                i += 2
            else:
                groups.append("[%d]" % i)
                i += 1
        return ["%s = tensor.collapse_shape %s [%s] : %s into %s"
                % (r, ops[0], ", ".join(groups), it[0].type(), t.type())]
    if k == "matmul":
        lines = fill_lines(p, t, 0)
        lines.append("%s = linalg.matmul ins(%s, %s : %s, %s) outs(%sf : %s) -> %s"
                     % (r, ops[0], ops[1], it[0].type(), it[1].type(), p, t.type(), t.type()))
        return lines
    if k == "reduce":
        x = it[0]
        lines = fill_lines(p, t, 0)
        comb = a["combiner"]
        el = x.dtype
        if a["form"] == "reduce":
            lines += ["%s = linalg.reduce ins(%s : %s) outs(%sf : %s) dimensions = [%d]"
                      % (r, ops[0], x.type(), p, t.type(), a["dim"]),
                      "  (%%in: %s, %%acc: %s) {" % (el, el),
                      "    %%s = %s %%in, %%acc : %s" % (comb, el),
                      "    linalg.yield %%s : %s" % el,
                      "  }"]
            return lines
        rank = len(x.shape)
        dims = ", ".join("d%d" % i for i in range(rank))
        kept = ", ".join("d%d" % i for i in range(rank) if i != a["dim"])
        iters = ", ".join('"reduction"' if i == a["dim"] else '"parallel"' for i in range(rank))
        lines += ["%s = linalg.generic {indexing_maps = [affine_map<(%s) -> (%s)>, affine_map<(%s) -> (%s)>], "
                  "iterator_types = [%s]} ins(%s : %s) outs(%sf : %s) {"
                  % (r, dims, dims, dims, kept, iters, ops[0], x.type(), p, t.type()),
                  "^bb0(%%in: %s, %%acc: %s):" % (el, el),
                  "  %%s = %s %%in, %%acc : %s" % (comb, el),
                  "  linalg.yield %%s : %s" % el,
                  "} -> %s" % t.type()]
        return lines
    if k == "fill":
        return fill_lines_named(r, p, t, a["value"])
    if k == "splat":
        vals = const_values(t.shape, t.dtype, a["salt"]) if not a.get("uniform") \
            else [a["salt"] % 5] * max(1, prod(t.shape))
        return ["%s = arith.constant %s : %s" % (r, dense_text(t.shape, t.dtype, vals), t.type())]
    if k == "generate":
        el = t.dtype
        lines = ["%s = tensor.generate {" % r,
                 "^bb0(%s):" % ", ".join("%%i%d: index" % i for i in range(len(t.shape))),
                 "  %%c = arith.index_cast %%i%d : index to %s" % (a["dim"], el),
                 "  tensor.yield %%c : %s" % el,
                 "} : %s" % t.type()]
        return lines
    if k == "gather":
        table, ids = it
        rank, irank = len(t.shape), len(ids.shape)
        dims = ", ".join("d%d" % i for i in range(rank))
        imap = "affine_map<(%s) -> (%s)>" % (dims, ", ".join("d%d" % i for i in range(irank)))
        omap = "affine_map<(%s) -> (%s)>" % (dims, dims)
        iters = ", ".join(['"parallel"'] * rank)
        rest = ["%%j%d" % k for k in range(1, len(table.shape))]
        lines = ["%se = tensor.empty() : %s" % (p, t.type()),
                 "%s = linalg.generic {indexing_maps = [%s, %s], iterator_types = [%s]} "
                 "ins(%s : %s) outs(%se : %s) {" % (r, imap, omap, iters, ops[1], ids.type(), p, t.type()),
                 "^bb0(%%id: %s, %%o: %s):" % (ids.dtype, t.dtype),
                 "  %%row = arith.index_cast %%id : %s to index" % ids.dtype,
                 "  %c0 = arith.constant 0 : index",
                 "  %%last = arith.constant %d : index" % (table.shape[0] - 1),
                 "  %lo = arith.maxsi %row, %c0 : index",
                 "  %at = arith.minsi %lo, %last : index"]
        for k in range(1, len(table.shape)):
            lines.append("  %%j%d = linalg.index %d : index" % (k, irank + k - 1))
        lines += ["  %%x = tensor.extract %s[%s] : %s" % (ops[0], ", ".join(["%at"] + rest), table.type()),
                  "  linalg.yield %%x : %s" % t.dtype,
                  "} -> %s" % t.type()]
        return lines
    if k == "index-add":
        x = it[0]
        rank = len(x.shape)
        dims = ", ".join("d%d" % i for i in range(rank))
        el = x.dtype
        m = "affine_map<(%s) -> (%s)>" % (dims, dims)
        return ["%se = tensor.empty() : %s" % (p, t.type()),
                "%s = linalg.generic {indexing_maps = [%s, %s], iterator_types = [%s]} "
                "ins(%s : %s) outs(%se : %s) {" % (r, m, m, ", ".join(['"parallel"'] * rank),
                                                    ops[0], x.type(), p, t.type()),
                "^bb0(%%in: %s, %%out: %s):" % (el, el),
                "  %%i = linalg.index %d : index" % a["dim"],
                "  %%c = arith.index_cast %%i : index to %s" % el,
                "  %%s = arith.addi %%in, %%c : %s" % el,
                "  linalg.yield %%s : %s" % el,
                "} -> %s" % t.type()]
    raise Invalid("cannot emit " + k)


def prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def scalar_const(value, dtype):
    # `arith.constant true` takes no type; every other literal does.
    return scalar_text(value, dtype) + ("" if dtype == "i1" else " : " + dtype)


def fill_lines(p, t, value):
    return ["%sz = arith.constant %s" % (p, scalar_const(value, t.dtype)),
            "%se = tensor.empty() : %s" % (p, t.type()),
            "%sf = linalg.fill ins(%sz : %s) outs(%se : %s) -> %s"
            % (p, p, t.dtype, p, t.type(), t.type())]


def fill_lines_named(r, p, t, value):
    return ["%sz = arith.constant %s" % (p, scalar_const(value, t.dtype)),
            "%se = tensor.empty() : %s" % (p, t.type()),
            "%s = linalg.fill ins(%sz : %s) outs(%se : %s) -> %s"
            % (r, p, t.dtype, p, t.type(), t.type())]


def used_meshes(funcs):
    names = set()
    for f in funcs:
        for _, s in f.args:
            if s:
                names.add(s.mesh)
        for _, s in f.results:
            if s:
                names.add(s.mesh)
        for _, op in f.ops:
            if "sharding" in op.attrs:
                names.add(op.attrs["sharding"].mesh)
        if f.ambient:
            names.add(f.ambient)
    return names


def emit_module(meshes, funcs, header=()):
    """meshes: dict name -> Mesh (ordered). Raises Invalid."""
    lines = list(header)
    names = used_meshes(funcs)
    for m in meshes.values():
        if m.name in names:
            lines.append(m.text())
    lines.append("")
    for f in funcs:
        types = infer(f, meshes)
        lines.extend(emit_func(f, types))
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------
# Random generation
# --------------------------------------------------------------------------

# Device ids range over [0, MAX_DEVICES) (--max-devices). With more than 8,
# about a third of the meshes get one large axis (up to MAX_DEVICES / 2
# along it): sums and gathers over large groups, mostly with empty tiles.
MAX_DEVICES = 8


def gen_meshes(rng, tag):
    """3-5 meshes: full meshes, sub-meshes with arbitrary distinct ids,
    reversed ids, single devices."""
    meshes = {}
    names = ["a", "b", "c", "x", "y", "z", "dp", "tp"]
    universe = MAX_DEVICES
    count = rng.randint(3, 5)
    for i in range(count):
        name = "%s%d" % (tag, i)
        kind = rng.random()
        if kind < 0.2:
            ids = [rng.randrange(8)]
            meshes[name] = Mesh(name, [], ids)
            continue
        nax = rng.choice([1, 1, 2, 2, 3])
        sizes = []
        for _ in range(nax):
            sizes.append(rng.choice([2, 2, 2, 3, 4, 4, 6, 8, 1]))
        while prod(sizes) > 8:
            sizes[rng.randrange(len(sizes))] = 2 if prod(sizes) > 8 else 1
            if prod(sizes) > 8:
                sizes.pop()
        limit = 8
        if universe > 8 and rng.random() < 0.35:
            big = rng.choice([k for k in (12, 16, 24, 32, 48, 64, 96, 128, 256)
                              if k <= universe // 2])
            sizes = [big] + sizes[1:]
            while prod(sizes) > universe:
                sizes.pop()
            limit = universe
        axes = list(zip(rng.sample(names, len(sizes)), sizes))
        n = prod(sizes)
        r = rng.random()
        if r < 0.4:
            ids = None
        elif r < 0.55:
            ids = list(range(n))[::-1]
        elif r < 0.8:
            start = rng.randrange(0, limit - n + 1)
            ids = list(range(start, start + n))
        else:
            ids = rng.sample(range(limit), n)
        meshes[name] = Mesh(name, axes, ids)
    return meshes


def factorizations(n):
    """Ways to cut an axis of size n into sub-axis pieces (pre, k)."""
    out = []
    for a in range(2, n):
        if n % a == 0:
            out.append([(1, a), (a, n // a)])
    if n == 8:
        out.append([(1, 2), (2, 2), (4, 2)])
    return out


def gen_sharding(rng, meshes, shape, mesh=None, allow_unreduced=False, open_ok=True):
    mesh = mesh or meshes[rng.choice(list(meshes))]
    rank = len(shape)
    if not mesh.axes:
        if rng.random() < 0.5:
            return Sharding(mesh.name, [], maximal=True)
        return Sharding(mesh.name, [[] for _ in range(rank)])
    dims = [[] for _ in range(rank)]
    unreduced = []
    for a, n in rng.sample(mesh.axes, len(mesh.axes)):
        pieces = [(None, n)]
        facts = factorizations(n)
        if facts and rng.random() < 0.3:
            pieces = rng.choice(facts)
        for pre, k in pieces:
            ref = (a, pre, k) if pre is not None else (a, None, n)
            r = rng.random()
            if rank and r < 0.55:
                d = rng.randrange(rank)
                # sub-axes of one axis in one dimension would merge: avoid
                if any(x[0] == a for x in dims[d]):
                    continue
                dims[d].append(ref)
            elif allow_unreduced and r < 0.7:
                unreduced.append(ref)
    return Sharding(mesh.name, dims, unreduced)


def rand_shape(rng, rank=None):
    rank = rng.choice([1, 2, 2, 2, 3, 0]) if rank is None else rank
    return tuple(rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 8, 9, 10, 12, 16]) for _ in range(rank))


class Gen:
    """Generates one function; `kind` is compute, move or place."""

    def __init__(self, rng, meshes, name, kind, avoid):
        self.rng, self.meshes, self.kind, self.avoid = rng, meshes, kind, avoid
        self.f = Func(name)
        self.types = []
        self.exact = []       # float value exact for reductions

    def new_arg(self, shape, dtype, sharded=None, unreduced_ok=True):
        rng = self.rng
        sh = None
        if sharded or (sharded is None and rng.random() < 0.8):
            sh = gen_sharding(rng, self.meshes, shape,
                              allow_unreduced=unreduced_ok and rng.random() < 0.2)
        self.f.args.append((Value(shape, dtype), sh))
        self.types.append(Value(shape, dtype))
        self.exact.append(True)
        # values computed after it are renumbered by add(); args come first
        return len(self.f.args) - 1

    def add(self, op):
        rid = len(self.f.args) + len(self.f.ops)
        t = infer_op(op, [self.types[o] for o in op.operands], self.meshes)
        self.f.ops.append((rid, op))
        self.types.append(t)
        ex = op.kind in EXACT_KINDS and all(self.exact[o] for o in op.operands)
        self.exact.append(ex or t.dtype not in FLOATS)
        if op.kind not in ("reshard", "constraint"):
            self.f.movement_only = False
        return rid

    def pick(self, pred=lambda t: True, prefer_last=True):
        cands = [i for i, t in enumerate(self.types) if pred(t)]
        if not cands:
            return None
        if prefer_last and self.rng.random() < 0.5:
            return cands[-1]
        return self.rng.choice(cands)

    def partner(self, v, exact=False, kind=None):
        """A second operand of the same type: the value itself (used twice),
        another value, a new argument or a constant."""
        t = self.types[v]
        rng = self.rng
        r = rng.random()
        same = [i for i, u in enumerate(self.types)
                if u.shape == t.shape and u.dtype == t.dtype and (not exact or self.exact[i])]
        if r < 0.2:
            return v
        if r < 0.5 and len(same) > 1:
            return rng.choice(same)
        if r < 0.75 or self.kind != "compute":
            # args are inserted before the ops: renumber op ids
            return self.insert_arg(t)
        return self.add(Op("splat", [], shape=t.shape, dtype=t.dtype,
                           salt=rng.randrange(1000), uniform=rng.random() < 0.4))

    def insert_arg(self, t, sh=None):
        """Adds an argument late (sharded by `sh`, else at random): shifts
        every op id by one."""
        na = len(self.f.args)
        if sh is None:
            sh = gen_sharding(self.rng, self.meshes, t.shape,
                              allow_unreduced=self.rng.random() < 0.1) if self.rng.random() < 0.8 else None
        self.f.args.append((Value(t.shape, t.dtype), sh))

        def shift(i):
            return i + 1 if i >= na else i
        ops = []
        for rid, op in self.f.ops:
            op.operands = [shift(o) for o in op.operands]
            ops.append((rid + 1, op))
        self.f.ops = ops
        self.f.results = [(shift(v), s) for v, s in self.f.results]
        self.types.insert(na, Value(t.shape, t.dtype))
        self.exact.insert(na, True)
        return na

    def step_exchange(self):
        """A new argument split over every axis of a mesh along some
        dimensions, resharded over every axis of that mesh, or of another on
        the same devices, along the other dimensions: an all-to-all of whole
        tiles. Extents are multiples of the shard counts, or a little off
        (uneven tiles, some empty: then no exchange)."""
        rng = self.rng
        meshes = [m for m in self.meshes.values() if m.axes and m.size() > 1]
        if not meshes:
            return None
        src_mesh = rng.choice(meshes)
        devices = sorted(src_mesh.devices())
        same = [m for m in meshes if sorted(m.devices()) == devices]
        dst_mesh = rng.choice(same)
        rank = rng.choice([2, 2, 3, 4])
        dims = list(range(rank))
        rng.shuffle(dims)
        cut = rng.randint(1, rank - 1)
        splits = [1] * rank

        def place(mesh, allowed):
            out = [[] for _ in range(rank)]
            for a, n in rng.sample(mesh.axes, len(mesh.axes)):
                d = rng.choice(allowed)
                out[d].append((a, None, n))
                splits[d] *= n
            return out
        src_dims = place(src_mesh, dims[:cut])
        dst_dims = place(dst_mesh, dims[cut:])
        shape = []
        for d in range(rank):
            extent = splits[d] * rng.randint(1, 2)
            if rng.random() < 0.15:
                extent = max(1, extent + rng.randint(-splits[d] + 1, splits[d] - 1))
            shape.append(extent)
        v = self.insert_arg(Value(tuple(shape), rng.choice(DTYPES)),
                            Sharding(src_mesh.name, src_dims))
        return self.add(Op("reshard", [v], sharding=Sharding(dst_mesh.name, dst_dims)))

    def step_move(self):
        rng = self.rng
        if EXCHANGES["on"] and rng.random() < 0.3:
            if self.step_exchange() is not None:
                return
        v = self.pick()
        t = self.types[v]
        sh = gen_sharding(rng, self.meshes, t.shape)
        kind = "reshard" if rng.random() < 0.75 else "constraint"
        self.add(Op(kind, [v], sharding=sh))

    def elementwise_operand(self, pred):
        v = self.pick(pred)
        if v is None:
            return None
        return v

    def step_compute(self):
        rng = self.rng
        if GATHERS["on"] and rng.random() < 0.15:
            return self.step_gather()
        r = rng.random()
        if r < 0.14:
            return self.step_move()
        if r < 0.34:  # binary elementwise
            v = self.elementwise_operand(lambda t: True)
            if v is None:
                return
            t = self.types[v]
            if t.dtype in FLOATS:
                kind = rng.choice(BINARY_F)
            elif t.dtype == "i1":
                kind = rng.choice(BINARY_I1)
            else:
                kind = rng.choice(BINARY_I)
            w = self.partner(v, kind=kind)
            return self.add(Op(kind, [v, w]))
        if r < 0.42:  # unary float
            v = self.elementwise_operand(lambda t: t.dtype in FLOATS)
            if v is None:
                return
            return self.add(Op(rng.choice(UNARY_F), [v]))
        if r < 0.47:  # compare, then maybe select
            v = self.elementwise_operand(lambda t: t.dtype != "i1")
            if v is None:
                return
            w = self.partner(v)
            fl = self.types[v].dtype in FLOATS
            c = self.add(Op("arith.cmpf" if fl else "arith.cmpi", [v, w],
                            pred=rng.choice(["olt", "oge", "oeq"] if fl else ["slt", "sge", "ne"])))
            # select(c, x, x) folds to x: the self-fold crash again
            if rng.random() < 0.6:
                return self.add(Op("select", [c, v, w]))
            return c
        if r < 0.53:  # casts
            kind = rng.choice(sorted(CASTS))
            v = self.elementwise_operand(lambda t: t.dtype in CASTS[kind][0])
            if v is None:
                return
            return self.add(Op(kind, [v]))
        if r < 0.61:  # transpose
            v = self.pick(lambda t: len(t.shape) >= 2)
            if v is None:
                return
            perm = list(range(len(self.types[v].shape)))
            while perm == sorted(perm):
                rng.shuffle(perm)
            return self.add(Op("transpose", [v], perm=perm))
        if r < 0.69:  # expand / collapse
            if rng.random() < 0.5:
                v = self.pick(lambda t: 1 <= len(t.shape) <= 3 and any(
                    d > 1 and any(d % p == 0 for p in range(2, d)) for d in t.shape))
                if v is None:
                    return
                sh = self.types[v].shape
                dims = [i for i, d in enumerate(sh) if any(d % p == 0 for p in range(2, d))]
                d = rng.choice(dims)
                p = rng.choice([p for p in range(2, sh[d]) if sh[d] % p == 0])
                return self.add(Op("expand", [v], dim=d, factor=p))
            v = self.pick(lambda t: len(t.shape) >= 2)
            if v is None:
                return
            return self.add(Op("collapse", [v], dim=rng.randrange(len(self.types[v].shape) - 1)))
        if r < 0.77:  # matmul: f32/f64 exact operands, or integers
            v = self.pick(lambda t: len(t.shape) == 2 and t.dtype in ("f32", "f64", "i32", "i64", "i8")
                          and t.shape[1] <= 16)
            if v is None:
                return
            if not self.exact[v] and not INEXACT["on"]:
                return
            t = self.types[v]
            n = rng.choice([1, 2, 3, 4, 6, 8])
            w = self.insert_arg(Value((t.shape[1], n), t.dtype))
            if w <= v:
                v += 1
            return self.add(Op("matmul", [v, w]))
        if r < 0.85:  # reductions: sums exact (ints, exact f32/f64), max any
            v = self.pick(lambda t: len(t.shape) >= 1 and t.dtype != "i1")
            if v is None:
                return
            t = self.types[v]
            if t.dtype in FLOATS:
                if t.dtype in ("f32", "f64") and (self.exact[v] or INEXACT["on"]) and prod(t.shape) <= 256:
                    comb = rng.choice(["arith.addf", "arith.maximumf"])
                else:
                    comb = "arith.maximumf"
            else:
                comb = rng.choice(["arith.addi", "arith.addi", "arith.maxsi"])
            return self.add(Op("reduce", [v], dim=rng.randrange(len(t.shape)), combiner=comb,
                               form=rng.choice(["reduce", "generic"])))
        if r < 0.9:  # constants and fills as operands
            v = self.elementwise_operand(lambda t: True)
            if v is None:
                return
            t = self.types[v]
            if rng.random() < 0.5:
                c = self.add(Op("fill", [], shape=t.shape, dtype=t.dtype, value=rng.randrange(3)))
            else:
                c = self.add(Op("splat", [], shape=t.shape, dtype=t.dtype,
                                salt=rng.randrange(1000), uniform=False))
            kind = {"i1": "arith.xori"}.get(t.dtype, "arith.addf" if t.dtype in FLOATS else "arith.addi")
            return self.add(Op(kind, [v, c]))
        if r < 0.95:  # index ops
            if rng.random() < 0.5:
                v = self.elementwise_operand(lambda t: t.dtype in ("i32", "i64") and t.shape)
                if v is None:
                    return
                return self.add(Op("index-add", [v], dim=rng.randrange(len(self.types[v].shape))))
            shape = rand_shape(self.rng, rng.choice([1, 2]))
            return self.add(Op("generate", [], shape=shape, dtype=rng.choice(["i32", "i64"]),
                               dim=rng.randrange(len(shape))))
        if "odd-width" in self.avoid:
            return
        v = self.elementwise_operand(lambda t: t.dtype in ("i8", "i32"))
        if v is None:
            return
        return self.add(Op("odd-width", [v], width=rng.choice(["i17", "i4", "i12"])))

    def step_gather(self):
        """table[clamp(ids), ...]: any table of rank 1 or 2, integer ids of
        rank 1 or 2 (a new argument when there are none)."""
        rng = self.rng
        table = self.pick(lambda t: 1 <= len(t.shape) <= 2)
        ids = self.pick(lambda t: t.dtype in ("i32", "i64") and 1 <= len(t.shape) <= 2)
        if table is None:
            return
        if ids is None:
            ids = self.new_arg(rand_shape(rng, rng.choice([1, 2])), rng.choice(["i32", "i64"]))
        return self.add(Op("gather", [table, ids]))

    def step_place(self):
        rng = self.rng
        r = rng.random()
        if r < 0.5:
            return self.step_move()
        if r < 0.8:
            v = self.pick(lambda t: len(t.shape) >= 1)
            if v is None:
                return
            sh = self.types[v].shape
            if len(sh) >= 2 and rng.random() < 0.5:
                return self.add(Op("collapse", [v], dim=rng.randrange(len(sh) - 1)))
            dims = [i for i, d in enumerate(sh) if any(d % p == 0 for p in range(2, d))]
            if not dims or len(sh) > 3:
                return
            d = rng.choice(dims)
            p = rng.choice([p for p in range(2, sh[d]) if sh[d] % p == 0])
            return self.add(Op("expand", [v], dim=d, factor=p))
        shape = rand_shape(rng)
        dtype = rng.choice(DTYPES)
        if rng.random() < 0.5:
            return self.add(Op("fill", [], shape=shape, dtype=dtype, value=rng.randrange(3)))
        return self.add(Op("splat", [], shape=shape, dtype=dtype, salt=rng.randrange(1000),
                           uniform=rng.random() < 0.3))

    def generate(self):
        rng = self.rng
        nargs = rng.randint(1, 3)
        shape = rand_shape(rng)
        for _ in range(nargs):
            dtype = rng.choice(DTYPES)
            self.new_arg(shape if rng.random() < 0.7 else rand_shape(rng), dtype)
        steps = rng.randint(1, 6 if self.kind == "compute" else 4)
        for _ in range(steps):
            if self.kind == "compute":
                self.step_compute()
            elif self.kind == "place":
                self.step_place()
            else:
                self.step_move()
        self.pick_results()
        return self.f

    def pick_results(self):
        rng = self.rng
        n = len(self.types)
        res = {n - 1}
        for i in range(n):
            if rng.random() < 0.15:
                res.add(i)
        for v in sorted(res):
            sh = None
            if rng.random() < 0.35:
                sh = gen_sharding(rng, self.meshes, self.types[v].shape)
            self.f.results.append((v, sh))
        # Every leaf must be placeable: an ambient mesh covers unplaced ones.
        if rng.random() < 0.4 or any(s is None for _, s in self.f.args) or \
                any(op.kind in ("fill", "splat", "generate") for _, op in self.f.ops):
            self.f.ambient = rng.choice(list(self.meshes))


# --------------------------------------------------------------------------
# Running the tools
# --------------------------------------------------------------------------

LINE_RE = re.compile(r"^@(\w+): (.*)$")
CRASH_RE = re.compile(r"Stack dump|LLVM ERROR|Assertion|PLEASE submit|Segmentation|terminate called|"
                      r"internal error|AddressSanitizer|runtime error:")


class Tools:
    def __init__(self, run, opt, timeout, run_args=(), launcher=None):
        self.run, self.opt, self.timeout = run, opt, timeout
        # Extra polymesh-run flags (--opt-level=0 compiles about 1.7x faster).
        self.run_args = list(run_args)
        # A launcher (e.g. "mpirun -np 3") runs polymesh-run as several
        # processes: --backend=mpi and multi-process NCCL instead of one
        # process's backends.
        self.launcher = shlex.split(launcher) if launcher else None

    def configs(self, kind):
        """The checks each module kind goes through."""
        opt = ("opt", [self.opt, "--polymesh-pipeline=target=cpu", "-o", os.devnull])
        if self.launcher:
            # "{}" marks where the module goes (after the launcher's flags).
            c = [opt, ("mpi", self.launcher + [self.run, "{}", "--backend=mpi", "--verify"]
                       + self.run_args)]
            if kind in ("move", "place"):
                c.append(("nccl-mpi", self.launcher + [self.run, "{}", "--backend=nccl",
                                                       "--simulate-gpus", "--verify"]
                          + self.run_args))
            return c
        c = [opt, ("loopback", [self.run, "--verify"] + self.run_args)]
        if kind == "move":
            c.append(("executor", [self.run, "--verify", "--sharded-path=executor"] + self.run_args))
        if kind in ("move", "place"):
            c.append(("nccl", [self.run, "--verify", "--backend=nccl", "--simulate-gpus"] + self.run_args))
        return c


def run_cmd(cmd, path, timeout):
    try:
        argv = [path if a == "{}" else a for a in cmd] if "{}" in cmd else cmd[:1] + [path] + cmd[1:]
        p = subprocess.run(argv, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=timeout, text=True, errors="replace")
        return p.returncode, p.stdout, p.stderr
    except subprocess.TimeoutExpired as e:
        # TimeoutExpired carries bytes even with text=True
        def text(b):
            return b.decode(errors="replace") if isinstance(b, bytes) else (b or "")
        return "timeout", text(e.stdout), text(e.stderr)


def normalize(msg):
    """A failure's class: numbers, names and locations stripped."""
    msg = re.sub(r"\S+\.mlir:\d+:\d+:", "", msg)
    msg = re.sub(r"0x[0-9a-f]+", "H", msg)
    msg = re.sub(r"@\w+", "@F", msg)
    msg = re.sub(r"-?\d+(\.\d+)?(e-?\d+)?", "N", msg)
    msg = re.sub(r"%\w+", "%V", msg)
    return msg.strip()[:70]


FRAME_RE = re.compile(r"^\s*#\d+ 0x[0-9a-f]+ (.+?)(?: \(/| [\w./-]+:\d+|$)")


def crash_frame(err):
    """The first named stack frame past the signal handlers: tells crashes
    apart, so that shrinking keeps the same one."""
    for line in err.splitlines():
        m = FRAME_RE.match(line)
        if not m:
            continue
        name = m.group(1)
        # generic frames (handlers, libc, walkers) say little about the bug
        if name.startswith(("llvm::sys::", "(", "__", "std::", "mlir::WalkResult",
                            "mlir::detail::walk")) or "Signal" in name:
            continue
        return re.sub(r"\(.*", "", name).strip()
    m = re.search(r"(LLVM ERROR|Assertion)[^\n]*", err)
    return m.group(0)[:80] if m else "?"


def analyse(config, rc, out, err):
    """Failures of one run: list of (function or None, signature, detail)."""
    fails = []
    seen_lines = False
    for line in out.splitlines():
        m = LINE_RE.match(line)
        if not m:
            continue
        seen_lines = True
        fn, rest = m.groups()
        if ", FAIL: " in rest or rest.startswith("FAIL: "):
            why = rest.split("FAIL: ", 1)[1]
            fails.append((fn, "%s: FAIL: %s" % (config, normalize(why)), why))
    crash = rc == "timeout" or (isinstance(rc, int) and (rc < 0 or rc >= 128)) or CRASH_RE.search(err)
    if crash:
        what = "timeout" if rc == "timeout" else "exit %s" % rc
        frame = crash_frame(err)
        detail = frame or (err.strip().splitlines()[-1] if err.strip() else what)
        fails.append((None, "%s: crash: %s in %s" % (config, what, frame), detail))
    elif rc not in (0, 77) and not fails:
        first = next((l for l in err.splitlines() if "error" in l), err.strip()[:200])
        fails.append((None, "%s: refused: %s" % (config, normalize(first)), first))
    del seen_lines
    return fails


def check_module(tools, kind, text, workdir, only=None):
    """Runs every check; returns the failures [(config, function, sig, detail)]."""
    fd, path = tempfile.mkstemp(suffix=".mlir", dir=workdir)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    out = []
    try:
        for config, cmd in tools.configs(kind):
            if only and config != only:
                continue
            rc, so, se = run_cmd(cmd, path, tools.timeout)
            for fn, sig, detail in analyse(config, rc, so, se):
                out.append((config, fn, sig, detail))
    finally:
        os.unlink(path)
    return out


# --------------------------------------------------------------------------
# Shrinking
# --------------------------------------------------------------------------

def live_ops(f):
    """Drops ops whose results nothing uses (and renumbers)."""
    na = len(f.args)
    used = {v for v, _ in f.results}
    keep = []
    for rid, op in reversed(f.ops):
        if rid in used:
            keep.append((rid, op))
            used.update(op.operands)
    keep.reverse()
    return renumber(f, keep, used)


def renumber(f, ops, used_args=None):
    """Rebuilds f with `ops` (old ids) and, optionally, only used arguments."""
    na = len(f.args)
    g = f.copy()
    mapping = {}
    args = []
    for i, a in enumerate(g.args):
        if used_args is None or i in used_args or not ops and i in {v for v, _ in f.results}:
            mapping[i] = len(args)
            args.append(a)
    if not args:  # keep at least the signature's first argument
        mapping[0] = 0
        args.append(g.args[0])
    g.args = args
    new_ops = []
    for rid, op in ops:
        op = op.copy()
        op.operands = [mapping[o] for o in op.operands]
        mapping[rid] = len(args) + len(new_ops)
        new_ops.append((mapping[rid], op))
    g.ops = new_ops
    g.results = [(mapping[v], s.copy() if s else None) for v, s in f.results]
    del na
    return g


def bypass(f, idx, operand):
    """Removes op idx, its uses read `operand` instead."""
    rid, op = f.ops[idx]
    src = op.operands[operand]
    g = f.copy()
    ops = []
    for r2, o2 in g.ops:
        if r2 == rid:
            continue
        o2.operands = [src if o == rid else o for o in o2.operands]
        ops.append((r2, o2))
    g.results = [(src if v == rid else v, s) for v, s in g.results]
    return live_ops(renumber(g, ops))


def cut(f, idx, how):
    """Op idx replaced by a new last argument (unsharded, ambient placement)
    or by a splat constant of its type."""
    types = infer(f, MESHES_OF[id(f)]) if id(f) in MESHES_OF else None
    if types is None:
        raise Invalid("no types")
    rid, op = f.ops[idx]
    t = types[rid]
    g = f.copy()
    if how == "const":
        if op.kind in ("splat", "fill"):
            raise Invalid("already a constant")
        g.ops[idx] = (rid, Op("splat", [], shape=t.shape, dtype=t.dtype, salt=1, uniform=False))
        if not g.ambient:
            g.ambient = next(iter(MESHES_OF[id(f)]))
        return live_ops(g)
    # as an argument: append it, then renumber through live_ops
    na = len(g.args)
    g.args.append((Value(t.shape, t.dtype), None))
    newid = 10 ** 6  # placeholder, mapped below

    ops = []
    for r2, o2 in g.ops:
        if r2 == rid:
            continue
        o2.operands = [newid if o == rid else o for o in o2.operands]
        ops.append((r2, o2))
    g.results = [(newid if v == rid else v, s2) for v, s2 in g.results]
    if not g.ambient:
        g.ambient = next(iter(MESHES_OF[id(f)]))
    # move the new argument to index na: ids >= na shift by one
    def shift(o):
        return na if o == newid else (o + 1 if o >= na else o)
    g.ops = [(r2 + 1, Op(o2.kind, [shift(o) for o in o2.operands], **o2.attrs)) for r2, o2 in ops]
    g.results = [(shift(v), s2) for v, s2 in g.results]
    return live_ops(renumber(g, g.ops))


# Shrinking needs the meshes to infer types inside candidates.
MESHES_OF = {}


def func_candidates(f):
    """Smaller variants of one function, most aggressive first."""
    # results
    if len(f.results) > 1:
        for i in range(len(f.results)):
            g = f.copy()
            g.results = g.results[:i] + g.results[i + 1:]
            yield live_ops(g)
    # ops: bypass through an operand
    for i in range(len(f.ops) - 1, -1, -1):
        for j in range(len(f.ops[i][1].operands)):
            yield from attempt(bypass, f, i, j)
    # cut the program in front of an op: its result becomes a new argument
    # or a constant
    for i in range(len(f.ops) - 1, -1, -1):
        yield from attempt(cut, f, i, "arg")
        yield from attempt(cut, f, i, "const")
    # shardings
    for i, (v, s) in enumerate(f.args):
        if s:
            g = f.copy()
            g.args[i] = (g.args[i][0], None)
            if not g.ambient:
                g.ambient = s.mesh
            yield g
            yield from sharding_variants(f, lambda g2, s2, i=i: g2.args.__setitem__(i, (g2.args[i][0], s2)), s)
    for i, (v, s) in enumerate(f.results):
        if s:
            g = f.copy()
            g.results[i] = (v, None)
            yield g
            yield from sharding_variants(f, lambda g2, s2, i=i, v=v: g2.results.__setitem__(i, (v, s2)), s)
    for i, (rid, op) in enumerate(f.ops):
        if "sharding" in op.attrs:
            def setter(g2, s2, i=i):
                g2.ops[i][1].attrs["sharding"] = s2
            yield from sharding_variants(f, setter, op.attrs["sharding"])
    if f.ambient:
        g = f.copy()
        g.ambient = None
        yield g
    # dims: shrink one dimension of every argument of the same shape
    for i, (v, _) in enumerate(f.args):
        for d, n in enumerate(v.shape):
            for m in sorted({1, n // 2, n - 1}):
                if 1 <= m < n:
                    g = f.copy()
                    for j, (u, s) in enumerate(g.args):
                        if u.shape == v.shape:
                            sh = list(u.shape)
                            sh[d] = m
                            g.args[j] = (Value(sh, u.dtype), s)
                    for _, op in g.ops:
                        if "shape" in op.attrs and len(op.attrs["shape"]) > d and op.attrs["shape"] == v.shape:
                            sh = list(op.attrs["shape"])
                            sh[d] = m
                            op.attrs["shape"] = tuple(sh)
                    yield g
    # dtypes: f32 for floats, i32 for ints, all arguments of one type at once
    for i, (v, _) in enumerate(f.args):
        target = "f32" if v.dtype in FLOATS else "i32" if v.dtype != "i1" else None
        if target and target != v.dtype:
            g = f.copy()
            for j, (u, s) in enumerate(g.args):
                if u.dtype == v.dtype:
                    g.args[j] = (Value(u.shape, target), s)
            yield g


def sharding_variants(f, setter, s):
    """The same sharding with one axis ref or the unreduced axes dropped."""
    if s.unreduced:
        g = f.copy()
        s2 = s.copy()
        s2.unreduced = []
        setter(g, s2)
        yield g
    for d, refs in enumerate(s.dims):
        for j in range(len(refs)):
            g = f.copy()
            s2 = s.copy()
            s2.dims[d] = refs[:j] + refs[j + 1:]
            setter(g, s2)
            yield g


def mesh_candidates(meshes, funcs):
    """Default device ids, fewer axes."""
    for name, m in meshes.items():
        for j in range(len(m.axes)):
            m2 = dict(meshes)
            m2[name] = Mesh(name, m.axes[:j] + m.axes[j + 1:], m.ids if m.ids is None or
                            m.axes[j][1] == 1 else None)
            if m2[name].ids is None or len(m2[name].ids) == m2[name].size():
                yield m2
        if m.ids is not None and m.axes:
            m2 = dict(meshes)
            m2[name] = Mesh(name, m.axes, None)
            yield m2
        if m.ids is not None and len(m.ids) == 1 and m.ids[0] != 0:
            m2 = dict(meshes)
            m2[name] = Mesh(name, m.axes, [0])
            yield m2


def attempt(fn, *args):
    """fn(*args) as a candidate, or none when it cannot be built."""
    try:
        yield fn(*args)
    except (Invalid, KeyError, IndexError):
        return


class Shrinker:
    def __init__(self, tools, kind, config, sig, workdir, log):
        self.tools, self.kind, self.config, self.sig = tools, kind, config, sig
        self.workdir, self.log = workdir, log
        self.tries = 0

    def fails(self, meshes, funcs):
        try:
            text = emit_module(meshes, funcs)
        except (Invalid, KeyError, IndexError):
            return False
        self.tries += 1
        got = check_module(self.tools, self.kind, text, self.workdir, only=self.config)
        return any(sig == self.sig for _, _, sig, _ in got)

    def shrink(self, meshes, funcs, budget):
        start = time.time()
        # ddmin over functions: halves, then single functions
        n = 2
        while len(funcs) > 1 and time.time() - start < budget:
            chunk = max(1, len(funcs) // n)
            reduced = False
            for i in range(0, len(funcs), chunk):
                cand = funcs[:i] + funcs[i + chunk:]
                sub = funcs[i:i + chunk]
                if self.fails(meshes, sub):
                    funcs, n, reduced = sub, 2, True
                    break
                if cand and self.fails(meshes, cand):
                    funcs, n, reduced = cand, max(n - 1, 2), True
                    break
            if not reduced:
                if chunk == 1:
                    break
                n = min(len(funcs), n * 2)
        # greedy over everything inside, to a fixed point
        changed = True
        while changed and time.time() - start < budget:
            changed = False
            for fi in range(len(funcs)):
                MESHES_OF.clear()
                MESHES_OF[id(funcs[fi])] = meshes
                for cand in func_candidates(funcs[fi]):
                    if time.time() - start > budget:
                        break
                    trial = funcs[:fi] + [cand] + funcs[fi + 1:]
                    if self.fails(meshes, trial):
                        funcs, changed = trial, True
                        break
                if changed:
                    break
            if not changed:
                for m2 in mesh_candidates(meshes, funcs):
                    if self.fails(m2, funcs):
                        meshes, changed = m2, True
                        break
        return meshes, funcs


# --------------------------------------------------------------------------
# Batches
# --------------------------------------------------------------------------

def module_kind(rng):
    r = rng.random()
    return "compute" if r < 0.65 else "move" if r < 0.85 else "place"


def build_module(seed, index, funcs_per_module, avoid):
    """Module `index` of batch `seed`: reproducible on its own."""
    rng = random.Random("%d:%d" % (seed, index))
    kind = module_kind(rng)
    meshes = gen_meshes(rng, "m")
    funcs = []
    for j in range(funcs_per_module):
        frng = random.Random("%d:%d:%d" % (seed, index, j))
        for attempt in range(20):
            try:
                f = Gen(frng, meshes, "f%d_%d" % (index, j), kind, avoid).generate()
                infer(f, meshes)
                if kind == "move" and not f.movement_only:
                    continue
                funcs.append(f)
                break
            except Invalid:
                continue
    return kind, meshes, funcs


def lit_test(text, kind, config, funcs, sig, detail, seed, index):
    cmd = {"loopback": "polymesh-run %s --verify | FileCheck %s",
           "executor": "polymesh-run %s --verify --sharded-path=executor | FileCheck %s",
           "nccl": "polymesh-run %s --verify --backend=nccl --simulate-gpus | FileCheck %s",
           "opt": "polymesh-opt %s --polymesh-pipeline=target=cpu -o /dev/null"}[config]
    head = ["// Found by utils/gen-programs.py --seed %d (module %d, %s module); shrunk." % (seed, index, kind),
            "// Failure: %s" % sig,
            "// Detail: %s" % detail.strip()[:300].replace("\n", " "),
            "// RUN: %s" % cmd]
    if config != "opt":
        head += ["// CHECK: @%s: {{.*}}, PASS" % f.name for f in funcs]
        head.append("// CHECK: %d passed, 0 failed" % len(funcs))
    return "\n".join(head) + "\n\n" + text


def known_tag(sig, detail, funcs):
    kinds = {op.kind for f in funcs for _, op in f.ops}
    types = {v.dtype for f in funcs for v, _ in f.args}
    if "odd-width" in kinds:
        return "odd-width"
    del types
    return None


def run_batch(args, tools):
    os.makedirs(args.out, exist_ok=True)
    workdir = tempfile.mkdtemp(prefix="gen-", dir=args.out)
    avoid = AVOID
    nmod = (args.count + args.funcs_per_module - 1) // args.funcs_per_module

    def one(index):
        per = min(args.funcs_per_module, args.count - index * args.funcs_per_module)
        kind, meshes, funcs = build_module(args.seed, index, per, avoid)
        text = emit_module(meshes, funcs, ["// gen-programs.py --seed %d, module %d (%s)" % (args.seed, index, kind)])
        fails = check_module(tools, kind, text, workdir)
        return index, kind, meshes, funcs, text, fails

    start = time.time()
    results = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for res in pool.map(one, range(nmod)):
            results.append(res)
            index, kind, _, funcs, text, fails = res
            if fails:
                path = os.path.join(args.out, "module-%d-%d.mlir" % (args.seed, index))
                with open(path, "w") as fh:
                    fh.write(text)
                for config, fn, sig, detail in fails:
                    print("FAIL module %d (%s) %s %s: %s" % (index, kind, config, fn or "-", detail[:200]),
                          flush=True)
    elapsed = time.time() - start
    programs = sum(len(r[3]) for r in results)
    failed_funcs = set()
    distinct = {}
    for index, kind, meshes, funcs, text, fails in results:
        for config, fn, sig, detail in fails:
            failed_funcs.add((index, fn or "*module*"))
            distinct.setdefault(sig, (index, kind, meshes, funcs, config, fn, detail))
    print("%d programs in %d modules, %d failed, %d distinct failures, %.1f s (seed %d)"
          % (programs, nmod, len(failed_funcs), len(distinct), elapsed, args.seed))
    for sig in sorted(distinct):
        print("  distinct: %s" % sig)
    if args.shrink and distinct:
        shrink_all(args, tools, distinct, workdir)
    shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed_funcs else 0


def shrink_all(args, tools, distinct, workdir):
    found = os.path.join(args.out, "shrunk")
    os.makedirs(found, exist_ok=True)
    for n, (sig, (index, kind, meshes, funcs, config, fn, detail)) in enumerate(sorted(distinct.items())):
        start = time.time()
        if fn:
            funcs = [f for f in funcs if f.name == fn] or funcs
        s = Shrinker(tools, kind, config, sig, workdir, sys.stdout)
        if not s.fails(meshes, funcs):
            print("shrink %d: does not reproduce alone: %s" % (n, sig))
            continue
        meshes2, funcs2 = s.shrink(meshes, funcs, args.shrink_seconds)
        text = emit_module(meshes2, funcs2)
        tag = known_tag(sig, detail, funcs2)
        path = os.path.join(found, "seed%d-module%d-%d.mlir" % (args.seed, index, n))
        with open(path, "w") as fh:
            fh.write(lit_test(text, kind, config, funcs2, sig, detail, args.seed, index))
        print("shrunk %d (%d tries, %.0f s)%s: %s -> %s" % (n, s.tries, time.time() - start,
                                                          " [known: %s]" % tag if tag else "", sig, path))
        print(text)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seed", type=int, default=None, help="batch seed (default: random, printed)")
    p.add_argument("--count", type=int, default=100, help="programs (functions) to generate")
    p.add_argument("--jobs", type=int, default=2, help="modules checked in parallel")
    p.add_argument("--out", default="gen-out", help="failing modules and shrunk tests go here")
    p.add_argument("--shrink", action="store_true", help="shrink every distinct failure")
    p.add_argument("--shrink-seconds", type=float, default=120, help="time limit per failure")
    p.add_argument("--funcs-per-module", type=int, default=25)
    p.add_argument("--avoid-known", action="store_true",
                   help="leave out features with known pending bugs: " + ", ".join(sorted(KNOWN)))
    p.add_argument("--avoid", action="append", choices=sorted(KNOWN), help="leave out one such feature")
    p.add_argument("--emit", type=int, metavar="MODULE", help="print module MODULE of the batch and exit")
    p.add_argument("--bin-dir", default=None, help="where polymesh-run and polymesh-opt are")
    p.add_argument("--polymesh-run", default=None)
    p.add_argument("--polymesh-opt", default=None)
    p.add_argument("--timeout", type=float, default=300, help="seconds per tool run")
    p.add_argument("--launcher", metavar="CMD",
                   help="run polymesh-run under this launcher as several processes "
                        "(e.g. --launcher='mpirun -np 3'): --backend=mpi and multi-process "
                        "--backend=nccl --simulate-gpus instead of the one-process checks")
    p.add_argument("--run-arg", action="append", default=[], metavar="FLAG",
                   help="pass FLAG to every polymesh-run (e.g. --run-arg=--opt-level=0)")
    p.add_argument("--max-devices", type=int, default=8,
                   help="device ids range over [0, N); above 8, some meshes "
                   "get one large axis (sums and gathers over large groups)")
    p.add_argument("--calls", action="store_true",
                   help="outline about a third of the computing ops into private helpers called by func.call")
    p.add_argument("--gathers", action="store_true",
                   help="also generate gathers: linalg bodies reading a table from above at clamped indices")
    p.add_argument("--exchanges", action="store_true",
                   help="also generate transposes of a sharding over every axis of a mesh "
                   "(all-to-alls of whole tiles)")
    p.add_argument("--inexact-sums", action="store_true",
                   help="also sum floats that are not exact (checked lock-step by polymesh-run --verify)")
    args = p.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
        print("seed %d" % args.seed)
    AVOID.update(set(KNOWN) if args.avoid_known else set(args.avoid or []))
    OUTLINE["calls"] = args.calls
    GATHERS["on"] = args.gathers
    EXCHANGES["on"] = args.exchanges
    INEXACT["on"] = args.inexact_sums
    global MAX_DEVICES
    if args.max_devices < 8:
        p.error("--max-devices must be at least 8")
    MAX_DEVICES = args.max_devices
    if args.emit is not None:
        kind, meshes, funcs = build_module(args.seed, args.emit, args.funcs_per_module, AVOID)
        print(emit_module(meshes, funcs, ["// gen-programs.py --seed %d, module %d (%s)"
                                          % (args.seed, args.emit, kind)]))
        return 0
    here = os.path.dirname(os.path.abspath(__file__))
    bindir = args.bin_dir or os.path.join(here, "..", "build", "bin")
    tools = Tools(args.polymesh_run or os.path.join(bindir, "polymesh-run"),
                  args.polymesh_opt or os.path.join(bindir, "polymesh-opt"), args.timeout,
                  args.run_arg, args.launcher)
    return run_batch(args, tools)


if __name__ == "__main__":
    sys.exit(main())
