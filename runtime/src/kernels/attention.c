/* Scaled dot-product attention (see vnc/attention.h). Per (batch, head) pair, K and V are
 * packed transposed so that every product below is an axpy over a contiguous row: the
 * compiler vectorises them without reassociating any sum. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "vnc/attention.h"
#include "vnc/threadpool.h"

typedef struct attn_task {
  vnc_attention a;
  const float *dout, *out, *lse;
  float *o, *lse_out, *dq, *dk, *dv, *dbias;
  int backward;
} attn_task;

static void axpy(float *restrict y, float alpha, const float *restrict x, int64_t n) {
  for (int64_t t = 0; t < n; t++) y[t] = y[t] + alpha * x[t];
}

static void transpose(float *restrict dst, const float *restrict src, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; r++)
    for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}

/* Scores of query row i of pair p: s[j] = scale * q_i . k_j + bias, -inf where masked. */
static void scores(const vnc_attention *a, int64_t p, int64_t i, const float *qi, const float *kT, float *s) {
  const int64_t S = a->S;
  memset(s, 0, sizeof(float) * (size_t)S);
  for (int64_t e = 0; e < a->E; e++) axpy(s, qi[e], kT + e * S, S);
  const float scale = (float)a->scale;
  const float *bias = a->bias ? a->bias + (p / a->H) * a->bias_strides[0] + (p % a->H) * a->bias_strides[1] +
                                    i * a->bias_strides[2]
                              : NULL;
  for (int64_t j = 0; j < S; j++) {
    float v = s[j] * scale;
    if (bias) v = v + bias[j * a->bias_strides[3]];
    s[j] = (a->causal && j > i) ? -INFINITY : v;
  }
}

static void forward_pairs(void *ctx, int64_t p0, int64_t p1) {
  const attn_task *t = ctx;
  const vnc_attention *a = &t->a;
  const int64_t L = a->L, S = a->S, E = a->E, Ev = a->Ev;
  float *kT = malloc(sizeof(float) * (size_t)(E * S + S + 1));
  float *s = kT + E * S;
  for (int64_t p = p0; p < p1; p++) {
    const float *q = a->q + p * L * E, *v = a->v + p * S * Ev;
    transpose(kT, a->k + p * S * E, S, E);
    for (int64_t i = 0; i < L; i++) {
      scores(a, p, i, q + i * E, kT, s);
      float m = -INFINITY;
      for (int64_t j = 0; j < S; j++) m = s[j] > m ? s[j] : m;
      float *o = t->o + (p * L + i) * Ev;
      memset(o, 0, sizeof(float) * (size_t)Ev);
      if (m == -INFINITY) { /* no finite score: zero output (safe softmax) */
        t->lse_out[p * L + i] = -INFINITY;
        continue;
      }
      float sum = 0.0f;
      for (int64_t j = 0; j < S; j++) {
        s[j] = expf(s[j] - m);
        sum = sum + s[j];
      }
      t->lse_out[p * L + i] = m + logf(sum);
      for (int64_t j = 0; j < S; j++)
        if (s[j] != 0.0f) axpy(o, s[j] / sum, v + j * Ev, Ev);
    }
  }
  free(kT);
}

static void backward_pairs(void *ctx, int64_t p0, int64_t p1) {
  const attn_task *t = ctx;
  const vnc_attention *a = &t->a;
  const int64_t L = a->L, S = a->S, E = a->E, Ev = a->Ev;
  const float scale = (float)a->scale;
  float *kT = malloc(sizeof(float) * (size_t)(E * S + Ev * S + 2 * S + 1));
  float *vT = kT + E * S, *s = vT + Ev * S, *dp = s + S;
  for (int64_t p = p0; p < p1; p++) {
    const float *q = a->q + p * L * E, *k = a->k + p * S * E;
    const float *dout = t->dout + p * L * Ev, *out = t->out + p * L * Ev, *lse = t->lse + p * L;
    float *dq = t->dq + p * L * E, *dk = t->dk + p * S * E, *dv = t->dv + p * S * Ev;
    transpose(kT, k, S, E);
    transpose(vT, a->v + p * S * Ev, S, Ev);
    memset(dk, 0, sizeof(float) * (size_t)(S * E));
    memset(dv, 0, sizeof(float) * (size_t)(S * Ev));
    for (int64_t i = 0; i < L; i++) {
      const float *doi = dout + i * Ev;
      float *dqi = dq + i * E;
      memset(dqi, 0, sizeof(float) * (size_t)E);
      float *dbias = t->dbias ? t->dbias + (p * L + i) * S : NULL;
      if (lse[i] == -INFINITY) { /* the row had no finite score: no gradient flows */
        if (dbias) memset(dbias, 0, sizeof(float) * (size_t)S);
        continue;
      }
      float d = 0.0f; /* D_i = dO_i . O_i */
      for (int64_t e = 0; e < Ev; e++) d = d + doi[e] * out[i * Ev + e];
      scores(a, p, i, q + i * E, kT, s);
      memset(dp, 0, sizeof(float) * (size_t)S);
      for (int64_t e = 0; e < Ev; e++) axpy(dp, doi[e], vT + e * S, S);
      for (int64_t j = 0; j < S; j++) {
        const float pj = expf(s[j] - lse[i]);
        if (pj != 0.0f) axpy(dv + j * Ev, pj, doi, Ev);
        const float ds = pj * (dp[j] - d);
        if (dbias) dbias[j] = ds;
        if (ds != 0.0f) {
          axpy(dqi, ds * scale, k + j * E, E);
          axpy(dk + j * E, ds * scale, q + i * E, E);
        }
      }
    }
  }
  free(kT);
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

vnc_status vnc_attention_forward(vnc_stream *s, const char *op, const vnc_attention *a, float *out, float *lse) {
  vnc_status st = check_shape(op, a);
  if (st != VNC_OK || a->B * a->H * a->L == 0) return st;
  attn_task t = {.a = *a, .o = out, .lse_out = lse};
  return vnc_launch(s, op, attn_run, &t, sizeof t, NULL);
}

vnc_status vnc_attention_backward(vnc_stream *s, const char *op, const vnc_attention *a, const float *dout,
                                  const float *out, const float *lse, float *dq, float *dk, float *dv, float *dbias) {
  vnc_status st = check_shape(op, a);
  if (st != VNC_OK || a->B * a->H == 0) return st;
  attn_task t = {.a = *a, .dout = dout, .out = out, .lse = lse, .dq = dq, .dk = dk, .dv = dv, .dbias = dbias,
                 .backward = 1};
  return vnc_launch(s, op, attn_run, &t, sizeof t, NULL);
}
