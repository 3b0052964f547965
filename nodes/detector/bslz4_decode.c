/* bslz4_decode: an encoded stream of stored chunks (bitshuffle-LZ4,
 * bitshuffle, or raw) to frames, in parallel across stored chunks. Plain
 * frames pass through unchanged, so one detector-input template serves
 * compressed and uncompressed files. Every stored chunk is checked by the
 * decoder; a malformed one fails the run with the file, dataset, stored chunk
 * and frames it held.
 *
 * With few stored chunks per worker, workers share chunks in pieces of
 * blocks (plan_pieces), so that a chunk of the scan of 7 frames is not split
 * 4 + 3 over two workers.
 *
 * Beside the frames, when something reads it, the `flag_counts` output
 * (flag_counts.h): per frame and group of 1024 pixels, how many hold the
 * dtype's maximum, taken from the AND of each block's bit-rows while the
 * block is in cache, so that mask_correct finds flagged pixels without
 * reading the frames again. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/util.h"
#include "engine/graph/graph.h"
#include "engine/graph/node_params.h"
#include "nodes/codec/bslz4.h"
#include "nodes/common/cuda_glue.h"
#include "nodes/detector/flag_counts.h"
#include "shaders/cuda/detector/bslz4_decode.h"

#define BSLZ4_DECODE_PARAMS(P)                                                            \
  P(ENUM, simd, "auto", SL_SIMD_PARAM_DOC, SL_SIMD_CHOICES)                               \
  P(BOOL, check_each_call, "false",                                                       \
    "CUDA: wait after every call so that a corrupt chunk fails at its own call instead "  \
    "of at the next phase boundary (slower; for debugging)", NULL)
SL_NODE_PARAMS(bslz4_decode_params, BSLZ4_DECODE_PARAMS)

static sl_code decode_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (!x->stream_rank || x->rank - x->stream_rank != 2 ||
      (x->dtype != SL_U8 && x->dtype != SL_U16 && x->dtype != SL_U32)) {
    char buf[128];
    sl_desc_format(x, buf, sizeof buf);
    return sl_fail(err, SL_ERR_PIPELINE,
                   "input 'chunks' expects streamed u8, u16 or u32 detector frames (stored chunks "
                   "from hdf5_source), got %s", buf);
  }
  n->out[0] = *x;
  n->out[0].encoding = SL_ENC_NONE;
  n->out[0].positions_per_stored_chunk = 0;
  n->out[0].min_positions_per_stored_chunk = 0;
  n->out[0].max_stored_chunk_bytes = 0;
  n->out[0].encoded_block_elems = 0;
  /* flag_counts: the frames' stream axes, then one u32 per pixel group */
  sl_tensor_desc *fc = &n->out[1];
  *fc = n->out[0];
  fc->dtype = SL_U32;
  fc->rank = x->stream_rank + 1;
  fc->dims[x->stream_rank] = sl_flag_groups(x->dims[x->rank - 2] * x->dims[x->rank - 1]);
  sl_node_note(n, "decoded", "%s", x->encoding == SL_ENC_NONE ? "input was already plain frames"
                                                                : sl_encoding_name(x->encoding));
  return SL_OK;
}

static void decode_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  c->bytes_read = sl_desc_buffer_bytes(&n->in[0], positions);
  c->bytes_written = positions * sl_desc_item_bytes(&n->out[0]);
  c->ops = n->in[0].encoding == SL_ENC_NONE ? 0 : 2 * c->bytes_written;
  /* a partial last stored chunk decodes through scratch of one stored chunk,
   * and with flag_counts read, a stored chunk's ones bitmap (a bit per pixel) */
  int64_t per = n->in[0].positions_per_stored_chunk > 0 ? n->in[0].positions_per_stored_chunk : 1;
  c->per_worker_bytes = per * sl_desc_item_bytes(&n->out[0]);
  if (n->out_used & 2u) {
    c->bytes_written += positions * sl_desc_item_bytes(&n->out[1]);
    c->per_worker_bytes += (int64_t)sl_ones_bitmap_bytes((size_t)(per * sl_desc_item_elems(&n->out[0])));
  }
