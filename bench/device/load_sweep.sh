#!/usr/bin/env bash
# On the accelerator machine: load + decode + BF (decode_bf.yaml) of the
# full-size acquisition under a sweep of the settings that shape the load:
# the source's read threads and the chunk (positions per call). Prints
# report.json's execution seconds, phases and per-node host and device
# seconds for each, so that where the time goes is read off one log.
#
#   bash load_sweep.sh BUNDLE [SCAN] [REPS] [READ_THREADS...]
#   env PIECES="0 1048576 65536": also the smallest read piece (read_piece)
#   env DARK_MEAN (default 0.8: the 3.26 GB, 5.9:1 file; see shipped_full_size.sh)
set -u
BUNDLE=$1 SCAN=${2:-512} REPS=${3:-2}
shift 3 2>/dev/null || shift $#
THREADS=${*:-"0 8 16"}
B=$BUNDLE/bin D=/tmp/acq-shipped-${DARK_MEAN:=0.8}
export PATH="$B:$PATH" LD_LIBRARY_PATH="$BUNDLE/lib" HDF5_PLUGIN_PATH="$BUNDLE/plugins"
mkdir -p $D
if [ ! -e $D/scan_master.h5 ]; then
  "$B/make_acquisition" --dark-mean $DARK_MEAN $D/scan $SCAN $SCAN 192 192 1000 16 | tail -1
fi
cat $D/*.h5 >/dev/null
# the host's own bound: plain reads of the files from the page cache, and
# pinned host -> device copies (bench_page_cache_read)
"$B/bench_page_cache_read" --pinned --threads "${BOUND_THREADS:-4 8 16}" $D/scan_data_*.h5
cp $BUNDLE/src/bench/device/decode_bf.yaml $D/decode.yaml
show() {
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
ph = r.get("phases", {})
print("  execution %.4f s, chunks %s; phases: %s" % (r["seconds"], r.get("chunks"),
      ", ".join("%s %.3f" % (k.replace("_seconds", ""), v) for k, v in ph.items())))
for n in r["nodes"]:
    print("    %-6s %-14s host %8.4f s  device %s" % (n["id"], n["type"], n["seconds"],
          "%.4f s" % n["device_seconds"] if "device_seconds" in n else "-"))
    for note in n.get("notes", []):
        if note.startswith("reading:"): print("      " + note)
PY
}
# sweep SETTING VALUES...: REPS timed runs per value of the setting
sweep() {
  local name=$1 v r; shift
  for v in "$@"; do
    for r in $(seq $REPS); do
      echo "== $name=$v (0: automatic) rep $r"
      /usr/bin/time -f "  process wall %e s" "$B/sluice" run $D/decode.yaml --set input=$D/scan_master.h5 \
        --backend cuda --setting $name=$v --out $D/o-sweep --force --quiet 2>&1 | grep wall
      show $D/o-sweep/report.json
    done
  done
}
sweep read_threads $THREADS
sweep read_piece ${PIECES:-}
for ch in 512 2048 8192; do
  echo "== chunk $ch (default read threads)"
  "$B/sluice" run $D/decode.yaml --set input=$D/scan_master.h5 --backend cuda --chunk $ch \
    --out $D/o-sweep --force --quiet >/dev/null 2>&1 || echo "  failed"
  show $D/o-sweep/report.json
done
echo "== source_overlap=false"
"$B/sluice" run $D/decode.yaml --set input=$D/scan_master.h5 --backend cuda --setting source_overlap=false \
  --out $D/o-sweep --force --quiet >/dev/null 2>&1 || echo "  failed"
show $D/o-sweep/report.json
