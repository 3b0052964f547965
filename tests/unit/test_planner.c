/* Planner: levels, lifetimes and slots on graphs with known answers; the
 * budget check; chunk sizing. Planning allocates no data. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "engine/backend/backend.h"
#include "nodes/registry.h"
#include "engine/exec/sinks.h"
#include "engine/plan/plan.h"
#include "tests/unit/test_support.h"

typedef struct fixture {
  sl_spec *spec;
  sl_graph *g;
  sl_plan *p;
} fixture;

/* The plan of a pipeline, with the run's writer nodes when `writers`. */
static void plan_text_on(fixture *f, const char *text, int64_t chunk, uint64_t limit, bool writers,
                         const sl_backend_caps *caps) {
  char path[512];
  write_temp_file(path, sizeof path, "plan.yaml", text);
  sl_error err;
  sl_error_clear(&err);
  memset(f, 0, sizeof *f);
  assert_int_equal(sl_spec_load(path, NULL, 0, &f->spec, &err), SL_OK);
  assert_int_equal(sl_graph_build(f->spec, NULL, sl_nodes_registry(), &f->g, &err), SL_OK);
  if (writers) assert_int_equal(sl_graph_add_writers(f->g, &err), SL_OK);
  sl_plan_opts po;
  memset(&po, 0, sizeof po);
  if (caps) po.caps = *caps;
  else sl_cpu_backend_ops.probe(&po.caps, &err);
  po.chunk_positions = chunk;
  po.memory_limit = limit;
  assert_int_equal(sl_plan_build(f->g, &po, &f->p, &err), SL_OK);
}

static void plan_text_writers(fixture *f, const char *text, int64_t chunk, uint64_t limit, bool writers) {
  plan_text_on(f, text, chunk, limit, writers, NULL);
}

static void plan_text(fixture *f, const char *text, int64_t chunk, uint64_t limit) {
  plan_text_writers(f, text, chunk, limit, false);
}

static void fixture_free(fixture *f) {
  sl_plan_free(f->p);
  sl_graph_free(f->g);
  sl_spec_free(f->spec);
}

static const sl_plan_buffer *buffer(const fixture *f, const char *node) {
  int n = sl_graph_find(f->g, node);
  for (int i = 0; i < f->p->n_buffers; i++)
    if (f->p->buffers[i].node == n) return &f->p->buffers[i];
  fail_msg("no buffer for %s", node);
  return NULL;
}

/* ramp -> a -> b -> sum, 1024 positions of 256 f32 (1 KiB each), chunks of
 * 256 positions: four stream levels; a.y cannot share ramp.out's slot (they
 * meet at level 1) but b.y can; the reduction lives across the stream. */
static const char *k_chain =
    "pipeline: chain\n"
    "nodes:\n"
    "  r: {type: ramp, params: {positions: [1024], item_shape: [256]}}\n"
    "  a: {type: affine, inputs: {x: r.out}}\n"
    "  b: {type: affine, inputs: {x: a.y}}\n"
    "  s: {type: sum, inputs: {x: b.y}}\n"
    "outputs: {total: s.total}\n";

