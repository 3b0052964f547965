#!/usr/bin/env bash
# sluice calibrate on a tiny budget: it writes a profile into the cache folder
# (XDG_CACHE_HOME, the test's own: lib.sh) with finite positive numbers; plan and run then use it and
# report.json says which profile; a corrupt cache file is ignored with a
# warning; cost_profile=none uses the built-in guesses. No timing is asserted.
. "$(dirname "$0")/lib.sh"
cd "$WORK"
PIPE="$SRC/pipelines/synthetic_virtual_image.yaml"
small=(--set scan_shape=[8,8] --set detector_shape=[32,32])

expect 0 "wrote $WORK/cache/sluice/cpu-" "calibrate on a tiny budget" -- \
  "$SLUICE" calibrate --backend cpu --budget 0.2
profile=$(ls "$WORK"/cache/sluice/cpu-*.json 2>/dev/null | head -1)
if [ -n "$profile" ] && python3 - "$profile" <<'PY'
import json, math, sys
p = json.load(open(sys.argv[1]))
assert p["format"] == "sluice-cost-profile" and p["backend"] == "cpu" and p["threads"] >= 1
for k in ("bytes_per_second", "ops_per_second", "read_bytes_per_second"):
    assert math.isfinite(p[k]) and p[k] > 0, k
for k in ("call_seconds", "batch_seconds", "run_seconds"):
    assert math.isfinite(p[k]) and p[k] >= 0, k
types = {r["type"] for r in p["rates"]}
for t in ("synthetic_4dstem", "virtual_image", "sum", "idpc", "dpc", "com", "iterate"):
    assert t in types, t
# dpc fitting the BF segments' parallax has a rate of its own (parallax.yaml),
# and so has each of its branch rules (stem.yaml and fields.yaml): the ADF
# matched filter's and the iDPC skewness's
for t in ("dpc/f64/parallax", "dpc/f64/adf", "dpc/f64"):
    assert t in types, (t, sorted(types))
for r in p["rates"]:
    assert math.isfinite(r["seconds_per_unit"]) and r["seconds_per_unit"] >= 0, r
    assert math.isfinite(r["call_seconds"]) and r["call_seconds"] >= 0, r
    assert math.isfinite(r["run_seconds"]) and r["run_seconds"] >= 0, r
    assert r["seconds_per_unit"] > 0 or r["call_seconds"] > 0 or r["run_seconds"] > 0, r
PY
then ok "profile has finite positive numbers"; else not_ok "profile numbers"; fi

expect 0 "" "run with the cached profile" -- \
  "$SLUICE" run "$PIPE" "${small[@]}" --out o1 --quiet
if python3 - o1/report.json "$profile" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
assert r["cost_model"]["profile"] == sys.argv[2], r["cost_model"]
assert r["estimated_seconds"] > 0 and r["cost_model"]["created"]
assert all("estimated_seconds" in n and "estimated_calls" in n for n in r["nodes"])
PY
then ok "report.json names the profile"; else not_ok "report.json cost_model"; fi
expect 0 "cost profile: $profile" "sluice plan says which profile" -- \
  "$SLUICE" plan "$PIPE" "${small[@]}" --setting cost_profile="$profile"
# sluice plan --threads N plans as sluice run --threads N: the profile of
# that count from the cache (the one calibrated above, with all CPUs), and
# for another count one derived from it (engine/plan/cost_threads.h), which
# plan and report.json name; with the cache moved away, the guesses and how
# to calibrate.
threads=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["threads"])' "$profile")
expect 0 "cost profile: $profile" "plan --threads finds that count's profile" -- \
  "$SLUICE" plan "$PIPE" "${small[@]}" --threads "$threads"
expect 0 "cost profile: $profile, derived from $threads thread" \
  "plan --threads with no profile of that count derives one from the calibrated count" -- \
  "$SLUICE" plan "$PIPE" "${small[@]}" --threads $((threads + 1))
"$SLUICE" run "$PIPE" "${small[@]}" --threads $((threads + 1)) --out o3 --quiet &&
  python3 - o3/report.json "$threads" <<'PY' && ok "report.json says the profile was derived" || not_ok "derived profile in report.json"
import json, sys
m = json.load(open(sys.argv[1]))["cost_model"]
assert m["derived_from_threads"] == [int(sys.argv[2])], m
PY
# Work a node decided on from the data (dpc's parallax without the probe's
# params, fitted for a weak axis) is estimated once known at the profile's
# parallax rate and added to the node's and the run's estimates.
MAKE="$(dirname "$SLUICE")/bench/make_acquisition"
if [ -x "$MAKE" ] && "$MAKE" acq 64 64 96 96 1000 1 >/dev/null 2>&1; then
  "$SLUICE" run "$SRC/pipelines/stem_products.yaml" --set input=acq_master.h5 --out o4 --quiet &&
    python3 - o4/report.json <<'PY' && ok "a fit decided from the data is in report.json's estimates" || not_ok "decided work's estimate"
