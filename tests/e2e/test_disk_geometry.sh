#!/usr/bin/env bash
# Disk geometry from the data (issue 11, item 8): the shipped pipelines fit
# the bright-field disk to the mean of the first frames when no radius is
# given; a given radius wins, with a warning when the data disagree by more
# than 20%. The mean itself (detector_preview) is checked against numpy on
# the frames HDF5 + the bitshuffle plugin return.
. "$(dirname "$0")/lib.sh"
cd "$WORK"
need_h5py_and_plugin

# A 156 x 156 detector: make_dectris.py draws the disk at (78, 78) with radius
# 156 / 8 = 19.5 px (the shipped default used to be 8), moving by 5% of it.
$PY "$SRC/tests/data/make_dectris.py" big --scan 8 8 --detector 156 156 --chunk-frames 4 \
  --frames-per-file 10 --compress bslz4 --seed 3 >/dev/null

# The preview: frames 0..12 across two data files and a partial stored chunk.
expect 0 "" "detector_preview runs" -- "$SLUICE" run "$SRC/tests/data/pipelines/preview.yaml" \
  --set input=big_master.h5 --set frames=13 --out prev --quiet
$PY - big_master.h5 prev/results.h5 <<'P' && ok "preview == numpy mean of the first 13 frames (bad and flagged pixels as 0)" || not_ok "preview differs from numpy"
import sys, h5py, numpy as np
m = h5py.File(sys.argv[1], "r")
frames = np.concatenate([m["/entry/data/data_%06d" % i][...] for i in (1, 2)])[:13].astype(np.float64)
bad = m["/entry/instrument/detector/detectorSpecific/pixel_mask"][...] != 0
frames[:, bad] = 0
frames[frames == 65535] = 0
want = frames.sum(axis=0) / 13
got = h5py.File(sys.argv[2], "r")["pattern"][...]
assert got.shape == want.shape and np.array_equal(got, want), np.abs(got - want).max()
P

# The default: fitted, reported and recorded.
out=$("$SLUICE" run "$SRC/pipelines/virtual_image.yaml" --set input=big_master.h5 --out fit 2>&1)
echo "$out" | grep -q "node 'disk': disk centre" && ok "the fitted disk is reported" || not_ok "no disk reported: $out"
$PY - fit/results.h5 <<'P' && ok "default geometry fitted to the data: radius 19.5 px within 0.5" || not_ok "fitted disk is off"
import sys, h5py
d = h5py.File(sys.argv[1], "r")["disk"][...]
assert abs(d[2] - 19.5) < 0.5 and abs(d[0] - 78) < 1.5 and abs(d[1] - 78) < 1.5, d
P
grep -q '"result: disk centre' fit/report.json && ok "the fit is recorded in report.json" || not_ok "fit not in report.json"

# A given radius wins; far from the data it is a warning, close to it not.
expect 0 "warning: node 'disk': the given disk radius 8 px differs" "a wrong given radius warns" -- \
  "$SLUICE" run "$SRC/pipelines/virtual_image.yaml" --set input=big_master.h5 --set disk_radius=8 --out given --quiet
$PY - given/results.h5 <<'P' && ok "the given radius is used" || not_ok "the given radius was not used"
import sys, h5py
assert h5py.File(sys.argv[1], "r")["disk"][2] == 8
P
out=$("$SLUICE" run "$SRC/pipelines/virtual_image.yaml" --set input=big_master.h5 --set disk_radius=19 --out close --quiet 2>&1)
[ -z "$out" ] && ok "a radius within 20% of the data does not warn" || not_ok "unexpected output: $out"
finish
