/* Strict reader for NumPy .npy files holding a 2-D detector mask.
 * Every length in the file is checked: magic, version, header length, the
 * header dictionary (exactly 'descr', 'fortran_order', 'shape'), the shape
 * against the expected detector, and the data length against the shape.
 * Errors name the file and what is wrong. */
#ifndef SL_NPY_H
#define SL_NPY_H

#include <stdint.h>

#include "engine/core/status.h"

/* Reads an H x W mask from `path` (C order; element types u1/b1/u2/i4/f4/f8,
 * little endian). On success, if `mask` is not NULL, *mask is a malloc'd
 * H*W array of 0/1 (1 = element nonzero). NaN elements are an error.
 * Codes: SL_ERR_IO (cannot read), SL_ERR_FORMAT (malformed or unsupported
 * file), SL_ERR_PIPELINE (well-formed but the shape is not H x W). */
sl_code sl_npy_read_mask(const char *path, int64_t h, int64_t w, uint8_t **mask, sl_error *err);

#endif
