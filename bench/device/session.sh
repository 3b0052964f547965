#!/usr/bin/env bash
# One device call: the whole test suite on the GPU (run_all.sh), then the
# benchmarks, with everything worth keeping copied into $OUT.
#
#   run(command="bash bench/device/session.sh", carry=["device-bundle"], timeout_s=600)
#   env: TEST_BUDGET (seconds for run_all.sh, default 240), SCAN (full-size
#        scan side, default 512: 512 x 512 frames of 192 x 192 u16 = 18 GiB),
#        SKIP_TESTS, SKIP_KERNEL_BENCH, SKIP_FULL_SIZE, SKIP_REPACK, SKIP_SANITIZERS (=1)
# The shipped pipelines run on CUDA and on the device's CPU against the
# listing pack.sh made on the build machine's CPU (shipped_outputs_device.sh),
# unsplit and split into 2 shards; the full-size products split into 2 and 4
# shards on CUDA against one CUDA run.
set -u
. "$(dirname "$0")/bundle_env.sh"
SCAN=${SCAN:-512}

{
if [ "${SKIP_TESTS:-0}" != 1 ]; then
log "tests"
OUT=$OUTDIR TIME_BUDGET=${TEST_BUDGET:-240} bash "$BUNDLE/run_all.sh" > "$OUTDIR/tests.log" 2>&1
echo "run_all exit $?"; tail -40 "$OUTDIR/summary.txt" 2>/dev/null
fi

if [ -d "$BUNDLE/shipped" ]; then
  log "shipped pipelines: CUDA and this CPU against the build machine's CPU listing (bytes of every output)"
  bash "$BUNDLE/src/bench/device/shipped_outputs_device.sh" "$B" "$BUNDLE/src" "$BUNDLE/shipped" /tmp/shipped-device
  echo "shipped outputs exit $? (idpc differs on CUDA: cuFFT's rounding)"
  log "shipped pipelines split into 2 shards: the same listing"
  RUN_ARGS="--shards 2" bash "$BUNDLE/src/bench/device/shipped_outputs_device.sh" "$B" \
    "$BUNDLE/src" "$BUNDLE/shipped" /tmp/shipped-device-split
  echo "split shipped outputs exit $? (idpc differs on CUDA: cuFFT's rounding)"
else
  log "shipped pipelines: SKIP (the bundle has no shipped/: pack.sh found no h5py)"
fi

if [ "${SKIP_KERNEL_BENCH:-0}" != 1 ]; then
log "bench: CUDA bitshuffle-LZ4 decode kernel"
timeout 120 "$B/bench_cuda_bslz4" 32768 192 5 256
log "bench: CUDA products on resident frames (262144 frames, 18 GiB)"
timeout 120 "$B/bench_cuda_products" 262144
fi

if [ "${SKIP_FULL_SIZE:-0}" != 1 ]; then
log "full size: write a ${SCAN}x${SCAN} scan of 192x192 u16 (bitshuffle-LZ4, Dectris layout)"
D=/tmp/acq; mkdir -p $D
TIMER=""; [ -x /usr/bin/time ] && TIMER="/usr/bin/time -v"
time "$B/make_acquisition" $D/scan $SCAN $SCAN 192 192 1000 16
du -sh $D; cat $D/*.h5 > /dev/null
log "plan (chunk index listing) time"
time "$B/sluice" plan $BUNDLE/src/pipelines/virtual_image.yaml --set input=$D/scan_master.h5 > /dev/null
cat > $D/products.yaml <<Y
pipeline: products
params: {input: {type: path, required: true}}
nodes:
  det: {use: $BUNDLE/src/pipelines/templates/detector_input.yaml, params: {path: "\${input}", mask_policy: none}}
  vd: {type: virtual_detectors, inputs: {frames: det.frames}, params: {radius: 24, center: [96, 96]}}
  com: {type: com, inputs: {s: vd.s, sr: vd.sr, sc: vd.sc}}
outputs: {bf: vd.bf, adf: vd.adf, df: vd.df, com_row: com.com_row, com_col: com.com_col}
Y
# the same with com sweeping the frames itself (its own moments kernel)
sed 's/inputs: {s: vd.s, sr: vd.sr, sc: vd.sc}/inputs: {frames: det.frames}/' $D/products.yaml > $D/products-frames.yaml
cp $BUNDLE/src/bench/device/decode_bf.yaml $D/decode.yaml
# The source's copy/compute overlap: SLUICE_SOURCE_OVERLAP=1 (default: H2D on
# the copy stream into prefetch buffers while the kernels run) against 0 (each
# call copies its window on the main stream).
for ov in 1 0; do
  for rep in 1 2 3 4 5; do
    log "full size: load + decode (+ a BF image, 0.4 ms) --backend cuda, SLUICE_SOURCE_OVERLAP=$ov (rep $rep)"
    SLUICE_SOURCE_OVERLAP=$ov "$B/sluice" run $D/decode.yaml --set input=$D/scan_master.h5 --backend cuda --out $D/out-dec-ov$ov --force --quiet
    python3 -c "import json,sys; r=json.load(open(sys.argv[1])); m=r['memory']; print('seconds', round(r['seconds'],4), 'peak device MiB measured/planned', round(m['measured_peak_bytes']/2**20,1), round(m['planned_peak_bytes']/2**20,1)); [print('  %-8s %8.4f' % (n['id'], n['seconds'])) for n in r['nodes']]" $D/out-dec-ov$ov/report.json
  done
done
report() {
  python3 - "$1" <<'P'
import json, sys
r = json.load(open(sys.argv[1]))
print("seconds", round(r["seconds"], 4), "chunks", r["chunks"], "chunk_positions", r["chunk_positions"])
print("peak planned/measured MiB", round(r["memory"]["planned_peak_bytes"] / 2**20, 1), round(r["memory"]["measured_peak_bytes"] / 2**20, 1))
print("plan host/device MiB", round(r["plan"]["memory"]["peak_host_bytes"] / 2**20, 1), round(r["plan"]["memory"]["peak_device_bytes"] / 2**20, 1))
for n in r["nodes"]: print("  %-16s %-18s %8.4f s" % (n["id"], n["type"], n["seconds"]))
P
}
for ov in 1 0; do
  for rep in 1 2; do
    log "full size: products --backend cuda, SLUICE_SOURCE_OVERLAP=$ov (rep $rep)"
    SLUICE_SOURCE_OVERLAP=$ov $TIMER "$B/sluice" run $D/products.yaml --set input=$D/scan_master.h5 --backend cuda \
      --out $D/out-cuda-ov$ov --force --quiet 2> $D/time-cuda.txt
    echo "exit $?"; grep -E "Elapsed|Maximum resident" $D/time-cuda.txt
    report $D/out-cuda-ov$ov/report.json
  done
done
for rep in 1 2; do
  log "full size: products --backend cuda, SLUICE_CUDA_SYNC=1 (wait at every batch, as before) (rep $rep)"
  SLUICE_CUDA_SYNC=1 "$B/sluice" run $D/products.yaml --set input=$D/scan_master.h5 --backend cuda \
    --out $D/out-cuda-sync --force --quiet; echo "exit $?"
  report $D/out-cuda-sync/report.json
done
for n in 2 4; do
  log "full size: products --backend cuda --shards $n (shard s on GPU s mod the GPUs)"
  "$B/sluice" run $D/products.yaml --set input=$D/scan_master.h5 --backend cuda --shards $n \
    --out $D/out-cuda-split$n --force --quiet; echo "exit $?"
  report $D/out-cuda-split$n/report.json
  python3 -c "import json,sys; [print('  shard %d device %s began %.3f s, execute %.4f s, merges %.4f s' % (s['shard'], s.get('device'), s['began_after_seconds'], s['execute_seconds'], s['merge_seconds'])) for s in json.load(open(sys.argv[1]))['shard_runs']]" $D/out-cuda-split$n/report.json
  for k in bf adf df com_row com_col; do
    if cmp -s <("$B/h5dump" -d $k -A 0 -y $D/out-cuda-ov1/results.h5 | grep -v '^HDF5 ') <("$B/h5dump" -d $k -A 0 -y $D/out-cuda-split$n/results.h5 | grep -v '^HDF5 '); then
      echo "$n shards $k: == one cuda run"; else echo "$n shards $k: != one cuda run"; fi
  done
done
log "full size: products with com from the frames --backend cuda"
"$B/sluice" run $D/products-frames.yaml --set input=$D/scan_master.h5 --backend cuda \
  --out $D/out-cuda-frames --force --quiet; echo "exit $?"
report $D/out-cuda-frames/report.json
log "full size: products --backend cpu (16 cores)"
$TIMER "$B/sluice" run $D/products.yaml --set input=$D/scan_master.h5 --backend cpu --out $D/out-cpu --force --quiet 2> $D/time-cpu.txt
echo "exit $?"; grep -E "Elapsed|Maximum resident" $D/time-cpu.txt
report $D/out-cpu/report.json
# integer products and CoM bit for bit: CUDA (both overlap modes) against CPU
# (h5py where the device has it; else h5dump of the data only)
for ov in 1 0 frames; do
  [ $ov = frames ] && cp -r $D/out-cuda-frames $D/out-cuda-ovframes
  python3 - $D/out-cuda-ov$ov/results.h5 $D/out-cpu/results.h5 $ov <<'P' 2>/dev/null || {
import sys, h5py
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
for k in ("bf", "adf", "df", "com_row", "com_col"):
    same = a[k][...].tobytes() == b[k][...].tobytes()
    print(f"overlap {sys.argv[3]} {k}: cuda {'==' if same else '!='} cpu")
P
    for k in bf adf df com_row com_col; do
      if cmp -s <("$B/h5dump" -d $k -A 0 -y $D/out-cuda-ov$ov/results.h5 | grep -v '^HDF5 ') <("$B/h5dump" -d $k -A 0 -y $D/out-cpu/results.h5 | grep -v '^HDF5 '); then
        echo "overlap $ov $k: cuda == cpu (h5dump)"; else echo "overlap $ov $k: cuda != cpu (h5dump)"; fi
    done
  }
done
fi

if [ "${SKIP_REPACK:-0}" != 1 ]; then
log "repack on CUDA keeps the stored chunks on the host (db3054b): repack_memory.sh"
timeout 240 bash "$BUNDLE/src/bench/device/repack_memory.sh" "$BUNDLE" "$SCAN"
echo "repack_memory exit $?"
fi

if [ "${SKIP_SANITIZERS:-0}" != 1 ]; then
log "compute-sanitizer memcheck and racecheck on test_cuda_source (both overlap modes)"
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
export SLUICE_SOURCE_DIR=$BUNDLE/src
D=${D:-/tmp/acq}; mkdir -p $D
cd $D
timeout 150 "$CS" --tool memcheck --leak-check full "$B/test_cuda_source" 2>&1 | tail -8
timeout 100 "$CS" --tool racecheck "$B/test_cuda_source" 2>&1 | tail -4
timeout 100 "$CS" --tool synccheck "$B/test_cuda_source" 2>&1 | tail -4
log "racecheck on the decode kernel's shared memory (test_cuda_bslz4)"
timeout 150 "$CS" --tool racecheck "$B/test_cuda_bslz4" 2>&1 | tail -4
fi
log "done"
} 2>&1 | tee "$OUTDIR/session.log"