#ifdef SLUICE_HAVE_CUDA
  /* CUDA: the error record and the entry and block tables of a call */
  c->device_state_bytes = sl_cuda_bslz4_decode_table_bytes(&n->in[0], positions);
#endif
}

/* A piece of work: blocks [first_block, end_block) of a stored chunk that
 * decodes straight into the frames (whole: end_block == WHOLE, the chunk
 * through decode_entry). */
#define WHOLE UINT32_MAX
typedef struct decode_item {
  int64_t entry;
  uint32_t first_block, end_block;
} decode_item;

typedef struct decode_job {
  const sl_kernel_args *a;
  sl_simd simd;
  int64_t frame_bytes, per;
  int64_t frame_elems, groups; /* pixels and flag groups of a frame */
  uint32_t *counts;            /* out[1] when flag_counts is read, else NULL */
  const decode_item *items;    /* NULL: one whole item per entry */
  pthread_mutex_t lock;
  bool failed;
  sl_error first_error;
} decode_job;

static void fail_job(decode_job *j, const sl_packed_entry *e, const sl_error *why) {
  pthread_mutex_lock(&j->lock);
  if (!j->failed) {
    j->failed = true;
    j->first_error = *why;
    char chunk[768];
    sl_packed_entry_describe(e->where, e->stored_chunk, e->file_chunk, e->first_position,
                             e->n_positions, chunk, sizeof chunk);
    sl_fail(&j->first_error, why->code, "%s: %s", chunk, why->msg);
  }
  pthread_mutex_unlock(&j->lock);
}

/* The flag counts of frames [0, nframes) of the chunk of the scan, from
 * their decoded values. */
static void counts_by_value(const decode_job *j, const uint8_t *frames, int64_t first_frame,
                            int64_t nframes) {
  for (int64_t f = 0; f < nframes; f++)
    sl_flag_counts_of_frame(frames + f * j->frame_bytes, j->a->node->in[0].dtype, j->frame_elems,
                            j->counts + (first_frame + f) * j->groups);
}

/* Decodes one stored chunk and puts `want` bytes of its frames, starting
 * `skip` bytes in, at dst; with flag counts, those of its frames too (`ones`:
 * scratch for the stored chunk's ones bitmap). */
static sl_code decode_entry(const decode_job *j, const sl_packed_entry *e, const uint8_t *src,
                            uint8_t *dst, uint64_t skip, uint64_t want, uint8_t *ones, sl_error *err) {
  const sl_tensor_desc *in = &j->a->node->in[0];
  size_t elem = sl_dtype_size(in->dtype);
  uint64_t full = (uint64_t)j->per * (uint64_t)j->frame_bytes; /* storage frames of a chunk */
  const int64_t out_frame = (dst - (uint8_t *)j->a->out[0]) / j->frame_bytes;
  const int64_t nframes = (int64_t)(want / (uint64_t)j->frame_bytes);
  if ((e->flags & SL_PACKED_STORED_RAW) || in->encoding == SL_ENC_RAW) {
    if (e->size < skip + want)
      return sl_fail(err, SL_ERR_FORMAT, "stored raw (filter skipped) with %llu bytes, needs %llu",
                     (unsigned long long)e->size, (unsigned long long)(skip + want));
    memcpy(dst, src + skip, want);
    if (j->counts) counts_by_value(j, dst, out_frame, nframes);
    return SL_OK;
  }
  /* A stored chunk decodes to all its storage frames; when fewer belong to
   * this chunk of the scan (a file's last chunk, a chunk split between two
   * chunks of the scan), decode through scratch. */
  uint8_t *target = dst, *scratch = NULL;
  if (skip > 0 || want < full) {
    scratch = malloc(full);
    if (!scratch) return sl_fail(err, SL_ERR_NOMEM, "no memory for a %llu-byte stored chunk", (unsigned long long)full);
    target = scratch;
  }
  size_t got = 0;
  const sl_bslz4_opts opts = {.simd = j->simd, .ones = j->counts ? ones : NULL};
  sl_code rc = sl_encoded_chunk_decode_opts(src, e->size, in->encoding, elem, (size_t)in->encoded_block_elems,
                                            target, full, &got, &opts, err);
  if (rc == SL_OK && got != full)
    rc = sl_fail(err, SL_ERR_FORMAT, "decodes to %zu bytes, expected %llu (%lld frames of %lld bytes)", got,
                 (unsigned long long)full, (long long)j->per, (long long)j->frame_bytes);
  if (rc == SL_OK && scratch) memcpy(dst, scratch + skip, want);
  if (rc == SL_OK && j->counts) {
    const int64_t skip_frames = (int64_t)(skip / (uint64_t)j->frame_bytes);
    for (int64_t f = 0; f < nframes; f++)
      sl_flag_counts_from_bitmap(ones, (uint64_t)((skip_frames + f) * j->frame_elems), j->frame_elems,
                                 j->counts + (out_frame + f) * j->groups);
  }
  free(scratch);
  return rc;
}

