/* Streams of variable-size items as graph outputs (issue 9): the run's
 * write_h5 appends them to results.h5's ragged layout (a group NAME with
 * bytes, offsets, first_position, n_positions), which is read back here
 * with HDF5 and checked against the closed form of the test nodes defined
 * below, over chunk sizes that cut their blocks every way, 1 and 2 threads,
 * on the CPU backend and on the CPU backend with device memory (the
 * writer's input staged). Also what is refused: a stream that is not in
 * the packed layout, items that overlap, and such an output where no sink
 * writes it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <cmocka.h>
#include <hdf5.h>
#include <stdlib.h>

#include "engine/exec/sinks.h"
#include "tests/unit/run_support.h"
#include "tests/unit/test_support.h"

#define NPOS 37
#define ITEM 6
#define BLOCK 5 /* positions a block */

/* ---- t_blocks: one item per block of BLOCK positions (the last one
 * shorter), every third block left out (a stream may have gaps). Position
 * p contributes (v mod 5) * scale bytes (v + j) mod 256, v = p * ITEM (the
 * ramp's element 0 of p, mod 1024). A call emits every block that overlaps
 * its positions, the one that began in an earlier call again (the writer
 * keeps it once). t_bigblocks: scale 200,000, items of up to 4 MB, more
 * than the writer's 1 MiB buffer. t_overlap: each block emitted at its
 * first position and again one position later (overlapping). t_loose: the
 * bytes alone, not in the packed layout. */
static int64_t position_value(int64_t p) { return (int64_t)ramp_expected(p, ITEM, 0); }

static int64_t scale_of(const sl_node *n) { return strcmp(n->desc->type, "t_bigblocks") ? 1 : 200000; }

static int64_t position_bytes(int64_t p, int64_t scale, uint8_t *out) {
  const int64_t v = position_value(p), n = (v % 5) * scale;
  for (int64_t j = 0; out && j < n; j++) out[j] = (uint8_t)(v + j);
  return n;
}

static bool block_left_out(int64_t b) { return b % 3 == 2; }
static int64_t block_end(int64_t b) { return (b + 1) * BLOCK < NPOS ? (b + 1) * BLOCK : NPOS; }

/* Block b's bytes into out (NULL: only counted). */
static int64_t block_bytes(int64_t b, int64_t scale, uint8_t *out) {
  int64_t w = 0;
  for (int64_t p = b * BLOCK; p < block_end(b); p++) w += position_bytes(p, scale, out ? out + w : NULL);
  return w;
}

/* The blocks a call over `positions` positions may touch, and their bytes. */
static int64_t blocks_bound(const sl_node *n, int port, int64_t positions) {
  (void)port;
  return sl_packed_bound(2 * (positions / BLOCK + 2), 4 * BLOCK * scale_of(n));
}

static sl_code blocks_infer(sl_node *n, sl_error *err) {
  const sl_tensor_desc *x = &n->in[0];
  if (x->stream_rank != 1) return sl_fail(err, SL_ERR_PIPELINE, "x: streamed over one axis");
  int64_t dims[2] = {x->dims[0], blocks_bound(n, 0, 1)};
  n->out[0] = sl_desc_make(SL_U8, 2, dims, 1);
  return SL_OK;
}

static sl_code blocks_cpu(sl_kernel_args *a) {
  const int64_t scale = scale_of(a->node);
  const bool overlap = !strcmp(a->node->desc->type, "t_overlap");
  sl_packed_items *pk = a->out[0];
  const int64_t b0 = a->pos_start / BLOCK, b1 = (a->pos_start + a->pos_count - 1) / BLOCK;
  uint64_t n = 0;
  for (int64_t b = b0; b <= b1; b++) n += block_left_out(b) ? 0 : overlap ? 2 : 1;
  pk->n = n;
  pk->reserved = 0;
  uint64_t w = sizeof *pk + n * sizeof(sl_packed_entry), k = 0;
  for (int64_t b = b0; b <= b1; b++)
    for (int again = 0; !block_left_out(b) && again <= (overlap ? 1 : 0); again++) {
      const int64_t first = b * BLOCK + again, size = block_bytes(b, scale, (uint8_t *)a->out[0] + w);
      pk->entries[k++] = (sl_packed_entry){.offset = w, .size = (uint64_t)size, .first_position = first,
                                           .n_positions = block_end(b) - first, .origin = (uint64_t)b};
      w += (uint64_t)size;
    }
  a->out_bytes[0] = (int64_t)w;
  return SL_OK;
}

