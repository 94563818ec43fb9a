"""Meshes and shardings as plain data, with a parser for their text.

The same small grammar covers Shardy's attributes (what JAX's lowering
writes: `#sdy.sharding<@mesh, [{"a"}, {}]>`, `#sdy.mesh<["a"=2]>`) and
Polymesh's (`#polymesh.sharding<@m, [{"a", ?}], unreduced={"b"}>`,
`polymesh.mesh @m = <["a"=2], device_ids=[4, 5]>`), so shardings read from a
lowered JAX module and from `polymesh-opt`'s output go through one model.
Nothing here imports JAX.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Iterator, Optional, Sequence


class AttrSyntaxError(ValueError):
    """A mesh or sharding attribute whose text this module cannot read."""


@dataclasses.dataclass(frozen=True)
class AxisRef:
    """A mesh axis, or the sub-axis `"name":(pre)size` of one."""

    name: str
    pre_size: int = 1
    size: Optional[int] = None  # None: the whole axis

    @property
    def is_sub_axis(self) -> bool:
        return self.size is not None

    def text(self) -> str:
        if self.size is None:
            return _quote(self.name)
        return f"{_quote(self.name)}:({self.pre_size}){self.size}"


@dataclasses.dataclass(frozen=True)
class DimSharding:
    """The axes splitting one tensor dimension, major to minor."""

    axes: tuple[AxisRef, ...] = ()
    is_open: bool = False

    def text(self) -> str:
        parts = [axis.text() for axis in self.axes]
        if self.is_open:
            parts.append("?")
        return "{" + ", ".join(parts) + "}"


@dataclasses.dataclass(frozen=True)
class Sharding:
    """`<@mesh, [dims...], replicated={...}, unreduced={...}>`."""

    mesh: str
    dims: tuple[DimSharding, ...]
    replicated: tuple[AxisRef, ...] = ()
    unreduced: tuple[AxisRef, ...] = ()

    def body_text(self) -> str:
        text = f"<{symbol_text(self.mesh)}, [" + ", ".join(d.text() for d in self.dims) + "]"
        if self.replicated:
            text += ", replicated={" + ", ".join(a.text() for a in self.replicated) + "}"
        if self.unreduced:
            text += ", unreduced={" + ", ".join(a.text() for a in self.unreduced) + "}"
        return text + ">"

    def attr_text(self) -> str:
        return "#polymesh.sharding" + self.body_text()

    def with_mesh(self, mesh: str) -> "Sharding":
        return dataclasses.replace(self, mesh=mesh)

    def axis_names(self) -> set[str]:
        names = {a.name for d in self.dims for a in d.axes}
        names.update(a.name for a in self.replicated)
        names.update(a.name for a in self.unreduced)
        return names


@dataclasses.dataclass(frozen=True)
class MeshDef:
    """Named axes with sizes, and the device id at each position (row-major,
    last axis fastest). `device_ids` None means `0..N-1`."""

    axes: tuple[tuple[str, int], ...]
    device_ids: Optional[tuple[int, ...]] = None

    @property
    def size(self) -> int:
        total = 1
        for _, size in self.axes:
            total *= size
        return total

    def ids(self) -> tuple[int, ...]:
        if self.device_ids is not None:
            return self.device_ids
        return tuple(range(self.size))

    def text(self) -> str:
        text = "<[" + ", ".join(f"{_quote(n)}={s}" for n, s in self.axes) + "]"
        ids = self.ids()
        if ids != tuple(range(self.size)) or not self.axes:
            text += ", device_ids=[" + ", ".join(str(i) for i in ids) + "]"
        return text + ">"


def _quote(name: str) -> str:
    """`name` as an MLIR string literal, escaped byte for byte as
    `llvm::printEscapedString` (what polymesh-opt prints): printable ASCII
    as is, `\\` doubled, everything else (`"`, control characters, each
    UTF-8 byte beyond ASCII) as `\\XX`."""
    if not isinstance(name, str):
        raise AttrSyntaxError(f"a mesh axis or symbol name must be a str, got {name!r}")
    try:
        data = name.encode("utf-8")
    except UnicodeEncodeError as error:
        raise AttrSyntaxError(f"the name {name!r} is not valid Unicode text: {error.reason}") from None
    out = []
    for byte in data:
        if byte == 0x5C:
            out.append("\\\\")
        elif 0x20 <= byte <= 0x7E and byte != 0x22:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:02X}")
    return '"' + "".join(out) + '"'


_BARE_ID = re.compile(r"[A-Za-z_][A-Za-z0-9_$.]*")


def symbol_text(name: str) -> str:
    """`@name` as MLIR prints a symbol reference: bare where `name` is an
    identifier, else quoted and escaped (`@"my mesh"`)."""
    if isinstance(name, str) and _BARE_ID.fullmatch(name):
        return "@" + name
    return "@" + _quote(name)


# --------------------------------------------------------------------------
# Tokenizer and parser.

_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\.)*")
    | (?P<symbol>@(?:[A-Za-z_$.][\w$.\-]*|"(?:[^"\\]|\\.)*"))
    | (?P<int>-?\d+)
    | (?P<word>[A-Za-z_#][\w.#]*)
    | (?P<punct>[<>\[\]{}(),=:?])
    )""",
    re.VERBOSE,
)


