#!/usr/bin/env bash
# Same bytes from two sluice binaries: every shipped pipeline that reads an
# acquisition (and synthetic_virtual_image), at 1 and 2 threads, run by
# BASE and by NEW on the same data; every dataset of results.h5 compared
# (dtype, shape, values). Attributes are not compared: started_at and the
# provenance (params, timings) differ from run to run. For a change that
# must keep the outputs bit for bit (issue 12's speed work).
#
#   bench/same_outputs.sh BASE_SLUICE NEW_SLUICE MASTER.h5
#   (the acquisition of bench_mask_cost.sh, say; its frame count must be
#    a square or the pipelines' scan_shape default fails)
set -euo pipefail
BASE=$(realpath "$1")
NEW=$(realpath "$2")
INPUT=$(realpath "$3")
SRC=$(cd "$(dirname "$0")/.." && pwd)
DIR=${BENCH_DIR:-/tmp/sluice-same-outputs}
PY=/usr/bin/python3
rm -rf "$DIR/runs" # this script's own output
mkdir -p "$DIR/runs"
status=0
for p in virtual_image stem_products dpc mean_pattern virtual_image_fit resident_products synthetic_virtual_image; do
  set_input=(--set input="$INPUT")
  [ $p = synthetic_virtual_image ] && set_input=()
  for th in 1 2; do
    for which in base new; do
      bin=$BASE
      [ $which = new ] && bin=$NEW
      out="$DIR/runs/$p-$th-$which"
      if ! "$bin" run "$SRC/pipelines/$p.yaml" "${set_input[@]}" --threads $th --out "$out" --quiet \
        >/dev/null 2>"$out.err"; then
        echo "$p, $th thread(s), $which: run failed: $(tail -1 "$out.err")"
        status=1
        continue 2
      fi
    done
    $PY - "$DIR/runs/$p-$th-base/results.h5" "$DIR/runs/$p-$th-new/results.h5" "$p, $th thread(s)" <<'PYEOF' || status=1
import sys, h5py, numpy as np
def datasets(f):
    names = []
    f.visit(lambda n: names.append(n) if isinstance(f[n], h5py.Dataset) else None)
    return sorted(names)
a, b = h5py.File(sys.argv[1], "r"), h5py.File(sys.argv[2], "r")
na, nb = datasets(a), datasets(b)
bad = [n for n in na if n not in nb or a[n].dtype != b[n].dtype or a[n].shape != b[n].shape
       or not np.array_equal(a[n][()], b[n][()])]
if na != nb:
    bad.append("(dataset lists differ)")
print(f"{sys.argv[3]}: {'same' if not bad else 'DIFFERENT: ' + ' '.join(bad)} ({len(na)} datasets)")
sys.exit(1 if bad else 0)
PYEOF
  done
done
exit $status
