# Shared helpers for the end-to-end CLI tests. Each test script is run by ctest
# as: bash tests/e2e/test_X.sh PATH/TO/sluice SOURCE_DIR
set -u
SLUICE=$1
SRC=$2
WORK=$(mktemp -d /tmp/sluice-e2e-XXXXXX)
# The user's cache (chunk indexes, loop history, cost profiles) is not the
# tests': each test has its own, removed with WORK.
export XDG_CACHE_HOME=$WORK/cache
trap 'rm -rf "$WORK"' EXIT
PASSED=0
FAILED=0

ok() { PASSED=$((PASSED + 1)); echo "ok - $1"; }
not_ok() { FAILED=$((FAILED + 1)); echo "not ok - $1"; }

# expect CODE NEEDLE DESCRIPTION -- command...: exit code and a stderr/stdout substring
expect() {
  local code=$1 needle=$2 what=$3
  shift 4
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$code" ]; then
    not_ok "$what: exit $rc, expected $code"
    printf '%s\n' "$out" | head -20 | sed 's/^/    /'
  elif [ -n "$needle" ] && ! grep -qF -- "$needle" <<<"$out"; then
    not_ok "$what: output lacks '$needle'"
    printf '%s\n' "$out" | head -20 | sed 's/^/    /'
  else
    ok "$what"
  fi
}

# The python (with h5py) and the bitshuffle HDF5 plugin the detector tests
# check against.
PY=/usr/bin/python3
PLUGIN_DIR=/usr/lib/x86_64-linux-gnu/hdf5/serial/plugins

# need_h5py_and_plugin: ends the test as skipped unless both are installed;
# points HDF5 at the plugin.
need_h5py_and_plugin() {
  if ! $PY -c 'import h5py' 2>/dev/null || [ ! -e "$PLUGIN_DIR/libh5bshuf.so" ]; then
    echo "SKIP: needs python3-h5py and the bitshuffle HDF5 plugin (make deps installs them)"
    exit 0
  fi
  export HDF5_PLUGIN_PATH=$PLUGIN_DIR
}

finish() {
  echo "$PASSED passed, $FAILED failed"
  [ "$FAILED" -eq 0 ]
}
