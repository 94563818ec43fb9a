"""Programs that slice, pad, concatenate and update in place (issue 15):
a KV-cache decode step, token shift with pad, feature concatenation, a
static row and its gradient, a bidirectional layer (reverse). Each exports with no opaque op, propagates
without computing a sharded op replicated, resolves leaves at least as
sharded as JAX's own compilation, computes JAX's values and passes
polymesh-run --verify."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import polymesh_jax as pj
from helpers import (assert_at_least_as_sharded_as_jax, assert_verifies, check_reference_matches_jax,
                     propagate_warnings)


def auto_mesh(shape, names):
    return jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(names))


def decode_step(cache_k, cache_v, q, k_new, v_new, pos):
    """One token of attention with a KV cache: write the new key and value
    at `pos`, attend over the cache up to it."""
    cache_k = jax.lax.dynamic_update_slice(cache_k, k_new[:, None], (0, pos, 0, 0))
    cache_v = jax.lax.dynamic_update_slice(cache_v, v_new[:, None], (0, pos, 0, 0))
    scores = jnp.einsum("bhd,bthd->bht", q, cache_k) / math.sqrt(q.shape[-1])
    visible = jnp.arange(cache_k.shape[1])[None, None, :] <= pos
    scores = jnp.where(visible, scores, -1e9)
    weights = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("bht,bthd->bhd", weights, cache_v)
    return {"cache_k": cache_k, "cache_v": cache_v, "out": out}


def token_shift_mix(x, mix):
    """RWKV's token shift: each position mixed with the one before (a pad
    then a slice along the sequence), then features concatenated."""
    shifted = jnp.pad(x, ((0, 0), (1, 0), (0, 0)))[:, :-1, :]
    mixed = x * mix + shifted * (1 - mix)
    return jnp.concatenate([mixed, x - shifted], axis=-1)


def window(x, start):
    """A dynamic window along the sequence and the first row of it."""
    w = jax.lax.dynamic_slice_in_dim(x, start, 16, axis=1)
    return {"window": w, "first": w[:, 0]}


def static_row_grad(w, x):
    """The gradient of a loss through a static index w[1] (JAX pads it)."""
    return jax.grad(lambda w: jnp.sum(jnp.tanh(w[1] * x)))(w)


def bidirectional_features(x, w):
    """A bidirectional layer's two directions: the sequence read forwards
    and reversed (lax.rev), projected and the backward one flipped back."""
    forward = jnp.tanh(x @ w)
    backward = jnp.flip(jnp.tanh(jnp.flip(x, axis=1) @ w), axis=1)
    return forward + backward


def cases(devices):
    data, model = (2, 4) if devices == 8 else (4, 8)
    mesh = auto_mesh((data, model), ("data", "model"))
    put = lambda shape, spec, dtype=np.float32: jax.device_put(  # noqa: E731
        np.zeros(shape, dtype), NamedSharding(mesh, spec))
    batch, length, heads, dim = 2 * data, 40, model, 16
    return {
        "decode_step": (decode_step, (
            put((batch, length, heads, dim), P("data", None, "model")),
            put((batch, length, heads, dim), P("data", None, "model")),
            put((batch, heads, dim), P("data", "model")),
            put((batch, heads, dim), P("data", "model")),
            put((batch, heads, dim), P("data", "model")),
            jnp.int32(7))),
        "token_shift_mix": (token_shift_mix, (
            put((batch, 24, 3 * model), P("data", None, "model")),
            put((3 * model,), P("model")))),
        "window": (window, (put((batch, 64, 12), P("data")), jnp.int32(30))),
        "static_row_grad": (static_row_grad, (put((6, 5 * model), P(None, "model")), put((5 * model,), P("model")))),
        "bidirectional_features": (bidirectional_features, (
            put((batch, 20, 16), P("data")), put((16, 2 * model), P(None, "model")))),
    }


@pytest.mark.parametrize("devices", [8, 32])
@pytest.mark.parametrize("name", ["decode_step", "token_shift_mix", "window", "static_row_grad",
                                  "bidirectional_features"])
def test_slice_programs(name, devices):
    fn, args = cases(devices)[name]
    program = pj.export_program(fn, args)
    assert program.opaque_ops == [], program.opaque_ops
    warnings = propagate_warnings(program.text)
    for op in ("tensor.extract_slice", "tensor.insert_slice", "tensor.pad", "tensor.concat", "linalg.generic"):
        assert f"no sharding rule for '{op}'" not in warnings, warnings
    assert_at_least_as_sharded_as_jax(fn, args, program)
    check_reference_matches_jax(fn, args)
    assert_verifies(program.text)

