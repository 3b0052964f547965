/* hdf5_source: detector frames from acquisitions written with the HDF5 C API
 * (test_h5_index.c's fixtures; bitshuffle through the official plugin):
 * plain frames against the fixture's pixel formula, the stored chunks of a
 * compressed file against H5Dread_chunk, the output descriptor, the scan
 * shape (param, square frame count, errors), the notes, a file changed since
 * planning, the ring of device buffers the plan holds for the source, and large
 * acquisitions: planned from their metadata, their chunk index counted and
 * listed only after the budget check. */
#define SL_H5_FIXTURES_ONLY
#include "test_h5_index.c"

#include <sys/resource.h>
#include <time.h>

#include "engine/pipeline/spec.h"
#include "engine/plan/plan.h"
#include "nodes/hdf5/h5_index_cache.h"
#include "nodes/hdf5/source_window.h"
#include "nodes/registry.h"
#include "tests/unit/node_harness.h"
#include "tests/unit/run_support.h"
#include "tests/unit/test_support.h"

extern const sl_node_desc sl_node_hdf5_source;

/* A node of hdf5_source on `path` (quoted for YAML) with more params; runs
 * infer. */
static sl_code source_make(sl_node *n, const char *path, const kv *more, int n_more, sl_error *e) {
  char yaml[600];
  snprintf(yaml, sizeof yaml, "'%s'", path);
  kv over[4] = {{"path", yaml}};
  assert_true(n_more < 4);
  for (int i = 0; i < n_more; i++) over[1 + i] = more[i];
  return node_make(n, &sl_node_hdf5_source, over, 1 + n_more, NULL, 0, e);
}

/* source_make that must succeed, then prepare. */
static void source_ready(sl_node *n, const char *path, const kv *more, int n_more) {
  sl_error e;
  sl_code rc = source_make(n, path, more, n_more, &e);
  if (rc) print_error("hdf5_source on %s: %s\n", path, e.msg);
  assert_int_equal(rc, SL_OK);
  assert_int_equal(n->desc->prepare(n, &e), SL_OK);
}

/* Writes fixture `name` (master path to m, 512 bytes) and readies a source
 * on it. */
static void source_fixture(sl_node *n, const char *name, const fx_opts *o, char *m, const kv *more,
                           int n_more) {
  fx_write(name, o, m, 512);
  source_ready(n, m, more, n_more);
}

/* infer must fail with `code` and a message containing `needle`. */
static void expect_infer_error(const char *path, const kv *more, int n_more, sl_code code,
                               const char *needle) {
  sl_node n;
  sl_error e;
  sl_code rc = source_make(&n, path, more, n_more, &e);
  expect_failed(rc, &e, code, needle, NULL);
  node_free(&n);
}

/* Reads a plain (uncompressed) acquisition through the node in chunks of
 * each size in `chunks` on 1 and 3 threads, checking every frame. */
static void read_plain(const char *path, const kv *more, int n_more, const int64_t *chunks,
                       int n_chunks) {
  for (int threads = 1; threads <= 3; threads += 2)
    for (int k = 0; k < n_chunks; k++) {
      sl_node n;
      source_ready(&n, path, more, n_more);
      const sl_tensor_desc *d = &n.out[0];
      assert_int_equal(d->encoding, SL_ENC_NONE);
      int64_t npos = sl_desc_positions(d);
      void *frames = malloc((size_t)sl_desc_bytes(d));
      void *outs[1] = {frames};
      sl_backend *b = backend(threads);
      sl_error e;
      sl_code rc = run_stream(&n, b, NULL, NULL, 0, outs, npos, chunks[k], &e);
      if (rc) print_error("chunk %lld: %s\n", (long long)chunks[k], e.msg);
      assert_int_equal(rc, SL_OK);
      fx_check_frames(frames, sl_dtype_size(d->dtype), npos, d->dims[2], d->dims[3]);
      sl_cpu_backend_ops.destroy(b);
      free(frames);
      node_free(&n);
    }
}

static void assert_note(const sl_node *n, const char *key, const char *needle) {
  const char *v = note(n, key);
  if (!v || !strstr(v, needle)) print_error("note %s: '%s', wanted '%s'\n", key, v ? v : "(none)", needle);
  assert_non_null(v);
  assert_non_null(strstr(v, needle));
}

