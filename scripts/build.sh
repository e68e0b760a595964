#!/usr/bin/env bash
# Configures and builds attnc into ${ATTNC_BUILD_DIR:-build} (Release, ninja,
# ccache). ATTNC_CMAKE_FLAGS adds configure options, e.g.
# "-DATTNC_WITH_MLIR=OFF -DATTNC_WITH_HALIDE=OFF" for the runtime-only build.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ATTNC_BUILD_DIR:-build}
# shellcheck disable=SC2086 # the flags are words
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release ${ATTNC_CMAKE_FLAGS:-} >/dev/null
ninja -C "$build" ${ATTNC_NINJA_FLAGS:-}
