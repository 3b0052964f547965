#!/usr/bin/env bash
# Session 34 device call: tests, shipped outputs CUDA vs CPU (repack included), repack on a 512x512 dense file.
set -u
ROOT=$PWD
mkdir -p /tmp/c && tar -C /tmp/c -xJf device-bundle/bundle.tar.xz
export PATH=/tmp/c/bin:$PATH LD_LIBRARY_PATH=/tmp/c/lib HDF5_PLUGIN_PATH=/tmp/c/plugins
cd /tmp/c
echo "== shipped outputs $(date +%T)"
bash /tmp/c/src/bench/device/shipped_outputs_device.sh /tmp/c/bin /tmp/c/src /tmp/c/shipped /tmp/shipped-device; echo "shipped exit $?"
echo "== make 512 $(date +%T)"
/tmp/c/bin/make_acquisition --dark-mean 0.8 /tmp/acq512 512 512 192 192 1000 2 > /dev/null
du -sh /tmp/acq512_* | tail -1; du -ch /tmp/acq512_* | tail -1
for be in cuda cpu; do
  for i in 1 2; do
    rm -rf /tmp/rp
    /usr/bin/time -f "wall %e s rss %M KB" sluice run /tmp/c/src/pipelines/repack.yaml --set input=/tmp/acq512_master.h5 --backend $be --out /tmp/rp --quiet 2>&1 | tail -1
    python3 - /tmp/rp/report.json $be <<'P'
import json, sys
r = json.load(open(sys.argv[1])); m = r["memory"]
print(sys.argv[2], "execution %.3f s" % r["seconds"], "host planned/measured MiB %.1f / %.1f" % (m["planned_peak_host_bytes"]/2**20, m["measured_peak_host_bytes"]/2**20),
      "device planned/measured MiB %.1f / %.1f" % (m.get("planned_peak_device_bytes",0)/2**20, m.get("measured_peak_device_bytes",0)/2**20),
      " ".join("%s %.3f" % (n["id"], n["seconds"]) for n in r["nodes"]))
P
  done
  ls -la /tmp/rp/results.h5
done
h5dump -H -p -d frames /tmp/rp/results.h5 | head -14
echo "== tests $(date +%T)"
cd "$ROOT"
OUT=$OUT/tests TIME_BUDGET=300 bash device-bundle/run_all.sh > $OUT/run_all.out 2>&1; echo "run_all exit $?"; tail -25 $OUT/tests/summary.txt
echo "== done $(date +%T)"
