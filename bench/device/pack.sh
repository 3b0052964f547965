#!/usr/bin/env bash
# Run HERE (the build machine, which has nvcc and the Debian packages): builds
# sluice with the CUDA backend and packs everything the device run needs into
# one folder that travels to the accelerator machine (which has no package
# registry and no HDF5/yaml/cmocka):
#
#   bash bench/device/pack.sh [DEST]        DEST defaults to ./device-bundle
#   env: BUILD (default build), JOBS (default 2), NO_BUILD=1 (pack what is
#        already built; no `make build`)
#
# DEST/bundle.tar.xz  holds
#     bin/      sluice, every unit test (test_*), the fuzz corpus replayers,
#               the benchmarks (bench_*), host debug info stripped
#     lib/      their shared libraries (/work/shared/tools/device-bundle)
#     plugins/  HDF5 filter plugins
#     src/      what the tests and scripts read: README.md, docs/,
#               pipelines/, schemas/, tests/e2e, tests/data,
#               tests/fuzz/corpus, bench/*.sh
#     shipped/  the acquisition of tests/data/shipped_outputs.sh and the
#               listing of the shipped pipelines' outputs on this machine's
#               CPU (when /usr/bin/python3 has h5py)
#     (also h5dump and h5ls, which the end-to-end scripts use)
#   (each binary carries the CUDA kernels and the static CUDA runtime, about
#   8 MiB; xz with a large window shares them across binaries: ~10 MiB in
#   all instead of ~125, well under the 64 MiB a device run may carry)
# DEST/run_all.sh      the device-side script (bench/device/run_all.sh);
#                      it unpacks the archive into /tmp itself
# DEST/manifest.txt    commit, build type, binaries
#
# Then on the device machine (repository root, DEST carried):
#   bash device-bundle/run_all.sh         (logs and summary go to $OUT)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build}
JOBS=${JOBS:-2}
DEST=${1:-$SRC/device-bundle}
BUNDLER=${BUNDLER:-/work/shared/tools/device-bundle}
cd "$SRC"

if [ "${NO_BUILD:-0}" != 1 ]; then
  make build BUILD="$BUILD" JOBS="$JOBS"
fi

# The bundle is pointless without the CUDA backend: refuse rather than pack a
# CPU-only build that would then "pass" on the device.
if ! grep -q 'SLUICE_HAVE_CUDA' "$BUILD/compile_commands.json" 2>/dev/null; then
  echo "pack: $BUILD was configured without the CUDA backend (nvcc not found, or -DSLUICE_CUDA=OFF);" >&2
  echo "pack: reconfigure with nvcc on PATH or CMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc" >&2
  exit 1
fi

bins=()
for f in "$BUILD/sluice" "$BUILD"/tests/test_* "$BUILD"/tests/*_replay "$BUILD"/bench/bench_* "$BUILD"/bench/make_acquisition; do
  [ -f "$f" ] && [ -x "$f" ] && bins+=("$f")
done
# HDF5's command-line tools: the end-to-end scripts read results with them.
for t in h5dump h5ls; do
  command -v "$t" >/dev/null && bins+=("$(command -v "$t")")
done
[ ${#bins[@]} -gt 1 ] || { echo "pack: no binaries found under $BUILD" >&2; exit 1; }

rm -rf "$DEST"
mkdir -p "$DEST"
STAGE=$(mktemp -d /tmp/sluice-pack-XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
"$BUNDLER" "$STAGE" "${bins[@]}"
# Host debug info is most of the size; device line info (-lineinfo, in the
# fatbinary) stays for compute-sanitizer.
strip --strip-debug "$STAGE"/bin/* 2>/dev/null || true

mkdir -p "$STAGE/src"
for p in README.md docs pipelines schemas tests/e2e tests/data tests/fuzz/corpus; do
  [ -e "$p" ] && cp -r --parents "$p" "$STAGE/src/"
done
for f in bench/*.sh bench/device/*.sh bench/device/*.yaml; do
  [ -f "$f" ] && cp --parents "$f" "$STAGE/src/"
done
# The shipped pipelines' acquisition and their output listing on this
# machine's CPU (needs /usr/bin/python3 with h5py): the device checks that
# CUDA and its CPU give the same bytes (bench/device/shipped_outputs_device.sh).
if /usr/bin/python3 -c 'import h5py' 2>/dev/null; then
  mkdir -p "$STAGE/shipped"
  if bash tests/data/shipped_outputs.sh "$BUILD/sluice" "$STAGE/shipped-work" --backend cpu \
    >"$STAGE/shipped/listing_cpu_here.txt"; then
    cp "$STAGE"/shipped-work/acq_*.h5 "$STAGE/shipped/"
  else
    echo "pack: the shipped pipelines failed here; no shipped/ in the bundle" >&2
    rm -rf "$STAGE/shipped"
  fi
  rm -rf "$STAGE/shipped-work"
else
  echo "pack: no h5py here: the bundle has no shipped/ (the device skips that comparison)" >&2
fi
raw_mb=$(du -sm "$STAGE" | cut -f1)
echo "pack: compressing ${raw_mb} MiB (xz -9, about a minute)"
tar -C "$STAGE" -cf - bin lib plugins src $( [ -d "$STAGE/shipped" ] && echo shipped) | xz -9 -T"$JOBS" >"$DEST/bundle.tar.xz"
cp bench/device/run_all.sh "$DEST/run_all.sh"
chmod +x "$DEST/run_all.sh"

{
  echo "sluice device bundle"
  echo "packed: $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "commit: $(git rev-parse HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo ' (+ uncommitted changes)')"
  echo "build: $BUILD (type '$(grep -m1 '^CMAKE_BUILD_TYPE:' "$BUILD/CMakeCache.txt" | cut -d= -f2)')"
  echo "nvcc: $(grep -m1 '^CMAKE_CUDA_COMPILER:' "$BUILD/CMakeCache.txt" | cut -d= -f2)"
  echo "binaries:"
  for f in "$STAGE"/bin/*; do echo "  $(basename "$f")"; done
} >"$DEST/manifest.txt"

size_mb=$(du -sm "$DEST" | cut -f1)
echo "pack: $DEST holds ${#bins[@]} binaries (${raw_mb} MiB unpacked), ${size_mb} MiB packed"
if [ "$size_mb" -gt 48 ]; then
  echo "pack: WARNING: the working tree plus carried paths must stay under 64 MiB for the device run" >&2
fi
echo "pack: on the device machine run:  bash $(basename "$DEST")/run_all.sh   (carry: [\"$(basename "$DEST")\"])"
