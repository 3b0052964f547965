#!/usr/bin/env bash
# Issue 9's "every shipped pipeline gives bit-identical outputs before and
# after", held: bench/output_listing.sh checks every shipped pipeline's
# outputs (1 and 2 threads, a 128 x 128 acquisition made here with a fixed
# seed) against the listing written by the last commit before Engine v2
# (bench/output_listing/pre-engine-v2.txt). Only the changes named in
# pre-engine-v2.known may differ: issue 11's changes of defaults (run with
# the old values there) and idpc's rounding (its values within 1e-12).
. "$(dirname "$0")/lib.sh"
need_h5py_and_plugin
cd "$WORK"
if ! $PY -c 'import numpy' 2>/dev/null; then
  echo "SKIP: needs python3-numpy"
  exit 0
fi
if BENCH_DIR="$WORK/listing" bash "$SRC/bench/output_listing.sh" --check \
  "$SRC/bench/output_listing/pre-engine-v2.txt" "$SLUICE" >check.txt 2>&1; then
  ok "the outputs are the listing's, but for its known changes ($(grep -c ": same" check.txt) runs the same)"
else
  not_ok "the outputs differ from the listing's (bench/output_listing.sh --check exit $?)"
  grep -v ": same" check.txt | sed 's/^/    /' | head -30
fi
finish
