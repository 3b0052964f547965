#!/usr/bin/env bash
# Nothing lost, nothing half-written: --force replaces only a directory sluice
# wrote (it holds a .sluice-output marker), an output location that cannot be
# written fails before any data is read, and a run stopped by SIGTERM or
# SIGINT leaves the previous output untouched and no DIR.tmp-PID behind.
. "$(dirname "$0")/lib.sh"
cd "$WORK"
PIPE="$SRC/pipelines/synthetic_virtual_image.yaml"
small=(--set scan_shape=[8,8] --set detector_shape=[32,32])

# --force on something sluice did not write: refused, exit 2, left as it was.
mkdir mine && echo "precious" > mine/notes.txt
expect 2 "not a directory sluice wrote" "--force refuses a user directory" -- \
  "$SLUICE" run "$PIPE" "${small[@]}" --out mine --force --quiet
if [ "$(cat mine/notes.txt)" = precious ] && [ "$(ls -A mine)" = notes.txt ]; then ok "user directory untouched"
else not_ok "user directory changed"; fi
echo "data" > afile
expect 2 "not a directory sluice wrote" "--force refuses a file" -- \
  "$SLUICE" run "$PIPE" "${small[@]}" --out afile --force --quiet
[ "$(cat afile)" = data ] && ok "file untouched" || not_ok "file changed"

# A sluice output is replaced with --force, and carries the marker.
expect 0 "" "first run writes an output" -- "$SLUICE" run "$PIPE" "${small[@]}" --out prev --quiet
[ -f prev/.sluice-output ] && ok "output holds the marker" || not_ok "no marker in the output"
expect 2 "exists" "an existing output needs --force" -- "$SLUICE" run "$PIPE" "${small[@]}" --out prev --quiet
expect 0 "" "--force replaces a sluice output" -- "$SLUICE" run "$PIPE" "${small[@]}" --out prev --force --quiet

# An output location that cannot be created fails before the computation: the
# error names the location (this run would simulate 4 M frames, minutes of
# work, if it got that far).
big=(--set scan_shape=[2048,2048] --set detector_shape=[64,64])
expect 1 "cannot create" "unwritable location fails early" -- \
  "$SLUICE" run "$PIPE" "${big[@]}" --out afile/sub/out --quiet
ls -d afile.tmp-* afile/sub* >/dev/null 2>&1 && not_ok "left something behind" || ok "nothing left behind"

# Stopped by a signal while running: exit 130, says so, previous output intact.
before=$(cat prev/report.json | md5sum)
long=(--set scan_shape=[256,256] --set detector_shape=[128,128])
for sig in TERM INT; do
  "$SLUICE" run "$PIPE" "${long[@]}" --out prev --force --quiet 2>err_$sig.txt &
  pid=$!
  sleep 1
  kill -$sig $pid
  wait $pid
  rc=$?
  if [ $rc -eq 130 ]; then ok "SIG$sig: exit 130"; else not_ok "SIG$sig: exit $rc, expected 130"; cat err_$sig.txt; fi
  grep -q "interrupted" err_$sig.txt && ok "SIG$sig: says it was interrupted" || not_ok "SIG$sig: no message"
  [ "$(cat prev/report.json | md5sum)" = "$before" ] && ok "SIG$sig: previous output untouched" ||
    not_ok "SIG$sig: previous output changed"
  ls -d prev.tmp-* prev.old-* >/dev/null 2>&1 && not_ok "SIG$sig: temporary left behind" ||
    ok "SIG$sig: no temporary left behind"
done
finish
