/* Mirror-extension spectra as real R x C transforms. See mirror_spectrum.h. */
#include "nodes/common/mirror_spectrum.h"

#include <fftw3.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "engine/backend/backend.h"
#include "nodes/common/fftw_planner.h"

/* Rows per task of the row passes and the transpose: enough work to hand
 * out, small enough to share a 24-row scan. */
enum { ROW_GRAIN = 8, TILE = 32 };

int64_t sl_mirror_bytes(int64_t rows, int64_t cols) { return rows * cols * 8; }

int64_t sl_mirror_ops(int64_t rows, int64_t cols) {
  double n = (double)rows * (double)cols;
  return (int64_t)(2.5 * n * log2(n > 2 ? n : 2) + 2 * n);
}

void sl_mirror_free(sl_mirror *m) {
  for (int a = 0; a < 2; a++)
    for (int k = 0; k < 3; k++) {
      if (m->plan[a][k]) fftw_destroy_plan(m->plan[a][k]);
      if (m->copy_plan[a][k]) fftw_destroy_plan(m->copy_plan[a][k]);
    }
  fftw_free(m->work);
  memset(m, 0, sizeof *m);
}

sl_code sl_mirror_init(sl_mirror *m, int64_t rows, int64_t cols, sl_error *err) {
  memset(m, 0, sizeof *m);
  m->rows = rows, m->cols = cols;
  m->work = fftw_malloc((size_t)(rows * cols) * sizeof *m->work);
  if (!m->work)
    return sl_fail(err, SL_ERR_NOMEM, "out of memory for a %lldx%lld field", (long long)rows,
                   (long long)cols);
  /* A separate input for the out-of-place plans (FFTW_ESTIMATE reads
   * neither array). */
  double *in = fftw_malloc((size_t)(rows > cols ? rows : cols) * sizeof *in);
  if (!in) {
    sl_mirror_free(m);
    return sl_fail(err, SL_ERR_NOMEM, "out of memory");
  }
  static const fftw_r2r_kind kinds[3] = {FFTW_REDFT10, FFTW_RODFT10, FFTW_REDFT01};
  /* FFTW_ESTIMATE: a plan measured on this machine could differ from run
   * to run, and so could the result's last bits. */
  const unsigned flags = FFTW_ESTIMATE | FFTW_UNALIGNED;
  bool ok = true;
  sl_fftw_planner_thread_safe();
  for (int a = 0; a < 2; a++)
    for (int k = 0; k < 3; k++) {
      int n = (int)(a ? cols : rows);
      ok &= (m->plan[a][k] = fftw_plan_r2r_1d(n, m->work, m->work, kinds[k], flags)) != NULL;
      ok &= (m->copy_plan[a][k] = fftw_plan_r2r_1d(n, in, m->work, kinds[k],
                                                   flags | FFTW_PRESERVE_INPUT)) != NULL;
    }
  fftw_free(in);
  if (!ok) {
    sl_mirror_free(m);
    return sl_fail(err, SL_ERR_INTERNAL, "FFTW could not plan real transforms of %lld and %lld",
                   (long long)rows, (long long)cols);
  }
  return SL_OK;
}

/* One pass: every row of a [n_rows, len] array transformed by plan: from
 * src into dst (an out-of-place plan), or in dst (src NULL, in place). */
typedef struct row_pass {
  fftw_plan plan;
  const double *src;
  double *dst;
  int64_t len;
} row_pass;

static void row_pass_range(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const row_pass *p = ctx;
  for (int64_t i = begin; i < end; i++) {
    double *row = p->dst + i * p->len;
    /* FFTW takes a non-const input; PRESERVE_INPUT plans do not write it. */
    fftw_execute_r2r(p->plan, p->src ? (double *)(uintptr_t)(p->src + i * p->len) : row, row);
  }
}

/* dst [cols, rows] = src [rows, cols] transposed, in tiles of TILE rows of
 * dst per task. */
typedef struct transpose_job {
  const double *src;
  double *dst;
  int64_t rows, cols;
} transpose_job;

static void transpose_range(void *ctx, int64_t begin, int64_t end, int worker) {
  (void)worker;
  const transpose_job *t = ctx;
  for (int64_t tile = begin; tile < end; tile++) {
    int64_t j0 = tile * TILE, j1 = j0 + TILE < t->cols ? j0 + TILE : t->cols;
    for (int64_t i0 = 0; i0 < t->rows; i0 += TILE) {
      int64_t i1 = i0 + TILE < t->rows ? i0 + TILE : t->rows;
      for (int64_t j = j0; j < j1; j++)
        for (int64_t i = i0; i < i1; i++) t->dst[j * t->rows + i] = t->src[i * t->cols + j];
    }
  }
}

static void run(struct sl_backend *b, int64_t n, int64_t grain, sl_range_fn fn, void *ctx) {
  if (b) b->ops->parallel_for(b, n, grain, fn, ctx);
  else fn(ctx, 0, n, 0);
}

/* out [C, R] = `second` along the rows of (`first` along the rows of
 * in [R, C], transposed): the first pass copies into the work field, the
 * transpose goes by tiles, the second pass is in place. */
static void two_passes(sl_mirror *m, struct sl_backend *b, void *first, void *second, const double *in,
                       double *out, int64_t R, int64_t C) {
  row_pass a = {first, in, m->work, C};
  run(b, R, ROW_GRAIN, row_pass_range, &a);
  transpose_job t = {m->work, out, R, C};
  run(b, (C + TILE - 1) / TILE, 1, transpose_range, &t);
  row_pass z = {second, NULL, out, R};
  run(b, C, ROW_GRAIN, row_pass_range, &z);
}

void sl_mirror_forward(sl_mirror *m, struct sl_backend *b, const double *f, int odd_rows,
                       int odd_cols, double *X) {
  int k_rows = odd_rows ? SL_MIRROR_ODD : SL_MIRROR_EVEN, k_cols = odd_cols ? SL_MIRROR_ODD : SL_MIRROR_EVEN;
  two_passes(m, b, m->copy_plan[1][k_cols], m->plan[0][k_rows], f, X, m->rows, m->cols);
}

/* Y is transposed, so its rows run along the row frequencies: the first
 * pass is along rows, the second along cols (the forward steps with the
 * axes' roles swapped). */
void sl_mirror_inverse(sl_mirror *m, struct sl_backend *b, const double *Y, double *f) {
  two_passes(m, b, m->copy_plan[0][SL_MIRROR_INVERSE], m->plan[1][SL_MIRROR_INVERSE], Y, f, m->cols, m->rows);
}
