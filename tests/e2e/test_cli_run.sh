#!/usr/bin/env bash
# Runs, outputs, plans, and the commands that only look.
. "$(dirname "$0")/lib.sh"
cd "$WORK"

expect 0 "sluice" "--version" -- "$SLUICE" --version
expect 0 "exit codes" "--help documents exit codes" -- "$SLUICE" --help
for cmd in run plan validate render nodes devices; do
  expect 0 "usage: sluice $cmd" "$cmd --help" -- "$SLUICE" $cmd --help
done

expect 0 "wrote out1/" "run virtual_image" -- "$SLUICE" run "$SRC/pipelines/synthetic_virtual_image.yaml" --out out1 --set scan_shape=[8,6]
for f in results.h5 bf.png adf.png report.json; do
  [ -s "out1/$f" ] && ok "out1/$f written" || not_ok "out1/$f missing"
done
ls out1 | grep -q tmp && not_ok "temporary files left" || ok "no temporary files left"
if command -v h5dump >/dev/null; then
  expect 0 "8, 6" "bf dataset has the scan shape" -- h5dump -H -d bf out1/results.h5
  expect 0 "unit" "bf dataset has attributes" -- h5dump -A -d bf out1/results.h5
fi
python3 - out1/report.json <<'P' && ok "report.json is complete" || not_ok "report.json incomplete"
import json, sys
r = json.load(open(sys.argv[1]))
for k in ("version", "pipeline", "params", "resolved_pipeline", "nodes", "levels", "memory", "pipeline_files", "outputs"):
    assert k in r, k
assert r["memory"]["measured_peak_bytes"] <= r["memory"]["planned_peak_bytes"]
m = r["memory"]
assert m["measured_engine_host_bytes"] <= m["planned_peak_host_bytes"], m
# the process's growth (the OS's view) is reported beside it
assert m["measured_peak_host_bytes"] >= m["measured_engine_host_bytes"], m
assert m["process_rss_peak_bytes"] - m["process_rss_before_load_bytes"] <= m["measured_peak_host_bytes"], m
assert m["planned_peak_device_bytes"] == 0 and m["measured_peak_device_bytes"] == 0, m
assert 0 < m["process_rss_start_bytes"] <= m["process_rss_peak_bytes"], m
assert r["params"]["scan_shape"] in ("[8, 6]", "- 8\n- 6"), r["params"]["scan_shape"]
assert all("seconds" in n for n in r["nodes"])
assert r["estimated_seconds"] > 0 and abs(r["measured_over_estimated"] * r["estimated_seconds"] - r["seconds"]) < 1e-9 * max(1, r["seconds"])
assert all("measured_over_estimated" in n for n in r["nodes"] if n["estimated_seconds"] > 0)
# each pass's end, from the start of execution: in order, within the run,
# and never before its own levels' time (the waits between levels count)
ends = [q["ends_at_seconds"] for q in r["passes"]]
assert [q["pass"] for q in r["passes"]] == list(range(r["plan"]["passes"])), r["passes"]
assert ends == sorted(ends) and 0 < ends[-1] <= r["seconds"], (ends, r["seconds"])
for q in r["passes"]:
    assert q["ends_at_seconds"] >= sum(l["seconds"] for l in r["levels"] if l["pass"] <= q["pass"]) - 1e-9, q
# what each pass spent between its levels: every part, none negative, and
# together no more than the run's time outside its levels
parts = ("stage_start", "stage_wait", "stage_end", "sync", "identity", "shard_merge")
outside = 0.0
for q in r["passes"]:
    o = q["outside_levels_seconds"]
    assert sorted(o) == sorted(parts) and all(v >= 0 for v in o.values()), o
    outside += sum(o.values())
# ... and outside every pass: setting up and finishing the run
o = r["outside_passes_seconds"]
assert sorted(o) == ["finish", "setup"] and all(v >= 0 for v in o.values()), o
outside += o["setup"] + o["finish"]
assert outside <= r["seconds"] - sum(l["seconds"] for l in r["levels"]) + 1e-9, (outside, r["seconds"])
assert r["pool_allocations"] >= 1, r["pool_allocations"]
P

expect 2 "exists" "existing output directory is kept" -- "$SLUICE" run "$SRC/pipelines/synthetic_virtual_image.yaml" --out out1 --quiet
expect 0 "" "--force replaces it" -- "$SLUICE" run "$SRC/pipelines/synthetic_virtual_image.yaml" --out out1 --force --quiet --set scan_shape=[4,4]
expect 0 "4, 4" "replaced output holds the new run" -- h5dump -H -d bf out1/results.h5
out=$("$SLUICE" run "$SRC/pipelines/synthetic_virtual_image.yaml" --out out2 --quiet 2>&1)
[ -z "$out" ] && ok "--quiet prints nothing" || not_ok "--quiet printed: $out"
expect 0 "\"measured_peak_bytes\"" "--json prints the report" -- "$SLUICE" run "$SRC/pipelines/synthetic_virtual_image.yaml" --out out3 --json

