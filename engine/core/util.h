/* Small helpers shared by every layer. */
#ifndef SL_UTIL_H
#define SL_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine/core/alloc.h"
#include "engine/core/status.h"

/* For hot kernel loops: an AVX2 clone chosen at load time (glibc ifunc)
 * beside the baseline x86-64 build; integer results are the same either way.
 * Off under AddressSanitizer (ifunc resolvers run before it is set up). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define SL_HOT_CLONES __attribute__((target_clones("avx2", "default")))
/* ... and an AVX-512 (x86-64-v4) clone too, for widening loops that gain
 * from twice the lanes (sum's u16 -> u32 adds: 38 -> 26 ms over 16,384
 * frames of 192 x 192 on the dev VM). */
#define SL_HOT_CLONES_512 __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define SL_HOT_CLONES
#define SL_HOT_CLONES_512
#endif

/* Interned string that lives for the whole process (for locations); NULL when
 * `s` is NULL or out of memory (a location without its file). */
const char *sl_intern(const char *s);
/* Edit distance, for "did you mean" suggestions; SIZE_MAX when out of memory
 * (no suggestion). */
size_t sl_edit_distance(const char *a, const char *b);
/* Closest of `n` candidates to `word` if it is close enough to suggest, else NULL. */
const char *sl_closest(const char *word, const char *const *candidates, size_t n);
/* "64M", "2GiB", "1.5G", "123456" -> bytes (K/M/G/T powers of 1024). */
sl_code sl_parse_size(const char *text, uint64_t *out, sl_error *err);
/* "1.50 GiB" */
void sl_format_bytes(uint64_t bytes, char *buf, size_t n);
/* Strict integer / float / bool parsing of whole strings. */
bool sl_parse_i64(const char *s, int64_t *out);
/* Index of `value` in a '|'-separated list of choices ("a|b|c"), or -1. */
int sl_choice_index(const char *choices, const char *value);
bool sl_parse_f64(const char *s, double *out);
bool sl_parse_bool(const char *s, bool *out);
/* Monotonic seconds. */
double sl_now(void);
/* qsort's comparison of two doubles, ascending. */
int sl_compare_doubles(const void *a, const void *b);
/* Available physical memory in bytes (MemAvailable), 0 if unknown. */
uint64_t sl_available_memory(void);
/* This process's resident memory now and its high-water mark (VmRSS, VmHWM
 * of /proc/self/status), in bytes; 0 where unknown. */
uint64_t sl_process_rss(void);
uint64_t sl_process_peak_rss(void);
/* Directory part of a path ("." if none), into buf. */
void sl_dirname(const char *path, char *buf, size_t n);
/* Join dir and rel unless rel is absolute. */
void sl_path_join(const char *dir, const char *rel, char *buf, size_t n);

/* Where the user's caches for sluice live: $XDG_CACHE_HOME/sluice, else
 * $HOME/.cache/sluice (not sluice settings: the desktop's convention);
 * false when neither is set. */
bool sl_user_cache_dir(char *buf, size_t len);
/* FNV-1a 64 of n bytes, continuing from h (SL_FNV1A_START to begin): a
 * fast, stable hash for cache keys and checksums (not for security). */
#define SL_FNV1A_START 0xcbf29ce484222325ULL
uint64_t sl_fnv1a(const void *data, size_t n, uint64_t h);
/* A checksum of n bytes for detecting damaged cache files (not a hash for
 * tables): four lanes over 8-byte words, multiply and rotate, about 8 bytes
 * per cycle where sl_fnv1a does one (a 6 MB chunk index took 6% of a short
 * run to check byte by byte). */
uint64_t sl_checksum64(const void *data, size_t n);
/* The same checksum over bytes given in pieces (a file written as it is
 * made): begin, add each piece in order, end. */
typedef struct sl_checksum64_state {
  uint64_t lane[4];
  uint64_t n;               /* bytes added */
  unsigned char group[32];  /* a 32-byte group not yet complete */
  unsigned held;            /* its bytes */
} sl_checksum64_state;
void sl_checksum64_begin(sl_checksum64_state *s);
void sl_checksum64_add(sl_checksum64_state *s, const void *data, size_t n);
uint64_t sl_checksum64_end(const sl_checksum64_state *s);
/* Creates `dir` and its parents (mode 0777 less the umask); false on
 * failure. */
bool sl_make_dirs(const char *dir);

#endif