def _unquote(text: str) -> str:
    """The value of an MLIR string literal: `\\"`, `\\\\`, `\\n`, `\\t` and
    `\\XX` (one byte each), the bytes then read as UTF-8."""
    body = text[1:-1]
    out = bytearray()
    i = 0
    simple = {"\\": b"\\", '"': b'"', "n": b"\n", "t": b"\t"}
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            nxt = body[i + 1]
            if nxt in simple:
                out += simple[nxt]
                i += 2
                continue
            hexpair = body[i + 1 : i + 3]
            if re.fullmatch(r"[0-9A-Fa-f]{2}", hexpair):
                out.append(int(hexpair, 16))
                i += 3
                continue
            raise AttrSyntaxError(f"unknown escape '\\{nxt}' in the string {text}")
        out += ch.encode("utf-8")
        i += 1
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as error:
        raise AttrSyntaxError(f"the string {text} is not UTF-8: {error.reason}") from None


class _Parser:
    def __init__(self, text: str):
        self.text = text
        self.tokens: list[tuple[str, str]] = []
        pos = 0
        while pos < len(text):
            if text[pos:].strip() == "":
                break
            match = _TOKEN.match(text, pos)
            if not match or match.end() == pos:
                raise AttrSyntaxError(f"cannot read {text!r} at offset {pos}")
            kind = match.lastgroup
            self.tokens.append((kind, match.group(kind)))
            pos = match.end()
        self.index = 0

    def peek(self, offset: int = 0) -> tuple[str, str]:
        if self.index + offset < len(self.tokens):
            return self.tokens[self.index + offset]
        return ("eof", "")

    def next(self) -> tuple[str, str]:
        token = self.peek()
        if token[0] == "eof":
            raise AttrSyntaxError(f"unexpected end of {self.text!r}")
        self.index += 1
        return token

    def expect(self, value: str) -> None:
        kind, text = self.next()
        if text != value:
            raise AttrSyntaxError(f"expected {value!r}, got {text!r} in {self.text!r}")

    def accept(self, value: str) -> bool:
        if self.peek()[1] == value:
            self.index += 1
            return True
        return False

    def integer(self) -> int:
        kind, text = self.next()
        if kind != "int":
            raise AttrSyntaxError(f"expected an integer, got {text!r} in {self.text!r}")
        return int(text)

    def string(self) -> str:
        kind, text = self.next()
        if kind != "string":
            raise AttrSyntaxError(f"expected a string, got {text!r} in {self.text!r}")
        return _unquote(text)

    def at_end(self) -> bool:
        return self.peek()[0] == "eof"

    # mesh: `<["a"=2, "b"=4], device_ids=[...]>` (the leading `#sdy.mesh` or
    # `mesh` keyword is accepted and skipped).
    def mesh(self) -> MeshDef:
        if self.peek()[0] == "word":
            self.next()
        self.expect("<")
        self.expect("[")
        axes: list[tuple[str, int]] = []
        while not self.accept("]"):
            name = self.string()
            self.expect("=")
            axes.append((name, self.integer()))
            self.accept(",")
        device_ids = None
        while self.accept(","):
            key = self.next()[1]
            self.expect("=")
            if key == "device_ids":
                self.expect("[")
                ids = []
                while not self.accept("]"):
                    ids.append(self.integer())
                    self.accept(",")
                device_ids = tuple(ids)
            else:
                raise AttrSyntaxError(f"unknown mesh field {key!r} in {self.text!r}")
        self.expect(">")
        return MeshDef(tuple(axes), device_ids)

    def axis_ref(self) -> AxisRef:
        name = self.string()
        if self.accept(":"):
            self.expect("(")
            pre = self.integer()
            self.expect(")")
            return AxisRef(name, pre, self.integer())
        return AxisRef(name)

    def axis_set(self) -> tuple[AxisRef, ...]:
        self.expect("{")
        axes = []
        while not self.accept("}"):
            axes.append(self.axis_ref())
            self.accept(",")
        return tuple(axes)

    def dim(self) -> DimSharding:
        self.expect("{")
        axes = []
        is_open = False
        while not self.accept("}"):
            if self.accept("?"):
                is_open = True
            else:
                axes.append(self.axis_ref())
            self.accept(",")
        # Shardy priorities (`{"a"}p1`) do not place data; they are dropped.
        kind, text = self.peek()
        if kind == "word" and re.fullmatch(r"p\d+", text):
            self.next()
        return DimSharding(tuple(axes), is_open)

    # sharding: `[#sdy.sharding|#polymesh.sharding]<@mesh, [dims], ...>`;
    # an inline Shardy mesh (`mesh<[...]>`) is returned as `inline_mesh`.
    def sharding(self) -> tuple[Sharding, Optional[MeshDef]]:
        if self.peek()[0] == "word":
            self.next()
        self.expect("<")
        inline = None
        kind, text = self.peek()
        if kind == "symbol":
            self.next()
            mesh = text[1:]
            if mesh.startswith('"'):
                mesh = _unquote(mesh)
        else:
            inline = self.mesh()
            mesh = ""
        self.expect(",")
        self.expect("[")
        dims = []
        while not self.accept("]"):
            dims.append(self.dim())
            self.accept(",")
        replicated: tuple[AxisRef, ...] = ()
        unreduced: tuple[AxisRef, ...] = ()
        while self.accept(","):
            key = self.next()[1]
            self.expect("=")
            if key == "replicated":
                replicated = self.axis_set()
            elif key == "unreduced":
                unreduced = self.axis_set()
            else:
                raise AttrSyntaxError(f"unknown sharding field {key!r} in {self.text!r}")
        self.expect(">")
        return Sharding(mesh, tuple(dims), replicated, unreduced), inline


