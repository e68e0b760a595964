#!/usr/bin/env bash
# Installs every Debian 12 package that building and testing attnc needs.
# Idempotent: packages already present are left alone. Run as root (or with sudo).
set -euo pipefail

# With arguments, those packages instead of the list (scripts/test-aarch64.sh).
packages=(
  build-essential cmake ninja-build ccache pkg-config git python3
  python3-venv python3-dev
  llvm-19-dev llvm-19-tools libmlir-19-dev mlir-19-tools clang-19 liblld-19-dev
  libclang-rt-19-dev
  libcli11-dev libgtest-dev libgmock-dev libhalide14-0-dev
  zlib1g-dev libzstd-dev libedit-dev libxml2-dev libffi-dev libcurl4-openssl-dev
)
if (($#)); then
  packages=("$@")
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if ((${#missing[@]})); then
  SUDO=""
  [[ $(id -u) -ne 0 ]] && SUDO=sudo
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
