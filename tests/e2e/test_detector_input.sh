#!/usr/bin/env bash
# Detector input against the official bitshuffle HDF5 plugin: files written by
# h5py through the plugin (tests/data/make_dectris.py), frames decoded by sluice
# must equal what HDF5 + plugin return, bit for bit.
. "$(dirname "$0")/lib.sh"
cd "$WORK"
need_h5py_and_plugin

cat > frames.yaml <<'Y'
pipeline: frames
params:
  input: {type: path, required: true}
  scan_shape: {type: shape, default: []}
nodes:
  src: {type: hdf5_source, params: {path: "${input}", scan_shape: "${scan_shape}"}}
  dec: {type: bslz4_decode, inputs: {chunks: src.frames}}
outputs: {frames: dec.frames}
Y

# compare RESULTS MASTER: sluice's frames == h5py's frames read through the plugin
compare() {
  $PY - "$1" "$2" <<'P'
import sys, glob, h5py, numpy as np
res, master = sys.argv[1], sys.argv[2]
got = h5py.File(res, "r")["frames"][...]
with h5py.File(master, "r") as m:
    names = sorted(k for k in m["/entry/data"].keys() if k.startswith("data_"))
    ref = np.concatenate([m["/entry/data/" + k][...] for k in names]) if names else m["/entry/data/data"][...]
got = got.reshape(ref.shape)
assert got.dtype == ref.dtype, (got.dtype, ref.dtype)
assert np.array_equal(got, ref), "frames differ"
P
}

check() { # NAME SLUICE-ARGS... -- GENERATOR-ARGS...
  local name=$1; shift
  local sargs=() gargs=()
  while [ "$1" != "--" ]; do sargs+=("$1"); shift; done
  shift
  gargs=("$@")
  $PY "$SRC/tests/data/make_dectris.py" "$name/acq" "${gargs[@]}" >/dev/null 2>&1 || { mkdir -p "$name" && $PY "$SRC/tests/data/make_dectris.py" "$name/acq" "${gargs[@]}" >/dev/null; }
  if "$SLUICE" run frames.yaml --set input="$name/acq_master.h5" --out "$name/out" --quiet "${sargs[@]}" \
     && compare "$name/out/results.h5" "$name/acq_master.h5"; then
    ok "$name: sluice frames == HDF5 + plugin"
  else
    not_ok "$name: frames differ or the run failed"
  fi
}

mkdir -p u16 u8 u32 odd block chunks4 files nonsquare plain contiguous
check u16 --chunk 7 -- --scan 8 8 --detector 32 32 --frames-per-file 100 --dtype u16 --compress bslz4
check u8 -- --scan 6 6 --detector 24 24 --dtype u8 --compress bslz4
check u32 -- --scan 6 6 --detector 24 24 --dtype u32 --compress bslz4
check odd --chunk 5 -- --scan 5 5 --detector 37 41 --dtype u16 --compress bslz4
check block -- --scan 6 6 --detector 32 32 --dtype u16 --compress bslz4 --block-size 256
check chunks4 --chunk 9 -- --scan 8 8 --detector 24 24 --chunk-frames 4 --frames-per-file 30 --compress bslz4
check files --chunk 3 -- --scan 8 8 --detector 16 16 --frames-per-file 10 --compress bslz4
# Provenance: report.json lists the master and every data file once, with
# their sizes (the master is not listed twice, data files are not missing).
if $PY - files <<'P'
import json, os, sys, glob
d = sys.argv[1]
listed = json.load(open(f"{d}/out/report.json"))["input_files"]
paths = [os.path.realpath(e["path"]) for e in listed]
want = sorted(os.path.realpath(p) for p in glob.glob(f"{d}/acq_*.h5"))
assert sorted(paths) == want and len(paths) == len(set(paths)), (paths, want)
assert all(e["bytes"] == os.path.getsize(e["path"]) and e["mtime"] > 0 for e in listed)
assert len(want) > 2  # a master and several data files
P
then ok "report.json input_files: master and every data file, once each"
else not_ok "report.json input_files incomplete or repeated"; fi
