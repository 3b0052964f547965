#!/usr/bin/env bash
# Streamed outputs are written into results.h5 chunk by chunk as the run
# goes (the output sink), so an output larger than the memory budget is
# fine: here 64 MiB of frames under a 16 MiB budget. The values are checked
# against the ramp's closed form with h5py, over chunk sizes that cut the
# scan's rows in every way (partial rows at both ends, whole rows, whole
# planes); a streamed 2-D image is drawn from what results.h5 holds.
. "$(dirname "$0")/lib.sh"
cd "$WORK"
need_h5py_and_plugin

cat > big.yaml <<'Y'
pipeline: big
nodes:
  r: {type: ramp, params: {positions: [4096], item_shape: [4096]}}
outputs: {frames: r.out}
Y
expect 0 "" "a streamed output larger than the budget is written" -- \
  "$SLUICE" run big.yaml --backend cpu --memory-limit 16M --out big --quiet
$PY - big/results.h5 <<'P' && ok "64 MiB streamed output equals the ramp" || not_ok "streamed output differs"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f:
    x = f["frames"][...]
p = np.arange(4096, dtype=np.int64)[:, None] * 4096 + np.arange(4096)[None, :]
assert x.shape == (4096, 4096), x.shape
assert np.array_equal(x, (p & 1023).astype(np.float32))
P
expect 0 "" "plan of the big output fits 16M" -- "$SLUICE" plan big.yaml --memory-limit 16M
# The frames are also a 2-D image (4096 positions of 4096 values): its PNG is
# drawn from results.h5 in row strips, never from the whole image in memory
# (which alone is 64 MiB): the process's peak resident memory stays far below.
$PY - "$SLUICE" <<'P' && ok "the 64 MiB output and its PNG in under 48 MiB of resident memory" || not_ok "the run held the image whole"
import resource, subprocess, sys
subprocess.run([sys.argv[1], "run", "big.yaml", "--backend", "cpu", "--memory-limit", "16M", "--out", "big-rss",
                "--quiet"], check=True)
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
assert peak < 48 << 20, peak
P
[ -s big-rss/frames.png ] && ok "the big image is drawn" || not_ok "no frames.png"

