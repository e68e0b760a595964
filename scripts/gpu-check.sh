#!/usr/bin/env bash
# The cuda target's whole GPU verification in one call (docs/cuda.md):
#
#   here (any machine with nvcc, no GPU needed):
#     bash scripts/gpu-check.sh --stage      # build the runtime-only + CUDA
#                                            # configuration, copy what runs into .gpu-carry/
#   on the GPU machine (the checkout with .gpu-carry/ beside it):
#     bash scripts/gpu-check.sh [quick|full|tests|wgmma|profile]
#
# On the GPU it runs, writing each log into $OUT (or /tmp/attnc-gpu-check):
#   1. the GPU's name, driver and clocks (nvidia-smi);
#   2. the kernels' registers, shared memory and spills (cuobjdump);
#   3. attnc_cuda_tests: every CudaKernel case (library patterns, ragged n,
#      d 16-256, bf16 / fp16 / f32, GQA, nq < nk, strided views, rows with one
#      key and none, forward and backward against the double reference;
#      all of it again with the forward on wgmma, variant 4, where the GPU is
#      compute capability 9.0), score modifiers (soft caps and sinks against
#      the CPU), the error paths and the table walks;
#   4. compute-sanitizer (memcheck, racecheck) on small cases;
#   5. bench/peers_gpu.py: attnc against flex_attention and SDPA, one table
#      (quick: n = 16384, d = 64; full: flex and SDPA at n = 16384, d = 64 and
#      128, attnc alone at n = 65536 too); then the forward's variants, A/B
#      (quick: the default and wgmma; full: all five); then the soft cap and
#      the sink beside the same patterns without them (--modifiers);
#   6. the attnc tool's GPU paths (carried): run --target cuda --check with a
#      gradient (score modifiers too), bench --target cuda forward and
#      backward, tune --target cuda;
#   7. the Python package built there (pip, no network: the machine's
#      scikit-build-core and nanobind; the fatbin from .gpu-carry) and
#      python/tests/test_cuda.py: the torch op on CUDA tensors, and
#      test_distributed.py::test_cuda_tensors (context parallelism on a GPU),
#      test_transformers.py's five model families on the GPU (where the
#      machine has transformers; skipped, saying so, where it has not).
# `wgmma` runs only what decides the Hopper kernels' fate, in a few minutes:
# their tests (CudaKernel/Wgmma.*, the offset calls), memcheck on two of
# them, and the variants table at n = 16384, d = 64 and 128.
# `profile` runs Nsight Compute on the default kernels of one call each (the
# forward of fixed, strided's two launches, local; fixed's backward) at
# n = 16384, d = 64, bf16: duration, throughputs, occupancy, launch limits
# and warp states, into $OUT/profile.csv and a summary (about a minute).
# Everything it needs travels in .gpu-carry/ (a few MB): no build there.
set -uo pipefail
cd "$(dirname "$0")/.."
carry=.gpu-carry

if [ "${1:-}" = "--stage" ]; then
  set -e
  build=${ATTNC_BUILD_DIR:-build-gpu}
  ATTNC_BUILD_DIR=$build ATTNC_CMAKE_FLAGS="-DATTNC_WITH_MLIR=OFF -DATTNC_WITH_HALIDE=OFF -DATTNC_WITH_CUDA=ON -DATTNC_WITH_CLI=ON" \
    bash scripts/build.sh
  rm -rf "$carry" && mkdir -p "$carry"
  cp "$build/runtime/libattnc.so" "$build/jit/libattnc_jit.so" "$build/runtime/attnc_kernels.fatbin" \
     "$build/tests/runtime/attnc_cuda_tests" "$carry/"
  # The attnc tool (built here with CLI11, which the GPU machine lacks; it needs libz there only).
  cp "$build/tools/attnc/attnc" "$carry/"
  git rev-parse --short HEAD > "$carry/commit"
  git status --porcelain | grep -q . && echo "+uncommitted" >> "$carry/commit"
  du -sh "$carry"
  exit 0
fi

