/* bslz4_decode: an encoded stream of stored chunks (bitshuffle-LZ4,
 * bitshuffle, or raw) to frames, in parallel across stored chunks. Plain
 * frames pass through unchanged, so one detector-input template serves
 * compressed and uncompressed files. The input is a variable-size output of
 * its producer: a packed buffer (sl_packed_items) of what it wrote
 * (args.in_bytes), every entry checked against it. Every stored chunk is
 * checked by the decoder; a malformed one fails the run with what the
 * producer calls it (the port's describe_origin: hdf5_source names the file,
 * dataset, stored chunk and frames it held).
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
  n->out[0] = sl_desc_decoded(x);
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
  c->bytes_read = n->in[0].encoding != SL_ENC_NONE ? sl_desc_encoded_bound(&n->in[0], positions)
                                                   : sl_desc_buffer_bytes(&n->in[0], positions);
  c->bytes_written = positions * sl_desc_item_bytes(&n->out[0]);
  c->ops = n->in[0].encoding == SL_ENC_NONE ? 0 : 2 * c->bytes_written;
  /* a partial stored chunk decodes through the worker's scratch of one
   * stored chunk, and with flag_counts read, a stored chunk's ones bitmap (a
   * bit per pixel) follows it (sl_worker_scratch; decode_range) */
  int64_t per = n->in[0].positions_per_stored_chunk > 0 ? n->in[0].positions_per_stored_chunk : 1;
  if (n->in[0].encoding != SL_ENC_NONE) c->per_worker_bytes = (per * sl_desc_item_bytes(&n->out[0]) + 63) / 64 * 64;
  if (n->out_used & 2u) {
    c->bytes_written += positions * sl_desc_item_bytes(&n->out[1]);
    c->per_worker_bytes += (int64_t)sl_ones_bitmap_bytes((size_t)(per * sl_desc_item_elems(&n->out[0])));
  }
#ifdef SLUICE_HAVE_CUDA
  /* CUDA: the error record and the entry and block tables of a call */
  c->device_state_bytes = sl_cuda_bslz4_decode_table_bytes(&n->in[0], positions);
#endif
}

typedef struct decode_job {
  const sl_kernel_args *a;
  sl_simd simd;
  int64_t frame_bytes, per;
  int64_t frame_elems, groups; /* pixels and flag groups of a frame */
  uint32_t *counts;            /* out[1] when flag_counts is read, else NULL */
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
    sl_packed_describe(&j->a->node->in[0], e->origin, e->first_position, e->n_positions, chunk, sizeof chunk);
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
                            uint8_t *dst, uint64_t skip, uint64_t want, uint8_t *worker_scratch,
                            uint8_t *ones, sl_error *err) {
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
    if (!worker_scratch) return sl_fail(err, SL_ERR_INTERNAL, "no scratch lent for a partial stored chunk");
    scratch = target = worker_scratch;
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
  return rc;
}

static void decode_range(void *ctx, int64_t begin, int64_t end, int worker) {
  decode_job *j = ctx;
  const sl_kernel_args *a = j->a;
  const sl_packed_items *pk = a->in[0];
  uint8_t *out = a->out[0];
  /* The worker's lent scratch (decode_cost): a stored chunk, then its ones
   * bitmap when flag counts are made. */
  uint8_t *chunk_scratch = sl_worker_scratch(a, worker);
  uint8_t *ones = chunk_scratch && j->counts ? chunk_scratch + (j->per * j->frame_bytes + 63) / 64 * 64 : NULL;
  for (int64_t i = begin; i < end && !j->failed; i++) {
    const sl_packed_entry *e = &pk->entries[i];
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
    if (decode_entry(j, e, src, out + (lo - a->pos_start) * j->frame_bytes, skip, want, chunk_scratch, ones,
                     &why) != SL_OK)
      fail_job(j, e, &why);
  }
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
  if (!a->worker_scratch)
    return sl_fail(a->err, SL_ERR_INTERNAL, "bslz4_decode: called without the workers' scratch");
  /* the choices are in sl_simd order */
  sl_code rc = sl_simd_resolve((sl_simd)bslz4_decode_params_of(a->node)->simd, &j.simd, a->err);
  if (rc != SL_OK) return rc;
  /* the entries must lie in what the producer wrote (args.in_bytes) */
  if ((rc = sl_packed_check(a->in[0], a->in_bytes[0], a->err)) != SL_OK) return rc;
  const sl_packed_items *pk = a->in[0];
  pthread_mutex_init(&j.lock, NULL);
  sl_error_clear(&j.first_error);
  a->backend->ops->parallel_for(a->backend, (int64_t)pk->n, 1, decode_range, &j);
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
    /* flag_counts unread: both kernels leave out[1] alone (j.counts NULL,
     * params.flag_counts false) */
    .omit_unread_outputs = 2u,
};
