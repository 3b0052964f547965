#!/usr/bin/env bash
# On the accelerator machine: repack.yaml (an acquisition's stored chunks
# into results.h5, never decoded) on CUDA and on the host CPU, to check what
# the thirty-fifth session built without a device (db3054b): a node whose
# outputs only host nodes read (hdf5_source lending its stored chunks to
# write_h5) runs on the host of a device backend, so the CUDA run plans and
# uses no device buffer for the frames, no ring and no staging, and its host
# peak is near the CPU run's. Prints, per run, wall and execution seconds,
# host and device planned / measured peaks (report.json) and the node
# seconds; then PASS or FAIL for each check:
#   - CUDA: planned device peak under 1 MiB (nothing of the frames there);
#   - every run: measured host peak <= planned;
#   - CUDA: host planned peak beyond the process's own memory (the CUDA
#     runtime's) within 1.5x of the CPU run's;
#   - the two results.h5 hold the same stored chunks (frames dataset, read
#     with the bitshuffle plugin by python3 + h5py when both are there, else
#     compared as sluice's listing of chunk sizes).
# Exit 0 when every check passed.
#
#   bash repack_memory.sh BUNDLE [SCAN]
#     BUNDLE  the unpacked device bundle (bin/, src/, lib/, plugins/)
#     SCAN    scan side (default 512: 512 x 512 frames of 192 x 192 u16,
#             the dense 5.9:1 file, 3.26 GB)
set -u
BUNDLE=$1 SCAN=${2:-512}
B=$BUNDLE/bin P=$BUNDLE/src/pipelines A=/tmp/acq-repack-$SCAN
export PATH="$B:$PATH" LD_LIBRARY_PATH="$BUNDLE/lib" HDF5_PLUGIN_PATH="$BUNDLE/plugins"
log() { echo "== $* ($(date +%T))"; }
[ -e ${A}_master.h5 ] || make_acquisition --dark-mean 0.8 "$A" "$SCAN" "$SCAN" 192 192 1000 2 | tail -1
cat ${A}_data_*.h5 >/dev/null # warm page cache: the runs compare memory, not the disk
fails=0
check() { # NAME CONDITION(0/1)
  if [ "$2" = 1 ]; then echo "PASS $1"; else echo "FAIL $1"; fails=$((fails + 1)); fi
}
for be in cuda cpu; do
  log "repack on $be"
  rm -rf /tmp/repack-$be # this script's own output
  s=$(date +%s%N)
  sluice run "$P/repack.yaml" --set input=${A}_master.h5 --backend $be --out /tmp/repack-$be --quiet \
    >/dev/null 2>/tmp/repack-$be.err || { tail -5 /tmp/repack-$be.err; check "repack on $be ran" 0; continue; }
  e=$(date +%s%N)
  python3 - /tmp/repack-$be/report.json "$(((e - s) / 1000000))" <<'PY'
import json, sys
r = json.load(open(sys.argv[1])); m = r["memory"]
g = lambda k: m.get(k, 0) / 2**20
print("wall %.3f s, execution %.3f s; host planned / measured %.1f / %.1f MiB; device %.1f / %.1f MiB" % (
    float(sys.argv[2]) / 1e3, r["seconds"], g("planned_peak_host_bytes"), g("measured_peak_host_bytes"),
    g("planned_peak_device_bytes"), g("measured_peak_device_bytes")))
print("  " + " ".join("%s=%.3f" % (n["id"], n["seconds"]) for n in r["nodes"]))
PY
done
mem() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['memory'].get(sys.argv[2], 0))" "$1" "$2"; }
if [ -e /tmp/repack-cuda/report.json ] && [ -e /tmp/repack-cpu/report.json ]; then
  cu=/tmp/repack-cuda/report.json cp=/tmp/repack-cpu/report.json
  check "cuda: no device memory for the frames (planned device peak $(mem $cu planned_peak_device_bytes) bytes)" \
    "$([ "$(mem $cu planned_peak_device_bytes)" -lt 1048576 ] && echo 1 || echo 0)"
  for r in $cu $cp; do
    check "$r: measured host <= planned" \
      "$([ "$(mem $r measured_peak_host_bytes)" -le "$(mem $r planned_peak_host_bytes)" ] && echo 1 || echo 0)"
  done
  # beyond the process's own memory (plan.memory.process_bytes: the CUDA
  # runtime's libraries and context, about 170 MiB on an H100's host, which
  # the CPU run has not)
  own() { python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print(r['memory']['planned_peak_host_bytes'] - r['plan']['memory']['process_bytes'])" "$1"; }
  check "cuda host plan beyond the process's own within 1.5x of the cpu run's ($(own $cu) against $(own $cp) bytes)" \
    "$(python3 -c "import sys; print(int(float(sys.argv[1]) <= 1.5 * float(sys.argv[2])))" "$(own $cu)" "$(own $cp)")"
  if python3 -c "import h5py" 2>/dev/null; then
    same=$(python3 - /tmp/repack-cuda/results.h5 /tmp/repack-cpu/results.h5 <<'PY'
import h5py, sys
a, b = (h5py.File(p, "r")["frames"] for p in sys.argv[1:3])
# chunk_iter visits the index once (get_chunk_info(i) searches it for every
# i: quadratic, minutes at 262,144 chunks)
offsets = []
a.id.chunk_iter(lambda info: offsets.append(info.chunk_offset))
same = len(offsets) == b.id.get_num_chunks() and all(
    a.id.read_direct_chunk(o) == b.id.read_direct_chunk(o) for o in offsets)
print(int(same))
PY
)
    check "the same stored chunks on cuda and cpu" "$same"
  else
    echo "SKIP the stored chunks' comparison (no h5py here)"
  fi
fi
log "done: $fails failed"
[ $fails = 0 ]
