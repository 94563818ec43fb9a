"""Programs that compute: the exported IR must propagate, run as the
unsharded reference in polymesh-run and give JAX's numbers, and (once the
sharded CPU path exists) pass polymesh-run --verify."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P

import polymesh_jax as pj
from helpers import assert_verifies, check_reference_matches_jax, polymesh_run

mesh = jax.make_mesh((2, 4), ("data", "model"), axis_types=(AxisType.Auto,) * 2)


def mlp(params, x):
    """Two matmuls around a head split: reshape, transpose, reshape."""
    h = jax.nn.relu(jnp.dot(x, params["w1"]) + params["b1"])
    h = h.reshape(x.shape[0], 4, -1)
    h = jnp.transpose(h, (1, 0, 2)).reshape(4 * x.shape[0], -1)
    y = h @ params["w2"]
    return {"logits": y, "norm": jnp.sum(y * y, axis=-1), "peak": jnp.max(y, axis=0)}


def mlp_inputs():
    params = {
        "w1": jax.device_put(jnp.zeros((32, 64)), NamedSharding(mesh, P(None, "model"))),
        "b1": jax.device_put(jnp.zeros((64,)), NamedSharding(mesh, P("model"))),
        "w2": jax.device_put(jnp.zeros((16, 8)), NamedSharding(mesh, P())),
    }
    x = jax.device_put(jnp.zeros((16, 32)), NamedSharding(mesh, P("data")))
    return params, x


def test_mlp_exports_to_the_ops_polymesh_propagates():
    program = pj.export_program(mlp, mlp_inputs())
    text = program.text
    for op in ("linalg.matmul", "tensor.expand_shape", "tensor.collapse_shape", "linalg.transpose",
               "linalg.broadcast", "linalg.reduce", "arith.maximumf", "arith.addf"):
        assert op in text, op
    assert "stablehlo." not in text and "sdy." not in text
    assert [a.path for a in program.arguments] == ["params.b1", "params.w1", "params.w2", "x"]
    assert program.arguments[3].sharding.attr_text() == '#polymesh.sharding<@mesh_data2_model4, [{"data"}, {}]>'
    propagated = pj.propagate(text)
    signature = pj._attrs.parse_functions(propagated)[program.function_name]
    # The batch split of x and the hidden split of w1 flow to the results.
    assert all(r.sharding() is not None and r.sharding().mesh == "mesh_data2_model4" for r in signature.results)


def test_mlp_reference_run_matches_jax():
    """polymesh-run FILE (the unsharded reference, no --verify) succeeds on
    the exported IR today, and computes what JAX computes."""
    process = polymesh_run(pj.export(mlp, *mlp_inputs()))
    assert process.returncode == 0, process.stdout + process.stderr
    assert "1 ran, 0 failed" in process.stdout
    check_reference_matches_jax(mlp, mlp_inputs())


def test_mlp_verify_sharded_path():
    """Needs the sharded CPU path (--polymesh-partition): until it lands,
    polymesh-run --verify reports functions that compute as not verified."""
    process = polymesh_run(pj.export(mlp, *mlp_inputs()), "--verify")
    assert process.returncode == 0 and "PASS" in process.stdout, process.stdout + process.stderr


# -- One case per mapped StableHLO op, checked against JAX --------------------


def f32(*shape, spec=(), dtype=jnp.float32):
    """An input placed on `mesh` (replicated unless `spec` splits it)."""
    return jax.device_put(jnp.zeros(shape, dtype), NamedSharding(mesh, P(*spec)))


CASES = {
    "elementwise": (lambda a, b: (a + b, a - b, a * b, a / (jnp.abs(b) + 1), jnp.maximum(a, b),
                                  jnp.minimum(a, b), -a, jnp.exp(a / 8), jnp.log(jnp.abs(a) + 1),
                                  jnp.tanh(a), jnp.sqrt(jnp.abs(a)), jax.lax.rsqrt(jnp.abs(a) + 1),
                                  jnp.floor(a / 3), jnp.ceil(a / 3), jax.nn.sigmoid(a),
                                  jnp.clip(a, -2.0, 3.0), jnp.sin(a), jnp.cos(a)),
                    (f32(4, 8, spec=("data", "model")), f32(4, 8))),
    "compare_select_convert": (lambda a, b: (jnp.where(a > b, a, b), (a <= b).astype(jnp.float32),
                                             a.astype(jnp.int32), a.astype(jnp.bfloat16).astype(jnp.float32),
                                             jnp.logical_not(a > 0).astype(jnp.int32)),
                               (f32(4, 8, spec=(None, "model")), f32(4, 8, spec=("data",)))),
    "broadcasts": (lambda v, s, m: (v[None, :] + m, v[:, None] * m.T, jnp.broadcast_to(s, (3, 8)),
                                    jnp.broadcast_to(m[:, :1], (4, 8)), jnp.expand_dims(m, 1)),
                   (f32(8, spec=("model",)), f32(), f32(4, 8, spec=("data",)))),
    "reshapes": (lambda a: (a.reshape(8, 6), a.reshape(2, 24), a.reshape(-1), a.reshape(3, 2, 8)[None],
                            a.T, jnp.transpose(a.reshape(2, 2, 12), (2, 0, 1))),
                 (f32(4, 12, spec=("data", "model")),)),
    "dot_general": (lambda a, b, c: (a @ b, jnp.einsum("bij,bjk->bik", c, c),
                                     jnp.einsum("ij,kj->ik", a, a), jnp.einsum("bij,j->bi", c, b[:, 0]),
                                     jnp.einsum("ij,ij->", a, a)),
                    (f32(4, 6, spec=("data",)), f32(6, 5), f32(3, 6, 6, spec=(None, "data")))),
    "reductions": (lambda a: (a.sum(), a.sum(0), a.max(1), a.min((0, 2)), jnp.prod(a[:, :2, :2] / 4, 1),
                              jnp.mean(a, 2), jax.nn.logsumexp(a, axis=1)),
                   (f32(3, 4, 5, spec=(None, "model")),)),
    "iota_and_integers": (lambda a, i: (jnp.arange(8) * 2, jnp.arange(12.0).reshape(3, 4) + a,
                                        i + i * 3, jnp.maximum(i, 0), i.sum()),
                          (f32(3, 4), f32(6, spec=("data",), dtype=jnp.int32))),
    "mixed_precision": (lambda a, b: (jnp.dot(a.astype(jnp.bfloat16), b.astype(jnp.bfloat16),
                                              preferred_element_type=jnp.float32),
                                      (a.astype(jnp.bfloat16) * 3).astype(jnp.float32),
                                      a.astype(jnp.float16).sum(0).astype(jnp.float32)),
                        (f32(4, 8, spec=("data",)), f32(8, 4, spec=(None, "model")))),
    # erfinv's central branch (a / 9), its tail (|x| within 0.0039 of 1) and
    # +-1 (clip); nextafter up, down, to itself and from zero.
    "erf_inv_next_after": (lambda a, b: (jax.scipy.special.erfinv(a / 9),
                                         jax.scipy.special.erfinv(jnp.sign(a) * (1 - jnp.abs(a) / 2048)),
                                         jax.scipy.special.erfinv(jnp.clip(a, -1.0, 1.0)),
                                         jnp.nextafter(a, b), jnp.nextafter(a, a), jnp.nextafter(a * 0, b),
                                         jax.scipy.special.erfinv((a / 9).astype(jnp.bfloat16)).astype(jnp.float32)),
                           (f32(4, 8, spec=("data", "model")), f32(4, 8))),
    # Gathers: an embedding lookup (rows of a table split by columns), take
    # along a split axis, take_along_axis (batching dimensions), and ids out
    # of range (clamped, as StableHLO defines it).
    "gather": (lambda table, ids, x, i: (table[ids], jnp.take(x, i % 8, axis=1),
                                         jnp.take_along_axis(x, jnp.abs(i[None, :2]) % 8 + jnp.zeros((4, 1), jnp.int32),
                                                             axis=1),
                                         jnp.take(table, ids * 1000, axis=0, mode="clip")),
               (f32(50, 16, spec=(None, "model")), f32(4, 5, spec=("data",), dtype=jnp.int32),
                f32(4, 8, spec=("data",)), f32(3, dtype=jnp.int32))),
    # Scatters: x.at[i].set/add/max/mul along a split and an unsplit axis,
    # an embedding's gradient (rows added at token ids, duplicates summed),
    # a batched scatter (vmap of .at[]), a window narrower than its
    # dimension (x.at[i, 2:5].set) and ids out of range (dropped).
    "scatter": (lambda x, ids, g, i: (x.at[3].set(g[0, :8]), x.at[:, 5].add(g[:4, 0]),
                                      jnp.zeros((50, 8)).at[ids].add(g[:4 * 5].reshape(4, 5, 8)),
                                      x.at[i % 4].max(g[:3, :8]), x.at[1, 2:5].set(g[1, :3]),
                                      x.at[i * 100].set(g[:3, :8]), x.at[2].multiply(2.0),
                                      jax.vmap(lambda row, j: row.at[j].add(1.0))(x, jnp.abs(ids[:, 0]) % 8)),
                (f32(4, 8, spec=("data", "model")), f32(4, 5, spec=("data",), dtype=jnp.int32),
                 f32(24, 8, spec=(None, "model")), f32(3, dtype=jnp.int32))),
    # Sorts: values along a split axis and along the other, argsort (two
    # operands, stable), descending, integers, ties.
    "sort": (lambda x, i: (jnp.sort(x, axis=1), jnp.sort(x, axis=0), jnp.argsort(x, axis=1),
                           -jnp.sort(-x, axis=1), jnp.sort(i), jnp.argsort(jnp.floor(x / 4), axis=1),
                           *jax.lax.top_k(jnp.floor(x / 2), 3), *jax.lax.top_k(i.reshape(2, 8), 5)),
             (f32(4, 8, spec=("data", "model")), f32(16, dtype=jnp.int32))),
    # Windows: cumsum/cumprod/cummax (reduce_window with a padded window),
    # max and average pooling with strides.
    "reduce_window": (lambda x, i: (jnp.cumsum(x, axis=1), jnp.cumsum(i), jax.lax.cummax(x, axis=0),
                                    jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2), (1, 2), "VALID"),
                                    jax.lax.reduce_window(x, 0.0, jax.lax.add, (2, 3), (1, 1), "SAME") / 6),
                      (f32(4, 8, spec=("data", "model")), f32(16, dtype=jnp.int32))),
    "softmax_layernorm": (lambda x, w: (jax.nn.softmax(x @ w, axis=-1),
                                        (x - x.mean(-1, keepdims=True)) * jax.lax.rsqrt(x.var(-1, keepdims=True) + 1e-5)),
                          (f32(4, 16, spec=("data",)), f32(16, 8, spec=(None, "model")))),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_mapping_matches_jax(case):
    fn, args = CASES[case]
    check_reference_matches_jax(fn, args, rtol=1e-5, ambient=mesh)


def test_unmapped_op_names_the_op_and_the_line():
    def rounded(x):
        return jax.lax.reduce_precision(x * 2, exponent_bits=5, mantissa_bits=10)

    with pytest.raises(pj.UnmappedOpError) as info:
        pj.export(rounded, f32(4))
    assert info.value.op_name == "stablehlo.reduce_precision"
    assert "test_compute.py" in info.value.location
    assert "'stablehlo.reduce_precision' is not mapped to Polymesh IR" in str(info.value)


@pytest.mark.parametrize("case", sorted(CASES))
def test_op_mapping_verifies(case):
    """Every case also runs sharded (polymesh-run --verify, bit for bit).
    The inputs are multiples of 1/64, so the sharded sums are exact."""
    fn, args = CASES[case]
    with jax.set_mesh(mesh):
        text = pj.export(fn, *args)
    process = polymesh_run(text, "--verify")
    assert process.returncode == 0 and "PASS" in process.stdout, process.stdout + process.stderr


def test_pipeline_stages_verify():
    """Compute on one stage (devices 0-3), move to the next (4-7), multiply
    there and return on a mesh of all eight devices in reverse order. JAX
    cannot lower it (three device sets); the detached export runs sharded."""
    devices = jax.devices()
    stage0 = Mesh(np.array(devices[0:4]).reshape(2, 2), ("dp", "tp"))
    stage1 = Mesh(np.array(devices[4:8]).reshape(2, 2), ("dp", "tp"))
    backwards = Mesh(np.array(devices[:8])[::-1].reshape(2, 4), ("a", "b"))
    x = jax.device_put(jnp.zeros((8, 8)), NamedSharding(stage0, P("dp", "tp")))
    w = jax.device_put(jnp.zeros((8, 8)), NamedSharding(stage1, P(None, "tp")))

    def pipeline(x, w):
        h = jax.lax.with_sharding_constraint(x * 2.0, NamedSharding(stage0, P("dp", "tp")))
        y = jax.lax.with_sharding_constraint(h + 1.0, NamedSharding(stage1, P("tp", "dp")))
        z = jax.lax.with_sharding_constraint(y @ w, NamedSharding(backwards, P("b")))
        return {"stage0": h, "stage1": y, "out": z}

    program = pj.export_program(pipeline, (x, w))
    assert program.lowering == "detached"
    process = polymesh_run(program.text, "--verify")
    assert process.returncode == 0 and "PASS" in process.stdout, process.stdout + process.stderr


def exact_gelu_mlp(w1, w2, x):
    """A feed-forward block with the exact (erf-based) GELU, which JAX
    lowers through chlo.erfc."""
    return jax.nn.gelu(x @ w1, approximate=False) @ w2


def test_exact_gelu_exports_runs_and_verifies():
    w1 = jax.device_put(jnp.zeros((32, 64)), NamedSharding(mesh, P(None, "model")))
    w2 = jax.device_put(jnp.zeros((64, 32)), NamedSharding(mesh, P("model", None)))
    x = jax.device_put(jnp.zeros((16, 32)), NamedSharding(mesh, P("data")))
    program = pj.export_program(exact_gelu_mlp, (w1, w2, x))
    assert "math.erfc" in program.text and program.opaque_ops == []
    check_reference_matches_jax(exact_gelu_mlp, (w1, w2, x), rtol=1e-4)
    assert_verifies(program.text)


def accuracy_and_top_score(w, x, labels):
    """A classifier's evaluation: argmax over the logits (a reduction of
    values and indices at once), accuracy, and the argmin over the batch."""
    logits = x @ w
    predicted = jnp.argmax(logits, axis=-1)
    return {"accuracy": jnp.mean((predicted == labels).astype(jnp.float32)),
            "predicted": predicted, "hardest": jnp.argmin(logits, axis=0)}


@pytest.mark.parametrize("devices", [8, 32])
def test_argmax_exports_runs_and_verifies(devices):
    m = mesh if devices == 8 else jax.make_mesh((4, 8), ("data", "model"), axis_types=(AxisType.Auto,) * 2)
    classes = 8 * m.shape["model"]
    w = jax.device_put(jnp.zeros((32, classes)), NamedSharding(m, P(None, "model")))
    x = jax.device_put(jnp.zeros((4 * m.shape["data"], 32)), NamedSharding(m, P("data")))
    labels = jax.device_put(jnp.zeros((4 * m.shape["data"],), jnp.int32), NamedSharding(m, P("data")))
    program = pj.export_program(accuracy_and_top_score, (w, x, labels))
    assert "linalg.reduce ins(" in program.text and program.opaque_ops == []
    check_reference_matches_jax(accuracy_and_top_score, (w, x, labels), rtol=1e-5)
    assert_verifies(program.text)
    # The batch split survives the argmax over the classes.
    assert pj.resolve_out_shardings(accuracy_and_top_score, w, x, labels)["predicted"].spec == P("data")


def embed_tied_logits(table, ids):
    """A language model's two ends: token embeddings (a gather of table rows)
    and logits against the same table (the tied output layer)."""
    h = jnp.tanh(table[ids])
    return jnp.einsum("btd,vd->btv", h, table)


def test_embedding_with_tied_logits_verifies():
    args = (f32(96, 32, spec=("model",)), f32(4, 6, spec=("data",), dtype=jnp.int32))
    program = pj.export_program(embed_tied_logits, args)
    assert program.opaque_ops == [] and "tensor.extract" in program.text
    check_reference_matches_jax(embed_tied_logits, args)
    assert_verifies(program.text)


def test_embedding_lookup_keeps_the_table_split():
    """table[ids] with the table split by columns: the body reads the
    feature at the result's own loop index, so the table stays split, the
    lookup moves nothing and the result is placed as JAX places it."""
    table = f32(96, 32, spec=(None, "model"))
    ids = f32(4, 6, spec=("data",), dtype=jnp.int32)

    def lookup(table, ids):
        return table[ids] * 2

    resolved = pj.resolve_out_shardings(lookup, table, ids)
    compiled = jax.jit(lookup).lower(table, ids).compile().output_shardings
    assert resolved.spec == P("data", None, "model"), resolved.spec
    assert resolved.is_equivalent_to(compiled, 3)
    process = polymesh_run(pj.export(lookup, table, ids), "--verify")
    assert process.returncode == 0 and "0 bytes moved" in process.stdout and "PASS" in process.stdout, process.stdout
