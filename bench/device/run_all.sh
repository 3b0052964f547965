#!/usr/bin/env bash
# Run THERE (the accelerator machine), from a bundle made here by
# bench/device/pack.sh. Needs no package: only the bundle, bash, coreutils,
# the NVIDIA driver, and (optionally) nvidia-smi and compute-sanitizer.
#
#   bash device-bundle/run_all.sh
#   env: OUT (where the summary and logs go; the device machine sets it;
#        default ./device-logs), TIME_BUDGET (seconds for the whole script,
#        default 540: later steps are skipped, and say so, past it),
#        TEST_TIMEOUT (seconds per test binary, default 240)
#
# Steps: nvidia-smi; sluice --version / devices (the CUDA line must say
# available); a CLI run of a host-node pipeline on --backend cuda; every unit
# test binary with SLUICE_TEST_BACKEND=cuda (test_cuda_backend must not skip
# its device tests: that counts as a failure here); the fuzz corpus
# replayers; the end-to-end CLI scripts; compute-sanitizer memcheck (leak
# check on) over test_cuda_backend. Every step runs even when an earlier one
# failed. At the end a summary (PASS/FAIL/SKIP per step, the device-memory
# lines of the leak checks); exit 0 only when nothing failed.
#
# $OUT receives: summary.txt, run_all.log (everything printed), logs.tar.gz
# (one log per step).
set -u
BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
OUTDIR=${OUT:-$PWD/device-logs}
TIME_BUDGET=${TIME_BUDGET:-540}
TEST_TIMEOUT=${TEST_TIMEOUT:-240}
START=$(date +%s)
mkdir -p "$OUTDIR"
LOGS=$(mktemp -d /tmp/sluice-device-XXXXXX)
WORK=$LOGS/work
mkdir -p "$LOGS/steps" "$WORK"
exec > >(tee "$LOGS/run_all.log") 2>&1

# The binaries travel as one xz archive (pack.sh); unpack it next to the logs.
ROOT=$BUNDLE
if [ ! -d "$ROOT/bin" ] && [ -f "$BUNDLE/bundle.tar.xz" ]; then
  ROOT=$LOGS/bundle
  mkdir -p "$ROOT"
  if command -v xz >/dev/null; then
    tar -C "$ROOT" -xJf "$BUNDLE/bundle.tar.xz"
  else
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
      "$BUNDLE/bundle.tar.xz" "$ROOT"
  fi || echo "run_all: cannot unpack $BUNDLE/bundle.tar.xz"
fi
export PATH="$ROOT/bin:$PATH"
export LD_LIBRARY_PATH="$ROOT/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export HDF5_PLUGIN_PATH="$ROOT/plugins"
export SLUICE_SOURCE_DIR="$ROOT/src"
export CMOCKA_MESSAGE_OUTPUT=stdout
BIN=$ROOT/bin
SRC=$ROOT/src
SLUICE=$BIN/sluice

RESULTS=()      # "STATUS name detail"
N_PASS=0 N_FAIL=0 N_SKIP=0
record() { # STATUS NAME DETAIL
  RESULTS+=("$(printf '%-4s %-40s %s' "$1" "$2" "$3")")
  case $1 in PASS) N_PASS=$((N_PASS + 1)) ;; FAIL) N_FAIL=$((N_FAIL + 1)) ;; *) N_SKIP=$((N_SKIP + 1)) ;; esac
  echo "==> $1 $2 $3"
}
elapsed() { echo $(($(date +%s) - START)); }
over_budget() { [ "$(elapsed)" -ge "$TIME_BUDGET" ]; }
# run_step NAME TIMEOUT -- command...: logs to steps/NAME.log, returns the exit code
run_step() {
  local name=$1 limit=$2
  shift 3
  local log="$LOGS/steps/$name.log"
  echo "---- $name: $*" | tee "$log" >/dev/null
  echo "---- $name"
  ( cd "$WORK" && timeout --kill-after=10 "$limit" "$@" ) >>"$log" 2>&1
  local rc=$?
  tail -n 15 "$log" | sed 's/^/    /'
  return $rc
}
rc_detail() { # RC
  case $1 in 0) echo "" ;; 124 | 137) echo "timed out" ;; *) echo "exit $1" ;; esac
}

echo "sluice device run: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n), bundle $BUNDLE"
[ -f "$BUNDLE/manifest.txt" ] && sed 's/^/  /' "$BUNDLE/manifest.txt" | head -5
[ -x "$SLUICE" ] || { echo "run_all: no $SLUICE: run bench/device/pack.sh first and carry the bundle"; exit 2; }