/* Blocks [b0, b1) of a stored chunk whose frames all belong to this chunk
 * of the scan (dst: its first frame's place), and with flag counts, their
 * pixels' share of those counts (added: other pieces hold the rest). */
static sl_code decode_piece(const decode_job *j, const sl_packed_entry *e, const uint8_t *src, uint8_t *dst,
                            size_t b0, size_t b1, uint8_t *ones, sl_error *err) {
  const size_t elem = sl_dtype_size(j->a->node->in[0].dtype);
  const size_t full = (size_t)(j->per * j->frame_bytes);
  const sl_bslz4_opts opts = {.simd = j->simd, .ones = j->counts ? ones : NULL};
  size_t got = 0;
  sl_code rc = sl_bslz4_decode_blocks(src, e->size, elem, dst, full, b0, b1, &got, &opts, err);
  if (rc != SL_OK || !j->counts) return rc;
  sl_bslz4_header h;
  if ((rc = sl_bslz4_read_header(src, e->size, elem, &h, err)) != SL_OK) return rc;
  const int64_t n = (int64_t)(full / elem), bs = (int64_t)(h.block_bytes / elem);
  const int64_t e0 = (int64_t)b0 * bs;
  const int64_t e1 = b1 >= sl_bslz4_block_count(&h, elem) ? n : (int64_t)b1 * bs; /* the tail: the last piece */
  const int64_t out_frame = (dst - (uint8_t *)j->a->out[0]) / j->frame_bytes;
  for (int64_t f = e0 / j->frame_elems; f * j->frame_elems < e1; f++) {
    const int64_t f0 = f * j->frame_elems;
    const int64_t lo = e0 > f0 ? e0 - f0 : 0, hi = e1 - f0 < j->frame_elems ? e1 - f0 : j->frame_elems;
    sl_flag_counts_add_range(ones, (uint64_t)f0, lo, hi, j->counts + (out_frame + f) * j->groups);
  }
  return SL_OK;
}

/* A stored chunk's ones bitmap up to this size lives on the stack (one frame
 * of 256 x 256 pixels). */
#define ONES_STACK_BYTES 8192