mode=${1:-quick}
out=${OUT:-/tmp/attnc-gpu-check}
mkdir -p "$out"
export LD_LIBRARY_PATH=$PWD/$carry${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export ATTNC_TEST_SOURCE_DIR=$PWD ATTNC_CACHE_DIR=/tmp/attnc-cache PYTHONUNBUFFERED=1
status=0
step() { echo; echo "=== $* ($(date +%T))"; }

step "device"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv | tee "$out/device.txt"
echo "attnc build: $(cat $carry/commit 2>/dev/null)" | tee -a "$out/device.txt"

step "registers, shared memory and spills"
cuobjdump --dump-resource-usage "$carry/attnc_kernels.fatbin" 2>&1 |
  grep -E "Function|REG|STACK" | sed 's/^ *//' | paste - - | awk '{print}' > "$out/resources.txt"
grep -E "attnc_(fwd|bwd)_bf16_(64|128)" "$out/resources.txt" | head -8

if [ "$mode" = wgmma ]; then
  step "the wgmma kernels' tests"
  "$carry/attnc_cuda_tests" --gtest_brief=1 --gtest_filter='Wgmma/*:CudaKernel.QueriesAtAnOffset*:CudaWgmma.*' 2>&1 |
    tee "$out/tests.log" | tail -25
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  step "compute-sanitizer memcheck (wgmma)"
  timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 "$carry/attnc_cuda_tests" --gtest_brief=1 \
    --gtest_filter='Wgmma/*gaps_n100*:Wgmma/*gqa_local*' > "$out/memcheck.log" 2>&1
  rc=$?; tail -4 "$out/memcheck.log"; [ $rc = 0 ] || { echo "memcheck: exit $rc"; status=1; }
  step "variants"
  python3 bench/peers_gpu.py --lib-dir $carry --variants 0,4,5 --bwd-variants 0,1 --n 16384 --d 64,128 \
    --patterns fixed,strided,local,longformer,bigbird 2>&1 | tee "$out/variants.md"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  step "done: status $status"
  exit $status
fi

if [ "$mode" = profile ]; then
  # The launches of one call, after the tool's warm-up call (which has as many): fixed and local launch one
  # forward kernel, strided two (its residue classes, then the rest).
  : > "$out/profile.csv"
  for spec in "fixed 1" "strided 2" "local 1" "fixed 1 --backward"; do
    set -- $spec
    name=$1 count=$2 kernels=attnc_fwd
    [ "${3:-}" = --backward ] && kernels=attnc_bwd
    step "ncu: $name ${3:-}"
    timeout 120 ncu --kernel-name "regex:$kernels" --launch-skip "$count" --launch-count "$count" \
      --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
      --section MemoryWorkloadAnalysis --csv --page details \
      "$carry/attnc" bench "patterns/$name.attn" --n 16384 --d 64 --target cuda --repeat 1 ${3:-} \
      > "$out/profile-$name${3:-}.csv" 2> "$out/profile-$name${3:-}.err" || status=1
    cat "$out/profile-$name${3:-}.csv" >> "$out/profile.csv"
    python3 - "$out/profile-$name${3:-}.csv" <<'PY'
import csv, sys
keep = ("Duration", "Compute (SM) Throughput", "Memory Throughput", "DRAM Throughput", "L2 Cache Throughput",
        "Achieved Occupancy", "Theoretical Occupancy", "Registers Per Thread", "Block Limit Registers",
        "Block Limit Shared Mem", "Dynamic Shared Memory Per Block", "Grid Size", "Waves Per SM",
        "Warp Cycles Per Issued Instruction", "Issued Warp Per Scheduler", "No Eligible", "Active Warps Per Scheduler",
        "Eligible Warps Per Scheduler", "Mem Busy", "Max Bandwidth", "L1/TEX Hit Rate", "L2 Hit Rate")
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 5]
if not rows:
    sys.exit("no ncu rows (see the .err file)")
head = rows[0]
col = {k: i for i, k in enumerate(head)}
name = col.get("Kernel Name", col.get("Function Name", 0))
for r in rows[1:]:
    if r[col["Metric Name"]] in keep:
        print(f'{r[col["ID"]]:>2} {r[name][:40]:40} {r[col["Metric Name"]]:36} '
              f'{r[col["Metric Value"]]:>12} {r[col["Metric Unit"]]}')
PY
  done
  step "done: status $status"
  exit $status
fi

step "tests"
"$carry/attnc_cuda_tests" --gtest_brief=1 2>&1 | tee "$out/tests.log" | tail -25
[ "${PIPESTATUS[0]}" = 0 ] || status=1

