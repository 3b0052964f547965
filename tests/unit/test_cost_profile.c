/* The cost model's profile: JSON round trip, the cache key, corrupt and
 * foreign files refused, the estimate formula against its closed form on a
 * hand-made profile, and a plan's estimate from it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "engine/core/settings.h"
#include "engine/plan/cost_profile.h"
#include "engine/plan/plan.h"
#include "nodes/registry.h"
#include "tests/unit/test_support.h"

static sl_backend_caps cpu_caps(int threads) {
  sl_backend_caps c;
  memset(&c, 0, sizeof c);
  c.kind = SL_BACKEND_CPU;
  snprintf(c.device, sizeof c.device, "host CPU, %d threads", threads);
  c.compute_units = threads;
  c.bytes_per_second = 1e10;
  c.ops_per_second = 1e9;
  return c;
}

/* A profile with numbers that are exact in binary, so the closed forms
 * below hold to the last bit. */
static sl_cost_profile hand_made(void) {
  sl_backend_caps caps = cpu_caps(2);
  sl_cost_profile p;
  sl_cost_profile_builtin(&caps, &p);
  p.bytes_per_second = 1024.0;
  p.ops_per_second = 256.0;
  p.call_seconds = 0.5;
  p.batch_seconds = 0.25;
  p.run_seconds = 2.0;
  p.first_touch_seconds_per_byte = 0; /* the closed forms below leave it out; test_pool_estimate has it */
  snprintf(p.created, sizeof p.created, "2024-01-02T03:04:05Z");
  sl_cost_rate sum = {"sum", true, 0.125, 1.0 / 64, 0, 0, 0, 0, 0, 0};
  sl_cost_rate sum_u16 = {"sum/u16", true, 0.0625, 1.0 / 32, 0, 0, 0, 0, 0, 0};
  /* and a setup once per run, and a first call once per process (a
   * constant and a part per byte moved) */
  sl_cost_rate gather = {"gather", false, 1.0, 1.0 / 128, 3.0, 0.75, 1.0 / 1024, 2.0, 4096, 0};
  assert_true(sl_cost_profile_set_rate(&p, &sum));
  assert_true(sl_cost_profile_set_rate(&p, &sum_u16));
  assert_true(sl_cost_profile_set_rate(&p, &gather));
  return p;
}

/* p written as JSON and parsed back. */
static sl_cost_profile round_trip(const sl_cost_profile *p) {
  char *buf = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&buf, &len);
  sl_json j;
  sl_json_init(&j, f, true);
  sl_cost_profile_json(&j, p);
  sl_json_finish(&j);
  fclose(f);
  sl_cost_profile q;
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_cost_profile_parse(buf, len, &q, &err), SL_OK);
  free(buf);
  return q;
}

static void test_json_round_trip(void **state) {
  (void)state;
  sl_cost_profile p = hand_made();
  p.library_load_seconds = 0.375;
  p.pool_seconds_per_byte = 0.5e-9;
  p.first_touch_seconds_per_byte = 0.25e-9;
  p.read_bytes_per_second = 12.5e9;
  sl_cost_profile q = round_trip(&p);
  assert_int_equal(q.kind, p.kind);
  assert_string_equal(q.device, p.device);
  assert_int_equal(q.threads, p.threads);
  assert_string_equal(q.created, p.created);
  assert_true(q.bytes_per_second == p.bytes_per_second && q.ops_per_second == p.ops_per_second);
  assert_true(q.call_seconds == p.call_seconds && q.batch_seconds == p.batch_seconds &&
              q.run_seconds == p.run_seconds);
  assert_true(q.library_load_seconds == 0.375 && q.pool_seconds_per_byte == 0.5e-9 &&
              q.first_touch_seconds_per_byte == 0.25e-9);
  assert_true(q.read_bytes_per_second == 12.5e9);
  assert_int_equal(q.n_rates, p.n_rates);
  for (int i = 0; i < p.n_rates; i++) {
    assert_string_equal(q.rates[i].type, p.rates[i].type);
    assert_int_equal(q.rates[i].per_op, p.rates[i].per_op);
    assert_true(q.rates[i].call_seconds == p.rates[i].call_seconds);
    assert_true(q.rates[i].run_seconds == p.rates[i].run_seconds);
    assert_true(q.rates[i].seconds_per_unit == p.rates[i].seconds_per_unit);
    assert_true(q.rates[i].first_call_seconds == p.rates[i].first_call_seconds);
  }
  assert_true(q.rates[2].first_call_seconds == 0.75); /* gather's, written and read back */
  assert_true(q.rates[2].first_call_seconds_per_byte == 1.0 / 1024);
  assert_true(q.rates[2].first_call_seconds_most == 2.0);
  assert_true(q.rates[2].first_call_bytes_least == 4096);
  for (int i = 0; i < p.n_rates; i++)
    assert_true(q.rates[i].first_call_seconds_per_byte == p.rates[i].first_call_seconds_per_byte);
}

static void test_cache_key(void **state) {
  (void)state;
  char key[256];
  sl_cost_profile_key(SL_BACKEND_CPU, "host CPU, 2 threads", 2, key, sizeof key);
  assert_string_equal(key, "cpu-host_CPU_2_threads-t2.json");
  sl_cost_profile_key(SL_BACKEND_CUDA, "NVIDIA H200 (132 SMs, cc 9.0)", 132, key, sizeof key);
  assert_string_equal(key, "cuda-NVIDIA_H200_132_SMs_cc_9_0-t132.json");
  /* no path separators or dots can come from the device name */
  sl_cost_profile_key(SL_BACKEND_CPU, "../../etc/passwd", 1, key, sizeof key);
  assert_string_equal(key, "cpu-etc_passwd-t1.json");
  /* the cache folder: XDG_CACHE_HOME, else HOME/.cache */
  char dir[512];
  setenv("XDG_CACHE_HOME", "/x/cache", 1);
  assert_true(sl_cost_cache_dir(dir, sizeof dir));
  assert_string_equal(dir, "/x/cache/sluice");
  unsetenv("XDG_CACHE_HOME");
  setenv("HOME", "/home/u", 1);
  assert_true(sl_cost_cache_dir(dir, sizeof dir));
  assert_string_equal(dir, "/home/u/.cache/sluice");
}

