/* cuFFT loaded at run time (dlopen), so the binary carries no link to a
 * 286 MB library that only iDPC on CUDA uses: the functions a launcher needs,
 * resolved from libcufft.so.12 (the CUDA 12/13 toolkits) or an older
 * soname. Plain C, no CUDA headers: the few types are declared here with
 * the values of cufft.h (a stable ABI: cufftHandle is an int, results and
 * transform types are int-sized enums, cufftDoubleComplex is a double2).
 *
 * The environment variable SLUICE_CUFFT names the library to load instead of
 * the default list (a soname or a path); SLUICE_CUFFT=none acts as if cuFFT
 * were missing (the nodes then run their host path and say so). */
#ifndef SL_CUDA_CUFFT_LOADER_H
#define SL_CUDA_CUFFT_LOADER_H

#include <stdbool.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cufft.h: cufftResult, cufftType, the directions. */
enum {
  SL_CUFFT_SUCCESS = 0,
  SL_CUFFT_Z2Z = 0x69, /* double complex to double complex */
  SL_CUFFT_FORWARD = -1,
  SL_CUFFT_INVERSE = 1
};

typedef struct sl_cufft_api {
  int (*create)(int *plan);
  int (*set_auto_allocation)(int plan, int auto_allocate);
  int (*make_plan_many)(int plan, int rank, int *n, int *inembed, int istride, int idist, int *onembed,
                        int ostride, int odist, int type, int batch, size_t *work_size);
  int (*set_work_area)(int plan, void *work_area);
  int (*set_stream)(int plan, void *stream); /* a cudaStream_t */
  int (*exec_z2z)(int plan, void *in, void *out, int direction); /* double2 data */
  int (*destroy)(int plan);
  int (*get_version)(int *version);
  char library[256]; /* the name that loaded */
} sl_cufft_api;

/* Fills api and returns true, or returns false with why ("what was tried
 * and what failed") in why[why_size]. The library stays loaded for the
 * process (each call takes another reference, which dlopen counts; cuFFT is
 * never unloaded while a plan may live). Thread safe. */
bool sl_cufft_load(sl_cufft_api *api, char *why, size_t why_size);
/* The same from the names to try (no settings read: for helper threads). */
bool sl_cufft_load_names(const char *const *names, size_t n_names, sl_cufft_api *api, char *why,
                         size_t why_size);
/* The names the setting cufft asks for (a static list or the setting's
 * value); false with why when it is none. Reads the settings. */
bool sl_cufft_names(const char *const **names, size_t *n_names, char *why, size_t why_size);

/* "CUFFT_ALLOC_FAILED", ... for a cufftResult. */
const char *sl_cufft_result_name(int result);

#ifdef __cplusplus
}
#endif

#endif
