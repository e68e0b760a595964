#!/usr/bin/env bash
# The main job: install dependencies, build, then
#  1. analyse and draw the seed's "fixed" pattern (Sparse Transformer, l=128, c=8),
#  2. compile it to kernel files (fused plan; Halide-generated code; MLIR
#     sparse-tensor native code), and
#  3. JIT-load it from a host program (examples/jit_fixed.cpp) with each
#     backend, run it on [batch=1, heads=8, n=4096, d=64] and print the time
#     and the error against a reference written from the paper's formula.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash scripts/build.sh
build=${ATTNC_BUILD_DIR:-build}
attnc=$build/tools/attnc/attnc
"$attnc" check patterns/fixed.attn
"$attnc" analyze patterns/fixed.attn --n 4096 --block 64
"$attnc" show patterns/fixed.attn --n 48 -D l=8 -D c=2
"$attnc" show patterns/fixed.attn --n 512 -D l=64 -D c=8 --grid 64 -o "$build/fixed.svg"
"$attnc" compile patterns/fixed.attn -o "$build/fixed.attnk"
"$attnc" compile patterns/fixed.attn --backend halide -o "$build/fixed-halide.attnk"
"$attnc" compile patterns/fixed.attn --backend sparsifier -o "$build/fixed-mlir.attnk"
"$build/examples/jit_fixed" patterns/fixed.attn 4096 64 8 fused
"$build/examples/jit_fixed" patterns/fixed.attn 4096 64 8 halide
"$build/examples/jit_fixed" patterns/fixed.attn 4096 64 8 sparsifier
