/* Minimal test harness: CHECK records a failure with its line; main returns the count. */
#ifndef VNC_TEST_CHECK_H
#define VNC_TEST_CHECK_H
#include <stdio.h>
#include <string.h>
#include "vnc/vnc.h"

static int check_failures = 0, check_count = 0;
#define CHECK(cond)                                                          \
  do {                                                                       \
    check_count++;                                                           \
    if (!(cond)) {                                                           \
      check_failures++;                                                      \
      fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
    }                                                                        \
  } while (0)
#define CHECK_OK(expr)                                                       \
  do {                                                                       \
    vnc_status st_ = (expr);                                                 \
    check_count++;                                                           \
    if (st_ != VNC_OK) {                                                     \
      check_failures++;                                                      \
      fprintf(stderr, "%s:%d: %s returned %s: %s\n", __FILE__, __LINE__, #expr, \
              vnc_status_name(st_), vnc_last_error());                       \
    }                                                                        \
  } while (0)
#define CHECK_DONE()                                                          \
  do {                                                                        \
    printf("%d checks, %d failed\n", check_count, check_failures);            \
    return check_failures ? 1 : 0;                                            \
  } while (0)

/* A reduction geometry over `dim` of a contiguous rows x cols float matrix (as
 * TensorIterator builds it: the output has stride 0 along the reduced dim). */
static inline vnc_iter geometry(void *out, int32_t out_dt, float *in, int64_t rows, int64_t cols, int dim) {
  vnc_iter it;
  memset(&it, 0, sizeof it);
  it.nops = 2;
  it.ndim = 2;
  it.shape[0] = cols;
  it.shape[1] = rows;
  it.numel = rows * cols;
  it.data[0] = out;
  it.data[1] = (char *)in;
  it.dtypes[0] = out_dt;
  it.dtypes[1] = VNC_FLOAT32;
  int64_t es = (int64_t)vnc_dtype_size(out_dt);
  it.strides[1][0] = 4;
  it.strides[1][1] = 4 * cols;
  it.strides[0][0] = dim == 1 ? 0 : es;
  it.strides[0][1] = dim == 1 ? es : 0;
  return it;
}
#endif
