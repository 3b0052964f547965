#!/usr/bin/env python3
"""Summary of issue 11's DPC grid from the per-case lines of test_dpc.

The grid harness (tests/unit/dpc_grid.h) prints one line a case with
DPC_GRID_VERBOSE=1; with SLUICE_DPC_GRID_PART=k/n, n processes each run
every n-th case, and their lines together are the whole grid's. This adds
them up the way dpc_grid_run does (branch right: the fitted angle within
90 degrees of the true one; angle within 2 degrees modulo 180; the
determinable cases: Cramer-Rao bound <= 0.7 degree; no warning: branch
confidence at or above the node's threshold is not printed per case, so
that share is left to the harness's own summary).

    python3 tests/data/dpc_grid_summary.py LINES...   (files, or - for stdin)

Standard library only (the device machine has no numpy)."""
import re
import sys

CASE = re.compile(r"case (\d+): alpha\s+(\d+) mrad, df\s+([+-]?\d+) A, dose (\S+), rotation\s+(\d+) t (\d): "
                  r"fitted (\S+) t (\d) \(bound (\S+) deg, branch confidence (\S+)\)")


def diff(a, b):
    """|a - b| on the circle, degrees in [0, 180]."""
    d = abs((a - b) % 360.0)
    return 360.0 - d if d > 180 else d


def main(paths):
    cases = {}
    for path in paths or ["-"]:
        f = sys.stdin if path == "-" else open(path)
        for line in f:
            m = CASE.search(line)
            if m:
                cases[int(m.group(1))] = m.groups()
    if not cases:
        sys.exit("dpc_grid_summary: no case lines (run test_dpc with DPC_GRID_VERBOSE=1)")
    cells, total = {}, [0, 0, 0, 0]
    det = [0, 0, 0]
    for no, g in sorted(cases.items()):
        alpha, df, dose, rot, t, fit, tf, bound = int(g[1]), int(g[2]), g[3], int(g[4]), int(g[5]), \
            float(g[6]), int(g[7]), float(g[8])
        err = diff(fit, rot)
        err180 = 180 - err if err > 90 else err
        row = (err < 90, err180 < 2, tf == t)
        for acc in (total, cells.setdefault((float(dose), df), [0, 0, 0, 0])):
            acc[0] += 1
            for k in range(3):
                acc[k + 1] += row[k]
        if bound <= 0.7:
            det[0] += 1
            det[1] += row[0] and row[1] and row[2]
            det[2] = max(det[2], err180)
    n = total[0]
    print(f"{n} cases: branch right {total[1]} ({100 * total[1] / n:.1f}%), angle within 2 deg (mod 180) "
          f"{total[2]} ({100 * total[2] / n:.1f}%), transpose right {total[3]} ({100 * total[3] / n:.1f}%)")
    print(f"determinable (bound <= 0.7 deg): {det[0]}, branch, transpose and angle within 2 deg in {det[1]}, "
          f"worst angle error {det[2]:.2f} deg")
    print("| dose | defocus A | cases | branch right % | within 2 deg % | transpose right % |")
    print("|---|---|---|---|---|---|")
    for (dose, df), c in sorted(cells.items()):
        print(f"| {dose:.0e} | {df:+d} | {c[0]} | {100 * c[1] / c[0]:.0f} | {100 * c[2] / c[0]:.0f} | "
              f"{100 * c[3] / c[0]:.0f} |")


if __name__ == "__main__":
    main(sys.argv[1:])
