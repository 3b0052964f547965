#!/usr/bin/env bash
# A listing of the outputs of every shipped pipeline, written once from one
# sluice binary and checked later against another (issue 9, "Engine v2":
# every shipped pipeline gives bit-identical outputs before and after).
#
#   bench/output_listing.sh --write LISTING SLUICE [PIPELINES_DIR]
#   bench/output_listing.sh --check LISTING SLUICE [PIPELINES_DIR]
#
# Both modes make the same acquisition (tests/data/make_dectris.py of this
# checkout, seed 1: 128 x 128 frames of 192 x 192 u16, bitshuffle-LZ4, 73
# pixels flagged in the pixel mask and stored at 65535, as
# bench_mask_cost.sh makes it), then run each pipeline of PIPELINES_DIR
# (default: this checkout's pipelines/; give an old commit's pipelines/ with
# its binary) with its shipped defaults at 1 and 2 threads (--set input= for
# those that have an input param). For each run, every dataset of
# results.h5 is listed: dtype, shape and the SHA-256 of its raw bytes
# (attributes are not: started_at and the provenance differ between runs).
# The listing also holds the SHA-256 of the acquisition's datasets (the
# master's and every frame, decoded), so that a check on other data is
# refused instead of reported as different outputs.
#
# --write writes LISTING: a first comment line (the binary's commit where
# SLUICE lies in a git work tree, its date, the date written and this
# command), then one line per dataset: PIPELINE THREADS DATASET DTYPE SHAPE
# SHA256, and for a floating-point dataset VALUES: its sum and 64 of its
# values (evenly spaced in its flat order), comma-separated, for a known
# change within rounding (below).
# --check runs the pipelines that both LISTING and PIPELINES_DIR have and
# prints for each pipeline and thread count 'same' or the datasets that
# differ (dtype, shape or bytes); datasets and pipelines on one side only
# are reported as added or removed, and are no failure.
# A check reads LISTING's known changes, LISTING with .known for .txt where
# that file exists: changes made on purpose since the listing was written,
# each line one of
#   set PIPELINE NAME=VALUE REASON...   run PIPELINE with --set NAME=VALUE
#                                       (the old default, where a default
#                                       changed on purpose)
#   differs PIPELINE DATASET REASON...  the dataset may differ ("*": every
#                                       dataset of the pipeline)
#   close PIPELINE DATASET RTOL REASON... its bytes may differ, its listed
#                                       values not by more than RTOL times
#                                       its largest magnitude (the sum: n
#                                       times that)
# ('#' starts a comment line). A difference it names is printed as known,
# with its reason, and is no failure; an entry that no longer matches a
# difference is printed as stale.
# Exit: 0 no difference, 1 a dataset present on both sides differs or a run
# failed, 2 usage, or the acquisition is not the listing's.
#
# Needs /usr/bin/python3 with h5py and numpy and the bitshuffle HDF5 plugin
# (Debian: python3-h5py, python3-numpy, bitshuffle; make deps). Works in
# BENCH_DIR (default /tmp/sluice-output-listing), which it replaces; about
# 15-17 s on the 2-core dev VM (10 s of it making the acquisition).
set -euo pipefail
usage() {
  echo "usage: bench/output_listing.sh --write|--check LISTING SLUICE [PIPELINES_DIR]" >&2
  exit 2
}
if [ $# -lt 3 ] || [ $# -gt 4 ]; then usage; fi
MODE=$1
case $MODE in --write | --check) ;; *) usage ;; esac
LISTING=$2
SRC=$(cd "$(dirname "$0")/.." && pwd)
SLUICE=$(realpath "$3")
PIPES=$(realpath "${4:-$SRC/pipelines}")
[ -x "$SLUICE" ] || { echo "output_listing: $3 is not an executable" >&2; exit 2; }
[ -d "$PIPES" ] || { echo "output_listing: $PIPES is not a folder" >&2; exit 2; }
if [ "$MODE" = --check ] && [ ! -f "$LISTING" ]; then
  echo "output_listing: no listing $LISTING" >&2
  exit 2
fi
[ "$MODE" = --check ] || mkdir -p "$(dirname "$LISTING")"
DIR=${BENCH_DIR:-/tmp/sluice-output-listing}
PY=/usr/bin/python3
export HDF5_PLUGIN_PATH=${HDF5_PLUGIN_PATH:-/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins}
COMMAND="$0 $*"
START=$(date +%s)

rm -rf "$DIR" # this script's own folder
mkdir -p "$DIR/runs"
ACQ_ARGS=(--scan 128 128 --detector 192 192 --frames-per-file 4096 --dtype u16 --compress bslz4
  --bad-pixels 73 --seed 1)