static void test_chain_lifetimes(void **state) {
  fixture f;
  plan_text(&f, k_chain, 256, 0);
  const sl_plan *p = f.p;
  assert_int_equal(p->positions, 1024);
  assert_int_equal(p->chunk_positions, 256);
  assert_int_equal(p->n_chunks, 4);
  assert_int_equal(p->n_levels, 4);
  assert_int_equal(p->stream_first_level, 0);
  assert_int_equal(p->stream_last_level, 3);
  const sl_plan_buffer *r = buffer(&f, "r"), *a = buffer(&f, "a"), *b = buffer(&f, "b"),
                       *s = buffer(&f, "s");
  assert_int_equal(r->bytes, 256 * 1024);
  assert_int_equal(r->first_level, 0);
  assert_int_equal(r->last_level, 1);
  assert_int_equal(a->first_level, 1);
  assert_int_equal(a->last_level, 2);
  assert_int_equal(b->first_level, 2);
  assert_int_equal(b->last_level, 3);
  assert_true(s->reduction && s->graph_output && !s->streamed);
  assert_int_equal(s->bytes, 256 * 8);
  assert_int_equal(s->first_level, 0);
  assert_int_equal(s->last_level, 3);
  assert_int_not_equal(r->slot, a->slot);
  assert_int_equal(b->slot, r->slot);
  assert_int_equal(p->n_slots, 3);
  assert_int_equal(p->slot_bytes, 2 * 256 * 1024 + 2048);
  /* live peak: at level 2, a and b (and the reduction) are live */
  assert_int_equal(p->live_peak_bytes, 2 * 256 * 1024 + 2048);
  assert_int_equal(p->output_bytes, 2048);
  /* and the process's own memory, from the profile (the built-in guess),
   * with each worker thread's beyond the first */
  int workers = p->caps.host_workers > 0 ? p->caps.host_workers : p->caps.compute_units;
  assert_int_equal(p->process_bytes,
                   (int64_t)SL_PROCESS_BYTES_HOST + (workers - 1) * (int64_t)SL_WORKER_THREAD_BYTES);
  assert_int_equal(p->peak_host_bytes, p->slot_bytes + p->output_bytes + p->process_bytes);
  /* traffic: r writes 1 MiB; a and b read and write 1 MiB each; s reads 1 MiB */
  assert_int_equal(p->bytes_written, 3 << 20);
  assert_int_equal(p->bytes_read, 3 << 20);
  assert_true(p->est_seconds > 0);
  fixture_free(&f);
}

static void test_partial_last_chunk(void **state) {
  fixture f;
  plan_text(&f, k_chain, 300, 0);
  assert_int_equal(f.p->n_chunks, 4); /* 300 + 300 + 300 + 124 */
  assert_int_equal(f.p->bytes_written, 3 << 20); /* costs follow the real chunk sizes */
  fixture_free(&f);
}

static void test_epilogue_levels(void **state) {
  fixture f;
  plan_text(&f,
            "pipeline: epi\n"
            "nodes:\n"
            "  c: {type: constant, params: {shape: [16]}}\n"
            "  r: {type: ramp, params: {positions: [64], item_shape: [16]}}\n"
            "  s: {type: sum, inputs: {x: r.out}}\n"
            "  e: {type: affine, inputs: {x: s.total}}\n"
            "outputs: {y: e.y, c: c.out}\n",
            16, 0);
  const sl_plan *p = f.p;
  /* prologue L0 (c), stream L1-L2 (r, s), epilogue L3 (e) */
  assert_int_equal(p->n_levels, 4);
  assert_int_equal(p->levels[0].phase, SL_PHASE_PROLOGUE);
  assert_int_equal(p->levels[1].phase, SL_PHASE_STREAM);
  assert_int_equal(p->levels[3].phase, SL_PHASE_EPILOGUE);
  const sl_plan_buffer *s = buffer(&f, "s"), *e = buffer(&f, "e"), *c = buffer(&f, "c");
  assert_int_equal(s->first_level, 1);
  assert_int_equal(s->last_level, 3);
  assert_int_equal(e->first_level, 3);
  assert_int_equal(c->first_level, 0);
  assert_int_equal(c->last_level, 3); /* a whole output lives to the end */
  fixture_free(&f);
}

/* The mean is known only after a pass; subtracting it streams the ramp again
 * in a second pass, and the mean lives until that pass's stream ends. */
