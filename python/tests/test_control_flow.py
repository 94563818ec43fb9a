"""Programs with control flow (issue 15): scan over layers, an RNN under
fori_loop, a while loop with a data-dependent trip count, cond and switch,
a scan that stacks its outputs, and a two-stage pipeline loop on two
meshes. StableHLO's while, case and if become scf.while, scf.index_switch
and scf.if, which Polymesh propagates with one sharding per carried value.
Each program exports with no opaque op, propagates without computing a
sharded op replicated, resolves leaves at least as sharded as JAX's own
compilation, computes JAX's values and passes polymesh-run --verify, on 8
and 32 devices, with Auto axes and with Explicit axes under jax.set_mesh.

Loops whose bodies contract a split dimension of floats would reorder sums
that later steps compute with, and --verify compares those bit for bit
(docs/propagation.md, "Known limits"): the weights here are split on the
dimensions the bodies do not sum over."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from helpers import assert_verifies, check_bridge_program, check_explicit_program


def scan_layers(h, w, b):
    """A stack of dense layers run by lax.scan over their stacked weights,
    as Flax's nn.scan / nnx.scan write a deep model."""
    def layer(h, params):
        w, b = params
        return jax.nn.relu(h @ w + b), None
    h, _ = jax.lax.scan(layer, h, (w, b))
    return h


def rnn(xs, h0, w_x, w_h):
    """An Elman RNN under fori_loop: step t reads xs[t] (a dynamic slice)."""
    def step(t, h):
        x_t = jax.lax.dynamic_index_in_dim(xs, t, axis=0, keepdims=False)
        return jnp.tanh(x_t @ w_x + h @ w_h)
    return jax.lax.fori_loop(0, xs.shape[0], step, h0)


def bounded_while(x, steps):
    """A while loop whose trip count is data: halve until `steps` (at most
    6) iterations have run."""
    limit = jnp.clip(steps, 0, 6)

    def body(carry):
        i, v = carry
        return i + 1, v * 0.5 + jnp.roll(v, 1, axis=1) * 0.25
    _, v = jax.lax.while_loop(lambda c: c[0] < limit, body, (jnp.int32(0), x))
    return v


def cond_update(params, grads, step):
    """lax.cond on the step's parity: plain SGD on even steps, a clipped
    update on odd ones."""
    def sgd(p, g):
        return p - 0.125 * g

    def clipped(p, g):
        return p - 0.125 * jnp.clip(g, -1.0, 1.0)
    return jax.lax.cond(step % 2 == 0, sgd, clipped, params, grads)


def switch_activation(x, which):
    """lax.switch among three activations chosen at run time."""
    return jax.lax.switch(which, [jax.nn.relu, jnp.tanh, lambda v: v * 0.5], x)


def scan_cumulative(xs, decay):
    """A scan that stacks its outputs (a dynamic_update_slice per step): an
    exponential moving average over the sequence."""
    def step(acc, x):
        acc = acc * decay + x
        return acc, acc
    _, ys = jax.lax.scan(step, jnp.zeros_like(xs[0]), xs)
    return ys


def scan_layers_explicit(h, w, b):
    """scan_layers as Explicit axes make one write it: the carry's type is
    fixed, so each layer's output is resharded to the input's layout."""
    def layer(h, params):
        w, b = params
        return jax.sharding.reshard(jax.nn.relu(h @ w + b), jax.typeof(h).sharding.spec), None
    h, _ = jax.lax.scan(layer, h, (w, b))
    return h


def rnn_explicit(xs, h0, w_x, w_h):
    def step(t, h):
        x_t = jax.lax.dynamic_index_in_dim(xs, t, axis=0, keepdims=False)
        return jax.sharding.reshard(jnp.tanh(x_t @ w_x + h @ w_h), jax.typeof(h).sharding.spec)
    return jax.lax.fori_loop(0, xs.shape[0], step, h0)


