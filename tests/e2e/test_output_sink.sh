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
finish