static void test_second_pass_lifetimes(void **state) {
  fixture f;
  plan_text(&f,
            "pipeline: two\n"
            "nodes:\n"
            "  r: {type: ramp, params: {positions: [64], item_shape: [16], dtype: f64}}\n"
            "  s: {type: sum, inputs: {x: r.out}}\n"
            "  m: {type: affine, inputs: {x: s.total}}\n"
            "  d: {type: subtract, inputs: {x: r.out, y: m.y}}\n"
            "outputs: {d: d.out}\n",
            16, 0);
  const sl_plan *p = f.p;
  assert_int_equal(p->n_passes, 2);
  /* pass 1: stream L0 (r) L1 (s), epilogue L2 (m); pass 2: stream L3 (r) L4 (d) */
  assert_int_equal(p->passes[0].stream_first, 0);
  assert_int_equal(p->passes[0].stream_last, 1);
  assert_int_equal(p->passes[0].epilogue_first, 2);
  assert_int_equal(p->passes[1].stream_first, 3);
  assert_int_equal(p->passes[1].stream_last, 4);
  int r = sl_graph_find(f.g, "r");
  assert_int_equal(p->exec_level[r * 2 + 0], 0);
  assert_int_equal(p->exec_level[r * 2 + 1], 3);
  const sl_plan_buffer *m = buffer(&f, "m"), *d = buffer(&f, "d");
  assert_int_equal(m->first_level, 2);
  assert_int_equal(m->last_level, 4);
  assert_int_equal(d->first_level, 4);
  assert_int_equal(d->last_level, 4);
  /* the ramp and sum run in... the ramp twice, the sum once: 64*16*8 bytes per run */
  assert_int_equal(p->nodes[r].cost.bytes_written, 2 * 64 * 16 * 8);
  fixture_free(&f);
}

/* In-place outputs (mask_correct's frames over its input frames): granted
 * when the input's buffer has no other reader and is not a graph output;
 * a chain of them shares the first buffer's slot, whose lifetime covers the
 * chain. 64 positions of 16x16 u16 frames, chunks of 16: 8 KiB per chunk. */
#define IN_PLACE_SOURCE                                                                  \
  "  s: {type: synthetic_4dstem, params: {scan_shape: [8, 8], detector_shape: [16, 16], " \
  "dtype: u16}}\n"

static void test_in_place_outputs(void **state) {
  fixture f;
  plan_text(&f,
            "pipeline: in_place\n"
            "nodes:\n" IN_PLACE_SOURCE
            "  m1: {type: mask_correct, inputs: {frames: s.frames}}\n"
            "  m2: {type: mask_correct, inputs: {frames: m1.frames}, params: {policy: zero}}\n"
            "  t: {type: sum, inputs: {x: m2.frames}}\n"
            "outputs: {t: t.total}\n",
            16, 0);
  const sl_plan_buffer *s = buffer(&f, "s"), *m1 = buffer(&f, "m1"), *m2 = buffer(&f, "m2"),
                       *t = buffer(&f, "t");
  int si = (int)(s - f.p->buffers);
  assert_int_equal(s->bytes, 16 * 16 * 16 * 2);
  assert_int_equal(s->in_place_of, -1);
  assert_int_equal(m1->in_place_of, si);
  assert_int_equal(m2->in_place_of, si); /* the chain's first buffer */
  assert_int_equal(m1->slot, s->slot);
  assert_int_equal(m2->slot, s->slot);
  /* s (L0) is read in place by m1 (L1) and m2 (L2), then by t (L3) */
  assert_int_equal(s->first_level, 0);
  assert_int_equal(s->last_level, f.p->exec_level[sl_graph_find(f.g, "t")]);
  assert_int_equal(s->last_level, 3);
  assert_true(t->reduction);
  assert_int_equal(m2->first_level, 2);
  for (int b = 0; b < f.p->n_buffers; b++) /* nothing else may live in that slot meanwhile */
    if (f.p->buffers[b].slot == s->slot && f.p->buffers[b].in_place_of < 0)
      assert_true(&f.p->buffers[b] == s || f.p->buffers[b].first_level > s->last_level ||
                  f.p->buffers[b].last_level < s->first_level);
  /* one frame buffer instead of three: the live peak counts it once */
  assert_true(f.p->live_peak_bytes < 2 * s->bytes);
  fixture_free(&f);

  /* s read twice (m and a sum): m gets its own slot. */
  plan_text(&f,
            "pipeline: shared_input\n"
            "nodes:\n" IN_PLACE_SOURCE
            "  m: {type: mask_correct, inputs: {frames: s.frames}}\n"
            "  t: {type: sum, inputs: {x: m.frames}}\n"
            "  u: {type: sum, inputs: {x: s.frames}}\n"
            "outputs: {t: t.total, u: u.total}\n",
            16, 0);
  assert_int_equal(buffer(&f, "m")->in_place_of, -1);
  assert_int_not_equal(buffer(&f, "m")->slot, buffer(&f, "s")->slot);
  fixture_free(&f);

  /* s a graph output: its chunks must survive m, so no sharing. */
  plan_text(&f,
            "pipeline: output_input\n"
            "nodes:\n" IN_PLACE_SOURCE
            "  m: {type: mask_correct, inputs: {frames: s.frames}}\n"
            "outputs: {raw: s.frames, fixed: m.frames}\n",
            16, 0);
  assert_int_equal(buffer(&f, "m")->in_place_of, -1);
  assert_int_not_equal(buffer(&f, "m")->slot, buffer(&f, "s")->slot);
  fixture_free(&f);

  /* A node without in-place outputs never shares its input's slot. */
  plan_text(&f, k_chain, 256, 0);
  for (int b = 0; b < f.p->n_buffers; b++) assert_int_equal(f.p->buffers[b].in_place_of, -1);
  fixture_free(&f);
}

