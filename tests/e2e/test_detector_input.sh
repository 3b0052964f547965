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
check nonsquare --set scan_shape=[4,5] -- --scan 4 5 --detector 16 16 --compress bslz4
check plain -- --scan 6 6 --detector 16 16 --compress none --chunk-frames 3 --frames-per-file 20
check contiguous -- --scan 6 6 --detector 16 16 --compress contiguous --frames-per-file 20
expect 2 "scan_shape" "non-square frame count without scan_shape asks for it" -- \
  "$SLUICE" validate frames.yaml --set input=nonsquare/acq_master.h5
expect 2 "holds 16 positions" "a scan_shape that does not match the frames" -- \
  "$SLUICE" validate frames.yaml --set input=nonsquare/acq_master.h5 --set scan_shape=[4,4]

# Malformed inputs: each a clear error naming what and where, exit 1.
mkdir broken && cp u16/acq_* broken/
expect 1 "data_000001" "missing external file is named" -- bash -c "rm broken/acq_data_000001.h5 && '$SLUICE' run frames.yaml --set input=broken/acq_master.h5 --out broken/out"
[ ! -e broken/out ] && ok "failed run leaves no output" || not_ok "failed run left output"
$PY - u16/acq_data_000001.h5 corrupt.h5 <<'P'
import sys, shutil, h5py
src, dst = sys.argv[1], sys.argv[2]
shutil.copy(src, dst)
with h5py.File(dst, "r") as f:
    d = f["/entry/data/data"]
    off = d.id.get_chunk_info(3).byte_offset
with open(dst, "r+b") as f:  # stored chunk 3: its first block claims more bytes than there are
    f.seek(off + 12); f.write((0x7FFFFFF0).to_bytes(4, "big"))
P
cat > single.yaml <<'Y'
pipeline: single
nodes:
  src: {type: hdf5_source, params: {path: corrupt.h5, scan_shape: [8, 8]}}
  dec: {type: bslz4_decode, inputs: {chunks: src.frames}}
outputs: {frames: dec.frames}
Y
expect 1 "stored chunk 3" "corrupt LZ4 names the stored chunk" -- "$SLUICE" run single.yaml --out corrupt-out
$PY - u16/acq_data_000001.h5 big.h5 <<'P'
import sys, shutil, h5py
src, dst = sys.argv[1], sys.argv[2]
shutil.copy(src, dst)
with h5py.File(dst, "r") as f:
    off = f["/entry/data/data"].id.get_chunk_info(2).byte_offset
with open(dst, "r+b") as f:  # stored chunk 2: its header claims more bytes than a frame holds
    f.seek(off); f.write((10**9).to_bytes(8, "big"))
P
sed 's/corrupt.h5/big.h5/' single.yaml > big.yaml
expect 1 "stored chunk 2" "a chunk header larger than the frame names the stored chunk" -- "$SLUICE" run big.yaml --out big-out
$PY - u16/acq_data_000001.h5 trunc.h5 <<'P'
import sys, shutil, h5py, os
src, dst = sys.argv[1], sys.argv[2]
shutil.copy(src, dst)
with h5py.File(dst, "r") as f:
    info = f["/entry/data/data"].id.get_chunk_info(5)
with open(dst, "r+b") as f:  # cut the file inside stored chunk 5
    f.truncate(info.byte_offset + info.size // 2)
P
sed 's/corrupt.h5/trunc.h5/' single.yaml > trunc.yaml
expect 1 "trunc.h5" "a truncated data file is named" -- "$SLUICE" run trunc.yaml --out trunc-out
[ ! -e trunc-out ] && ok "nothing written after a truncated file" || not_ok "output left after a truncated file"
$PY - u16/acq_data_000001.h5 float.h5 <<'P'
import sys, h5py, numpy as np
with h5py.File(sys.argv[2], "w") as f:
    f.create_dataset("/entry/data/data", data=np.zeros((4, 8, 8), np.float32), chunks=(1, 8, 8))
P
sed 's/corrupt.h5/float.h5/; s/\[8, 8\]/[2, 2]/' single.yaml > float.yaml
expect 1 "float" "wrong dtype is refused" -- "$SLUICE" run float.yaml --out float-out

finish
