#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz/ with clang-19 (ASan + UBSan) in
# build-fuzz/ and runs each for a set time, one at a time, in one process.
#
# Usage:
#   scripts/fuzz.sh [-t SECONDS] [-j JOBS] [TARGET...]
#     -t SECONDS  time per target (-max_total_time; default 300)
#     -j JOBS     ninja's parallel jobs for the build (default 1)
#     TARGET      FuzzPattern, FuzzKernelFile, FuzzNpy, FuzzRunArgs, FuzzCallInputs (default: all)
#   FUZZ_ARGS='-max_len=8192' scripts/fuzz.sh FuzzPattern   extra libFuzzer flags
#
# Examples:
#   scripts/fuzz.sh                      every target, 5 minutes each
#   scripts/fuzz.sh -t 1800 FuzzPattern  one target, half an hour
#
# Each target starts from its seeds (tests/fuzz/corpus/<target>/) and grows a
# working corpus in build-fuzz/fuzz-corpus/<target>/ (kept between runs, never
# committed); crash, leak, timeout and out-of-memory inputs land in
# build-fuzz/fuzz-findings/<target>/. Save a fixed one under
# tests/fuzz/regressions/<target>/ so that ctest replays it in every build.
# Needs Debian's clang-19 and libclang-rt-19-dev (scripts/bootstrap.sh).
# Exit status: 0 when no target found anything, 1 otherwise, 2 on bad usage.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build-fuzz
seconds=300
jobs=1
all=(FuzzPattern FuzzKernelFile FuzzNpy FuzzRunArgs FuzzCallInputs)

while getopts "t:j:h" opt; do
  case $opt in
    t) seconds=$OPTARG ;;
    j) jobs=$OPTARG ;;
    h) sed -n '2,23p' "$0"; exit 0 ;;
    *) sed -n '2,23p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
targets=("$@")
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz.sh: unknown target '$t' (known: ${all[*]})" >&2; exit 2; }
done

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19 -DATTNC_FUZZ=ON \
  -DATTNC_WITH_MLIR=OFF -DATTNC_WITH_HALIDE=OFF -DATTNC_WITH_CLI=OFF >/dev/null
ninja -C "$build" -j "$jobs" "${targets[@]}"

# Leaks are findings too; a timeout is one input taking over 10 s.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
found=0
summary=()
for t in "${targets[@]}"; do
  work=$build/fuzz-corpus/$t
  findings=$build/fuzz-findings/$t
  mkdir -p "$work" "$findings"
  args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1
        -artifact_prefix="$findings/")
  [[ $t == FuzzPattern ]] && args+=(-dict="$root/tests/fuzz/pattern.dict")
  log=$build/fuzz-findings/$t.log
  echo "== $t: ${seconds} s"
  before=$(find "$findings" -type f | wc -l)
  # shellcheck disable=SC2086
  "$build/tests/fuzz/$t" "${args[@]}" ${FUZZ_ARGS:-} "$work" "$root/tests/fuzz/corpus/$t" \
    >"$log" 2>&1 || true
  after=$(find "$findings" -type f | wc -l)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
  corpus=$(find "$work" -type f | wc -l)
  new=$((after - before))
  ((new == 0)) || found=1
  summary+=("$(printf '%-15s execs %-10s exec/s %-7s corpus %-6s findings %s' \
    "$t" "${execs:-?}" "${rate:-?}" "$corpus" "$new")")
  ((new == 0)) || grep -m3 -E "^==[0-9]+==ERROR|runtime error|SUMMARY" "$log" || true
done
printf '%s\n' "${summary[@]}"
exit $found
