#!/bin/bash
# untracked: one device probe of the source's time
B=$PWD/device-bundle; tar -C $B -xJf $B/bundle.tar.xz
export PATH=$B/bin:$PATH LD_LIBRARY_PATH=$B/lib HDF5_PLUGIN_PATH=$B/plugins
D=/tmp/acq-shipped-0.8; mkdir -p $D
make_acquisition --dark-mean 0.8 $D/scan 512 512 192 192 1000 16 | tail -1
cat $D/*.h5 > /dev/null
cp $B/src/bench/device/decode_bf.yaml $D/decode.yaml
for m in runtime huge; do SLUICE_PINNED_MEMORY=$m bench_page_cache_read --pinned --threads 16 --reps 1 $D/scan_data_00000*.h5 | grep -i pinned_memory; done
for args in "" "" "" "--setting pinned_memory=huge" "--setting pinned_memory=huge" "--setting pinned_memory=huge" "--setting read_threads=12 --setting pinned_memory=huge"; do
  echo "== $args"
  /usr/bin/time -f "  wall %e" sluice run $D/decode.yaml --set input=$D/scan_master.h5 --backend cuda $args --out $D/o --force --quiet
  python3 -c "
import json;r=json.load(open('$D/o/report.json'))
print('  exec %.4f'%r['seconds'], ' '.join('%s %.4f/%s'%(n['id'],n['seconds'],n.get('device_seconds','-')) for n in r['nodes']), r['phases'])
print('  '+[x for x in r['nodes'][0]['notes'] if x.startswith('reading')][0])"
done
for args in "" "--setting pinned_memory=huge"; do for p in stem_products resident_products; do
  echo "== $p $args"
  /usr/bin/time -f "  wall %e" sluice run $B/src/pipelines/$p.yaml --set input=$D/scan_master.h5 --backend cuda $args --out $D/o --force --quiet
  python3 -c "
import json;r=json.load(open('$D/o/report.json'))
print('  exec %.4f'%r['seconds'], 'passes', r['passes'], ' '.join('%s %.4f'%(n['id'],n['seconds']) for n in r['nodes'] if n['seconds']>0.003))"
done; done