static void test_corrupt_and_foreign_ignored(void **state) {
  (void)state;
  char dir[256], path[512];
  assert_int_equal(temp_dir_make(dir, sizeof dir, "/tmp/sluice-costXXXXXX"), 0);
  setenv("XDG_CACHE_HOME", dir, 1);
  sl_backend_caps caps = cpu_caps(2);
  assert_true(sl_cost_cache_path(&caps, path, sizeof path));
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_settings_init(NULL, 0, &err), SL_OK);
  /* not calibrated: the guesses, no warning */
  sl_cost_profile got;
  char note[512], warning[1200];
  sl_cost_profile_for(&caps, NULL, &got, note, sizeof note, warning, sizeof warning);
  assert_true(sl_cost_profile_is_builtin(&got));
  assert_string_equal(warning, "");
  assert_non_null(strstr(note, "sluice calibrate --threads 2`"));
  /* a saved profile is used */
  sl_cost_profile p = hand_made();
  assert_int_equal(sl_cost_profile_save(path, &p, &err), SL_OK);
  sl_cost_profile_for(&caps, NULL, &got, note, sizeof note, warning, sizeof warning);
  assert_string_equal(got.source, path);
  assert_string_equal(warning, "");
  assert_int_equal(got.n_rates, 3);
  /* truncated: ignored with a warning */
  FILE *f = fopen(path, "r+");
  assert_non_null(f);
  assert_int_equal(ftruncate(fileno(f), 40), 0);
  fclose(f);
  sl_cost_profile_for(&caps, NULL, &got, note, sizeof note, warning, sizeof warning);
  assert_true(sl_cost_profile_is_builtin(&got));
  assert_non_null(strstr(warning, "not a sluice cost profile"));
  /* garbage, a negative rate, another format: refused by the parser */
  const char *bad[] = {
      "", "[]", "{\"format\": \"sluice-cost-profile\"", "\xff\xfe",
      "{\"format\":\"sluice-cost-profile\",\"version\":1,\"backend\":\"cpu\",\"device\":\"d\","
      "\"threads\":1,\"bytes_per_second\":1,\"ops_per_second\":1,\"call_seconds\":0,"
      "\"batch_seconds\":0,\"run_seconds\":0,\"rates\":[{\"type\":\"sum\",\"unit\":\"op\","
      "\"call_seconds\":0,\"seconds_per_unit\":-1}]}",
      "{\"format\":\"sluice-cost-profile\",\"version\":1,\"backend\":\"cpu\",\"device\":\"d\","
      "\"threads\":1,\"bytes_per_second\":1,\"ops_per_second\":1,\"call_seconds\":0,"
      "\"batch_seconds\":0,\"run_seconds\":0,\"rates\":[{\"type\":\"sum\",\"unit\":\"op\","
      "\"call_seconds\":0,\"seconds_per_unit\":1,\"run_work_least\":-1}]}",
      "{\"format\":\"sluice-cost-profile\",\"version\":1,\"backend\":\"cpu\",\"device\":\"d\","
      "\"threads\":1,\"bytes_per_second\":1,\"read_bytes_per_second\":-1,\"ops_per_second\":1,"
      "\"call_seconds\":0,\"batch_seconds\":0,\"run_seconds\":0,\"rates\":[]}",
      "{\"format\":\"other\",\"version\":1}",
  };
  /* a profile measured before read_bytes_per_second was: read as 0 */
  const char *older = "{\"format\":\"sluice-cost-profile\",\"version\":1,\"backend\":\"cpu\",\"device\":\"d\","
                      "\"threads\":1,\"bytes_per_second\":1,\"ops_per_second\":1,\"call_seconds\":0,"
                      "\"batch_seconds\":0,\"run_seconds\":0,\"rates\":[]}";
  assert_int_equal(sl_cost_profile_parse(older, strlen(older), &got, &err), SL_OK);
  assert_true(got.read_bytes_per_second == 0);
  for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
    assert_int_equal(sl_cost_profile_parse(bad[k], strlen(bad[k]), &got, &err), SL_ERR_PARSE);
  /* measured with another thread count (a foreign file): ignored with a warning */
  p.threads = 3;
  assert_int_equal(sl_cost_profile_save(path, &p, &err), SL_OK);
  sl_cost_profile_for(&caps, NULL, &got, note, sizeof note, warning, sizeof warning);
  assert_true(sl_cost_profile_is_builtin(&got));
  assert_non_null(strstr(warning, "3 threads"));
  /* cost_profile=none: the guesses whatever the cache holds */
  const char *none[] = {"cost_profile=none"};
  assert_int_equal(sl_settings_init(none, 1, &err), SL_OK);
  sl_cost_profile_for(&caps, NULL, &got, note, sizeof note, warning, sizeof warning);
  assert_true(sl_cost_profile_is_builtin(&got));
  assert_string_equal(warning, "");
  assert_int_equal(sl_settings_init(NULL, 0, &err), SL_OK);
  remove(path);
  temp_dir_remove(dir);
  unsetenv("XDG_CACHE_HOME");
}

static void test_estimate_closed_form(void **state) {
  (void)state;
  sl_cost_profile p = hand_made();
  sl_node_cost c = {.bytes_read = 3000, .bytes_written = 1000, .ops = 640};
  /* a rate: calls x per call + ops x per op */
  assert_true(sl_cost_estimate(&p, "sum", &c, 4, false) == 4 * 0.125 + 640.0 / 64);
  /* a dtype's own rate wins, another dtype falls back to the type's */
  assert_true(sl_cost_estimate(&p, "sum/u16", &c, 4, false) == 4 * 0.0625 + 640.0 / 32);
  assert_true(sl_cost_estimate(&p, "sum/f32", &c, 4, false) == 4 * 0.125 + 640.0 / 64);
  /* a variant (sl_node_desc.rate_variant) without its own rate: its dtype's, else its type's */
  assert_true(sl_cost_estimate(&p, "sum/u16/parallax", &c, 4, false) == 4 * 0.0625 + 640.0 / 32);
  assert_true(sl_cost_estimate(&p, "sum/f32/parallax", &c, 4, false) == 4 * 0.125 + 640.0 / 64);
  assert_true(sl_cost_rate_for(&p, "sum/u16/parallax") == sl_cost_rate_for(&p, "sum/u16"));
  assert_null(sl_cost_rate_for(&p, "affine/u16/parallax"));
  /* per byte: bytes moved */
  assert_true(sl_cost_estimate(&p, "gather", &c, 2, false) == 3.0 + 2 * 1.0 + 4000.0 / 128);
  assert_true(sl_cost_estimate(&p, "gather", &c, 0, false) == 4000.0 / 128); /* never called: no setup */
  /* no rate: calls x call_seconds + max(bytes / bandwidth, ops / op rate) */
  assert_true(sl_cost_estimate(&p, "affine", &c, 3, false) == 3 * 0.5 + 4000.0 / 1024);
  sl_node_cost heavy = {.bytes_read = 1024, .ops = 2560};
  assert_true(sl_cost_estimate(&p, "affine", &heavy, 1, false) == 0.5 + 2560.0 / 256);
}

/* A setup once per run fitted on calibrate's inputs (run_seconds) of a
 * node on a device is scaled down by the run's share of the least work it
 * was fitted on (run_work_least), never up; a host node's is kept whole, and
 * so is any with 0 there; the field is written and read back. */
static void test_run_setup_below_least(void **state) {
  (void)state;
  sl_cost_profile p = hand_made();
  sl_cost_rate src = {"src", false, 0, 1.0 / 128, 3.0, 0, 0, 0, 0, 8000};
  assert_true(sl_cost_profile_set_rate(&p, &src));
  sl_node_cost half = {.bytes_read = 3000, .bytes_written = 1000}, at = {.bytes_read = 8000},
               past = {.bytes_read = 16000};
  assert_true(sl_cost_estimate(&p, "src", &half, 1, true) == 3.0 * 0.5 + 4000.0 / 128);
  assert_true(sl_cost_estimate(&p, "src", &at, 1, true) == 3.0 + 8000.0 / 128);
  assert_true(sl_cost_estimate(&p, "src", &past, 1, true) == 3.0 + 16000.0 / 128);
  assert_true(sl_cost_estimate(&p, "src", &half, 0, true) == 4000.0 / 128); /* never called: no setup */
  assert_true(sl_cost_estimate(&p, "src", &half, 1, false) == 3.0 + 4000.0 / 128); /* on the host: whole */
  src.run_work_least = 0; /* an older profile: the setup whole */
  assert_true(sl_cost_profile_set_rate(&p, &src));
  assert_true(sl_cost_estimate(&p, "src", &half, 1, true) == 3.0 + 4000.0 / 128);
  src.run_work_least = 8000;
  assert_true(sl_cost_profile_set_rate(&p, &src));
  sl_cost_profile q = round_trip(&p);
  const sl_cost_rate *r = sl_cost_profile_rate(&q, "src");
  assert_non_null(r);
  assert_true(r->run_work_least == 8000 && r->run_seconds == 3.0);
  assert_true(sl_cost_profile_rate(&q, "gather")->run_work_least == 0);
}

/* Work a node decided on from the data, at its variant's rate: the
 * operations at the variant's per-op rate, and the variant's run constant
 * over the node's own (on a device scaled below calibrate's least work,
 * as a run's); none where the variant's constant is below the node's. */
