#!/usr/bin/python3
"""Writes a synthetic Dectris/Arina-style 4D-STEM acquisition with h5py.

    /usr/bin/python3 tests/data/make_dectris.py OUT_PREFIX --scan 64 64 --detector 128 128 \
        --frames-per-file 1000 --dtype u16 --compress bslz4

Writes OUT_PREFIX_master.h5 with /entry/data/data_000001, ... as external links
(relative file names) to OUT_PREFIX_data_NNNNNN.h5, each holding
/entry/data/data (N, H, W) in chunks of --chunk-frames frames, plus
/entry/instrument/detector metadata (pixel_mask, x/y_pixels_in_detector,
nimages, ntrigger, saturation_value, count_time, frame_time).

Counts: a bright-field disk (Poisson mean --bf-mean, default 20) that moves a
little across the scan (so centre of mass / DPC see a signal) over a sparse
dark field (Poisson mean --df-mean, default 0.05). A few bad pixels are flagged
in the pixel mask and stored at the dtype's maximum in every frame.

Use the Debian interpreter (/usr/bin/python3, python3-h5py); bslz4 goes
through the bitshuffle HDF5 plugin (Debian package bitshuffle).
"""
import argparse
import os
import sys

PLUGIN_DIR = "/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins"
os.environ.setdefault("HDF5_PLUGIN_PATH", PLUGIN_DIR)  # before h5py loads HDF5

import h5py  # noqa: E402
import numpy as np  # noqa: E402

BITSHUFFLE = 32008
DTYPES = {"u8": np.uint8, "u16": np.uint16, "u32": np.uint32}


def frames_for(first, n, args, rng, bad):
    """Frames first..first+n-1 of the scan (row-major scan order)."""
    h, w = args.detector
    rows, cols = args.scan
    dtype = DTYPES[args.dtype]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    radius = min(h, w) / 8.0
    out = np.empty((n, h, w), dtype=dtype)
    maxv = np.iinfo(dtype).max
    for i in range(n):
        g = first + i
        sr, sc = divmod(g, cols)
        # A slowly varying beam shift across the scan: a DPC-like signal.
        cy = h / 2 + 0.05 * radius * np.sin(2 * np.pi * sr / max(rows, 1))
        cx = w / 2 + 0.05 * radius * np.cos(2 * np.pi * sc / max(cols, 1))
        disk = (yy - cy) ** 2 + (xx - cx) ** 2 <= radius**2
        lam = np.where(disk, args.bf_mean, args.df_mean)
        counts = rng.poisson(lam)
        np.minimum(counts, maxv - 1, out=counts)
        f = counts.astype(dtype)
        f[bad] = maxv
        out[i] = f
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("prefix", help="output prefix: PREFIX_master.h5, PREFIX_data_NNNNNN.h5")
    ap.add_argument("--scan", nargs=2, type=int, default=[64, 64], metavar=("ROWS", "COLS"))
    ap.add_argument("--detector", nargs=2, type=int, default=[128, 128], metavar=("H", "W"))
    ap.add_argument("--frames-per-file", type=int, default=1000)
    ap.add_argument("--chunk-frames", type=int, default=1, help="frames per HDF5 chunk (default 1)")
    ap.add_argument("--block-size", type=int, default=0,
                    help="bitshuffle block size in elements (0 = the filter's default)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="u16")
    ap.add_argument("--compress", choices=["none", "bslz4", "bitshuffle", "contiguous"], default="bslz4",
                    help="bslz4: bitshuffle+LZ4 chunks; bitshuffle: bitshuffled chunks without LZ4; "
                         "none: uncompressed chunks; contiguous: no chunks")
    ap.add_argument("--bf-mean", type=float, default=20.0)
    ap.add_argument("--df-mean", type=float, default=0.05)
    ap.add_argument("--bad-pixels", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()

    h, w = args.detector
    total = args.scan[0] * args.scan[1]
    if total <= 0 or h <= 0 or w <= 0 or args.frames_per_file <= 0 or args.chunk_frames <= 0:
        sys.exit("make_dectris: sizes must be positive")
    if args.compress in ("bslz4", "bitshuffle") and not h5py.h5z.filter_avail(BITSHUFFLE):
        sys.exit(f"make_dectris: bitshuffle HDF5 plugin not found (HDF5_PLUGIN_PATH={os.environ['HDF5_PLUGIN_PATH']})")
    dtype = DTYPES[args.dtype]
    rng = np.random.default_rng(args.seed)

    mask = np.zeros((h, w), dtype=np.uint32)
    bad = np.zeros((h, w), dtype=bool)
    for _ in range(args.bad_pixels):
        r, c = int(rng.integers(0, h)), int(rng.integers(0, w))
        bad[r, c] = True
        mask[r, c] = 1  # Dectris: bit 0 = gap/dead; any bit > 0 means bad
    prefix_dir = os.path.dirname(os.path.abspath(args.prefix))
    base = os.path.basename(args.prefix)
    os.makedirs(prefix_dir, exist_ok=True)

    master_path = f"{args.prefix}_master.h5"
    with h5py.File(master_path, "w") as m:
        data = m.require_group("/entry/data")
        first, idx = 0, 1
        while first < total:
            n = min(args.frames_per_file, total - first)
            name = f"{base}_data_{idx:06d}.h5"
            with h5py.File(os.path.join(prefix_dir, name), "w") as f:
                kw = {}
                if args.compress != "contiguous":
                    kw["chunks"] = (min(args.chunk_frames, n), h, w)
                    kw["maxshape"] = (None, h, w)
                if args.compress in ("bslz4", "bitshuffle"):
                    kw["compression"] = BITSHUFFLE
                    # the plugin's user values: (block size, compression); 2 = LZ4, 0 = none
                    kw["compression_opts"] = (args.block_size, 2 if args.compress == "bslz4" else 0)
                d = f.create_dataset("/entry/data/data", shape=(n, h, w), dtype=dtype, **kw)
                step = 256
                for s in range(0, n, step):
                    k = min(step, n - s)
                    d[s:s + k] = frames_for(first + s, k, args, rng, bad)
                d.attrs["image_nr_low"] = np.int64(first + 1)
                d.attrs["image_nr_high"] = np.int64(first + n)
            data[f"data_{idx:06d}"] = h5py.ExternalLink(name, "/entry/data/data")
            first += n
            idx += 1
        det = m.require_group("/entry/instrument/detector")
        spec = det.require_group("detectorSpecific")
        det["x_pixels_in_detector"] = np.uint32(w)
        det["y_pixels_in_detector"] = np.uint32(h)
        det["saturation_value"] = np.uint32(min(np.iinfo(dtype).max - 1, 2**31 - 1))
        det["count_time"] = np.float64(0.001)
        det["frame_time"] = np.float64(0.001)
        spec["nimages"] = np.uint64(total)
        spec["ntrigger"] = np.uint64(1)
        spec.create_dataset("pixel_mask", data=mask, dtype=np.uint32)
    print(f"{master_path}: {total} frames of {h} x {w} {args.dtype} in {idx - 1} data file(s), {args.compress}")


if __name__ == "__main__":
    main()
