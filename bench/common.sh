# Shared by the benchmark scripts (sourced): the attnc binary of a build
# directory, the sizes and threads from the environment, and the benchmark
# rows (the five patterns, with their parameters, of docs/benchmarks.md's tables).
#
#   build-dir: $1 (default build); ATTNC_BENCH_NS (default "4096 16384"),
#   ATTNC_BENCH_DS (default "64 128"), ATTNC_BENCH_THREADS (default 2).
build=${1:-build}
attnc=$build/tools/attnc/attnc
ns=${ATTNC_BENCH_NS:-4096 16384}
ds=${ATTNC_BENCH_DS:-64 128}
threads=${ATTNC_BENCH_THREADS:-2}
cases=(
  "fixed -D l=128 -D c=8"
  "strided -D l=128"
  "local -D w=512"
  "longformer"
  "bigbird"
)

# Calls FUNCTION NAME N D [-D k=v ...] for every row: each case at every n and d.
each_row() {
  local fn=$1 c name n d
  for c in "${cases[@]}"; do
    set -- $c
    name=$1
    shift
    for n in $ns; do
      for d in $ds; do
        "$fn" "$name" "$n" "$d" "$@"
      done
    done
  done
}