static void test_decided_seconds(void **state) {
  (void)state;
  sl_cost_profile p = hand_made();
  const sl_cost_rate own = {"fit", true, 0, 1e-9, 0.001, 0, 0, 0, 0, 0};
  sl_cost_rate variant = {"fit/deep", true, 0, 2e-9, 0.007, 0, 0, 0, 0, 4000000};
  assert_true(sl_cost_profile_set_rate(&p, &own));
  assert_true(sl_cost_profile_set_rate(&p, &variant));
  const sl_node_desc desc = {.type = "fit"};
  sl_node n;
  memset(&n, 0, sizeof n);
  n.desc = &desc; /* no inputs: the key is the type's */
  const sl_node_cost none = {0};
  assert_true(sl_cost_decided_seconds(&p, &n, "deep", 0, &none, false, true) == 0);
  assert_true(fabs(sl_cost_decided_seconds(&p, &n, "deep", 8000000, &none, false, false) - (0.016 + 0.006)) < 1e-15);
  assert_true(fabs(sl_cost_decided_seconds(&p, &n, "deep", 8000000, &none, false, true) - (0.016 + 0.006)) < 1e-15);
  /* below the least work a device run pays its share of the constant */
  assert_true(fabs(sl_cost_decided_seconds(&p, &n, "deep", 2000000, &none, false, true) - (0.004 + 0.0035 - 0.001)) < 1e-15);
  assert_true(fabs(sl_cost_decided_seconds(&p, &n, "deep", 2000000, &none, false, false) - (0.004 + 0.006)) < 1e-15);
  /* without a variant: the node's own rate, no constant */
  assert_true(fabs(sl_cost_decided_seconds(&p, &n, NULL, 1000000, &none, false, true) - 0.001) < 1e-15);
  variant.run_seconds = 0.0005; /* below the node's own: nothing more */
  assert_true(sl_cost_profile_set_rate(&p, &variant));
  assert_true(fabs(sl_cost_decided_seconds(&p, &n, "deep", 8000000, &none, false, false) - 0.016) < 1e-15);
}

/* The first node of a run that decides on a variant pays the variant's
 * first call over the node's own (sl_cost_first_call_seconds of the node's
 * planned work: on the host a share of it below the variant's least
 * bytes); later nodes, and a variant whose first call is below the node's
 * own, add nothing. */
static void test_decided_first_call(void **state) {
  (void)state;
  sl_cost_profile p = hand_made();
  const sl_cost_rate own = {"fit", true, 0, 1e-9, 0, 0.0001, 0, 0, 0, 0};
  sl_cost_rate variant = {"fit/deep", true, 0, 2e-9, 0, 0.0025, 0, 0, 200000, 0};
  assert_true(sl_cost_profile_set_rate(&p, &own));
  assert_true(sl_cost_profile_set_rate(&p, &variant));
  const sl_node_desc desc = {.type = "fit"};
  sl_node n;
  memset(&n, 0, sizeof n);
  n.desc = &desc;
  const sl_node_cost big = {.bytes_read = 300000}, half = {.bytes_read = 100000};
  const double ops = 0.002; /* 1e6 operations at the variant's rate */
  assert_true(fabs(sl_cost_decided_seconds(&p, &n, "deep", 1000000, &big, true, false) - (ops + 0.0024)) < 1e-15);
  assert_true(fabs(sl_cost_decided_seconds(&p, &n, "deep", 1000000, &big, false, false) - ops) < 1e-15);
  /* on the host below the least bytes: the share of both first calls */
  assert_true(fabs(sl_cost_decided_seconds(&p, &n, "deep", 1000000, &half, true, false) -
                   (ops + 0.5 * 0.0025 - 0.0001)) < 1e-15);
  /* on a device a first call is not scaled */
  assert_true(fabs(sl_cost_decided_seconds(&p, &n, "deep", 1000000, &half, true, true) - (ops + 0.0024)) < 1e-15);
  variant.first_call_seconds = 0.00005; /* below the node's own */
  assert_true(sl_cost_profile_set_rate(&p, &variant));
  assert_true(fabs(sl_cost_decided_seconds(&p, &n, "deep", 1000000, &big, true, false) - ops) < 1e-15);
}

/* A node with a rate variant of its own (dpc's ADF branch rule) that
 * decides on work of another variant (the parallax fit): the decided key
 * is the type and dtype with the decided variant in place of the node's
 * ("fit/f64/deep", not "fit/f64/wide/deep", which fell back to the node's
 * own rate), and its first call and run constant are over the node's own. */
static const char *wide_variant(const sl_node *n) {
  (void)n;
  return "wide";
}

static void test_decided_over_own_variant(void **state) {
  (void)state;
  sl_cost_profile p = hand_made();
  const sl_cost_rate own = {"fit/f64/wide", true, 0, 1e-9, 0.001, 0.0001, 0, 0, 0, 0};
  const sl_cost_rate variant = {"fit/f64/deep", true, 0, 2e-9, 0.007, 0.0025, 0, 0, 0, 0};
  assert_true(sl_cost_profile_set_rate(&p, &own));
  assert_true(sl_cost_profile_set_rate(&p, &variant));
  const sl_node_desc desc = {.type = "fit", .rate_variant = wide_variant};
  sl_node n;
  memset(&n, 0, sizeof n);
  n.desc = &desc;
  n.n_in = 1;
  n.in[0].dtype = SL_F64;
  char key[128];
  sl_cost_rate_key(&n, key, sizeof key);
  assert_string_equal(key, "fit/f64/wide");
  sl_cost_decided_key(&n, "deep", key, sizeof key);
  assert_string_equal(key, "fit/f64/deep");
  sl_cost_decided_key(&n, NULL, key, sizeof key);
  assert_string_equal(key, "fit/f64/wide");
  const sl_node_cost big = {.bytes_read = 300000};
  /* 1e6 operations at the variant's rate, its constant and first call over the node's own */
  assert_true(fabs(sl_cost_decided_seconds(&p, &n, "deep", 1000000, &big, true, false) -
                   (0.002 + 0.006 + 0.0024)) < 1e-15);
}

/* A plan's estimate: ramp -> sum over 4 chunks; ramp has no rate (the
 * bandwidth model), sum/f32 falls back to sum's rate; 4 stream levels... */
static void test_plan_estimate(void **state) {
  (void)state;
  char path[512];
  write_temp_file(path, sizeof path, "cost.yaml",
                  "pipeline: cost\n"
                  "nodes:\n"
                  "  r: {type: ramp, params: {positions: [1024], item_shape: [256]}}\n"
                  "  s: {type: sum, inputs: {x: r.out}}\n"
                  "outputs: {total: s.total}\n");
  sl_error err;
  sl_error_clear(&err);
  sl_spec *spec;
  sl_graph *g;
  assert_int_equal(sl_spec_load(path, NULL, 0, &spec, &err), SL_OK);
  assert_int_equal(sl_graph_build(spec, NULL, sl_nodes_registry(), &g, &err), SL_OK);
  sl_cost_profile prof = hand_made();
  sl_plan_opts po;
  memset(&po, 0, sizeof po);
  po.caps = cpu_caps(2);
  po.chunk_positions = 256;
  po.profile = &prof;
  sl_plan *p;
  assert_int_equal(sl_plan_build(g, &po, &p, &err), SL_OK);
  assert_int_equal(p->n_chunks, 4);
  int r = sl_graph_find(g, "r"), s = sl_graph_find(g, "s");
  assert_int_equal(p->nodes[r].calls, 4);
  assert_int_equal(p->nodes[s].calls, 4);
  /* ramp: writes 1 MiB (4 B x 256 x 1024) and declares an op per element */
  double ramp = 4 * 0.5 + fmax((double)(1 << 20) / 1024, 262144.0 / 256);
  double sum = 4 * 0.125 + 262144.0 / 64;
  assert_true(fabs(p->nodes[r].est_seconds - ramp) <= 1e-9 * ramp);
  assert_true(fabs(p->nodes[s].est_seconds - sum) <= 1e-9 * sum);
  /* two stream levels run 4 times each: 8 batches, then the run */
  assert_int_equal(p->batches, 8);
  double total = ramp + sum + 8 * 0.25 + 2.0;
  assert_true(fabs(p->est_seconds - total) <= 1e-9 * total);
  assert_string_equal(p->profile.created, "2024-01-02T03:04:05Z");
  sl_plan_free(p);
  sl_graph_free(g);
  sl_spec_free(spec);
}