static void decode_range(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  decode_job *j = ctx;
  const sl_kernel_args *a = j->a;
  const sl_packed_chunks *pk = a->in[0];
  uint8_t *out = a->out[0];
  uint64_t ones_stack[ONES_STACK_BYTES / 8];
  uint8_t *ones = (uint8_t *)ones_stack, *ones_heap = NULL;
  if (j->counts) {
    size_t bytes = sl_ones_bitmap_bytes((size_t)(j->per * j->frame_elems));
    if (bytes > sizeof ones_stack) {
      ones = ones_heap = malloc(bytes);
      if (!ones) {
        sl_error why;
        sl_error_clear(&why);
        sl_fail(&why, SL_ERR_NOMEM, "no memory for a %zu-byte flag bitmap", bytes);
        fail_job(j, &pk->entries[j->items ? j->items[begin].entry : begin], &why);
        return;
      }
    }
  }
  for (int64_t it = begin; it < end && !j->failed; it++) {
    const decode_item item = j->items ? j->items[it] : (decode_item){it, 0, WHOLE};
    const sl_packed_entry *e = &pk->entries[item.entry];
    sl_error why;
    sl_error_clear(&why);
    int64_t lo = e->first_position > a->pos_start ? e->first_position : a->pos_start;
    int64_t hi = e->first_position + e->n_positions;
    if (hi > a->pos_start + a->pos_count) hi = a->pos_start + a->pos_count;
    if (hi <= lo) {
      sl_fail(&why, SL_ERR_INTERNAL, "stored chunk holds no frame of this chunk of the scan");
      fail_job(j, e, &why);
      break;
    }
    const uint8_t *src = (const uint8_t *)pk + e->offset;
    uint64_t skip = (uint64_t)(lo - e->first_position) * (uint64_t)j->frame_bytes;
    uint64_t want = (uint64_t)(hi - lo) * (uint64_t)j->frame_bytes;
    uint8_t *dst = out + (lo - a->pos_start) * j->frame_bytes;
    sl_code rc = item.end_block == WHOLE
                     ? decode_entry(j, e, src, dst, skip, want, ones, &why)
                     : decode_piece(j, e, src, dst, item.first_block, item.end_block, ones, &why);
    if (rc != SL_OK) fail_job(j, e, &why);
  }
  free(ones_heap);
}

/* Workers share the stored chunks of a call in pieces of blocks when there
 * are few chunks per worker (a chunk of the scan of 7 one-frame stored
 * chunks over 2 workers would split 4 + 3): each bitshuffle-LZ4 chunk that
 * decodes straight into the frames is cut into pieces of about
 * total blocks / (4 * workers) blocks. The others stay whole. Returns the
 * items (malloc'd) and their number, or NULL when nothing is cut (or no
 * memory: whole chunks then, the same bytes). */
static decode_item *plan_pieces(const decode_job *j, int workers, int64_t *n_items) {
  const sl_kernel_args *a = j->a;
  const sl_packed_chunks *pk = a->in[0];
  const size_t elem = sl_dtype_size(a->node->in[0].dtype);
  const uint64_t full = (uint64_t)j->per * (uint64_t)j->frame_bytes;
  const int64_t n = (int64_t)pk->n;
  if (workers < 2 || n >= 4 * (int64_t)workers) return NULL;
  uint32_t *blocks = calloc((size_t)n, sizeof *blocks); /* 0: whole */
  if (!blocks) return NULL;
  int64_t total = 0;
  for (int64_t i = 0; i < n; i++) {
    const sl_packed_entry *e = &pk->entries[i];
    if (e->flags & SL_PACKED_STORED_RAW) continue;
    /* only a stored chunk whose frames all belong to this chunk of the scan */
    if (e->first_position < a->pos_start || e->first_position + j->per > a->pos_start + a->pos_count) continue;
    if (e->n_positions != j->per) continue;
    sl_bslz4_header h;
    sl_error ignored; /* a bad header: the whole decode says why */
    sl_error_clear(&ignored);
    if (sl_bslz4_read_header((const uint8_t *)pk + e->offset, e->size, elem, &h, &ignored) != SL_OK ||
        h.total_bytes != full)
      continue;
    size_t nb = sl_bslz4_block_count(&h, elem);
    if (nb < 2 || nb >= WHOLE) continue;
    blocks[i] = (uint32_t)nb;
    total += (int64_t)nb;
  }
  const int64_t target = (total + 4 * workers - 1) / (4 * workers);
  int64_t count = 0;
  for (int64_t i = 0; i < n; i++) count += blocks[i] ? (blocks[i] + target - 1) / target : 1;
  decode_item *items = target > 0 && count > n ? malloc((size_t)count * sizeof *items) : NULL;
  if (items) {
    int64_t k = 0;
    for (int64_t i = 0; i < n; i++) {
      if (!blocks[i]) {
        items[k++] = (decode_item){i, 0, WHOLE};
        continue;
      }
      for (uint32_t b = 0; b < blocks[i]; b += (uint32_t)target) {
        uint32_t e = b + (uint32_t)target < blocks[i] ? b + (uint32_t)target : blocks[i];
        items[k++] = (decode_item){i, b, e};
      }
    }
    *n_items = k;
  }
  free(blocks);
  return items;
}

