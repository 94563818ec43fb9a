"""The Orbax report (shared/seeds/orbax-single-replica-restore-under-active-
mesh.txt): under `jax.set_mesh` of a 32-device training mesh, one replica's
restore is broadcast to all replicas, and per-device work (expand_dims of a
shard, zeros on one device) must stay on its device. JAX refuses both
programs ("incompatible devices"); the export keeps every device id."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P, SingleDeviceSharding

import polymesh_jax as pj
from helpers import polymesh_run

devices = jax.devices()
# Mesh shape (pp=1, dp=16, tp=2) in the report; pp=1 is dropped.
train = jax.make_mesh((16, 2), ("dp", "tp"))
replica0 = Mesh(np.array(devices[:2]), ("tp",))  # the replica that read the checkpoint


def restore(kernel):
    return {"params": {"dense": {"kernel": kernel}}}


restore_jit = jax.jit(restore, out_shardings={"params": {"dense": {"kernel": NamedSharding(train, P(None, "tp"))}}})


def globalize_single_replica_arrays(shard):
    return {
        "source_device_map[0]": jnp.expand_dims(shard, axis=0),
        "device_buffers[5]": jax.device_put(jnp.zeros((1,) + shard.shape, shard.dtype), devices[5]),
    }


def kernel_on_replica0():
    return jax.device_put(jnp.zeros((512, 256), jnp.float32), NamedSharding(replica0, P(None, "tp")))


def shard_on_device0():
    return jax.device_put(jnp.zeros((512, 128), jnp.float32), devices[0])


def test_jax_alone_refuses_the_report():
    shard = shard_on_device0()
    with jax.set_mesh(train):
        with pytest.raises(ValueError, match="incompatible devices"):
            jnp.expand_dims(shard, axis=0)  # the report's error, verbatim
        with pytest.raises(ValueError, match="incompatible devices"):
            restore_jit(kernel_on_replica0())


def test_restore_export():
    with jax.set_mesh(train):
        program = pj.export_program(restore_jit, (kernel_on_replica0(),))
    assert program.lowering == "detached"
    meshes = pj._attrs.parse_meshes(program.text)
    replica = program.meshes.add_jax_mesh(replica0)
    training = program.meshes.add_jax_mesh(train)
    assert meshes[replica].ids() == (0, 1) and meshes[replica].axes == (("tp", 2),)
    assert meshes[training].ids() == tuple(range(32))
    signature = pj._attrs.parse_functions(program.text)[program.function_name]
    assert signature.attributes["polymesh.ambient_mesh"] == "@" + training
    assert signature.arguments[0].sharding().attr_text() == f'#polymesh.sharding<@{replica}, [{{}}, {{"tp"}}]>'
    assert signature.results[0].leaf() == "params.dense.kernel"
    assert signature.results[0].sharding().attr_text() == f'#polymesh.sharding<@{training}, [{{}}, {{"tp"}}]>'
    # Propagation makes the cross-mesh broadcast an explicit reshard.
    propagated = pj.propagate(program.text)
    assert f'polymesh.reshard %arg0 <@{training}, [{{}}, {{"tp"}}]>' in propagated


def test_restore_runs_and_verifies():
    """Movement only: polymesh-run --verify runs the broadcast from replica
    0 on 32 loopback devices and compares every tile."""
    with jax.set_mesh(train):
        text = pj.export(restore_jit, kernel_on_replica0())
    process = polymesh_run(text, "--verify")
    assert process.returncode == 0, process.stdout + process.stderr
    assert "on 32 devices, PASS" in process.stdout
    # Each of the 15 other replicas receives both column halves once.
    moved = int(process.stdout.split(" bytes moved")[0].rsplit(" ", 1)[-1])
    assert moved == 15 * 512 * 256 * 4


def test_per_device_work_stays_on_its_device():
    with jax.set_mesh(train):
        resolution = pj.resolve(globalize_single_replica_arrays, (shard_on_device0(),))
    program = resolution.program
    assert program.lowering == "detached"
    assert program.ambient_mesh == program.meshes.add_jax_mesh(train)
    out = resolution.out_shardings
    assert out["source_device_map[0]"] == SingleDeviceSharding(devices[0])
    assert out["device_buffers[5]"] == SingleDeviceSharding(devices[5])
    # The ambient mesh places nothing: no op or value is on the 32 devices.
    body = resolution.propagated.split("func.func", 1)[1]
    assert f"@{program.ambient_mesh}," not in body
    assert "polymesh.reshard" not in body
    # expand_dims is a reshape of the shard, zeros a constant placed on device 5.
    assert "tensor.expand_shape %arg0" in program.text
    assert f"polymesh.sharding_constraint %1 <@{program.meshes.add_device(devices[5])}" in program.text


def test_per_device_work_reference_run():
    with jax.set_mesh(train):
        text = pj.export(globalize_single_replica_arrays, shard_on_device0())
    process = polymesh_run(text)
    assert process.returncode == 0, process.stdout + process.stderr
    assert "1 ran, 0 failed" in process.stdout


def test_per_device_work_verifies():
    """Needs the sharded CPU path for functions that compute."""
    with jax.set_mesh(train):
        text = pj.export(globalize_single_replica_arrays, shard_on_device0())
    process = polymesh_run(text, "--verify")
    assert process.returncode == 0 and "PASS" in process.stdout, process.stdout + process.stderr