# ---- the machine
if command -v nvidia-smi >/dev/null; then
  run_step nvidia-smi 60 -- nvidia-smi
  rc=$?
  nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv >>"$LOGS/steps/nvidia-smi.log" 2>&1
  [ $rc -eq 0 ] && record PASS nvidia-smi "" || record FAIL nvidia-smi "$(rc_detail $rc)"
else
  record SKIP nvidia-smi "not on PATH"
fi

# ---- the binary and its backends
run_step version 30 -- "$SLUICE" --version
rc=$?
[ $rc -eq 0 ] && record PASS "sluice --version" "" || record FAIL "sluice --version" "$(rc_detail $rc) (missing library? see steps/version.log)"
run_step devices 60 -- "$SLUICE" devices
rc=$?
cuda_line=$(grep -m1 '^cuda' "$LOGS/steps/devices.log" || true)
if [ $rc -eq 0 ] && grep -q '^cuda  *available' <<<"$cuda_line"; then
  record PASS "sluice devices" "${cuda_line#cuda }"
else
  record FAIL "sluice devices" "$(rc_detail $rc) ${cuda_line:-no cuda line}"
fi
"$SLUICE" devices --json >"$LOGS/steps/devices.json" 2>&1

# ---- a CLI run on the CUDA backend (host nodes only: staged through pinned memory)
cat >"$WORK/host_chain.yaml" <<'Y'
pipeline: host_chain
nodes:
  r: {type: ramp, params: {positions: [64, 48], item_shape: [256], dtype: f64}}
  a: {type: affine, inputs: {x: r.out}, params: {scale: 3, offset: 0.25}}
outputs: {y: a.y}
Y
run_step cli-run-cuda 120 -- "$SLUICE" run host_chain.yaml --backend cuda --chunk 100 --out cli-cuda --force
rc=$?
if [ $rc -eq 0 ] && grep -q '"cuda"' "$WORK/cli-cuda/report.json" 2>/dev/null; then
  record PASS "sluice run --backend cuda" ""
else
  record FAIL "sluice run --backend cuda" "$(rc_detail $rc)$([ $rc -eq 0 ] && echo ' report.json does not name cuda')"
fi
cp "$WORK/cli-cuda/report.json" "$LOGS/steps/cli-run-cuda.report.json" 2>/dev/null
run_step cli-run-iterate 120 -- "$SLUICE" run "$SRC/pipelines/iterate_affine.yaml" --backend cuda --out cli-iter --force
rc=$?
[ $rc -eq 0 ] && record PASS "run iterate_affine --backend cuda" "" ||
  record FAIL "run iterate_affine --backend cuda" "$(rc_detail $rc): $(grep -m1 'error' "$LOGS/steps/cli-run-iterate.log")"

# ---- unit tests (test_cuda_backend first: it is the one that matters here)
tests=()
[ -x "$BIN/test_cuda_backend" ] && tests+=("$BIN/test_cuda_backend")
for t in "$BIN"/test_*; do
  [ -x "$t" ] && [ "$(basename "$t")" != test_cuda_backend ] && tests+=("$t")
done
for t in "${tests[@]}"; do
  name=$(basename "$t")
  if over_budget; then record SKIP "unit $name" "time budget ($TIME_BUDGET s) spent"; continue; fi
  SLUICE_TEST_BACKEND=cuda run_step "$name" "$TEST_TIMEOUT" -- "$t"
  rc=$?
  log="$LOGS/steps/$name.log"
  if [ $rc -ne 0 ]; then
    record FAIL "unit $name" "$(rc_detail $rc); $(grep -m1 -E '\[  FAILED  \]|ERROR|error' "$log")"
  elif [ "$name" = test_cuda_backend ] && grep -q 'SKIP: device tests' "$log"; then
    record FAIL "unit $name" "device tests skipped on the device machine: $(grep -m1 'SKIP: device tests' "$log")"
  else
    skipped=$(grep -c '^\[  SKIPPED \] test' "$log")
    record PASS "unit $name" "$([ "$skipped" -gt 0 ] && echo "$skipped skipped")"
  fi
done

