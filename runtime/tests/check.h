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
#endif
