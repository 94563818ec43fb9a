"""What a user meets when something does not fit (issue 15, item 4): the
reason a tool failed comes first, a sub-axis leaf still resolves, and
resolve_out_shardings takes the export's `unmapped` option."""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import polymesh_jax as pj
from polymesh_jax._tools import errors_first

# Twelve ops without a rule warn before the one unplaced leaf fails.
NOISY_THEN_UNPLACED = """
polymesh.mesh @m = <["c"=8]>
func.func @f(%x: tensor<16xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"c"}]>})
    -> (tensor<16xf32>, tensor<4xf32> {polymesh.leaf = "bias"}) {
""" + "".join(f'  %{i + 1} = "test.opaque{i}"(%{i if i else "x"}) : (tensor<16xf32>) -> tensor<16xf32>\n'
              for i in range(12)) + """  %b = arith.constant dense<0.0> : tensor<4xf32>
  return %12, %b : tensor<16xf32>, tensor<4xf32>
}
"""


def test_the_error_comes_before_the_warnings():
    with pytest.raises(pj.ToolError) as caught:
        pj.propagate(NOISY_THEN_UNPLACED, allow_unregistered=True)
    message = str(caught.value)
    first_diagnostic = message.splitlines()[1]
    assert 'error: result #1 (leaf "bias") is not placed' in first_diagnostic, message
    assert "(12 warnings before the error:)" in message
    assert message.count("no sharding rule for 'test.opaque") == 12
    # The raw stderr is still there, in the tool's order.
    assert caught.value.stderr.index("warning") < caught.value.stderr.index("error")


def test_errors_first_keeps_notes_with_their_diagnostic():
    text = ("a.mlir:1:1: warning: w\n  snippet\n"
            "a.mlir:2:1: error: e\n  snippet\na.mlir:2:1: note: n\n"
            "a.mlir:3:1: warning: v")
    assert errors_first(text).splitlines() == [
        "a.mlir:2:1: error: e", "  snippet", "a.mlir:2:1: note: n",
        "(2 warnings before the error:)",
        "a.mlir:1:1: warning: w", "  snippet", "a.mlir:3:1: warning: v"]
    assert errors_first("error: only this") == "error: only this"


def test_a_sub_axis_leaf_resolves_to_whole_axes():
    """v.reshape(4, 8) of an f32[32] split 8 ways: propagation splits "a"
    into sub-axes over both dimensions, which no PartitionSpec expresses;
    the out_sharding is P(), as JAX's own."""
    mesh = jax.make_mesh((8,), ("a",), axis_types=(AxisType.Auto,))
    v = jax.device_put(np.arange(32, dtype=np.float32), NamedSharding(mesh, P("a")))

    def f(v):
        return v.reshape(4, 8) * 2

    with pytest.warns(pj.PolymeshWarning, match=r'splits a mesh axis into sub-axes.*coarser'):
        out = pj.resolve_out_shardings(f, v)
    assert out.mesh is mesh and out.spec == P()
    assert out.is_equivalent_to(jax.jit(f).lower(v).compile().output_shardings, 2)
    np.testing.assert_array_equal(np.asarray(jax.jit(f, out_shardings=out)(v)), np.arange(32).reshape(4, 8) * 2)


def test_resolve_out_shardings_takes_unmapped():
    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    x = jax.device_put(jnp.zeros((8, 4)), NamedSharding(mesh, P("data")))

    def f(x):
        return jax.lax.reduce_precision(x, exponent_bits=5, mantissa_bits=10)  # not mapped

    with pytest.raises(pj.UnmappedOpError):
        pj.resolve_out_shardings(f, x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pj.PolymeshWarning)
        out = pj.resolve_out_shardings(f, x, unmapped="opaque")
    assert out.mesh is mesh


def test_polymesh_opt_is_kept_between_resolves(monkeypatch):
    """resolve() talks to one `polymesh-opt --serve` process per set of
    options: the second call starts none, an input that fails does not end
    it, and POLYMESH_JAX_SERVE=0 runs a process per call with the same
    answers."""
    from polymesh_jax import _tools

    mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    x = jax.device_put(jnp.zeros((8, 16)), NamedSharding(mesh, P("data", "model")))

    def f(x):
        return jnp.tanh(x) * 2

    first = pj.resolve_out_shardings(f, x)
    servers = {key: server.process.pid for key, server in _tools._SERVERS.items()}
    assert servers, "no polymesh-opt --serve process was kept"
    assert pj.resolve_out_shardings(f, x) == first
    assert {key: server.process.pid for key, server in _tools._SERVERS.items()} == servers

    with pytest.raises(pj.ToolError, match="custom op 'this' is unknown"):
        _tools.propagate("this is not IR")
    assert pj.resolve_out_shardings(f, x) == first
    assert all(server.process.poll() is None for server in _tools._SERVERS.values())

    monkeypatch.setenv("POLYMESH_JAX_SERVE", "0")
    assert pj.resolve_out_shardings(f, x) == first