# default output directory
mkdir def && (cd def && "$SLUICE" run "$SRC/pipelines/iterate_affine.yaml" --quiet) && ls def/sluice-out/iterate_affine-*/results.h5 >/dev/null 2>&1 \
  && ok "default output directory sluice-out/<pipeline>-<timestamp>" || not_ok "default output directory"

# plan on every pipeline, as text and as JSON (pipelines that read a file get
# a small sample acquisition written through the bitshuffle plugin)
sample=()
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  /usr/bin/python3 "$SRC/tests/data/make_dectris.py" sample --scan 8 8 --detector 32 32 --frames-per-file 40 >/dev/null \
    && sample=(--set input=sample_master.h5)
fi
for f in "$SRC"/pipelines/*.yaml; do
  name=$(basename "$f")
  args=()
  grep -q "^  input:" "$f" && args=("${sample[@]}")
  if grep -q "^  input:" "$f" && [ ${#args[@]} -eq 0 ]; then echo "SKIP: plan $name needs python3-h5py for a sample"; continue; fi
  expect 0 "peak host" "plan $name" -- "$SLUICE" plan "$f" "${args[@]}"
  "$SLUICE" plan "$f" "${args[@]}" --json | python3 -c 'import json,sys; p=json.load(sys.stdin)["plan"]; assert p["levels"] and p["buffers"] and "peak_host_bytes" in p["memory"]' \
    && ok "plan --json $name" || not_ok "plan --json $name"
  if [ ${#args[@]} -gt 0 ]; then
    expect 0 "wrote" "run $name on the sample" -- "$SLUICE" run "$f" "${args[@]}" --out "run-$name"
  fi
done

expect 0 "ok:" "validate" -- "$SLUICE" validate "$SRC/pipelines/synthetic_virtual_image.yaml"
expect 0 "detector/source" "render expands templates" -- "$SLUICE" render "$SRC/pipelines/synthetic_virtual_image.yaml"
"$SLUICE" render "$SRC/pipelines/synthetic_virtual_image.yaml" --set dose=5 > rendered.yaml
grep -q "dose: 5" rendered.yaml && ok "render shows --set values" || not_ok "render lacks dose: 5"
expect 0 "virtual_image" "nodes lists types" -- "$SLUICE" nodes
expect 0 "radius" "nodes TYPE describes params" -- "$SLUICE" nodes virtual_image
expect 2 "did you mean 'virtual_image'" "nodes suggests" -- "$SLUICE" nodes virtual_imag
"$SLUICE" nodes --json | python3 -c 'import json,sys; d=json.load(sys.stdin); assert any(n["type"]=="sum" for n in d)' \
  && ok "nodes --json" || not_ok "nodes --json"
expect 0 "cpu" "devices" -- "$SLUICE" devices

# The README's first pipeline runs as written.
python3 - "$SRC/README.md" > first.yaml <<'P'
import re, sys
text = open(sys.argv[1]).read()
m = re.search(r"```yaml\n# first.yaml\n(.*?)```", text, re.S)
print(m.group(1), end="")
P
expect 0 "wrote first-out/" "README first pipeline runs" -- "$SLUICE" run first.yaml --set scan=[32,32] --out first-out
expect 0 "32, 32" "README first pipeline output shape" -- h5dump -H -d bf first-out/results.h5

# A progress bar with rate and ETA on a terminal, none otherwise.
if command -v script >/dev/null; then
  script -qec "'$SLUICE' run '$SRC/pipelines/synthetic_virtual_image.yaml' --out tty1 --chunk 16 --set scan_shape=[32,32]" /dev/null > tty.log 2>&1
  grep -q "ETA" tty.log && grep -q "frames/s" tty.log && ok "progress bar on a terminal" || not_ok "no progress bar on a terminal"
  script -qec "'$SLUICE' run '$SRC/pipelines/synthetic_virtual_image.yaml' --out tty2 --chunk 16 --quiet" /dev/null > tty2.log 2>&1
  grep -q "ETA" tty2.log && not_ok "--quiet still drew a progress bar" || ok "--quiet draws no progress bar"
fi
"$SLUICE" run "$SRC/pipelines/synthetic_virtual_image.yaml" --out notty --chunk 16 2> notty.err >/dev/null
grep -q "ETA" notty.err && not_ok "progress bar on a non-terminal" || ok "no progress bar on a non-terminal"

finish
