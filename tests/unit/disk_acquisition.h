/* A Dectris-style acquisition with a bright disk the STEM pipelines can fit
 * (test_cuda_source.c, test_cuda_device_peak.c): the layout of fx_write
 * (master + two data files with external links, 4 frames per stored chunk,
 * bitshuffle-LZ4 through the official plugin, the detector metadata with its
 * pixel mask) with frames of a bright disk on a dim background, both varying
 * with the frame. Include after the fixtures of test_h5_index.c
 * (SL_H5_FIXTURES_ONLY) and cmocka.h. */
#ifndef SL_TEST_DISK_ACQUISITION_H
#define SL_TEST_DISK_ACQUISITION_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct disk_acquisition {
  int64_t frames[2];       /* frames of data file 1 and 2 */
  int64_t h, w;            /* detector rows and columns */
  int64_t row, col, radius; /* the disk, in pixels */
} disk_acquisition;

/* Pixel (r, c) of global frame f. */
static inline uint32_t disk_acquisition_value(const disk_acquisition *q, int64_t f, int64_t r, int64_t c) {
  int64_t dr = r - q->row, dc = c - q->col;
  if (dr * dr + dc * dc <= q->radius * q->radius) return (uint32_t)(1000 + (f * 7 + r * 3 + c) % 50);
  return (uint32_t)((f + r * 3 + c) % 20);
}

/* Writes acquisition `name` into the fixtures' temp dir; its master file's
 * path goes to master[n]. */
static inline void disk_acquisition_write(const char *name, const disk_acquisition *q, char *master, size_t n) {
  const int64_t h = q->h, w = q->w;
  snprintf(master, n, "%s/%s_master.h5", fx_tmpdir(), name);
  hid_t m = fx_create(master, 0);
  fx_mkgroups(m, "/entry/data");
  int64_t total = 0;
  for (int i = 0; i < 2; i++) {
    char data[512], base[256], link[64];
    snprintf(base, sizeof base, "%s_data_%06d.h5", name, i + 1);
    snprintf(data, sizeof data, "%s/%s", fx_tmpdir(), base);
    hid_t f = fx_create(data, 0);
    fx_mkgroups(f, "/entry/data");
    hsize_t dims[3] = {(hsize_t)q->frames[i], (hsize_t)h, (hsize_t)w};
    hsize_t maxd[3] = {H5S_UNLIMITED, (hsize_t)h, (hsize_t)w};
    hid_t sp = H5Screate_simple(3, dims, maxd);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    hsize_t cd[3] = {4, (hsize_t)h, (hsize_t)w};
    H5Pset_chunk(dcpl, 3, cd);
    unsigned cdv[2] = {0, 2};
    assert_true(H5Pset_filter(dcpl, 32008, H5Z_FLAG_MANDATORY, 2, cdv) >= 0);
    hid_t d = H5Dcreate2(f, "/entry/data/data", H5T_STD_U16LE, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    assert_true(d >= 0);
    uint32_t *buf = malloc((size_t)(q->frames[i] * h * w) * sizeof *buf);
    for (int64_t k = 0; k < q->frames[i]; k++)
      for (int64_t r = 0; r < h; r++)
        for (int64_t c = 0; c < w; c++) buf[(k * h + r) * w + c] = disk_acquisition_value(q, total + k, r, c);
    assert_true(H5Dwrite(d, H5T_NATIVE_UINT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) >= 0);
    free(buf);
    H5Dclose(d);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Fclose(f);
    total += q->frames[i];
    snprintf(link, sizeof link, "/entry/data/data_%06d", i + 1);
    assert_true(H5Lcreate_external(base, "/entry/data/data", m, link, H5P_DEFAULT, H5P_DEFAULT) >= 0);
  }
  fx_opts o = {.h = h, .w = w};
  fx_meta(m, &o, total);
  H5Fclose(m);
}

#endif