/* ---- plain frames ------------------------------------------------------------ */

static void t_master_u16_scan_shape_param(void **state) {
  fx_opts o = {.n_files = 3, .frames = {5, 5, 2}, .h = 16, .w = 12, .k = 1, .meta = true};
  char m[512];
  kv shape[] = {{"scan_shape", "[3, 4]"}};
  sl_node n;
  source_fixture(&n, "src16", &o, m, shape, 1);
  const sl_tensor_desc *d = &n.out[0];
  int64_t want_dims[4] = {3, 4, 16, 12};
  assert_int_equal(d->dtype, SL_U16);
  assert_int_equal(d->rank, 4);
  assert_int_equal(d->stream_rank, 2);
  for (int i = 0; i < 4; i++) assert_int_equal(d->dims[i], want_dims[i]);
  assert_int_equal(d->positions_per_stored_chunk, 0);
  assert_note(&n, "source", "dectris-master, 3 data files, 12 frames of 16x12, 2-byte elements");
  assert_note(&n, "storage", "chunked, no filter, 1 frame per stored chunk, 12 stored chunks");
  assert_note(&n, "scan_shape", "[3, 4] (from the param)");
  assert_note(&n, "saturation_value", "12345 (/entry/instrument/detector/saturation_value)");
  assert_note(&n, "pixel_mask", "3 bad pixels");
  assert_note(&n, "nimages", "12");
  assert_note(&n, "count_time", "0.001 s");
  node_free(&n);
  const int64_t chunks[] = {1, 5, 12};
  read_plain(m, shape, 1, chunks, SL_COUNT_OF(chunks));
}

static void t_k_frame_chunks_square_u32(void **state) {
  /* 25 frames: a square scan without the param; chunks of 4 frames, the
   * last chunk of each file partial. */
  fx_opts o = {.n_files = 2, .frames = {10, 15}, .h = 8, .w = 20, .k = 4, .dtype = H5T_STD_U32LE};
  char m[512];
  sl_node n;
  source_fixture(&n, "src32", &o, m, NULL, 0);
  assert_int_equal(n.out[0].dtype, SL_U32);
  assert_int_equal(n.out[0].dims[0], 5);
  assert_int_equal(n.out[0].dims[1], 5);
  assert_note(&n, "scan_shape", "[5, 5] (square frame count; the file does not store it)");
  assert_null(note(&n, "pixel_mask"));
  node_free(&n);
  const int64_t chunks[] = {3, 7, 25};
  read_plain(m, NULL, 0, chunks, SL_COUNT_OF(chunks));
}

static void t_contiguous_u8_and_dataset_param(void **state) {
  fx_opts o = {.n_files = 2, .frames = {4, 5}, .h = 5, .w = 7, .layout = FX_CONTIG, .dtype = H5T_STD_U8LE};
  char m[512];
  sl_node n;
  source_fixture(&n, "src8", &o, m, NULL, 0);
  assert_int_equal(n.out[0].dtype, SL_U8);
  assert_note(&n, "storage", "contiguous");
  node_free(&n);
  const int64_t chunks[] = {2, 9};
  read_plain(m, NULL, 0, chunks, SL_COUNT_OF(chunks));

  /* One file, the frames at a path of its own: param 'dataset'. */
  fx_opts p = {.n_files = 0, .frames = {6}, .h = 4, .w = 5, .k = 2, .dataset = "/scan/frames"};
  kv ds[] = {{"dataset", "/scan/frames"}, {"scan_shape", "[2, 3]"}};
  source_fixture(&n, "srcds", &p, m, ds, 2);
  assert_note(&n, "source", "dataset:/scan/frames");
  node_free(&n);
  read_plain(m, ds, 2, chunks, 1);
  expect_infer_error(m, NULL, 0, SL_ERR_FORMAT, "found neither");
}

/* ---- compressed: stored chunks ------------------------------------------------- */

/* The source's output for scan positions [start, start + count) into a
 * buffer of the planned size (malloc'd). */
