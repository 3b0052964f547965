#!/usr/bin/env bash
# The cost model against the clock: calibrates (sluice calibrate), runs every
# shipped run (tests/data/shipped_runs.txt) on the small test acquisition
# and on a bigger one, REPS times each, and prints from the report.json
# files the measured and estimated seconds of the whole run and of every
# node that took over 1 ms, with measured / estimated (the goal: within 0.5
# .. 2): of each row the run whose ratio is the median of the REPS (one run
# on a shared machine is one noisy sample: the dev VM's 64 x 64 source took
# 32, 5 and 13 ms in three runs in a row against 4.2 estimated).
#
#   bash bench/bench_cost_model.sh [options]
#     --sluice PATH      the sluice binary (default: build/sluice, else on PATH)
#     --backend B        cpu (default) or cuda
#     --threads N        CPU worker threads (default: all)
#     --scan N           the bigger acquisition: N x N frames of 192 x 192 u16
#                        (default 64 on cpu, 256 on cuda; 0: none)
#     --work DIR         acquisitions and outputs (default: $TMPDIR/sluice-bench-cost)
#     --make-acquisition PATH   the writer (default: next to sluice, bench/make_acquisition)
#     --reps N           runs of each pipeline (default 3)
#     --no-calibrate     use the profile already cached (or the built-in guesses)
#     --calibrate-args "ARGS"   more arguments for sluice calibrate
# HDF5_PLUGIN_PATH must reach the bitshuffle filter for make_acquisition
# (default: the Debian/Ubuntu plugin folder when it exists).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
SLUICE="" BACKEND=cpu THREADS="" SCAN="" WORK="${TMPDIR:-/tmp}/sluice-bench-cost" MAKE_ACQ=""
CALIBRATE=1 CAL_ARGS="" REPS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --sluice) SLUICE=$2; shift 2 ;;
    --backend) BACKEND=$2; shift 2 ;;
    --threads) THREADS=$2; shift 2 ;;
    --scan) SCAN=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --make-acquisition) MAKE_ACQ=$2; shift 2 ;;
    --reps) REPS=$2; shift 2 ;;
    --no-calibrate) CALIBRATE=0; shift ;;
    --calibrate-args) CAL_ARGS=$2; shift 2 ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
if [ -z "$SLUICE" ]; then
  if [ -x "$SRC/build/sluice" ]; then SLUICE=$SRC/build/sluice; else SLUICE=$(command -v sluice); fi
fi
SLUICE=$(realpath "$SLUICE")
[ -n "$MAKE_ACQ" ] || MAKE_ACQ=$(dirname "$SLUICE")/bench/make_acquisition
[ -x "$MAKE_ACQ" ] || MAKE_ACQ=$(command -v make_acquisition || true)
[ -n "$SCAN" ] || { [ "$BACKEND" = cuda ] && SCAN=256 || SCAN=64; }
if [ -z "${HDF5_PLUGIN_PATH:-}" ] && [ -d /usr/lib/x86_64-linux-gnu/hdf5/serial/plugins ]; then
  export HDF5_PLUGIN_PATH=/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins
fi
RUN_ARGS=(--backend "$BACKEND")
[ -z "$THREADS" ] || RUN_ARGS+=(--threads "$THREADS")
mkdir -p "$WORK"

# The small test acquisition (like tests/data/shipped_outputs.sh: 24 x 20
# frames of 48 x 40), by make_acquisition (it carries its own bitshuffle
# writer), else by h5py with the plugin (an h5py without it cannot write
# bitshuffle-LZ4).
# Every acquisition has bad pixels in its pixel mask, as a real detector's
# has (5 here, like make_dectris.py's default; 73 in the others, like
# bench_mask_cost.sh): mask_correct's work grows with them.
SMALL=$WORK/test_bad5_master.h5
if [ ! -e "$SMALL" ]; then
  if [ -x "$MAKE_ACQ" ]; then
    "$MAKE_ACQ" --bad-pixels 5 "$WORK/test_bad5" 24 20 48 40 200 >/dev/null
  else
    python3 "$SRC/tests/data/make_dectris.py" "$WORK/test_bad5" --scan 24 20 --detector 48 40 \
      --frames-per-file 200 --chunk-frames 4 --dtype u16 --compress bslz4 --seed 7 --bad-pixels 5 >/dev/null
  fi
fi
ACQS=("test $SMALL 24,20")
if [ "$SCAN" -gt 0 ]; then
  BIG=$WORK/scan${SCAN}_bad73_master.h5
  [ -e "$BIG" ] || "$MAKE_ACQ" --bad-pixels 73 "$WORK/scan${SCAN}_bad73" "$SCAN" "$SCAN" 192 192 1000 >/dev/null
  ACQS+=("scan$SCAN $BIG $SCAN,$SCAN")
