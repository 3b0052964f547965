#!/usr/bin/env bash
# One device call: the whole test suite on the GPU (run_all.sh), then the
# benchmarks, with everything worth keeping copied into $OUT.
#
#   run(command="bash bench/device/session.sh", carry=["device-bundle"], timeout_s=600)
#   env: TEST_BUDGET (seconds for run_all.sh, default 240), SCAN (full-size
#        scan side, default 512: 512 x 512 frames of 192 x 192 u16 = 18 GiB)
set -u
HERE=$(cd "$(dirname "$0")/../.." && pwd)
BUNDLE=$HERE/device-bundle
OUTDIR=${OUT:-$PWD/device-logs}
mkdir -p "$OUTDIR"
SCAN=${SCAN:-512}
if [ ! -d "$BUNDLE/bin" ]; then
  tar -C "$BUNDLE" -xJf "$BUNDLE/bundle.tar.xz" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$BUNDLE/bundle.tar.xz" "$BUNDLE"
fi
export PATH="$BUNDLE/bin:$PATH" LD_LIBRARY_PATH="$BUNDLE/lib" HDF5_PLUGIN_PATH="$BUNDLE/plugins"
B=$BUNDLE/bin
log() { echo "== $* ($(date +%T))"; }

{
log "tests"
OUT=$OUTDIR TIME_BUDGET=${TEST_BUDGET:-240} bash "$BUNDLE/run_all.sh" > "$OUTDIR/tests.log" 2>&1
echo "run_all exit $?"; tail -40 "$OUTDIR/summary.txt" 2>/dev/null

log "bench: CUDA bitshuffle-LZ4 decode kernel"
timeout 120 "$B/bench_cuda_bslz4" 32768 192 5 256
log "bench: CUDA products on resident frames (65536 frames)"
timeout 90 "$B/bench_cuda_products" 65536
log "bench: CUDA products on resident frames (262144 frames, 18 GiB)"
timeout 120 "$B/bench_cuda_products" 262144

log "full size: write a ${SCAN}x${SCAN} scan of 192x192 u16 (bitshuffle-LZ4, Dectris layout)"
D=/tmp/acq; mkdir -p $D
TIMER=""; [ -x /usr/bin/time ] && TIMER="/usr/bin/time -v"
time "$B/make_acquisition" $D/scan $SCAN $SCAN 192 192 1000 16
du -sh $D; cat $D/*.h5 > /dev/null
log "bench: chunk reader vs threads (page cache, malloc windows)"
timeout 120 "$B/bench_chunk_reader" $D/scan_master.h5 8192 16 3
log "bench: chunk reader vs threads (pinned windows, as the CUDA path)"
timeout 120 "$B/bench_chunk_reader" $D/scan_master.h5 8192 16 3 1
log "plan (chunk index listing) time"
time "$B/sluice" plan $BUNDLE/src/pipelines/virtual_image.yaml --set input=$D/scan_master.h5 > /dev/null
cat > $D/products.yaml <<Y
pipeline: products
params: {input: {type: path, required: true}}
nodes:
  det: {use: $BUNDLE/src/pipelines/templates/detector_input.yaml, params: {path: "\${input}", mask_policy: none}}
  vd: {type: virtual_detectors, inputs: {frames: det.frames}, params: {radius: 24, center: [96, 96]}}
  com: {type: com, inputs: {frames: det.frames}}
outputs: {bf: vd.bf, adf: vd.adf, df: vd.df, com_row: com.com_row, com_col: com.com_col}
Y
cat > $D/decode.yaml <<Y
pipeline: decode
params: {input: {type: path, required: true}}
nodes:
  src: {type: hdf5_source, params: {path: "\${input}"}}
  dec: {type: bslz4_decode, inputs: {chunks: src.frames}}
  bf: {type: virtual_image, inputs: {frames: dec.frames}, params: {kind: bf, radius: 24, center: [96, 96]}}
outputs: {bf: bf.image}
Y
for rep in 1 2 3; do
  log "full size: load + decode (+ a BF image, 0.4 ms) --backend cuda (rep $rep)"
  "$B/sluice" run $D/decode.yaml --set input=$D/scan_master.h5 --backend cuda --out $D/out-dec --force --quiet
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('seconds', round(r['seconds'],4), 'peak device MiB', round(r['memory']['measured_peak_bytes']/2**20,1))" $D/out-dec/report.json
done
for backend in cuda cpu; do
  for rep in 1 2; do
    log "full size: sluice run --backend $backend (rep $rep)"
    $TIMER "$B/sluice" run $D/products.yaml --set input=$D/scan_master.h5 --backend $backend \
      --out $D/out-$backend --force --quiet 2> $D/time-$backend.txt
    echo "exit $?"; grep -E "Elapsed|Maximum resident" $D/time-$backend.txt
    python3 - $D/out-$backend/report.json <<'P'
import json, sys
r = json.load(open(sys.argv[1]))
print("seconds", round(r["seconds"], 4), "chunks", r["chunks"], "chunk_positions", r["chunk_positions"])
print("peak planned/measured MiB", round(r["memory"]["planned_peak_bytes"] / 2**20, 1), round(r["memory"]["measured_peak_bytes"] / 2**20, 1))
print("plan host/device MiB", round(r["plan"]["memory"]["peak_host_bytes"] / 2**20, 1), round(r["plan"]["memory"]["peak_device_bytes"] / 2**20, 1))
for n in r["nodes"]: print("  %-16s %-18s %8.4f s" % (n["id"], n["type"], n["seconds"]))
P
  done
done
for rt in 1 4 8; do
  log "full size: cuda, SLUICE_READ_THREADS=$rt"
  SLUICE_READ_THREADS=$rt "$B/sluice" run $D/products.yaml --set input=$D/scan_master.h5 --backend cuda \
    --out $D/out-cuda-rt$rt --force --quiet; echo "exit $?"
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print('seconds', round(r['seconds'],4)); [print('  %-16s %8.4f' % (n['id'], n['seconds'])) for n in r['nodes']]" $D/out-cuda-rt$rt/report.json
done
python3 - $D/out-cuda/results.h5 $D/out-cpu/results.h5 <<'P' 2>&1 || echo "(no h5py: compared with h5dump below)"
import sys, h5py, numpy as np
a, b = h5py.File(sys.argv[1]), h5py.File(sys.argv[2])
for k in ("bf", "adf", "df", "com_row", "com_col"):
    print(k, "identical" if a[k][...].tobytes() == b[k][...].tobytes() else "DIFFERENT")
P
for k in bf adf df com_row com_col; do
  if cmp -s <("$B/h5dump" -d $k $D/out-cuda/results.h5 | grep -v '^HDF5 ') <("$B/h5dump" -d $k $D/out-cpu/results.h5 | grep -v '^HDF5 '); then
    echo "$k: cuda == cpu"; else echo "$k: cuda != cpu"; fi
done
log "racecheck on the decode kernel's shared memory (test_cuda_bslz4)"
timeout 150 compute-sanitizer --tool racecheck "$B/test_cuda_bslz4" 2>&1 | tail -6
log "done"
} 2>&1 | tee "$OUTDIR/session.log"
