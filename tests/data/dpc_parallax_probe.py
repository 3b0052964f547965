#!/usr/bin/env python3
"""Probe (not a product): what the BF disk's parallax tells dpc where the CoM
cannot (issue 11 item 1's low-dose, large-defocus corner). For each case of
a list, synthetic_4dstem writes the 4D frames of issue 11's atomic-column
object (the parameters of tests/unit/dpc_grid.h: 0.35 A columns 2.5 A
apart, 300 kV, 0.4 A steps, a weak background, 64 x 64 scan); then:

- the BF disk is cut into about 21 square segments (side ~ R / 3.5 pixels,
  wholly inside 0.9 R) and each segment's image over the scan is summed;
- the parallax M (segment image shift in scan steps = M x segment offset in
  detector pixels) is found by maximising the power of the shifted and
  summed images (tilt-corrected BF, tcBF) over M = s R(p) T^t (s > 0, p in
  [0, 360), t the transpose), a grid then a local refinement: the images
  agree only at the true shifts, so M is unique (a lattice makes
  cross-correlation peaks ambiguous: a shift of 8 steps passes a 6.25-step
  lattice period);
- M = kappa df A^-1 (A the scan-to-detector matrix of synthetic_4dstem and
  dpc; kappa < 0 in this convention): p gives A's axis and handedness, but
  its 180-degree branch only with the sign of the defocus df, which the 4D
  data cannot tell apart from the sign of the phase ((A, df, phi) and
  (-A, -df, -phi) give the same frames);
- two candidate rules for that sign: the skewness of the tcBF image
  (columns appear as peaks whose sign follows sin(chi) at their
  frequencies) and the ADF matched filter projected on the parallax axis.

Prints per case: the parallax's s and p, p's error against the truth
(-rotation, or +rotation when transposed, plus 180 when df > 0), and the
two sign statistics.

  HDF5_PLUGIN_PATH=... /usr/bin/python3 tests/data/dpc_parallax_probe.py SLUICE CASES SEED0
  CASES: lines "alpha_rad defocus_A dose rotation_deg transpose(0|1)"

Needs numpy and h5py; about 40 s a case on the build VM."""
import math, os, shutil, subprocess, sys, tempfile
import h5py
import numpy as np

LAMBDA = 0.019687  # A, 300 kV (dpc_grid.h)

def generator_params(alpha, df, dose, rot, t, scan, seed):
    window = max(8.0, 2 * abs(df) * alpha + 6.0)
    H = 64 if window / 64 <= 0.15 else 96 if window / 96 <= 0.15 else 128
    dx = window / H
    radius = window * alpha / LAMBDA
    p = dict(scan_shape=f"[{scan},{scan}]", detector_shape=f"[{H},{H}]", disk_radius="%.6g" % radius,
             dose=dose, dtype="u32", phase_max="0.5", atom_spacing="%.6g" % (2.5 / dx),
             atom_sigma="%.6g" % (0.35 / 2.3548 / dx), atom_jitter="%.6g" % (0.1 / dx), background="0.05",
             step="%.6g" % (0.4 / dx), defocus="%.6g" % (math.pi * df * alpha * alpha / LAMBDA),
             scan_rotation=str(rot), scan_transpose="true" if t else "false", seed=str(seed))
    return p, H, radius

def frames(sluice, work, alpha, df, dose, rot, t, scan, seed):
    p, H, radius = generator_params(alpha, df, dose, rot, t, scan, seed)
    y = "pipeline: probe\nnodes:\n  sim:\n    type: synthetic_4dstem\n    params:\n"
    y += "".join(f"      {k}: {v}\n" for k, v in p.items())
    y += "outputs:\n  frames: sim.frames\n"
    path = os.path.join(work, "case.yaml")
    with open(path, "w") as f:
        f.write(y)
    out = os.path.join(work, "out")
    subprocess.run([sluice, "run", path, "--out", out, "--force", "--quiet"], check=True)
    with h5py.File(os.path.join(out, "results.h5")) as f:
        F = f["frames"][...].astype(np.float64)
    shutil.rmtree(out)
    return F, H, radius

