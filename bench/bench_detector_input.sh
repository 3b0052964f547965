#!/usr/bin/env bash
# Detector input benchmark: sluice (source + decode, and source + decode +
# mask + virtual image) against two peers that read the same bitshuffle-LZ4
# file with HDF5 into memory, 256-frame slices at a time (h5py read_direct):
#   - hdf5plugin: h5py + hdf5plugin, the current PyPI releases, in a venv under
#     /tmp that this script makes when missing (a peer, never a product
#     dependency); its bitshuffle filter is built without OpenMP, so one
#     process decodes with one thread and THREADS processes share the files;
#   - Debian: python3-h5py + the bitshuffle package's plugin (HDF5_PLUGIN_PATH).
# Same file, same thread count, page cache warm, in one run: the runs are
# interleaved (sluice, products, each peer, then again) and each figure is the
# median of REPS. Prints decoded GB/s and the ratio of sluice to each peer, for
# every thread count, and sluice's peak memory for two acquisition sizes (it
# must follow the chunk window, not the acquisition). The shipped defaults
# throughout (automatic chunk, detector_input.yaml's median policy).
#
#   bench/bench_detector_input.sh [build/sluice] [SCAN] [THREADS...] [REPS]
#   (SCAN x SCAN frames of 192 x 192 u16; default 128 -> 1.2 GB decoded;
#    THREADS default "1 2", e.g. "1 2" or 1; REPS default 5)
set -euo pipefail
SLUICE=$(realpath "${1:-build/sluice}")
SCAN=${2:-128}
THREADS=${3:-"1 2"}
REPS=${4:-5}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3
DEBIAN_PLUGINS=/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins
VENV=${SLUICE_PEER_VENV:-/tmp/sluice-peer-venv}
DIR=${BENCH_DIR:-/tmp/sluice-bench-detector}
mkdir -p "$DIR"
cd "$DIR"

if [ ! -x "$VENV/bin/python" ] || ! "$VENV/bin/python" -c 'import h5py, hdf5plugin' 2>/dev/null; then
  echo "bench_detector_input: making the peer venv $VENV (pip install h5py hdf5plugin)" >&2
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install -q h5py hdf5plugin numpy >&2
fi

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

# The peers' reader: every frame of the master file's data files into memory,
# 256-frame slices with read_direct, the data files split over THREADS
# processes; prints the seconds of the reads (interpreter start-up excluded).
cat > peer_read.py <<'P'
import sys, time
if sys.argv[3] == "hdf5plugin":
    import hdf5plugin  # noqa: F401  (registers its bitshuffle filter)
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
                n = min(256, d.shape[0] - s)
                d.read_direct(buf, np.s_[s:s + n], np.s_[0:n])  # decode into memory
                tot += n
    return tot
with h5py.File(master, "r") as m:
    names = sorted(k for k in m["/entry/data"] if k.startswith("data_"))
parts = [names[i::threads] for i in range(threads)]
if threads == 1:
    t0 = time.perf_counter()
    read(names)
else:
    with ProcessPoolExecutor(threads) as ex:
        list(ex.map(len, parts))  # workers started before the clock
        t0 = time.perf_counter()
        list(ex.map(read, parts))
print(time.perf_counter() - t0)
P

cat ${BIG}_data_*.h5 ${SMALL}_data_*.h5 > /dev/null # warm the page cache

