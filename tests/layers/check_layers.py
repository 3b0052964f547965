#!/usr/bin/env python3
"""Lists the include graph of engine/, nodes/ and shaders/ and fails on any
edge the layer table does not allow.

The table is the one CMake builds the libraries from: each sl_layer() call in
CMakeLists.txt appends "layer|sources|flat sources|may include" to
BUILD/layers.txt at configure time, so the rules are written once.

  python3 tests/layers/check_layers.py BUILD/layers.txt SOURCE_DIR [--graph]

A file belongs to the layer whose source folder holds it (the deepest one);
engine/cli, tests/ and bench/ sit on top and may include anything. An
#include "..." must be written from the repository root (or name a file in
the same folder) and never climb with "../". Exit 0 when every edge is
allowed, 1 otherwise (each bad edge printed as file:line)."""
import os
import re
import sys
from collections import Counter

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
EXTS = ('.c', '.h', '.cu', '.cuh')


def read_table(path):
    layers = []
    for line in open(path):
        if line.startswith('#') or not line.strip():
            continue
        name, rec, flat, sees = line.rstrip('\n').split('|')
        layers.append((name, rec.split(';') if rec else [], flat.split(';') if flat else [],
                       sees.split(';') if sees else []))
    return layers


def layer_of(rel, layers):
    """(layer name, sees) of the deepest source folder holding rel."""
    best, depth = None, -1
    for name, rec, flat, sees in layers:
        for d in rec:
            if rel.startswith(d + '/') and len(d) > depth:
                best, depth = (name, sees), len(d)
        for d in flat:
            if os.path.dirname(rel) == d and len(d) > depth:
                best, depth = (name, sees), len(d)
    return best


def allowed(target, sees):
    return any(target == s or target.startswith(s + '/') for s in sees)


def main(argv):
    if len(argv) < 3:
        print(__doc__)
        return 2
    layers = read_table(argv[1])
    root = os.path.abspath(argv[2])
    show_graph = '--graph' in argv
    bad, edges = [], Counter()
    for top in ('engine', 'nodes', 'shaders'):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in sorted(files):
                if not f.endswith(EXTS):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                home = layer_of(rel, layers)
                text = open(os.path.join(root, rel), errors='replace').read()
                for m in INCLUDE.finditer(text):
                    inc = m.group(1)
                    line = text.count('\n', 0, m.start()) + 1
                    where = f'{rel}:{line}'
                    if '..' in inc.split('/'):
                        bad.append(f'{where}: #include "{inc}" climbs with "..": write it from the repository root')
                        continue
                    same_dir = os.path.normpath(os.path.join(os.path.dirname(rel), inc))
                    target = same_dir if os.path.exists(os.path.join(root, same_dir)) else inc
                    if not os.path.exists(os.path.join(root, target)):
                        continue  # generated or system header
                    if home is None:
                        continue  # the command line sits on top of every layer
                    there = layer_of(target, layers)
                    edges[(home[0], there[0] if there else target)] += 1
                    if not allowed(target, home[1]):
                        bad.append(f'{where}: layer {home[0]} includes {target} '
                                   f'({there[0] if there else "no layer"}); it may include only '
                                   f'{", ".join(home[1])}')
    if show_graph or bad:
        print('include graph (layer -> layer: includes):')
        for (a, b), n in sorted(edges.items()):
            if a != b:
                print(f'  {a} -> {b}: {n}')
    for b in bad:
        print(b)
    if bad:
        print(f'check_layers: {len(bad)} include(s) outside the layer rules')
        return 1
    print(f'check_layers: every include of {sum(edges.values())} follows the layer rules')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