def segments(F, R, tile):
    H = F.shape[2]
    c = (H - 1) / 2
    n = int(math.floor(R / tile)) + 1
    segs, offs = [], []
    for i in range(-n, n + 1):
        for j in range(-n, n + 1):
            r0 = int(round(c + i * tile - tile / 2 + 0.5))
            c0 = int(round(c + j * tile - tile / 2 + 0.5))
            rr, cc = np.meshgrid(np.arange(r0, r0 + tile), np.arange(c0, c0 + tile), indexing="ij")
            if rr.min() < 0 or cc.min() < 0 or rr.max() >= H or cc.max() >= H:
                continue
            if np.hypot(rr - c, cc - c).max() > 0.9 * R:
                continue
            segs.append(F[:, :, rr, cc].sum(axis=(2, 3)))
            offs.append((rr.mean() - c, cc.mean() - c))
    return np.array(segs), np.array(offs)

def rot(p):
    c, s = math.cos(p), math.sin(p)
    return np.array([[c, -s], [s, c]])

SWAP = np.array([[0, 1], [1, 0]])

def parallax(segs, offs, smax=2.0):
    n = segs.shape[1]
    w = np.hanning(n)
    W = np.outer(w, w)
    S = np.array([np.fft.fft2((s - s.mean()) * W) for s in segs]).reshape(len(segs), -1)
    f0 = (np.fft.fftfreq(n)[:, None] * np.ones((1, n))).ravel()
    f1 = (np.ones((n, 1)) * np.fft.fftfreq(n)[None, :]).ravel()

    def power(M):
        sh = offs @ M.T
        ph = np.exp(2j * np.pi * (np.outer(sh[:, 0], f0) + np.outer(sh[:, 1], f1)))
        return (np.abs((S * ph).sum(0)) ** 2).sum()

    def mat(s, p, t):
        return s * rot(math.radians(p)) @ (SWAP if t else np.eye(2))

    best = (-1, None)
    for t in (0, 1):
        for s in np.arange(0.05, smax, 0.05):
            for p in np.arange(0, 360, 4):
                v = power(mat(s, p, t))
                if v > best[0]:
                    best = (v, (s, p, t))
    v, (s, p, t) = best
    for ds0, dp0 in ((0.02, 1.0), (0.005, 0.25)):
        better = True
        while better:
            better = False
            for ds, dp in ((ds0, 0), (-ds0, 0), (0, dp0), (0, -dp0)):
                vv = power(mat(s + ds, p + dp, t))
                if vv > v:
                    v, s, p, better = vv, s + ds, p + dp, True
    return s, p % 360, t, v / power(np.zeros((2, 2))), mat(s, p, t)

def tcbf(segs, offs, M):
    n = segs.shape[1]
    f0 = np.fft.fftfreq(n)[:, None]
    f1 = np.fft.fftfreq(n)[None, :]
    acc = np.zeros((n, n), complex)
    for s, o in zip(segs, offs):
        sh = M @ o
        acc += np.fft.fft2(s) * np.exp(2j * np.pi * (f0 * sh[0] + f1 * sh[1]))
    return np.fft.ifft2(acc).real

def skew(x):
    x = x - x.mean()
    return (x ** 3).mean() / (x ** 2).mean() ** 1.5

def main():
    sluice, cases, seed0 = sys.argv[1], sys.argv[2], int(sys.argv[3])
    work = tempfile.mkdtemp(prefix="dpc-parallax-")
    try:
        for i, line in enumerate(l for l in open(cases) if l.strip()):
            a, df, dose, r, t = line.split()
            F, H, R = frames(sluice, work, float(a), float(df), dose, int(r), int(t), 64, seed0 + i)
            c = (H - 1) / 2
            yy, xx = np.mgrid[0:H, 0:H]
            adf = F[:, :, (np.hypot(yy - c, xx - c) >= 1.5 * R) & (np.hypot(yy - c, xx - c) <= 3 * R)].sum(-1)
            segs, offs = segments(F, R, max(2, int(round(R / 3.5))))
            del F
            s, p, tt, gain, M = parallax(segs, offs)
            T = tcbf(segs, offs, M)
            corr = (((T - T.mean()) / T.std()) * ((adf - adf.mean()) / adf.std())).mean()
            truth = (-int(r) if int(t) == 0 else int(r)) + (180 if float(df) > 0 else 0)
            err = ((p - truth + 180) % 360) - 180
            print("a %s df %4s dose %s rot %3s t %s | segments %d s %.3f p %.1f (error %+.1f) t %d "
                  "power gain %.2f | tcBF skewness %+.3f, corr(tcBF, ADF) %+.4f"
                  % (a, df, dose, r, t, len(segs), s, p, err, tt, gain, skew(T), corr), flush=True)
    finally:
        shutil.rmtree(work)

if __name__ == "__main__":
    main()
