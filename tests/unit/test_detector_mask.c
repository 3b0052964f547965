/* detector_mask: the pixel mask of acquisitions written with the HDF5 C API
 * (test_h5_index.c's fixtures, whose pixel_mask holds 1, 4 and 2 at three
 * known pixels) against that mask written out by hand; a file without a
 * mask gives all good pixels; the dataset param; errors; cost. */
#define SL_H5_FIXTURES_ONLY
#include "test_h5_index.c"

#include "nodes/registry.h"
#include "tests/unit/node_harness.h"

extern const sl_node_desc sl_node_detector_mask;

/* A node of detector_mask on `path` (with `dataset` when not NULL); runs
 * infer. */
static sl_code mask_make(sl_node *n, const char *path, const char *dataset, sl_error *e) {
  char yaml[600];
  snprintf(yaml, sizeof yaml, "'%s'", path);
  kv over[2] = {{"path", yaml}, {"dataset", dataset}};
  return node_make(n, &sl_node_detector_mask, over, dataset ? 2 : 1, NULL, 0, e);
}

/* Runs the node (infer must pass) and returns its whole output, h * w bytes. */
static uint8_t *mask_run(const char *path, const char *dataset, int64_t h, int64_t w, sl_node *n) {
  sl_error e;
  sl_code rc = mask_make(n, path, dataset, &e);
  if (rc) print_error("detector_mask on %s: %s\n", path, e.msg);
  assert_int_equal(rc, SL_OK);
  assert_int_equal(n->out[0].dtype, SL_U8);
  assert_int_equal(n->out[0].rank, 2);
  assert_int_equal(n->out[0].stream_rank, 0);
  assert_int_equal(n->out[0].dims[0], h);
  assert_int_equal(n->out[0].dims[1], w);
  uint8_t *out = malloc((size_t)(h * w));
  memset(out, 0xA5, (size_t)(h * w));
  void *outs[1] = {out};
  assert_int_equal(run_whole(n, NULL, 0, outs, &e), SL_OK);
  return out;
}

/* The fixture's pixel_mask (fx_meta): nonzero at [3], [w + 5], [h * w - 1]. */
static void expected_mask(uint8_t *m, int64_t h, int64_t w) {
  memset(m, 0, (size_t)(h * w));
  m[3] = 1;
  m[w + 5] = 1;
  m[h * w - 1] = 1;
}

static void t_mask_from_master(void **state) {
  fx_opts o = {.n_files = 2, .frames = {3, 3}, .h = 16, .w = 12, .k = 1, .meta = true};
  char m[512];
  fx_write("dm", &o, m, sizeof m);
  sl_node n;
  uint8_t *got = mask_run(m, NULL, 16, 12, &n);
  uint8_t want[16 * 12];
  expected_mask(want, 16, 12);
  assert_memory_equal(got, want, sizeof want);
  const char *v = note(&n, "pixel_mask");
  assert_non_null(v);
  assert_non_null(strstr(v, "3 bad pixels from"));
  assert_non_null(strstr(v, "dm_master.h5"));
  free(got);
  node_free(&n);
}

static void t_no_mask_and_dataset_param(void **state) {
  fx_opts o = {.n_files = 1, .frames = {2}, .h = 5, .w = 7, .k = 1};
  char m[512];
  fx_write("dmnone", &o, m, sizeof m);
  sl_node n;
  uint8_t *got = mask_run(m, NULL, 5, 7, &n);
  for (int i = 0; i < 5 * 7; i++) assert_int_equal(got[i], 0);
  assert_non_null(strstr(note(&n, "pixel_mask"), "none in"));
  free(got);
  node_free(&n);

  /* One file, the frames at a path of their own, a mask next to them. */
  fx_opts p = {.n_files = 0, .frames = {2}, .h = 6, .w = 9, .k = 1, .meta = true, .dataset = "/scan/frames"};
  fx_write("dmds", &p, m, sizeof m);
  got = mask_run(m, "/scan/frames", 6, 9, &n);
  uint8_t want[6 * 9];
  expected_mask(want, 6, 9);
  assert_memory_equal(got, want, sizeof want);
  free(got);
  node_free(&n);
}

static void t_errors(void **state) {
  sl_node n;
  sl_error e;
  kv empty[] = {{"path", ""}};
  expect_node_error(&sl_node_detector_mask, empty, 1, NULL, 0, SL_ERR_PIPELINE,
                    "param 'path' is empty", NULL);
  char m[512];
  snprintf(m, sizeof m, "%s/absent_master.h5", fx_tmpdir());
  assert_int_equal(mask_make(&n, m, NULL, &e), SL_ERR_IO);
  node_free(&n);
  fx_opts o = {.n_files = 0, .frames = {2}, .h = 4, .w = 4, .k = 1, .dataset = "/scan/frames"};
  fx_write("dmbad", &o, m, sizeof m);
  assert_int_equal(mask_make(&n, m, "/scan/nothing", &e), SL_ERR_FORMAT);
  assert_non_null(strstr(e.msg, "no dataset /scan/nothing"));
  node_free(&n);
}

static void t_cost_and_descriptor(void **state) {
  fx_opts o = {.n_files = 1, .frames = {2}, .h = 10, .w = 6, .k = 1, .meta = true};
  char m[512];
  fx_write("dmcost", &o, m, sizeof m);
  sl_node n;
  sl_error e;
  assert_int_equal(mask_make(&n, m, NULL, &e), SL_OK);
  sl_node_cost c;
  n.desc->cost(&n, 7, &c);
  assert_int_equal(c.bytes_written, 60); /* one u8 per pixel, whatever the positions */
  assert_int_equal(c.bytes_read, 4 * 60);
  node_free(&n);

  const sl_node_desc *d = &sl_node_detector_mask;
  assert_string_equal(d->type, "detector_mask");
  assert_int_equal(d->n_inputs, 0);
  assert_int_equal(d->n_outputs, 1);
  assert_string_equal(d->outputs[0].name, "mask");
  assert_true(d->host);
  assert_ptr_equal(sl_registry_find(sl_nodes_registry(), "detector_mask"), d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t_mask_from_master),
      cmocka_unit_test(t_no_mask_and_dataset_param),
      cmocka_unit_test(t_errors),
      cmocka_unit_test(t_cost_and_descriptor),
  };
  return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
