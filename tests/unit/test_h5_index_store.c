/* The chunk-index store (nodes/hdf5/h5_index_store.c): an index listed by
 * one process is read back by the next one as it was (compared field by
 * field with a fresh listing of the files, an independent reading), and is
 * not used once any file changed, from another working directory, or when
 * the entry is short or corrupt; the setting index_store turns it off; the
 * entry's checksum summed in pieces is the one-shot's; the cache keeps to
 * its bound by removing the entries used longest ago. The
 * cache folder is a temp dir of this test (XDG_CACHE_HOME). */
#define SL_H5_FIXTURES_ONLY
#include "engine/core/settings.h"
#include "engine/core/util.h"
#include "nodes/hdf5/h5_index_store.h"
#include "test_h5_index.c"

#include <fcntl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char g_master[512];

static int setup(void **state) {
  (void)state;
  fx_init();
  char cache[300];
  snprintf(cache, sizeof cache, "%s/cache", fx_tmpdir());
  setenv("XDG_CACHE_HOME", cache, 1);
  fx_opts o = {.n_files = 3, .frames = {7, 5, 4}, .h = 12, .w = 10, .layout = FX_CHUNKED, .k = 2, .meta = true};
  fx_write("acq", &o, g_master, sizeof g_master);
  return 0;
}

static int teardown(void **state) {
  (void)state;
  fx_cleanup();
  return 0;
}

/* Everything a listed index holds, against a fresh listing. */
static void assert_same_index(const sl_h5_index *a, const sl_h5_index *b) {
  assert_int_equal(a->n_files, b->n_files);
  for (int i = 0; i < a->n_files; i++) assert_string_equal(a->files[i], b->files[i]);
  assert_string_equal(a->source, b->source);
  assert_string_equal(a->layout, b->layout);
  assert_int_equal(a->n_frames, b->n_frames);
  assert_int_equal(a->frame_rows, b->frame_rows);
  assert_int_equal(a->frame_cols, b->frame_cols);
  assert_int_equal(a->elem_size, b->elem_size);
  assert_int_equal(a->frames_per_chunk, b->frames_per_chunk);
  assert_int_equal(a->filter, b->filter);
  assert_int_equal(a->n_parts, b->n_parts);
  for (int i = 0; i < a->n_parts; i++) {
    assert_string_equal(a->parts[i].object, b->parts[i].object);
    assert_string_equal(a->parts[i].link, b->parts[i].link);
    assert_int_equal(a->parts[i].first_chunk, b->parts[i].first_chunk);
    assert_int_equal(a->parts[i].n_frames, b->parts[i].n_frames);
  }
  assert_true(a->listed && b->listed);
  assert_int_equal(a->n_chunks, b->n_chunks);
  assert_memory_equal(a->chunks, b->chunks, (size_t)a->n_chunks * sizeof *a->chunks);
  assert_int_equal(a->max_chunk_size, b->max_chunk_size);
  assert_int_equal(a->meta.nimages, b->meta.nimages);
  assert_int_equal(a->meta.has_pixel_mask, b->meta.has_pixel_mask);
  assert_int_equal(a->meta.has_scan_shape, b->meta.has_scan_shape);
}

static void store_fresh(void) {
  sl_h5_index *fresh = fx_open_index(g_master, NULL);
  sl_h5_index_store_save(g_master, NULL, fresh);
  sl_h5_index_free(fresh);
}

static void test_round_trip(void **state) {
  (void)state;
  store_fresh();
  char path[4096];
  assert_true(sl_h5_index_store_path(g_master, NULL, path, sizeof path));
  struct stat st;
  assert_int_equal(stat(path, &st), 0);
  sl_h5_index *stored = sl_h5_index_store_load(g_master, NULL), *fresh = fx_open_index(g_master, NULL);
  assert_non_null(stored);
  assert_same_index(stored, fresh);
  /* another dataset name is another entry */
  assert_null(sl_h5_index_store_load(g_master, "/entry/data/other"));
  sl_h5_index_free(stored);
  sl_h5_index_free(fresh);
}

/* A data file touched (its modification time moves): the entry is stale. */
static void test_changed_file_not_used(void **state) {
  (void)state;
  store_fresh();
  char data[512];
  fx_data_path("acq", 2, data, sizeof data);
  struct timespec t[2] = {{0, UTIME_OMIT}, {0, 0}};
  clock_gettime(CLOCK_REALTIME, &t[1]);
  t[1].tv_sec += 5;
  assert_int_equal(utimensat(AT_FDCWD, data, t, 0), 0);
  assert_null(sl_h5_index_store_load(g_master, NULL));
  store_fresh(); /* listed again: usable again */
  sl_h5_index *stored = sl_h5_index_store_load(g_master, NULL);
  assert_non_null(stored);
  sl_h5_index_free(stored);
}