import json, os, sys
r = json.load(open(sys.argv[1]))
dpc = [n for n in r["nodes"] if n["type"] == "dpc"][0]
assert any(x.startswith("parallax_for: the axis") for x in dpc["notes"]), dpc["notes"]
d = dpc["estimated_decided_seconds"]
assert d > 0 and dpc["estimated_seconds"] > d, dpc
assert abs(dpc["measured_over_estimated"] * dpc["estimated_seconds"] - dpc["seconds"]) < 1e-9 * max(1, dpc["seconds"])
assert r["estimated_decided_seconds"] == d and r["estimated_seconds"] > d, r["estimated_seconds"]
assert all("estimated_decided_seconds" not in n for n in r["nodes"] if n["type"] != "dpc")
# the fit's state is the plan's decided state: held by the budget, in the
# planned peak once made, and the measured peak within it
m, pm = r["memory"], r["plan"]["memory"]
made = [n for n in r["plan"]["nodes"] if n["type"] == "dpc"][0]["decided_state_bytes"]
assert made > 0 and pm["decided_state_bytes"] == made, pm
assert pm["peak_host_bytes_most"] == pm["peak_host_bytes"] + made, pm
assert m["planned_decided_host_bytes"] == made and m["planned_most_host_bytes"] == pm["peak_host_bytes_most"], m
assert m["planned_peak_host_bytes"] == pm["peak_host_bytes"] + made, m
assert m["measured_engine_host_bytes"] <= m["planned_peak_host_bytes"], m
if not os.environ.get("SLUICE_SANITIZED"):
    assert m["measured_peak_host_bytes"] <= m["planned_peak_host_bytes"], m
PY
  expect 0 "node 'dpc' may add up to" "sluice plan shows the most a decided fit may add" -- \
    "$SLUICE" plan "$SRC/pipelines/stem_products.yaml" --set input=acq_master.h5
else
  echo "# SKIP: the decided work's estimate needs bench/make_acquisition (built with sluice) and the bitshuffle plugin"
fi
mv "$profile" "$profile.away"
expect 0 "cost profile: built-in guesses, see \`sluice calibrate --threads $((threads + 1))\`" \
  "plan --threads with no profile at all says how to make one" -- \
  "$SLUICE" plan "$PIPE" "${small[@]}" --threads $((threads + 1))
mv "$profile.away" "$profile"
expect 0 ", $((threads + 1)) workers (" "plan --threads plans for that many workers" -- \
  "$SLUICE" plan "$PIPE" "${small[@]}" --threads $((threads + 1))

echo '{"format": "sluice-cost-profile", "version": 1, "backend": "cpu"' >"$profile"
expect 0 "cost profile ignored" "a corrupt cache file is ignored with a warning" -- \
  "$SLUICE" run "$PIPE" "${small[@]}" --out o2 --quiet
python3 -c 'import json,sys; assert json.load(open("o2/report.json"))["cost_model"]["profile"] == "built-in"' &&
  ok "the run used the built-in guesses" || not_ok "corrupt profile used"
expect 0 "built-in guesses" "cost_profile=none" -- \
  "$SLUICE" plan "$PIPE" "${small[@]}" --setting cost_profile=none
expect 2 "--budget" "calibrate refuses a bad budget" -- "$SLUICE" calibrate --budget -1

# With an acquisition (--input): the detector runs use the shipped template
# embedded in the binary (detector_input.yaml, written next to calibrate's
# own pipelines), and the detector chain's types get rates.
if $PY -c 'import h5py' 2>/dev/null && $PY "$SRC/tests/data/make_dectris.py" acq --scan 8 8 --detector 48 48 \
     --frames-per-file 32 --bad-pixels 5 >/dev/null 2>&1; then
  rm -rf "$WORK/cache"
  mkdir -p "$WORK/tmp"
  expect 0 "wrote $WORK/cache/sluice/cpu-" "calibrate with an acquisition" -- \
    env TMPDIR="$WORK/tmp" "$SLUICE" calibrate --backend cpu --budget 0.2 --input acq_master.h5
  # calibrate's own folder (its pipelines, the template, the outputs) is gone
  left=$(ls -A "$WORK/tmp")
  [ -z "$left" ] && ok "calibrate leaves nothing in TMPDIR" || not_ok "calibrate left in TMPDIR: $left"
  profile=$(ls "$WORK"/cache/sluice/cpu-*.json 2>/dev/null | head -1)
  if [ -n "$profile" ] && $PY - "$profile" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
types = {r["type"] for r in p["rates"]}
for t in ("hdf5_source", "detector_mask", "bslz4_decode", "mask_correct", "detector_preview", "disk_fit",
          "virtual_detectors", "variance/u16", "write_h5/u16/stored"):
    assert t in types, t
for r in p["rates"]:
    assert r.get("first_call_seconds", 0) >= 0 and r.get("first_call_seconds_per_byte", 0) >= 0, r
    most = r.get("first_call_seconds_most", 0)
    assert most == 0 or (r.get("first_call_seconds_per_byte", 0) > 0 and most >= r.get("first_call_seconds", 0)), r
PY
  then ok "the detector chain's types have rates (variance and stored chunks among them)"; else not_ok "detector rates"; fi
  # data files of 10 frames in chunks of 4 cannot be copied as stored
  # chunks: calibrate says so and calibrates the rest
  $PY "$SRC/tests/data/make_dectris.py" odd --scan 8 8 --detector 48 48 --frames-per-file 10 --chunk-frames 4 \
    >/dev/null 2>&1
  expect 0 "no samples of stored chunks written from odd_master.h5" "calibrate skips the stored chunks it cannot copy" -- \
    "$SLUICE" calibrate --backend cpu --budget 0.2 --out "$WORK/odd.json" --input odd_master.h5
  # the most acquisitions it takes: four (each two runs beside its own pipelines' eleven)
  expect 0 "wrote $WORK/four.json" "calibrate with four acquisitions" -- \
    "$SLUICE" calibrate --backend cpu --budget 0.2 --out "$WORK/four.json" \
    --input acq_master.h5 --input acq_master.h5 --input acq_master.h5 --input acq_master.h5
  expect 2 "--input" "a fifth is refused" -- \
    "$SLUICE" calibrate --backend cpu --budget 0.2 --out "$WORK/five.json" \
    --input acq_master.h5 --input acq_master.h5 --input acq_master.h5 --input acq_master.h5 --input acq_master.h5
else
  echo "SKIP: calibrate --input needs python3-h5py for a sample acquisition"
fi
finish
