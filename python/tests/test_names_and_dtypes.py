"""What the bridge writes for names and dtypes that ordinary programs have:
axis and mesh names with quotes, backslashes, newlines and non-ASCII
characters round-trip through polymesh-opt; a dtype the bridge does not map
is named, at the user's line (issue 14, items 6 and 8)."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

import polymesh_jax as pj
from helpers import assert_verifies, check_reference_matches_jax

ODD_AXES = ('q"uote', "back\\slash", "new\nline", "café")


def odd_mesh():
    devices = np.array(jax.devices()[:16]).reshape(2, 2, 2, 2)
    return Mesh(devices, ODD_AXES, axis_types=(AxisType.Auto,) * 4)


def test_odd_axis_and_mesh_names_round_trip_through_polymesh_opt():
    mesh = odd_mesh()
    x = jax.device_put(jnp.zeros((8, 16)), NamedSharding(mesh, P(ODD_AXES[0], (ODD_AXES[2], ODD_AXES[1]))))

    def f(x):
        return jax.lax.with_sharding_constraint(x * 2, NamedSharding(mesh, P(ODD_AXES[3], ODD_AXES[1])))

    program = pj.export_program(f, (x,), mesh_names={mesh: "my\tmesh"})
    assert '@"my\\09mesh" = <["q\\22uote"=2, "back\\\\slash"=2, "new\\0Aline"=2, "caf\\C3\\A9"=2]>' in program.text
    assert "\n" not in program.text.split("polymesh.mesh", 1)[1].split(">", 1)[0]
    propagated = pj.propagate(program.text)
    meshes = pj._attrs.parse_meshes(propagated)
    assert [name for name, _ in meshes["my\tmesh"].axes] == list(ODD_AXES)
    signature = pj._attrs.parse_functions(propagated)[program.function_name]
    assert signature.arguments[0].sharding().dims[1].axes == (pj._attrs.AxisRef(ODD_AXES[2]),
                                                            pj._attrs.AxisRef(ODD_AXES[1]))
    assert_verifies(program.text)


def test_non_string_axis_names_are_refused():
    mesh = Mesh(np.array(jax.devices()[:2]), (0,), axis_types=(AxisType.Auto,))
    x = jax.device_put(jnp.zeros((4,)), NamedSharding(mesh, P(0)))
    with pytest.raises(pj.ShardingError, match="mesh axis name 0 is a int; Polymesh meshes name their axes with strings"):
        pj.export(lambda x: x + 1, x)


def _line_of(text: str) -> int:
    """The line of this file that contains `text`."""
    with open(__file__) as source:
        for number, line in enumerate(source, 1):
            if text in line:
                return number
    raise AssertionError(text)


mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def placed(dtype):
    return jax.device_put(np.zeros((8, 4), dtype), NamedSharding(mesh, P("data")))


def add_one(x):
    return x + 1  # add_one's line


def complex_scale(x):
    return (x.astype(jnp.complex64) * 1j).real  # complex_scale's line


def to_float8(x):
    return x.astype(jnp.float8_e4m3fn).astype(jnp.float32)  # to_float8's line


@pytest.mark.parametrize("fn, arg_dtype, dtype, marker", [
    # The `1` of `x + 1` is a constant that JAX hoists: its own location is
    # the bridge's lowering call, so the error names the line that uses it.
    (add_one, np.complex64, "complex64", "add_one's line"),
    (add_one, jnp.float8_e5m2, "float8_e5m2", "add_one's line"),
    (complex_scale, np.float32, "complex64", "complex_scale's line"),
    (to_float8, np.float32, "float8_e4m3fn", "to_float8's line"),
])
def test_unsupported_dtypes_are_named_at_the_users_line(fn, arg_dtype, dtype, marker):
    with pytest.raises(pj.UnmappedOpError) as caught:
        pj.export(fn, placed(arg_dtype))
    message = str(caught.value)
    assert message.startswith(f"dtype {dtype} is not supported by the bridge (in 'stablehlo."), message
    assert f"test_names_and_dtypes.py:{_line_of(marker)}:" in message, message
    assert "polymesh_jax" not in message and "static-shaped" not in message, message
    assert message.endswith("it maps bfloat16, float16, float32, float64, bool, int8, int16, int32, int64, "
                            "uint8, uint16, uint32, uint64")


def test_dynamic_shapes_are_still_called_so():
    from polymesh_jax._emit import ExportError, TensorType
    with pytest.raises(ExportError, match=r"tensor<\?x4xf32> is not a static-shaped tensor"):
        TensorType("tensor<?x4xf32>")
    assert TensorType("tensor<8x4xcomplex<f32>>").elem == "complex<f32>"
    assert TensorType("tensor<f8E4M3FN>").shape == ()


def hash_buckets(img, ids):
    """Unsigned integers as image bytes and hashed ids: written signless,
    computed with the unsigned arith ops (divui, remui, shrui, maxui, uitofp)."""
    x = img.astype(jnp.float32) / 255.0
    h = ids ^ (ids >> 16)
    h = h * jnp.uint32(0x45D9F3B)
    h = h ^ (h << 5)
    unit = jax.lax.bitcast_convert_type((h >> 9) | jnp.uint32(0x3F800000), jnp.float32) - 1.0
    return {"x": x, "bucket": (h % jnp.uint32(7)).astype(jnp.int32), "unit": unit,
            "bright": jnp.maximum(img, jnp.uint8(200)).astype(jnp.int32), "half": (ids // jnp.uint32(2)).astype(jnp.float32)}


def test_unsigned_integers_export_run_and_verify():
    img = jax.device_put(np.zeros((8, 16), np.uint8), NamedSharding(mesh, P("data", "model")))
    ids = jax.device_put(np.zeros((8, 16), np.uint32), NamedSharding(mesh, P("data", "model")))
    program = pj.export_program(hash_buckets, (img, ids))
    assert program.opaque_ops == [] and "ui32" not in program.text and "ui8" not in program.text
    for op in ("arith.shrui", "arith.remui", "arith.maxui", "arith.uitofp", "arith.bitcast"):
        assert op in program.text, op
    check_reference_matches_jax(hash_buckets, (img, ids), rtol=1e-6)
    assert_verifies(program.text)