if [ "$mode" != tests ]; then
  step "compute-sanitizer memcheck"
  timeout 180 compute-sanitizer --tool memcheck --error-exitcode 3 "$carry/attnc_cuda_tests" --gtest_brief=1 \
    --gtest_filter='Library/*gaps_n100*:Library/*gqa_local*:Library/*decode_strided*:Library/*d33_fixed*:Library/*strided_n100*:Wgmma/*gaps_n100*:Wgmma/*gqa_local*:CudaKernel.QueriesAtAnOffset*:CudaKernel.ScoreModifiers*' \
    > "$out/memcheck.log" 2>&1
  rc=$?; tail -4 "$out/memcheck.log"; [ $rc = 0 ] || { echo "memcheck: exit $rc"; status=1; }
  step "compute-sanitizer racecheck"
  timeout 120 compute-sanitizer --tool racecheck --error-exitcode 3 "$carry/attnc_cuda_tests" --gtest_brief=1 \
    --gtest_filter='Library/*fixed_n100_*:Library/*strided_n100*' > "$out/racecheck.log" 2>&1
  rc=$?; tail -4 "$out/racecheck.log"; [ $rc = 0 ] || { echo "racecheck: exit $rc"; status=1; }

  step "benchmark ($mode)"
  bench="python3 bench/peers_gpu.py --lib-dir $carry ${ATTNC_PEERS_FLAGS:-}"
  if [ "$mode" = full ]; then
    $bench --n 16384 --d 64,128 2>&1 | tee "$out/bench.md"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    $bench --n 65536 --d 64,128 --no-flex 2>&1 | tail -n +4 | tee -a "$out/bench.md"
    variants="--variants 0,1,2,3,4,5 --bwd-variants 0,1 --d 64,128 --patterns fixed,strided,local,longformer,bigbird"
  else
    $bench --n 16384 --d 64 2>&1 | tee "$out/bench.md"
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
    variants="--variants 0,4,5 --bwd-variants 0,1 --d 64 --patterns fixed,strided,local"
  fi
  # The forward's and the backward's variants side by side, each checked
  # against the default (forward 4 and backward 1: wgmma, compute capability 9.0 only).
  # shellcheck disable=SC2086 # (the options are words)
  $bench $variants --n 16384 2>&1 | tee "$out/variants.md"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1
  # The soft cap and the sink against the same patterns without them (target: <= 10% over).
  $bench --modifiers --n 16384 --d "$([ "$mode" = full ] && echo 64,128 || echo 64)" 2>&1 | tee "$out/modifiers.md"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1

  step "the attnc tool on the GPU"
  tool=$carry/attnc
  { "$tool" run patterns/fixed.attn --random 1,4,1000,64 --target cuda --grad random --check &&
    "$tool" run patterns/strided.attn --random 2,4,300,128 --kv-heads 2 --target cuda --check &&
    "$tool" run patterns/sink_window.attn -D w=64 --random 1,4,500,64 --target cuda --grad random --check &&
    "$tool" run patterns/alibi_local.attn --random 1,4,500,128 --target cuda --grad random --check &&
    "$tool" run patterns/capped_fixed.attn --random 1,4,500,64 --target cuda --grad random --check &&
    "$tool" bench patterns/fixed.attn --n 16384 --d 64 --target cuda --backward &&
    "$tool" bench patterns/local.attn --n 16384 --d 128 --target cuda --dtype f16 &&
    ATTNC_CACHE_DIR=/tmp/attnc-tune "$tool" tune patterns/local.attn --n 16384 --d 64 --target cuda --repeat 5
  } 2>&1 | tee "$out/cli.log"
  [ "${PIPESTATUS[0]}" = 0 ] || status=1

  step "python package and its GPU tests"
  site=/tmp/attnc-site
  rm -rf "$site" && mkdir -p "$site"
  if timeout 200 python3 -m pip install -q --no-build-isolation --no-deps --target "$site" \
       -Ccmake.define.ATTNC_CUDA_PREBUILT_FATBIN="$PWD/$carry/attnc_kernels.fatbin" -Cbuild-dir=/tmp/attnc-pybuild \
       ./python > "$out/pip.log" 2>&1; then
    PYTHONPATH=$site timeout 200 python3 -m pytest -q -p no:cacheprovider python/tests/test_cuda.py \
      python/tests/test_distributed.py::test_cuda_tensors \
      python/tests/test_transformers.py::test_models_on_a_gpu_equal_eager 2>&1 |
      tee "$out/pytest.log" | tail -15
    [ "${PIPESTATUS[0]}" = 0 ] || status=1
  else
    tail -20 "$out/pip.log"; status=1
  fi

fi
step "done: status $status"
exit $status
