#!/usr/bin/env bash
# An until-loop is estimated by the iterations it ran the last time the same
# pipeline ran (engine/plan/loop_history.h), else by its expect:, else at
# its bound: plan, run, plan again, on pipelines/iterate_until.yaml (with
# expected=0, no expect:, but for the first checks), whose loop x <- x/2 + 1 from
# x = 0 stops after the first step of at most `tolerance`: step k moves x by
# 2^-(k-1), so it stops after 1 + ceil(log2(1/tolerance)) iterations (the
# closed form, computed here independently). Another --set is another
# pipeline; the setting loop_history=false and a corrupt entry count as no
# history. The cache is this test's own (XDG_CACHE_HOME: lib.sh).
. "$(dirname "$0")/lib.sh"
cd "$WORK"
P=$SRC/pipelines/iterate_until.yaml
iters() { $PY -c "import math,sys; t=float(sys.argv[1]); print(1 + math.ceil(math.log2(1 / t)))" "$1"; }
N9=$(iters 1e-9) N3=$(iters 1e-3)

# The shipped pipeline's expect: is its defaults' count; a wrong one is refused at its line.
expect 0 "(estimated at $N9: its expect, never ran)" "never ran: estimated at its expect" -- "$SLUICE" plan "$P"
"$SLUICE" plan "$P" --json > expect.json 2>/dev/null
$PY - expect.json "$N9" <<'PY' && ok "plan JSON: expect $N9, estimated_from_expect" || not_ok "plan JSON of expect"
import json, sys
loop = {n["id"]: n for n in json.load(open(sys.argv[1]))["plan"]["nodes"]}["loop"]
assert loop["estimated_calls"] == int(sys.argv[2]) == loop["expect"], loop
assert loop["estimated_from_expect"] is True and loop["estimated_from_last_run"] is False
PY
expect 2 "expect: of node 'loop' must be an integer from 0 (none) to times (1000), found '1001'" \
  "expect above times" -- "$SLUICE" plan "$P" --set expected=1001
expect 2 "--set expected:1:1: expect: of node 'loop' must be" "a --set's bad expect at the --set" -- \
  "$SLUICE" plan "$P" --set expected=-1
cat > no_until.yaml <<EOF
pipeline: no_until
nodes:
  init: {type: constant, params: {shape: [4], value: 0}}
  loop:
    iterate: $SRC/pipelines/templates/affine_step.yaml
    times: 5
    expect: 3
    inputs: {x: init.out}
    carry: [x]
outputs: {x: loop.x}
EOF
expect 2 "no_until.yaml:7:13: expect: of node 'loop' needs until:" "expect without until, at its line" -- \
  "$SLUICE" plan no_until.yaml
P_ARGS=(--set expected=0)
plan() { "$SLUICE" plan "$P" "${P_ARGS[@]}" "$@"; }
run() { "$SLUICE" run "$P" "${P_ARGS[@]}" "$@"; }
expect 0 "(estimated at the most: never ran)" "never ran, no expect: estimated at its bound" -- plan
expect 0 "" "run" -- run --out o1 --quiet
expect 0 "iterate node 'loop': body planned once, run at most 1000 times, until 'converged' holds (estimated at $N9: its last run)" \
  "after a run: estimated at its $N9 iterations" -- plan
plan --json > plan.json 2>/dev/null
$PY - plan.json "$N9" <<'PY' && ok "plan JSON: estimated_calls $N9, estimated_from_last_run" || not_ok "plan JSON"
import json, sys
nodes = {n["id"]: n for n in json.load(open(sys.argv[1]))["plan"]["nodes"]}
loop = nodes["loop"]
assert loop["estimated_calls"] == int(sys.argv[2]), loop["estimated_calls"]
assert loop["estimated_from_last_run"] is True
assert loop["times"] == 1000
PY
# The estimate follows the iterations: the run's estimate is of 31 iterations, not 1000.
run --out o2 --quiet && $PY - o1/report.json o2/report.json <<'PY' && ok "the second run's estimate is that of its iterations" || not_ok "second run's estimate"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
la = next(n for n in a["nodes"] if n["id"] == "loop")["estimated_seconds"]
lb = next(n for n in b["nodes"] if n["id"] == "loop")["estimated_seconds"]
assert lb < la / 5, (la, lb)  # 1000 iterations estimated before, 31 now (plus fixed costs)
PY
expect 0 "(estimated at the most: never ran)" "another --set is another pipeline" -- \
  plan --set tolerance=1e-3
expect 0 "" "run with tolerance 1e-3" -- run --set tolerance=1e-3 --out o3 --quiet
expect 0 "(estimated at $N3: its last run)" "its own history: $N3 iterations" -- \
  plan --set tolerance=1e-3
expect 0 "(estimated at $N9: its last run)" "the first one's is kept" -- plan
expect 0 "(estimated at the most: never ran)" "setting loop_history=false" -- \
  plan --setting loop_history=false
for f in "$XDG_CACHE_HOME"/sluice/loops/*.txt; do printf 'loop many\n\x01\x02' > "$f"; done
expect 0 "(estimated at the most: never ran)" "a corrupt entry counts as none" -- plan
finish
