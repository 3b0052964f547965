/* write_h5: a graph output into the run's results.h5, as a consumer of the
 * output like any other. A streamed output arrives chunk by chunk and is
 * written as its positions complete (through the writer's bounded
 * write-behind buffer, which the node declares as its state), so it never
 * needs to fit in host memory (a streamed image's range is folded on the
 * way, for its PNG); a whole output is written when it is made; an encoded
 * stream (an acquisition's frames as read) is written as its stored chunks,
 * not decoded; a stream of other variable-size items is appended to a
 * ragged layout (sl_h5_writer_ragged) as they come.
 * The run appends one per output (sl_graph_add_writers); its state is the
 * run's sl_output_target. Attributes known only at the end (provenance,
 * notes) are written when the run finishes the file. */
#include <string.h>

#include "engine/exec/sinks.h"
#include "engine/graph/graph.h"
#include "engine/graph/node.h"

#define WRITE_H5_PARAMS(P) P(STRING, output, NULL, "the graph output written (its dataset's name)", NULL)
SL_NODE_PARAMS(write_h5_params, WRITE_H5_PARAMS)

/* An encoded stream is written as its stored blocks (sl_h5_writer_stored),
 * which must be the chunks of one dataset: a stored block of fewer positions
 * than the others that cannot be the dataset's last (its positions are not
 * what the scan leaves over) is refused here, before anything is read; one
 * that can is checked when it is written. */
static sl_code write_h5_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *d = &n->in[0];
  if (d->encoding == SL_ENC_NONE) return SL_OK;
  const char *name = write_h5_params_of(n)->output;
  if (d->encoding != SL_ENC_BSLZ4 && d->encoding != SL_ENC_BITSHUFFLE && d->encoding != SL_ENC_RAW)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "output '%s' is encoded (%s), which results.h5 has no layout for: decode it first", name,
                   sl_encoding_name(d->encoding));
  const int64_t per = d->positions_per_stored_chunk > 0 ? d->positions_per_stored_chunk : 1;
  const int64_t fewest = d->min_positions_per_stored_chunk > 0 ? d->min_positions_per_stored_chunk : per;
  if (fewest < per && fewest != sl_desc_positions(d) % per)
    return sl_fail(err, SL_ERR_PIPELINE,
                   "output '%s' is written as the acquisition's stored chunks of %lld frames, but a data file "
                   "ends in a stored chunk of %lld frames inside the scan (its frames are not a multiple of its "
                   "chunks'), which is no chunk of one dataset: write the decoded frames instead",
                   name, (long long)per, (long long)fewest);
  return SL_OK;
}

/* Reads and writes the chunk (or the whole output; an encoded stream: its
 * stored bytes); holds the write-behind buffer of a streamed output for the
 * run (an encoded one writes each stored block as it comes, and holds
 * none); folds a streamed image's range (for its PNG) as it goes. */
/* The work of writing stored chunks: their bytes, and for each chunk its
 * own HDF5 call (H5Dwrite_chunk: the chunk index's entry, the file's
 * space) counted as this many bytes. Measured on the dev VM (bench_cost_model
 * at 2 threads): 4,096 chunks of up to 7,139 bytes in 14.1 ms, 480 of up to
 * 505 bytes in 0.54 ms, i.e. 0.35 ns a byte and 0.93 us a chunk, 2.7 KB of
 * bytes' time. By bytes alone the small acquisition was estimated at a
 * quarter of what it took; calibrate's samples (frames of one size) fit
 * the rate of the sum. */
#define STORED_CHUNK_OP_BYTES 2700

static void write_h5_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  memset(c, 0, sizeof *c);
  const sl_tensor_desc *d = &n->in[0];
  if (d->encoding != SL_ENC_NONE) {
    c->bytes_read = c->bytes_written = sl_desc_encoded_bound(d, positions);
    const int64_t per = d->positions_per_stored_chunk > 0 ? d->positions_per_stored_chunk : 1;
    c->ops = c->bytes_written + (positions + per - 1) / per * STORED_CHUNK_OP_BYTES;
    c->library_bytes = sl_h5_stored_library_bytes((sl_desc_positions(d) + per - 1) / per);
    return;
  }
  c->bytes_read = sl_desc_buffer_bytes(d, positions);
  c->bytes_written = c->bytes_read;
  if (sl_desc_is_ragged(d)) { /* ragged items: at most the bound's bytes */
    c->state_bytes = sl_h5_ragged_behind_bytes(d);
    c->library_bytes = sl_h5_stored_library_bytes(sl_h5_ragged_chunks(d));
    return;
  }
  if (d->stream_rank && sl_output_is_image(d)) c->ops = positions * sl_desc_item_elems(d);
  c->state_bytes = d->stream_rank ? sl_h5_write_behind_bytes(d) : 0;
}

/* Stored chunks are priced apart: a byte written for every byte read, into
 * a file as large as the acquisition's chunks, where plain outputs are small
 * beside their inputs (sluice calibrate's stored.yaml). */
static const char *write_h5_rate_variant(const sl_node *n) {
  return n->in[0].encoding != SL_ENC_NONE ? "stored" : NULL;
}

static sl_code write_h5_cpu(sl_kernel_args *a) {
  const char *name = write_h5_params_of(a->node)->output;
  sl_output_target *t = a->state;
  if (!t || !t->results)
    return sl_fail(a->err, SL_ERR_INTERNAL, "no results.h5 to write output '%s' into (write_h5 is the run's)",
                   name);
  sl_tensor_desc d = a->node->in[0];
  if (d.encoding != SL_ENC_NONE)
    return sl_h5_writer_stored(t->results, name, &d, a->chunk, a->pos_start, a->pos_count, a->in[0], a->in_bytes[0],
                               a->err);
  if (sl_desc_is_ragged(&d))
    return sl_h5_writer_ragged(t->results, name, &d, a->chunk, a->pos_start, a->pos_count, a->in[0], a->in_bytes[0],
                               a->err);
  if (d.stream_rank)
    return sl_h5_writer_positions(t->results, name, &d, a->chunk, a->pos_start, a->pos_count, a->in[0], a->err);
  /* A variable-size output holds what its producer wrote (its first axis). */
  int64_t whole = sl_desc_bytes(&d);
  if (d.rank > 0 && a->in_bytes[0] < whole && d.dims[0] > 0)
    d.dims[0] = a->in_bytes[0] / (whole / d.dims[0]);
  return sl_h5_writer_whole(t->results, name, &d, a->in[0], a->err);
}

static const sl_port_def write_h5_in[] = {{"x", "the graph output, streamed, whole or encoded", NULL, false}};

const sl_node_desc sl_node_write_h5 = {
    .type = "write_h5",
    .doc = "A graph output into the run's results.h5 (appended by the run for every output; streamed "
           "outputs chunk by chunk; an encoded stream as its stored chunks, copied as they are; a stream "
           "of variable-size items as a ragged group: bytes, offsets, first_position, n_positions).",
    SL_PARAMS_DESC(write_h5_params),
    .inputs = write_h5_in, .n_inputs = SL_COUNT_OF(write_h5_in),
    .infer = write_h5_infer, .cost = write_h5_cost, .rate_variant = write_h5_rate_variant,
    .kernel = {[SL_BACKEND_CPU] = write_h5_cpu},
    .host = true,
    .sink = true,
    .cpu_serial = true,
};
