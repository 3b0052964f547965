#!/usr/bin/env bash
# What bad-pixel correction and the products cost on top of read + decode
# (issue 12: products under 20% on top of read + decode): the shipped
# product pipelines (PIPELINES, default pipelines/virtual_image.yaml and
# pipelines/stem_products.yaml) with their shipped defaults (median
# policy, automatic chunk) on a SCAN x SCAN acquisition of 192 x 192 u16 frames with 73 pixels
# in the detector's pixel mask (stored at the flag value in every frame), at
# 1 and 2 threads. From each run's report.json (same data, same run):
#   read+decode   hdf5_source + bslz4_decode seconds
#   + mask        ... + mask_correct (median)
#   + products    the whole run (preview, disk fit, virtual detectors, and
#                 for stem_products the centre of mass, DPC and iDPC too)
# each as a ratio to read+decode; and the wall time of the same pipeline with
# mask_policy=none beside it. Medians of REPS runs of each policy,
# interleaved; page cache warm. The shipped pipeline wires bslz4_decode's
# flag counts into mask_correct (detector_input.yaml): the frames are not
# scanned again for the flag value.
#
#   bench/bench_mask_cost.sh [build/sluice] [SCAN] [REPS]
set -euo pipefail
SLUICE=$(realpath "${1:-build/sluice}")
SCAN=${2:-128}
REPS=${3:-5}
SRC=$(cd "$(dirname "$0")/.." && pwd)
DIR=${BENCH_DIR:-/tmp/sluice-bench-mask}
PY=/usr/bin/python3
mkdir -p "$DIR"
cd "$DIR"
ACQ=acq${SCAN}_bad73
[ -e ${ACQ}_master.h5 ] || $PY "$SRC/tests/data/make_dectris.py" $ACQ --scan $SCAN $SCAN \
  --detector 192 192 --frames-per-file 4096 --dtype u16 --compress bslz4 --bad-pixels 73 >/dev/null
cat ${ACQ}_data_*.h5 >/dev/null

PIPELINES=${PIPELINES:-virtual_image stem_products}

# One run; prints "wall read_decode mask products_total" (seconds).
run_once() { # pipeline threads policy
  rm -rf "$DIR/out" # this benchmark's own output
  local s e
  s=$(date +%s.%N)
  "$SLUICE" run "$SRC/pipelines/$1.yaml" --set input="$DIR/${ACQ}_master.h5" \
    --set mask_policy="$3" --threads "$2" --out "$DIR/out" --quiet >/dev/null 2>"$DIR/run.err" ||
    { cat "$DIR/run.err" >&2; echo "bench_mask_cost: run failed" >&2; exit 1; }
  e=$(date +%s.%N)
  $PY - "$DIR/out/report.json" "$(echo "$e - $s" | bc -l)" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
by = {}
for n in r["nodes"]:
    by[n["type"]] = by.get(n["type"], 0.0) + n.get("seconds", 0.0)
rd = by.get("hdf5_source", 0) + by.get("bslz4_decode", 0)
print(sys.argv[2], rd, by.get("mask_correct", 0), r["seconds"])
EOF
}

# Median of each column over REPS runs of each policy, interleaved (median,
# none, median, ...: a loaded machine slows both alike); prints the median
# policy's medians, then the none policy's.
median_runs() { # pipeline threads
  for _ in $(seq "$REPS"); do echo "m $(run_once "$1" "$2" median)"; echo "n $(run_once "$1" "$2" none)"; done |
    $PY -c 'import sys, statistics as s
rows = [l.split() for l in sys.stdin]
for p in "mn":
    cols = zip(*[list(map(float, r[1:])) for r in rows if r[0] == p])
    print(*[s.median(c) for c in cols], end=" ")
print()'
}

echo "sluice $("$SLUICE" --version 2>/dev/null | head -1); $SCAN x $SCAN frames of 192x192 u16, 73 bad pixels; $(nproc) CPUs; median of $REPS; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-15s %-8s %12s %18s %22s %16s %16s\n' pipeline threads "read+decode" "+ mask (median)" "+ products (run)" "wall median" "wall none"
for p in $PIPELINES; do
  for th in 1 2; do
    read -r wall rd mask total wall_none _ _ _ < <(median_runs "$p" $th)
    printf '%-15s %-8s %10.3f s %9.3f s %5.2fx %13.3f s %5.2fx %12.3f s %12.3f s (%.2fx)\n' "$p" "$th" "$rd" \
      "$(echo "$rd + $mask" | bc -l)" "$(echo "($rd + $mask) / $rd" | bc -l)" "$total" \
      "$(echo "$total / $rd" | bc -l)" "$wall" "$wall_none" "$(echo "$wall / $wall_none" | bc -l)"
  done
done
