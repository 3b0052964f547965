/* sluice devices: what each compute backend built in finds. The only
 * command besides run that touches a GPU. */
#include <stdio.h>

#include "engine/core/json.h"
#include "engine/core/util.h"
#include "engine/cli/cli.h"

const char *const cli_help_devices =
    "usage: sluice devices [--setting NAME=VALUE]... [--json]\n"
    "\n"
    "Summarises the compute backends built in and the devices they find.\n"
    "This is the only command besides run that touches a GPU.\n";

int cmd_devices(int argc, char **argv) {
  cli_opts o;
  int rc = cli_parse(argc, argv, CLI_JSON | CLI_SETTING, false, cli_help_devices, &o);
  if (rc) return rc < 0 ? 0 : rc;
  sl_json j;
  if (o.json) {
    sl_json_init(&j, stdout, true);
    sl_json_begin_array(&j);
  }
  for (int k = 0; k < SL_BACKEND_COUNT; k++) {
    const sl_backend_ops *ops = sl_backend_ops_for((sl_backend_kind)k);
    sl_backend_caps caps;
    sl_error err;
    sl_error_clear(&err);
    const char *name = sl_backend_kind_name((sl_backend_kind)k);
    sl_code prc = ops ? ops->probe(&caps, &err) : SL_ERR_BACKEND;
    if (!ops) snprintf(err.msg, sizeof err.msg, "not built in");
    char mem[32] = "";
    if (prc == SL_OK) sl_format_bytes(caps.memory_bytes, mem, sizeof mem);
    if (o.json) {
      sl_json_begin_object(&j);
      sl_json_key(&j, "backend");
      sl_json_string(&j, name);
      sl_json_key(&j, "available");
      sl_json_bool(&j, prc == SL_OK);
      if (prc == SL_OK) {
        sl_json_key(&j, "device");
        sl_json_string(&j, caps.device);
        sl_json_key(&j, "compute_units");
        sl_json_int(&j, caps.compute_units);
        sl_json_key(&j, "memory_bytes");
        sl_json_uint(&j, caps.memory_bytes);
      } else {
        sl_json_key(&j, "reason");
        sl_json_string(&j, err.msg);
      }
      sl_json_end_object(&j);
    } else if (prc == SL_OK) {
      printf("%-5s available: %s, %d compute units, %s memory\n", name, caps.device,
             caps.compute_units, mem);
    } else {
      printf("%-5s unavailable: %s\n", name, err.msg);
    }
  }
  if (o.json) {
    sl_json_end_array(&j);
    sl_json_finish(&j);
  }
  return 0;
}
