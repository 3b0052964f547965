#!/usr/bin/env bash
# An encoded stream as a graph output (pipelines/repack.yaml): the
# acquisition's stored chunks are copied into results.h5 as they are, one
# HDF5 chunk each, with the bitshuffle filter. Checked with h5py and the
# official bitshuffle plugin (an independent reader) against the files
# make_dectris.py wrote through that plugin: every frame, every stored
# chunk's bytes, the filter's values, the chunk shape and the attributes;
# then read back by sluice itself (the frames and the mask beside them)
# against the original. Layouts: bitshuffle-LZ4 and bitshuffle without LZ4,
# u8/u16/u32, several data files, chunks of 1 and 4 frames, a non-default
# block size, a last chunk of fewer frames (an HDF5 edge chunk), 1 and 2
# threads and scan chunks that cut stored chunks. Acquisitions whose data
# files end inside a stored chunk are refused, at the plan or at the chunk,
# and leave nothing behind.
. "$(dirname "$0")/lib.sh"
cd "$WORK"
need_h5py_and_plugin

# make NAME ROWS COLS FRAMES_PER_FILE CHUNK DTYPE COMPRESS [BLOCK]
make() {
  $PY "$SRC/tests/data/make_dectris.py" "$1" --scan "$2" "$3" --detector 24 20 --frames-per-file "$4" \
    --chunk-frames "$5" --dtype "$6" --compress "$7" --block-size "${8:-0}" --bad-pixels 3 --seed 7 >/dev/null
}

