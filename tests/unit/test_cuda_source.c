/* hdf5_source on CUDA, overlapped (the executor's prefetch stage: produce
 * on a helper thread, copies into a ring of two device buffers on the
 * backend's copy queue, through the backend's event and async-copy ops) and
 * in order with the kernels (SLUICE_SOURCE_OVERLAP=0), against the CPU backend, bit for bit, through
 * whole runs (sl_run_pipeline): a Dectris-style acquisition written with the
 * HDF5 C API (two data files, 4 frames per stored chunk, bitshuffle-LZ4
 * through the official plugin, or raw chunks when the plugin is missing),
 * several chunk sizes (a chunk of 1 position, chunks that split stored
 * chunks, that span files, one chunk for the whole scan), a two-pass pipeline
 * (pipelines/virtual_image_fit.yaml: a second prefetch stage from chunk 0),
 * runs split into shards (t_shards), and repeated runs (no device memory
 * kept). The CPU
 * runs always happen (chunkings against one chunk); the CUDA ones skip visibly
 * without a device ("SKIP: no CUDA device"). */
#define SL_H5_FIXTURES_ONLY
#include "engine/core/settings.h"
#include "test_h5_index.c"

#include "nodes/registry.h"
#include "engine/backend/backend.h"
#include "tests/unit/cuda_probe.h"
#include "engine/exec/run.h"
#include "tests/unit/disk_acquisition.h"
#include "tests/unit/test_support.h"
#ifdef SLUICE_HAVE_CUDA
#include "engine/backend/cuda/cuda_backend.h"
#endif

static char g_master[512];
static bool g_compressed;
static bool have_cuda(void) { return sl_test_cuda_available(); }

/* fx_two_file_acquisition (test_h5_index.c). */
static int setup(void **state) {
  (void)state;
  g_compressed = fx_two_file_acquisition("cudasrc", g_master, sizeof g_master);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  fx_cleanup();
  return 0;
}

/* A bright disk (centre (12, 10), radius 6) on a dim background, varying with
 * the frame, in 60 + 40 frames of 24 x 20: what disk_fit (the two-pass
 * pipeline) needs to find. */
static const disk_acquisition k_disk = {.frames = {60, 40}, .h = 24, .w = 20, .row = 12, .col = 10, .radius = 6};

/* Frames (decoded when compressed) and their sum: a streamed output and a
 * reduction, one pass. */
static void write_one_pass(char *path, size_t n) {
  char text[2048];
  if (g_compressed)
    snprintf(text, sizeof text,
             "pipeline: src_one_pass\n"
             "nodes:\n"
             "  src: {type: hdf5_source, params: {path: \"%s\"}}\n"
             "  dec: {type: bslz4_decode, inputs: {chunks: src.frames}}\n"
             "  total: {type: sum, inputs: {x: dec.frames}}\n"
             /* products: virtual_detectors with its moments read by a com */
             "  vd: {type: virtual_detectors, inputs: {frames: dec.frames}, params: {radius: 3}}\n"
             "  com: {type: com, inputs: {s: vd.s, sr: vd.sr, sc: vd.sc}}\n"
             "outputs: {frames: dec.frames, total: total.total, bf: vd.bf, adf: vd.adf, df: vd.df,\n"
             "          s: vd.s, com_row: com.com_row, com_col: com.com_col}\n",
             g_master);
  else
    snprintf(text, sizeof text,
             "pipeline: src_one_pass\n"
             "nodes:\n"
             "  src: {type: hdf5_source, params: {path: \"%s\"}}\n"
             "  total: {type: sum, inputs: {x: src.frames}}\n"
             "outputs: {frames: src.frames, total: total.total}\n",
             g_master);
  write_temp_file(path, n, "src_one_pass.yaml", text);
}

/* One run, or (shards > 1) a run split into that many shards
 * (sl_run_pipeline_shards; on CUDA, the shards on the devices in turn),
 * whose shard 0, holding every output whole, is returned in r. */
