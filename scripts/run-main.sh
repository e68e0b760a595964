#!/usr/bin/env bash
# The main job: install dependencies, build, then analyse and draw the seed's
# "fixed" pattern (Sparse Transformer, l = 128, c = 8) at n = 4096.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash scripts/build.sh
attnc=${ATTNC_BUILD_DIR:-build}/tools/attnc/attnc
"$attnc" check patterns/fixed.attn
"$attnc" analyze patterns/fixed.attn --n 4096 --block 64
"$attnc" show patterns/fixed.attn --n 48 -D l=8 -D c=2
"$attnc" show patterns/fixed.attn --n 512 -D l=64 -D c=8 --grid 64 -o fixed.svg
"$attnc" show patterns/fixed.attn --n 512 -D l=64 -D c=8 --grid 64 -o fixed.png
