#!/usr/bin/env bash
# Installs dependencies, builds from scratch-or-cache, and runs every test.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/bootstrap.sh
bash scripts/build.sh
cd "${ATTNC_BUILD_DIR:-build}"
ctest --output-on-failure -j"$(nproc)"