static sl_packed_items *source_call(sl_node *n, sl_backend *b, int64_t start, int64_t count,
                                    int64_t npos, int64_t chunk) {
  /* the buffer the plan gives: the node's bound (a variable-size output) */
  int64_t cap = sl_node_out_bound(n, 0, chunk);
  assert_true(cap > 0);
  sl_packed_items *pk = malloc((size_t)cap);
  sl_error e;
  sl_error_clear(&e);
  sl_kernel_args a;
  memset(&a, 0, sizeof a);
  a.backend = b, a.node = n, a.state = n->state, a.err = &e;
  a.pos_start = start, a.pos_count = count, a.chunk = start / chunk;
  a.n_chunks = (npos + chunk - 1) / chunk;
  a.out[0] = pk;
  a.out_bytes[0] = sl_node_out_bound(n, 0, count);
  sl_code rc = n->desc->kernel[SL_BACKEND_CPU](&a);
  if (rc) print_error("positions %lld..: %s\n", (long long)start, e.msg);
  assert_int_equal(rc, SL_OK);
  /* what it says it wrote: the header, the entries and their bytes, packed */
  uint64_t written = sizeof *pk + pk->n * sizeof(sl_packed_entry);
  for (uint64_t j = 0; j < pk->n; j++) {
    assert_int_equal(pk->entries[j].offset, written);
    written += pk->entries[j].size;
  }
  assert_int_equal(a.out_bytes[0], (int64_t)written);
  return pk;
}

/* Every stored chunk of the fixture's acquisition (11 frames) is in the
 * packed buffers exactly as H5Dread_chunk reads it, in every chunk of the
 * scan that holds one of its frames. Returns the largest stored chunk. */
static int64_t check_packed(const char *name, const fx_opts *o, const char *master, int64_t chunk) {
  kv shape[] = {{"scan_shape", "[1, 11]"}};
  sl_node n;
  source_ready(&n, master, shape, 1);
  const int64_t npos = 11;
  sl_backend *b = backend(2);
  int64_t next_frame = 0; /* the first frame of the next stored chunk expected */
  int64_t stored = 0, largest = 0;
  for (int64_t start = 0; start < npos; start += chunk) {
    int64_t count = npos - start < chunk ? npos - start : chunk;
    sl_packed_items *pk = source_call(&n, b, start, count, npos, chunk);
    assert_true(pk->n >= 1);
    for (uint64_t j = 0; j < pk->n; j++) {
      const sl_packed_entry *en = &pk->entries[j];
      /* Which file and local frame the entry's first position is. */
      int file = 0;
      int64_t local = en->first_position, chunks_before = 0; /* stored chunks of earlier files */
      while (local >= o->frames[file]) {
        chunks_before += (o->frames[file] + o->k - 1) / o->k;
        local -= o->frames[file++];
      }
      const int64_t file_chunk = local / o->k, acq_chunk = chunks_before + file_chunk;
      assert_int_equal(en->origin, (uint64_t)acq_chunk);
      int64_t want_n = o->frames[file] - local < o->k ? o->frames[file] - local : o->k;
      assert_int_equal(en->n_positions, want_n);
      assert_true(en->first_position < start + count);
      assert_true(en->first_position + en->n_positions > start);
      if (en->first_position == next_frame) { /* first time seen */
        assert_int_equal(en->origin, (uint64_t)stored);
        stored++;
        next_frame += en->n_positions;
      }
      char data_file[512];
      fx_data_path(name, file + 1, data_file, sizeof data_file);
      /* consumers' messages name it by the port's describe_origin: the file
       * and dataset, its index in that file and, when that differs, in the
       * acquisition */
      char said[1024], want_said[1024];
      sl_packed_describe(&n.out[0], en->origin, en->first_position, en->n_positions, said, sizeof said);
      long long last = (long long)(en->first_position + en->n_positions - 1);
      if (file_chunk == acq_chunk)
        snprintf(want_said, sizeof want_said, "%s:/entry/data/data, stored chunk %lld (frames %lld-%lld)", data_file,
                 (long long)acq_chunk, (long long)en->first_position, last);
      else
        snprintf(want_said, sizeof want_said,
                 "%s:/entry/data/data, stored chunk %lld of that file (chunk %lld of the acquisition, frames "
                 "%lld-%lld)",
                 data_file, (long long)file_chunk, (long long)acq_chunk, (long long)en->first_position, last);
      assert_string_equal(said, want_said);
      size_t size = 0;
      uint32_t mask = 0;
      uint8_t *want = fx_read_chunk(data_file, "/entry/data/data", local, &size, &mask);
      assert_int_equal(en->size, size);
      if ((int64_t)size > largest) largest = (int64_t)size;
      assert_int_equal(en->flags, (mask & 1u) ? SL_PACKED_STORED_RAW : 0);
      assert_memory_equal((const uint8_t *)pk + en->offset, want, size);
      free(want);
    }
    free(pk);
  }
  assert_int_equal(next_frame, npos);
  sl_cpu_backend_ops.destroy(b);
  node_free(&n);
  return largest;
}