static sl_code run_split(const char *file, const sl_setting *sets, size_t n_sets, int backend, int64_t chunk,
                         const char *overlap, int shards, sl_run *r, sl_error *err) {
  /* overlap: "0" or "1" as --setting source_overlap would take it, NULL: default */
  char setting[64];
  snprintf(setting, sizeof setting, "source_overlap=%s", overlap ? overlap : "true");
  const char *settings[] = {setting};
  assert_int_equal(sl_settings_init(settings, 1, err), SL_OK);
  sl_run_request req = {.file = file, .registry = sl_nodes_registry(), .sets = sets,
                        .n_sets = n_sets, .backend = backend, .chunk_positions = chunk,
                        .threads = shards > 1 ? 2 * shards : 2};
  sl_error_clear(err);
  memset(r, 0, sizeof *r);
  sl_code rc;
  if (shards > 1) {
    sl_run runs[4];
    assert_true(shards <= 4);
    rc = sl_run_pipeline_shards(&req, shards, runs, err);
    *r = runs[0];
    for (int k = 1; k < shards; k++) sl_run_free(&runs[k]);
  } else {
    rc = sl_run_pipeline(&req, r, err);
  }
  sl_error ignored;
  (void)sl_settings_init(NULL, 0, &ignored);
  return rc;
}

static sl_code run(const char *file, const sl_setting *sets, size_t n_sets, int backend, int64_t chunk,
                   const char *overlap, sl_run *r, sl_error *err) {
  return run_split(file, sets, n_sets, backend, chunk, overlap, 1, r, err);
}

static void expect_same(const sl_run *ref, const sl_run *got, const char *what) {
  assert_int_equal(ref->result.n_outputs, got->result.n_outputs);
  for (int o = 0; o < ref->result.n_outputs; o++) {
    const sl_output_data *a = &ref->result.outputs[o], *b = &got->result.outputs[o];
    int64_t bytes = sl_desc_bytes(&a->desc);
    assert_int_equal(bytes, sl_desc_bytes(&b->desc));
    if (memcmp(a->data, b->data, (size_t)bytes) != 0)
      fail_msg("%s: output '%s' differs from the reference", what, a->name);
  }
}

/* One reference (CPU, one chunk), then every chunking on the CPU and, with a
 * device, on CUDA overlapped and direct. */
static void compare_all(const char *file, const sl_setting *sets, size_t n_sets, const int64_t *chunks,
                        int n_chunks) {
  sl_error err;
  sl_run ref;
  if (run(file, sets, n_sets, SL_BACKEND_CPU, 100, NULL, &ref, &err) != SL_OK)
    fail_msg("cpu reference: %s", err.msg);
  for (int i = 0; i < n_chunks; i++) {
    char what[128];
    sl_run got;
    snprintf(what, sizeof what, "cpu, chunks of %lld", (long long)chunks[i]);
    if (run(file, sets, n_sets, SL_BACKEND_CPU, chunks[i], NULL, &got, &err) != SL_OK)
      fail_msg("%s: %s", what, err.msg);
    expect_same(&ref, &got, what);
    sl_run_free(&got);
    if (!have_cuda()) continue;
    static const char *modes[] = {"1", "0"};
    for (int m = 0; m < 2; m++) {
      snprintf(what, sizeof what, "cuda (SLUICE_SOURCE_OVERLAP=%s), chunks of %lld", modes[m],
               (long long)chunks[i]);
      if (run(file, sets, n_sets, SL_BACKEND_CUDA, chunks[i], modes[m], &got, &err) != SL_OK)
        fail_msg("%s: %s", what, err.msg);
      expect_same(&ref, &got, what);
      /* device nodes report their kernels' device time (CUDA events); host
       * nodes and the source, whose produce the executor copies, none */
      const sl_graph *g = got.plan->graph;
      for (int k = 0; k < g->n_nodes; k++) {
        const sl_node *n = &g->nodes[k];
        double t = got.result.node_device_seconds[k];
        if (n->desc && !n->desc->host && !n->desc->produce ? !(t > 0) : t != 0)
          fail_msg("%s: node %s: device time %g", what, n->id, t);
      }
      sl_run_free(&got);
    }
  }
  sl_run_free(&ref);
}

/* 1 position; 3 (split stored chunks); 4 (one stored chunk each); 7 and 13
 * (split, and 13 leaves a short last chunk); 30 (spans the file boundary at
 * 60 after two chunks); 100 (one chunk). */
