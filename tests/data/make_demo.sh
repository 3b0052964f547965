#!/usr/bin/env bash
# make demo: writes a small Dectris-style acquisition (a master file and its
# data files, bitshuffle-LZ4 compressed through the official HDF5 plugin),
# plans and runs pipelines/virtual_image.yaml on it with the embedded default
# backend (CPU), and says where the outputs are.
set -euo pipefail
sluice=${1:-build/sluice}
mkdir -p demo-data demo-out
if [ ! -e demo-data/sample_master.h5 ]; then
  /usr/bin/python3 tests/data/make_dectris.py demo-data/sample --scan 64 64 --detector 128 128 \
    --frames-per-file 1000 --dtype u16 --compress bslz4
fi
"$sluice" plan pipelines/virtual_image.yaml --set input=demo-data/sample_master.h5
# The demo's own output of an earlier `make demo` (possibly from a sluice
# that did not yet mark its outputs) is replaced.
rm -rf demo-out/virtual_image
"$sluice" run pipelines/virtual_image.yaml --set input=demo-data/sample_master.h5 \
  --out demo-out/virtual_image
echo
echo "demo acquisition: demo-data/sample_master.h5 (+ data files)"
echo "demo outputs:     demo-out/virtual_image/ (results.h5, bf.png, adf.png, df.png, report.json)"