static void test_auto_chunk_and_budget(void **state) {
  fixture f;
  /* 1 KiB per position: the automatic chunk is the workers' share of their
   * caches (sl_plan_chunk_bytes_per_worker each), at most the whole scan. */
  plan_text(&f, k_chain, 0, 0);
  int64_t target = f.p->caps.compute_units * sl_plan_chunk_bytes_per_worker(&f.p->caps);
  assert_int_equal(f.p->chunk_positions, target / 1024 < 1024 ? target / 1024 : 1024);
  const int64_t process = f.p->process_bytes; /* the profile's and each worker thread's */
  fixture_free(&f);
  /* The share: half a core's L2 within [512 KiB, 4 MiB]; 1 MiB unknown. */
  sl_backend_caps caps = {0};
  assert_int_equal(sl_plan_chunk_bytes_per_worker(&caps), 1 << 20);
  caps.cache_bytes = 2 << 20;
  assert_int_equal(sl_plan_chunk_bytes_per_worker(&caps), 1 << 20);
  caps.cache_bytes = 1 << 20;
  assert_int_equal(sl_plan_chunk_bytes_per_worker(&caps), 512 << 10);
  caps.cache_bytes = 512 << 10;
  assert_int_equal(sl_plan_chunk_bytes_per_worker(&caps), 512 << 10);
  caps.cache_bytes = 128 << 10;
  assert_int_equal(sl_plan_chunk_bytes_per_worker(&caps), 512 << 10);
  caps.cache_bytes = 64 << 20;
  assert_int_equal(sl_plan_chunk_bytes_per_worker(&caps), 4 << 20);
  /* A budget of 300 KiB beyond the process's own memory makes the
   * automatic chunk shrink until it fits. */
  const uint64_t budget = (300u << 10) + (uint64_t)process;
  plan_text(&f, k_chain, 0, budget);
  assert_true(f.p->chunk_positions < 1024);
  assert_true((uint64_t)f.p->peak_host_bytes <= budget);
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_plan_check_budget(f.p, &err), SL_OK);
  fixture_free(&f);
  /* An explicit chunk that cannot fit is refused with a typed estimate. */
  plan_text(&f, k_chain, 1024, 64 << 10);
  assert_int_equal(sl_plan_check_budget(f.p, &err), SL_ERR_BUDGET);
  assert_non_null(strstr(err.msg, "pooled buffers"));
  assert_non_null(strstr(err.msg, "budget is 64.00 KiB"));
  assert_int_equal(sl_exit_code(err.code), 3);
  fixture_free(&f);
}

/* On a device backend, a stream that only host nodes make and read (a host
 * source written by a host writer, as repack on CUDA) gets the host's
 * automatic chunk: its workers' share, 1 MiB each (a device's caps know no
 * host cache), not the multiprocessors'. A device node reading the stream
 * gives the device's chunk. Frames of 64 x 64 u16 (8 KiB), 64 x 64 positions. */
