#!/usr/bin/env bash
# On the accelerator machine: the shipped pipelines with their shipped
# defaults (median bad-pixel correction, disk fitted to the first frames) on
# a full-size acquisition, timed as a user runs them: report.json's
# execution seconds and per-node seconds, and the whole process's wall time
# and peak RSS (/usr/bin/time). Also load + decode + BF alone, the chunk
# listing (sluice plan) and iDPC of a 512 x 512 scan (bench_cuda_idpc).
#
#   bash shipped_full_size.sh BUNDLE [SCAN] [REPS]
#     BUNDLE  the unpacked device bundle (bin/, src/)
#     SCAN    scan side (default 512: 512 x 512 frames of 192 x 192 u16,
#             18 GiB decoded, bitshuffle-LZ4 written like the Dectris layout)
#     REPS    runs of each pipeline (default 3)
#   env DARK_MEAN  the dark field's mean count (make_acquisition --dark-mean):
#             0.8 (default) writes 3.26 GB, 5.9:1, like quantem.gpu's
#             benchmark file; 0.05 the sparser 1.6 GB, 12:1 of earlier runs
set -u
BUNDLE=$1 SCAN=${2:-512} REPS=${3:-3}
B=$BUNDLE/bin P=$BUNDLE/src/pipelines D=/tmp/acq-shipped-${DARK_MEAN:=0.8}
export PATH="$B:$PATH" LD_LIBRARY_PATH="$BUNDLE/lib" HDF5_PLUGIN_PATH="$BUNDLE/plugins"
log() { echo "== $* ($(date +%T))"; }
report() { # report.json -> execution seconds, memory, per-node seconds
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
m = r["memory"]
print("execution %.4f s; peak device planned/measured MiB %.1f / %.1f; host planned/measured MiB %.1f / %.1f" % (
    r["seconds"], m.get("planned_peak_bytes", 0) / 2**20, m.get("measured_peak_bytes", 0) / 2**20,
    m.get("planned_peak_host_bytes", 0) / 2**20, m.get("measured_peak_host_bytes", 0) / 2**20))
ph = r.get("phases", {})
if ph:
    print("phases: " + ", ".join("%s %.3f" % (k.replace("_seconds", ""), v) for k, v in ph.items()))
for n in r["nodes"]:
    print("  %-22s %-18s %8.4f s" % (n["id"], n["type"], n["seconds"]))
# resident_products: the first pass ends with the acquisition resident.
# From the start of execution to pass 0's end, every wait included (the sum
# of pass 0's level seconds, which this printed before 2026-12-02's last
# session, leaves out the waits for the source's reads).
if any(n["id"] == "resident" for n in r["nodes"]):
    first = r["passes"][0]["ends_at_seconds"]
    levels = sum(l["seconds"] for l in r["levels"] if l["pass"] == 0)
    print("first usable resident (pass 1: read, decode, correct, gather) %.4f s (its levels alone %.4f s)" % (first, levels))
PY
}
timed() { # label, then the command; prints wall and RSS
  local label=$1; shift
  /usr/bin/time -f "$label: wall %e s, max RSS %M KB" "$@" 2>&1 >/dev/null | grep -E "wall|error" || true
}

mkdir -p $D
if [ ! -e $D/scan_master.h5 ]; then
  log "write a ${SCAN}x${SCAN} scan of 192x192 u16"
  "$B/make_acquisition" --dark-mean $DARK_MEAN $D/scan $SCAN $SCAN 192 192 1000 16 | tail -1
fi
du -sh $D; cat $D/*.h5 >/dev/null
echo "compressed $(du -cb $D/scan_data_* | tail -1 | cut -f1) bytes of $((SCAN * SCAN * 192 * 192 * 2)) decoded"
log "plan (chunk listing) of stem_products.yaml"
for r in 1 2; do timed "sluice plan" "$B/sluice" plan $P/stem_products.yaml --set input=$D/scan_master.h5; done
cp $BUNDLE/src/bench/device/decode_bf.yaml $D/decode.yaml
for r in $(seq $REPS); do
  log "load + decode + BF, --backend cuda (rep $r)"
  timed "process" "$B/sluice" run $D/decode.yaml --set input=$D/scan_master.h5 --backend cuda --out $D/o-dec --force --quiet
  report $D/o-dec/report.json
done
for pipe in virtual_image stem_products resident_products; do
  for r in $(seq $REPS); do
    log "$pipe.yaml shipped defaults, --backend cuda (rep $r)"
    timed "process" "$B/sluice" run $P/$pipe.yaml --set input=$D/scan_master.h5 --backend cuda --out $D/o-$pipe --force --quiet
    report $D/o-$pipe/report.json
  done
done
log "stem_products.yaml, mask_policy=none, --backend cuda"
timed "process" "$B/sluice" run $P/stem_products.yaml --set input=$D/scan_master.h5 --set mask_policy=none --backend cuda --out $D/o-sp-none --force --quiet
report $D/o-sp-none/report.json
log "stem_products.yaml shipped defaults, --backend cpu ($(nproc) cores)"
timed "process" "$B/sluice" run $P/stem_products.yaml --set input=$D/scan_master.h5 --backend cpu --out $D/o-sp-cpu --force --quiet
report $D/o-sp-cpu/report.json
log "CUDA against CPU, stem_products outputs (raw bytes of each dataset)"
for k in disk bf adf df com_row com_col rotation_deg transpose curl divergence idpc; do
  for o in o-stem_products o-sp-cpu; do
    rm -f $D/$o-$k.bin
    "$B/h5dump" -d $k -b LE -o $D/$o-$k.bin $D/$o/results.h5 >/dev/null 2>&1
  done
  if cmp -s $D/o-stem_products-$k.bin $D/o-sp-cpu-$k.bin; then echo "$k: cuda == cpu"; else echo "$k: cuda != cpu"; fi
done
log "iDPC of a 512 x 512 scan: host and device"
timeout 120 "$B/bench_cuda_idpc" 512 512
log "done"