static sl_code decode_cpu(sl_kernel_args *a) {
  const sl_tensor_desc *in = &a->node->in[0];
  int64_t frame_bytes = sl_desc_item_bytes(in);
  decode_job j;
  memset(&j, 0, sizeof j);
  j.a = a;
  j.frame_bytes = frame_bytes;
  j.frame_elems = sl_desc_item_elems(in);
  j.groups = sl_flag_groups(j.frame_elems);
  j.counts = (a->node->out_used & 2u) ? a->out[1] : NULL;
  if (in->encoding == SL_ENC_NONE) {
    memcpy(a->out[0], a->in[0], (size_t)(a->pos_count * frame_bytes));
    if (j.counts) counts_by_value(&j, a->out[0], 0, a->pos_count);
    return SL_OK;
  }
  j.per = in->positions_per_stored_chunk > 0 ? in->positions_per_stored_chunk : 1;
  /* the choices are in sl_simd order */
  sl_code rc = sl_simd_resolve((sl_simd)bslz4_decode_params_of(a->node)->simd, &j.simd, a->err);
  if (rc != SL_OK) return rc;
  const sl_packed_chunks *pk = a->in[0];
  pthread_mutex_init(&j.lock, NULL);
  sl_error_clear(&j.first_error);
  int64_t n_items = (int64_t)pk->n;
  decode_item *items = in->encoding == SL_ENC_BSLZ4
                           ? plan_pieces(&j, a->backend->ops->workers(a->backend), &n_items)
                           : NULL;
  j.items = items;
  if (items && j.counts) /* pieces add their share */
    memset(j.counts, 0, (size_t)(a->pos_count * j.groups) * sizeof *j.counts);
  a->backend->ops->parallel_for(a->backend, n_items, 1, decode_range, &j);
  free(items);
  pthread_mutex_destroy(&j.lock);
  if (j.failed) {
    *a->err = j.first_error;
    return j.first_error.code;
  }
  return SL_OK;
}

static const sl_port_def decode_in[] = {
    {"chunks", "stored chunks from hdf5_source (plain frames pass through)", NULL, false}};
static const sl_port_def decode_out[] = {
    {"frames", "decoded frames, same type and shape", "counts", false},
    {"flag_counts",
     "per frame, u32 per group of 1024 pixels (raster order): pixels at the dtype maximum "
     "(the flag value); for mask_correct's input 'flag_counts'; computed only when read",
     NULL, false}};

#ifdef SLUICE_HAVE_CUDA
/* CUDA: the launcher's plain parameters from this node. */
static sl_code decode_cuda(sl_kernel_args *a) {
  const sl_cuda_bslz4_decode_params p = {
      .chunks = a->node->in[0],
      .check_every_call = bslz4_decode_params_of(a->node)->check_each_call,
      .flag_counts = (a->node->out_used & 2u) != 0,
      .device_state = sl_glue_device_state(a)};
  return sl_cuda_bslz4_decode(&p, a);
}
#endif

const sl_node_desc sl_node_bslz4_decode = {
    .type = "bslz4_decode",
    .doc = "Decodes bitshuffle-LZ4 (and bitshuffle, raw) stored chunks to frames, exactly.",
    SL_PARAMS_DESC(bslz4_decode_params),
    .inputs = decode_in, .n_inputs = SL_COUNT_OF(decode_in),
    .outputs = decode_out, .n_outputs = SL_COUNT_OF(decode_out),
    .infer = decode_infer, .cost = decode_cost,
    .kernel = {[SL_BACKEND_CPU] = decode_cpu, [SL_BACKEND_CUDA] = SL_CUDA_KERNEL(decode_cuda)},
};