/* Position p's bytes, one after another, with no header or entries. */
static sl_code loose_cpu(sl_kernel_args *a) {
  int64_t w = 0;
  for (int64_t p = a->pos_start; p < a->pos_start + a->pos_count; p++)
    w += position_bytes(p, 1, (uint8_t *)a->out[0] + w);
  a->out_bytes[0] = w;
  return SL_OK;
}

static void no_cost(const sl_node *n, int64_t positions, sl_node_cost *c) {
  (void)n, (void)positions;
  memset(c, 0, sizeof *c);
}

static const sl_port_def x_in[] = {{"x", "streamed values", NULL, false}};
static const sl_port_def bytes_out[] = {{"bytes", "variable-size items", NULL, false}};

#define BLOCKS_NODE(NAME, TYPE, KERNEL)                                                                    \
  static const sl_node_desc NAME = {.type = TYPE, .doc = "test", .inputs = x_in, .n_inputs = 1,          \
                                    .outputs = bytes_out, .n_outputs = 1, .infer = blocks_infer,          \
                                    .cost = no_cost, .kernel = {[SL_BACKEND_CPU] = KERNEL},               \
                                    .out_bound = blocks_bound}
BLOCKS_NODE(blocks, "t_blocks", blocks_cpu);
BLOCKS_NODE(bigblocks, "t_bigblocks", blocks_cpu);
BLOCKS_NODE(overlap, "t_overlap", blocks_cpu);
BLOCKS_NODE(loose, "t_loose", loose_cpu);
#undef BLOCKS_NODE

static const sl_node_desc *const test_nodes[] = {&blocks, &bigblocks, &overlap, &loose};
static const sl_node_family test_family = {"test", test_nodes, SL_COUNT_OF(test_nodes)};

#define RAMP_NODE "  src: {type: ramp, params: {positions: [37], item_shape: [6], dtype: f64}}\n"

/* The pipeline in `nodes` run with its outputs written into a fresh
 * results.h5 under dir (finished when the run succeeded); the run's code. */
static sl_code run_written(const char *nodes, int64_t chunk, int threads, bool device, char *dir, size_t dir_len,
                           sl_run *run, sl_error *err) {
  char text[512], path[512], h5[600];
  snprintf(text, sizeof text, "pipeline: ragged\nnodes:\n" RAMP_NODE "%s", nodes);
  write_temp_file(path, sizeof path, "ragged.yaml", text);
  assert_int_equal(temp_dir_make(dir, dir_len, "/tmp/sluice-ragged-XXXXXX"), 0);
  snprintf(h5, sizeof h5, "%s/results.h5", dir);
  sl_output_target target;
  memset(&target, 0, sizeof target);
  snprintf(target.dir, sizeof target.dir, "%s", dir);
  sl_error_clear(err);
  assert_int_equal(sl_h5_writer_open(h5, NULL, 0, &target.results, err), SL_OK);
  sl_run_request req = {.file = path, .registry = registry_with(&test_family), .backend = SL_BACKEND_CPU,
                        .chunk_positions = chunk, .threads = threads, .outputs = &target,
                        .ops_override = device ? device_like_ops() : NULL};
  memset(run, 0, sizeof *run);
  sl_code rc = sl_run_pipeline(&req, run, err);
  if (rc == SL_OK) return sl_h5_writer_finish(target.results, run->result.outputs, run->result.n_outputs, err);
  sl_h5_writer_abandon(target.results);
  return rc;
}

/* 1-D dataset `name` of group g: its length, its values as `type` into a
 * buffer the caller frees. */
static void *read_set(hid_t g, const char *name, hid_t type, size_t size, int64_t *n) {
  hid_t ds = H5Dopen2(g, name, H5P_DEFAULT);
  if (ds < 0) fail_msg("no dataset %s in the ragged group", name);
  hid_t space = H5Dget_space(ds);
  hsize_t dims[1] = {0};
  assert_int_equal(H5Sget_simple_extent_ndims(space), 1);
  H5Sget_simple_extent_dims(space, dims, NULL);
  *n = (int64_t)dims[0];
  void *v = malloc(dims[0] * size + 1);
  assert_non_null(v);
  assert_true(H5Dread(ds, type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v) >= 0);
  H5Sclose(space);
  H5Dclose(ds);
  return v;
}

