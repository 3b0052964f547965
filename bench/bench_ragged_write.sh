#!/usr/bin/env bash
# Variable-size items into HDF5: sluice's ragged layout (results.h5's group
# of bytes, offsets, first_position and n_positions, what write_h5 appends
# for a stream of variable-size items) against HDF5's own ragged type as an
# h5py user writes it (a 1-D dataset of variable-length uint8, vlen, in
# slices of CALL items, the way a loop over a producer's chunks would).
# Same items (sizes 16..2048 bytes, 1 KiB on average, the bytes worked out
# from the item number on both sides), same file system, same run; the best
# of REPS wall times of each side's writes and close, and each side's file
# read back by h5py against the items (every item's bytes).
#
#   bash bench/bench_ragged_write.sh [build/bench/bench_ragged_write] [N] [CALL] [REPS]
#   (N items, default 65536; CALL items a call, default 64; REPS default 3)
set -euo pipefail
BIN=$(realpath "${1:-build/bench/bench_ragged_write}")
N=${2:-65536} CALL=${3:-64} REPS=${4:-3}
PY=/usr/bin/python3
DIR=${BENCH_DIR:-/tmp/sluice-bench-ragged}
mkdir -p "$DIR"
rm -f "$DIR/sluice.h5" "$DIR/vlen.h5" # this benchmark's own files
read -r s_all s_finish s_bytes s_check < <("$BIN" "$DIR/sluice.h5" "$N" "$CALL" "$REPS")
$PY - "$DIR" "$N" "$CALL" "$REPS" "$s_all" "$s_finish" "$s_bytes" "$s_check" <<'PY'
import sys, time
import numpy as np
import h5py
d, n, call, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
s_all, s_finish, s_bytes, s_check = float(sys.argv[5]), float(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
def size(k): return 16 + (k * 2654435761) % 4294967296 % 2033
def item(k): return ((k + 7 * np.arange(size(k), dtype=np.int64)) % 256).astype(np.uint8)
items = [item(k) for k in range(n)]  # made before the clock starts, as on sluice's side
best = 1e30
for _ in range(reps):
    t0 = time.perf_counter()
    with h5py.File(f"{d}/vlen.h5", "w") as f:
        ds = f.create_dataset("items", shape=(n,), dtype=h5py.vlen_dtype(np.uint8), chunks=(min(n, 4096),))
        for k0 in range(0, n, call):
            if min(call, n - k0) == 1:  # h5py broadcasts a one-element slice's item: write the element
                ds[k0] = items[k0]
                continue
            arr = np.empty(min(call, n - k0), dtype=object)
            arr[:] = items[k0:k0 + call]
            ds[k0:k0 + call] = arr
    best = min(best, time.perf_counter() - t0)
# both files against the items
with h5py.File(f"{d}/sluice.h5", "r") as f:
    g = f["items"]; b = g["bytes"][...]; o = g["offsets"][...]
    ok_s = len(o) == n + 1 and all(np.array_equal(b[o[k]:o[k + 1]], items[k]) for k in range(n)) \
        and np.array_equal(g["first_position"][...], np.arange(n)) and np.all(g["n_positions"][...] == 1)
with h5py.File(f"{d}/vlen.h5", "r") as f:
    v = f["items"][...]
    ok_v = all(np.array_equal(v[k], items[k]) for k in range(n))
mb = s_bytes / 1e6
print(f"{n} items of 16..2048 bytes ({mb:.1f} MB), {call} items a call, best of {reps}; h5py {h5py.__version__}, HDF5 {h5py.version.hdf5_version}")
print(f"{'':44s}{'seconds':>9s}{'MB/s':>9s}{'vs h5py vlen':>14s}  read back")
print(f"{'h5py, vlen uint8 dataset':44s}{best:9.3f}{mb / best:9.0f}{1.0:13.2f}x  {'ok' if ok_v else 'DIFFERS'}")
print(f"{'sluice ragged writer (of which finishing)':44s}{s_all:9.3f}{mb / s_all:9.0f}{best / s_all:13.2f}x  "
      f"{'ok' if ok_s and s_check == 'offsets-ok' else 'DIFFERS'} ({s_finish:.3f} s)")
PY