def parse_mesh(text: str) -> MeshDef:
    """Reads `<["a"=2], device_ids=[...]>`, `#sdy.mesh<...>` or `mesh<...>`."""
    parser = _Parser(text)
    mesh = parser.mesh()
    if not parser.at_end():
        raise AttrSyntaxError(f"trailing text in mesh {text!r}")
    return mesh


def parse_sharding(text: str) -> tuple[Sharding, Optional[MeshDef]]:
    """Reads one sharding; returns it and its inline mesh, if it has one."""
    parser = _Parser(text)
    sharding = parser.sharding()
    if not parser.at_end():
        raise AttrSyntaxError(f"trailing text in sharding {text!r}")
    return sharding


def parse_sharding_list(text: str) -> list[Sharding]:
    """Reads `#sdy.sharding_per_value<[<@m, [...]>, ...]>` or a bracketed
    list of shardings."""
    parser = _Parser(text)
    if parser.peek()[0] == "word":
        parser.next()
        parser.expect("<")
        closing = True
    else:
        closing = False
    parser.expect("[")
    result = []
    while not parser.accept("]"):
        sharding, _ = parser.sharding()
        result.append(sharding)
        parser.accept(",")
    if closing:
        parser.expect(">")
    return result


# --------------------------------------------------------------------------
# Reading polymesh-opt's output.

_MESH_LINE = re.compile(r'^\s*polymesh\.mesh\s+@(?P<name>[\w$.\-]+|"(?:[^"\\]|\\.)*")\s*=\s*(?P<mesh><.*>)\s*$')


def parse_meshes(module_text: str) -> dict[str, MeshDef]:
    """Every `polymesh.mesh @name = <...>` of a printed module."""
    meshes = {}
    for line in module_text.splitlines():
        match = _MESH_LINE.match(line)
        if match:
            name = match.group("name")
            if name.startswith('"'):
                name = _unquote(name)
            meshes[name] = parse_mesh(match.group("mesh"))
    return meshes


def split_top_level(text: str, separator: str = ",") -> Iterator[str]:
    """Splits at `separator` outside brackets and strings."""
    depth = 0
    start = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch == "-" and text[i + 1 : i + 2] == ">":
            i += 1
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth -= 1
        elif ch == separator and depth == 0:
            yield text[start:i]
            start = i + 1
        i += 1
    yield text[start:]


