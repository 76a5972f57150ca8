/* CTC loss and gradient (vnc/ctc.h). One unit of parallel work is one batch entry; each
 * keeps its alphas (forward, stored in log_alpha) or betas (backward, a private buffer) in
 * float32 with expf/logf, the operations and order of ATen's float kernel. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "vnc/ctc.h"

typedef struct ctc_task {
  vnc_ctc_args a;
  int64_t T, N, C, S;      /* S: the padded target length (log_alpha's width is 2S + 1) */
  int64_t *lengths;        /* input lengths then target lengths (2N), owned */
  int64_t *offsets;        /* N target offsets (elements), owned */
  vnc_tensor nll, log_alpha, grad_out, grad;
  int backward, zero_infinity;
  atomic_int bad_target;   /* 1 + the first bad entry (n) */
} ctc_task;

static void ctc_release(void *p) {
  ctc_task *t = p;
  free(t->lengths);
  free(t->offsets);
}

static float ld(const vnc_tensor *x, int64_t off) {
  return (float)vnc_load_f64[x->dtype]((const char *)x->data + off * (int64_t)vnc_dtype_size(x->dtype));
}
static void st(const vnc_tensor *x, int64_t off, float v) {
  vnc_store_f64[x->dtype]((char *)x->data + off * (int64_t)vnc_dtype_size(x->dtype), v);
}
static float lp_at(const ctc_task *t, int64_t tt, int64_t n, int64_t c) {
  const vnc_tensor *x = &t->a.log_probs;
  return ld(x, tt * x->strides[0] + n * x->strides[1] + c * x->strides[2]);
}
static int64_t target_at(const ctc_task *t, int64_t n, int64_t i) {
  const vnc_tensor *g = &t->a.targets;
  const int64_t off = g->ndim == 1 ? (t->offsets[n] + i) * g->strides[0] : n * g->strides[0] + i * g->strides[1];
  const char *p = (const char *)g->data + off * (int64_t)vnc_dtype_size(g->dtype);
  return g->dtype == VNC_INT64 ? *(const int64_t *)p : *(const int32_t *)p;
}
/* l'(s): blank at even s, the target's (s - 1) / 2-th symbol at odd s. */
static int64_t prime(const ctc_task *t, int64_t n, int64_t s) { return s % 2 == 0 ? t->a.blank : target_at(t, n, s / 2); }

static float log3(float a, float b, float c) { /* log(e^a + e^b + e^c), -inf safe (ATen's max shift) */
  float m = fmaxf(a, fmaxf(b, c));
  if (m == -INFINITY) m = 0.0f;
  return logf(expf(a - m) + expf(b - m) + expf(c - m)) + m;
}

static int targets_ok(ctc_task *t, int64_t n) {
  const int64_t tl = t->lengths[t->N + n];
  for (int64_t i = 0; i < tl; i++) {
    const int64_t c = target_at(t, n, i);
    if (c < 0 || c >= t->C) {
      int expected = 0;
      atomic_compare_exchange_strong(&t->bad_target, &expected, (int)(n + 1));
      return 0;
    }
  }
  return 1;
}

#define LA(n, tt, s) (((n) * t->log_alpha.strides[0] + (tt) * t->log_alpha.strides[1] + (s) * t->log_alpha.strides[2]))

