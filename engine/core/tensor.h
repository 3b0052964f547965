/* Element types and tensor descriptors carried by ports.
 * A streamed tensor has `stream_rank` leading axes of scan positions; data moves
 * through the graph in chunks of consecutive (C-order flattened) positions.
 * The remaining axes are the "item" every position carries (a detector frame,
 * a scalar). A whole tensor (stream_rank 0) exists at once. */
#ifndef SL_TENSOR_H
#define SL_TENSOR_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/status.h"

typedef enum sl_dtype {
  SL_DT_INVALID = 0,
  SL_U8, SL_U16, SL_U32, SL_U64, SL_I32, SL_I64, SL_F32, SL_F64, SL_C64,
  SL_DT_COUNT
} sl_dtype;

size_t sl_dtype_size(sl_dtype t);
const char *sl_dtype_name(sl_dtype t);
sl_dtype sl_dtype_parse(const char *name); /* SL_DT_INVALID if unknown */

#define SL_MAX_RANK 8

/* How a streamed port's data is stored in its buffers. Encoded streams carry
 * stored (possibly compressed) blocks of positions, e.g. the chunks of an
 * acquisition as read from a file, in the packed layout below: they are
 * variable-size outputs (sl_node_desc.out_bound); dtype and dims describe
 * the data once decoded. */
typedef enum sl_encoding {
  SL_ENC_NONE = 0,   /* plain elements */
  SL_ENC_RAW,        /* stored blocks, uncompressed */
  SL_ENC_BSLZ4,      /* stored blocks, bitshuffle-LZ4 (docs/formats/bitshuffle-lz4.md) */
  SL_ENC_BITSHUFFLE  /* stored blocks, bitshuffle without compression */
} sl_encoding;

const char *sl_encoding_name(sl_encoding e);

/* Writes what packed entry `origin` (positions [first_position,
 * first_position + n_positions)) is, e.g. "FILE:DATASET, stored chunk K
 * (frames A-B)", into buf (n bytes, always terminated). */
typedef void (*sl_origin_describe_fn)(const void *ctx, uint64_t origin, int64_t first_position,
                                      int64_t n_positions, char *buf, size_t n);

typedef struct sl_tensor_desc {
  sl_dtype dtype;
  int rank;
  int64_t dims[SL_MAX_RANK];
  int stream_rank; /* leading axes that stream in chunks; 0 = whole */
  /* Which stream the leading axes belong to: NULL for the acquisition's
   * scan, else the name a node gave a new stream (the stream node: e.g.
   * "pixels" for data made pixel-major by transpose_scan). The graph gives a
   * node's streamed outputs the stream of its streamed inputs; data on
   * different streams never meets in one node, and each pass over the data
   * streams one of them. */
  const char *stream_axis;
  /* Encoded streams only (a packed buffer of stored blocks per call): */
  sl_encoding encoding;
  int64_t positions_per_stored_chunk; /* chunks of the scan are multiples of it */
  int64_t min_positions_per_stored_chunk; /* the fewest positions a stored block
                                             holds (a file's end): bounds the
                                             entries per buffer */
  int64_t max_stored_chunk_bytes;     /* the largest stored block */
  int64_t encoded_block_elems;        /* bitshuffle block size (0 = default) */
  /* Optional: what a packed entry's origin (sl_packed_entry.origin) is, in
   * words, for consumers' error messages: the producer sets it (consumers'
   * inputs copy it with the descriptor) and keeps `origin_ctx` alive while
   * the graph runs. NULL: entries are named by their origin number. */
  sl_origin_describe_fn describe_origin;
  const void *origin_ctx;
  /* A fact some producers know when planning (e.g. a detector's bad-pixel
   * count from its file's metadata): at most nonzero_bound elements of this
   * whole tensor are nonzero, when nonzero_known. A consumer may size its
   * state by it, and then checks it when it sees the data. */
  bool nonzero_known;
  int64_t nonzero_bound;
  /* A variable-size port (its producer has out_bound; the graph sets this
   * after the producer's infer, so its consumers' inputs carry it): a call's
   * buffer holds what the producer wrote (args.in_bytes), at most the bound.
   * For a plain (not encoded) streamed one the item axis is the bound's
   * bytes per position, and a graph output of it must hold its calls' items
   * in the packed layout below: results.h5 keeps them as ragged items. */
  bool variable;
} sl_tensor_desc;

/* The packed layout: the variable-size items of one call (a chunk of a
 * stream), in one buffer: a header, then `n` entries, then the items' bytes.
 * An encoded stream's buffers hold it (one item per stored block); any
 * variable-size output may. Offsets are from the start of the buffer; the
 * producer reports the buffer's bytes (header, entries and items) as what it
 * wrote (args.out_bytes), and a consumer checks every entry against what it
 * got (sl_packed_check). Shared with device kernels: a change of layout
 * bumps SL_KERNEL_ABI_VERSION (kernel_abi.h). */