def _matching(text: str, open_index: int) -> int:
    """Index of the bracket closing the one at `open_index`."""
    pairs = {"(": ")", "[": "]", "{": "}", "<": ">"}
    stack = [pairs[text[open_index]]]
    i = open_index + 1
    while i < len(text):
        ch = text[i]
        if ch == '"':
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch == "-" and text[i + 1 : i + 2] == ">":
            i += 1
        elif ch in pairs:
            stack.append(pairs[ch])
        elif ch in ")]}>":
            if ch != stack[-1]:
                raise AttrSyntaxError(f"unbalanced {ch!r} at offset {i}")
            stack.pop()
            if not stack:
                return i
        i += 1
    raise AttrSyntaxError("unbalanced brackets")


@dataclasses.dataclass
class ValueAttrs:
    """A function argument's or result's type and attribute dictionary."""

    type: str
    attrs: dict[str, str]

    def sharding(self) -> Optional[Sharding]:
        text = self.attrs.get("polymesh.sharding")
        return parse_sharding(text)[0] if text is not None else None

    def leaf(self) -> Optional[str]:
        text = self.attrs.get("polymesh.leaf")
        return _unquote(text) if text is not None else None


@dataclasses.dataclass
class FunctionSignature:
    name: str
    arguments: list[ValueAttrs]
    results: list[ValueAttrs]
    attributes: dict[str, str]


def _parse_attr_dict(text: str) -> dict[str, str]:
    text = text.strip()
    assert text.startswith("{") and text.endswith("}")
    attrs = {}
    for entry in split_top_level(text[1:-1]):
        entry = entry.strip()
        if not entry:
            continue
        key, eq, value = entry.partition("=")
        attrs[key.strip()] = value.strip() if eq else "unit"
    return attrs


def _parse_value_list(text: str, with_names: bool) -> list[ValueAttrs]:
    values = []
    for entry in split_top_level(text):
        entry = entry.strip()
        if not entry:
            continue
        if with_names:
            _, _, entry = entry.partition(":")
            entry = entry.strip()
        brace = entry.find(" {")
        # A type never contains " {" at top level; the attribute dict follows.
        if brace >= 0 and entry.endswith("}"):
            values.append(ValueAttrs(entry[:brace].strip(), _parse_attr_dict(entry[brace + 1 :])))
        else:
            values.append(ValueAttrs(entry, {}))
    return values


_FUNC_START = re.compile(r"func\.func\s+(?:(?:public|private|nested)\s+)?@(?P<name>[\w$.\-]+|\"(?:[^\"\\]|\\.)*\")\(")


def parse_functions(module_text: str) -> dict[str, FunctionSignature]:
    """The signature of every `func.func` in a printed module (custom form)."""
    functions = {}
    for match in _FUNC_START.finditer(module_text):
        name = match.group("name")
        if name.startswith('"'):
            name = _unquote(name)
        open_paren = match.end() - 1
        close_paren = _matching(module_text, open_paren)
        arguments = _parse_value_list(module_text[open_paren + 1 : close_paren], with_names=True)
        rest = module_text[close_paren + 1 :]
        results: list[ValueAttrs] = []
        attributes: dict[str, str] = {}
        offset = 0
        stripped = rest.lstrip()
        offset = len(rest) - len(stripped)
        if stripped.startswith("->"):
            after = stripped[2:].lstrip()
            base = close_paren + 1 + offset + 2 + (len(stripped) - 2 - len(after))
            if after.startswith("("):
                end = _matching(module_text, base)
                results = _parse_value_list(module_text[base + 1 : end], with_names=False)
                tail = module_text[end + 1 :]
            else:
                # A single result without attributes: `-> tensor<...> {`.
                type_text = next(split_top_level(after, " "))
                results = [ValueAttrs(type_text, {})]
                tail = after[len(type_text) :]
        else:
            tail = rest
        tail = tail.lstrip()
        if tail.startswith("attributes"):
            start = module_text.index("{", len(module_text) - len(tail))
            end = _matching(module_text, start)
            attributes = _parse_attr_dict(module_text[start : end + 1])
        functions[name] = FunctionSignature(name, arguments, results, attributes)
    return functions


def format_sharding_list(shardings: Sequence[Sharding]) -> str:
    return "[" + ", ".join(s.attr_text() for s in shardings) + "]"
