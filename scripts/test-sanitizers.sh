#!/usr/bin/env bash
# Sanitizer builds (docs/reliability.md, "Sanitizers in CI"); scripts/test.sh
# runs this after its other steps. Two build directories next to the normal
# one, each configured with ATTNC_SANITIZE (top-level CMakeLists.txt):
#
#   ${ATTNC_BUILD_DIR:-build}-asan  ASan + UBSan + LeakSanitizer, the full
#       configuration (MLIR, Halide, CLI): the unit, front-end, support,
#       kernel, CLI and fuzz-replay tests, so that every source file runs.
#   ${ATTNC_BUILD_DIR:-build}-tsan  TSan, the runtime-only configuration
#       (no MLIR, no Halide: nothing uninstrumented runs threads): the thread
#       pool, the fused backend's parallel runs and the JIT cache.
#
# Only the test targets needed are built. Any report fails its test:
# halt_on_error everywhere, -fno-sanitize-recover=undefined for UBSan, and
# a leak LeakSanitizer reports at exit makes the exit code nonzero.
# ATTNC_SAN_JOBS sets ninja's and ctest's parallelism (default: nproc).
set -euo pipefail
cd "$(dirname "$0")/.."
build=${ATTNC_BUILD_DIR:-build}
jobs=${ATTNC_SAN_JOBS:-$(nproc)}

# The options are exported for the builds too: gtest_discover_tests runs
# each test binary at build time to list its tests.
export ASAN_OPTIONS=detect_leaks=1:halt_on_error=1:check_initialization_order=1:strict_string_checks=1
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
# -g1 makes ccache hash the build directory; without that, and with paths
# taken relative to the checkout, a fresh clone or a new build directory
# reuses the objects of an earlier sanitizer build.
export CCACHE_NOHASHDIR=1 CCACHE_BASEDIR=$PWD

configure() { # DIR SANITIZERS FLAGS...
  local dir=$1 sanitize=$2
  shift 2
  # (ATTNC_CUDA_FATBIN, from scripts/test.sh: the GPU kernels nvcc built there.)
  cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DATTNC_SANITIZE="$sanitize" \
    ${ATTNC_CUDA_FATBIN:+-DATTNC_CUDA_PREBUILT_FATBIN="$ATTNC_CUDA_FATBIN"} "$@" >/dev/null
}

# run_gtest BINARY: all of a gtest binary's tests in $jobs shards at once,
# one process each (a process per test, as ctest runs them, costs more than
# the tests under ASan); a failing shard's output is shown.
run_gtest() {
  local bin=$1 i failed=0
  local pids=()
  for ((i = 0; i < jobs; ++i)); do
    GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$i "$bin" >"$bin.shard$i.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < jobs; ++i)); do
    if ! wait "${pids[i]}"; then
      # LeakSanitizer's tracer (the thread that stops the others to scan for
      # leaks at exit) sometimes faults on a loaded machine after every test
      # passed ("Tracer caught signal 11 ... LeakSanitizer has encountered a
      # fatal error"): that shard runs once more, and fails if it fails again.
      if grep -q '^\[  PASSED  \]' "$bin.shard$i.log" && ! grep -q '^\[  FAILED  \]' "$bin.shard$i.log" &&
        grep -q 'LeakSanitizer has encountered a fatal error' "$bin.shard$i.log"; then
        echo "$bin shard $i: LeakSanitizer's tracer failed after its tests passed; running the shard again"
        GTEST_TOTAL_SHARDS=$jobs GTEST_SHARD_INDEX=$i "$bin" >"$bin.shard$i.log" 2>&1 && continue
      fi
      cat "$bin.shard$i.log"
      failed=1
    fi
  done
  echo "$bin: $(grep -h '^\[==========\] .* ran' "$bin".shard*.log | awk '{n += $2} END {print n}') tests, failed: $failed"
  return "$failed"
}

# ASan + UBSan: the gtest binaries whole, then ctest's other tests (the
# example, mlir-opt, fuzz corpus replays and the fused kernels' AVX2, portable and
# uncached variants). Left out: the install test (an external project whose
# executables are not linked with ASan), the layering check (a shell
# script), and the generic-only copy of the runtime (a second compile of
# its largest file; the same code runs in attnc_kernel_tests). The bf16
# kernels' tests link the runtime's own fused objects (attnc_fused_objects).
asan=$build-asan
configure "$asan" address,undefined
ninja -C "$asan" -j"$jobs" attnc_unit_tests attnc_frontend_tests attnc_support_tests attnc_kernel_tests \
  attnc_jit_worker attnc_cli_tests attnc jit_fixed FuzzPattern FuzzKernelFile FuzzNpy FuzzRunArgs FuzzCallInputs \
  attnc_data_pattern_tests attnc_score_modifier_tests attnc_fused_bf16_tests
status=0
for bin in tests/attnc_unit_tests tests/attnc_support_tests tests/attnc_frontend_tests \
  tests/runtime/attnc_kernel_tests tests/runtime/attnc_data_pattern_tests tests/runtime/attnc_score_modifier_tests \
  tests/runtime/attnc_fused_bf16_tests tests/attnc_cli_tests; do
  (cd "$(dirname "$asan/$bin")" && run_gtest "./$(basename "$bin")") || status=1
done
(cd "$asan" && ctest --output-on-failure -j"$jobs" \
  -R '^(Example\.|EmitMlir\.|Fuzz\.|FusedKernel\.(Avx2|Portable|Uncached)\.)') || status=1
# The cuda target's host side on the fake driver (where the build has the cuda target).
if ninja -C "$asan" -t query attnc_cuda_host_tests >/dev/null 2>&1; then
  ninja -C "$asan" -j"$jobs" attnc_cuda_host_tests
  (cd "$asan/tests/runtime" && run_gtest ./attnc_cuda_host_tests) || status=1
fi

# TSan: the thread pool, the fused backend's cases of the kernel,
# gradient, tile-shape, concurrency and JIT cache suites, and GPU calls from
# several threads on the fake driver. Left out: the two
# tests that count a worker process's threads (TSan starts a thread of its
# own with the first pthread_create).
tsan=$build-tsan
configure "$tsan" thread -DATTNC_WITH_MLIR=OFF -DATTNC_WITH_HALIDE=OFF
ninja -C "$tsan" -j"$jobs" attnc_support_tests attnc_kernel_tests attnc_jit_worker
if ninja -C "$tsan" -t query attnc_cuda_host_tests >/dev/null 2>&1; then
  ninja -C "$tsan" -j"$jobs" attnc_cuda_host_tests
  (cd "$tsan/tests/runtime" && ./attnc_cuda_host_tests --gtest_brief=1 --gtest_filter='CudaHostThreads.*:CudaHostLengths.*') ||
    status=1
fi
(cd "$tsan" && ctest --output-on-failure -j"$jobs" \
  -R '^(ThreadPool\.|Concurrency|JitCache|Jit\.|.*/fused([ _]|$)|.*FusedTileShapes\.|FusedWaitingKeys\.)' \
  -E '^Concurrency\.(NumThreadsBoundsTheThreadsARunUses|TheEnvironmentSetsTheDefaultThreadCount)$') || status=1
exit "$status"