/* Plans pipeline text `yaml` with `prof` on `caps` (a device backend's
 * plan is pure: no device is needed). */
static sl_plan *plan_text(const char *yaml, const sl_backend_caps *caps, const sl_cost_profile *prof,
                          sl_graph **g, sl_spec **spec) {
  char path[512];
  write_temp_file(path, sizeof path, "warm.yaml", yaml);
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_spec_load(path, NULL, 0, spec, &err), SL_OK);
  assert_int_equal(sl_graph_build(*spec, NULL, sl_nodes_registry(), g, &err), SL_OK);
  sl_plan_opts po;
  memset(&po, 0, sizeof po);
  po.caps = *caps;
  po.chunk_positions = 16;
  po.profile = prof;
  sl_plan *p = NULL;
  assert_int_equal(sl_plan_build(*g, &po, &p, &err), SL_OK);
  return p;
}

static void free_plan_text(sl_plan *p, sl_graph *g, sl_spec *spec) {
  sl_plan_free(p);
  sl_graph_free(g);
  sl_spec_free(spec);
}

/* A loop pays its body's setups once: a body node's rate's run_seconds in
 * the first iteration only (the body's nodes are prepared once for the
 * loop), its calls, work and batches every iteration, the run's own
 * overhead never (the loop's iterations are its calls); with a loop's
 * iterations x (setup + call + work + batch) the shipped iterate_until's
 * loop was estimated at 5 times its time. */
static void test_loop_setup_once(void **state) {
  (void)state;
  char step[512];
  write_temp_file(step, sizeof step, "once_step.yaml",
                  "pipeline: once_step\n"
                  "inputs: [x]\n"
                  "nodes:\n"
                  "  step: {type: affine, inputs: {x: inputs.x}, params: {scale: 0.5, offset: 1}}\n"
                  "outputs: {x: step.y}\n");
  sl_cost_profile prof = hand_made();
  sl_cost_rate affine = {"affine", true, 0.5, 1.0 / 64, 4.0, 0, 0, 0, 0, 0}; /* setup 4 s a run */
  assert_true(sl_cost_profile_set_rate(&prof, &affine));
  const sl_backend_caps cpu = cpu_caps(2);
  sl_graph *g;
  sl_spec *spec;
  sl_plan *p = plan_text("pipeline: once\n"
                         "nodes:\n"
                         "  init: {type: constant, params: {shape: [256], value: 0}}\n"
                         "  loop: {iterate: once_step.yaml, times: 5, inputs: {x: init.out}, carry: [x]}\n"
                         "outputs: {x: loop.x}\n",
                         &cpu, &prof, &g, &spec);
  const int loop = sl_graph_find(g, "loop");
  const sl_plan *body = p->nodes[loop].body;
  assert_non_null(body);
  assert_int_equal(p->nodes[loop].calls, 5);
  /* the body: affine's one call and its ops (two an element), its setup;
   * one batch; the run */
  assert_int_equal(body->nodes[0].cost.ops, 512);
  const double work = 0.5 + 512.0 / 64, setup = 4.0;
  assert_true(fabs(body->est_seconds - (setup + work + 0.25 + 2.0)) <= 1e-9);
  assert_true(fabs(body->est_once_seconds - setup) <= 1e-12);
  sl_node_cost carry;
  sl_plan_loop_carry_cost(&g->nodes[loop], &carry);
  const double loop_s = 5 * (work + 0.25) + setup + sl_cost_estimate(&prof, "iterate", &carry, 5, false);
  assert_true(fabs(p->nodes[loop].est_seconds - loop_s) <= 1e-9 * loop_s);
  free_plan_text(p, g, spec);
}


/* The wait for a device library's background load (cuFFT: dpc's first call
 * joins it): on a device backend dpc's estimate grows by what is left of
 * the profile's library_load_seconds when its level starts (the levels
 * before it, as estimated without any wait), the run's by the same; idpc
 * after it waits for nothing; a load done before dpc starts, or a CPU
 * plan, changes nothing. */
/* A device backend's capabilities for plans (no device needed). */
static sl_backend_caps pretend_gpu(void) {
  sl_backend_caps gpu = cpu_caps(2);
  gpu.kind = SL_BACKEND_CUDA;
  snprintf(gpu.device, sizeof gpu.device, "a pretend GPU");
  gpu.device_memory = true;
  gpu.memory_bytes = (uint64_t)1 << 34;
  return gpu;
}

static void test_warm_up_wait(void **state) {
  (void)state;
  /* the arithmetic */
  assert_true(sl_cost_warm_up_wait(0.25, 0.0625) == 0.1875);
  assert_true(sl_cost_warm_up_wait(0.25, 0.5) == 0);
  assert_true(sl_cost_warm_up_wait(0.25, -1) == 0.25);
  assert_true(sl_cost_warm_up_wait(0, 0) == 0);
  static const char yaml[] =
      "pipeline: warm\n"
      "nodes:\n"
      "  source: {type: synthetic_4dstem, params: {scan_shape: [8, 8], detector_shape: [16, 16], disk_radius: 3}}\n"
      "  com: {type: com, inputs: {frames: source.frames}}\n"
      "  dpc: {type: dpc, inputs: {com_row: com.com_row, com_col: com.com_col}}\n"
      "  idpc: {type: idpc, inputs: {com_row: dpc.com_row_rot, com_col: dpc.com_col_rot}}\n"
      "outputs: {phase: idpc.phase}\n";
  sl_backend_caps gpu = pretend_gpu();
  sl_cost_profile prof = hand_made();
  prof.library_load_seconds = 0;
  sl_graph *g0, *g1, *g2, *g3;
  sl_spec *s0, *s1, *s2, *s3;
  sl_plan *p0 = plan_text(yaml, &gpu, &prof, &g0, &s0);
  int dpc = sl_graph_find(g0, "dpc"), idpc = sl_graph_find(g0, "idpc");
  int level = p0->exec_level[dpc * p0->n_passes];
  assert_int_equal(p0->levels[level].n_nodes, 1); /* dpc alone: nothing before it in its level */
  double started = 0;
  for (int l = 0; l < level; l++) started += p0->levels[l].est_seconds;
  assert_true(started > 0);
  assert_true(p0->nodes[dpc].warm_up_wait_seconds == 0);

  /* a load that outlasts everything before dpc by 10 s */
  prof.library_load_seconds = started + 10;
  sl_plan *p1 = plan_text(yaml, &gpu, &prof, &g1, &s1);
  assert_true(fabs(p1->nodes[dpc].warm_up_wait_seconds - 10) < 1e-9);
  assert_true(fabs(p1->nodes[dpc].est_seconds - (p0->nodes[dpc].est_seconds + 10)) < 1e-9);
  assert_true(fabs(p1->levels[level].est_seconds - (p0->levels[level].est_seconds + 10)) < 1e-9);
  assert_true(fabs(p1->est_seconds - (p0->est_seconds + 10)) < 1e-9);
  assert_true(p1->nodes[idpc].est_seconds == p0->nodes[idpc].est_seconds);
  assert_true(p1->nodes[idpc].warm_up_wait_seconds == 0);
  /* estimated again as execution starts, 4 s after the backend came up
   * (the load has not finished: nothing started it here): 6 s are left */
  const double est1 = p1->est_seconds, node1 = p1->nodes[dpc].est_seconds;
  sl_plan_refresh_warm_up_waits(p1, 4);
  assert_true(fabs(p1->nodes[dpc].warm_up_wait_seconds - 6) < 1e-9);
  assert_true(fabs(p1->nodes[dpc].est_seconds - (node1 - 4)) < 1e-9);
  assert_true(fabs(p1->levels[level].est_seconds - (p0->levels[level].est_seconds + 6)) < 1e-9);
  assert_true(fabs(p1->est_seconds - (est1 - 4)) < 1e-9);
  /* 20 s after it: none left, the estimates without the wait */
  sl_plan_refresh_warm_up_waits(p1, 20);
  assert_true(p1->nodes[dpc].warm_up_wait_seconds == 0);
  assert_true(fabs(p1->nodes[dpc].est_seconds - p0->nodes[dpc].est_seconds) < 1e-9);
  assert_true(fabs(p1->est_seconds - p0->est_seconds) < 1e-9);

  /* a load over before dpc starts */
  prof.library_load_seconds = started * 0.5;
  sl_plan *p2 = plan_text(yaml, &gpu, &prof, &g2, &s2);
  assert_true(p2->nodes[dpc].est_seconds == p0->nodes[dpc].est_seconds);
  assert_true(p2->est_seconds == p0->est_seconds);

  /* the CPU backend loads no device library */
  prof.library_load_seconds = started + 10;
  sl_backend_caps cpu = cpu_caps(2);
  sl_plan *p3 = plan_text(yaml, &cpu, &prof, &g3, &s3);
  assert_true(p3->nodes[dpc].warm_up_wait_seconds == 0);
  prof.library_load_seconds = 0;
  sl_plan *p4;
  sl_graph *g4;
  sl_spec *s4;
  p4 = plan_text(yaml, &cpu, &prof, &g4, &s4);
  assert_true(p3->est_seconds == p4->est_seconds);
  free_plan_text(p0, g0, s0);
  free_plan_text(p1, g1, s1);
  free_plan_text(p2, g2, s2);
  free_plan_text(p3, g3, s3);
  free_plan_text(p4, g4, s4);
}