static void test_auto_chunk_of_host_streams_on_a_device(void **state) {
  static const char *host_only =
      "pipeline: host\nnodes:\n"
      "  src: {type: synthetic_4dstem, params: {scan_shape: [64, 64], detector_shape: [64, 64]}}\n"
      "outputs: {frames: src.frames}\n";
  static const char *device_reader =
      "pipeline: dev\nnodes:\n"
      "  src: {type: synthetic_4dstem, params: {scan_shape: [64, 64], detector_shape: [64, 64]}}\n"
      "  vd: {type: virtual_detectors, inputs: {frames: src.frames}, params: {radius: 8, center: [32, 32]}}\n"
      "outputs: {frames: src.frames, bf: vd.bf}\n";
  sl_backend_caps gpu = {0};
  gpu.kind = SL_BACKEND_CUDA;
  gpu.device_memory = true;
  gpu.compute_units = 132; /* multiprocessors */
  gpu.host_workers = 3;
  gpu.memory_bytes = (uint64_t)64 << 30;
  gpu.bytes_per_second = 3e12;
  gpu.ops_per_second = 1e13;
  const int64_t frame = 64 * 64 * 2;
  fixture f;
  plan_text_on(&f, host_only, 0, 0, true, &gpu);
  assert_true(f.p->nodes[sl_graph_find(f.g, "src")].host);
  assert_int_equal(f.p->chunk_positions, 3 * ((int64_t)1 << 20) / frame);
  fixture_free(&f);
  plan_text_on(&f, device_reader, 0, 0, true, &gpu);
  assert_int_equal(f.p->chunk_positions, 64 * 64); /* 132 MiB of 8 KiB frames: the whole scan */
  fixture_free(&f);
  /* the CPU backend's chunk is its own, whatever reads the stream */
  plan_text_on(&f, host_only, 0, 0, true, NULL);
  int64_t target = f.p->caps.compute_units * sl_plan_chunk_bytes_per_worker(&f.p->caps);
  assert_int_equal(f.p->chunk_positions, target / frame < 4096 ? target / frame : 4096);
  fixture_free(&f);
}

/* On CPU workers the automatic chunk is rounded to the nearest multiple of
 * 8 positions a worker (a 64-byte line of a u64 per-position output), so
 * that the workers' equal shares never write the same line: frames of
 * 192 x 192 u16 (73,728 bytes) on cores of 2 MiB L2 (1 MiB a worker's
 * share) give 28.4 positions at 2 workers (32), 42.7 at 3 (48), 227.6 at
 * 16 (256); one worker has nothing to share (14), and a chunk smaller than
 * 8 positions a worker is left as it is (1 MiB frames at 16 workers: 16). */
static void test_auto_chunk_on_cache_lines(void **state) {
  (void)state;
  static const char *text =
      "pipeline: lines\nnodes:\n"
      "  src: {type: synthetic_4dstem, params: {scan_shape: [64, 64], detector_shape: [%d, %d]}}\n"
      "  vd: {type: virtual_detectors, inputs: {frames: src.frames}, params: {radius: 8, center: [32, 32]}}\n"
      "outputs: {bf: vd.bf}\n";
  static const struct {
    int workers, rows, cols;
    int64_t chunk;
  } cases[] = {{2, 192, 192, 32}, {3, 192, 192, 48}, {16, 192, 192, 256}, {1, 192, 192, 14}, {16, 512, 1024, 16}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    sl_backend_caps cpu;
    sl_error err;
    sl_error_clear(&err);
    memset(&cpu, 0, sizeof cpu);
    sl_cpu_backend_ops.probe(&cpu, &err);
    cpu.compute_units = cases[i].workers;
    cpu.host_workers = cases[i].workers;
    cpu.cache_bytes = 2 << 20;
    cpu.memory_bytes = (uint64_t)64 << 30;
    char pipeline[512];
    snprintf(pipeline, sizeof pipeline, text, cases[i].rows, cases[i].cols);
    fixture f;
    plan_text_on(&f, pipeline, 0, 0, false, &cpu);
    assert_int_equal(f.p->chunk_positions, cases[i].chunk);
    fixture_free(&f);
    /* a chunk given on the command line is the user's, never rounded */
    plan_text_on(&f, pipeline, 28, 0, false, &cpu);
    assert_int_equal(f.p->chunk_positions, 28);
    fixture_free(&f);
  }
}