# check NAME OUTDIR ROWS COLS CHUNK: results.h5's frames and mask against
# the acquisition, read by h5py through the plugin.
check() {
  $PY - "$1_master.h5" "$2/results.h5" "$3" "$4" "$5" <<'P'
import sys, h5py, numpy as np
master, results, rows, cols, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
with h5py.File(master) as m, h5py.File(results) as r:
    parts = [m["/entry/data"][n] for n in sorted(m["/entry/data"]) if n.startswith("data_")]
    ref = np.concatenate([p[...] for p in parts])
    x = r["frames"]
    assert x.shape == ref.shape and x.dtype == ref.dtype, (x.shape, ref.shape, x.dtype, ref.dtype)
    assert x.chunks == (k,) + ref.shape[1:], x.chunks
    assert np.array_equal(x[...], ref), "frames differ"
    # the filter: the same id and stored values (element size, block size, compression)
    fid, _, vals, _ = x.id.get_create_plist().get_filter(0)
    sid, _, svals, _ = parts[0].id.get_create_plist().get_filter(0)
    assert fid == sid == 32008 and tuple(vals[2:5]) == tuple(svals[2:5]), (vals, svals)
    # every stored chunk copied byte for byte, at its place in the scan
    first, n = 0, 0
    for p in parts:
        for c in range(0, p.shape[0], k):
            mask_s, raw_s = p.id.read_direct_chunk((c, 0, 0))
            mask_o, raw_o = x.id.read_direct_chunk((first + c, 0, 0))
            assert raw_s == raw_o and mask_s == mask_o, f"stored chunk at frame {first + c} differs"
            n += 1
        first += p.shape[0]
    assert n == -(-ref.shape[0] // k)
    assert list(x.attrs["scan_shape"]) == [rows, cols], x.attrs["scan_shape"]
    assert x.attrs["scan_axes"] == 1 and x.attrs["encoding"].decode() in ("bslz4", "bitshuffle"), dict(x.attrs)
    pm = m["/entry/instrument/detector/detectorSpecific/pixel_mask"][...]
    assert np.array_equal(r["mask"][...] != 0, pm != 0), "mask differs"
P
}

# sluice reads the repacked file back, the scan's shape from the frames'
# attribute (again from the chunk index's cache in a second run): the corrected, summed pattern (the detector-input chain with
# the mask beside the frames) equals the one of the original acquisition.
cat > pattern.yaml <<Y
pipeline: pattern
params:
  path: {type: path, required: true}
  dataset: {type: string, default: ""}
  mask_file: {type: path, default: ""}
  scan_shape: {type: shape, default: []}
nodes:
  detector:
    use: $SRC/pipelines/templates/detector_input.yaml
    params: {path: "\${path}", dataset: "\${dataset}", scan_shape: "\${scan_shape}", mask_file: "\${mask_file}"}
  s: {type: sum, inputs: {x: detector.frames}}
outputs: {total: s.total}
Y
read_back() {
  "$SLUICE" run pattern.yaml --set path="$1_master.h5" --set scan_shape="[$3,$4]" --out "$2-orig" --quiet &&
    "$SLUICE" run pattern.yaml --set path="$2/results.h5" --set dataset=/frames \
      --set mask_file="$2/results.h5:/mask" --out "$2-back" --json > "$2-back.json" &&
    grep -qF "[$3, $4] (the frames' scan_shape attribute)" "$2-back.json" &&
    "$SLUICE" run pattern.yaml --set path="$2/results.h5" --set dataset=/frames \
      --set mask_file="$2/results.h5:/mask" --out "$2-again" --json > "$2-again.json" &&
    grep -qF "[$3, $4] (the frames' scan_shape attribute)" "$2-again.json" &&
    $PY - "$2-orig/results.h5" "$2-back/results.h5" <<'P'
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as a, h5py.File(sys.argv[2]) as b:
    assert np.array_equal(a["total"][...], b["total"][...])
    assert a["total"][...].sum() > 0
P
}

# name rows cols frames_per_file chunk dtype compress block
for spec in "lz 16 16 100 4 u16 bslz4 0" "bs 12 10 100 1 u32 bitshuffle 256" "edge 15 15 1000 4 u8 bslz4 0"; do
  set -- $spec
  make "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8"
  for threads in 1 2; do
    for chunk in "" 3 8 50; do
      out="$1-t$threads-c${chunk:-auto}"
      if "$SLUICE" run "$SRC/pipelines/repack.yaml" --set input="$1_master.h5" --set scan_shape="[$2,$3]" \
        --threads $threads ${chunk:+--chunk $chunk} --out "$out" --quiet && check "$1" "$out" "$2" "$3" "$5"; then
        ok "$1 ($7 $6, $5-frame chunks, $4 frames per file): $threads thread(s), chunk ${chunk:-auto}: stored chunks copied"
      else
        not_ok "$1: $threads thread(s), chunk ${chunk:-auto}"
      fi
    done
  done
  read_back "$1" "$1-t2-cauto" "$2" "$3" && ok "$1: sluice reads the repacked file as the original" ||
    not_ok "$1: read back differs"
done

# A scan_shape attribute that does not hold the frames is refused, naming it.
$PY - lz-t1-cauto/results.h5 bad.h5 <<'P'
import sys, shutil, h5py
shutil.copy(sys.argv[1], sys.argv[2])
with h5py.File(sys.argv[2], "a") as f:
    f["frames"].attrs["scan_shape"] = [3, 3]
P
expect 2 "scan_shape attribute [3, 3] does not hold its 256 frames" "a wrong scan_shape attribute is refused" -- \
  "$SLUICE" plan pattern.yaml --set path=bad.h5 --set dataset=/frames

# The plan says what the writer does: no write-behind buffer (each stored
# chunk goes to the file as it comes), bytes of the stored chunks.
"$SLUICE" plan "$SRC/pipelines/repack.yaml" --set input=lz_master.h5 --json > plan.json
$PY - plan.json <<'P' && ok "plan: the writer of stored chunks holds no state" || not_ok "plan: writer state"
import json, sys
p = json.load(open(sys.argv[1]))["plan"]
h5 = {n["id"]: n for n in p["nodes"]}["frames.h5"]
assert h5["state_bytes"] == 0 and h5["type"] == "write_h5", h5
assert p["memory"]["output_bytes"] == 0, p["memory"]
P

# Data files of 10 frames in chunks of 4: every file ends in a chunk of 2
# frames inside the scan, which no chunk grid of one dataset holds. The plan
# sees it (the fewest frames a stored chunk holds is not what the scan leaves
# over) and refuses before reading anything.
make mid 16 16 10 4 u16 bslz4
expect 2 "a data file ends in a stored chunk of 2 frames inside the scan" "refused at the plan" -- \
  "$SLUICE" run "$SRC/pipelines/repack.yaml" --set input=mid_master.h5 --out mid-out --quiet
ls -d mid-out* >/dev/null 2>&1 && not_ok "a refused plan left files" || ok "a refused plan leaves nothing"

# 225 frames in files of 101: file 1 ends in a chunk of 1 frame (frame 100),
# as many as the scan's last chunk holds, so only the chunk itself can tell:
# the run stops there, names it, and publishes nothing.
make late 15 15 101 4 u16 bslz4
expect 1 "stored chunk 25 (frames 100-100) is not one of them" "refused at the chunk" -- \
  "$SLUICE" run "$SRC/pipelines/repack.yaml" --set input=late_master.h5 --out late-out --quiet
ls -d late-out* >/dev/null 2>&1 && not_ok "a refused chunk left files" || ok "a refused chunk leaves nothing"
# ... while decoding it is fine
"$SLUICE" run pattern.yaml --set path=late_master.h5 --out late-decoded --quiet && ok "the same acquisition decodes" ||
  not_ok "the acquisition does not decode"

finish
