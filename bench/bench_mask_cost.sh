#!/usr/bin/env bash
# What bad-pixel correction and the products cost on top of read + decode
# (issue 12: products under 20% on top of read + decode): the shipped
# detector pipelines (PIPELINES, default virtual_image, stem_products, dpc,
# mean_pattern and virtual_image_fit from pipelines/) with their shipped
# defaults (median policy, automatic chunk) on a SCAN x SCAN acquisition of
# 192 x 192 u16 frames with 73 pixels in the detector's pixel mask (stored
# at the flag value in every frame), at 1 and 2 threads. From each run's
# report.json (same data, same run):
#   read+decode   hdf5_source + bslz4_decode seconds
#   + mask        ... + mask_correct (median)
#   + products    the whole run (virtual_image: the preview, disk fit and
#                 virtual detectors; stem_products: also the BF segments,
#                 centre of mass, DPC and iDPC; dpc: the centre of mass,
#                 DPC and iDPC; mean_pattern: the summed pattern;
#                 virtual_image_fit: the mean pattern, its disk fit and the
#                 virtual detectors in a second pass)
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

PIPELINES=${PIPELINES:-virtual_image stem_products dpc mean_pattern virtual_image_fit}

# Whether pipeline $1 has the mask_policy param (every shipped detector
# pipeline does; its template's default is median).
has_policy() { grep -q '^  mask_policy:' "$SRC/pipelines/$1.yaml"; }

# One run; prints "wall read_decode mask products_total" (seconds).
run_once() { # pipeline threads policy
  rm -rf "$DIR/out" # this benchmark's own output
  local s e
  s=$(date +%s.%N)
  "$SLUICE" run "$SRC/pipelines/$1.yaml" --set input="$DIR/${ACQ}_master.h5" \
    --set mask_policy="$3" --threads "$2" --out "$DIR/out" --quiet >/dev/null 2>"$DIR/run.err" ||
    { cat "$DIR/run.err" >&2; echo "bench_mask_cost: $1 failed" >&2; return 1; }
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
# policy's medians, then the none policy's (nan for a pipeline without the
# mask_policy param, whose template corrects by the median, or whose runs
# with none fail). A failed median run stops the benchmark.
median_runs() { # pipeline threads
  local rows="$DIR/rows.txt" r
  : >"$rows"
  for _ in $(seq "$REPS"); do
    r=$(run_once "$1" "$2" median) || return 1
    echo "m $r" >>"$rows"
    if has_policy "$1" && r=$(run_once "$1" "$2" none 2>/dev/null); then echo "n $r" >>"$rows"; fi
  done
  $PY -c 'import sys, statistics as s
rows = [l.split() for l in sys.stdin]
for p in "mn":
    cols = list(zip(*[list(map(float, r[1:])) for r in rows if r[0] == p]))
    print(*([s.median(c) for c in cols] if cols else ["nan"] * 4), end=" ")
print()' <"$rows"
}

echo "sluice $("$SLUICE" --version 2>/dev/null | head -1); $SCAN x $SCAN frames of 192x192 u16, 73 bad pixels; $(nproc) CPUs; median of $REPS; load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-17s %-8s %12s %18s %22s %16s %18s\n' pipeline threads "read+decode" "+ mask (median)" "+ products (run)" "wall median" "wall none"
for p in $PIPELINES; do
  for th in 1 2; do
    res=$(median_runs "$p" $th) || exit 1
    read -r wall rd mask total wall_none _ _ _ <<<"$res"
    none="-"
    if [ "$wall_none" = nan ]; then has_policy "$p" && none="failed"
    else none=$(printf '%.3f s (%.2fx)' "$wall_none" "$(echo "$wall / $wall_none" | bc -l)"); fi
    printf '%-17s %-8s %10.3f s %9.3f s %5.2fx %13.3f s %5.2fx %12.3f s %18s\n' "$p" "$th" "$rd" \
      "$(echo "$rd + $mask" | bc -l)" "$(echo "($rd + $mask) / $rd" | bc -l)" "$total" \
      "$(echo "$total / $rd" | bc -l)" "$wall" "$none"
  done
done
