#!/usr/bin/env bash
# One device call after session.sh (or alone, on a fresh machine): the cost
# model against the clock on CUDA and on the device machine's CPU, each
# calibrating first (bench_cost_model.sh: the test acquisition and a SCAN x
# SCAN one), then issue 12's targets on the dense full-size file
# (shipped_full_size.sh). Everything goes to $OUT.
#
#   run(command="bash bench/device/cost_and_targets.sh", carry=["device-bundle"], timeout_s=600)
#   env: SCAN (cost model's bigger acquisition, default 256), REPS (default 3),
#        FULL (full-size scan side, default 512; 0: skip), FULL_REPS (default 3),
#        SKIP_CPU=1 (no CPU cost model), BACKEND (the device backend, default
#        cuda; cpu for a smoke test of this script on a machine without one)
set -u
. "$(dirname "$0")/bundle_env.sh"
{
log "device: $(nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null)"
log "cost model, ${BACKEND:-cuda} (calibrate, then the test file and ${SCAN:-256} x ${SCAN:-256})"
timeout 250 bash "$BUNDLE/src/bench/bench_cost_model.sh" --backend "${BACKEND:-cuda}" --sluice "$B/sluice" \
  --make-acquisition "$B/make_acquisition" --work /tmp/cost-cuda --scan "${SCAN:-256}" --reps "${REPS:-3}"
echo "cost model ${BACKEND:-cuda} exit $?"
if [ "${SKIP_CPU:-0}" != 1 ]; then
  log "cost model, this machine's CPU"
  timeout 150 bash "$BUNDLE/src/bench/bench_cost_model.sh" --backend cpu --sluice "$B/sluice" \
    --make-acquisition "$B/make_acquisition" --work /tmp/cost-cpu --scan "${SCAN:-256}" --reps "${REPS:-3}"
  echo "cost model cpu exit $?"
fi
if [ "${FULL:-512}" != 0 ]; then
  log "issue 12's targets on the dense file (shipped defaults)"
  timeout 290 bash "$BUNDLE/src/bench/device/shipped_full_size.sh" "$BUNDLE" "${FULL:-512}" "${FULL_REPS:-3}"
  echo "shipped_full_size exit $?"
fi
log "done"
} 2>&1 | tee "$OUTDIR/cost_and_targets.log"
