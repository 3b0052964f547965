#!/usr/bin/env bash
# Every device byte is planned: no launcher (shaders/) and no node (nodes/)
# allocates device memory itself. Device memory comes from the run's pool
# only: a node's buffers, its workspace and its device table
# (cost().device_state_bytes, sl_kernel_args.device_table; launchers carve it
# with shaders/cuda/common/device_table.h). The backend's own allocator
# (engine/backend/cuda), which the pool uses, is not searched. Pinned host
# memory (cudaHostAlloc / cudaMallocHost / cudaFreeHost, the backend's
# host_alloc) is host memory and allowed.
. "$(dirname "$0")/lib.sh"
cd "$SRC"

# A call of a device allocator or of the backend's device alloc/free ops.
RUNTIME='cudaMalloc|cudaMallocAsync|cudaMallocManaged|cudaMallocPitch|cudaMalloc3D|cudaMallocArray'
RUNTIME+='|cudaMalloc3DArray|cudaMallocMipmappedArray|cudaMallocFromPoolAsync'
RUNTIME+='|cudaFree|cudaFreeAsync|cudaFreeArray|cudaFreeMipmappedArray'
DRIVER='cuMemAlloc[A-Za-z0-9_]*|cuMemFree[A-Za-z0-9_]*|cuMemCreate|cuMemMap'
PATTERN="\\b($RUNTIME|$DRIVER)[[:space:]]*\\(|->[[:space:]]*(alloc|free)[[:space:]]*\\("

# The pattern itself: it finds the calls and leaves host allocations alone.
for line in 'e = cudaMalloc((void **)&p, 8);' 'cudaFree(s->valid);' 'cudaFreeAsync(d, st);' \
            'cudaMallocAsync(&p, n, st)' 'c->backend->ops->alloc(c->backend, need, &p, err);' \
            'b->ops->free(b, p, n);' 'cuMemAlloc_v2(&d, n);'; do
  if grep -qE "$PATTERN" <<<"$line"; then ok "the search finds: $line"
  else not_ok "the search misses: $line"; fi
done
for line in 'cudaFreeHost(st->h_err);' 'cudaHostAlloc((void **)&h, n, 0);' 'cudaMallocHost(&p, n);' \
            'ops->host_alloc(b, n, &p, err);' 'ops->host_free(b, p, n);' '/* 256 is cudaMalloc'"'"'s own */'; do
  if grep -qE "$PATTERN" <<<"$line"; then not_ok "the search wrongly finds: $line"
  else ok "the search leaves alone: $line"; fi
done

hits=$(grep -rnE --include='*.c' --include='*.h' --include='*.cu' --include='*.cuh' "$PATTERN" shaders nodes)
if [ -z "$hits" ]; then
  ok "no launcher or node allocates device memory (shaders/, nodes/)"
else
  not_ok "device memory allocated outside the run's pool (carve it from the node's device table):"
  printf '%s\n' "$hits" | sed 's/^/    /'
fi
finish
