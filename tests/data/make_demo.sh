#!/usr/bin/env bash
# make demo: runs the main job on the embedded default (the CPU backend).
# Until the HDF5 reader lands, the sample acquisition is generated in the run
# by the physics-based synthetic source (pipelines/templates/detector_input.yaml).
set -euo pipefail
sluice=${1:-build/sluice}
out=demo-out/virtual_image
mkdir -p demo-out
"$sluice" plan pipelines/virtual_image.yaml --set scan_shape=[64,64]
"$sluice" run pipelines/virtual_image.yaml --set scan_shape=[64,64] --out "$out" --force
echo
echo "demo outputs are in $out/ (results.h5, bf.png, adf.png, report.json)"