static void ctc_fwd_entries(void *ctx, int64_t b0, int64_t b1) {
  ctc_task *t = ctx;
  const int64_t W = 2 * t->S + 1;
  for (int64_t n = b0; n < b1; n++) {
    const int64_t il = t->lengths[n], tl = t->lengths[t->N + n];
    for (int64_t tt = 0; tt < t->T; tt++)
      for (int64_t s = 0; s < W; s++) st(&t->log_alpha, LA(n, tt, s), -INFINITY);
    if (!targets_ok(t, n)) continue;
    if (il > 0) {
      st(&t->log_alpha, LA(n, 0, 0), lp_at(t, 0, n, t->a.blank));
      if (tl > 0) st(&t->log_alpha, LA(n, 0, 1), lp_at(t, 0, n, prime(t, n, 1)));
    }
    for (int64_t tt = 1; tt < il; tt++)
      for (int64_t s = 0; s <= 2 * tl; s++) {
        const int64_t cur = prime(t, n, s);
        const float a1 = ld(&t->log_alpha, LA(n, tt - 1, s));
        const float a2 = s > 0 ? ld(&t->log_alpha, LA(n, tt - 1, s - 1)) : -INFINITY;
        const float a3 = s > 1 && prime(t, n, s - 2) != cur ? ld(&t->log_alpha, LA(n, tt - 1, s - 2)) : -INFINITY;
        st(&t->log_alpha, LA(n, tt, s), log3(a1, a2, a3) + lp_at(t, tt, n, cur));
      }
    float nll;
    if (il == 0) {
      nll = tl == 0 ? 0.0f : INFINITY;
    } else if (tl == 0) {
      nll = -ld(&t->log_alpha, LA(n, il - 1, 0));
    } else {
      const float l1 = ld(&t->log_alpha, LA(n, il - 1, 2 * tl)), l2 = ld(&t->log_alpha, LA(n, il - 1, 2 * tl - 1));
      nll = -log3(l1, l2, -INFINITY);
    }
    st(&t->nll, n * t->nll.strides[0], nll);
  }
}

static void ctc_bwd_entries(void *ctx, int64_t b0, int64_t b1) {
  ctc_task *t = ctx;
  const int64_t W = 2 * t->S + 1, C = t->C;
  float *lb = malloc(sizeof(float) * (size_t)(t->T * W > 0 ? t->T * W : 1));
  float *lab = malloc(sizeof(float) * (size_t)(t->T * C > 0 ? t->T * C : 1)); /* log sum alpha beta [t][c] */
  const vnc_tensor *g = &t->grad;
  for (int64_t n = b0; n < b1; n++) {
    const int64_t il = t->lengths[n], tl = t->lengths[t->N + n];
    const float nll = ld(&t->nll, n * t->nll.strides[0]), go = ld(&t->grad_out, n * t->grad_out.strides[0]);
    for (int64_t i = 0; i < t->T * W; i++) lb[i] = -INFINITY;
    for (int64_t i = 0; i < t->T * C; i++) lab[i] = -INFINITY;
    const int ok = lb && lab && targets_ok(t, n);
    if (ok && il > 0) {
      const int64_t last = il - 1;
      lb[last * W + 2 * tl] = lp_at(t, last, n, t->a.blank);
      lab[last * C + t->a.blank] = ld(&t->log_alpha, LA(n, last, 2 * tl)) + lb[last * W + 2 * tl];
      if (tl > 0) {
        const int64_t c = prime(t, n, 2 * tl - 1);
        lb[last * W + 2 * tl - 1] = lp_at(t, last, n, c);
        lab[last * C + c] = ld(&t->log_alpha, LA(n, last, 2 * tl - 1)) + lb[last * W + 2 * tl - 1];
      }
      for (int64_t tt = il - 2; tt >= 0; tt--)
        for (int64_t s = 2 * tl; s >= 0; s--) {
          const int64_t cur = prime(t, n, s);
          const float b1v = lb[(tt + 1) * W + s];
          const float b2 = s < 2 * tl ? lb[(tt + 1) * W + s + 1] : -INFINITY;
          const float b3 = s < 2 * tl - 1 && prime(t, n, s + 2) != cur ? lb[(tt + 1) * W + s + 2] : -INFINITY;
          lb[tt * W + s] = log3(b1v, b2, b3) + lp_at(t, tt, n, cur);
          const float ab = ld(&t->log_alpha, LA(n, tt, s)) + lb[tt * W + s];
          float *acc = &lab[tt * C + cur];
          *acc = *acc == -INFINITY ? ab : log3(*acc, ab, -INFINITY);
        }
    }
    const int zero = !ok || (t->zero_infinity && nll == INFINITY);
    for (int64_t tt = 0; tt < t->T; tt++)
      for (int64_t c = 0; c < C; c++) {
        float v = 0.0f;
        if (!zero && tt < il) {
          const float lp = lp_at(t, tt, n, c);
          v = (expf(lp) - expf(lab[tt * C + c] + nll - lp)) * go;
        }
        st(g, tt * g->strides[0] + n * g->strides[1] + c * g->strides[2], v);
      }
  }
  free(lb);
  free(lab);
}

