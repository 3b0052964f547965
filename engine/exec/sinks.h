/* Sinks: what a run leaves on disk. results.h5 holds one dataset per graph
 * output with units and provenance; every 2-D output also becomes a PNG. */
#ifndef SL_SINKS_H
#define SL_SINKS_H

#include "engine/exec/exec.h"

typedef struct sl_attr {
  const char *key;
  const char *value;
} sl_attr;

/* results.h5 written as the run goes: streamed outputs chunk by chunk as
 * their positions complete (so they never need to fit in host memory),
 * whole ones at the end, then every dataset's attributes (unit, source,
 * provenance, ...), which are known only once the run has ended. */
typedef struct sl_h5_writer sl_h5_writer;

/* Creates `path` with the run's file attributes, for n_outputs datasets. */
sl_code sl_h5_writer_open(const char *path, const sl_attr *file_attrs, int n_attrs, int n_outputs,
                          sl_h5_writer **w, sl_error *err);
/* Dataset o with out's name, dtype and full shape (before its data). */
sl_code sl_h5_writer_create(sl_h5_writer *w, int o, const sl_output_data *out, sl_error *err);
/* Scan positions [start, start + count) of streamed output o (its leading
 * stream_rank axes are the scan): count items, contiguous in `data`. */
sl_code sl_h5_writer_positions(sl_h5_writer *w, int o, const sl_output_data *out, int64_t start,
                               int64_t count, const void *data, sl_error *err);
/* All of output o from out->data (created now if it was not). */
sl_code sl_h5_writer_whole(sl_h5_writer *w, int o, const sl_output_data *out, sl_error *err);
/* Every dataset's attributes from `outs` (n_outputs of them), and the file
 * closed; frees w. */
sl_code sl_h5_writer_finish(sl_h5_writer *w, const sl_output_data *outs, sl_error *err);
/* Closes what is open without finishing (the caller removes the file). */
void sl_h5_writer_abandon(sl_h5_writer *w);
/* Reads dataset out->name of `path` whole into data (sl_desc_bytes of out->desc). */
sl_code sl_h5_read_output(const char *path, const sl_output_data *out, void *data, sl_error *err);

/* Writes `path` at once from outputs in memory (the caller renames it into
 * place). File attributes carry the run's provenance. */
sl_code sl_write_results_h5(const char *path, const sl_output_data *outs, int n,
                            const sl_attr *file_attrs, int n_attrs, sl_error *err);
/* 8-bit grayscale PNG of a 2-D real tensor, scaled from its min to its max. */
sl_code sl_write_png(const char *path, const sl_output_data *out, sl_error *err);
/* Is this output drawn as a PNG? (rank 2, real) */
bool sl_output_is_image(const sl_output_data *out);

#endif