run_sluice() { # PIPELINE INPUT THREADS -> "io_seconds run_seconds peak planned wall"
  local t0 t1 out="out-$1-$(basename "$2")-$3"
  t0=$(date +%s.%N)
  rm -rf "$out" # this benchmark's own output
  "$SLUICE" run "$1" --set input="$2" --out "$out" --quiet --threads "$3"
  t1=$(date +%s.%N)
  $PY - "$out/report.json" "$t0" "$t1" <<'P'
import json, sys
r = json.load(open(sys.argv[1]))
# seconds of reading + decoding: the source and decode nodes' own time
io = sum(n["seconds"] for n in r["nodes"] if n["type"] in ("hdf5_source", "bslz4_decode"))
# host peak as issue 9 defines it: the engine's buffers and the process's
# RSS growth (measured_peak_bytes is the engine's own tally alone)
m = r["memory"]
print(io, r["seconds"], m["measured_peak_host_bytes"], m["planned_peak_host_bytes"], float(sys.argv[3]) - float(sys.argv[2]))
P
}
peer_hdf5plugin() { env -u HDF5_PLUGIN_PATH "$VENV/bin/python" peer_read.py "$1" "$2" hdf5plugin; }
peer_debian() { HDF5_PLUGIN_PATH=$DEBIAN_PLUGINS $PY peer_read.py "$1" "$2" debian; }

decoded=$($PY -c "print($SCAN*$SCAN*192*192*2)")
echo "detector input: ${SCAN}x${SCAN} scan of 192x192 u16 = $($PY -c "print(f'{$decoded/1e9:.2f}')") GB decoded, bitshuffle-LZ4 (one frame per chunk), warm page cache, median of $REPS interleaved runs"
echo "sluice $("$SLUICE" --version 2>/dev/null | head -1); hdf5plugin $("$VENV/bin/python" -c 'import hdf5plugin, h5py; print(hdf5plugin.version, "+ h5py", h5py.version.version)'); Debian h5py $($PY -c 'import h5py; print(h5py.version.version)'); $(nproc) CPUs; load $(cut -d" " -f1-3 /proc/loadavg)"
for th in $THREADS; do
  rows=$(for _ in $(seq "$REPS"); do
    read -r dec_io _ _ _ dec_wall < <(run_sluice decode.yaml ${BIG}_master.h5 "$th")
    read -r pro_io pro_s pro_peak pro_plan _ < <(run_sluice products.yaml ${BIG}_master.h5 "$th")
    plug=$(peer_hdf5plugin ${BIG}_master.h5 "$th")
    deb=$(peer_debian ${BIG}_master.h5 "$th")
    echo "$dec_io $dec_wall $pro_s $pro_peak $pro_plan $plug $deb"
  done)
  read -r sm_io sm_s sm_peak sm_plan _ < <(run_sluice products.yaml ${SMALL}_master.h5 "$th")
  $PY - "$th" "$decoded" "$sm_peak" "$sm_plan" "$SCAN" <<P
import statistics, sys
th, dec, sm_peak, sm_plan, scan = int(sys.argv[1]), float(sys.argv[2]) / 1e9, float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
rows = [list(map(float, l.split())) for l in """$rows""".strip().splitlines()]
med = [statistics.median(c) for c in zip(*rows)]
dec_io, dec_wall, pro_s, pro_peak, pro_plan, plug, deb = med
print(f"\n{th} thread(s)                                    seconds     GB/s  GB/s/core  vs hdf5plugin  vs Debian")
for name, s in [("h5py + hdf5plugin (PyPI), 256-frame reads", plug),
                ("h5py + Debian bitshuffle plugin, 256-frame reads", deb),
                ("sluice: source + decode (node time)", dec_io),
                ("sluice: source + decode (wall, whole run)", dec_wall),
                ("sluice: source + decode + mask + BF (run)", pro_s)]:
    print(f"{name:48s} {s:7.3f} {dec/s:8.2f} {dec/s/th:10.2f} {plug/s:12.2f}x {deb/s:8.2f}x")
print(f"peak memory (sluice products, measured / planned): {scan//2}x{scan//2} scan ({dec/4:.2f} GB): "
      f"{sm_peak/2**20:.1f} / {sm_plan/2**20:.1f} MiB; {scan}x{scan} scan ({dec:.2f} GB): "
      f"{pro_peak/2**20:.1f} / {pro_plan/2**20:.1f} MiB")
P
done