static void t_bitshuffle_stored_chunks(void **state) {
  fx_require_bitshuffle();
  fx_opts o = {.n_files = 2, .frames = {6, 5}, .h = 32, .w = 24, .k = 2, .layout = FX_BSLZ4};
  char m[512];
  kv shape[] = {{"scan_shape", "[1, 11]"}};
  sl_node n;
  source_fixture(&n, "srcbs", &o, m, shape, 1);
  const sl_tensor_desc *d = &n.out[0];
  assert_int_equal(d->encoding, SL_ENC_BSLZ4);
  assert_int_equal(d->dtype, SL_U16);
  assert_int_equal(d->positions_per_stored_chunk, 2);
  assert_int_equal(d->min_positions_per_stored_chunk, 1); /* each file's last chunk */
  assert_int_equal(d->encoded_block_elems, 0);
  assert_note(&n, "storage", "bitshuffle (filter 32008), 2 frames per stored chunk, 6 stored chunks");
  for (int64_t chunk = 1; chunk <= 11; chunk += 2)
    assert_int_equal(check_packed("srcbs", &o, m, chunk), d->max_stored_chunk_bytes);
  node_free(&n);

  /* Bitshuffle without LZ4. */
  o.layout = FX_BITSHUFFLE;
  source_fixture(&n, "srcbr", &o, m, shape, 1);
  assert_int_equal(n.out[0].encoding, SL_ENC_BITSHUFFLE);
  assert_int_equal(check_packed("srcbr", &o, m, 3), 2 * 32 * 24 * 2);
  node_free(&n);
}

/* A corrupt stored chunk of the second data file, run through the engine
 * (hdf5_source -> bslz4_decode, the executor between them): the decoder's
 * error names it by the source's describe_origin: the file and dataset, its
 * index in that file and in the acquisition, and its frames. */
static void t_corrupt_chunk_named_through_the_run(void **state) {
  fx_require_bitshuffle();
  fx_opts o = {.n_files = 2, .frames = {6, 5}, .h = 32, .w = 24, .k = 2, .layout = FX_BSLZ4};
  char m[512];
  fx_write("srcbad", &o, m, sizeof m);
  const sl_h5_index *ix = NULL;
  sl_error e;
  sl_error_clear(&e);
  assert_int_equal(sl_h5_index_get_listed(m, NULL, &ix, &e), SL_OK);
  /* chunk 4 of the acquisition: chunk 1 of the second file, frames 8-9 */
  const sl_h5_chunk *ch = &ix->chunks[4];
  assert_int_equal(ch->file, 1);
  assert_int_equal(ch->first_frame, 8);
  assert_int_equal(ch->filter_mask & 1u, 0);
  char data_file[512];
  fx_data_path("srcbad", 2, data_file, sizeof data_file);
  FILE *f = fopen(data_file, "r+b");
  assert_non_null(f);
  /* its first LZ4 token: after the 12-byte header and a block's 4-byte length */
  assert_int_equal(fseek(f, (long)(ch->file_offset + 16), SEEK_SET), 0);
  assert_int_equal(fputc(0xFF, f), 0xFF);
  fclose(f);
  sl_h5_index_put(ix);
  char text[1024], path[600];
  snprintf(text, sizeof text,
           "pipeline: p\nnodes:\n  src: {type: hdf5_source, params: {path: \"%s\", scan_shape: [1, 11]}}\n"
           "  dec: {type: bslz4_decode, inputs: {chunks: src.frames}}\noutputs: {frames: dec.frames}\n",
           m);
  write_temp_file(path, sizeof path, "srcbad.yaml", text);
  char want[1024];
  snprintf(want, sizeof want,
           "%s:/entry/data/data, stored chunk 1 of that file (chunk 4 of the acquisition, frames 8-9): ", data_file);
  for (int64_t chunk = 2; chunk <= 11; chunk += 9) {
    sl_run run;
    sl_code rc = run_file(path, NULL, 0, chunk, 2, 0, NULL, &run, &e);
    print_message("expected error: %s\n", e.msg);
    assert_int_equal(rc, SL_ERR_FORMAT);
    assert_non_null(strstr(e.msg, want));
    assert_non_null(strstr(e.msg, "corrupt LZ4 data"));
    assert_string_equal(e.node, "dec");
    sl_run_free(&run);
  }
}

