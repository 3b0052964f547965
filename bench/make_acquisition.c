/* Writes a Dectris-style 4D-STEM acquisition (master file with external links
 * to data files, bitshuffle-LZ4 through the official HDF5 filter plugin) from
 * C, for machines without Python's h5py (the accelerator machine). Counts: a
 * bright-field disk (Poisson mean 20) over a sparse dark field (mean 0.05,
 * or --dark-mean M: 0.8 makes a denser file, 5.9:1 compressed and 3.26 GB at
 * 512 x 512 frames of 192 x 192, like quantem.gpu's benchmark file, against
 * 12:1 and 1.6 GB), like tests/data/make_dectris.py.
 * Data files are written by parallel processes.
 *
 *   HDF5_PLUGIN_PATH=... make_acquisition [--unwritten] [--dark-mean M] [--bad-pixels N]
 *                        PREFIX SCAN_ROWS SCAN_COLS DET_ROWS DET_COLS FRAMES_PER_FILE [PROCESSES]
 *
 * --bad-pixels N: N distinct pixels flagged in the master's pixel_mask (bit
 * 0, gap/dead) and stored at the flag value 65535 in every frame, as a
 * Dectris detector stores them (make_dectris.py's --bad-pixels): what
 * mask_correct costs grows with them, so the cost model is calibrated and
 * checked on acquisitions that have some (a real detector always does).
 *
 * --unwritten: the data files declare their frames (dataset shape, chunks,
 * filter) but store none: a master of any size in seconds and a few MB, for
 * planning tests (listing its chunks fails: none is stored).
 */
#include <hdf5.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define BSHUF_FILTER 32008

