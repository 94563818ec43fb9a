"""Programs built on gather, scatter, sort, top_k and reduce_window (issue
15): an embedding trained by SGD (its gradient is a scatter-add at the
token ids), an embedding with tied logits, a mixture-of-experts router
(softmax, then top_k), packed-sequence
positions (a cumsum, then a gather), max pooling over an image batch, a
per-example KV-cache write (a batched scatter under vmap) and a beam
search's ranking (argsort, then take_along_axis). Each exports with no
opaque op, propagates without an op that has no rule, resolves leaves at
least as sharded as JAX's own compilation, computes JAX's values and
passes polymesh-run --verify, on 8 and 32 devices, with Auto axes and with
Explicit axes under jax.set_mesh.

The embedding's gradient sums over the tokens, which are split over
"data": a partial sum on each device, added by an all-reduce. The inputs
are multiples of 1/64 and the loss is linear in the logits, so every sum
is exact and --verify compares bit for bit."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from helpers import check_bridge_program, check_explicit_program


def embedding_sgd_step(table, head, ids, targets):
    """One SGD step of a bag-of-tokens model: embed (a gather), project,
    a loss linear in the logits. The table's gradient is a scatter-add of
    the tokens' gradients at their ids."""
    def loss(table, head):
        h = jax.nn.relu(table[ids])
        return jnp.sum((h @ head) * targets)
    g_table, g_head = jax.grad(loss, argnums=(0, 1))(table, head)
    return table - 0.125 * g_table, head - 0.125 * g_head


def embed_tied_logits(table, ids):
    """A language model's two ends: token embeddings (a gather of table rows
    split by columns) and logits against the same table (the tied output
    layer, a sum over the split features)."""
    h = jnp.tanh(table[ids])
    return jnp.einsum("btd,vd->btv", h, table)


def embed_tied_logits_explicit(table, ids):
    h = jnp.tanh(table.at[ids].get(out_sharding=P("data", None, "model")))
    return jnp.einsum("btd,vd->btv", h, table, out_sharding=P("data"))


def moe_router(x, w):
    """Top-2 routing: each token's two best experts and their gates."""
    probs = jax.nn.softmax(x @ w, axis=-1)
    gates, experts = jax.lax.top_k(probs, 2)
    return gates / jnp.sum(gates, axis=-1, keepdims=True), experts


def packed_positions(segment_starts, x, position_table):
    """Packed sequences: a token's position counts from its segment's
    start (a cumsum of the start flags, then a running max of the start
    indices), and selects a row of the position table (a gather)."""
    length = segment_starts.shape[1]
    index = jnp.arange(length)[None, :]
    starts = jax.lax.cummax(jnp.where(segment_starts > 0, index, 0), axis=1)
    positions = index - starts
    segments = jnp.cumsum(segment_starts > 0, axis=1)
    return x + position_table[positions], segments


def embedding_sgd_step_explicit(table, head, ids, targets):
    """embedding_sgd_step as Explicit axes make one write it: the lookup
    and the projection (it contracts a split dimension) name their output
    sharding, as JAX asks."""
    def loss(table, head):
        h = jax.nn.relu(table.at[ids].get(out_sharding=P("data", None, "model")))
        return jnp.sum(jnp.einsum("btd,dv->btv", h, head, out_sharding=P("data")) * targets)
    g_table, g_head = jax.grad(loss, argnums=(0, 1))(table, head)
    return table - 0.125 * g_table, head - 0.125 * g_head


def packed_positions_explicit(segment_starts, x, position_table):
    length = segment_starts.shape[1]
    index = jnp.arange(length)[None, :]
    starts = jax.lax.cummax(jnp.where(segment_starts > 0, index, 0), axis=1)
    positions = index - starts
    segments = jnp.cumsum(segment_starts > 0, axis=1)
    return x + position_table.at[positions].get(out_sharding=P("data", None, "model")), segments


