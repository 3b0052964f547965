#!/usr/bin/env bash
# Every error class gives a clear message with its place and the right exit code.
. "$(dirname "$0")/lib.sh"
cd "$WORK"

cat > malformed.yaml <<'Y'
pipeline: bad
nodes:
  a: {type: ramp
outputs: {y: a.out}
Y
expect 2 "malformed.yaml:4" "malformed YAML names file:line" -- "$SLUICE" validate malformed.yaml

cat > unknown_type.yaml <<'Y'
pipeline: t
nodes:
  r: {type: rampp}
outputs: {y: r.out}
Y
expect 2 "did you mean 'ramp'" "unknown node type suggests" -- "$SLUICE" validate unknown_type.yaml
expect 2 "unknown_type.yaml:3" "unknown node type has a location" -- "$SLUICE" plan unknown_type.yaml

cat > unknown_param.yaml <<'Y'
pipeline: t
nodes:
  r: {type: ramp, params: {positionz: [4]}}
outputs: {y: r.out}
Y
expect 2 "did you mean 'positions'" "unknown param suggests" -- "$SLUICE" run unknown_param.yaml --out o1

cat > unknown_port.yaml <<'Y'
pipeline: t
nodes:
  r: {type: ramp}
  a: {type: affine, inputs: {x: r.ot}}
outputs: {y: a.y}
Y
expect 2 "did you mean 'out'" "unknown port suggests" -- "$SLUICE" validate unknown_port.yaml

cat > mismatch.yaml <<'Y'
pipeline: t
nodes:
  c: {type: constant, params: {shape: [4]}}
  s: {type: sum, inputs: {x: c.out}}
outputs: {y: s.total}
Y
expect 2 "must be streamed" "type mismatch" -- "$SLUICE" validate mismatch.yaml

cat > cycle.yaml <<'Y'
pipeline: t
nodes:
  a: {type: affine, inputs: {x: b.y}}
  b: {type: affine, inputs: {x: a.y}}
outputs: {y: b.y}
Y
expect 2 "cycle" "cycle" -- "$SLUICE" validate cycle.yaml

cat > missing_template.yaml <<'Y'
pipeline: t
nodes:
  d: {use: templates/nowhere.yaml}
outputs: {y: d.frames}
Y
expect 2 "missing_template.yaml:3" "missing template names the use line" -- "$SLUICE" validate missing_template.yaml

cat > self.yaml <<'Y'
pipeline: self
nodes:
  d: {use: self.yaml}
outputs: {y: d.y}
Y
expect 2 "self.yaml" "template recursion" -- "$SLUICE" validate self.yaml

cat > req.yaml <<'Y'
pipeline: t
params:
  n: {type: int, required: true, doc: "how many"}
nodes:
  r: {type: ramp, params: {positions: ["${n}"]}}
outputs: {y: r.out}
Y
expect 2 "--set" "required param says how to set it" -- "$SLUICE" validate req.yaml
expect 0 "ok" "required param given with --set" -- "$SLUICE" validate req.yaml --set n=4
expect 2 "no parameter 'm'" "unknown --set name" -- "$SLUICE" validate req.yaml --set m=4

expect 2 "unknown option" "unknown option" -- "$SLUICE" run req.yaml --bogus
expect 2 "unknown command" "unknown command" -- "$SLUICE" frobnicate
expect 2 "invalid size" "bad memory limit" -- "$SLUICE" plan req.yaml --set n=4 --memory-limit lots
if "$SLUICE" devices | grep -q "^cuda  *available"; then
  echo "SKIP: a CUDA device is present: --backend cuda runs (no fallback to check)"
else
  expect 1 "cuda" "no silent fallback to CPU" -- "$SLUICE" run req.yaml --set n=4 --backend cuda --out o2
  [ ! -e o2 ] && ok "failed run leaves no output directory" || not_ok "failed run left o2"
fi

# Over budget: exit 3 before anything is allocated or written. (A whole
# output must fit in memory; a streamed one goes to results.h5 chunk by
# chunk: test_output_sink.sh.)
cat > big.yaml <<'Y'
pipeline: big
nodes:
  r: {type: ramp, params: {positions: [4096], item_shape: [4096]}}
  g: {type: gather, inputs: {x: r.out}}
outputs: {frames: g.whole}
Y
expect 3 "budget" "over budget exits 3" -- "$SLUICE" run big.yaml --backend cpu --memory-limit 16M --out o3
[ ! -e o3 ] && ok "over budget writes nothing" || not_ok "over budget left o3"
expect 3 "assembled outputs" "plan over budget prints the estimate and exits 3" -- "$SLUICE" plan big.yaml --memory-limit 16M

# A bad value given with --set is reported at the --set, even when a
# template passes it on to the node that refuses it.
expect 2 "--set dose:" "a refused --set value is located at the --set" -- \
  "$SLUICE" plan "$SRC/pipelines/synthetic_virtual_image.yaml" --set dose=-5
expect 2 "--set scan_shape:" "an overflowing --set shape is located at the --set" -- \
  "$SLUICE" plan "$SRC/pipelines/synthetic_virtual_image.yaml" --set "scan_shape=[4611686018427387913,64]"

# Run-time settings: checked before anything runs, from the environment or
# --setting (which wins), and recorded in report.json.
expect 2 "setting simd=avx9 (from --setting)" "a bad --setting is refused" -- \
  "$SLUICE" plan "$SRC/pipelines/iterate_affine.yaml" --setting simd=avx9
expect 2 "did you mean 'simd'" "an unknown --setting suggests" -- \
  "$SLUICE" plan "$SRC/pipelines/iterate_affine.yaml" --setting smid=scalar
expect 2 "(from SLUICE_READ_THREADS)" "a bad environment setting is refused" -- \
  env SLUICE_READ_THREADS=many "$SLUICE" settings
expect 0 "scalar" "sluice settings shows a --setting" -- "$SLUICE" settings --setting simd=scalar
SLUICE_H5_INDEX=api "$SLUICE" run "$SRC/pipelines/iterate_affine.yaml" --setting simd=scalar --out settings-out --quiet
python3 - settings-out/report.json <<'P' && ok "report.json records the settings and where they came from" || not_ok "settings missing from report.json"
import json, sys
s = json.load(open(sys.argv[1]))["settings"]
assert s["simd"] == {"value": "scalar", "from": "--setting"}, s["simd"]
assert s["h5_index"] == {"value": "api", "from": "SLUICE_H5_INDEX"}, s["h5_index"]
assert s["read_threads"]["from"] == "default", s["read_threads"]
P


# The writer nodes are the run's own: a pipeline that places one is refused
# at its line, naming what to do instead.
cat > writer.yaml <<'Y'
pipeline: writer
nodes:
  r: {type: ramp, params: {positions: [4], item_shape: [3]}}
  w: {type: write_h5, inputs: {image: r.out}, params: {output: x}}
outputs: {x: r.out}
Y
expect 2 "writer.yaml:4" "a write_h5 placed by hand is refused at its line" -- "$SLUICE" plan writer.yaml
expect 2 "name the port under \`outputs:\` instead" "and says to name the output" -- "$SLUICE" run writer.yaml --out w-out
[ ! -e w-out ] && ok "nothing written for it" || not_ok "w-out was written"

finish
