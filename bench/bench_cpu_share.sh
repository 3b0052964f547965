#!/usr/bin/env bash
# Fair to a shared machine (issue 11, item 2): the default run of
# pipelines/virtual_image.yaml against the best explicit --threads setting,
# (a) pinned to one CPU (taskset -c 0) and (b) with a competing busy process
# on every CPU the run may use. The default counts the CPUs of the affinity
# mask and cgroup quota and blocks after a bounded spin, so it should be
# within 15% of the best setting in both. Medians of REPS runs, same data,
# same minutes; prints one table with the ratios.
#
#   bench/bench_cpu_share.sh [build/sluice] [SCAN] [REPS]
#   (SCAN x SCAN frames of 192 x 192 u16, default 128; page cache warm)
set -euo pipefail
SLUICE=$(realpath "${1:-build/sluice}")
SCAN=${2:-128}
REPS=${3:-5}
SRC=$(cd "$(dirname "$0")/.." && pwd)
DIR=${BENCH_DIR:-/tmp/sluice-bench-share}
mkdir -p "$DIR"
cd "$DIR"
ACQ=acq$SCAN
[ -e ${ACQ}_master.h5 ] || /usr/bin/python3 "$SRC/tests/data/make_dectris.py" $ACQ --scan $SCAN $SCAN \
  --detector 192 192 --frames-per-file 4096 --dtype u16 --compress bslz4 >/dev/null
cat ${ACQ}_data_*.h5 > /dev/null
NCPU=$(nproc)

# median wall seconds of REPS runs of: [prefix...] sluice run ... [extra args]
time_run() {
  local prefix=$1; shift
  local t=()
  for _ in $(seq "$REPS"); do
    local s e
    rm -rf "$DIR/out" # this benchmark's own output
    s=$(date +%s.%N)
    $prefix "$SLUICE" run "$SRC/pipelines/virtual_image.yaml" --set input=$ACQ_PATH \
      --out "$DIR/out" --quiet "$@" >/dev/null || { echo "bench_cpu_share: run failed" >&2; exit 1; }
    e=$(date +%s.%N)
    t+=("$(echo "$e - $s" | bc -l)")
  done
  printf '%s\n' "${t[@]}" | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}
ACQ_PATH=$DIR/${ACQ}_master.h5

row() { # label default best_label best
  printf '%-34s %9.3f s %9.3f s (%s) %8.2f\n' "$1" "$2" "$4" "$3" "$(echo "$2 / $4" | bc -l)"
}

echo "sluice $("$SLUICE" --version 2>/dev/null | head -1); $SCAN x $SCAN frames of 192x192 u16; $NCPU CPUs; median of $REPS"
printf '%-34s %11s %24s %8s\n' "situation" "default" "best --threads" "ratio"

# (a) pinned to one CPU
d=$(time_run "taskset -c 0") || exit 1
best=""; bl=""
for th in 1 2 4; do
  t=$(time_run "taskset -c 0" --threads $th)
  if [ -z "$best" ] || (( $(echo "$t < $best" | bc -l) )); then best=$t; bl="--threads $th"; fi
done
row "taskset -c 0" "$d" "$bl" "$best"

# (b) a busy process on every CPU
busy=()
for _ in $(seq "$NCPU"); do (while :; do :; done) & busy+=($!); done
trap 'kill ${busy[@]} 2>/dev/null || true' EXIT
d=$(time_run "")
best=""; bl=""
for th in 1 $NCPU; do
  t=$(time_run "" --threads $th)
  if [ -z "$best" ] || (( $(echo "$t < $best" | bc -l) )); then best=$t; bl="--threads $th"; fi
done
row "busy process on each of $NCPU CPUs" "$d" "$bl" "$best"
kill "${busy[@]}" 2>/dev/null || true