/* Best-fit slots on a graph of unequal buffers (f64 after f32 after a
 * narrow item): no two buffers of a slot live at the same level, every slot
 * is exactly its largest occupant rounded up to 64 bytes, and the slots add
 * up to no more than the live peak plus the rounding (here, where lifetimes
 * chain, the pool needs nothing beyond the largest live pair). Checked
 * against the buffers themselves, not the planner's own sums. */
static void test_best_fit_slots(void **state) {
  fixture f;
  plan_text(&f,
            "pipeline: fit\n"
            "nodes:\n"
            "  r: {type: ramp, params: {positions: [600], item_shape: [100], dtype: f32}}\n"
            "  a: {type: affine, inputs: {x: r.out}}\n"
            "  w: {type: ramp, params: {positions: [600], item_shape: [77], dtype: f64}}\n"
            "  d: {type: subtract, inputs: {x: w.out, y: c.out}}\n"
            "  c: {type: constant, params: {shape: [77], dtype: f64}}\n"
            "  s: {type: sum, inputs: {x: a.y}}\n"
            "  t: {type: sum, inputs: {x: d.out}}\n"
            "outputs: {p: s.total, q: t.total}\n",
            100, 0);
  const sl_plan *p = f.p;
  int64_t total = 0;
  for (int s = 0; s < p->n_slots; s++) {
    int64_t largest = 0;
    for (int i = 0; i < p->n_buffers; i++) {
      const sl_plan_buffer *a = &p->buffers[i];
      if (a->slot != s) continue;
      if (a->bytes > largest) largest = a->bytes;
      for (int k = i + 1; k < p->n_buffers; k++) {
        const sl_plan_buffer *b = &p->buffers[k];
        if (b->slot == s)
          assert_false(a->first_level <= b->last_level && b->first_level <= a->last_level);
      }
    }
    assert_true(largest > 0);
    assert_int_equal(p->slots[s].bytes, (largest + 63) / 64 * 64);
    total += p->slots[s].bytes;
  }
  assert_int_equal(p->slot_bytes, total);
  assert_true(p->slot_bytes <= p->live_peak_bytes + 64 * p->n_slots);
  fixture_free(&f);
}

/* The run's writer nodes: a write_h5 per output and a write_png per 2-D
 * one, each reading its output like any consumer, in the output's phase; the
 * plan then assembles no output and counts the writers' state: results.h5's
 * write-behind buffer (the output up to 1 MiB) and a PNG's bands of deflated
 * rows plus, for a streamed image, one strip of rows read back (as many
 * 4000-byte rows as fit 1 MiB); each worker holds zlib's state (272 KiB)
 * and a band of rows. 300 positions of 500 f64 (1.2 MB), chunks of 64. */
static const char *k_outputs =
    "pipeline: outs\n"
    "nodes:\n"
    "  r: {type: ramp, params: {positions: [300], item_shape: [500], dtype: f64}}\n"
    "  s: {type: sum, inputs: {x: r.out}}\n"
    "  w: {type: gather, inputs: {x: r.out}}\n"
    "outputs: {img: r.out, total: s.total, img_whole: w.whole}\n";

static int64_t state_of(const fixture *f, const char *id) {
  int n = sl_graph_find(f->g, id);
  assert_true(n >= 0);
  return f->p->nodes[n].cost.state_bytes;
}

