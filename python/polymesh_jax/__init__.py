"""polymesh_jax: the JAX bridge of Polymesh.

    export(fn, *args, **kwargs) -> str
        Polymesh IR for a jitted JAX function, with its meshes (real device
        ids), argument and result shardings, sharding constraints, leaf paths
        and ambient mesh.

    resolve_out_shardings(fn, *args, **kwargs) -> pytree of shardings
        Runs `polymesh-opt --polymesh-propagate` on the export and maps each
        leaf's sharding back onto the user's own Mesh objects, for
        `jax.jit(fn, out_shardings=...)`.

See docs/jax.md.
"""

from ._attrs import AxisRef, DimSharding, MeshDef, Sharding
from ._emit import ExportError, UnmappedOpError
from ._export import Leaf, Program, ambient_mesh, export, export_program, format_path
from ._meshes import ShardingError
from ._resolve import PolymeshWarning, Resolution, resolve, resolve_out_shardings
from ._tools import ToolError, bin_dir, leaf_table, propagate, run_tool, tool_path

__all__ = [
    "AxisRef", "DimSharding", "PolymeshWarning", "ExportError", "Leaf", "MeshDef", "Program", "Resolution",
    "Sharding", "ShardingError", "ToolError", "UnmappedOpError", "ambient_mesh", "bin_dir",
    "export", "export_program", "format_path", "leaf_table", "propagate", "resolve",
    "resolve_out_shardings", "run_tool", "tool_path",
]
