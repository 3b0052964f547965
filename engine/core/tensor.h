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

typedef enum sl_dtype {
  SL_DT_INVALID = 0,
  SL_U8, SL_U16, SL_U32, SL_U64, SL_I32, SL_I64, SL_F32, SL_F64, SL_C64,
  SL_DT_COUNT
} sl_dtype;

size_t sl_dtype_size(sl_dtype t);
const char *sl_dtype_name(sl_dtype t);
sl_dtype sl_dtype_parse(const char *name); /* SL_DT_INVALID if unknown */

#define SL_MAX_RANK 8

typedef struct sl_tensor_desc {
  sl_dtype dtype;
  int rank;
  int64_t dims[SL_MAX_RANK];
  int stream_rank; /* leading axes that stream in chunks; 0 = whole */
} sl_tensor_desc;

/* Number of scan positions (product of the stream axes; 1 for whole). */
int64_t sl_desc_positions(const sl_tensor_desc *d);
/* Elements and bytes of one position's item (whole: of the tensor). */
int64_t sl_desc_item_elems(const sl_tensor_desc *d);
int64_t sl_desc_item_bytes(const sl_tensor_desc *d);
/* Elements and bytes of the whole logical tensor. */
int64_t sl_desc_elems(const sl_tensor_desc *d);
int64_t sl_desc_bytes(const sl_tensor_desc *d);
bool sl_desc_equal_shape(const sl_tensor_desc *a, const sl_tensor_desc *b);
/* "u16[512,512|192,192]": the bar separates stream axes from item axes. */
void sl_desc_format(const sl_tensor_desc *d, char *buf, size_t n);
/* Convenience constructor: dims given as an array. */
sl_tensor_desc sl_desc_make(sl_dtype t, int rank, const int64_t *dims, int stream_rank);

#endif
