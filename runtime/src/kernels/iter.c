#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "vnc/iter.h"
#include "vnc/stream.h"
#include "vnc/threadpool.h"

static void shape_str(char *buf, size_t n, const vnc_tensor *t) {
  size_t k = (size_t)snprintf(buf, n, "[");
  for (int d = 0; d < t->ndim && k < n; d++)
    k += (size_t)snprintf(buf + k, n - k, d ? ", %lld" : "%lld", (long long)t->sizes[d]);
  if (k < n) snprintf(buf + k, n - k, "]");
}

vnc_status vnc_iter_init(vnc_iter *it, int nops, const vnc_tensor *const *ops, int flags) {
  if (nops < 1 || nops > VNC_ITER_MAX_OPERANDS)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "iterator: %d operands (1 to %d allowed)", nops,
                         VNC_ITER_MAX_OPERANDS);
  const vnc_tensor *out = ops[0];
  int nd = out->ndim;
  it->nops = nops;
  for (int k = 0; k < nops; k++) {
    const vnc_tensor *t = ops[k];
    size_t es = vnc_dtype_size(t->dtype);
    if (es == 0) return vnc_set_error(VNC_ERR_UNSUPPORTED, "unsupported dtype code %d", t->dtype);
    if (t->ndim > VNC_MAX_DIMS || t->ndim < 0)
      return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "tensor with %d dims (0 to %d supported)",
                           t->ndim, VNC_MAX_DIMS);
    if (t->ndim > nd) goto mismatch;
    it->data[k] = (char *)t->data;
    it->dtypes[k] = t->dtype;
    /* innermost first: iterator dim i is tensor dim nd-1-i, right-aligned */
    for (int i = 0; i < nd; i++) {
      int td = t->ndim - 1 - i;
      int64_t size = td >= 0 ? t->sizes[td] : 1;
      int64_t stride = td >= 0 ? t->strides[td] : 0;
      if (size != out->sizes[nd - 1 - i]) {
        if (size != 1) goto mismatch;
        stride = 0;
      }
      it->strides[k][i] = stride * (int64_t)es;
    }
    continue;
  mismatch : {
    char a[256], b[256];
    shape_str(a, sizeof a, t);
    shape_str(b, sizeof b, out);
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT,
                         "operand %d of shape %s cannot be broadcast to the output shape %s", k, a, b);
  }
  }
  it->numel = 1;
  for (int i = 0; i < nd; i++) {
    it->shape[i] = out->sizes[nd - 1 - i];
    it->numel *= it->shape[i];
  }
  /* Reorder: innermost = smallest output stride (stable insertion sort), for locality. */
  if (!(flags & VNC_ITER_KEEP_ORDER)) {
    for (int i = 1; i < nd; i++) {
      for (int j = i; j > 0; j--) {
        int64_t a = llabs(it->strides[0][j - 1]), b = llabs(it->strides[0][j]);
        if (a == 0 && nops > 1) a = llabs(it->strides[1][j - 1]);
        if (b == 0 && nops > 1) b = llabs(it->strides[1][j]);
        if (b >= a) break;
        int64_t ts = it->shape[j]; it->shape[j] = it->shape[j - 1]; it->shape[j - 1] = ts;
        for (int k = 0; k < nops; k++) {
          int64_t t = it->strides[k][j];
          it->strides[k][j] = it->strides[k][j - 1];
          it->strides[k][j - 1] = t;
        }
      }
    }
  }
  /* Drop size-1 dims, then merge neighbours that are contiguous for every operand. */
  int m = 0;
  for (int i = 0; i < nd; i++) {
    if (it->shape[i] == 1) continue;
    if (m > 0) {
      int mergeable = 1;
      for (int k = 0; k < nops; k++)
        mergeable &= it->strides[k][i] == it->strides[k][m - 1] * it->shape[m - 1];
      if (mergeable) {
        it->shape[m - 1] *= it->shape[i];
        continue;
      }
    }
    it->shape[m] = it->shape[i];
    for (int k = 0; k < nops; k++) it->strides[k][m] = it->strides[k][i];
    m++;
  }
  if (m == 0) { /* a scalar, or all dims of size 1 */
    it->shape[0] = it->numel == 0 ? 0 : 1;
    for (int k = 0; k < nops; k++) it->strides[k][0] = 0;
    m = 1;
  }
  it->ndim = m;
  return VNC_OK;
}

