/* write_png: a 2-D real graph output as an 8-bit grayscale PNG, scaled from
 * its smallest to its largest finite value, as a consumer of the output like
 * any other. The run appends one per image output (sl_graph_add_writers);
 * its state is the run's sl_output_target.
 *
 * A whole image is drawn when it is made, from memory. A streamed one (a
 * scan image, or frames over a 1-D scan) is not held by this node: its
 * chunks are not looked at as they pass; after the last chunk, finalize
 * draws it in strips of at most SL_PNG_STRIP_BYTES of rows from results.h5's
 * writer: from its write-behind buffer, which holds an image of up to
 * SL_H5_IMAGE_BEHIND_BYTES whole, else read back from the file (reading
 * writes the waiting positions first), with the range write_h5 folded as it
 * wrote the chunks (sl_h5_writer_range; read back too, first, should it
 * lack positions). (The range used to be a min/max reduction over the
 * chunks: a host node with outputs on a device backend makes the device
 * drain at every chunk, which stalled the H200's whole stream; reading 2 MiB
 * of a 512 x 512 image twice costs nothing next to that.) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/core/util.h"
#include "engine/exec/sinks.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"

#define WRITE_PNG_PARAMS(P) P(STRING, output, NULL, "the graph output drawn (NAME.png)", NULL)
SL_NODE_PARAMS(write_png_params, WRITE_PNG_PARAMS)

static sl_code write_png_infer(sl_node *n, sl_error *err) {
  if (!sl_output_is_image(&n->in[0]) || n->in[0].encoding != SL_ENC_NONE)
    return sl_fail(err, SL_ERR_PIPELINE, "output '%s' is not a 2-D real image", write_png_params_of(n)->output);
  n->chunks_idle = n->in[0].stream_rank > 0; /* a streamed image is drawn by finalize */
  return SL_OK;
}

/* Reads the image once (a streamed one back from results.h5 after the last
 * chunk), converts every value to a pixel (a whole image's also once for its
 * range; a streamed one's range is write_h5's), writes a byte per pixel;
 * each worker holds zlib's state and a band (sl_png_worker_bytes) and, for a
 * streamed image larger than results.h5's writer holds, the node one strip
 * of rows read back. */
static void write_png_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const sl_tensor_desc *d = &n->in[0];
  int64_t bytes = sl_desc_buffer_bytes(d, positions);
  int64_t elems = d->stream_rank ? positions * sl_desc_item_elems(d) : sl_desc_elems(d);
  c->bytes_read = bytes;
  c->bytes_written = elems;
  c->ops = d->stream_rank ? elems : 2 * elems;
  int64_t strip = sl_png_strip_rows(d) * d->dims[1] * (int64_t)sl_dtype_size(d->dtype);
  const bool read_back = d->stream_rank && sl_h5_write_behind_bytes(d) < sl_desc_bytes(d);
  c->state_bytes = sl_png_bands_bytes(d) + (read_back ? strip : 0);
  c->per_worker_bytes = sl_png_worker_bytes(d->dims[1]);
}

static void png_path(const sl_kernel_args *a, const sl_output_target *t, char *path, size_t len) {
  snprintf(path, len, "%s/%s.png", t->dir, write_png_params_of(a->node)->output);
}

static sl_code no_target(const sl_kernel_args *a) {
  return sl_fail(a->err, SL_ERR_INTERNAL, "no output folder to draw '%s' into (write_png is the run's)",
                 write_png_params_of(a->node)->output);
}

/* Rows of a whole image in memory. */
static sl_code rows_in_memory(void *ctx, int64_t row0, int64_t n_rows, const void **rows, sl_error *err) {
  const sl_kernel_args *a = ctx;
  const sl_tensor_desc *d = &a->node->in[0];
  *rows = (const char *)a->in[0] + row0 * d->dims[1] * (int64_t)sl_dtype_size(d->dtype);
  (void)n_rows, (void)err;
  return SL_OK;
}

/* Rows of a streamed image: where results.h5's writer still holds them
 * (an image of up to SL_H5_IMAGE_BEHIND_BYTES), else read back from the
 * file into one strip (made at the first such read). */
typedef struct strip_reader {
  sl_h5_writer *results;
  const char *name;
  void *strip;
  size_t strip_bytes;
} strip_reader;

