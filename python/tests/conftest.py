"""Test setup: fake CPU devices for JAX, and the package on sys.path."""

import os
import re
import sys
from pathlib import Path

# JAX reads XLA_FLAGS when its CPU backend starts, so this runs before any
# test module imports jax. The Orbax pattern trains on 32 devices.
DEVICES = 32
_flags = os.environ.get("XLA_FLAGS", "")
_match = re.search(r"--xla_force_host_platform_device_count=(\d+)", _flags)
if not _match:
    os.environ["XLA_FLAGS"] = (_flags + f" --xla_force_host_platform_device_count={DEVICES}").strip()
# JAX's CPU backend may keep bf16/f16 intermediates in f32 ("excess
# precision"); polymesh-run's reference rounds every op, as the types say.
if "--xla_allow_excess_precision" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_allow_excess_precision=false"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import pytest  # noqa: E402


def pytest_configure(config):
    count = len(jax.devices())
    if count < DEVICES:
        raise pytest.UsageError(
            f"these tests need {DEVICES} fake CPU devices, JAX has {count}: set "
            f"XLA_FLAGS=--xla_force_host_platform_device_count={DEVICES} (or more)")