/* A node type's first call in a process (its kernels loaded, its library
 * started): the first node of each rate in execution order pays the rate's
 * first_call_seconds, on its estimate, its level's and the run's; a second
 * node of the same rate does not; the same on the CPU backend. */
static void test_first_calls(void **state) {
  (void)state;
  static const char yaml[] =
      "pipeline: first\n"
      "nodes:\n"
      "  r: {type: ramp, params: {positions: [64], item_shape: [8]}}\n"
      "  a: {type: affine, inputs: {x: r.out}, params: {scale: 2}}\n"
      "  b: {type: affine, inputs: {x: a.y}, params: {scale: 3}}\n"
      "outputs: {y: b.y}\n";
  sl_backend_caps gpu = pretend_gpu();
  sl_cost_profile prof = hand_made(), without = hand_made();
  sl_cost_rate affine = {"affine", true, 0.125, 1.0 / 64, 0, 0, 0, 0, 0, 0};
  assert_true(sl_cost_profile_set_rate(&without, &affine));
  affine.first_call_seconds = 5.0;
  assert_true(sl_cost_profile_set_rate(&prof, &affine));
  sl_graph *g0, *g1, *g2;
  sl_spec *s0, *s1, *s2;
  sl_plan *p0 = plan_text(yaml, &gpu, &without, &g0, &s0);
  sl_plan *p1 = plan_text(yaml, &gpu, &prof, &g1, &s1);
  int a = sl_graph_find(g1, "a"), b = sl_graph_find(g1, "b");
  assert_true(p1->nodes[a].first_call_seconds == 5.0);
  assert_true(p1->nodes[b].first_call_seconds == 0);
  assert_true(fabs(p1->nodes[a].est_seconds - (p0->nodes[a].est_seconds + 5)) < 1e-9);
  assert_true(p1->nodes[b].est_seconds == p0->nodes[b].est_seconds);
  int level = p1->exec_level[a * p1->n_passes];
  assert_true(fabs(p1->levels[level].est_seconds - (p0->levels[level].est_seconds + 5)) < 1e-9);
  assert_true(fabs(p1->est_seconds - (p0->est_seconds + 5)) < 1e-9);
  /* the CPU backend: the same */
  sl_backend_caps cpu = cpu_caps(2);
  sl_plan *p2 = plan_text(yaml, &cpu, &prof, &g2, &s2);
  assert_true(p2->nodes[a].first_call_seconds == 5.0);
  assert_true(p2->nodes[b].first_call_seconds == 0);
  /* a part that grows with the bytes the node moves in a call (64 positions
   * of 8 f32 read and written: 4096 bytes) */
  affine.first_call_seconds_per_byte = 1.0 / 4096;
  assert_true(sl_cost_profile_set_rate(&prof, &affine));
  sl_graph *g3;
  sl_spec *s3;
  sl_plan *p3 = plan_text(yaml, &gpu, &prof, &g3, &s3);
  const double moved = (double)(p3->nodes[a].cost.bytes_read + p3->nodes[a].cost.bytes_written);
  assert_true(moved == 4096);
  assert_true(fabs(p3->nodes[a].first_call_seconds - (5.0 + moved / 4096)) < 1e-12);
  assert_true(fabs(p3->est_seconds - (p0->est_seconds + 6)) < 1e-9);
  assert_true(p3->nodes[b].first_call_seconds == 0);
  /* bounded by the largest extra calibrate saw */
  affine.first_call_seconds_most = 5.5;
  assert_true(sl_cost_profile_set_rate(&prof, &affine));
  sl_graph *g4;
  sl_spec *s4;
  sl_plan *p4 = plan_text(yaml, &gpu, &prof, &g4, &s4);
  assert_true(p4->nodes[a].first_call_seconds == 5.5);
  free_plan_text(p4, g4, s4);
  free_plan_text(p0, g0, s0);
  free_plan_text(p1, g1, s1);
  free_plan_text(p2, g2, s2);
  free_plan_text(p3, g3, s3);
}

/* A node whose rate is its bare type's (no rate of its dtype: a first call
 * fitted over every dtype's, most of it the type's start in the process)
 * pays no first call after an earlier node of the type paid its own
 * dtype's (iterate_until's two writers of results.h5); one with its own
 * dtype's rate pays it whatever came before. */
static void test_first_call_type_start(void **state) {
  (void)state;
  static const char yaml[] =
      "pipeline: first_types\n"
      "nodes:\n"
      "  r64: {type: ramp, params: {positions: [64], item_shape: [8], dtype: f64}}\n"
      "  r32: {type: ramp, params: {positions: [64], item_shape: [8]}}\n"
      "  a: {type: affine, inputs: {x: r64.out}, params: {scale: 2}}\n"
      "  b: {type: affine, inputs: {x: r32.out}, params: {scale: 3}}\n"
      "outputs: {a: a.y, b: b.y}\n";
  sl_backend_caps cpu = cpu_caps(2);
  sl_cost_profile prof = hand_made();
  const sl_cost_rate bare = {"affine", true, 0.125, 1.0 / 64, 0, 4.0, 0, 0, 0, 0};
  const sl_cost_rate f64 = {"affine/f64", true, 0.125, 1.0 / 64, 0, 5.0, 0, 0, 0, 0};
  assert_true(sl_cost_profile_set_rate(&prof, &bare));
  assert_true(sl_cost_profile_set_rate(&prof, &f64));
  sl_graph *g;
  sl_spec *s;
  sl_plan *p = plan_text(yaml, &cpu, &prof, &g, &s);
  const int a = sl_graph_find(g, "a"), b = sl_graph_find(g, "b");
  assert_true(p->exec_level[a * p->n_passes] == p->exec_level[b * p->n_passes] && a < b);
  assert_string_equal(p->nodes[a].rate->type, "affine/f64");
  assert_string_equal(p->nodes[b].rate->type, "affine");
  assert_true(p->nodes[a].first_call_seconds == 5.0);
  assert_true(p->nodes[b].first_call_seconds == 0);
  free_plan_text(p, g, s);
  /* b with a rate of its own dtype pays it */
  const sl_cost_rate f32 = {"affine/f32", true, 0.125, 1.0 / 64, 0, 3.0, 0, 0, 0, 0};
  assert_true(sl_cost_profile_set_rate(&prof, &f32));
  p = plan_text(yaml, &cpu, &prof, &g, &s);
  assert_true(p->nodes[a].first_call_seconds == 5.0);
  assert_true(p->nodes[b].first_call_seconds == 3.0);
  free_plan_text(p, g, s);
}

