/* Scaled dot-product attention (see vnc/attention.h). Per (batch, head) pair the score and
 * probability matrices [L, S] live in a per-thread workspace; the five products are BLAS
 * sgemm calls (small ones run single-threaded inside BLAS, so pairs run in parallel on the
 * pool); softmax and its gradient run by rows in index order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"
#include "tier.h"
#include "vnc/attention.h"
#include "vnc/threadpool.h"

typedef struct attn_task {
  vnc_attention a;
  vnc_attn_operand dout, out, dq, dk, dv;
  const float *lse;
  float *lse_out, *dbias;
  int backward;
} attn_task;

/* Rows of pair p = b*H + h of an operand. */
static float *rows(const vnc_attn_operand *x, int64_t H, int64_t p) {
  return x->data + (p / H) * x->batch_stride + (p % H) * x->head_stride;
}

/* sc [L, S] = scale * Q K^T + bias, -inf where causally masked. */
static void scores(const vnc_attention *a, int64_t p, float *sc) {
  const int64_t L = a->L, S = a->S, E = a->E;
  vnc_sgemm(0, 1, L, S, E, (float)a->scale, rows(&a->q, a->H, p), a->q.row_stride, rows(&a->k, a->H, p),
            a->k.row_stride, 0.0f, sc, S);
  const float *bias = a->bias ? a->bias + (p / a->H) * a->bias_strides[0] + (p % a->H) * a->bias_strides[1] : NULL;
  for (int64_t i = 0; i < L; i++) {
    float *row = sc + i * S;
    if (bias)
      for (int64_t j = 0; j < S; j++) row[j] = row[j] + bias[i * a->bias_strides[2] + j * a->bias_strides[3]];
    if (a->causal)
      for (int64_t j = i + 1; j < S; j++) row[j] = -INFINITY;
  }
}

static void forward_pairs(void *ctx, int64_t p0, int64_t p1) {
  const attn_task *t = ctx;
  const vnc_attention *a = &t->a;
  const int64_t L = a->L, S = a->S, Ev = a->Ev;
  float *sc = malloc(sizeof(float) * (size_t)(L * S + 1));
  const vnc_tier_ops *tier = vnc_tier();
  for (int64_t p = p0; p < p1; p++) {
    scores(a, p, sc);
    for (int64_t i = 0; i < L; i++) { /* rows become probabilities; a row with no finite score: zeros */
      float *row = sc + i * S, m = -INFINITY, sum = 0.0f;
      m = tier->row_max(row, S); /* a NaN score makes the row NaN, as on CPU */
      if (m == -INFINITY) {
        memset(row, 0, sizeof(float) * (size_t)S);
        t->lse_out[p * L + i] = -INFINITY;
        continue;
      }
      tier->exp_shift(row, row, m, S);
      sum = vnc_canonical_sum(row, S); /* 8 lanes: a serial chain of S adds cost more than the exps */
      t->lse_out[p * L + i] = m + logf(sum);
      for (int64_t j = 0; j < S; j++) row[j] = row[j] / sum;
    }
    float *o = rows(&t->out, a->H, p);
    if (S == 0)
      for (int64_t i = 0; i < L; i++) memset(o + i * t->out.row_stride, 0, sizeof(float) * (size_t)Ev);
    else
      vnc_sgemm(0, 0, L, Ev, S, 1.0f, sc, S, rows(&a->v, a->H, p), a->v.row_stride, 0.0f, o, t->out.row_stride);
  }
  free(sc);
}

