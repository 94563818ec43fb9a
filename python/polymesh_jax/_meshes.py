"""The meshes of one export: JAX objects on one side, `polymesh.mesh` on the
other, and the conversions of shardings between them."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Optional

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec, SingleDeviceSharding

from ._attrs import AxisRef, DimSharding, MeshDef, Sharding, symbol_text


class ShardingError(ValueError):
    """A sharding that cannot be written as, or read back from, Polymesh IR."""


@dataclasses.dataclass
class MeshEntry:
    name: str
    mesh: MeshDef
    # The user's object: a jax.sharding.Mesh, or a jax Device for a
    # single-device placement (SingleDeviceSharding).
    jax_object: Any


def _sanitize(text: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return cleaned or "_"


def _ids_suffix(ids: tuple[int, ...]) -> str:
    if len(ids) > 1 and all(b - a == 1 for a, b in zip(ids, ids[1:])):
        return f"d{ids[0]}to{ids[-1]}"
    if len(ids) <= 8:
        return "d" + "_".join(str(i) for i in ids)
    return f"d{ids[0]}_{ids[1]}_etc{abs(hash(ids)) % 100000}"


def mesh_of_jax(mesh: jax.sharding.Mesh) -> MeshDef:
    ids = tuple(int(d.id) for d in np.asarray(mesh.devices).flat)
    for name in mesh.axis_names:
        # str() of another hashable would not match the PartitionSpecs that
        # name it; every str round-trips (escaped as polymesh-opt prints it).
        if not isinstance(name, str):
            raise ShardingError(
                f"mesh axis name {name!r} is a {type(name).__name__}; Polymesh meshes name "
                "their axes with strings")
    axes = tuple((name, int(size)) for name, size in zip(mesh.axis_names, mesh.devices.shape))
    return MeshDef(axes, ids)


class MeshTable:
    """Every mesh an export names, keyed by content (axes and device ids), so a
    mesh's name does not depend on where it first appears."""

    def __init__(self, names: Optional[dict] = None):
        self._by_key: dict[tuple, MeshEntry] = {}
        self._by_name: dict[str, MeshEntry] = {}
        self._user_names = names or {}

    def entries(self) -> list[MeshEntry]:
        return sorted(self._by_name.values(), key=lambda e: e.name)

    def __getitem__(self, name: str) -> MeshEntry:
        return self._by_name[name]

    def get(self, name: str) -> Optional[MeshEntry]:
        return self._by_name.get(name)

    def _default_name(self, mesh: MeshDef) -> str:
        if not mesh.axes:
            return "dev" + "_".join(str(i) for i in mesh.ids())
        name = "mesh_" + "_".join(f"{_sanitize(n)}{s}" for n, s in mesh.axes)
        if mesh.ids() != tuple(range(mesh.size)):
            name += "_" + _ids_suffix(mesh.ids())
        return name

    def _user_name(self, jax_object: Any) -> Optional[str]:
        for key, name in self._user_names.items():
            try:
                if key is jax_object or key == jax_object:
                    return name
            except Exception:  # noqa: BLE001 - unrelated objects may not compare
                continue
        return None

    def add(self, mesh: MeshDef, jax_object: Any) -> str:
        key = (mesh.axes, mesh.ids())
        entry = self._by_key.get(key)
        if entry is not None:
            return entry.name
        name = self._user_name(jax_object) or self._default_name(mesh)
        base, counter = name, 1
        while name in self._by_name:
            name = f"{base}_{counter}"
            counter += 1
        entry = MeshEntry(name, mesh, jax_object)
        self._by_key[key] = entry
        self._by_name[name] = entry
        return name

    def add_jax_mesh(self, mesh: jax.sharding.Mesh) -> str:
        return self.add(mesh_of_jax(mesh), mesh)

    def add_device(self, device: Any) -> str:
        return self.add(MeshDef((), (int(device.id),)), device)

    def text(self) -> str:
        return "".join(f"polymesh.mesh {symbol_text(e.name)} = {e.mesh.text()}\n" for e in self.entries())

    # -- JAX sharding -> Polymesh sharding ----------------------------------

    def from_jax(self, sharding: Any, rank: int, what: str) -> Optional[Sharding]:
        """The Polymesh sharding of a JAX sharding of a rank-`rank` value;
        None for "not placed" (no sharding, or JAX's UNSPECIFIED)."""
        if sharding is None or _is_unspecified(sharding):
            return None
        if isinstance(sharding, jax.Device):
            return Sharding(self.add_device(sharding), tuple(DimSharding() for _ in range(rank)))
        if isinstance(sharding, SingleDeviceSharding):
            (device,) = sharding.device_set
            return Sharding(self.add_device(device), tuple(DimSharding() for _ in range(rank)))
        if isinstance(sharding, NamedSharding):
            mesh = sharding.mesh
            if not isinstance(mesh, jax.sharding.Mesh):
                raise ShardingError(
                    f"{what}: the sharding {sharding} names an abstract mesh, which has no "
                    "device ids; give a NamedSharding over a concrete jax.sharding.Mesh")
            name = self.add_jax_mesh(mesh)
            return Sharding(name, *spec_to_dims(sharding.spec, rank, what))
        raise ShardingError(
            f"{what}: {type(sharding).__name__} cannot be written as a Polymesh sharding "
            "(it names no mesh); use a NamedSharding or a SingleDeviceSharding")

    # -- Polymesh sharding -> JAX sharding ----------------------------------

    def to_jax(self, sharding: Sharding, what: str) -> Any:
        """The JAX sharding of `sharding`; a sub-axis, which a
        PartitionSpec has not, is a ShardingError (see `coarsened`)."""
        entry = self.get(sharding.mesh)
        if entry is None:
            raise ShardingError(f"{what}: mesh @{sharding.mesh} is not one of this export's meshes")
        obj = entry.jax_object
        if isinstance(obj, jax.Device):
            return SingleDeviceSharding(obj)
        if any(a.is_sub_axis for d in sharding.dims for a in d.axes) or any(
                a.is_sub_axis for a in sharding.unreduced):
            raise ShardingError(
                f"{what}: {sharding.attr_text()} splits a mesh axis into sub-axes, which a "
                "jax.sharding.PartitionSpec cannot express")
        parts = []
        for dim in sharding.dims:
            names = tuple(a.name for a in dim.axes)
            parts.append(None if not names else names[0] if len(names) == 1 else names)
        while parts and parts[-1] is None:
            parts.pop()
        if sharding.unreduced:
            spec = PartitionSpec(*parts, unreduced={a.name for a in sharding.unreduced})
        else:
            spec = PartitionSpec(*parts)
        return NamedSharding(obj, spec)


