#!/usr/bin/env bash
# The Python package: a virtual environment in ${ATTNC_VENV:-${ATTNC_BUILD_DIR:-build}-venv}
# with the build and test requirements from PyPI (nanobind, scikit-build-core,
# numpy, pytest, torch, transformers, and attn-gym, whose masks the tests check
# patterns against; skipped when present), then `pip install ./python`
# (its CMake build in ${ATTNC_BUILD_DIR:-build}-py, compiled through ccache, so
# a second run rebuilds nothing) and the package's pytest suite. Called by
# scripts/test.sh after the C++ tests; runs on its own as well.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ATTNC_BUILD_DIR:-build}
[[ $build == /* ]] || build=$PWD/$build
venv=${ATTNC_VENV:-$build-venv}
if [[ ! -x $venv/bin/python ]]; then
  python3 -m venv "$venv"
fi
py=$venv/bin/python
"$py" -m pip install -q --disable-pip-version-check nanobind scikit-build-core numpy pytest torch transformers attn-gym
# No build isolation: the venv already holds the build requirements, and an
# isolated build would download them again on every run.
# ATTNC_CUDA_FATBIN (scripts/test.sh sets it): embed that fatbin of the GPU
# kernels instead of running nvcc again.
fatbin=()
[[ -z ${ATTNC_CUDA_FATBIN:-} ]] || fatbin=(--config-settings=cmake.define.ATTNC_CUDA_PREBUILT_FATBIN="$ATTNC_CUDA_FATBIN")
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
  "$py" -m pip install -q --disable-pip-version-check --no-build-isolation \
  --config-settings=build-dir="$build-py" "${fatbin[@]}" ./python
"$py" -m pytest python/tests -q