/* An encoded stream is an output only where a sink node writes it as it
 * streams (sluice run's write_h5, as stored chunks: tests/e2e/
 * test_encoded_output.sh): a run that would assemble it in memory is
 * refused, naming the output, before any data is read. */
static void t_encoded_output_needs_a_sink(void **state) {
  fx_require_bitshuffle();
  fx_opts o = {.n_files = 1, .frames = {8}, .h = 16, .w = 12, .k = 2, .layout = FX_BSLZ4};
  char m[512], text[1024], path[600];
  fx_write("srcenc", &o, m, sizeof m);
  snprintf(text, sizeof text,
           "pipeline: p\nnodes:\n  src: {type: hdf5_source, params: {path: \"%s\", scan_shape: [2, 4]}}\n"
           "outputs: {frames: src.frames}\n",
           m);
  write_temp_file(path, sizeof path, "srcenc.yaml", text);
  sl_run run;
  sl_error e;
  sl_code rc = run_file(path, NULL, 0, 2, 1, 0, NULL, &run, &e);
  print_message("expected error: %s\n", e.msg);
  assert_int_equal(rc, SL_ERR_PIPELINE);
  assert_non_null(strstr(e.msg, "output 'frames' is an encoded stream (bslz4): only a sink node writes it"));
  sl_run_free(&run);
}

/* ---- errors ------------------------------------------------------------------- */

static void t_scan_shape_and_input_errors(void **state) {
  fx_opts o = {.n_files = 1, .frames = {10}, .h = 4, .w = 4, .k = 1};
  char m[512];
  fx_write("srcten", &o, m, sizeof m);
  expect_infer_error(m, NULL, 0, SL_ERR_PIPELINE, "10 frames, not a square number");
  kv bad[][1] = {{{"scan_shape", "[3, 3]"}}, {{"scan_shape", "[0, 10]"}}, {{"scan_shape", "[10]"}},
                 {{"scan_shape", "[1, 2, 5]"}}};
  expect_infer_error(m, bad[0], 1, SL_ERR_PIPELINE, "[3, 3] holds 9 positions but");
  for (int i = 1; i < 4; i++)
    expect_infer_error(m, bad[i], 1, SL_ERR_PIPELINE, "needs two positive axes");
  /* A product of axes that overflows 64 bits is refused, not wrapped
   * (4611686018427387913 * 64 wraps to 576 in int64). */
  kv huge[] = {{"scan_shape", "[4611686018427387913, 64]"}};
  expect_infer_error(m, huge, 1, SL_ERR_PIPELINE, "is too large");
  kv good[] = {{"scan_shape", "[2, 5]"}};
  sl_node n;
  source_ready(&n, m, good, 1);
  assert_int_equal(n.out[0].dims[0], 2);
  assert_int_equal(n.out[0].dims[1], 5);
  node_free(&n);

  /* An empty path, a missing file, float and signed data. */
  kv empty[] = {{"path", ""}};
  expect_node_error(&sl_node_hdf5_source, empty, 1, NULL, 0, SL_ERR_PIPELINE,
                    "param 'path' is empty", NULL);
  snprintf(m, sizeof m, "%s/absent_master.h5", fx_tmpdir());
  expect_infer_error(m, NULL, 0, SL_ERR_IO, "No such file");
  fx_opts f = {.n_files = 1, .frames = {4}, .h = 4, .w = 4, .k = 1, .dtype = H5T_IEEE_F32LE};
  fx_write("srcf32", &f, m, sizeof m);
  expect_infer_error(m, NULL, 0, SL_ERR_FORMAT, "float32");
  fx_opts s = {.n_files = 1, .frames = {4}, .h = 4, .w = 4, .k = 1, .dtype = H5T_STD_I16LE};
  fx_write("srci16", &s, m, sizeof m);
  expect_infer_error(m, NULL, 0, SL_ERR_FORMAT, "must be u8, u16 or u32, found signed 2-byte");
}