def max_pool(images, w):
    """A 1x1 convolution (a matmul over channels), ReLU and 2x2 max pooling
    with stride 2, as a small CNN's block writes it."""
    h = jax.nn.relu(jnp.einsum("bhwc,cd->bhwd", images, w))
    return jax.lax.reduce_window(h, -jnp.inf, jax.lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")


def kv_cache_write(cache, new, positions):
    """Each sequence of the batch writes its new key at its own position
    (vmap of .at[].set: a scatter with a batching dimension)."""
    return jax.vmap(lambda c, n, p: c.at[p].set(n))(cache, new, positions)


def beam_rank(scores, tokens):
    """A beam search's ranking: the four best hypotheses per row (argsort,
    descending) and their tokens (take_along_axis, a gather)."""
    order = jnp.argsort(-scores, axis=1)[:, :4]
    return jnp.take_along_axis(scores, order, axis=1), jnp.take_along_axis(tokens, order, axis=1)


def beam_rank_explicit(scores, tokens):
    order = jnp.argsort(-scores, axis=1)[:, :4]
    take = lambda values: values.at[jnp.arange(values.shape[0])[:, None], order].get(  # noqa: E731
        out_sharding=P("data"))
    return take(scores), take(tokens)


def programs(devices, explicit=False):
    """The mesh and the programs with their inputs. With `explicit`, a mesh
    of Explicit axes under which JAX asks every gather for its output
    sharding (the _explicit variants name it)."""
    data, model = (2, 4) if devices == 8 else (4, 8)
    axis = AxisType.Explicit if explicit else AxisType.Auto
    mesh = jax.make_mesh((data, model), ("data", "model"), axis_types=(axis,) * 2)
    put = lambda shape, spec, dtype=np.float32: jax.device_put(  # noqa: E731
        np.zeros(shape, dtype), NamedSharding(mesh, spec))
    batch, width = 2 * data, 4 * model
    return mesh, {
        "embedding_sgd_step": (embedding_sgd_step_explicit if explicit else embedding_sgd_step, (
            put((96, width), P(None, "model")), put((width, 16), P("model")),
            put((batch, 8), P("data"), np.int32), put((batch, 8, 16), P("data")))),
        "embed_tied_logits": (embed_tied_logits_explicit if explicit else embed_tied_logits, (
            put((96, width), P(None, "model")), put((batch, 8), P("data"), np.int32))),
        "moe_router": (moe_router, (put((batch, 6, width), P("data")), put((width, 8), P()))),
        "packed_positions": (packed_positions_explicit if explicit else packed_positions, (
            put((batch, 16), P("data"), np.int32), put((batch, 16, width), P("data", None, "model")),
            put((16, width), P(None, "model")))),
        "max_pool": (max_pool, (put((batch, 8, 8, 6), P("data")), put((6, width), P(None, "model")))),
        "kv_cache_write": (kv_cache_write, (
            put((batch, 12, width), P("data", None, "model")), put((batch, width), P("data", "model")),
            put((batch,), P("data"), np.int32))),
        "beam_rank": (beam_rank_explicit if explicit else beam_rank, (put((batch, 24), P("data")), put((batch, 24), P("data"), np.int32))),
    }


NAMES = ["embedding_sgd_step", "embed_tied_logits", "moe_router", "packed_positions", "max_pool", "kv_cache_write", "beam_rank"]


@pytest.mark.parametrize("devices", [8, 32])
@pytest.mark.parametrize("name", NAMES)
def test_indexed_programs(name, devices):
    fn, args = programs(devices)[1][name]
    check_bridge_program(fn, args)


@pytest.mark.parametrize("devices", [8, 32])
@pytest.mark.parametrize("name", NAMES)
def test_indexed_programs_explicit_axes(name, devices):
    mesh, found = programs(devices, explicit=True)
    check_explicit_program(mesh, *found[name])