static const int64_t k_chunks[] = {1, 3, 4, 7, 13, 30, 100};

static void t_one_pass(void **state) {
  (void)state;
  char path[512];
  write_one_pass(path, sizeof path);
  compare_all(path, NULL, 0, k_chunks, (int)(sizeof k_chunks / sizeof *k_chunks));
  if (!have_cuda()) skip();
}

/* The two-pass pipeline of the repository (pipelines/virtual_image_fit.yaml)
 * and a disk acquisition named `name` for it. */
static void two_pass_files(const char *name, char *file, size_t n_file, char *master, size_t n_master) {
  const char *src = getenv("SLUICE_SOURCE_DIR");
  snprintf(file, n_file, "%s/pipelines/virtual_image_fit.yaml", src && src[0] ? src : "../..");
  disk_acquisition_write(name, &k_disk, master, n_master);
}

/* The two-pass pipeline of the repository: the sum of pass 1 feeds a disk fit,
 * pass 2 reads the acquisition again (the source restarts at chunk 0). */
static void t_two_pass(void **state) {
  (void)state;
  if (!g_compressed) {
    print_message("SKIP: the two-pass pipeline decodes bitshuffle-LZ4 (plugin not found)\n");
    skip();
  }
  char file[1024], master[512];
  two_pass_files("cudasrc_disk", file, sizeof file, master, sizeof master);
  sl_setting sets[1] = {{.name = "input", .value = master}};
  static const int64_t chunks[] = {3, 16, 100};
  compare_all(file, sets, 1, chunks, 3);
  if (!have_cuda()) skip();
}

/* Runs split into 2 and 3 shards on CUDA (sl_run_pipeline_shards: each
 * shard's backend on device s mod the devices, its prefetch stage over its
 * own chunks, the reductions merged through the host): the one-pass and
 * the two-pass pipelines, both overlap modes, bit for bit the CPU's one
 * run. */
static void t_shards(void **state) {
  (void)state;
  if (!have_cuda()) skip();
  char one_pass[512];
  write_one_pass(one_pass, sizeof one_pass);
  char two_pass[1024], master[512];
  two_pass_files("cudasrc_disk_shards", two_pass, sizeof two_pass, master, sizeof master);
  sl_setting sets[1] = {{.name = "input", .value = master}};
  const struct {
    const char *file;
    const sl_setting *sets;
    size_t n_sets;
    int64_t chunk;
  } cases[] = {{one_pass, NULL, 0, 1}, {one_pass, NULL, 0, 7}, {one_pass, NULL, 0, 30},
               {two_pass, sets, 1, 3}, {two_pass, sets, 1, 16}};
  const int n_cases = g_compressed ? 5 : 3; /* the two-pass pipeline decodes */
  for (int c = 0; c < n_cases; c++) {
    sl_error err;
    sl_run ref;
    if (run(cases[c].file, cases[c].sets, cases[c].n_sets, SL_BACKEND_CPU, 100, NULL, &ref, &err) != SL_OK)
      fail_msg("cpu reference: %s", err.msg);
    static const char *modes[] = {"1", "0"};
    for (int shards = 2; shards <= 3; shards++)
      for (int m = 0; m < 2; m++) {
        char what[160];
        snprintf(what, sizeof what, "%s, cuda in %d shards (SLUICE_SOURCE_OVERLAP=%s), chunks of %lld",
                 c < 3 ? "one pass" : "two passes", shards, modes[m], (long long)cases[c].chunk);
        sl_run got;
        if (run_split(cases[c].file, cases[c].sets, cases[c].n_sets, SL_BACKEND_CUDA, cases[c].chunk, modes[m],
                      shards, &got, &err) != SL_OK)
          fail_msg("%s: %s", what, err.msg);
        assert_int_equal(got.plan->shards, shards);
        expect_same(&ref, &got, what);
        sl_run_free(&got);
      }
    sl_run_free(&ref);
  }
}

/* Twenty overlapped runs leave the backend holding nothing and the driver's
 * memory where it was (threads, events, prefetch buffers, windows freed). */
