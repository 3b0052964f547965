/* An error as the user sees it: printed (sl_error_format), with its code and
 * the file and stored chunk it names. Include after <cmocka.h>. */
#ifndef SL_TEST_EXPECT_ERROR_H
#define SL_TEST_EXPECT_ERROR_H

#include "engine/core/status.h"

static inline void expect_error_at(const sl_error *e, sl_code rc, sl_code want, const char *file, int64_t chunk) {
  char fmt[2048];
  sl_error_format(e, fmt, sizeof fmt);
  print_message("expected error: %s\n", fmt);
  assert_int_equal(rc, want);
  assert_string_equal(e->file, file);
  assert_int_equal(e->chunk, chunk);
}

#endif