/* calibrate's fit of a first call: a + b x bytes, a and b >= 0, over each
 * size's median. */
static void test_first_call_fit(void **state) {
  (void)state;
  double a, b, most, least;
  /* on a line: 1 ms + 2 ns a byte, at most the largest extra */
  const double x1[] = {1e5, 1e6, 4e6}, y1[] = {1e-3 + 2e-4, 1e-3 + 2e-3, 1e-3 + 8e-3};
  sl_cost_fit_first_call(x1, y1, 3, &a, &b, &most, &least);
  assert_true(fabs(a - 1e-3) < 1e-12 && fabs(b - 2e-9) < 1e-18 && most == y1[2] && least == 1e5);
  /* all of one size: the largest, nothing per byte */
  const double x2[] = {5e5, 5e5}, y2[] = {3e-3, 4e-3};
  sl_cost_fit_first_call(x2, y2, 2, &a, &b, &most, &least);
  assert_true(a == 4e-3 && b == 0 && most == 0 && least == 5e5);
  /* shrinking with the bytes: the largest, nothing per byte */
  const double x3[] = {1e5, 1e6}, y3[] = {5e-3, 1e-3};
  sl_cost_fit_first_call(x3, y3, 2, &a, &b, &most, &least);
  assert_true(a == 5e-3 && b == 0 && most == 0 && least == 1e5);
  /* an intercept that would be negative: through the origin */
  const double x4[] = {1e6, 2e6}, y4[] = {1e-3, 3e-3};
  sl_cost_fit_first_call(x4, y4, 2, &a, &b, &most, &least);
  assert_true(a == 0 && fabs(b - (1e-3 * 1e6 + 3e-3 * 2e6) / (1e12 + 4e12)) < 1e-20 && most == 3e-3);
  /* three samples of each size, one of them far off: each size's median */
  const double x5[] = {1e6, 1e6, 1e6, 1e7, 1e7, 1e7}, y5[] = {7e-3, 5e-4, 6e-4, 6e-4, 8e-4, 7e-4};
  sl_cost_fit_first_call(x5, y5, 6, &a, &b, &most, &least);
  assert_true(fabs(a - (6e-4 - 1e6 * (1e-4 / 9e6))) < 1e-12 && fabs(b - 1e-4 / 9e6) < 1e-18);
  assert_true(most == 7e-4 && least == 1e6);
  /* four sizes on a line, then one of them far off (above or below): the
   * line, bounded by itself at the largest size, whichever is off */
  const double x6[] = {1e5, 1e6, 2e6, 4e6};
  for (int off = -1; off < 4; off++) {
    double y6[4];
    for (int k = 0; k < 4; k++) y6[k] = 1e-3 + 2e-9 * x6[k] + (k == off ? 1e-2 : 0);
    sl_cost_fit_first_call(x6, y6, 4, &a, &b, &most, &least);
    if (fabs(a - 1e-3) > 1e-12 || fabs(b - 2e-9) > 1e-18 || fabs(most - (1e-3 + 8e-3)) > 1e-12 || least != 1e5)
      fail_msg("off %d: a %g b %g most %g", off, a, b, most);
  }
  /* ... and with no growth, the lower median, not the far-off one */
  const double y7[] = {2e-4, 1e-2, 3e-4, 2.5e-4};
  sl_cost_fit_first_call(x6, y7, 4, &a, &b, &most, &least);
  assert_true(a == 2.5e-4 && b == 0 && most == 0);
  /* one sample, or none */
  sl_cost_fit_first_call(x1, y1, 1, &a, &b, &most, &least);
  assert_true(a == y1[0] && b == 0 && least == x1[0]);
  sl_cost_fit_first_call(NULL, NULL, 0, &a, &b, &most, &least);
  assert_true(a == 0 && b == 0 && least == 0);
  /* the rate it makes: a node within the samples pays the constant and its
   * bytes, a big one no more than the largest extra, one smaller than every
   * sample its share of the smallest sample's extra */
  sl_cost_rate r = {"x", false, 0, 0, 0, 0, 0, 0, 0, 0};
  sl_cost_fit_first_call(x1, y1, 3, &r.first_call_seconds, &r.first_call_seconds_per_byte,
                         &r.first_call_seconds_most, &r.first_call_bytes_least);
  sl_node_cost mid = {.bytes_read = 500000, .bytes_written = 0}, big = {.bytes_read = 1 << 30};
  sl_node_cost small = {.bytes_read = 20000, .bytes_written = 5000};
  assert_true(fabs(sl_cost_first_call_seconds(&r, &mid, true) - (1e-3 + 1e-3)) < 1e-12);
  assert_true(sl_cost_first_call_seconds(&r, &big, true) == y1[2]);
  assert_true(fabs(sl_cost_first_call_seconds(&r, &small, true) - y1[0] / 4) < 1e-12);
  /* a device kernel's first launch (its module loaded): not scaled */
  assert_true(fabs(sl_cost_first_call_seconds(&r, &small, false) - (1e-3 + 2e-9 * 25000)) < 1e-12);
  /* a constant (no growth seen) is the same: the largest at and above the
   * smallest sample, a share of it below */
  sl_cost_rate c = {"c", false, 0, 0, 0, 0, 0, 0, 0, 0};
  sl_cost_fit_first_call(x2, y2, 2, &c.first_call_seconds, &c.first_call_seconds_per_byte,
                         &c.first_call_seconds_most, &c.first_call_bytes_least);
  assert_true(sl_cost_first_call_seconds(&c, &mid, true) == 4e-3);
  assert_true(fabs(sl_cost_first_call_seconds(&c, &small, true) - 4e-3 * 25000 / 5e5) < 1e-15);
  /* a profile without the least bytes (older files): no scaling */
  c.first_call_bytes_least = 0;
  assert_true(sl_cost_first_call_seconds(&c, &small, true) == 4e-3);
}

/* A node streaming a whole buffer of 64 MiB or more again (a view: no
 * copy) reads it from memory: its estimate is at least its bytes read at
 * the workers' measured read bandwidth (profiles without it: the copy
 * bandwidth times the CPU's workers); under 64 MiB (cache-sized) its rate
 * alone. */