def coarsened(sharding: Sharding) -> Sharding:
    """`sharding` with each dimension cut before its first sub-axis (a
    coarser tiling of the same devices): `[{"b", "a":(1)2}]` becomes
    `[{"b"}]`."""
    dims = []
    for dim in sharding.dims:
        kept = []
        for axis in dim.axes:
            if axis.is_sub_axis:
                break
            kept.append(axis)
        dims.append(dataclasses.replace(dim, axes=tuple(kept)))
    return dataclasses.replace(sharding, dims=tuple(dims))


def _is_unspecified(value: Any) -> bool:
    return type(value).__name__ in ("UnspecifiedValue", "AUTO") or value is PartitionSpec.UNCONSTRAINED


def spec_to_dims(spec: PartitionSpec, rank: int, what: str):
    if len(spec) > rank:
        raise ShardingError(f"{what}: {spec} has {len(spec)} entries for a value of rank {rank}")
    dims = []
    for entry in tuple(spec) + (None,) * (rank - len(spec)):
        if entry is None:
            dims.append(DimSharding())
        elif entry is PartitionSpec.UNCONSTRAINED:
            dims.append(DimSharding((), True))
        elif isinstance(entry, (tuple, list)):
            dims.append(DimSharding(tuple(AxisRef(str(n)) for n in entry)))
        else:
            dims.append(DimSharding((AxisRef(str(entry)),)))
    unreduced = tuple(AxisRef(str(n)) for n in sorted(getattr(spec, "unreduced", ()) or ()))
    return tuple(dims), (), unreduced
