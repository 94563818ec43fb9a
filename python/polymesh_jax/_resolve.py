"""resolve_out_shardings(): Polymesh's per-leaf placement, as the JAX
shardings to pass to `jax.jit(..., out_shardings=...)`."""

from __future__ import annotations

import dataclasses
import re
import warnings
from typing import Any, Callable, Optional, Sequence

import jax

from ._attrs import Sharding, parse_functions, parse_meshes
from ._emit import ExportError
from ._export import Program, export_program
from ._meshes import coarsened
from ._tools import run_tool


class PolymeshWarning(UserWarning):
    """polymesh-opt warned while resolving (e.g. an op without a sharding
    rule, computed replicated)."""


@dataclasses.dataclass
class Resolution:
    program: Program
    propagated: str  # polymesh-opt's output
    leaf_shardings: list[Sharding]  # one per result leaf, in flattened order
    out_shardings: Any  # the pytree of JAX shardings


def _warn(stderr: str) -> None:
    """polymesh-opt's warnings as one PolymeshWarning; ops without a rule
    are counted by kind."""
    ruleless: dict[str, int] = {}
    others = []
    seen = set()
    for line in stderr.splitlines():
        if ": warning: " not in line or line in seen:
            continue
        seen.add(line)
        match = re.search(r"no sharding rule for '([^']+)'", line)
        if match:
            ruleless[match.group(1)] = ruleless.get(match.group(1), 0) + 1
        else:
            others.append(line.split(": warning: ", 1)[1])
    if ruleless:
        kinds = ", ".join(f"{name} ({count})" for name, count in sorted(ruleless.items()))
        others.insert(0, f"ops without a sharding rule, computed replicated: {kinds}")
    if others:
        warnings.warn("polymesh-opt --polymesh-propagate: " + "; ".join(others), PolymeshWarning, stacklevel=4)


def resolve(fn: Callable, args: Sequence[Any] = (), kwargs: Optional[dict] = None, **options: Any) -> Resolution:
    """Exports `fn`, runs `polymesh-opt --polymesh-propagate` and maps every
    result leaf's sharding back onto the user's own Mesh objects. Options
    are `export_program`'s."""
    program = export_program(fn, args, kwargs, **options)
    options = ["--polymesh-propagate", "--mlir-print-local-scope"]
    if program.opaque_ops:
        options.append("--allow-unregistered-dialect")
    process = run_tool("polymesh-opt", program.text, options)
    propagated = process.stdout
    _warn(process.stderr)
    functions = parse_functions(propagated)
    signature = functions.get(program.function_name)
    if signature is None:
        raise ExportError(f"polymesh-opt's output has no @{program.function_name}")
    printed = parse_meshes(propagated)
    for entry in program.meshes.entries():
        if printed.get(entry.name) is not None and printed[entry.name].ids() != entry.mesh.ids():
            raise ExportError(f"polymesh-opt printed mesh @{entry.name} with other devices")
    if len(signature.results) != len(program.results):
        raise ExportError(
            f"@{program.function_name} has {len(signature.results)} results after propagation, "
            f"{len(program.results)} leaves before")
    shardings = []
    jax_shardings = []
    for result, leaf in zip(signature.results, program.results):
        sharding = result.sharding()
        if sharding is None:
            raise ExportError(f"leaf {leaf.path} has no sharding after propagation")
        shardings.append(sharding)
        # A PartitionSpec has no sub-axes: the leaf keeps its whole axes.
        expressible = coarsened(sharding)
        if expressible != sharding:
            warnings.warn(
                f"leaf {leaf.path}: {sharding.attr_text()} splits a mesh axis into sub-axes, which a "
                f"PartitionSpec cannot express; its out_sharding is the coarser "
                f"{expressible.attr_text()}", PolymeshWarning, stacklevel=2)
        jax_shardings.append(program.meshes.to_jax(expressible, f"leaf {leaf.path}"))
    tree = jax.tree_util.tree_unflatten(program.out_tree, jax_shardings)
    return Resolution(program, propagated, shardings, tree)


def resolve_out_shardings(fn: Callable, *args: Any, unmapped: str = "error", **kwargs: Any) -> Any:
    """The out_shardings pytree that places every leaf of `fn(*args,
    **kwargs)` where Polymesh's propagation puts it, on the user's own mesh:

        jax.jit(fn, out_shardings=resolve_out_shardings(fn, *args))(*args)

    Each leaf becomes a `NamedSharding` over the very `jax.sharding.Mesh`
    object its value was placed on (or a `SingleDeviceSharding` for a value
    placed on one device), whatever the order of the leaves. A leaf split
    over a sub-axis gets the coarser spec of its whole axes, with a
    PolymeshWarning. `unmapped` is `export_program`'s ("opaque" resolves
    programs with ops the bridge does not map).
    """
    return resolve(fn, args, kwargs, unmapped=unmapped).out_shardings
