#!/usr/bin/env bash
# pipelines/repack.yaml against what a careful h5py user writes for the same
# job (a Dectris master and its data files into one dataset, nothing decoded):
# a loop of read_direct_chunk / write_direct_chunk over every stored chunk,
# into a dataset made with the same chunks and filter. Same acquisition, same
# run, page cache warm (each side runs once before it is timed); the best of
# REPS wall times each (a shared machine only ever adds time). The two
# results are checked to hold the same stored bytes.
#
#   bash bench/bench_repack.sh SLUICE MASTER [THREADS] [REPS]
# e.g. build/bench/make_acquisition /tmp/a 256 256 192 192 1000 2
#      bash bench/bench_repack.sh build/sluice /tmp/a_master.h5 2 3
set -euo pipefail
SLUICE=$(realpath "$1")
MASTER=$(realpath "$2")
THREADS=${3:-2}
REPS=${4:-3}
SRC=$(cd "$(dirname "$0")/.." && pwd)
PY=/usr/bin/python3
export HDF5_PLUGIN_PATH=${HDF5_PLUGIN_PATH:-/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins}
WORK=$(mktemp -d /tmp/sluice-repack-XXXXXX)
trap 'rm -rf "$WORK"' EXIT

cat >"$WORK/peer.py" <<'P'
import sys, h5py
master, out = sys.argv[1], sys.argv[2]
with h5py.File(master) as m, h5py.File(out, "w") as o:
    parts = [m["/entry/data"][n] for n in sorted(m["/entry/data"]) if n.startswith("data_")]
    n = sum(p.shape[0] for p in parts)
    first = parts[0]
    dcpl = first.id.get_create_plist()
    d = o.create_dataset("frames", shape=(n,) + first.shape[1:], dtype=first.dtype, chunks=first.chunks,
                         compression=32008, compression_opts=tuple(dcpl.get_filter(0)[2][3:5]))
    k, at = first.chunks[0], 0
    for p in parts:
        for c in range(0, p.shape[0], k):
            mask, raw = p.id.read_direct_chunk((c, 0, 0))
            d.id.write_direct_chunk((at + c, 0, 0), raw, mask)
        at += p.shape[0]
P

best() { # best wall seconds of REPS runs of "$@"
  local b="" t t0
  for _ in $(seq "$REPS"); do
    t0=$(date +%s.%N)
    "$@" >/dev/null
    t=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{print b - a}')
    if [ -z "$b" ] || awk -v t="$t" -v b="$b" 'BEGIN{exit !(t < b)}'; then b=$t; fi
  done
  echo "$b"
}
sl() { rm -rf "$WORK/out"; "$SLUICE" run "$SRC/pipelines/repack.yaml" --set input="$MASTER" --threads "$THREADS" --out "$WORK/out" --quiet; }
peer() { rm -f "$WORK/peer.h5"; $PY "$WORK/peer.py" "$MASTER" "$WORK/peer.h5"; }
sl; peer # warm
ts=$(best sl)
tp=$(best peer)
$PY - "$WORK/out/results.h5" "$WORK/peer.h5" <<'P'
import sys, h5py
with h5py.File(sys.argv[1]) as a, h5py.File(sys.argv[2]) as b:
    x, y = a["frames"], b["frames"]
    assert x.shape == y.shape and x.chunks == y.chunks
    k = x.chunks[0]
    for c in range(0, x.shape[0], k):
        assert x.id.read_direct_chunk((c, 0, 0)) == y.id.read_direct_chunk((c, 0, 0)), c
P
bytes=$(du -b "$WORK/out/results.h5" | cut -f1)
printf 'repack %s (%s of stored chunks), %s thread(s): sluice %.3f s, h5py direct chunks %.3f s: %.1fx\n' \
  "$(basename "$MASTER")" "$(numfmt --to=iec "$bytes")" "$THREADS" "$ts" "$tp" "$(awk -v a="$tp" -v b="$ts" 'BEGIN{print a/b}')"
