#include "engine/core/tensor.h"

#include <stdio.h>
#include <string.h>

static const struct {
  const char *name;
  size_t size;
} k_dtypes[SL_DT_COUNT] = {
    [SL_DT_INVALID] = {"invalid", 0}, [SL_U8] = {"u8", 1},   [SL_U16] = {"u16", 2},
    [SL_U32] = {"u32", 4},           [SL_U64] = {"u64", 8}, [SL_I32] = {"i32", 4},
    [SL_I64] = {"i64", 8},           [SL_F32] = {"f32", 4}, [SL_F64] = {"f64", 8},
    [SL_C64] = {"c64", 8},
};

size_t sl_dtype_size(sl_dtype t) { return (t > 0 && t < SL_DT_COUNT) ? k_dtypes[t].size : 0; }

const char *sl_dtype_name(sl_dtype t) {
  return (t >= 0 && t < SL_DT_COUNT) ? k_dtypes[t].name : "invalid";
}

sl_dtype sl_dtype_parse(const char *name) {
  if (!name) return SL_DT_INVALID;
  for (int t = 1; t < SL_DT_COUNT; t++)
    if (strcmp(name, k_dtypes[t].name) == 0) return (sl_dtype)t;
  return SL_DT_INVALID;
}

int64_t sl_packed_bound(int64_t entries, int64_t item_bytes) {
  return (int64_t)sizeof(sl_packed_items) + entries * ((int64_t)sizeof(sl_packed_entry) + item_bytes + 8);
}

sl_code sl_packed_check(const void *buf, int64_t bytes, sl_error *err) {
  const sl_packed_items *pk = buf;
  uint64_t have = bytes > 0 ? (uint64_t)bytes : 0;
  if (have < sizeof *pk || pk->n > (have - sizeof *pk) / sizeof(sl_packed_entry))
    return sl_fail(err, SL_ERR_INTERNAL, "packed buffer of %llu bytes cannot hold its header and %llu entries",
                   (unsigned long long)have, have < sizeof *pk ? 0ull : (unsigned long long)pk->n);
  uint64_t data = sizeof *pk + pk->n * sizeof(sl_packed_entry);
  for (uint64_t i = 0; i < pk->n; i++) {
    const sl_packed_entry *e = &pk->entries[i];
    if (e->offset < data || e->offset > have || e->size > have - e->offset)
      return sl_fail(err, SL_ERR_INTERNAL,
                     "packed entry %llu out of range (offset %llu, %llu bytes, buffer of %llu bytes)",
                     (unsigned long long)i, (unsigned long long)e->offset, (unsigned long long)e->size,
                     (unsigned long long)have);
  }
  return SL_OK;
}

void sl_packed_describe(const sl_tensor_desc *d, uint64_t origin, int64_t first_position, int64_t n_positions,
                        char *buf, size_t n) {
  if (n == 0) return;
  if (d && d->describe_origin) {
    buf[0] = 0;
    d->describe_origin(d->origin_ctx, origin, first_position, n_positions, buf, n);
    return;
  }
  int64_t last;
  if (n_positions >= 1 && !__builtin_add_overflow(first_position, n_positions - 1, &last))
    snprintf(buf, n, "item %llu (positions %lld-%lld)", (unsigned long long)origin, (long long)first_position,
             (long long)last);
  else /* a broken entry's numbers as they came (its last position may not even be a number) */
    snprintf(buf, n, "item %llu (%lld positions from %lld)", (unsigned long long)origin, (long long)n_positions,
             (long long)first_position);
}

bool sl_size_mul(int64_t a, int64_t b, int64_t *out) {
  int64_t r;
  if (a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) || r >= ((int64_t)1 << 62)) return false;
  *out = r;
  return true;
}

sl_code sl_desc_check_size(const sl_tensor_desc *d, sl_error *err) {
  char shape[256];
  if (d->rank < 0 || d->rank > SL_MAX_RANK || d->stream_rank < 0 || d->stream_rank > d->rank)
    return sl_fail(err, SL_ERR_PIPELINE, "tensor of rank %d (%d scan axes) is not a valid shape",
                   d->rank, d->stream_rank);
  int64_t n = (int64_t)sl_dtype_size(d->dtype);
  if (n <= 0) n = 1;
  for (int i = 0; i < d->rank; i++)
    if (!sl_size_mul(n, d->dims[i], &n)) {
      sl_desc_format(d, shape, sizeof shape);
      return sl_fail(err, SL_ERR_PIPELINE,
                     "tensor %s is too large: its size does not fit in 64 bits (axis %d = %lld)",
                     shape, i, (long long)d->dims[i]);
    }
  return SL_OK;
}

int64_t sl_desc_positions(const sl_tensor_desc *d) {
  int64_t n = 1;
  for (int i = 0; i < d->stream_rank; i++) n *= d->dims[i];
  return n;
}