static void backward_pairs(void *ctx, int64_t p0, int64_t p1) {
  const attn_task *t = ctx;
  const vnc_attention *a = &t->a;
  const int64_t L = a->L, S = a->S, E = a->E, Ev = a->Ev;
  float *pm = malloc(sizeof(float) * (size_t)(2 * L * S + a->Ev + 1)), *ds = pm + L * S, *prod = ds + L * S;
  for (int64_t p = p0; p < p1; p++) {
    const int64_t H = a->H;
    const float *dout = rows(&t->dout, H, p), *out = rows(&t->out, H, p), *lse = t->lse + p * L;
    const int64_t ldo = t->dout.row_stride, lo = t->out.row_stride;
    float *dq = rows(&t->dq, H, p), *dk = rows(&t->dk, H, p), *dv = rows(&t->dv, H, p);
    if (L == 0 || S == 0) {
      for (int64_t i = 0; i < L; i++) memset(dq + i * t->dq.row_stride, 0, sizeof(float) * (size_t)E);
      for (int64_t j = 0; j < S; j++) memset(dk + j * t->dk.row_stride, 0, sizeof(float) * (size_t)E);
      for (int64_t j = 0; j < S; j++) memset(dv + j * t->dv.row_stride, 0, sizeof(float) * (size_t)Ev);
      continue;
    }
    scores(a, p, pm);
    for (int64_t i = 0; i < L; i++) { /* P from the saved logsumexp */
      if (lse[i] == -INFINITY) memset(pm + i * S, 0, sizeof(float) * (size_t)S);
      else vnc_tier()->exp_shift(pm + i * S, pm + i * S, lse[i], S);
    }
    vnc_sgemm(1, 0, S, Ev, L, 1.0f, pm, S, dout, ldo, 0.0f, dv, t->dv.row_stride); /* dV = P^T dO */
    vnc_sgemm(0, 1, L, S, Ev, 1.0f, dout, ldo, rows(&a->v, H, p), a->v.row_stride, 0.0f, ds, S); /* dP = dO V^T */
    for (int64_t i = 0; i < L; i++) { /* dS = P (dP - D), D_i = dO_i . O_i (canonical sum) */
      for (int64_t e = 0; e < Ev; e++) prod[e] = dout[i * ldo + e] * out[i * lo + e];
      const float d = vnc_canonical_sum(prod, Ev);
      for (int64_t j = 0; j < S; j++) ds[i * S + j] = pm[i * S + j] * (ds[i * S + j] - d);
    }
    if (t->dbias) memcpy(t->dbias + p * L * S, ds, sizeof(float) * (size_t)(L * S));
    vnc_sgemm(0, 0, L, E, S, (float)a->scale, ds, S, rows(&a->k, H, p), a->k.row_stride, 0.0f, dq,
              t->dq.row_stride); /* dQ = scale dS K */
    vnc_sgemm(1, 0, S, E, L, (float)a->scale, ds, S, rows(&a->q, H, p), a->q.row_stride, 0.0f, dk,
              t->dk.row_stride); /* dK = scale dS^T Q */
  }
  free(pm);
}

static vnc_status attn_run(void *payload) {
  attn_task *t = payload;
  const int64_t pairs = t->a.B * t->a.H;
  vnc_parallel_for(pairs, 1, t->backward ? backward_pairs : forward_pairs, t);
  return VNC_OK;
}

static vnc_status check_shape(const char *op, const vnc_attention *a) {
  if (a->B < 0 || a->H < 0 || a->L < 0 || a->S < 0 || a->E < 0 || a->Ev < 0)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: negative size", op);
  return VNC_OK;
}

vnc_status vnc_attention_forward(vnc_stream *s, const char *op, const vnc_attention *a, const vnc_attn_operand *out,
                                 float *lse) {
  vnc_status st = check_shape(op, a);
  if (st != VNC_OK || a->B * a->H * a->L == 0) return st;
  attn_task t = {.a = *a, .out = *out, .lse_out = lse};
  return vnc_launch(s, op, attn_run, &t, sizeof t, NULL);
}

vnc_status vnc_attention_backward(vnc_stream *s, const char *op, const vnc_attention *a, const vnc_attn_operand *dout,
                                  const vnc_attn_operand *out, const float *lse, const vnc_attn_operand *dq,
                                  const vnc_attn_operand *dk, const vnc_attn_operand *dv, float *dbias) {
  vnc_status st = check_shape(op, a);
  if (st != VNC_OK || a->B * a->H == 0) return st;
  attn_task t = {.a = *a, .dout = *dout, .out = *out, .lse = lse, .dq = *dq, .dk = *dk, .dv = *dv, .dbias = dbias,
                 .backward = 1};
  return vnc_launch(s, op, attn_run, &t, sizeof t, NULL);
}