# ---- fuzz corpus replayers
for r in "$BIN"/*_replay; do
  [ -x "$r" ] || continue
  name=$(basename "$r")
  target=${name%_replay}
  corpus="$SRC/tests/fuzz/corpus/$target"
  if over_budget; then record SKIP "fuzz $target" "time budget spent"; continue; fi
  if [ ! -d "$corpus" ]; then record SKIP "fuzz $target" "no corpus $corpus"; continue; fi
  run_step "$name" 120 -- "$r" "$corpus"
  rc=$?
  [ $rc -eq 0 ] && record PASS "fuzz $target" "" || record FAIL "fuzz $target" "$(rc_detail $rc)"
done

# ---- end-to-end CLI scripts (they pick the backend with auto: CUDA here)
have_h5py=0
/usr/bin/python3 -c 'import h5py, numpy' 2>/dev/null && have_h5py=1
for s in "$SRC"/tests/e2e/test_*.sh; do
  [ -f "$s" ] || continue
  name=$(basename "$s" .sh)
  if over_budget; then record SKIP "e2e $name" "time budget spent"; continue; fi
  run_step "e2e-$name" 180 -- bash "$s" "$SLUICE" "$SRC"
  rc=$?
  log="$LOGS/steps/e2e-$name.log"
  nok=$(grep -c '^not ok' "$log")
  if [ $rc -eq 0 ] && [ "$nok" -eq 0 ]; then
    record PASS "e2e $name" "$(grep -c '^ok' "$log") ok"
  elif [ $have_h5py -eq 0 ] && grep -q 'python3' "$s"; then
    record SKIP "e2e $name" "$(rc_detail $rc), $nok not ok; /usr/bin/python3 lacks h5py/numpy here (see log)"
  else
    record FAIL "e2e $name" "$(rc_detail $rc), $nok not ok: $(grep -m1 '^not ok' "$log")"
  fi
done

# ---- compute-sanitizer memcheck over the CUDA backend's tests (small)
CS=$(command -v compute-sanitizer || true)
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [ -z "$CS" ] && [ -x "$c" ] && CS=$c
done
if [ -z "$CS" ]; then
  record SKIP "compute-sanitizer memcheck" "compute-sanitizer not found"
elif [ ! -x "$BIN/test_cuda_backend" ]; then
  record SKIP "compute-sanitizer memcheck" "no test_cuda_backend in the bundle"
elif over_budget; then
  record SKIP "compute-sanitizer memcheck" "time budget spent"
else
  # The deliberate device fault and bad launch of the tests are not bugs:
  # the fault test is skipped and API errors are not reported.
  SLUICE_CUDA_TEST_NO_FAULT=1 run_step compute-sanitizer 300 -- "$CS" --tool memcheck --leak-check full \
    --report-api-errors no --error-exitcode 86 "$BIN/test_cuda_backend"
  rc=$?
  log="$LOGS/steps/compute-sanitizer.log"
  summary=$(grep -m1 'ERROR SUMMARY' "$log")
  if grep -qE 'Device not supported|Target application terminated before first instrumented API call' "$log"; then
    record SKIP "compute-sanitizer memcheck" "the sanitizer cannot instrument this device/runtime (gVisor?): $(grep -m1 -E 'Device not supported|terminated' "$log")"
  elif [ $rc -eq 0 ]; then
    record PASS "compute-sanitizer memcheck" "$summary"
  else
    record FAIL "compute-sanitizer memcheck" "$(rc_detail $rc) ${summary}"
  fi
fi

# ---- summary
{
  echo "sluice device run summary ($(date -u +%Y-%m-%dT%H:%M:%SZ), $(elapsed) s)"
  [ -f "$BUNDLE/manifest.txt" ] && sed -n '2,5p' "$BUNDLE/manifest.txt"
  echo "device: $(grep -m1 '^cuda' "$LOGS/steps/devices.log" 2>/dev/null || echo unknown)"
  if [ -f "$LOGS/steps/nvidia-smi.log" ]; then
    echo "nvidia-smi: $(tail -n 1 "$LOGS/steps/nvidia-smi.log")"
  fi
  echo
  for r in "${RESULTS[@]}"; do echo "$r"; done
  echo
  echo "leak checks (device memory in use, cudaMemGetInfo):"
  if grep -q 'device memory in use' "$LOGS/steps/test_cuda_backend.log" 2>/dev/null; then
    grep -h 'device memory in use' "$LOGS/steps/test_cuda_backend.log" | sed 's/^/  /'
  else
    echo "  (none: test_cuda_backend did not run its device tests)"
  fi
  grep -h -E 'launch failure reported as|device fault reported as|cuda probe:' \
    "$LOGS/steps/test_cuda_backend.log" 2>/dev/null | sed 's/^/  /'
  echo
  echo "passed $N_PASS, failed $N_FAIL, skipped $N_SKIP"
} >"$LOGS/summary.txt"
echo
cat "$LOGS/summary.txt"

cp "$LOGS/summary.txt" "$OUTDIR/summary.txt"
tar -czf "$OUTDIR/logs.tar.gz" -C "$LOGS" steps summary.txt 2>/dev/null
rm -rf "$LOGS/bundle"
# the console log last, once everything above is in it
sleep 1
cp "$LOGS/run_all.log" "$OUTDIR/run_all.log"
echo "logs: $OUTDIR (summary.txt, run_all.log, logs.tar.gz)"
[ "$N_FAIL" -eq 0 ]