static void expect_str_attr(hid_t obj, const char *key, const char *want) {
  hid_t a = H5Aopen(obj, key, H5P_DEFAULT);
  if (a < 0) fail_msg("no attribute %s", key);
  hid_t t = H5Aget_type(a);
  char got[256] = {0};
  assert_true(H5Tget_size(t) < sizeof got);
  assert_true(H5Aread(a, t, got) >= 0);
  assert_string_equal(got, want);
  H5Tclose(t);
  H5Aclose(a);
}

/* Group `name` of dir's results.h5 against the closed form of t_blocks
 * (scale): every block not left out, in order, its bytes, positions and
 * offsets, and the group's attributes. */
static void expect_blocks_written(const char *dir, const char *name, const char *source, int64_t scale,
                                  const char *what) {
  char h5[600];
  snprintf(h5, sizeof h5, "%s/results.h5", dir);
  hid_t f = H5Fopen(h5, H5F_ACC_RDONLY, H5P_DEFAULT);
  assert_true(f >= 0);
  hid_t g = H5Gopen2(f, name, H5P_DEFAULT);
  if (g < 0) fail_msg("%s: no group %s in results.h5", what, name);
  int64_t n_bytes, n_offsets, n_first, n_npos;
  uint8_t *bytes = read_set(g, "bytes", H5T_NATIVE_UINT8, 1, &n_bytes);
  uint64_t *offsets = read_set(g, "offsets", H5T_NATIVE_UINT64, 8, &n_offsets);
  int64_t *first = read_set(g, "first_position", H5T_NATIVE_INT64, 8, &n_first);
  int64_t *npos = read_set(g, "n_positions", H5T_NATIVE_INT64, 8, &n_npos);
  uint8_t *want = malloc((size_t)(4 * BLOCK * scale));
  assert_non_null(want);
  int64_t items = 0, at = 0;
  assert_int_equal(offsets[0], 0);
  for (int64_t b = 0; b * BLOCK < NPOS; b++) {
    if (block_left_out(b)) continue;
    if (items >= n_first) fail_msg("%s: %lld items, block %lld missing", what, (long long)n_first, (long long)b);
    const int64_t size = block_bytes(b, scale, want);
    if (first[items] != b * BLOCK || npos[items] != block_end(b) - b * BLOCK)
      fail_msg("%s: item %lld holds positions %lld +%lld, not block %lld's", what, (long long)items,
               (long long)first[items], (long long)npos[items], (long long)b);
    if (offsets[items + 1] != (uint64_t)(at + size))
      fail_msg("%s: item %lld ends at %llu, not %lld", what, (long long)items,
               (unsigned long long)offsets[items + 1], (long long)(at + size));
    assert_true(at + size <= n_bytes);
    if (memcmp(bytes + at, want, (size_t)size))
      fail_msg("%s: item %lld's bytes differ from block %lld's", what, (long long)items, (long long)b);
    at += size;
    items++;
  }
  assert_int_equal(n_first, items);
  assert_int_equal(n_npos, items);
  assert_int_equal(n_offsets, items + 1);
  assert_int_equal(n_bytes, at);
  expect_str_attr(g, "layout", "ragged");
  expect_str_attr(g, "source", source);
  expect_str_attr(g, "dtype", "u8");
  int64_t scan[1] = {0};
  hid_t a = H5Aopen(g, "scan_shape", H5P_DEFAULT);
  assert_true(a >= 0 && H5Aread(a, H5T_NATIVE_INT64, scan) >= 0);
  assert_int_equal(scan[0], NPOS);
  H5Aclose(a);
  free(want);
  free(bytes);
  free(offsets);
  free(first);
  free(npos);
  H5Gclose(g);
  H5Fclose(f);
}

/* Every chunking that cuts the blocks differently (inside a block, on its
 * edge, one chunk), 1 and 2 threads, CPU and device memory: the items as
 * the closed form says; the run's result holds none of it; the writer's
 * buffers are planned as its state. */
