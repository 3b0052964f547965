#!/usr/bin/env bash
# On the accelerator machine (no Python h5py there): every shipped pipeline on
# --backend cuda and on --backend cpu over the acquisition that pack.sh wrote
# with tests/data/shipped_outputs.sh, each output dataset hashed from its raw
# bytes (h5dump -b LE, the bytes h5py's tobytes() gives, then sha256). Both
# listings must equal the one pack.sh made on the build machine's CPU: the
# shipped pipelines are bit-identical on CUDA, on the device's CPU and here.
#
#   bash shipped_outputs_device.sh BIN SRC SHIPPED WORK
#     BIN      the bundle's bin/ (sluice, h5dump, h5ls)
#     SRC      the bundle's src/ (pipelines/)
#     SHIPPED  the bundle's shipped/ (acq_*.h5 and listing_cpu_here.txt)
#     WORK     a scratch folder
#   env RUN_ARGS      more arguments for every run (e.g. "--shards 2")
#   env SHIPPED_SKIP  runs left out, by name (e.g. "repack")
# Prints one line per backend ("cuda: N datasets, identical to the build
# machine's CPU listing" or the diff); exit 0 only when both are identical.
set -u
BIN=$1 SRC=$2 SHIPPED=$3 WORK=$4
mkdir -p "$WORK"

# The runs of tests/data/shipped_outputs.sh (one list: tests/data/shipped_runs.txt).
runs() {
  local name pipe args
  while read -r name pipe args; do
    case "$name" in ''|'#'*) continue ;; esac
    case " ${SHIPPED_SKIP:-} " in *" $name "*) continue ;; esac
    args=${args//@ACQ@/--set input=$SHIPPED/acq_master.h5 --set scan_shape=[24,20]}
    # shellcheck disable=SC2086 # the arguments are words without spaces
    run "$name" "$pipe" $args </dev/null
  done <"$SRC/tests/data/shipped_runs.txt"
}

# One pipeline on $BACKEND; prints "name dataset hash" per output dataset.
run() {
  local name=$1 pipe=$2
  shift 2
  local out="$WORK/$BACKEND/out_$name"
  rm -rf "$out"
  # shellcheck disable=SC2086 # RUN_ARGS: words without spaces
  if ! "$BIN/sluice" run "$SRC/pipelines/$pipe" --out "$out" --backend "$BACKEND" "$@" ${RUN_ARGS:-} >/dev/null \
    2>"$WORK/$BACKEND-$name.log"; then
    echo "$name: run failed: $(tail -n 2 "$WORK/$BACKEND-$name.log" | tr '\n' ' ')"
    return
  fi
  "$BIN/h5ls" -r "$out/results.h5" | awk '$2 == "Dataset" {print $1}' | while read -r ds; do
    rm -f "$WORK/ds.bin"
    "$BIN/h5dump" -d "$ds" -b LE -o "$WORK/ds.bin" "$out/results.h5" >/dev/null 2>&1
    echo "$name ${ds#/} $(sha256sum "$WORK/ds.bin" | cut -c1-24)"
  done
}

awk -v skip=" ${SHIPPED_SKIP:-} " 'index(skip, " " $1 " ") == 0 {print $1, $2, $NF}' "$SHIPPED/listing_cpu_here.txt" |
  sort >"$WORK/expected.txt"
fail=0
for BACKEND in cuda cpu; do
  runs | sort >"$WORK/$BACKEND.txt"
  n=$(wc -l <"$WORK/$BACKEND.txt")
  if [ "$n" -gt 0 ] && cmp -s "$WORK/$BACKEND.txt" "$WORK/expected.txt"; then
    echo "$BACKEND: $n datasets, identical to the build machine's CPU listing"
  else
    echo "$BACKEND: DIFFERS from the build machine's CPU listing:"
    diff "$WORK/expected.txt" "$WORK/$BACKEND.txt" | head -40
    fail=1
  fi
done
exit $fail