/* The file is read again at prepare: a different frame count since infer is
 * an error, never a misread. */
static void t_changed_since_planning(void **state) {
  fx_opts o = {.n_files = 0, .frames = {9}, .h = 4, .w = 4, .k = 1};
  char m[512];
  fx_write("srcchg", &o, m, sizeof m);
  sl_node n;
  sl_error e;
  assert_int_equal(source_make(&n, m, NULL, 0, &e), SL_OK);
  o.frames[0] = 16;
  fx_write("srcchg", &o, m, sizeof m);
  assert_int_equal(n.desc->prepare(&n, &e), SL_ERR_IO);
  assert_non_null(strstr(e.msg, "changed since the pipeline was planned"));
  node_free(&n);
}

/* ---- cost and plan -------------------------------------------------------------- */

/* On a device backend the executor copies the source's chunks (produce)
 * into a ring of two device buffers, each the size of its output buffer for
 * one chunk: the plan holds them as slots (the buffer's own and ring_slot,
 * counted in slot_bytes and so in the peak it checks against the budget),
 * not as node device state; on the CPU backend there is no ring. */
static void t_plan_device_state(void **state) {
  fx_opts o = {.n_files = 1, .frames = {12}, .h = 16, .w = 12, .k = 1, .meta = true};
  char m[512], text[1024];
  fx_write("plan", &o, m, sizeof m);
  snprintf(text, sizeof text,
           "pipeline: p\nnodes:\n  src: {type: hdf5_source, params: {path: \"%s\", scan_shape: [3, 4]}}\n"
           "outputs: {frames: src.frames}\n",
           m);
  sl_error e;
  sl_error_clear(&e);
  sl_spec *spec = NULL;
  sl_graph *g = NULL;
  assert_int_equal(sl_spec_load_string(text, strlen(text), "plan.yaml", NULL, 0, &spec, &e), SL_OK);
  assert_int_equal(sl_graph_build(spec, NULL, sl_nodes_registry(), &g, &e), SL_OK);
  int src = sl_graph_find(g, "src");
  int64_t per_chunk = sl_desc_buffer_bytes(&g->nodes[src].out[0], 4);
  int64_t slot = (per_chunk + 63) / 64 * 64;
  for (int dev = 0; dev < 2; dev++) {
    sl_plan_opts po;
    memset(&po, 0, sizeof po);
    sl_cpu_backend_ops.probe(&po.caps, &e);
    po.caps.device_memory = dev; /* a device backend's caps, as far as the plan cares */
    po.chunk_positions = 4;
    sl_plan *p = NULL;
    assert_int_equal(sl_plan_build(g, &po, &p, &e), SL_OK);
    assert_int_equal(p->device_state_bytes, 0);
    const sl_plan_buffer *bf = &p->buffers[sl_plan_buffer_index(p, src, 0)];
    assert_int_equal(bf->bytes, per_chunk);
    if (dev) {
      assert_true(bf->ring_slot >= 0 && bf->ring_slot != bf->slot);
      assert_int_equal(p->slots[bf->ring_slot].bytes, slot);
      assert_true(p->slots[bf->slot].bytes >= slot);
      assert_true(p->peak_device_bytes >= 2 * slot);
    } else {
      assert_int_equal(bf->ring_slot, -1);
    }
    sl_plan_free(p);
  }
  sl_graph_free(g);
  sl_spec_free(spec);
}