$PY "$SRC/tests/data/make_dectris.py" "$DIR/acq" "${ACQ_ARGS[@]}" >/dev/null

KNOWN=${LISTING%.txt}.known
[ "$MODE" = --check ] && [ "$KNOWN" != "$LISTING" ] && [ -f "$KNOWN" ] || KNOWN=""

# set_of PIPELINE: the --set arguments the known changes give it.
set_of() {
  [ -n "$KNOWN" ] || return 0
  awk -v p="$1" '$1 == "set" && $2 == p { printf "--set\n%s\n", $3 }' "$KNOWN"
}

# The pipelines to run: every one of PIPELINES_DIR, or for a check those
# the listing has too.
pipelines=()
for f in "$PIPES"/*.yaml; do
  p=$(basename "$f" .yaml)
  if [ "$MODE" = --check ] && ! grep -q "^$p " "$LISTING"; then continue; fi
  pipelines+=("$p")
done

status=0
for p in "${pipelines[@]}"; do
  set_input=()
  grep -q '^  input:' "$PIPES/$p.yaml" && set_input=(--set input="$DIR/acq_master.h5")
  mapfile -t known_sets < <(set_of "$p")
  set_input+=("${known_sets[@]}")
  for th in 1 2; do
    out="$DIR/runs/$p-$th"
    if ! "$SLUICE" run "$PIPES/$p.yaml" "${set_input[@]}" --threads $th --out "$out" --quiet \
      >/dev/null 2>"$out.err"; then
      echo "$p, $th thread(s): run failed: $(tail -1 "$out.err")"
      status=1
    fi
  done
done
if [ "$MODE" = --write ] && [ $status -ne 0 ]; then
  echo "output_listing: no listing written" >&2
  exit 1
fi

# The binary's commit, where it lies in a git work tree.
bin_dir=$(dirname "$SLUICE")
commit=$(git -C "$bin_dir" rev-parse HEAD 2>/dev/null || echo unknown)
commit_date=$(git -C "$bin_dir" log -1 --format=%cd --date=iso "$commit" 2>/dev/null || echo unknown)
header="# sluice binary $SLUICE of commit $commit ($commit_date), pipelines $PIPES; written $(date -u '+%Y-%m-%d %H:%M:%S UTC'); command: $COMMAND"

$PY - "$MODE" "$LISTING" "$DIR" "$header" "${ACQ_ARGS[*]}" "$KNOWN" "${pipelines[@]}" <<'PYEOF' || status=$?
import hashlib, os, sys
import h5py, numpy as np

mode, listing, work, header, acq_args, known_file = sys.argv[1:7]
pipelines = sys.argv[7:]

# (pipeline, dataset or "*") -> reason, from the known changes.
known, close = {}, {}
if known_file:
    for line in open(known_file):
        f = line.split(None, 3)
        if not f or f[0].startswith("#"):
            continue
        if f[0] == "differs" and len(f) == 4:
            known[(f[1], f[2])] = f[3].strip()
        elif f[0] == "close" and len(f) == 4 and len(f[3].split(None, 1)) == 2:
            rtol, why = f[3].split(None, 1)
            close[(f[1], f[2])] = (float(rtol), why.strip())
        elif f[0] != "set" or len(f) < 4:
            print(f"{known_file}: not a known change: {line.strip()}")
            sys.exit(2)
used = set()


def raw_bytes(a):
    a = np.asarray(a)
    if a.dtype.kind == "O":  # variable-length strings: their bytes, NUL-separated
        return b"\0".join(x if isinstance(x, bytes) else str(x).encode() for x in a.ravel())
    return np.ascontiguousarray(a).tobytes()


def entry(d):
    shape = "x".join(map(str, d.shape)) if d.shape else "scalar"
    a = np.asarray(d[()])
    values = "-"
    if a.dtype.kind == "f" and a.size:
        flat = a.ravel().astype(np.float64)
        picks = flat[np.linspace(0, flat.size - 1, 64).astype(np.int64)]
        values = ",".join(repr(float(x)) for x in [flat.sum(), *picks])
    return d.dtype.str, shape, hashlib.sha256(raw_bytes(a)).hexdigest(), values


def within(want_values, got_values, rtol):
    """Whether two VALUES fields agree within rtol of the largest magnitude,
    and by how much they differ (relative)."""
    if want_values == "-" or got_values == "-":
        return False, float("inf")
    a = np.array([float(x) for x in want_values.split(",")])
    b = np.array([float(x) for x in got_values.split(",")])
    if a.shape != b.shape:
        return False, float("inf")
    scale = max(np.abs(a[1:]).max(), np.abs(b[1:]).max(), 1e-300)
    n = len(a) - 1
    err = np.abs(a - b) / scale
    err[0] /= n  # the sum's error grows with its terms
    return bool(err.max() <= rtol), float(err.max())


def acquisition_hash(master):
    """SHA-256 over the master's datasets and every data file's frames (decoded)."""
    h = hashlib.sha256()
    with h5py.File(master, "r") as f:
        names = []
        f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        for n in sorted(names):
            h.update(n.encode() + raw_bytes(f[n][()]))
        for k in sorted(f["entry/data"].keys()):
            d = f["entry/data"][k]
            h.update(k.encode())
            for s in range(0, d.shape[0], 1024):
                h.update(d[s:s + 1024].tobytes())
    return h.hexdigest()


# (pipeline, threads) -> {dataset: (dtype, shape, sha256)} of this run.
runs = {}
for p in pipelines:
    for th in ("1", "2"):
        path = os.path.join(work, "runs", f"{p}-{th}", "results.h5")
        if not os.path.exists(path):
            continue  # the run failed (reported above)
        with h5py.File(path, "r") as f:
            names = []
            f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
            runs[(p, th)] = {n: entry(f[n]) for n in sorted(names)}
acq = acquisition_hash(os.path.join(work, "acq_master.h5"))

if mode == "--write":
    with open(listing + ".tmp", "w") as out:
        out.write(header + "\n")
        out.write(f"# acquisition: tests/data/make_dectris.py ACQ {acq_args}\n")
        out.write("# PIPELINE THREADS DATASET DTYPE SHAPE SHA256 (raw bytes) VALUES (floating point: the sum and "
                  "64 values, else -); attributes not listed\n")
        out.write(f"acquisition - - - - {acq}\n")
        for (p, th), ds in runs.items():
            for n, (dt, shape, sha, values) in ds.items():
                out.write(f"{p} {th} {n} {dt} {shape} {sha} {values}\n")
    os.replace(listing + ".tmp", listing)
    print(f"wrote {listing}: {sum(map(len, runs.values()))} datasets of {len(runs)} runs")
    sys.exit(0)

# --check
want, want_acq = {}, None
for line in open(listing):
    if line.startswith("#") or not line.strip():
        continue
    p, th, n, dt, shape, sha, *values = line.split()
    if p == "acquisition":
        want_acq = sha
        continue
    want.setdefault((p, th), {})[n] = (dt, shape, sha, values[0] if values else "-")
if want_acq != acq:
    print(f"acquisition {acq} is not the listing's ({want_acq}): outputs not compared")
    sys.exit(2)
status = 0
for key in sorted(k for k in set(want) | set(runs) if k[0] in pipelines):
    p, th = key
    label = f"{p}, {th} thread(s):"
    if key not in want:
        print(f"{label} not in the listing")
        continue
    if key not in runs:
        status = 1  # the run failed, said above
        continue
    a, b = want[key], runs[key]
    differ, excused = [], []
    for n in sorted(set(a) & set(b)):
        if a[n][:3] != b[n][:3]:
            what = [w for w, x, y in zip(("dtype", "shape", "bytes"), a[n], b[n]) if x != y]
            why = [k for k in ((p, n), (p, "*")) if k in known]
            if not why and (p, n) in close and what == ["bytes"]:
                ok, err = within(a[n][3], b[n][3], close[(p, n)][0])
                what = [f"bytes, values within {err:.2g} of the largest"] if ok else [
                    f"bytes, values {err:.2g} apart, more than {close[(p, n)][0]:g}"]
                if ok:
                    why = [(p, n)]
            (excused if why else differ).append(f"{n} ({', '.join(what)})")
            used.update(why)
    added = sorted(set(b) - set(a))
    removed = sorted(set(a) - set(b))
    parts = ["same" if not differ else "DIFFERENT: " + "; ".join(differ)]
    if excused:
        parts.append("known: " + "; ".join(excused))
    if added:
        parts.append("added: " + " ".join(added))
    if removed:
        parts.append("removed: " + " ".join(removed))
    print(f"{label} {', '.join(parts)} ({len(set(a) & set(b))} datasets on both sides)")
    if differ:
        status = 1
for p in sorted({p for p, _ in want} - set(pipelines)):
    print(f"{p}: removed (in the listing, not in the pipelines folder)")
for (p, n), why in sorted(list(known.items()) + [(k, v[1]) for k, v in close.items()]):
    if (p, n) in used:
        print(f"known change, {p} {n}: {why}")
    elif p in pipelines:
        print(f"stale known change (no such difference): {p} {n}")
sys.exit(status)
PYEOF

if [ "$MODE" = --check ]; then
  for f in "$PIPES"/*.yaml; do
    p=$(basename "$f" .yaml)
    grep -q "^$p " "$LISTING" || echo "$p: added (not in the listing; not run)"
  done
fi
echo "output_listing: $(($(date +%s) - START)) s"
exit $status