static void test_cold_reads(void **state) {
  (void)state;
  static const char big[] =
      "pipeline: cold\n"
      "nodes:\n"
      "  r: {type: ramp, params: {positions: [16384], item_shape: [1024]}}\n"
      "  w: {type: gather, inputs: {x: r.out}}\n"
      "  again: {type: stream, inputs: {x: w.whole}}\n"
      "  s: {type: sum, inputs: {x: again.out}}\n"
      "outputs: {total: s.total}\n";
  sl_cost_profile prof = hand_made();
  prof.bytes_per_second = 1e9; /* 64 MiB in 0.067 s */
  sl_cost_rate fast = {"sum", true, 0, 1e-15, 0, 0, 0, 0, 0, 0};
  assert_true(sl_cost_profile_set_rate(&prof, &fast));
  sl_backend_caps cpu = cpu_caps(2);
  sl_graph *g0, *g1;
  sl_spec *s0, *s1;
  sl_plan *p0 = plan_text(big, &cpu, &prof, &g0, &s0);
  int s = sl_graph_find(g0, "s");
  const double bytes = (double)p0->nodes[s].cost.bytes_read;
  assert_true(bytes >= (double)(64 << 20));
  /* without a measured read bandwidth, the CPU's two workers read side by
   * side at twice one thread's copy bandwidth */
  assert_true(fabs(p0->nodes[s].est_seconds - bytes / 2e9) < 1e-9);
  /* with it (calibrate's workers summing one buffer), that bandwidth */
  sl_cost_profile measured = prof;
  measured.read_bytes_per_second = 1.5e9;
  sl_graph *g3;
  sl_spec *s3;
  sl_plan *p3 = plan_text(big, &cpu, &measured, &g3, &s3);
  assert_true(fabs(p3->nodes[sl_graph_find(g3, "s")].est_seconds - bytes / 1.5e9) < 1e-9);
  free_plan_text(p3, g3, s3);
  /* a device's copy bandwidth is its own, whole */
  sl_backend_caps gpu = pretend_gpu();
  sl_graph *g2;
  sl_spec *s2;
  sl_plan *p2 = plan_text(big, &gpu, &prof, &g2, &s2);
  assert_true(fabs(p2->nodes[sl_graph_find(g2, "s")].est_seconds - bytes / 1e9) < 1e-9);
  free_plan_text(p2, g2, s2);
  /* a quarter of the size: a cached read, the rate's tiny estimate */
  char small[sizeof big];
  snprintf(small, sizeof small, "%s", big);
  char *at = strstr(small, "[16384]");
  memcpy(at, "[04096]", 7);
  sl_plan *p1 = plan_text(small, &cpu, &prof, &g1, &s1);
  assert_true(p1->nodes[sl_graph_find(g1, "s")].est_seconds < 1e-3);
  free_plan_text(p0, g0, s0);
  free_plan_text(p1, g1, s1);
}

/* The pooled buffers taken and given back, and their first touch: the
 * run's estimate grows by pool_seconds_per_byte + first_touch_seconds_per_byte
 * times the bytes of its slots, its workspace and its reductions' partials;
 * the first touch of each slot is also the estimate of the node that first
 * writes it, in the level of its first call (the ramp's chunk: its first
 * call writes the slot's pages), and the levels grow by exactly that. */
static void test_pool_estimate(void **state) {
  (void)state;
  static const char yaml[] =
      "pipeline: pooled\n"
      "nodes:\n"
      "  r: {type: ramp, params: {positions: [1024], item_shape: [256]}}\n"
      "  s: {type: sum, inputs: {x: r.out}}\n"
      "outputs: {total: s.total}\n";
  sl_backend_caps cpu = cpu_caps(2);
  sl_cost_profile prof = hand_made();
  sl_graph *g0, *g1;
  sl_spec *s0, *s1;
  sl_plan *p0 = plan_text(yaml, &cpu, &prof, &g0, &s0);
  prof.pool_seconds_per_byte = 1.0 / 1048576;
  prof.first_touch_seconds_per_byte = 0.5 / 1048576;
  sl_plan *p1 = plan_text(yaml, &cpu, &prof, &g1, &s1);
  double pooled = (double)p1->lent_workspace_bytes + (double)p1->partial_bytes;
  for (int k = 0; k < p1->n_slots; k++) pooled += (double)p1->slots[k].bytes;
  assert_true(pooled >= 16 * 256 * 4); /* a chunk of 16 ramp rows at least */
  assert_true(fabs(p1->est_seconds - (p0->est_seconds + 1.5 * pooled / 1048576)) <= 1e-9 * p1->est_seconds);
  double touched = 0, levels = 0, ramp_out = 0;
  for (int k = 0; k < p1->n_slots; k++) {
    int64_t most = 0; /* the slot's largest occupant */
    for (int b = 0; b < p1->n_buffers; b++)
      if (p1->buffers[b].slot == k && p1->buffers[b].bytes > most) most = p1->buffers[b].bytes;
    touched += (double)most;
  }
  for (int b = 0; b < p1->n_buffers; b++)
    if (p1->buffers[b].node == sl_graph_find(g1, "r")) ramp_out += (double)p1->buffers[b].bytes;
  assert_true(ramp_out >= 16 * 256 * 4);
  for (int l = 0; l < p1->n_levels; l++) levels += p1->levels[l].est_seconds - p0->levels[l].est_seconds;
  assert_true(fabs(levels - 0.5 * touched / 1048576) <= 1e-12);
  const int r = sl_graph_find(g1, "r");
  assert_true(fabs(p1->nodes[r].est_seconds - p0->nodes[r].est_seconds - 0.5 * ramp_out / 1048576) <= 1e-12);
  free_plan_text(p0, g0, s0);
  free_plan_text(p1, g1, s1);
}

/* On a device backend the host nodes' memory the executor takes (the
 * workers' scratch, a stride each; the host nodes' workspace) is faulted in
 * by the first host node to write it: that node's estimate, its level's and
 * the run's grow by the fresh bytes x host_first_touch_seconds_per_byte,
 * of the scratch one worker's stride (the workers fault theirs in side by
 * side); a later host node pays only for bytes beyond what was touched; a
 * CPU plan and a device node pay none. */
static void test_host_first_touch(void **state) {
  (void)state;
  static const char yaml[] =
      "pipeline: host_touch\n"
      "nodes:\n"
      "  src: {type: synthetic_4dstem, params: {scan_shape: [8, 8], detector_shape: [32, 32], disk_radius: 4}}\n"
      "  pat: {type: sum, inputs: {x: src.frames}}\n"
      "  disk: {type: disk_fit, inputs: {pattern: pat.total}}\n"
      "outputs: {disk: disk.disk}\n";
  sl_backend_caps gpu = pretend_gpu(), cpu = cpu_caps(2);
  sl_cost_profile prof = hand_made();
  prof.library_load_seconds = 0;
  sl_graph *g0, *g1, *g2;
  sl_spec *s0, *s1, *s2;
  prof.host_first_touch_seconds_per_byte = 0;
  sl_plan *p0 = plan_text(yaml, &gpu, &prof, &g0, &s0);
  prof.host_first_touch_seconds_per_byte = 1e-6;
  sl_plan *p1 = plan_text(yaml, &gpu, &prof, &g1, &s1);
  sl_plan *p2 = plan_text(yaml, &cpu, &prof, &g2, &s2);
  const int src = sl_graph_find(g1, "src"), pat = sl_graph_find(g1, "pat"), disk = sl_graph_find(g1, "disk");
  const int workers = sl_caps_host_workers(&gpu);
  assert_true(workers >= 2); /* several strides, of which one is priced */
  /* the source (40 bytes a detector pixel a worker) is the first host node
   * with scratch: a worker's stride, at the rate; nothing without one */
  const int64_t stride = (40 * 32 * 32 + 63) / 64 * 64;
  assert_int_equal(p0->nodes[src].first_touch_bytes, stride);
  assert_true(p0->nodes[src].first_touch_seconds == 0);
  assert_int_equal(p1->nodes[src].first_touch_bytes, stride);
  assert_true(fabs(p1->nodes[src].first_touch_seconds - 1e-6 * (double)stride) < 1e-15);
  assert_true(fabs(p1->nodes[src].est_seconds - p0->nodes[src].est_seconds - p1->nodes[src].first_touch_seconds) <
              1e-9);
  /* disk_fit, a host node, is the first to write the host workspace */
  const int64_t ws = p1->nodes[disk].cost.workspace_bytes;
  assert_true(ws > 0 && p1->nodes[disk].cost.per_worker_bytes <= stride);
  assert_int_equal(p1->nodes[disk].first_touch_bytes, ws);
  assert_true(fabs(p1->est_seconds - p0->est_seconds - 1e-6 * (double)(stride + ws)) < 1e-9);
  /* the rate is kept by a profile's file */
  assert_true(round_trip(&prof).host_first_touch_seconds_per_byte == 1e-6);
  /* the sum runs on the device: none */
  assert_true(p1->nodes[pat].first_touch_bytes == 0);
  /* on the CPU the scratch is pooled and in the rates: no term */
  for (int i = 0; i < g2->n_nodes; i++) assert_true(p2->nodes[i].first_touch_bytes == 0);
  free_plan_text(p0, g0, s0);
  free_plan_text(p1, g1, s1);
  free_plan_text(p2, g2, s2);
}