static void t_repeated(void **state) {
  (void)state;
  if (!have_cuda()) skip();
#ifdef SLUICE_HAVE_CUDA
  char path[512];
  write_one_pass(path, sizeof path);
  sl_error err;
  sl_run r;
  size_t before = 0, after = 0;
  /* one run first: the context and the kernels' modules are loaded once */
  assert_int_equal(run(path, NULL, 0, SL_BACKEND_CUDA, 7, "1", &r, &err), SL_OK);
  sl_run_free(&r);
  assert_int_equal(sl_cuda_memory_report(NULL, NULL, NULL, &before), SL_OK);
  for (int i = 0; i < 20; i++) {
    if (run(path, NULL, 0, SL_BACKEND_CUDA, i % 2 ? 7 : 13, "1", &r, &err) != SL_OK)
      fail_msg("run %d: %s", i, err.msg);
    sl_run_free(&r);
  }
  assert_int_equal(sl_cuda_memory_report(NULL, NULL, NULL, &after), SL_OK);
  print_message("driver memory in use: %zu before, %zu after 20 runs\n", before, after);
  assert_true(after <= before + ((size_t)8 << 20));
#endif
}

/* A missing data file: the reader's error reaches the run on every path, with
 * the same message as on the CPU. */
static void t_io_error(void **state) {
  (void)state;
  char path[512], data[600];
  fx_opts o = {.n_files = 2, .frames = {60, 40}, .h = 24, .w = 20, .layout = g_compressed ? FX_BSLZ4 : FX_CHUNKED,
               .k = 4, .meta = true};
  char master[512];
  fx_write("cudasrc_trunc", &o, master, sizeof master);
  char text[1024];
  snprintf(text, sizeof text,
           "pipeline: src_err\n"
           "nodes:\n"
           "  src: {type: hdf5_source, params: {path: \"%s\"}}\n"
           "  total: {type: sum, inputs: {x: %s}}\n"
           "%s"
           "outputs: {total: total.total}\n",
           master, g_compressed ? "dec.frames" : "src.frames",
           g_compressed ? "  dec: {type: bslz4_decode, inputs: {chunks: src.frames}}\n" : "");
  write_temp_file(path, sizeof path, "src_err.yaml", text);
  /* Plan against the whole file, then cut the second data file short: the
   * index (listed at plan time) points past its end. */
  fx_data_path("cudasrc_trunc", 2, data, sizeof data);
  struct stat st;
  assert_int_equal(stat(data, &st), 0);
  sl_error err;
  sl_run r;
  /* The index is cached per process by path: truncating after a first run
   * makes the second one read past the end of the file. */
  assert_int_equal(run(path, NULL, 0, SL_BACKEND_CPU, 7, NULL, &r, &err), SL_OK);
  sl_run_free(&r);
  assert_int_equal(truncate(data, st.st_size / 2), 0);
  sl_error cpu_err;
  sl_code cpu_rc = run(path, NULL, 0, SL_BACKEND_CPU, 7, NULL, &r, &cpu_err);
  sl_run_free(&r);
  if (cpu_rc == SL_OK) {
    print_message("SKIP: the truncated file was not read past its end (index re-listed)\n");
    skip();
  }
  if (!have_cuda()) skip();
  static const char *modes[] = {"1", "0"};
  for (int m = 0; m < 2; m++) {
    sl_code rc = run(path, NULL, 0, SL_BACKEND_CUDA, 7, modes[m], &r, &err);
    sl_run_free(&r);
    if (rc != cpu_rc || strcmp(err.msg, cpu_err.msg) != 0 || err.chunk != cpu_err.chunk)
      fail_msg("SLUICE_SOURCE_OVERLAP=%s: got %s \"%s\" (chunk %lld), the CPU %s \"%s\" (chunk %lld)", modes[m],
               sl_code_name(rc), err.msg, (long long)err.chunk, sl_code_name(cpu_rc), cpu_err.msg,
               (long long)cpu_err.chunk);
  }
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t_one_pass),
      cmocka_unit_test(t_two_pass),
      cmocka_unit_test(t_shards),
      cmocka_unit_test(t_repeated),
      cmocka_unit_test(t_io_error),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