typedef struct run_ctx {
  const vnc_iter *it;
  vnc_loop_fn fn;
  void *ctx;
} run_ctx;

static void run_range(void *p, int64_t begin, int64_t end) {
  const run_ctx *r = p;
  const vnc_iter *it = r->it;
  int64_t idx[VNC_MAX_DIMS];
  char *ptrs[VNC_ITER_MAX_OPERANDS];
  int64_t inner[VNC_ITER_MAX_OPERANDS];
  int64_t rem = begin;
  for (int d = 0; d < it->ndim; d++) {
    idx[d] = rem % it->shape[d];
    rem /= it->shape[d];
  }
  for (int k = 0; k < it->nops; k++) {
    char *q = it->data[k];
    for (int d = 0; d < it->ndim; d++) q += idx[d] * it->strides[k][d];
    ptrs[k] = q;
    inner[k] = it->strides[k][0];
  }
  int64_t pos = begin;
  while (pos < end) {
    int64_t n = it->shape[0] - idx[0];
    if (n > end - pos) n = end - pos;
    r->fn(r->ctx, ptrs, inner, n, pos);
    pos += n;
    if (pos >= end) break;
    idx[0] += n;
    for (int k = 0; k < it->nops; k++) ptrs[k] += n * it->strides[k][0];
    for (int d = 0; d + 1 < it->ndim && idx[d] == it->shape[d]; d++) {
      idx[d] = 0;
      idx[d + 1]++;
      for (int k = 0; k < it->nops; k++)
        ptrs[k] += it->strides[k][d + 1] - it->shape[d] * it->strides[k][d];
    }
  }
}

void vnc_iter_run(const vnc_iter *it, vnc_loop_fn fn, void *ctx, int64_t begin, int64_t end) {
  if (begin >= end) return;
  run_ctx r = {it, fn, ctx};
  run_range(&r, begin, end);
}

void vnc_iter_for_each(const vnc_iter *it, vnc_loop_fn fn, void *ctx, int64_t grain) {
  if (it->numel <= 0) return;
  run_ctx r = {it, fn, ctx};
  vnc_parallel_for(it->numel, grain, run_range, &r);
}

/* ---------------------------------------------------------------- parallel task launch */

/* The task's copy is [header | payload]; the payload starts at a 16-byte aligned offset. */
typedef struct par_head {
  vnc_range_fn fn;
  vnc_release_fn release;
  int64_t n, grain;
} par_head;
#define PAR_OFFSET ((sizeof(par_head) + 15) / 16 * 16)

static vnc_status par_run(void *p) {
  const par_head *h = p;
  vnc_parallel_for(h->n, h->grain, h->fn, (char *)p + PAR_OFFSET);
  return VNC_OK;
}

static void par_release(void *p) {
  const par_head *h = p;
  if (h->release) h->release((char *)p + PAR_OFFSET);
}

vnc_status vnc_launch_parallel(vnc_stream *s, const char *op, vnc_range_fn fn, int64_t n, int64_t grain,
                               const void *payload, size_t payload_size, vnc_release_fn release) {
  char *buf = malloc(PAR_OFFSET + payload_size);
  if (!buf) {
    if (release) release((void *)payload);
    return vnc_set_error(VNC_ERR_INTERNAL, "%s: out of host memory for a task", op);
  }
  const par_head h = {fn, release, n, grain};
  memcpy(buf, &h, sizeof h);
  memcpy(buf + PAR_OFFSET, payload, payload_size);
  vnc_status st = vnc_launch(s, op, par_run, buf, PAR_OFFSET + payload_size, par_release);
  free(buf);
  return st;
}
