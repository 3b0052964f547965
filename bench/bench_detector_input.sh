#!/usr/bin/env bash
# Detector input benchmark: sluice (source + decode, and source + decode +
# mask + virtual image) against HDF5 + the official bitshuffle plugin (h5py),
# on the same bitshuffle-LZ4 file, same thread count, page cache warm, in one
# run. Prints decoded GB/s for each and the ratio, and sluice's peak memory for
# two acquisition sizes (it must follow the chunk window, not the acquisition).
#
#   bench/bench_detector_input.sh [build/sluice] [SCAN] [THREADS]
#   (SCAN x SCAN frames of 192 x 192 u16; default 128 -> 1.2 GB decoded)
set -euo pipefail
SLUICE=$(realpath "${1:-build/sluice}")
SCAN=${2:-128}
THREADS=${3:-1}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3
export HDF5_PLUGIN_PATH=/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins
DIR=${BENCH_DIR:-/tmp/sluice-bench-detector}
mkdir -p "$DIR"
cd "$DIR"

make_acq() { # NAME SCAN
  [ -e "$1_master.h5" ] || $PY "$SRC/tests/data/make_dectris.py" "$1" --scan "$2" "$2" --detector 192 192 \
    --frames-per-file 1000 --dtype u16 --compress bslz4 >/dev/null
}
BIG=acq$SCAN SMALL=acq$((SCAN / 2))
make_acq $BIG "$SCAN"
make_acq $SMALL $((SCAN / 2))

cat > decode.yaml <<'Y'
pipeline: decode
params: {input: {type: path, required: true}}
nodes:
  src: {type: hdf5_source, params: {path: "${input}"}}
  dec: {type: bslz4_decode, inputs: {chunks: src.frames}}
  bf: {type: virtual_image, inputs: {frames: dec.frames}, params: {kind: bf, radius: 24}}
outputs: {bf: bf.image}
Y
cat > products.yaml <<'Y'
pipeline: products
params: {input: {type: path, required: true}}
nodes:
  det: {use: SRC/pipelines/templates/detector_input.yaml, params: {path: "${input}"}}
  bf: {type: virtual_image, inputs: {frames: det.frames}, params: {kind: bf, radius: 24}}
outputs: {bf: bf.image}
Y
sed -i "s#SRC/#$SRC/#" products.yaml

cat ${BIG}_data_*.h5 ${SMALL}_data_*.h5 > /dev/null # warm the page cache

run_sluice() { # PIPELINE INPUT -> "seconds peak_bytes wall"
  local t0 t1
  t0=$(date +%s.%N)
  rm -rf "out-$1-$(basename "$2")" # this benchmark's own output
  "$SLUICE" run "$1" --set input="$2" --out "out-$1-$(basename "$2")" --quiet --threads "$THREADS"
  t1=$(date +%s.%N)
  $PY - "out-$1-$(basename "$2")/report.json" "$t0" "$t1" <<'P'
import json, sys
r = json.load(open(sys.argv[1]))
# seconds of reading + decoding: the source and decode nodes' own time
io = sum(n["seconds"] for n in r["nodes"] if n["type"] in ("hdf5_source", "bslz4_decode"))
print(io, r["seconds"], r["memory"]["measured_peak_bytes"], r["memory"]["planned_peak_bytes"], float(sys.argv[3]) - float(sys.argv[2]))
P
}

decoded=$($PY -c "print($SCAN*$SCAN*192*192*2)")
best() { # repeat 3 times, keep the fastest line (by first field)
  for i in 1 2 3; do "$@"; done | sort -g | head -1
}
read -r dec_s dec_total dec_peak dec_plan dec_wall < <(best run_sluice decode.yaml ${BIG}_master.h5)
read -r pro_io pro_s pro_peak pro_plan pro_wall < <(best run_sluice products.yaml ${BIG}_master.h5)
read -r sm_io sm_s sm_peak sm_plan sm_wall < <(best run_sluice products.yaml ${SMALL}_master.h5)

h5_s=$($PY - ${BIG}_master.h5 "$THREADS" <<'P'
import sys, time, os
from concurrent.futures import ProcessPoolExecutor
import h5py, numpy as np
master, threads = sys.argv[1], int(sys.argv[2])
def read(names):
    with h5py.File(master, "r") as m:
        tot = 0
        for k in names:
            d = m["/entry/data/" + k]
            buf = np.empty((256,) + d.shape[1:], d.dtype)
            for s in range(0, d.shape[0], 256):
                k = min(256, d.shape[0] - s)
                d.read_direct(buf, np.s_[s:s + k], np.s_[0:k])  # decode into memory
                tot += k
    return tot
with h5py.File(master, "r") as m:
    names = sorted(k for k in m["/entry/data"] if k.startswith("data_"))
parts = [names[i::threads] for i in range(threads)]
best = 1e9
for rep in range(3):
    t0 = time.perf_counter()
    if threads == 1:
        read(names)
    else:
        with ProcessPoolExecutor(threads) as ex:
            list(ex.map(read, parts))
    best = min(best, time.perf_counter() - t0)
print(best)
P
)
$PY - <<P
dec = $decoded / 1e9
rows = [
  ("HDF5 + bitshuffle plugin (h5py read_direct)", $h5_s),
  ("sluice: source + decode (node time)", $dec_s),
  ("sluice: source + decode + mask + BF (run)", $pro_s),
]
print(f"detector input: {$SCAN}x{$SCAN} scan of 192x192 u16 = {dec:.2f} GB decoded, bitshuffle-LZ4, {$THREADS} thread(s), warm page cache, best of 3")
print(f"{'':46s} {'seconds':>9s} {'GB/s':>8s} {'GB/s/core':>10s} {'vs HDF5':>8s}")
for name, s in rows:
    print(f"{name:46s} {s:9.3f} {dec/s:8.2f} {dec/s/$THREADS:10.2f} {$h5_s/s:8.2f}x")
print(f"sluice wall time incl. start-up and chunk index: decode {$dec_wall:.3f} s, products {$pro_wall:.3f} s")
print("peak memory (sluice products, measured / planned):")
print(f"  {$SCAN//2}x{$SCAN//2} scan ({dec/4:.2f} GB): {$sm_peak/2**20:.1f} MiB / {$sm_plan/2**20:.1f} MiB")
print(f"  {$SCAN}x{$SCAN} scan ({dec:.2f} GB): {$pro_peak/2**20:.1f} MiB / {$pro_plan/2**20:.1f} MiB")
P
