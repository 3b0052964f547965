# Sourced by the device scripts run from the repository root on the device
# machine (session.sh, cost_and_targets.sh, source_probe.sh): unpacks
# device-bundle/bundle.tar.xz once (xz, else Python's tarfile) and puts its
# binaries, libraries and HDF5 plugins on the paths. Sets BUNDLE (the
# bundle folder), B (its bin/), OUTDIR ($OUT, else ./device-logs) and log().
BUNDLE=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/device-bundle
OUTDIR=${OUT:-$PWD/device-logs}
mkdir -p "$OUTDIR"
if [ ! -d "$BUNDLE/bin" ]; then
  tar -C "$BUNDLE" -xJf "$BUNDLE/bundle.tar.xz" 2>/dev/null ||
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$BUNDLE/bundle.tar.xz" "$BUNDLE"
fi
export PATH="$BUNDLE/bin:$PATH" LD_LIBRARY_PATH="$BUNDLE/lib" HDF5_PLUGIN_PATH="$BUNDLE/plugins"
B=$BUNDLE/bin
log() { echo "== $* ($(date +%T))"; }
