#!/usr/bin/env bash
# Installs the toolchain of the fuzz build (utils/run-fuzz.sh) from Debian's
# packages: clang 22, whose libFuzzer and sanitizer runtimes come in
# libclang-rt-22-dev, and lld. It matches the LLVM/MLIR 22 that Polymesh
# builds against. Idempotent: does nothing when everything is present.
set -euo pipefail
cd "$(dirname "$0")/.."
utils/install-deps.sh
packages=(clang-22 libclang-rt-22-dev lld-22)
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