static sl_code rows_from_results(void *ctx, int64_t row0, int64_t n_rows, const void **rows, sl_error *err) {
  strip_reader *s = ctx;
  if ((*rows = sl_h5_writer_rows_held(s->results, s->name, row0, n_rows))) return SL_OK;
  if (!s->strip && !(s->strip = malloc(s->strip_bytes)))
    return sl_fail(err, SL_ERR_NOMEM, "no memory to draw output '%s'", s->name);
  *rows = s->strip;
  return sl_h5_writer_read_rows(s->results, s->name, row0, n_rows, s->strip, err);
}

/* Where the drawing's time went, for report.json. */
static void note_drawn(const sl_node *n, double range, const sl_png_times *t) {
  sl_node_note((sl_node *)n, "drawn", "range %.4f s, rows %.4f s, draw and deflate %.4f s, file %.4f s", range,
               t->rows, t->draw, t->file);
}

/* A whole image: its range, then the PNG. A streamed image's chunks: nothing
 * (finalize draws it). */
static sl_code write_png_cpu(sl_kernel_args *a) {
  const sl_tensor_desc *d = &a->node->in[0];
  if (d->stream_rank) return SL_OK;
  double t0 = sl_now(), lo = INFINITY, hi = -INFINITY;
  sl_values_range_on(a->backend, d->dtype, a->in[0], sl_desc_elems(d), &lo, &hi);
  const sl_output_target *t = a->state;
  if (!t) return no_target(a);
  char path[4352];
  png_path(a, t, path, sizeof path);
  const sl_png_workers workers = {a->backend, a->worker_scratch, a->worker_scratch_stride};
  sl_png_times times = {0};
  double range = sl_now() - t0;
  sl_code rc = sl_png_write(path, d, lo, hi, rows_in_memory, a, &workers, &times, a->err);
  if (rc == SL_OK) note_drawn(a->node, range, &times);
  return rc;
}

/* After the last chunk of a streamed image: low and high hold its range. */
static sl_code write_png_finalize(sl_kernel_args *a) {
  const sl_tensor_desc *d = &a->node->in[0];
  const sl_output_target *t = a->state;
  if (!t || !t->results) return no_target(a);
  char path[4352];
  png_path(a, t, path, sizeof path);
  double t0 = sl_now();
  strip_reader s = {t->results, write_png_params_of(a->node)->output, NULL,
                    (size_t)(sl_png_strip_rows(d) * d->dims[1]) * sl_dtype_size(d->dtype)};
  double lo = INFINITY, hi = -INFINITY;
  int64_t strip = sl_png_strip_rows(d);
  sl_code rc = SL_OK;
  /* write_h5 folded the range as the chunks passed; else it is read back */
  const bool ranged = sl_h5_writer_range(t->results, s.name, &lo, &hi);
  for (int64_t r = 0; r < d->dims[0] && rc == SL_OK && !ranged; r += strip) {
    int64_t n = d->dims[0] - r < strip ? d->dims[0] - r : strip;
    const void *rows;
    rc = rows_from_results(&s, r, n, &rows, a->err);
    if (rc == SL_OK) sl_values_range(d->dtype, rows, n * d->dims[1], &lo, &hi);
  }
  const sl_png_workers workers = {a->backend, a->worker_scratch, a->worker_scratch_stride};
  sl_png_times times = {0};
  double range = sl_now() - t0;
  if (rc == SL_OK) rc = sl_png_write(path, d, lo, hi, rows_from_results, &s, &workers, &times, a->err);
  if (rc == SL_OK) note_drawn(a->node, range, &times);
  free(s.strip);
  return rc;
}

static const sl_port_def write_png_in[] = {{"image", "the graph output: 2-D, real, streamed or whole", NULL, false}};

const sl_node_desc sl_node_write_png = {
    .type = "write_png",
    .doc = "A 2-D real graph output as an 8-bit grayscale PNG from its smallest to its largest finite value "
           "(appended by the run for every image output; a streamed image is drawn from results.h5 in row "
           "strips).",
    SL_PARAMS_DESC(write_png_params),
    .inputs = write_png_in, .n_inputs = SL_COUNT_OF(write_png_in),
    .infer = write_png_infer, .cost = write_png_cost,
    .kernel = {[SL_BACKEND_CPU] = write_png_cpu},
    .finalize = {[SL_BACKEND_CPU] = write_png_finalize},
    .host = true,
    .sink = true,
};