int64_t sl_desc_item_elems(const sl_tensor_desc *d) {
  int64_t n = 1;
  for (int i = d->stream_rank; i < d->rank; i++) n *= d->dims[i];
  return n;
}

int64_t sl_desc_item_bytes(const sl_tensor_desc *d) {
  return sl_desc_item_elems(d) * (int64_t)sl_dtype_size(d->dtype);
}

int64_t sl_desc_elems(const sl_tensor_desc *d) {
  return sl_desc_positions(d) * sl_desc_item_elems(d);
}

int64_t sl_desc_bytes(const sl_tensor_desc *d) {
  return sl_desc_elems(d) * (int64_t)sl_dtype_size(d->dtype);
}

bool sl_desc_equal_shape(const sl_tensor_desc *a, const sl_tensor_desc *b) {
  if (a->rank != b->rank || a->stream_rank != b->stream_rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (a->dims[i] != b->dims[i]) return false;
  return true;
}

const char *sl_desc_axis_name(const sl_tensor_desc *d) {
  return d->stream_axis ? d->stream_axis : "scan";
}

bool sl_desc_same_axis(const sl_tensor_desc *a, const sl_tensor_desc *b) {
  return !strcmp(sl_desc_axis_name(a), sl_desc_axis_name(b));
}

void sl_desc_format(const sl_tensor_desc *d, char *buf, size_t n) {
  size_t o = 0;
  int k = snprintf(buf, n, "%s[", sl_dtype_name(d->dtype));
  if (k > 0) o += (size_t)k;
  for (int i = 0; i < d->rank && o < n; i++) {
    const char *sep = i == 0 ? "" : (i == d->stream_rank ? "|" : ",");
    k = snprintf(buf + o, n - o, "%s%lld", sep, (long long)d->dims[i]);
    if (k > 0) o += (size_t)k;
  }
  if (o < n) snprintf(buf + o, n - o, "%s]", (d->stream_rank == d->rank && d->rank > 0) ? "|" : "");
  if (d->stream_rank && d->stream_axis) {
    size_t len = strlen(buf);
    if (len < n) snprintf(buf + len, n - len, " over %s", d->stream_axis);
  }
  if (d->encoding != SL_ENC_NONE) {
    size_t len = strlen(buf);
    if (len < n) snprintf(buf + len, n - len, " %s", sl_encoding_name(d->encoding));
  } else if (d->variable) { /* the last axis is a bound, not a size */
    size_t len = strlen(buf);
    if (len < n) snprintf(buf + len, n - len, " variable");
  }
}

sl_tensor_desc sl_desc_make(sl_dtype t, int rank, const int64_t *dims, int stream_rank) {
  sl_tensor_desc d;
  memset(&d, 0, sizeof d);
  d.dtype = t;
  d.rank = rank;
  d.stream_rank = stream_rank;
  for (int i = 0; i < rank && i < SL_MAX_RANK; i++) d.dims[i] = dims[i];
  return d;
}

const char *sl_encoding_name(sl_encoding e) {
  switch (e) {
    case SL_ENC_NONE: return "plain";
    case SL_ENC_RAW: return "raw";
    case SL_ENC_BSLZ4: return "bslz4";
    case SL_ENC_BITSHUFFLE: return "bitshuffle";
  }
  return "unknown";
}

int64_t sl_desc_buffer_bytes(const sl_tensor_desc *d, int64_t positions) {
  return d->stream_rank ? positions * sl_desc_item_bytes(d) : sl_desc_bytes(d);
}

int64_t sl_desc_encoded_entries(const sl_tensor_desc *d, int64_t positions) {
  int64_t per = d->positions_per_stored_chunk > 0 ? d->positions_per_stored_chunk : 1;
  int64_t fewest = d->min_positions_per_stored_chunk > 0 ? d->min_positions_per_stored_chunk : per;
  int64_t entries = (positions + fewest - 1) / fewest + (fewest > 1 ? 1 : 0);
  if (entries > positions) entries = positions;
  return entries < 1 ? 1 : entries;
}

int64_t sl_desc_encoded_bound(const sl_tensor_desc *d, int64_t positions) {
  return sl_packed_bound(sl_desc_encoded_entries(d, positions), d->max_stored_chunk_bytes);
}

bool sl_desc_is_ragged(const sl_tensor_desc *d) {
  return d->variable && d->stream_rank > 0 && d->encoding == SL_ENC_NONE;
}

sl_tensor_desc sl_desc_decoded(const sl_tensor_desc *d) {
  sl_tensor_desc out = *d;
  out.encoding = SL_ENC_NONE;
  out.positions_per_stored_chunk = 0;
  out.min_positions_per_stored_chunk = 0;
  out.max_stored_chunk_bytes = 0;
  out.encoded_block_elems = 0;
  out.describe_origin = NULL;
  out.origin_ctx = NULL;
  out.variable = false;
  return out;
}