/* A profile of `threads` on "test CPU, 16 CPUs" whose sum/u16 rate takes
 * spu seconds per op, with a disk_fit rate (a serial node type) of 1/8 and
 * bandwidths in proportion to the threads, saved in the cache folder. */
static void save_at(int threads, double spu, sl_error *err) {
  sl_backend_caps caps = cpu_caps(threads);
  snprintf(caps.device, sizeof caps.device, "test CPU, 16 CPUs");
  sl_cost_profile p = hand_made();
  snprintf(p.device, sizeof p.device, "%s", caps.device);
  p.threads = threads;
  p.bytes_per_second = 1024.0 * threads;
  p.read_bytes_per_second = 2048.0 * threads;
  p.ops_per_second = 256.0 * threads;
  sl_cost_rate sum_u16 = {"sum/u16", true, 0.0625, spu, 0, 0, 0, 0, 0, 0};
  sl_cost_rate fit = {"disk_fit/u64", true, 0.5, 1.0 / 8, 0, 0, 0, 0, 0, 0};
  assert_true(sl_cost_profile_set_rate(&p, &sum_u16));
  assert_true(sl_cost_profile_set_rate(&p, &fit));
  char path[512];
  assert_true(sl_cost_cache_path(&caps, path, sizeof path));
  assert_int_equal(sl_cost_profile_save(path, &p, err), SL_OK);
}

/* What a run at `threads` gets from the cache. */
static sl_cost_profile profile_at(int threads, char *note, size_t note_len) {
  sl_backend_caps caps = cpu_caps(threads);
  snprintf(caps.device, sizeof caps.device, "test CPU, 16 CPUs");
  sl_cost_profile got;
  char warning[1200];
  sl_cost_profile_for(&caps, sl_nodes_registry(), &got, note, note_len, warning, sizeof warning);
  assert_string_equal(warning, "");
  return got;
}

/* A CPU thread count never calibrated gets a profile derived from the
 * counts that were (cost_threads.h): one profile spreads the work evenly,
 * two fit a + b / t through both, a serial node type keeps its rate, the
 * bandwidths never rise above the nearest profile's, and a profile for
 * the count itself wins. Every number is exact in binary. */
static void test_derived_for_threads(void **state) {
  (void)state;
  char dir[256], note[1024];
  assert_int_equal(temp_dir_make(dir, sizeof dir, "/tmp/sluice-costXXXXXX"), 0);
  setenv("XDG_CACHE_HOME", dir, 1);
  sl_error err;
  sl_error_clear(&err);
  assert_int_equal(sl_settings_init(NULL, 0, &err), SL_OK);
  /* nothing calibrated: the guesses */
  sl_cost_profile none = profile_at(4, note, sizeof note);
  assert_true(sl_cost_profile_is_builtin(&none));
  /* seconds per op a + b / t with a = 1/64, b = 1/4: 1/8 at 2 threads, 3/64 at 8 */
  save_at(2, 1.0 / 64 + 1.0 / 8, &err);
  /* one profile, at 2 threads: the work spread over 1 and over 8 */
  sl_cost_profile one = profile_at(1, note, sizeof note);
  assert_false(sl_cost_profile_is_builtin(&one));
  assert_int_equal(one.threads, 1);
  assert_int_equal(one.derived_from[0], 2);
  assert_int_equal(one.derived_from[1], 0);
  assert_non_null(strstr(note, "derived for 1 thread from the profiles calibrated at 2 threads"));
  assert_true(sl_cost_profile_rate(&one, "sum/u16")->seconds_per_unit == 2 * (1.0 / 64 + 1.0 / 8));
  assert_true(sl_cost_profile_rate(&one, "sum/u16")->call_seconds == 0.0625);
  assert_true(sl_cost_profile_rate(&one, "disk_fit/u64")->seconds_per_unit == 1.0 / 8); /* serial */
  assert_true(sl_cost_profile_rate(&one, "sum")->seconds_per_unit == 2.0 / 64);     /* hand_made's 1/64 */
  assert_true(one.bytes_per_second == 1024.0 && one.read_bytes_per_second == 2048.0);
  assert_true(one.ops_per_second == 256.0);
  sl_cost_profile up = profile_at(8, note, sizeof note);
  assert_true(sl_cost_profile_rate(&up, "sum/u16")->seconds_per_unit == (1.0 / 64 + 1.0 / 8) / 4);
  assert_true(up.bytes_per_second == 2048.0 && up.read_bytes_per_second == 4096.0); /* not raised */
  assert_true(up.ops_per_second == 256.0 * 8);
  /* two profiles (2 and 8): a + b / t at 4, between them, and at 1, below */
  save_at(8, 1.0 / 64 + 1.0 / 32, &err);
  save_at(16, 1.0, &err); /* farther from 4 than both, and not on the line: unused */
  sl_cost_profile two = profile_at(4, note, sizeof note);
  assert_int_equal(two.derived_from[0], 2); /* 2 and 8 are as near to 4: the fewer first */
  assert_int_equal(two.derived_from[1], 8);
  assert_non_null(strstr(note, "at 2 and 8 threads"));
  assert_true(sl_cost_profile_rate(&two, "sum/u16")->seconds_per_unit == 1.0 / 64 + 1.0 / 16);
  assert_true(sl_cost_profile_rate(&two, "disk_fit/u64")->seconds_per_unit == 1.0 / 8);
  assert_true(sl_cost_profile_rate(&two, "sum")->seconds_per_unit == 1.0 / 64); /* 1/64 at both: b = 0 */
  sl_cost_profile below = profile_at(1, note, sizeof note);
  assert_true(sl_cost_profile_rate(&below, "sum/u16")->seconds_per_unit == 1.0 / 64 + 1.0 / 4);
  /* a node type that got slower with more threads keeps the nearer's rate */
  save_at(8, 1.0, &err);
  sl_cost_profile slower = profile_at(4, note, sizeof note);
  assert_true(sl_cost_profile_rate(&slower, "sum/u16")->seconds_per_unit == 1.0 / 64 + 1.0 / 8);
  /* another device's profiles are not this machine's */
  sl_backend_caps other = cpu_caps(3);
  snprintf(other.device, sizeof other.device, "other CPU, 4 CPUs");
  sl_cost_profile got;
  char warning[1200];
  sl_cost_profile_for(&other, sl_nodes_registry(), &got, note, sizeof note, warning, sizeof warning);
  assert_true(sl_cost_profile_is_builtin(&got));
  /* a profile for the count itself wins */
  save_at(4, 1.0 / 2, &err);
  sl_cost_profile exact = profile_at(4, note, sizeof note);
  assert_int_equal(exact.derived_from[0], 0);
  assert_true(sl_cost_profile_rate(&exact, "sum/u16")->seconds_per_unit == 1.0 / 2);
  assert_int_equal(temp_dir_remove(dir), 0);
  unsetenv("XDG_CACHE_HOME");
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_json_round_trip),
      cmocka_unit_test(test_cache_key),
      cmocka_unit_test(test_corrupt_and_foreign_ignored),
      cmocka_unit_test(test_estimate_closed_form),
      cmocka_unit_test(test_run_setup_below_least),
      cmocka_unit_test(test_decided_seconds),
      cmocka_unit_test(test_decided_first_call),
      cmocka_unit_test(test_decided_over_own_variant),
      cmocka_unit_test(test_host_first_touch),
      cmocka_unit_test(test_plan_estimate),
      cmocka_unit_test(test_loop_setup_once),
      cmocka_unit_test(test_warm_up_wait),
      cmocka_unit_test(test_first_calls),
      cmocka_unit_test(test_first_call_type_start),
      cmocka_unit_test(test_first_call_fit),
      cmocka_unit_test(test_cold_reads),
      cmocka_unit_test(test_pool_estimate),
      cmocka_unit_test(test_derived_for_threads),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
