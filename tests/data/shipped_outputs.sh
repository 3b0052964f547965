#!/usr/bin/env bash
# Runs every shipped pipeline (pipelines/*.yaml) on one small acquisition
# written by the official bitshuffle plugin and prints one line per output
# dataset: pipeline, dataset path, sha256 of its raw bytes. Two builds give
# the same lines exactly when their outputs are bit-identical (refactors are
# checked this way: run it before and after, diff the two listings).
#   bash tests/data/shipped_outputs.sh SLUICE WORKDIR [sluice run options...]
# SHIPPED_SKIP: names of runs to leave out (e.g. "repack").
set -euo pipefail
sluice=$(realpath "$1"); work=$2; shift 2
src=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$work"
if [ ! -e "$work/acq_master.h5" ]; then
  /usr/bin/python3 "$src/tests/data/make_dectris.py" "$work/acq" --scan 24 20 --detector 48 40 \
    --frames-per-file 200 --chunk-frames 4 --dtype u16 --compress bslz4 --seed 7 >/dev/null
fi
run() { # name pipeline args...
  local name=$1 pipe=$2; shift 2
  rm -rf "$work/out_$name"
  "$sluice" run "$src/pipelines/$pipe" --out "$work/out_$name" "$@" >/dev/null 2>"$work/$name.log" ||
    { echo "$name: run failed"; cat "$work/$name.log"; return 1; }
  /usr/bin/python3 - "$work/out_$name/results.h5" "$name" <<'PY'
import hashlib, sys, h5py
f = h5py.File(sys.argv[1], "r")
def visit(name, obj):
    if isinstance(obj, h5py.Dataset):
        print(sys.argv[2], name, obj.dtype.str, obj.shape, hashlib.sha256(obj[()].tobytes()).hexdigest()[:24])
f.visititems(visit)
PY
}
# The runs, shared with bench/device/shipped_outputs_device.sh.
while read -r name pipe args; do
  case "$name" in ''|'#'*) continue ;; esac
  case " ${SHIPPED_SKIP:-} " in *" $name "*) continue ;; esac
  args=${args//@ACQ@/--set input=$work/acq_master.h5 --set scan_shape=[24,20]}
  # shellcheck disable=SC2086 # the arguments are words without spaces
  run "$name" "$pipe" $args "$@" </dev/null
done <"$src/tests/data/shipped_runs.txt"
