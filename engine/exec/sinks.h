/* Sinks: what a run leaves on disk. results.h5 holds one dataset per graph
 * output with units and provenance; every 2-D output also becomes a PNG. */
#ifndef SL_SINKS_H
#define SL_SINKS_H

#include "engine/exec/exec.h"

typedef struct sl_attr {
  const char *key;
  const char *value;
} sl_attr;

/* Writes `path` (the caller renames it into place). File attributes carry the
 * run's provenance. */
sl_code sl_write_results_h5(const char *path, const sl_output_data *outs, int n,
                            const sl_attr *file_attrs, int n_attrs, sl_error *err);
/* 8-bit grayscale PNG of a 2-D real tensor, scaled from its min to its max. */
sl_code sl_write_png(const char *path, const sl_output_data *out, sl_error *err);
/* Is this output drawn as a PNG? (rank 2, real) */
bool sl_output_is_image(const sl_output_data *out);

#endif
