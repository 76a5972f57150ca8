#include <stdarg.h>
#include <stdio.h>
#include "internal.h"

static _Thread_local char last_error[1024] = "no error";

const char *vnc_last_error(void) { return last_error; }

vnc_status vnc_set_error(vnc_status st, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(last_error, sizeof last_error, fmt, ap);
  va_end(ap);
  return st;
}

const char *vnc_status_name(vnc_status st) {
  switch (st) {
    case VNC_OK: return "VNC_OK";
    case VNC_ERR_INVALID_ARGUMENT: return "VNC_ERR_INVALID_ARGUMENT";
    case VNC_ERR_INVALID_DEVICE: return "VNC_ERR_INVALID_DEVICE";
    case VNC_ERR_OUT_OF_MEMORY: return "VNC_ERR_OUT_OF_MEMORY";
    case VNC_ERR_KERNEL: return "VNC_ERR_KERNEL";
    case VNC_ERR_FORKED: return "VNC_ERR_FORKED";
    case VNC_ERR_UNSUPPORTED: return "VNC_ERR_UNSUPPORTED";
    case VNC_ERR_INTERNAL: return "VNC_ERR_INTERNAL";
    case VNC_ERR_INDEX: return "VNC_ERR_INDEX";
  }
  return "VNC_ERR_UNKNOWN";
}