/* Relative data-file paths depend on the working directory. */
static void test_other_directory_not_used(void **state) {
  (void)state;
  store_fresh();
  char here[2048];
  assert_non_null(getcwd(here, sizeof here));
  assert_int_equal(chdir(fx_tmpdir()), 0);
  assert_null(sl_h5_index_store_load(g_master, NULL));
  assert_int_equal(chdir(here), 0);
}

/* Every truncation and a flipped byte: no entry, no crash. */
static void test_corrupt_not_used(void **state) {
  (void)state;
  store_fresh();
  char path[4096];
  assert_true(sl_h5_index_store_path(g_master, NULL, path, sizeof path));
  FILE *f = fopen(path, "rb");
  assert_non_null(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  unsigned char *bytes = malloc((size_t)n);
  assert_int_equal(fread(bytes, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  for (long cut = 0; cut < n; cut += n / 37 + 1) {
    f = fopen(path, "wb");
    fwrite(bytes, 1, (size_t)cut, f);
    fclose(f);
    assert_null(sl_h5_index_store_load(g_master, NULL));
  }
  for (long at = 0; at < n; at += n / 23 + 1) {
    bytes[at] ^= 0x5a;
    f = fopen(path, "wb");
    fwrite(bytes, 1, (size_t)n, f);
    fclose(f);
    assert_null(sl_h5_index_store_load(g_master, NULL));
    bytes[at] ^= 0x5a;
  }
  free(bytes);
}

static void test_setting_off(void **state) {
  (void)state;
  store_fresh();
  const char *off[] = {"index_store=false"};
  sl_error err;
  assert_int_equal(sl_settings_init(off, 1, &err), SL_OK);
  assert_null(sl_h5_index_store_load(g_master, NULL));
  assert_int_equal(sl_settings_init(NULL, 0, &err), SL_OK);
  sl_h5_index *stored = sl_h5_index_store_load(g_master, NULL);
  assert_non_null(stored);
  sl_h5_index_free(stored);
}

/* The entry's checksum, summed in pieces as the store writes it, is the
 * one-shot sl_checksum64, and that is the function the store has used since
 * SLIDX01 (values it gave before the pieces existed): entries kept by an
 * earlier build still read. */
static void test_checksum_in_pieces(void **state) {
  (void)state;
  unsigned char b[100];
  for (int i = 0; i < 100; i++) b[i] = (unsigned char)(i * 37 + 11);
  const struct {
    size_t n;
    uint64_t sum;
  } known[] = {{0, 0x28216b3b05cad049ULL},  {1, 0xd6c3764ece64407cULL},  {31, 0x74be0471956a046fULL},
               {32, 0x27fa835833b79718ULL}, {33, 0xb03f264a09a27f73ULL}, {63, 0xd1fd33d93634a07fULL},
               {64, 0x66db1bb984634525ULL}, {100, 0x83e9ad278b9c9b49ULL}};
  for (size_t k = 0; k < sizeof known / sizeof *known; k++) {
    size_t n = known[k].n;
    assert_true(sl_checksum64(b, n) == known[k].sum);
    for (size_t cut1 = 0; cut1 <= n; cut1++)
      for (size_t cut2 = cut1; cut2 <= n; cut2 += 7) {
        sl_checksum64_state s;
        sl_checksum64_begin(&s);
        sl_checksum64_add(&s, b, cut1);
        sl_checksum64_add(&s, b + cut1, cut2 - cut1);
        sl_checksum64_add(&s, b + cut2, n - cut2);
        assert_true(sl_checksum64_end(&s) == known[k].sum);
      }
  }
}

/* ---- the cache's bound ------------------------------------------------------ */

/* Acquisition k of the bound's tests (made once), kept as an entry. */
static const char *bound_master(int k) {
  static char masters[4][512];
  if (!masters[k][0]) {
    char name[16];
    snprintf(name, sizeof name, "bound%d", k);
    fx_opts o = {.n_files = 1, .frames = {4}, .h = 6, .w = 5, .layout = FX_CHUNKED, .k = 1, .meta = false};
    fx_write(name, &o, masters[k], sizeof masters[k]);
  }
  return masters[k];
}

static void keep_entry(int k) {
  sl_h5_index *ix = fx_open_index(bound_master(k), NULL);
  sl_h5_index_store_save(bound_master(k), NULL, ix);
  sl_h5_index_free(ix);
}

/* Entry k's file: its size (-1: none). */
static int64_t entry_bytes(int k) {
  char path[4096];
  struct stat st;
  assert_true(sl_h5_index_store_path(bound_master(k), NULL, path, sizeof path));
  return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

/* File `path` last used (modified) `age` seconds ago. */
static void used_ago(const char *path, int age) {
  struct timespec t[2];
  clock_gettime(CLOCK_REALTIME, &t[0]);
  t[0].tv_sec -= age;
  t[1] = t[0];
  assert_int_equal(utimensat(AT_FDCWD, path, t, 0), 0);
}

/* Entry k last used `age` seconds ago. */
static void entry_used_ago(int k, int age) {
  char path[4096];
  assert_true(sl_h5_index_store_path(bound_master(k), NULL, path, sizeof path));
  used_ago(path, age);
}

static void set_bound(int64_t bytes) {
  char kv[64];
  snprintf(kv, sizeof kv, "index_store_bytes=%lld", (long long)bytes);
  const char *settings[] = {kv};
  sl_error err;
  assert_int_equal(sl_settings_init(settings, 1, &err), SL_OK);
}

/* The path of file `name` in the cache's folder. */
static void cache_file(const char *name, char *path, size_t len) {
  char dir[4096];
  assert_true(sl_h5_index_store_path(g_master, NULL, dir, sizeof dir));
  *strrchr(dir, '/') = 0;
  snprintf(path, len, "%s/%s", dir, name);
}

/* A file in the cache's folder that pruning must leave alone. */
static void foreign_file(const char *name, int age) {
  char path[4200];
  cache_file(name, path, sizeof path);
  FILE *f = fopen(path, "wb");
  assert_non_null(f);
  fputs("not sluice's entry\n", f);
  fclose(f);
  used_ago(path, age);
}

static bool foreign_left(const char *name) {
  char path[4200];
  cache_file(name, path, sizeof path);
  return access(path, F_OK) == 0;
}

/* Keeping an entry past index_store_bytes removes the entries used longest
 * ago, never the one just kept; a load counts as a use; a temporary entry
 * of a dead process goes once stale; files that are not sluice's entries
 * stay whatever their age; 0 is no bound. Entries 0-3 are of one size S
 * (equal acquisitions, names of one length); the bound is 3.5 S. */
static void test_cache_bounded(void **state) {
  (void)state;
  const char *foreign[] = {"notes.txt", "0123456789abcdef.idx.bak", "0123456789abcdeg.idx", "readme.idx"};
  for (int f = 0; f < 4; f++) foreign_file(foreign[f], 100000);
  foreign_file("fedcba9876543210.idx.tmp-12345", 100000); /* a dead writer's */
  foreign_file("fedcba9876543211.idx.tmp-12346", 10);     /* a live writer's */
  set_bound(0);
  store_fresh(); /* g_master's entry (the other tests'): the oldest */
  char master_entry[4096];
  assert_true(sl_h5_index_store_path(g_master, NULL, master_entry, sizeof master_entry));
  used_ago(master_entry, 500);
  for (int k = 0; k < 3; k++) keep_entry(k);
  entry_used_ago(0, 300), entry_used_ago(1, 200), entry_used_ago(2, 100);
  const int64_t size = entry_bytes(0);
  assert_true(size > 0 && entry_bytes(1) == size && entry_bytes(2) == size);
  set_bound(3 * size + size / 2);
  keep_entry(3);
  assert_int_equal(entry_bytes(3), size);
  assert_int_equal(access(master_entry, F_OK), -1); /* the oldest went first */
  assert_int_equal(entry_bytes(0), -1);              /* then the next oldest, and no more */
  assert_true(entry_bytes(1) == size && entry_bytes(2) == size);
  /* entry 1 read: used now; keeping entry 0 again removes entry 2 (100 s) */
  sl_h5_index *one = sl_h5_index_store_load(bound_master(1), NULL);
  assert_non_null(one);
  sl_h5_index_free(one);
  entry_used_ago(3, 50);
  keep_entry(0);
  assert_int_equal(entry_bytes(2), -1);
  assert_true(entry_bytes(0) == size && entry_bytes(1) == size && entry_bytes(3) == size);
  for (int f = 0; f < 4; f++)
    if (!foreign_left(foreign[f])) fail_msg("pruning removed '%s', not an entry", foreign[f]);
  assert_false(foreign_left("fedcba9876543210.idx.tmp-12345"));
  assert_true(foreign_left("fedcba9876543211.idx.tmp-12346"));
  /* no bound: nothing goes */
  set_bound(0);
  keep_entry(2);
  for (int k = 0; k < 4; k++) assert_int_equal(entry_bytes(k), size);
  sl_error err;
  assert_int_equal(sl_settings_init(NULL, 0, &err), SL_OK);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_checksum_in_pieces),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_changed_file_not_used),
      cmocka_unit_test(test_other_directory_not_used),
      cmocka_unit_test(test_corrupt_not_used),
      cmocka_unit_test(test_setting_off),
      cmocka_unit_test(test_cache_bounded),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
