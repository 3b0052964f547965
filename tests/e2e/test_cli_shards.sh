#!/usr/bin/env bash
# `sluice run --shards N` (engine/exec/shard.h): every shipped pipeline
# split into 2 and 3 shards of this process, at chunks of 7 scan positions,
# writes the datasets of one unsplit run bit for bit (their sha256,
# tests/data/shipped_outputs.sh) and the same PNGs, each shard's writer
# nodes writing its own positions into the one results.h5; repack's stored
# chunks (an encoded stream, never held in memory) are the unsplit run's,
# byte for byte; a split CUDA run without a device fails as an unsplit one
# does; one progress bar counts every shard's frames.
. "$(dirname "$0")/lib.sh"
need_h5py_and_plugin
cd "$WORK"
bash "$SRC/tests/data/shipped_outputs.sh" "$SLUICE" "$WORK/one" --chunk 7 >one.txt 2>&1 ||
  { not_ok "the unsplit runs failed"; sed 's/^/    /' one.txt | head -20; finish; }
for n in 2 3; do
  if bash "$SRC/tests/data/shipped_outputs.sh" "$SLUICE" "$WORK/one" --chunk 7 --shards $n \
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
if $PY -c '
import json, sys
r = json.load(open(sys.argv[1]))
assert r["shards"] == 3, r["shards"]
runs = r["shard_runs"]
assert [s["shard"] for s in runs] == [0, 1, 2] and all("device" not in s for s in runs), runs
assert all(0 <= s["merge_seconds"] <= s["execute_seconds"] for s in runs), runs' split-png/report.json; then
  ok "report.json says the run was split into 3 shards, and how each went"
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
assert 0 < m["measured_exchange_bytes"] <= m["planned_exchange_bytes"], m
P
  ok "3 shards: measured host peak <= planned (the shards' plans summed), and the merges' buffers"
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
"$SLUICE" run "$SRC/pipelines/repack.yaml" $ACQ --out repack-one --quiet 2>/dev/null
# shellcheck disable=SC2086
"$SLUICE" run "$SRC/pipelines/repack.yaml" $ACQ --shards 3 --out repack-split --quiet 2>repack-split.err
if $PY - repack-one/results.h5 repack-split/results.h5 <<'P'; then
import h5py, sys
a, b = h5py.File(sys.argv[1], "r")["frames"], h5py.File(sys.argv[2], "r")["frames"]
n = a.id.get_num_chunks()
assert n > 1 and b.id.get_num_chunks() == n, (n, b.id.get_num_chunks())
for i in range(n):
    info = a.id.get_chunk_info(i)
    assert a.id.read_direct_chunk(info.chunk_offset) == b.id.read_direct_chunk(info.chunk_offset), info
# no reduction to merge: only the shards' meetings, within the plan
import json, os
m = json.load(open(os.path.join(os.path.dirname(sys.argv[2]), "report.json")))["memory"]
assert 0 < m["measured_exchange_bytes"] <= m["planned_exchange_bytes"], m
P
  ok "repack in 3 shards: every stored chunk of the unsplit run's results.h5, byte for byte; its meetings within the plan"
else
  not_ok "repack in 3 shards: the stored chunks differ, or its meetings grew past the plan (see the assertion)"
  sed 's/^/    /' repack-split.err | head -5
fi
# On CUDA: the shards on the GPUs in turn, the same datasets as an unsplit
# CUDA run; without a GPU, the same failure as an unsplit CUDA run's.
# shellcheck disable=SC2086
"$SLUICE" run "$SRC/pipelines/stem_products.yaml" $ACQ --chunk 7 --backend cuda --out cuda-one --quiet 2>cuda-one.err
one_rc=$?
# shellcheck disable=SC2086
"$SLUICE" run "$SRC/pipelines/stem_products.yaml" $ACQ --chunk 7 --backend cuda --shards 3 --out cuda-split \
  --quiet 2>cuda-split.err
split_rc=$?
if [ $one_rc != 0 ]; then
  if [ $split_rc = $one_rc ] && cmp -s cuda-one.err cuda-split.err && [ ! -e cuda-split ]; then
    ok "no GPU: 3 shards on CUDA fail as one CUDA run does (exit $one_rc, $(head -c 60 cuda-one.err)...)"
  else
    not_ok "no GPU: the split CUDA run did not fail as the unsplit one (exit $split_rc against $one_rc)"
    sed 's/^/    /' cuda-split.err | head -5
  fi
elif [ $split_rc = 0 ] && $PY - cuda-one/results.h5 cuda-split/results.h5 <<'P'; then
import h5py, sys
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
def datasets(f):
    names = []
    f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    return sorted(names)
names = datasets(a)
assert names and names == datasets(b), (names, datasets(b))
for n in names:
    assert a[n][...].tobytes() == b[n][...].tobytes(), n
P
  ok "3 shards on CUDA: the datasets of one CUDA run, bit for bit"
else
  not_ok "3 shards on CUDA differ from one CUDA run (exit $split_rc)"
  sed 's/^/    /' cuda-split.err | head -5
fi
# One progress bar for the split run on a terminal, counting every shard's
# frames (24 x 20 = 480 of them).
if command -v script >/dev/null; then
  script -qec "'$SLUICE' run '$SRC/pipelines/stem_products.yaml' $ACQ --chunk 7 --shards 3 --out tty-split" \
    /dev/null >tty.log 2>&1
  if grep -q "480/480 frames" tty.log && grep -q "ETA" tty.log; then
    ok "3 shards on a terminal: one progress bar over the whole run's frames"
  else
    not_ok "3 shards on a terminal: no progress bar over the whole run"
    tr '\r' '\n' <tty.log | head -5 | sed 's/^/    /'
  fi
fi
expect 2 "--shards needs a number" "--shards 0: a usage error" -- \
  "$SLUICE" run "$SRC/pipelines/stem_products.yaml" $ACQ --shards 0 --out zero --quiet
finish
