/* The chunk-index store (nodes/hdf5/h5_index_store.c): an index listed by
 * one process is read back by the next one as it was (compared field by
 * field with a fresh listing of the files, an independent reading), and is
 * not used once any file changed, from another working directory, or when
 * the entry is short or corrupt; the setting index_store turns it off; the
 * entry's checksum summed in pieces is the one-shot's. The
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

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_checksum_in_pieces),
      cmocka_unit_test(test_round_trip),
      cmocka_unit_test(test_changed_file_not_used),
      cmocka_unit_test(test_other_directory_not_used),
      cmocka_unit_test(test_corrupt_not_used),
      cmocka_unit_test(test_setting_off),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