static uint64_t rng_next(uint64_t *s) { /* splitmix64 */
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Poisson by inversion of a cumulative table (exact up to the table's end). */
typedef struct poisson_table {
  uint32_t cdf[128]; /* scaled to 2^32 */
  int n;
} poisson_table;

static void make_table(poisson_table *t, double mean) {
  double p = exp(-mean), c = 0;
  t->n = 0;
  for (int k = 0; k < 128; k++) {
    c += p;
    double v = c * 4294967296.0;
    t->cdf[k] = v >= 4294967295.0 ? 0xFFFFFFFFu : (uint32_t)v;
    t->n = k + 1;
    if (t->cdf[k] == 0xFFFFFFFFu) break;
    p *= mean / (k + 1);
  }
}

static uint16_t sample(const poisson_table *t, uint64_t *s) {
  uint32_t u = (uint32_t)(rng_next(s) >> 32);
  int k = 0;
  while (k < t->n - 1 && u >= t->cdf[k]) k++;
  return (uint16_t)k;
}

/* The bad pixels' flags, H x W (1 = bad): n distinct pixels drawn from a
 * fixed seed, so that every data file (a process each) and the master agree. */
static uint8_t *bad_pixel_map(int64_t h, int64_t w, int64_t n) {
  uint8_t *bad = calloc((size_t)(h * w), 1);
  if (!bad) return NULL;
  uint64_t s = 0xBAD0000ull;
  for (int64_t k = 0; k < n;) {
    int64_t i = (int64_t)(rng_next(&s) % (uint64_t)(h * w));
    if (!bad[i]) bad[i] = 1, k++;
  }
  return bad;
}

static int write_data_file(const char *path, int64_t first, int64_t n, int64_t h, int64_t w,
                           int64_t rows, int64_t cols, int unwritten, double dark_mean,
                           const uint8_t *bad) {
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (f < 0) return 1;
  hsize_t dims[3] = {(hsize_t)n, (hsize_t)h, (hsize_t)w}, chunk[3] = {1, (hsize_t)h, (hsize_t)w};
  hid_t space = H5Screate_simple(3, dims, NULL);
  hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(dcpl, 3, chunk);
  unsigned cd[2] = {0, 2}; /* the plugin's user values: block size (default), LZ4 */
  if (H5Pset_filter(dcpl, BSHUF_FILTER, H5Z_FLAG_MANDATORY, 2, cd) < 0) {
    fprintf(stderr, "make_acquisition: the bitshuffle filter plugin is not available (HDF5_PLUGIN_PATH)\n");
    return 1;
  }
  hid_t g1 = H5Gcreate2(f, "/entry", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t g2 = H5Gcreate2(g1, "data", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t ds = H5Dcreate2(g2, "data", H5T_NATIVE_UINT16, space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
  poisson_table bf, df;
  make_table(&bf, 20.0);
  make_table(&df, dark_mean);
  uint16_t *frame = malloc((size_t)(h * w) * 2);
  hsize_t one[3] = {1, (hsize_t)h, (hsize_t)w};
  hid_t mem = H5Screate_simple(3, one, NULL);
  double radius = (double)(h < w ? h : w) / 8.0;
  int rc = 0;
  for (int64_t i = 0; i < n && rc == 0 && !unwritten; i++) {
    int64_t fr = first + i, sr = fr / cols, sc = fr % cols;
    double cy = (double)h / 2 + 0.05 * radius * sin(2 * M_PI * (double)sr / (double)(rows > 1 ? rows : 1));
    double cx = (double)w / 2 + 0.05 * radius * cos(2 * M_PI * (double)sc / (double)(cols > 1 ? cols : 1));
    uint64_t s = 0x5EED0000ull + (uint64_t)fr * 0x9E3779B97F4A7C15ull;
    for (int64_t r = 0; r < h; r++)
      for (int64_t c = 0; c < w; c++) {
        double d2 = (r - cy) * (r - cy) + (c - cx) * (c - cx);
        frame[r * w + c] = bad[r * w + c] ? 65535 : sample(d2 <= radius * radius ? &bf : &df, &s);
      }
    hsize_t start[3] = {(hsize_t)i, 0, 0};
    H5Sselect_hyperslab(space, H5S_SELECT_SET, start, NULL, one, NULL);
    if (H5Dwrite(ds, H5T_NATIVE_UINT16, mem, space, H5P_DEFAULT, frame) < 0) rc = 1;
  }
  free(frame);
  H5Sclose(mem);
  H5Dclose(ds);
  H5Gclose(g2);
  H5Gclose(g1);
  H5Pclose(dcpl);
  H5Sclose(space);
  if (H5Fclose(f) < 0) rc = 1;
  return rc;
}

int main(int argc, char **argv) {
  int unwritten = 0;
  double dark_mean = 0.05;
  int64_t n_bad = 0;
  for (;;) {
    if (argc > 1 && !strcmp(argv[1], "--unwritten")) unwritten = 1, argv++, argc--;
    else if (argc > 2 && !strcmp(argv[1], "--dark-mean")) dark_mean = atof(argv[2]), argv += 2, argc -= 2;
    else if (argc > 2 && !strcmp(argv[1], "--bad-pixels")) n_bad = atoll(argv[2]), argv += 2, argc -= 2;
    else break;
  }
  if (argc < 7 || !(dark_mean >= 0 && dark_mean <= 30)) {
    fprintf(stderr, "usage: make_acquisition [--unwritten] [--dark-mean M (0..30)] [--bad-pixels N] PREFIX "
                    "SCAN_ROWS SCAN_COLS DET_ROWS DET_COLS FRAMES_PER_FILE [PROCESSES]\n");
    return 2;
  }
  const char *prefix = argv[1];
  int64_t rows = atoll(argv[2]), cols = atoll(argv[3]), h = atoll(argv[4]), w = atoll(argv[5]);
  int64_t per_file = atoll(argv[6]);
  int procs = argc > 7 ? atoi(argv[7]) : 1;
  if (rows <= 0 || cols <= 0 || h <= 0 || w <= 0 || per_file <= 0 || procs <= 0 || n_bad < 0 ||
      n_bad > h * w) {
    fprintf(stderr, "make_acquisition: sizes must be positive and --bad-pixels at most DET_ROWS x DET_COLS\n");
    return 2;
  }
  uint8_t *bad = bad_pixel_map(h, w, n_bad);
  if (!bad) {
    fprintf(stderr, "make_acquisition: out of memory\n");
    return 1;
  }
  int64_t total = rows * cols, files = (total + per_file - 1) / per_file;
  const char *base = strrchr(prefix, '/') ? strrchr(prefix, '/') + 1 : prefix;
  /* data files, `procs` at a time */
  for (int64_t f0 = 0; f0 < files; f0 += procs) {
    for (int64_t k = f0; k < files && k < f0 + procs; k++) {
      pid_t pid = fork();
      if (pid == 0) {
        char path[4096];
        snprintf(path, sizeof path, "%s_data_%06lld.h5", prefix, (long long)(k + 1));
        int64_t first = k * per_file, n = total - first < per_file ? total - first : per_file;
        _exit(write_data_file(path, first, n, h, w, rows, cols, unwritten, dark_mean, bad));
      }
    }
    int status, failed = 0;
    while (wait(&status) > 0) failed |= !WIFEXITED(status) || WEXITSTATUS(status);
    if (failed) {
      fprintf(stderr, "make_acquisition: writing a data file failed\n");
      return 1;
    }
  }
  char master[4096];
  snprintf(master, sizeof master, "%s_master.h5", prefix);
  hid_t m = H5Fcreate(master, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hid_t lcpl = H5Pcreate(H5P_LINK_CREATE);
  H5Pset_create_intermediate_group(lcpl, 1);
  for (int64_t k = 0; k < files; k++) {
    char link[64], file[4096];
    snprintf(link, sizeof link, "/entry/data/data_%06lld", (long long)(k + 1));
    snprintf(file, sizeof file, "%s_data_%06lld.h5", base, (long long)(k + 1));
    H5Lcreate_external(file, "/entry/data/data", m, link, lcpl, H5P_DEFAULT);
  }
  hid_t sp = H5Screate(H5S_SCALAR);
  uint64_t v[3] = {(uint64_t)total, 1, 65534};
  const char *names[3] = {"/entry/instrument/detector/detectorSpecific/nimages",
                          "/entry/instrument/detector/detectorSpecific/ntrigger",
                          "/entry/instrument/detector/saturation_value"};
  for (int i = 0; i < 3; i++) {
    hid_t d = H5Dcreate2(m, names[i], H5T_NATIVE_UINT64, sp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(d, H5T_NATIVE_UINT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, &v[i]);
    H5Dclose(d);
  }
  H5Sclose(sp);
  /* The pixel mask (u32, as Dectris stores it): bit 0 at the bad pixels.
   * Without --bad-pixels there is none, as before the option. */
  herr_t mw = 0;
  if (n_bad > 0) {
    uint32_t *mask = malloc((size_t)(h * w) * sizeof *mask);
    if (!mask) {
      fprintf(stderr, "make_acquisition: out of memory\n");
      return 1;
    }
    for (int64_t i = 0; i < h * w; i++) mask[i] = bad[i];
    hsize_t mdims[2] = {(hsize_t)h, (hsize_t)w};
    hid_t msp = H5Screate_simple(2, mdims, NULL);
    hid_t md = H5Dcreate2(m, "/entry/instrument/detector/detectorSpecific/pixel_mask", H5T_NATIVE_UINT32,
                          msp, lcpl, H5P_DEFAULT, H5P_DEFAULT);
    mw = md < 0 ? -1 : H5Dwrite(md, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, mask);
    if (md >= 0) H5Dclose(md);
    H5Sclose(msp);
    free(mask);
  }
  free(bad);
  H5Pclose(lcpl);
  if (mw < 0 || H5Fclose(m) < 0) {
    fprintf(stderr, "make_acquisition: writing %s failed\n", master);
    return 1;
  }
  printf("%s: %lld frames of %lldx%lld u16 in %lld data files (bitshuffle-LZ4%s), %lld bad pixels\n", master,
         (long long)total, (long long)h, (long long)w, (long long)files, unwritten ? ", no chunk written" : "",
         (long long)n_bad);
  return 0;
}