typedef struct sl_packed_entry {
  uint64_t offset, size;   /* of the item's bytes, from the start of the buffer */
  uint32_t flags;          /* SL_PACKED_* */
  uint32_t reserved;       /* 0 */
  int64_t first_position;  /* stream position of its first position */
  int64_t n_positions;     /* positions it holds */
  /* What the producer calls it (an acquisition's stored chunk index, a
   * block number): named in words by the port's describe_origin. */
  uint64_t origin;
} sl_packed_entry;

/* The item's bytes are not encoded (their writer skipped the codec, as HDF5
 * does for a chunk that would not compress): the decoder copies them. */
#define SL_PACKED_STORED_RAW 1u

typedef struct sl_packed_items {
  uint64_t n;
  uint64_t reserved;
  sl_packed_entry entries[];
} sl_packed_items;

/* Bytes of a packed buffer of `entries` items of at most `item_bytes` each
 * (header, entries, and 8 bytes of alignment slack per item). */
int64_t sl_packed_bound(int64_t entries, int64_t item_bytes);
/* The header and entries of a packed buffer of `bytes` bytes (what its
 * producer wrote): SL_ERR_INTERNAL unless the entries and every item lie
 * inside it. */
sl_code sl_packed_check(const void *buf, int64_t bytes, sl_error *err);
/* What entry `origin` of an encoded port `d` is, in words: the producer's
 * describe_origin, else "item ORIGIN (positions A-B)". */
void sl_packed_describe(const sl_tensor_desc *d, uint64_t origin, int64_t first_position, int64_t n_positions,
                        char *buf, size_t n);

/* a * b for sizes: false (and *out untouched) when either is negative or the
 * product does not fit in int64 with room to spare (below 2^62, so that
 * byte counts and sums of a few buffers cannot overflow either). Every
 * product of sizes read from a file or a param goes through this. */
bool sl_size_mul(int64_t a, int64_t b, int64_t *out);
/* Checks that every dim is >= 0 and that the elements and bytes of the whole
 * tensor fit (sl_size_mul); SL_ERR_PIPELINE naming the shape otherwise. The
 * graph checks every port after infer, so the planner and kernels can multiply
 * sizes freely. */
sl_code sl_desc_check_size(const sl_tensor_desc *d, sl_error *err);

/* Number of scan positions (product of the stream axes; 1 for whole). */
int64_t sl_desc_positions(const sl_tensor_desc *d);
/* Elements and bytes of one position's item (whole: of the tensor). */
int64_t sl_desc_item_elems(const sl_tensor_desc *d);
int64_t sl_desc_item_bytes(const sl_tensor_desc *d);
/* Bytes a buffer needs for `positions` scan positions of a plain streamed
 * port (positions * item bytes), or of a whole port (positions ignored).
 * Encoded ports are variable-size: their producer's out_bound sizes them. */
int64_t sl_desc_buffer_bytes(const sl_tensor_desc *d, int64_t positions);
/* Encoded streams: the most entries a call over `positions` positions holds
 * (a call may start inside one stored block and end inside another; each
 * entry holds at least one of its positions), and the most bytes its packed
 * buffer holds (sl_packed_bound of that many of the largest stored blocks):
 * what a producer of an encoded stream returns from out_bound. */
int64_t sl_desc_encoded_entries(const sl_tensor_desc *d, int64_t positions);
int64_t sl_desc_encoded_bound(const sl_tensor_desc *d, int64_t positions);
/* The descriptor of `d`'s data once decoded: encoding and its facts cleared. */
sl_tensor_desc sl_desc_decoded(const sl_tensor_desc *d);
/* Whether d is a stream of plain variable-size items (variable, streamed,
 * not encoded): results.h5 keeps it as ragged items (sl_h5_writer_ragged),
 * and it is never assembled in memory. */
bool sl_desc_is_ragged(const sl_tensor_desc *d);
/* Elements and bytes of the whole logical tensor. */
int64_t sl_desc_elems(const sl_tensor_desc *d);
int64_t sl_desc_bytes(const sl_tensor_desc *d);
bool sl_desc_equal_shape(const sl_tensor_desc *a, const sl_tensor_desc *b);
/* The stream's name: "scan" for the acquisition's (NULL), else its own. */
const char *sl_desc_axis_name(const sl_tensor_desc *d);
/* Whether two streamed descriptors stream over the same axis (name). */
bool sl_desc_same_axis(const sl_tensor_desc *a, const sl_tensor_desc *b);
/* "u16[512,512|192,192]": the bar separates stream axes from item axes;
 * a stream other than the scan is named after: "f32[36864|4096] over pixels";
 * an encoded stream's encoding after that ("u16[...] bitshuffle-lz4"), and a
 * plain variable-size port is "variable" (its last axis is a bound):
 * "u8[37|196] variable". */
void sl_desc_format(const sl_tensor_desc *d, char *buf, size_t n);
/* Convenience constructor: dims given as an array. */
sl_tensor_desc sl_desc_make(sl_dtype t, int rank, const int64_t *dims, int stream_rank);

#endif
