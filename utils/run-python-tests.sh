#!/usr/bin/env bash
# Runs the JAX bridge's tests (python/tests, pytest) against the real client:
# JAX, jaxlib and Flax from PyPI (python/requirements.txt, CPU wheels) on
# fake CPU devices, and Polymesh's tools.
#
#   utils/run-python-tests.sh [pytest options...]   e.g. -k flax, -x, -v
#
# - Python: a virtual environment in build-python/venv, made once, with the
#   pinned requirements installed quietly (again only when
#   python/requirements.txt changes). POLYMESH_PYTHON=/path/to/python uses
#   that interpreter as it is instead (it must have the requirements).
# - Tools: polymesh-opt and polymesh-run from POLYMESH_BIN_DIR, default
#   build/bin; when that default lacks them, utils/build.sh builds them.
# - Devices: XLA_FLAGS gets --xla_force_host_platform_device_count=32 (the
#   Orbax restore trains on 32 devices) unless it already asks for 32 or more.
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

# -- Polymesh's tools --------------------------------------------------------
if [ -n "${POLYMESH_BIN_DIR:-}" ]; then
  for tool in polymesh-opt polymesh-run; do
    if [ ! -x "$POLYMESH_BIN_DIR/$tool" ]; then
      echo "error: POLYMESH_BIN_DIR=$POLYMESH_BIN_DIR has no $tool" >&2
      exit 1
    fi
  done
elif [ ! -x build/bin/polymesh-opt ] || [ ! -x build/bin/polymesh-run ]; then
  utils/build.sh
fi

# -- Python and the pinned packages ----------------------------------------
if [ -n "${POLYMESH_PYTHON:-}" ]; then
  python="$POLYMESH_PYTHON"
else
  venv="$root/build-python/venv"
  if [ ! -x "$venv/bin/python" ] || [ ! -x "$venv/bin/pip" ]; then
    rm -rf "$venv"
    # Debian ships venv's pip bootstrap (ensurepip) in python3-venv.
    if ! command -v python3 >/dev/null || ! python3 -m venv "$venv" >/dev/null 2>&1; then
      rm -rf "$venv"
      utils/install-deps.sh python3 python3-venv python3-pip
      python3 -m venv "$venv"
    fi
  fi
  python="$venv/bin/python"
  stamp="$venv/.requirements.sha256"
  wanted="$(sha256sum python/requirements.txt | cut -d' ' -f1)"
  if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$wanted" ]; then
    echo "installing python/requirements.txt into $venv"
    "$python" -m pip install --quiet --disable-pip-version-check --upgrade pip
    "$python" -m pip install --quiet --disable-pip-version-check -r python/requirements.txt
    echo "$wanted" > "$stamp"
  fi
fi

# -- Fake CPU devices --------------------------------------------------------
devices=32
current="$(sed -n 's/.*--xla_force_host_platform_device_count=\([0-9]*\).*/\1/p' <<<"${XLA_FLAGS:-}")"
if [ -z "$current" ]; then
  export XLA_FLAGS="${XLA_FLAGS:+$XLA_FLAGS }--xla_force_host_platform_device_count=$devices"
elif [ "$current" -lt "$devices" ]; then
  export XLA_FLAGS="$(sed "s/--xla_force_host_platform_device_count=[0-9]*/--xla_force_host_platform_device_count=$devices/" <<<"$XLA_FLAGS")"
fi
export JAX_PLATFORMS=cpu

cd python
exec "$python" -m pytest "$@"
