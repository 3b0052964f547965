#!/usr/bin/env bash
# Host memory planned against measured (report.json's memory block, process
# RSS included) for every shipped pipeline that reads an acquisition, on the
# CPU backend with all cores and on CUDA, on a SCAN x SCAN acquisition of
# 192 x 192 u16 written by make_acquisition. Issue 9: measured <= planned
# <= 1.25 x measured.
#
#   bash host_memory.sh BUNDLE [SCAN]
set -u
BUNDLE=$1 SCAN=${2:-256}
B=$BUNDLE/bin P=$BUNDLE/src/pipelines D=/tmp/acq-hostmem
export PATH="$B:$PATH" LD_LIBRARY_PATH="$BUNDLE/lib" HDF5_PLUGIN_PATH="$BUNDLE/plugins"
mkdir -p $D
[ -e $D/scan_master.h5 ] || make_acquisition $D/scan $SCAN $SCAN 192 192 1000 2 >/dev/null 2>&1 ||
  { echo "host_memory: make_acquisition failed" >&2; rm -f $D/scan_*; exit 1; }
backends="cpu"
sluice devices 2>/dev/null | grep -q "^cuda *available" && backends="cpu cuda"
printf "%-26s %-5s %10s %10s %7s\n" pipeline backend planned measured ratio
for be in $backends; do
  for pipe in virtual_image stem_products dpc mean_pattern virtual_image_fit resident_products; do
    [ -e $P/$pipe.yaml ] || continue
    [ $pipe = resident_products ] && [ $be = cpu ] && continue
    out=$D/o-$pipe-$be
    if ! sluice run $P/$pipe.yaml --set input=$D/scan_master.h5 --backend $be --out $out --force --quiet >/dev/null 2>$D/err; then
      printf "%-26s %-5s failed: %s\n" $pipe $be "$(head -c 200 $D/err)"; continue
    fi
    sluice plan $P/$pipe.yaml --set input=$D/scan_master.h5 --backend $be --json >$D/plan.json 2>/dev/null
    python3 - $out/report.json $pipe $be $D/plan.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))["memory"]
p, q = m["planned_peak_host_bytes"], m["measured_peak_host_bytes"]
print("%-26s %-5s %8.1f Mi %8.1f Mi %7.2f" % (sys.argv[2], sys.argv[3], p / 2**20, q / 2**20, p / q))
# where the plan's host bytes go, and what the engine itself counted
try:
    pl = json.load(open(sys.argv[4]))["plan"]
    pm = pl["memory"]
    parts = ["%s %.1f" % (k.replace("_bytes", ""), v / 2**20) for k, v in pm.items()
             if k.endswith("_bytes") and v and k not in ("live_peak_bytes",)]
    print("    plan MiB: " + ", ".join(parts) + "; chunk %d" % pl["chunk_positions"])
    st = ["%s %.1f" % (n["id"], n["state_bytes"] / 2**20) for n in pl["nodes"] if n.get("state_bytes", 0) > 2**19]
    if st: print("    node state MiB: " + ", ".join(st))
except Exception as e:
    print("    (no plan: %s)" % e)
print("    measured: engine %.1f MiB, process growth %.1f MiB" % (
    m["measured_engine_host_bytes"] / 2**20,
    (m["process_rss_peak_bytes"] - m["process_rss_before_load_bytes"]) / 2**20))
PY
  done
done
