#!/bin/bash
# On the accelerator machine, from the repository root with device-bundle
# carried: the dense 512 x 512 file of issue 12 (written if missing), then
# decode_bf.yaml four times with the defaults and twice with
# pinned_memory=runtime, stem_products and resident_products twice and
# virtual_image once, all --backend cuda; prints each run's execution, node
# seconds and phases, the source's `reading` note and the PNGs' `drawn`
# notes (report.json).
#
#   bash bench/device/source_probe.sh > $OUT/probe.log 2>&1
B=$PWD/device-bundle; [ -d $B/bin ] || tar -C $B -xJf $B/bundle.tar.xz
export PATH=$B/bin:$PATH LD_LIBRARY_PATH=$B/lib HDF5_PLUGIN_PATH=$B/plugins
D=/tmp/acq-shipped-0.8; mkdir -p $D
[ -e $D/scan_master.h5 ] || make_acquisition --dark-mean 0.8 $D/scan 512 512 192 192 1000 16 | tail -1
cat $D/*.h5 > /dev/null
cp $B/src/bench/device/decode_bf.yaml $D/decode.yaml
for args in "" "" "" "" "--setting pinned_memory=runtime" "--setting pinned_memory=runtime"; do
  echo "== decode_bf $args"
  /usr/bin/time -f "  wall %e" sluice run $D/decode.yaml --set input=$D/scan_master.h5 --backend cuda $args --out $D/o --force --quiet
  python3 -c "
import json;r=json.load(open('$D/o/report.json'))
print('  exec %.4f'%r['seconds'], ' '.join('%s %.4f'%(n['id'],n['seconds']) for n in r['nodes']), ' '.join('%s %.3f'%(k[:-8],v) for k,v in r['phases'].items()))
print('  '+[x for x in r['nodes'][0]['notes'] if x.startswith('reading')][0])"
done
for p in stem_products stem_products resident_products resident_products virtual_image; do
  echo "== $p"
  /usr/bin/time -f "  wall %e" sluice run $B/src/pipelines/$p.yaml --set input=$D/scan_master.h5 --backend cuda --out $D/o --force --quiet
  python3 -c "
import json;r=json.load(open('$D/o/report.json'))
print('  exec %.4f'%r['seconds'], 'passes', ['%.4f'%q['ends_at_seconds'] for q in r['passes']], ' '.join('%s %.4f'%(n['id'],n['seconds']) for n in r['nodes'] if n['seconds']>0.002))
print('  png: '+'; '.join(n['id']+' '+[x for x in n['notes'] if x.startswith('drawn')][0][7:] for n in r['nodes'] if n['type']=='write_png'))"
done