static void test_writer_nodes(void **state) {
  fixture f;
  plan_text_writers(&f, k_outputs, 64, 0, false);
  const int64_t image = 300 * 500 * 8;
  int64_t total = sl_desc_bytes(&f.g->nodes[sl_graph_find(f.g, "s")].out[0]);
  assert_int_equal(f.g->n_nodes, 3);
  for (int o = 0; o < f.g->n_outputs; o++) assert_false(sl_graph_output_written(f.g, o));
  assert_int_equal(f.p->output_bytes, 2 * image + total); /* assembled on the host */
  fixture_free(&f);

  plan_text_writers(&f, k_outputs, 64, 0, true);
  assert_int_equal(f.g->n_nodes, 3 + 5);
  const struct {
    const char *id, *type, *reads;
    sl_phase phase;
  } want[] = {{"img.h5", "write_h5", "r", SL_PHASE_STREAM},
              {"img.png", "write_png", "r", SL_PHASE_STREAM},
              {"total.h5", "write_h5", "s", SL_PHASE_EPILOGUE},
              {"img_whole.h5", "write_h5", "w", SL_PHASE_EPILOGUE},
              {"img_whole.png", "write_png", "w", SL_PHASE_EPILOGUE}};
  for (int k = 0; k < SL_COUNT_OF(want); k++) {
    int n = sl_graph_find(f.g, want[k].id);
    assert_true(n >= 0);
    const sl_node *node = &f.g->nodes[n];
    assert_string_equal(node->desc->type, want[k].type);
    assert_true(node->desc->sink && node->desc->host);
    assert_int_equal(node->phase, want[k].phase);
    assert_int_equal(node->in_src[0].node, sl_graph_find(f.g, want[k].reads));
    assert_true(node->in_src[0].node < n); /* topological: after what it reads */
  }
  for (int o = 0; o < f.g->n_outputs; o++) assert_true(sl_graph_output_written(f.g, o));
  assert_int_equal(f.p->output_bytes, 0);
  /* a PNG: a strip's bands of deflated rows (500 + 1 bytes a row, 32 rows
   * a band of 16 KiB, 262 rows of 4000 B a strip: 9 bands); the streamed
   * image (300 x 500 f64, 1.2 MB) is held whole by img.h5's write-behind
   * buffer, which img.png draws from (no strip read back); each worker:
   * zlib's state and a band */
  const int64_t band_in = 32 * 501, band_out = (band_in + 5 * (band_in / 16384 + 2) + 16 + 63) / 64 * 64;
  const int64_t bands = 9 * (band_out + 64); /* and 64 bytes of bookkeeping a band */
  assert_int_equal(state_of(&f, "img.h5"), 300 * 500 * 8);
  assert_int_equal(state_of(&f, "total.h5"), 0);
  assert_int_equal(state_of(&f, "img_whole.h5"), 0);
  assert_int_equal(state_of(&f, "img.png"), bands);
  assert_int_equal(state_of(&f, "img_whole.png"), bands);
  assert_int_equal(f.p->nodes[sl_graph_find(f.g, "img.png")].cost.per_worker_bytes, (272 << 10) + (band_in + 63) / 64 * 64);
  /* a writer has no outputs (a host node with outputs would make a device
   * backend drain at each chunk): the streamed image's range is folded by
   * its write_h5 as the chunks pass */
  assert_int_equal(f.g->nodes[sl_graph_find(f.g, "img.png")].n_out, 0);
  assert_int_equal(f.g->nodes[sl_graph_find(f.g, "img_whole.png")].n_out, 0);
  fixture_free(&f);
}

static void test_size_class(void **state) {
  assert_int_equal(sl_size_class(1), 64);
  assert_int_equal(sl_size_class(64), 64);
  assert_int_equal(sl_size_class(65), 128);
  assert_int_equal(sl_size_class(129), 192); /* 64-byte multiples, not powers of two */
  assert_int_equal(sl_size_class(1 << 20), 1 << 20);
  assert_int_equal(sl_size_class((1 << 20) + 1), (1 << 20) + 64);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_chain_lifetimes),   cmocka_unit_test(test_partial_last_chunk),
      cmocka_unit_test(test_epilogue_levels),   cmocka_unit_test(test_second_pass_lifetimes),
      cmocka_unit_test(test_auto_chunk_and_budget),
      cmocka_unit_test(test_auto_chunk_of_host_streams_on_a_device),
      cmocka_unit_test(test_auto_chunk_on_cache_lines),
      cmocka_unit_test(test_in_place_outputs),
      cmocka_unit_test(test_size_class),
      cmocka_unit_test(test_best_fit_slots),
      cmocka_unit_test(test_writer_nodes),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