static void test_ragged_items_written(void **state) {
  (void)state;
  static const int64_t chunks[] = {1, 3, 5, 7, 36, NPOS};
  for (size_t c = 0; c < SL_COUNT_OF(chunks); c++)
    for (int threads = 1; threads <= 2; threads++)
      for (int device = 0; device <= 1; device++) {
        char what[128], dir[256];
        snprintf(what, sizeof what, "chunks of %lld, %d threads%s", (long long)chunks[c], threads,
                 device ? ", device memory" : "");
        sl_run run;
        sl_error err;
        if (run_written("  b: {type: t_blocks, inputs: {x: src.out}}\noutputs: {items: b.bytes}\n", chunks[c],
                        threads, device, dir, sizeof dir, &run, &err) != SL_OK)
          fail_msg("%s: %s", what, err.msg);
        const sl_output_data *o = output(&run, "items");
        assert_true(o->written);
        assert_null(o->data);
        char type[64], want[64];
        sl_desc_format(&o->desc, type, sizeof type);
        snprintf(want, sizeof want, "u8[%d|%lld] variable", NPOS, (long long)sl_packed_bound(4, 4 * BLOCK));
        assert_string_equal(type, want);
        int w = sl_graph_find(run.graph, "items.h5");
        assert_true(w >= 0);
        assert_true(sl_graph_find(run.graph, "items.png") < 0); /* 2-D u8, but no image */
        sl_node_cost cost;
        run.graph->nodes[w].desc->cost(&run.graph->nodes[w], chunks[c], &cost);
        assert_int_equal(cost.state_bytes, sl_h5_ragged_behind_bytes(&run.graph->nodes[w].in[0]));
        assert_true(cost.state_bytes > 0);
        expect_blocks_written(dir, "items", "b.bytes", 1, what);
        sl_run_free(&run);
        assert_int_equal(temp_dir_remove(dir), 0);
      }
}

/* Items larger than the writer's 1 MiB buffer go straight to the file, in
 * order with the small ones that waited before them. */
static void test_ragged_large_items(void **state) {
  (void)state;
  static const int64_t chunks[] = {2, 11};
  for (size_t c = 0; c < SL_COUNT_OF(chunks); c++) {
    char what[64], dir[256];
    snprintf(what, sizeof what, "large items, chunks of %lld", (long long)chunks[c]);
    assert_true(block_bytes(1, 200000, NULL) > SL_H5_WRITE_BEHIND_BYTES);
    sl_run run;
    sl_error err;
    if (run_written("  b: {type: t_bigblocks, inputs: {x: src.out}}\noutputs: {big: b.bytes}\n", chunks[c], 1,
                    false, dir, sizeof dir, &run, &err) != SL_OK)
      fail_msg("%s: %s", what, err.msg);
    expect_blocks_written(dir, "big", "b.bytes", 200000, what);
    sl_run_free(&run);
    assert_int_equal(temp_dir_remove(dir), 0);
  }
}

/* A run whose writer must refuse: an internal error (the producer broke
 * the layout's contract) with `needle` in the message, naming the output. */
static void expect_refused(const char *nodes, const char *needle) {
  char dir[256];
  sl_run run;
  sl_error err;
  sl_code rc = run_written(nodes, 7, 1, false, dir, sizeof dir, &run, &err);
  if (rc != SL_ERR_INTERNAL || !strstr(err.msg, needle))
    fail_msg("expected an internal error with '%s', got %d '%s'", needle, rc, err.msg);
  assert_non_null(strstr(err.msg, "output 'x'"));
  sl_run_free(&run);
  assert_int_equal(temp_dir_remove(dir), 0);
}

static void test_ragged_refusals(void **state) {
  (void)state;
  expect_refused("  b: {type: t_loose, inputs: {x: src.out}}\noutputs: {x: b.bytes}\n", "not in the packed layout");
  expect_refused("  b: {type: t_overlap, inputs: {x: src.out}}\noutputs: {x: b.bytes}\n",
                 "overlaps an item written before it");
}

/* Without a sink (a library caller's run), such an output is refused: it is
 * never assembled in memory. */
static void test_ragged_unwritten_refused(void **state) {
  (void)state;
  char path[512];
  write_temp_file(path, sizeof path, "unwritten.yaml",
                  "pipeline: ragged\nnodes:\n" RAMP_NODE
                  "  b: {type: t_blocks, inputs: {x: src.out}}\noutputs: {items: b.bytes}\n");
  sl_run_request req = {.file = path, .registry = registry_with(&test_family), .backend = SL_BACKEND_CPU,
                        .chunk_positions = 7, .threads = 1};
  sl_run run;
  sl_error err;
  sl_error_clear(&err);
  memset(&run, 0, sizeof run);
  assert_int_equal(sl_run_pipeline(&req, &run, &err), SL_ERR_PIPELINE);
  assert_non_null(strstr(err.msg, "output 'items' is a stream of variable-size items"));
  sl_run_free(&run);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_ragged_items_written),
      cmocka_unit_test(test_ragged_large_items),
      cmocka_unit_test(test_ragged_refusals),
      cmocka_unit_test(test_ragged_unwritten_refused),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