def programs(devices, explicit=False):
    """The mesh and the programs with their inputs. With `explicit`, a mesh
    of Explicit axes (JAX 0.10's default, used under jax.set_mesh): Explicit
    axes fix a loop carry's sharding, so the scan and the RNN reshard their
    step's output (the _explicit variants), and the while loop's input is
    not split along the dimension jnp.roll shifts (JAX does not implement
    that under Explicit axes)."""
    data, model = (2, 4) if devices == 8 else (4, 8)
    axis = AxisType.Explicit if explicit else AxisType.Auto
    mesh = jax.make_mesh((data, model), ("data", "model"), axis_types=(axis,) * 2)
    put = lambda shape, spec, dtype=np.float32: jax.device_put(  # noqa: E731
        np.zeros(shape, dtype), NamedSharding(mesh, spec))
    batch, width, layers, length = 2 * data, 8 * model, 4, 6
    return mesh, {
        "scan_layers": (scan_layers_explicit if explicit else scan_layers, (
            put((batch, width), P("data")),
            put((layers, width, width), P(None, None, "model")),
            put((layers, width), P(None, "model")))),
        "rnn": (rnn_explicit if explicit else rnn, (
            put((length, batch, 24), P(None, "data")),
            put((batch, width), P("data")),
            put((24, width), P(None, "model")),
            put((width, width), P(None, "model")))),
        "bounded_while": (bounded_while, (put((batch, width), P("data") if explicit else P("data", "model")),
                                          jnp.int32(3))),
        "cond_update": (cond_update, (
            put((width, 3 * model), P("data", "model")), put((width, 3 * model), P("data", "model")),
            jnp.int32(5))),
        "switch_activation": (switch_activation, (put((batch, 20, width), P("data", None, "model")),
                                                  jnp.int32(1))),
        "scan_cumulative": (scan_cumulative, (put((length, batch, width), P(None, "data", "model")),
                                              put((batch, width), P("data", "model")))),
    }


def cases(devices):
    """The programs on a mesh of Auto axes."""
    return programs(devices)[1]


NAMES = ["scan_layers", "rnn", "bounded_while", "cond_update", "switch_activation", "scan_cumulative"]
CONTROL_FLOW = ("scf.while", "scf.index_switch", "scf.if")


@pytest.mark.parametrize("devices", [8, 32])
@pytest.mark.parametrize("name", NAMES)
def test_control_flow_programs(name, devices):
    fn, args = cases(devices)[name]
    check_bridge_program(fn, args, contains_any=CONTROL_FLOW)


@pytest.mark.parametrize("devices", [8, 32])
@pytest.mark.parametrize("name", NAMES)
def test_control_flow_programs_explicit_axes(name, devices):
    mesh, found = programs(devices, explicit=True)
    check_explicit_program(mesh, *found[name], contains_any=CONTROL_FLOW)


def test_stablehlo_if_becomes_scf_if():
    """JAX writes cond as stablehlo.case; other producers write
    stablehlo.if, which becomes scf.if."""
    from jax._src.interpreters import mlir as jax_mlir
    from jaxlib.mlir import ir

    from polymesh_jax._emit import FunctionEmitter

    text = """
    func.func @main(%p: tensor<i1>, %x: tensor<8xf32>) -> tensor<8xf32> {
      %r = "stablehlo.if"(%p) ({
        %n = stablehlo.negate %x : tensor<8xf32>
        stablehlo.return %n : tensor<8xf32>
      }, {
        stablehlo.return %x : tensor<8xf32>
      }) : (tensor<i1>) -> tensor<8xf32>
      return %r : tensor<8xf32>
    }"""
    with jax_mlir.make_ir_context(), ir.Location.unknown():
        module = ir.Module.parse(text)
        emitter = FunctionEmitter(module, lambda symbol: symbol)
        returned = emitter.emit_main(list(module.body.operations)[0].operation, ["%p", "%x"])
        body = "\n".join(emitter.body_lines(returned))
    assert "scf.if" in body and "} else {" in body, body
    program = ('polymesh.mesh @m = <["x"=4]>\n'
               'func.func @main(%p: tensor<i1> {polymesh.sharding = #polymesh.sharding<@m, []>},\n'
               '    %x: tensor<8xf32> {polymesh.sharding = #polymesh.sharding<@m, [{"x"}]>}) -> tensor<8xf32> {\n'
               f"{body}\n  return {returned[0]} : tensor<8xf32>\n}}\n")
    assert_verifies(program)
