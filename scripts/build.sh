#!/usr/bin/env bash
# Configures and builds attnc into ${ATTNC_BUILD_DIR:-build} (Release, ninja, ccache).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ATTNC_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$build" ${ATTNC_NINJA_FLAGS:-}
