#!/usr/bin/env bash
# `sluice run --shards N` (engine/exec/shard.h): every shipped pipeline but
# repack split into 2 and 3 shards of this process, at chunks of 7 scan
# positions, writes the datasets of one unsplit run bit for bit (their
# sha256, tests/data/shipped_outputs.sh) and the same PNGs; repack, whose
# output is an encoded stream only a writer node writes, is refused with a
# clear error, and so are shards on a device backend.
. "$(dirname "$0")/lib.sh"
need_h5py_and_plugin
cd "$WORK"
SHIPPED_SKIP=repack bash "$SRC/tests/data/shipped_outputs.sh" "$SLUICE" "$WORK/one" --chunk 7 >one.txt 2>&1 ||
  { not_ok "the unsplit runs failed"; sed 's/^/    /' one.txt | head -20; finish; }
for n in 2 3; do
  if SHIPPED_SKIP=repack bash "$SRC/tests/data/shipped_outputs.sh" "$SLUICE" "$WORK/one" --chunk 7 --shards $n \
    >split$n.txt 2>&1 && diff one.txt split$n.txt >diff$n.txt; then
    ok "$n shards: the $(wc -l <one.txt) datasets of the unsplit runs, bit for bit"
  else
    not_ok "$n shards: the datasets differ from the unsplit runs'"
    sed 's/^/    /' diff$n.txt split$n.txt | head -20
  fi
done
ACQ="--set input=$WORK/one/acq_master.h5 --set scan_shape=[24,20]"
# shellcheck disable=SC2086 # ACQ's words have no spaces
"$SLUICE" run "$SRC/pipelines/stem_products.yaml" $ACQ --chunk 7 --out one-png --quiet 2>/dev/null
# shellcheck disable=SC2086
"$SLUICE" run "$SRC/pipelines/stem_products.yaml" $ACQ --chunk 7 --shards 3 --out split-png --quiet 2>/dev/null
same=1
for f in one-png/*.png; do cmp -s "$f" "split-png/$(basename "$f")" || same=0; done
if [ "$same" = 1 ] && ls one-png/*.png >/dev/null 2>&1; then ok "3 shards: the same PNGs"; else not_ok "3 shards: the PNGs differ"; fi
if $PY -c 'import json, sys; r = json.load(open(sys.argv[1])); assert r["shards"] == 3, r["shards"]' split-png/report.json; then
  ok "report.json says the run was split into 3 shards"
else
  not_ok "report.json lacks shards: 3"
fi
# the whole process's memory: every shard's plan summed against what the
# process measured (its growth, or what the shards' engines counted; under
# AddressSanitizer, whose shadow memory no plan counts, the engines' bytes
# only, as test_memory_plan.sh does)
if $PY - split-png/report.json <<'P'; then
import json, os, sys
m = json.load(open(sys.argv[1]))["memory"]
measured = m["measured_engine_host_bytes" if os.environ.get("SLUICE_SANITIZED") else "measured_peak_host_bytes"]
assert 0 < measured <= m["planned_peak_host_bytes"], m
P
  ok "3 shards: measured host peak <= planned (the shards' plans summed)"
else
  not_ok "3 shards: measured host peak above planned"
fi
# shellcheck disable=SC2086
expect 0 "shards' merge" "sluice plan --shards 3: one shard's plan, with the merge's memory" -- \
  "$SLUICE" plan "$SRC/pipelines/stem_products.yaml" $ACQ --shards 3
# shellcheck disable=SC2086
if "$SLUICE" plan "$SRC/pipelines/stem_products.yaml" $ACQ --shards 3 --json | $PY -c '
import json, sys
m = json.load(sys.stdin)["plan"]["memory"]
assert m["shards"] == 3 and m["shard_exchange_bytes"] > 0, m'; then
  ok "sluice plan --shards 3 --json: memory.shards and shard_exchange_bytes"
else
  not_ok "sluice plan --shards 3 --json lacks the shards"
fi
# shellcheck disable=SC2086
expect 2 "run this one unsplit" "repack split into shards: refused, naming the output" -- \
  "$SLUICE" run "$SRC/pipelines/repack.yaml" $ACQ --shards 2 --out repack-split --quiet
[ -e repack-split ] && not_ok "the refused run left repack-split behind" || ok "the refused run left no directory"
expect 2 "CPU backend" "shards on a device backend: refused" -- \
  "$SLUICE" run "$SRC/pipelines/stem_products.yaml" $ACQ --shards 2 --backend cuda --out cuda-split --quiet
expect 2 "--shards needs a number" "--shards 0: a usage error" -- \
  "$SLUICE" run "$SRC/pipelines/stem_products.yaml" $ACQ --shards 0 --out zero --quiet
finish
