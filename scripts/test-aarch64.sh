#!/usr/bin/env bash
# 64-bit Arm: cross-builds the runtime-only configuration (no MLIR, Halide,
# CLI11 or CUDA) with Debian's g++-aarch64-linux-gnu into
# ${ATTNC_BUILD_DIR:-build}-aarch64 and runs the fused and dense kernels'
# tests against the double-precision reference under qemu-user (the fused
# tile kernels' generic path: GCC vector extensions, on NEON registers
# there). Installs the cross compiler, qemu-user and GoogleTest's sources where
# they are missing (scripts/bootstrap.sh; root or sudo).
# Speed on Arm cannot be measured under qemu: see docs/runtime.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh g++-aarch64-linux-gnu qemu-user libgtest-dev
build=${ATTNC_BUILD_DIR:-build}-aarch64
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_TOOLCHAIN_FILE="$PWD/cmake/aarch64-linux-gnu.cmake" \
  -DATTNC_WITH_MLIR=OFF -DATTNC_WITH_HALIDE=OFF -DATTNC_WITH_CLI=OFF -DATTNC_WITH_CUDA=OFF >/dev/null
ninja -C "$build" attnc_kernel_tests attnc_jit_worker attnc_score_math_tests
readelf -h "$build/tests/runtime/attnc_kernel_tests" | grep -q "AArch64"
# The fused and dense backends' forward and backward cases (every library
# pattern, ragged n, GQA, decoding, bf16) against the reference.
export QEMU_LD_PREFIX=/usr/aarch64-linux-gnu
qemu-aarch64 "$build/tests/runtime/attnc_kernel_tests" --gtest_brief=1 \
  --gtest_filter='LibraryPatterns/CpuKernel.*/fused_*:LibraryPatterns/CpuKernel.*/dense_*:Backends/CpuKernelRows.*/fused:Library/RowsBackward.*:RowsBackwardThreads.*:RowsBackwardNonFinite.*:GradientPatterns/GradientBackward.*/fused_*:GradientPatterns/GradientForward.*/fused_*'
# The score code's functions (tanh, exp, log, integer division) within their
# bounds on NEON.
qemu-aarch64 "$build/tests/runtime/attnc_score_math_tests" --gtest_brief=1