# The plan counts each output's writer nodes like any node: results.h5's
# write-behind buffer (the whole output up to 1 MiB) and the PNG's strip of
# rows read back (1 MiB of rows) plus a strip's bands of deflated rows (and
# per worker zlib's state and a band of rows); no output is assembled in
# memory.
"$SLUICE" plan big.yaml --memory-limit 16M --json > big-plan.json
$PY - big-plan.json <<'P' && ok "plan: writer nodes and their state (closed forms)" || not_ok "plan: writer nodes or their state wrong"
import json, sys
p = json.load(open(sys.argv[1]))["plan"]
nodes = {n["id"]: n for n in p["nodes"]}
h5, png = nodes["frames.h5"], nodes["frames.png"]
assert h5["type"] == "write_h5" and h5["sink"] and h5["host"] and h5["phase"] == "stream", h5
assert h5["state_bytes"] == 1 << 20, h5["state_bytes"]
row = 4096 * 4
strip = (1 << 20) // row * row
assert png["type"] == "write_png" and png["sink"] and png["phase"] == "stream", png
band_rows = 16384 // 4097                       # a band: about 16 KiB of filtered rows
band_in = band_rows * 4097
band_out = (band_in + 5 * (band_in // 16384 + 2) + 16 + 63) // 64 * 64
bands = -(-(strip // row) // band_rows) * (band_out + 64)
assert png["state_bytes"] == strip + bands, png["state_bytes"]
assert png["per_worker_bytes"] == (272 << 10) + (band_in + 63) // 64 * 64, png["per_worker_bytes"]
assert p["memory"]["output_bytes"] == 0, p["memory"]
P
expect 0 "frames.png (write_png)" "plan lists the writer nodes with their memory" -- \
  "$SLUICE" plan big.yaml --memory-limit 16M

# A write that fails (here: past a 8 MiB file size limit) names the output
# and the chunks it held, and leaves nothing: no DIR, no DIR.tmp-PID.
(trap '' XFSZ; ulimit -f 8192; "$SLUICE" run big.yaml --backend cpu --memory-limit 16M --out big-fail --quiet) \
  > fail.log 2>&1
rc=$?
[ $rc -ne 0 ] && [ $rc -lt 128 ] && ok "a failed write exits with an error ($rc)" || not_ok "a failed write: exit $rc"
grep -qE "cannot write chunks? [0-9-]+ \(positions [0-9-]+\) of output 'frames'" fail.log \
  && ok "the error names the output and the chunks" || { not_ok "the error lacks output or chunk"; cat fail.log; }
ls -d big-fail* >/dev/null 2>&1 && not_ok "a failed write left files behind" || ok "a failed write leaves nothing"

# A 3-D scan cut into chunks of every alignment.
cat > scan3.yaml <<'Y'
pipeline: scan3
nodes:
  r: {type: ramp, params: {positions: [5, 6, 7], item_shape: [3], dtype: f64}}
outputs: {cube: r.out}
Y
for chunk in 1 4 7 13 42 50 209 210; do
  expect 0 "" "3-D scan in chunks of $chunk" -- "$SLUICE" run scan3.yaml --chunk $chunk --out c$chunk --quiet
  $PY - c$chunk/results.h5 <<'P' && ok "chunks of $chunk: values" || not_ok "chunks of $chunk: values differ"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f:
    c = f["cube"][...]
    assert f["cube"].attrs["scan_axes"] == 3
p = np.arange(210, dtype=np.int64)[:, None] * 3 + np.arange(3)[None, :]
assert np.array_equal(c.reshape(210, 3), (p & 1023).astype(np.float64))
P
done

# A streamed scan image (virtual_detectors' ADF, one value per position) is
# drawn as a PNG from results.h5, and equals the same image made whole.
cat > adf.yaml <<'Y'
pipeline: adf
nodes:
  src: {type: synthetic_4dstem, params: {scan_shape: [13, 11], detector_shape: [24, 24]}}
  images: {type: virtual_detectors, inputs: {frames: src.frames}, params: {radius: 5, center: [11.5, 11.5]}}
  whole: {type: gather, inputs: {x: images.adf}}
outputs: {adf: images.adf, adf_whole: whole.whole}
Y
expect 0 "" "streamed image in chunks of 5" -- "$SLUICE" run adf.yaml --chunk 5 --out adf --quiet
[ -s adf/adf.png ] && [ -s adf/adf_whole.png ] && ok "streamed image drawn" || not_ok "no adf.png"
cmp -s adf/adf.png adf/adf_whole.png && ok "same PNG as the whole image" || not_ok "PNGs differ"
$PY - adf/results.h5 <<'P' && ok "streamed image equals the whole one" || not_ok "streamed image differs"
import sys, h5py, numpy as np
with h5py.File(sys.argv[1]) as f:
    assert f["adf"].shape == (13, 11)
    assert np.array_equal(f["adf"][...], f["adf_whole"][...])
P
# A streamed image larger than one strip of rows (1200 x 900 f64: 145 rows a
# strip) is drawn from results.h5 strip by strip; the PNG's pixels equal the
# 8-bit scaling of the ramp's closed form (decoded here with zlib), and the
# same image made whole and drawn from memory gives the same file.
cat > strips.yaml <<'Y'
pipeline: strips
nodes:
  r: {type: ramp, params: {positions: [1200], item_shape: [900], dtype: f64}}
  whole: {type: gather, inputs: {x: r.out}}
outputs: {img: r.out, img_whole: whole.whole}
Y
expect 0 "" "a streamed image of several strips in chunks of 77" -- "$SLUICE" run strips.yaml --chunk 77 --out strips --quiet
$PY - strips/img.png <<'P' && ok "PNG pixels equal the scaled closed form" || not_ok "PNG pixels differ"
import sys, zlib, numpy as np
b = open(sys.argv[1], "rb").read()
assert b[:8] == b"\x89PNG\r\n\x1a\n"
pos, idat, hdr = 8, b"", None
while pos < len(b):
    n = int.from_bytes(b[pos:pos + 4], "big"); kind = b[pos + 4:pos + 8]; data = b[pos + 8:pos + 8 + n]
    if kind == b"IHDR": hdr = data
    if kind == b"IDAT": idat += data
    pos += 12 + n
w, h = int.from_bytes(hdr[:4], "big"), int.from_bytes(hdr[4:8], "big")
assert (w, h) == (900, 1200) and hdr[8] == 8 and hdr[9] == 0, hdr
raw = np.frombuffer(zlib.decompress(idat), np.uint8).reshape(h, w + 1)
img = np.zeros((h, w), np.int64)
prev = np.zeros(w, np.int64)
for r in range(h):
    f, x = raw[r, 0], raw[r, 1:].astype(np.int64)
    if f == 1: x = np.cumsum(x) & 255
    elif f == 2: x = (x + prev) & 255
    elif f in (3, 4):
        out = np.zeros(w, np.int64)
        for c in range(w):
            a = out[c - 1] if c else 0; u = prev[c]; ul = prev[c - 1] if c else 0
            if f == 3: pr = (a + u) // 2
            else:
                p = a + u - ul; pa, pb, pc = abs(p - a), abs(p - u), abs(p - ul)
                pr = a if pa <= pb and pa <= pc else (u if pb <= pc else ul)
            out[c] = (x[c] + pr) & 255
        x = out
    img[r] = prev = x
v = ((np.arange(1200)[:, None] * 900 + np.arange(900)[None, :]) & 1023).astype(np.float64)
ref = np.floor((v - 0) * (255.0 / 1023.0) + 0.5).astype(np.int64)
assert np.array_equal(img, ref)
P
cmp -s strips/img.png strips/img_whole.png && ok "drawn in strips = drawn whole" || not_ok "strip PNG differs from the whole one"
finish
