#!/usr/bin/env bash
# Installs what Polymesh builds with, from Debian's packages, plus any
# packages named as arguments (e.g. the fuzz toolchain). Idempotent: does
# nothing when everything is present.
set -euo pipefail
packages=(llvm-22-dev libmlir-22-dev mlir-22-tools llvm-22-tools
          ninja-build cmake g++ libabsl-dev libgtest-dev libbenchmark-dev
          openmpi-bin libopenmpi-dev
          "$@")
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
    missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
echo "installing: ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
$SUDO apt-get update
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${missing[@]}"
