"""Shared by the tests: running polymesh-run, its deterministic inputs, and
comparing where JAX put each leaf."""

from __future__ import annotations

import re
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax.sharding import NamedSharding

import polymesh_jax as pj


def write_temp(text: str, name: str = "exported.mlir") -> Path:
    directory = Path(tempfile.mkdtemp(prefix="polymesh_jax_test_"))
    path = directory / name
    path.write_text(text)
    return path


def polymesh_run(text: str, *options: str) -> subprocess.CompletedProcess:
    path = write_temp(text)
    return subprocess.run([str(pj.tool_path("polymesh-run")), str(path), *options],
                          capture_output=True, text=True, timeout=300)


def assert_verifies(text: str) -> None:
    """polymesh-run --verify passes on the one function of `text`."""
    process = polymesh_run(text, "--verify")
    assert process.returncode == 0, process.stdout + process.stderr
    assert "1 passed, 0 failed" in process.stdout, process.stdout


_RESULT = re.compile(r'^\s*result #(\d+)(?: \(leaf "(.*)"\))?: (\S+) \[(.*)\]\s*$')


def reference_results(text: str) -> dict[str, list[float]]:
    """polymesh-run --print-results: the first (up to) eight elements of
    every result, by leaf path."""
    process = polymesh_run(text, "--print-results")
    assert process.returncode == 0, process.stdout + process.stderr
    results = {}
    for line in process.stdout.splitlines():
        match = _RESULT.match(line)
        if match:
            values = []
            for item in match.group(4).split(", "):
                if item == "...":
                    continue
                values.append(1.0 if item == "true" else 0.0 if item == "false" else float(item))
            results[match.group(2) or match.group(1)] = values
    return results


