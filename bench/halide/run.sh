#!/usr/bin/env bash
# Halide 14 vs attnc's fused CPU kernel on the Sparse Transformer "fixed"
# pattern (n=16384, d=64, 8 heads, 2 threads). See bench/halide/README.md.
#   bash bench/halide/run.sh                 # all hand-schedule variants + attnc
#   bash bench/halide/run.sh VARIANT...      # only these (halide_fixed --list)
#   AUTOSCHED=1 bash bench/halide/run.sh     # also the autoscheduler variants
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"

# 1. Halide 14 from Debian 12 (bookworm).
if ! dpkg -s libhalide14-0-dev >/dev/null 2>&1; then
  apt-get update
  apt-get install -y libhalide14-0-dev
fi

# 2. Standalone build (not part of attnc's main build); -j2 on the 2-core box.
cmake -S "$here" -B "$here/build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
ninja -C "$here/build" -j2 >/dev/null
exe="$here/build/halide_fixed"

export HL_NUM_THREADS=2

# The machine is shared: wait (at most 3 min) until the CPUs are >= 90% idle
# over one second, so that timings are not taken next to someone's build.
wait_quiet() {
  for _ in $(seq 1 90); do
    read -r _ u1 n1 s1 i1 w1 q1 sq1 _ < /proc/stat
    sleep 1
    read -r _ u2 n2 s2 i2 w2 q2 sq2 _ < /proc/stat
    local busy=$(( (u2+n2+s2+q2+sq2) - (u1+n1+s1+q1+sq1) )) idle=$(( (i2+w2) - (i1+w1) ))
    if (( idle * 10 >= (busy + idle) * 9 )); then return 0; fi
    sleep 1
  done
  echo "warning: machine still busy, timing anyway" >&2
}

if (( $# > 0 )); then
  variants=("$@")
else
  mapfile -t variants < <("$exe" --list | grep -v '^auto_')
  if [[ "${AUTOSCHED:-0}" == 1 ]]; then
    mapfile -t -O "${#variants[@]}" variants < <("$exe" --list | grep '^auto_')
  fi
fi

status=0
for v in "${variants[@]}"; do
  wait_quiet
  timeout 600 "$exe" --variant "$v" || status=1
done

# attnc's hand-written fused kernel, same conditions (prebuilt ./build).
attnc="$root/build/tools/attnc/attnc"
if [[ -x "$attnc" ]]; then
  wait_quiet
  (cd "$root" && "$attnc" bench patterns/fixed.attn --n 16384 --d 64 --backend fused --threads 2 --repeat 3)
else
  echo "attnc not built at $attnc: skipping the attnc comparison" >&2
fi
exit $status
