/* Detector masks read from files: NumPy .npy (npy.h), 8-bit grayscale PNG,
 * or a 2-D HDF5 dataset named as `file.h5:/path/to/dataset`.
 * Every reader checks the shape against the detector and names the file. */
#ifndef SL_MASK_FILE_H
#define SL_MASK_FILE_H

#include <stdint.h>

#include "engine/core/status.h"

/* Reads an H x W mask (nonzero = included) from `spec`:
 *  - `file.h5:/group/dataset` (file part ending .h5, .hdf5, .hdf, .nxs, .emd,
 *    .cxi): a 2-D dataset of u8/u16/u32/f32/f64 elements (NaN refused);
 *  - `file.png`: a grayscale PNG without alpha (8-bit; 1, 2, 4 and 16-bit
 *    grayscale are accepted too);
 *  - anything else: a .npy file (see npy.h).
 * On success, if `mask` is not NULL, *mask is a malloc'd H*W array of 0/1.
 * Codes: SL_ERR_IO (cannot open or read), SL_ERR_FORMAT (malformed or
 * unsupported), SL_ERR_PIPELINE (shape is not H x W, or an HDF5 file named
 * without a dataset). */
sl_code sl_mask_file_read(const char *spec, int64_t h, int64_t w, uint8_t **mask, sl_error *err);

#endif