def fill(shape, dtype, stream: int) -> np.ndarray:
    """polymesh-run's input for argument `stream` (docs/execution.md)."""
    count = int(np.prod(shape, dtype=np.int64))
    g = np.arange(count, dtype=np.uint64)
    h = ((g + np.uint64(1000003 * stream)) * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    dtype = np.dtype(dtype)
    if dtype.kind == "u":
        # The bridge writes unsigned types signless: polymesh-run fills them
        # as the signed type of their width, and the bits are the same.
        return fill(shape, np.dtype(f"int{dtype.itemsize * 8}"), stream).view(dtype)
    if dtype in (np.float32, np.float64):
        values = (h >> np.uint64(22)).astype(np.float64) / 64 - 8
    elif dtype.name in ("float16", "bfloat16"):
        values = (h >> np.uint64(24)).astype(np.float64) / 32 - 4
    elif dtype == np.int8:
        values = (h >> np.uint64(28)).astype(np.int64) - 8
    elif dtype == np.int32:
        values = (h >> np.uint64(16)).astype(np.int64) - 32768
    elif dtype == np.int64:
        values = h.astype(np.int64) - 2**31
    elif dtype == np.bool_:
        values = (h >> np.uint64(31)).astype(bool)
    else:
        raise ValueError(f"no fill pattern for {dtype}")
    return np.asarray(values).astype(dtype).reshape(shape)


def check_reference_matches_jax(fn, args: tuple, rtol: float = 1e-5, ambient=None) -> dict[str, list[float]]:
    """Exports `fn(*args)` (under `jax.set_mesh(ambient)` if given), runs
    the unsharded reference on polymesh-run's inputs and compares its first
    elements with JAX's own result on the same inputs. Returns the
    reference's values."""
    if ambient is not None:
        with jax.set_mesh(ambient):
            program = pj.export_program(fn, args)
    else:
        program = pj.export_program(fn, args)
    leaves = jax.tree_util.tree_leaves(args)
    inputs = [fill(np.shape(leaf), np.asarray(leaf).dtype if not hasattr(leaf, "dtype") else leaf.dtype, i)
              for i, leaf in enumerate(leaves)]
    treedef = jax.tree_util.tree_structure(args)
    expected = jax.jit(fn)(*jax.tree_util.tree_unflatten(treedef, inputs))
    expected_leaves = jax.tree_util.tree_leaves(expected)
    got = reference_results(program.text)
    assert len(got) == len(expected_leaves), (got, program.text)
    for leaf, want in zip(program.results, expected_leaves):
        values = got[leaf.path]
        want = np.asarray(want, dtype=np.float64).reshape(-1)[: len(values)]
        # Infinities compare exactly; they do not widen the tolerance.
        finite = want[np.isfinite(want)]
        scale = max(1.0, float(np.max(np.abs(finite)))) if finite.size else 1.0
        np.testing.assert_allclose(values, want, rtol=rtol, atol=rtol * scale,
                                   err_msg=f"leaf {leaf.path}\n{program.text}")
    return got


def device_map(sharding, shape) -> dict[int, tuple]:
    """Device id -> the box it holds, as (start, stop) per dimension."""
    result = {}
    for device, index in sharding.devices_indices_map(tuple(shape)).items():
        box = tuple((s.start or 0, s.stop if s.stop is not None else n) for s, n in zip(index, shape))
        result[device.id] = box
    return result


def placement_problems(tree: Any, expected: dict[str, NamedSharding], same_object: bool = False) -> list[str]:
    """Where a returned pytree's leaves differ from the expected sharding
    (by leaf path): not a NamedSharding, another mesh (with `same_object`:
    not the very Mesh object annotated), or devices holding other boxes."""
    problems = []
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        name = pj.format_path(path)
        want = expected[name]
        got = leaf.sharding
        if not isinstance(got, NamedSharding):
            problems.append(f"{name}: {type(got).__name__} {got}")
        elif got.mesh != want.mesh:
            problems.append(f"{name}: on mesh {got.mesh}, annotated on {want.mesh}")
        elif same_object and got.mesh is not want.mesh:
            problems.append(f"{name}: an equal Mesh, but not the user's object")
        elif device_map(got, leaf.shape) != device_map(want, leaf.shape):
            problems.append(f"{name}: devices hold other boxes ({got.spec} instead of {want.spec})")
    return problems


def propagate_warnings(text: str) -> str:
    """polymesh-opt --polymesh-propagate's warnings on `text` (it must pass)."""
    process = subprocess.run([str(pj.tool_path("polymesh-opt")), "--polymesh-propagate", "-o", "/dev/null"],
                             input=text, capture_output=True, text=True)
    assert process.returncode == 0, process.stderr
    return process.stderr


def assert_at_least_as_sharded_as_jax(fn, args, program) -> Any:
    """Resolves `fn(*args)` and checks every leaf's tile against JAX's own
    compilation (`jax.jit(fn).lower(*args).compile().output_shardings`):
    the same number of devices, a tile no larger. Returns the resolution."""
    resolution = pj.resolve(fn, args)
    compiled = jax.jit(fn).lower(*args).compile().output_shardings
    for path, jax_sharding in jax.tree_util.tree_flatten_with_path(compiled)[0]:
        leaf = pj.format_path(path) or "result"
        ours = resolution.out_shardings
        for key in path:
            if hasattr(key, "name"):  # a namedtuple's field (optax states)
                ours = getattr(ours, key.name)
            else:
                ours = ours[getattr(key, "key", getattr(key, "idx", None))]
        shape = next(r for r in program.results if r.path == leaf).type
        extents = tuple(int(d) for d in shape[len("tensor<"):].split("x")[:-1])
        assert ours.num_devices == jax_sharding.num_devices
        assert _tile(ours, extents) <= _tile(jax_sharding, extents), (leaf, ours, jax_sharding)
    return resolution


def _tile(sharding, shape) -> int:
    return int(np.prod(sharding.shard_shape(shape))) if shape else 1


def check_bridge_program(fn, args, rtol: float = 1e-5, contains_any: tuple = ()) -> Any:
    """The checks every program suite makes: the export has no opaque op and
    no StableHLO or CHLO op left (and one of `contains_any`, if given),
    propagation meets no op without a rule, every leaf is at least as
    sharded as JAX's own compilation, the reference computes JAX's values,
    and polymesh-run --verify passes. Returns the resolution."""
    program = pj.export_program(fn, args)
    assert program.opaque_ops == [], program.opaque_ops
    assert "stablehlo." not in program.text and "chlo." not in program.text, program.text
    if contains_any:
        assert any(op in program.text for op in contains_any), program.text
    warnings = propagate_warnings(program.text)
    assert "no sharding rule" not in warnings, warnings
    resolution = assert_at_least_as_sharded_as_jax(fn, args, program)
    check_reference_matches_jax(fn, args, rtol=rtol)
    assert_verifies(program.text)
    return resolution


def check_explicit_program(mesh, fn, args, **options) -> Any:
    """check_bridge_program under `jax.set_mesh(mesh)` (Explicit axes), and
    every leaf on the user's own Mesh object."""
    with jax.set_mesh(mesh):
        resolution = check_bridge_program(fn, args, **options)
    for leaf in jax.tree_util.tree_leaves(resolution.out_shardings):
        assert leaf.mesh is mesh
    return resolution