static void t_planned_from_metadata(void **state) {
  fx_require_bitshuffle();
  fx_opts o = {.n_files = 2, .frames = {6, 5}, .h = 32, .w = 24, .k = 2, .layout = FX_BSLZ4};
  char m[512];
  fx_write("srclazy", &o, m, sizeof m);
  sl_h5_set_plan_list_limit(5); /* 6 stored chunks */
  kv shape[] = {{"scan_shape", "[1, 11]"}};
  uint64_t listings = sl_h5_index_listings();
  sl_node n;
  sl_error e;
  assert_int_equal(source_make(&n, m, shape, 1, &e), SL_OK);
  assert_int_equal(sl_h5_index_listings(), listings);
  const sl_tensor_desc *d = &n.out[0];
  assert_int_equal(d->encoding, SL_ENC_BSLZ4);
  assert_int_equal(d->positions_per_stored_chunk, 2);
  assert_int_equal(d->min_positions_per_stored_chunk, 1); /* each file's last chunk */
  /* A chunk of 2 frames of 32 x 24 u16 is 1536 elements, one block (the
   * default is 4096): the 12-byte header, the block's 4-byte length and
   * LZ4's bound on 3072 bytes (3072 + 3072 / 255 + 16). */
  const int64_t bound = 12 + 4 + 3072 + 3072 / 255 + 16;
  assert_int_equal(d->max_stored_chunk_bytes, bound);
  assert_note(&n, "storage", "6 stored chunks, at most 3116 bytes each (planned from the metadata");
  sl_node_cost c;
  n.desc->cost(&n, 4, &c);
  assert_true(c.state_bytes >= 2 * (int64_t)SL_SRC_WINDOW_BYTES + 6 * (int64_t)sizeof(sl_h5_chunk));
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  assert_int_equal(sl_h5_index_listings(), listings + 1);
  node_free(&n);
  for (int64_t chunk = 1; chunk <= 11; chunk += 2) assert_true(check_packed("srclazy", &o, m, chunk) <= bound);
  /* Planned again in this process (the index is listed by now): the same
   * plan, which depends on the files and the limit only. */
  assert_int_equal(source_make(&n, m, shape, 1, &e), SL_OK);
  assert_int_equal(n.out[0].max_stored_chunk_bytes, bound);
  node_free(&n);
  sl_h5_set_plan_list_limit(-1);
  assert_int_equal(sl_h5_plan_list_limit(), SL_H5_PLAN_LIST_MAX_CHUNKS);
}

/* A stored chunk larger than the plan reserved from the metadata (written
 * by hand, 200 bytes where the filter writes at most 160): prepare says so,
 * naming the file and the chunk; a plan from the listing holds it. */
static void t_chunk_larger_than_planned(void **state) {
  fx_require_bitshuffle();
  char m[512];
  snprintf(m, sizeof m, "%s/srcbig_master.h5", fx_tmpdir());
  hid_t f = fx_create(m, 0);
  fx_mkgroups(f, "/entry/data");
  hsize_t dims[3] = {4, 8, 8}, cd[3] = {1, 8, 8};
  hid_t sp = H5Screate_simple(3, dims, NULL), dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 3, cd);
  unsigned cdv[2] = {0, 2};
  assert_true(H5Pset_filter(dcpl, 32008, H5Z_FLAG_MANDATORY, 2, cdv) >= 0);
  hid_t ds = H5Dcreate2(f, "/entry/data/data", H5T_STD_U16LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  assert_true(ds >= 0);
  uint8_t junk[200];
  memset(junk, 7, sizeof junk);
  for (hsize_t i = 0; i < 4; i++) {
    hsize_t off[3] = {i, 0, 0};
    assert_true(H5Dwrite_chunk(ds, H5P_DEFAULT, 0, off, i == 2 ? 200 : 50, junk) >= 0);
  }
  H5Dclose(ds);
  H5Pclose(dcpl);
  H5Sclose(sp);
  H5Fclose(f);
  kv shape[] = {{"scan_shape", "[2, 2]"}};
  sl_h5_set_plan_list_limit(0);
  sl_node n;
  sl_error e;
  assert_int_equal(source_make(&n, m, shape, 1, &e), SL_OK);
  /* 64 u16 elements: 12 + 4 + (128 + 0 + 16) */
  assert_int_equal(n.out[0].max_stored_chunk_bytes, 160);
  expect_failed(n.desc->prepare(&n, &e), &e, SL_ERR_FORMAT,
                "stored chunk 2 (frames 2-2) has 200 bytes, more than the 160 bytes", "worst case");
  assert_non_null(strstr(e.file, "srcbig_master.h5"));
  node_free(&n);
  sl_h5_set_plan_list_limit(-1);
  assert_int_equal(source_make(&n, m, shape, 1, &e), SL_OK);
  assert_int_equal(n.out[0].max_stored_chunk_bytes, 200);
  assert_int_equal(n.desc->prepare(&n, &e), SL_OK);
  node_free(&n);
}

static double seconds_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* More stored chunks than planning lists (3 files declaring 400000 frames
 * each, none stored): the plan counts the chunk index in the source's state
 * and a budget that cannot hold it refuses the run before anything lists a
 * chunk (listing would fail: none is stored); with room for it, the run
 * lists at prepare, after the budget check, and fails there. */
