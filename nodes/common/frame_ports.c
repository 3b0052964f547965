/* Checks of the frames and centre-of-mass ports (see frame_ports.h). */
#include "nodes/common/frame_ports.h"

#include <stdbool.h>

#include "engine/graph/graph.h"

sl_code sl_input_refuse(sl_error *err, const char *name, const char *expects,
                        const sl_tensor_desc *got) {
  char buf[160];
  sl_desc_format(got, buf, sizeof buf);
  return sl_fail(err, SL_ERR_PIPELINE, "input '%s' expects %s, got %s", name, expects, buf);
}

static sl_code frames_check(const sl_tensor_desc *x, bool decoded, sl_error *err) {
  if ((x->dtype != SL_U8 && x->dtype != SL_U16 && x->dtype != SL_U32) || x->stream_rank < 1 ||
      x->rank - x->stream_rank != 2 || (decoded && x->encoding != SL_ENC_NONE) ||
      x->dims[x->rank - 1] <= 0 || x->dims[x->rank - 2] <= 0) {
    char buf[160];
    sl_desc_format(x, buf, sizeof buf);
    return sl_fail(err, SL_ERR_PIPELINE,
                   "input 'frames' expects %su8, u16 or u32 frames with 2 item axes, got %s%s",
                   decoded ? "streamed, decoded " : "", buf,
                   x->stream_rank < 1 && x->dtype != SL_DT_INVALID ? " (frames must be streamed)"
                                                                   : "");
  }
  return SL_OK;
}

sl_code sl_frames_check(const sl_tensor_desc *x, sl_error *err) {
  return frames_check(x, false, err);
}

sl_code sl_frames_check_decoded(const sl_tensor_desc *x, sl_error *err) {
  return frames_check(x, true, err);
}

sl_code sl_com_field_check(const sl_node *n, sl_error *err) {
  const char *names[2] = {"com_row", "com_col"};
  for (int i = 0; i < 2; i++) {
    const sl_tensor_desc *d = &n->in[i];
    if (d->dtype != SL_F64 || d->rank != 2 || d->stream_rank != 0)
      return sl_input_refuse(err, names[i], "a whole f64 [rows, cols]", d);
  }
  if (!sl_desc_equal_shape(&n->in[0], &n->in[1]))
    return sl_fail(err, SL_ERR_PIPELINE, "inputs 'com_row' and 'com_col' differ in shape");
  return SL_OK;
}
