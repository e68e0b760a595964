#!/usr/bin/env bash
# Installs dependencies, builds from scratch-or-cache, and runs every test,
# twice: the full build (MLIR, Halide, CLI) in ${ATTNC_BUILD_DIR:-build},
# then the runtime-only configuration (ATTNC_WITH_MLIR=OFF,
# ATTNC_WITH_HALIDE=OFF: what a machine without LLVM, MLIR or Halide builds)
# in ${ATTNC_BUILD_DIR:-build}-min, which reuses ccache's objects; then the
# Python package (scripts/test-python.sh: a venv in ${ATTNC_BUILD_DIR:-build}-venv,
# `pip install ./python`, its pytest suite); then the runtime-only
# configuration cross-built for aarch64 with its kernel tests under qemu-user
# (scripts/test-aarch64.sh, in ${ATTNC_BUILD_DIR:-build}-aarch64).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache hashes absolute paths (and, with -g, the build directory): taken
# relative to the checkout, a fresh clone reuses an earlier build's objects.
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$PWD} CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-1}
bash scripts/bootstrap.sh
build=${ATTNC_BUILD_DIR:-build}
bash scripts/build.sh
(cd "$build" && ctest --output-on-failure -j"$(nproc)")
# The GPU kernels' fatbin is the same in every build below (device code, no
# host flags): they embed this build's instead of running nvcc again (one to
# two and a half minutes of a core each). ATTNC_CUDA_FATBIN is read by
# test-python.sh and test-sanitizers.sh as well.
fatbin=$build/runtime/attnc_kernels.fatbin
[[ $fatbin == /* ]] || fatbin=$PWD/$fatbin
[[ ! -f $fatbin ]] || export ATTNC_CUDA_FATBIN=$fatbin
ATTNC_BUILD_DIR=$build-min \
  ATTNC_CMAKE_FLAGS="-DATTNC_WITH_MLIR=OFF -DATTNC_WITH_HALIDE=OFF${ATTNC_CUDA_FATBIN:+ -DATTNC_CUDA_PREBUILT_FATBIN=$ATTNC_CUDA_FATBIN}" \
  bash scripts/build.sh
(cd "$build-min" && ctest --output-on-failure -j"$(nproc)")
bash scripts/test-python.sh
# The runtime on 64-bit Arm: cross-built, its fused and dense kernel tests under qemu-user.
ATTNC_BUILD_DIR=$build bash scripts/test-aarch64.sh
# Last, the sanitizer builds in ${ATTNC_BUILD_DIR:-build}-asan and -tsan (scripts/test-sanitizers.sh).
bash scripts/test-sanitizers.sh