static void t_large_refused_before_listing(void **state) {
  fx_opts o = {.n_files = 3, .frames = {400000, 400000, 400000}, .h = 4, .w = 4, .k = 1, .unwritten = true};
  char m[512], yaml[512], text[1024];
  fx_write("srchuge", &o, m, sizeof m);
  snprintf(yaml, sizeof yaml, "%s/huge.yaml", fx_tmpdir());
  snprintf(text, sizeof text,
           "pipeline: huge\nnodes:\n  src: {type: hdf5_source, params: {path: \"%s\", scan_shape: [1000, 1200]}}\n"
           "  pattern: {type: sum, inputs: {x: src.frames}}\noutputs: {total: pattern.total}\n",
           m);
  FILE *fp = fopen(yaml, "w");
  assert_non_null(fp);
  fputs(text, fp);
  fclose(fp);
  const int64_t entries = 1200000 * (int64_t)sizeof(sl_h5_chunk);
  const uint64_t limit = 64u << 20;
  uint64_t listings = sl_h5_index_listings();
  sl_run_request req = {.file = yaml, .registry = sl_nodes_registry(), .backend = SL_BACKEND_CPU,
                        .threads = 1, .memory_limit = limit};
  sl_run run;
  sl_error e;
  sl_error_clear(&e);
  double t0 = seconds_now();
  sl_code rc = sl_run_pipeline(&req, &run, &e);
  double t1 = seconds_now();
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  print_message("refused in %.3f s, peak RSS of the test so far %ld KiB: %s\n", t1 - t0, ru.ru_maxrss, e.msg);
  assert_int_equal(rc, SL_ERR_BUDGET);
  assert_int_equal(sl_h5_index_listings(), listings);
  /* The index is what does not fit. */
  assert_true(run.plan->state_bytes >= entries);
  assert_true(run.plan->peak_host_bytes > (int64_t)limit);
  assert_true(run.plan->peak_host_bytes - entries < (int64_t)limit);
  const char *storage = node_note(&run, "src", "storage");
  assert_non_null(storage);
  assert_non_null(strstr(storage, "1200000 stored chunks, at most 32 bytes each (planned from the metadata"));
  sl_run_free(&run);

  req.memory_limit = 0; /* available memory: room for the index */
  sl_error_clear(&e);
  rc = sl_run_pipeline(&req, &run, &e);
  expect_failed(rc, &e, SL_ERR_FORMAT, "stores 0 chunks", NULL);
  assert_non_null(strstr(e.file, "srchuge_data_000001.h5"));
  assert_int_equal(sl_h5_index_listings(), listings + 1);
  sl_run_free(&run);
}

static void t_descriptor(void **state) {
  const sl_node_desc *d = &sl_node_hdf5_source;
  assert_string_equal(d->type, "hdf5_source");
  assert_int_equal(d->n_inputs, 0);
  assert_int_equal(d->n_outputs, 1);
  assert_string_equal(d->outputs[0].name, "frames");
  assert_int_equal(d->n_params, 3);
  assert_string_equal(d->params[0].name, "path");
  assert_null(d->params[0].default_value); /* required */
  assert_string_equal(d->params[2].name, "scan_shape");
  assert_ptr_equal(sl_registry_find(sl_nodes_registry(), "hdf5_source"), d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(t_master_u16_scan_shape_param),
      cmocka_unit_test(t_k_frame_chunks_square_u32),
      cmocka_unit_test(t_contiguous_u8_and_dataset_param),
      cmocka_unit_test(t_bitshuffle_stored_chunks),
      cmocka_unit_test(t_corrupt_chunk_named_through_the_run),
      cmocka_unit_test(t_encoded_output_needs_a_sink),
      cmocka_unit_test(t_scan_shape_and_input_errors),
      cmocka_unit_test(t_changed_since_planning),
      cmocka_unit_test(t_plan_device_state),
      cmocka_unit_test(t_planned_from_metadata),
      cmocka_unit_test(t_chunk_larger_than_planned),
      cmocka_unit_test(t_large_refused_before_listing),
      cmocka_unit_test(t_descriptor),
  };
  return cmocka_run_group_tests(tests, fx_setup, fx_teardown);
}
