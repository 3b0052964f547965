#!/bin/bash
# untracked: one device probe of the source's time
B=$PWD/device-bundle; tar -C $B -xJf $B/bundle.tar.xz
export PATH=$B/bin:$PATH LD_LIBRARY_PATH=$B/lib HDF5_PLUGIN_PATH=$B/plugins
D=/tmp/acq-shipped-0.8; mkdir -p $D
make_acquisition --dark-mean 0.8 $D/scan 512 512 192 192 1000 16 | tail -1
cat $D/*.h5 > /dev/null
cp $B/src/bench/device/decode_bf.yaml $D/decode.yaml
for args in "" "" "" "--setting source_overlap=false" "--setting read_threads=12"; do
  echo "== $args"
  /usr/bin/time -f "  wall %e" sluice run $D/decode.yaml --set input=$D/scan_master.h5 --backend cuda $args --out $D/o --force --quiet
  python3 -c "
import json;r=json.load(open('$D/o/report.json'))
print('  exec %.4f'%r['seconds'], ' '.join('%s %.4f/%s'%(n['id'],n['seconds'],n.get('device_seconds','-')) for n in r['nodes']))
print('  '+[x for x in r['nodes'][0]['notes'] if x.startswith('reading')][0])"
done
