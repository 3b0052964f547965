#!/usr/bin/env bash
# A 144 M-frame acquisition (144 data files that declare 1 M frames each but
# store no chunk: bench/make_acquisition --unwritten) is planned from its
# metadata: under a memory limit that cannot hold its chunk index,
# `sluice plan` and `sluice run` refuse it (exit 3) without listing a chunk
# (listing would fail, exit 1: none is stored), in little memory (peak RSS
# asserted under 200 MiB) and quickly (the time is reported, not asserted).
. "$(dirname "$0")/lib.sh"
cd "$WORK"
MAKE="$(dirname "$SLUICE")/bench/make_acquisition"
if [ ! -x "$MAKE" ] || [ ! -e "$PLUGIN_DIR/libh5bshuf.so" ] || [ ! -x /usr/bin/time ]; then
  echo "SKIP: needs bench/make_acquisition (built with sluice), the bitshuffle HDF5 plugin and /usr/bin/time"
  exit 0
fi
export HDF5_PLUGIN_PATH=$PLUGIN_DIR

if "$MAKE" --unwritten "$WORK/big" 12000 12000 16 16 1000000 2 >make.txt 2>&1; then
  ok "make_acquisition --unwritten: 144000000 frames in 144 data files ($(du -sk . | cut -f1) KiB)"
else
  not_ok "make_acquisition --unwritten failed"
  sed 's/^/    /' make.txt
  finish
  exit
fi

# refused CMD ARGS...: exit 3, a budget message, never a listing, RSS < 200 MiB
refused() {
  local cmd=$1
  shift
  /usr/bin/time -f "%e %M" -o time.txt "$SLUICE" "$cmd" "$SRC/pipelines/mean_pattern.yaml" \
    --set input="$WORK/big_master.h5" --memory-limit 2G "$@" >out.txt 2>&1
  local rc=$? secs rss
  read -r secs rss < <(tail -1 time.txt)
  echo "# sluice $cmd: exit $rc in $secs s, peak RSS $rss KiB"
  if [ "$rc" -ne 3 ] || ! grep -q "budget is 2.00 GiB" out.txt || grep -q "stores 0 chunks" out.txt; then
    not_ok "sluice $cmd: exit $rc, expected 3 with a budget message and no listing"
    sed 's/^/    /' out.txt | tail -20
  else
    ok "sluice $cmd refuses 144 M frames under 2 GiB (exit 3, nothing listed)"
  fi
  if [ "$rss" -lt 204800 ]; then
    ok "sluice $cmd: peak RSS $rss KiB < 200 MiB"
  else
    not_ok "sluice $cmd: peak RSS $rss KiB, not under 200 MiB"
  fi
}

refused plan
# The plan counts the index: 144 M entries of the chunk index in the node state.
if grep -qE "node state +6\.[0-9]+ GiB" out.txt; then
  ok "plan counts the chunk index ($(grep -oE 'node state +[0-9.]+ GiB' out.txt | head -1 | tr -s ' '))"
else
  not_ok "plan's node state does not hold the 144 M-entry chunk index"
  grep "node state" out.txt | sed 's/^/    /'
fi
refused run --out "$WORK/out"
if [ -e "$WORK/out" ]; then not_ok "a refused run wrote $WORK/out"; else ok "a refused run writes nothing"; fi
finish
