#!/usr/bin/env bash
# Fair to a shared machine (issue 11, item 2): the default run of
# pipelines/virtual_image.yaml against the best explicit --threads setting,
# (a) pinned to one CPU (taskset -c 0) and (b) with a competing busy process
# on every CPU the run may use. The default counts the CPUs of the affinity
# mask and cgroup quota and blocks after a bounded spin, so it should be
# within 15% of the best setting in both. Medians of REPS runs, same data,
# same minutes (each setting run once per round, interleaved, after a
# warm-up run of each); prints one table with the ratios.
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

# Wall seconds of one run: [prefix...] sluice run ... [setting].
one_run() { # prefix setting
  local s e
  rm -rf "$DIR/out" # this benchmark's own output
  s=$(date +%s.%N)
  $1 "$SLUICE" run "$SRC/pipelines/virtual_image.yaml" --set input=$ACQ_PATH \
    --out "$DIR/out" --quiet $2 >/dev/null || { echo "bench_cpu_share: run failed" >&2; exit 1; }
  e=$(date +%s.%N)
  echo "$e - $s" | bc -l
}

# The median wall seconds of each setting ("" is the default), one line
# each in order: a discarded warm-up run of every setting first (the busy
# processes and the page cache settle), then REPS rounds that run every
# setting once, interleaved, so that the machine's drift over the minutes
# falls on all of them alike.
time_settings() { # prefix setting...
  local prefix=$1; shift
  local n=$# k r
  local -a times
  for k in $(seq 1 $n); do one_run "$prefix" "${!k}" >/dev/null; done
  for r in $(seq "$REPS"); do
    for k in $(seq 1 $n); do times[$k]+="$(one_run "$prefix" "${!k}") "; done
  done
  for k in $(seq 1 $n); do
    printf '%s\n' ${times[$k]} | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
  done
}
ACQ_PATH=$DIR/${ACQ}_master.h5

row() { # label default best_label best
  printf '%-34s %9.3f s %9.3f s (%s) %8.2f\n' "$1" "$2" "$4" "$3" "$(echo "$2 / $4" | bc -l)"
}

echo "sluice $("$SLUICE" --version 2>/dev/null | head -1); $SCAN x $SCAN frames of 192x192 u16; $NCPU CPUs; median of $REPS"
printf '%-34s %11s %24s %8s\n' "situation" "default" "best --threads" "ratio"

# The default against the best of the explicit settings, from one
# time_settings call: row LABEL PREFIX THREADS...
compare() { # label prefix threads...
  local label=$1 prefix=$2; shift 2
  local -a settings=("") med
  local th d best="" bl="" k=1
  for th in "$@"; do settings+=("--threads $th"); done
  mapfile -t med < <(time_settings "$prefix" "${settings[@]}") || exit 1
  d=${med[0]}
  for th in "$@"; do
    if [ -z "$best" ] || (( $(echo "${med[$k]} < $best" | bc -l) )); then best=${med[$k]}; bl="--threads $th"; fi
    k=$((k + 1))
  done
  row "$label" "$d" "$bl" "$best"
}

# (a) pinned to one CPU
compare "taskset -c 0" "taskset -c 0" 1 2 4

# (b) a busy process on every CPU
busy=()
for _ in $(seq "$NCPU"); do (while :; do :; done) & busy+=($!); done
trap 'kill ${busy[@]} 2>/dev/null || true' EXIT
compare "busy process on each of $NCPU CPUs" "" 1 $NCPU
kill "${busy[@]}" 2>/dev/null || true
