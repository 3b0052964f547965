#!/bin/bash
# untracked: the session's last device call
B=$PWD/device-bundle; [ -d $B/bin ] || tar -C $B -xJf $B/bundle.tar.xz
export PATH=$B/bin:$PATH LD_LIBRARY_PATH=$B/lib HDF5_PLUGIN_PATH=$B/plugins
bash bench/device/source_probe.sh > $OUT/probe.log 2>&1
timeout 150 bash bench/device/shipped_full_size.sh $B 512 2 > $OUT/full_size.log 2>&1
timeout 170 bash bench/bench_cost_model.sh --backend cuda --sluice $B/bin/sluice --work /tmp/cost > $OUT/cost_cuda.log 2>&1
timeout 170 bash bench/bench_cost_model.sh --backend cpu --threads 16 --scan 128 --sluice $B/bin/sluice --work /tmp/costcpu > $OUT/cost_cpu.log 2>&1
echo done
