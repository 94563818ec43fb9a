"""Training steps (issue 15): an MLP trained by SGD, a pre-LN transformer
block trained by SGD, and the MLP under optax's AdamW, with data-parallel
batches and tensor-parallel weights. Their gradients are sums over the
batch split over "data" (and the Megatron matmuls sum over the split hidden
dimension), so the sharded run adds in another order than the reference;
polymesh-run --verify checks each such sum within its rounding bound where
it is made and continues the reference from it (lock-step,
docs/execution.md), so the updated weights match bit for bit. Each program
exports with no opaque op, propagates without an op that has no rule,
resolves leaves at least as sharded as JAX's own compilation, computes
JAX's values and passes --verify, on 8 and 32 devices, with Auto axes and
with Explicit axes under jax.set_mesh."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from helpers import check_bridge_program, check_explicit_program


def mlp_loss(params, x, y, hidden_spec=None, out_spec=None):
    """Mean squared error of a two-layer ReLU MLP. Under Explicit axes the
    matmuls name their output sharding (the second contracts the split
    hidden dimension, which JAX asks for)."""
    h = jnp.matmul(x, params["w1"], out_sharding=hidden_spec) + params["b1"]
    out = jnp.matmul(jax.nn.relu(h), params["w2"], out_sharding=out_spec)
    return jnp.mean((out - y) ** 2)


def sgd_step(params, x, y, explicit=False):
    specs = (P("data", "model"), P("data")) if explicit else (None, None)
    loss, grads = jax.value_and_grad(mlp_loss)(params, x, y, *specs)
    return jax.tree.map(lambda p, g: p - 0.125 * g, params, grads), loss


OPTIMIZER = optax.adamw(1e-3, weight_decay=1e-4)


def adamw_step(params, state, x, y, explicit=False):
    specs = (P("data", "model"), P("data")) if explicit else (None, None)
    loss, grads = jax.value_and_grad(mlp_loss)(params, x, y, *specs)
    updates, state = OPTIMIZER.update(grads, state, params)
    return optax.apply_updates(params, updates), state, loss


def block_loss(params, x, explicit=False):
    """A pre-LN transformer block (causal attention with heads of 4
    features split over "model", a GELU MLP), squared output as the loss."""
    def norm(v):
        mean = v.mean(-1, keepdims=True)
        return (v - mean) * jax.lax.rsqrt(((v - mean) ** 2).mean(-1, keepdims=True) + 1e-5)

    def dense(v, w, spec):
        return jnp.einsum("btd,df->btf", v, w, out_sharding=spec if explicit else None)
    b, t, d = x.shape
    heads = d // 4  # one head per "model" device: Explicit axes reshape whole heads
    h = norm(x)
    q, k, v = (dense(h, params[n], P("data", None, "model")).reshape(b, t, heads, d // heads)
               for n in ("wq", "wk", "wv"))
    scores = jnp.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(d // heads)
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, -1e9)
    attended = jnp.einsum("bhqk,bkhd->bqhd", jax.nn.softmax(scores, -1), v).reshape(b, t, d)
    x = x + dense(attended, params["wo"], P("data"))
    x = x + dense(jax.nn.gelu(dense(norm(x), params["w1"], P("data", None, "model"))), params["w2"], P("data"))
    return jnp.mean(x ** 2)


def block_step(params, x, explicit=False):
    loss, grads = jax.value_and_grad(block_loss)(params, x, explicit)
    return jax.tree.map(lambda p, g: p - 0.01 * g, params, grads), loss


def programs(devices, explicit=False):
    data, model = (2, 4) if devices == 8 else (4, 8)
    axis = AxisType.Explicit if explicit else AxisType.Auto
    mesh = jax.make_mesh((data, model), ("data", "model"), axis_types=(axis,) * 2)
    put = lambda shape, spec: jax.device_put(  # noqa: E731
        np.zeros(shape, np.float32), NamedSharding(mesh, spec))
    batch, width, hidden = 8 * data, 32, 8 * model
    mlp = {"w1": put((width, hidden), P(None, "model")), "b1": put((hidden,), P("model")),
           "w2": put((hidden, 8), P("model"))}
    x, y = put((batch, width), P("data")), put((batch, 8), P("data"))
    # Eagerly, as `tx.init(params)` is usually called: the moments take the
    # parameters' shardings.
    with jax.set_mesh(mesh):
        state = OPTIMIZER.init(mlp)
    d = 4 * model
    block = {name: put(shape, spec) for name, (shape, spec) in {
        "wq": ((d, d), P(None, "model")), "wk": ((d, d), P(None, "model")), "wv": ((d, d), P(None, "model")),
        "wo": ((d, d), P("model")), "w1": ((d, 2 * d), P(None, "model")), "w2": ((2 * d, d), P("model"))}.items()}
    tokens = put((data, 8, d), P("data"))
    bind = (lambda fn: (lambda *args: fn(*args, explicit=True))) if explicit else (lambda fn: fn)
    return mesh, {
        "sgd_step": (bind(sgd_step), (mlp, x, y)),
        "adamw_step": (bind(adamw_step), (mlp, state, x, y)),
        "block_step": (bind(block_step), (block, tokens)),
    }


NAMES = ["sgd_step", "adamw_step", "block_step"]


@pytest.mark.parametrize("devices", [8, 32])
@pytest.mark.parametrize("name", NAMES)
def test_train_steps(name, devices):
    fn, args = programs(devices)[1][name]
    check_bridge_program(fn, args, rtol=1e-4)


@pytest.mark.parametrize("devices", [8, 32])
@pytest.mark.parametrize("name", NAMES)
def test_train_steps_explicit_axes(name, devices):
    mesh, found = programs(devices, explicit=True)
    check_explicit_program(mesh, *found[name], rtol=1e-4)