static vnc_status ctc_run(void *p) {
  ctc_task *t = p;
  atomic_init(&t->bad_target, 0);
  vnc_parallel_for(t->N, 1, t->backward ? ctc_bwd_entries : ctc_fwd_entries, t);
  const int bad = atomic_load(&t->bad_target);
  if (bad) return vnc_set_error(VNC_ERR_INDEX, "ctc_loss: a target of batch entry %d is outside [0, %lld)", bad - 1,
                                (long long)t->C);
  return VNC_OK;
}

static vnc_status ctc_launch(vnc_stream *s, const char *op, const vnc_ctc_args *a, ctc_task *t) {
  const vnc_tensor *lp = &a->log_probs, *tg = &a->targets;
  VNC_CHECK_COMPUTED(op, lp->dtype);
  if (lp->ndim != 3 || !vnc_dtype_is_floating(lp->dtype))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: log_probs must be a floating [T, N, C] tensor", op);
  if ((tg->dtype != VNC_INT64 && tg->dtype != VNC_INT32) || (tg->ndim != 1 && tg->ndim != 2))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: targets must be int32 or int64, 1-D or [N, S]", op);
  t->a = *a;
  t->T = lp->sizes[0];
  t->N = lp->sizes[1];
  t->C = lp->sizes[2];
  if (a->blank < 0 || a->blank >= t->C) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: blank must be in label range", op);
  t->lengths = malloc(sizeof(int64_t) * (size_t)(2 * t->N + 1));
  t->offsets = malloc(sizeof(int64_t) * (size_t)(t->N + 1));
  if (!t->lengths || !t->offsets) {
    ctc_release(t);
    return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "%s: out of host memory", op);
  }
  int64_t pos = 0;
  for (int64_t n = 0; n < t->N; n++) {
    const int64_t il = a->input_lengths[n], tl = a->target_lengths[n];
    const int64_t cap = tg->ndim == 2 ? tg->sizes[1] : tg->sizes[0] - pos;
    if (il < 0 || il > t->T || tl < 0 || tl > cap || tl > t->S) {
      ctc_release(t);
      return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: lengths of batch entry %lld out of range (input %lld of %lld, "
                                                     "target %lld)", op, (long long)n, (long long)il, (long long)t->T,
                           (long long)tl);
    }
    t->lengths[n] = il;
    t->lengths[t->N + n] = tl;
    t->offsets[n] = pos;
    pos += tl;
  }
  return vnc_launch(s, op, ctc_run, t, sizeof *t, ctc_release);
}

vnc_status vnc_ctc_loss(vnc_stream *s, const char *op, const vnc_ctc_args *a, const vnc_tensor *nll,
                        const vnc_tensor *log_alpha) {
  ctc_task t;
  memset(&t, 0, sizeof t);
  VNC_CHECK_COMPUTED(op, nll->dtype, log_alpha->dtype);
  if (log_alpha->ndim != 3 || (log_alpha->sizes[2] - 1) % 2)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: log_alpha must be [N, T, 2 S + 1]", op);
  t.S = (log_alpha->sizes[2] - 1) / 2;
  t.nll = *nll;
  t.log_alpha = *log_alpha;
  return ctc_launch(s, op, a, &t);
}

vnc_status vnc_ctc_loss_backward(vnc_stream *s, const char *op, const vnc_ctc_args *a, const vnc_tensor *grad_out,
                                 const vnc_tensor *nll, const vnc_tensor *log_alpha, int zero_infinity,
                                 const vnc_tensor *grad) {
  ctc_task t;
  memset(&t, 0, sizeof t);
  VNC_CHECK_COMPUTED(op, grad_out->dtype, nll->dtype, log_alpha->dtype, grad->dtype);
  if (log_alpha->ndim != 3 || (log_alpha->sizes[2] - 1) % 2 || grad->ndim != 3)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: log_alpha must be [N, T, 2 S + 1] and grad [T, N, C]", op);
  t.S = (log_alpha->sizes[2] - 1) / 2;
  t.nll = *nll;
  t.log_alpha = *log_alpha;
  t.grad_out = *grad_out;
  t.grad = *grad;
  t.backward = 1;
  t.zero_infinity = zero_infinity;
  return ctc_launch(s, op, a, &t);
}