fi

if [ "$CALIBRATE" = 1 ]; then
  # The detector-input nodes are calibrated on acquisitions of their own
  # (16 x 16 and 48 x 48 frames of 192 x 192; on a GPU 32 x 32 and 128 x 128,
  # where the source's pinned windows reach their full size, and so on a CPU
  # of more than 4 workers: the 48 x 48 scan gave each of the H200 host's 16
  # workers 144 frames, whose first calls set the rate: virtual_detectors
  # fitted at 0.0087 ns an operation there, 0.0055 in its 256 x 256 runs),
  # not on the ones measured below; two sizes tell a node's setup from its
  # rate.
  CAL_INPUTS=()
  CAL_SIDES="16 48"
  WORKERS=${THREADS:-$(nproc)}
  if [ "$BACKEND" = cuda ] || [ "$WORKERS" -gt 4 ]; then CAL_SIDES="32 128"; fi
  for side in $CAL_SIDES; do
    CAL=$WORK/calib${side}_bad73_master.h5
    [ -e "$CAL" ] || "$MAKE_ACQ" --bad-pixels 73 "$WORK/calib${side}_bad73" $side $side 192 192 1000 >/dev/null
    CAL_INPUTS+=(--input "$CAL")
  done
  echo "== sluice calibrate ${RUN_ARGS[*]} ${CAL_INPUTS[*]} $CAL_ARGS"
  # shellcheck disable=SC2086 # CAL_ARGS are words
  "$SLUICE" calibrate "${RUN_ARGS[@]}" "${CAL_INPUTS[@]}" $CAL_ARGS
fi

table() { # label report.json...
  python3 - "$@" <<'PY'
import json, sys
label, reports = sys.argv[1], sys.argv[2:]
within = total = 0
def row(pipe, what, kind, m, e):
    global within, total
    r = m / e if e > 0 else float("inf")
    ok = 0.5 <= r <= 2
    within += ok; total += 1
    print("%-8s %-18s %-20s %-18s %10.4f %10.4f %7.2f%s" % (label, pipe, what, kind, m, e, r, "" if ok else "  <-- outside 2x"))
# rows of every run, in the first run's order: (pipeline, what, kind) -> [(measured, estimated)]
rows = {}
for path in reports:
    r = json.load(open(path))
    pipe = r["pipeline"]
    rows.setdefault((pipe, "(whole run)", r.get("cost_model", {}).get("profile", "?")[-18:]), []).append(
        (r["seconds"], r["estimated_seconds"]))
    for n in r["nodes"]:
        rows.setdefault((pipe, n["id"], n["type"]), []).append((n["seconds"], n["estimated_seconds"]))
for (pipe, what, kind), runs in rows.items():
    runs.sort(key=lambda me: me[0] / me[1] if me[1] > 0 else float("inf"))
    m, e = runs[len(runs) // 2]  # the median ratio's run
    if what == "(whole run)" or m > 1e-3:
        row(pipe, what, kind, m, e)
print("%s: %d of %d within 2x" % (label, within, total))
PY
}

printf "%-8s %-18s %-20s %-18s %10s %10s %7s\n" data pipeline node type measured estimated ratio
for acq in "${ACQS[@]}"; do
  read -r label master shape <<<"$acq"
  reports=()
  # The files in the page cache first, as a calibration found them: the
  # model prices reads at memory speed, not a disk's (on a shared machine
  # the cache drops files between runs, and the first pipeline read them at
  # a tenth of the rate: 19x its estimate on the dev VM).
  cat "${master%_master.h5}"*.h5 >/dev/null 2>&1 || true
  while read -r name pipe args; do
    case "$name" in ''|'#'*) continue ;; esac
    # The acquisition-free pipelines run once, with the test data.
    if [[ "$args" != *@ACQ@* ]] && [ "$label" != test ]; then continue; fi
    args=${args//@ACQ@/--set input=$master --set scan_shape=[$shape]}
    for rep in $(seq "$REPS"); do
      out=$WORK/out-$label-$name-$rep
      # shellcheck disable=SC2086 # the arguments are words without spaces
      if ! "$SLUICE" run "$SRC/pipelines/$pipe" $args "${RUN_ARGS[@]}" --out "$out" --force --quiet \
          </dev/null 2>"$WORK/$label-$name.log"; then
        echo "$label $name: run failed"; cat "$WORK/$label-$name.log"; continue 2
      fi
      reports+=("$out/report.json")
    done
  done <"$SRC/tests/data/shipped_runs.txt"
  table "$label" "${reports[@]}"
done
