/* Scaled dot-product attention (see vnc/attention.h), fused per (batch, head) pair: the
 * operands are copied (K and V also transposed) into a per-thread workspace padded to 16
 * columns, where the scores, probabilities and gradients stay in cache; the products run the
 * tier table's small product (vnc_tier_ops.mm: the same bits on every tier; causal tiles skip
 * the masked triangle); softmax and its gradient run by rows. Pairs run in parallel on the
 * pool; nothing is split inside a pair, so results do not depend on the thread count. */
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

/* Rows of key or value operand x that pair p reads: head h / G under grouped-query attention. */
static const float *kv_rows(const vnc_attn_operand *x, const vnc_attention *a, int64_t p) {
  const int64_t g = a->group > 1 ? a->group : 1;
  return x->data + (p / a->H) * x->batch_stride + (p % a->H) / g * x->head_stride;
}

static int64_t pad(int64_t n) { return (n + VNC_MM_COLS - 1) / VNC_MM_COLS * VNC_MM_COLS; }

/* dst [n][ldd] = src's rows (row stride ld, m columns), zero beyond column m. */
static void copy_padded(float *dst, int64_t ldd, const float *src, int64_t ld, int64_t n, int64_t m) {
  for (int64_t r = 0; r < n; r++) {
    memcpy(dst + r * ldd, src + r * ld, sizeof(float) * (size_t)m);
    memset(dst + r * ldd + m, 0, sizeof(float) * (size_t)(ldd - m));
  }
}

/* dst [m][ldd] = the transpose of src's n rows (row stride ld, m columns), zero beyond column n. */
static void transpose_padded(float *dst, int64_t ldd, const float *src, int64_t ld, int64_t n, int64_t m) {
  for (int64_t e = 0; e < m; e++) {
    for (int64_t j = 0; j < n; j++) dst[e * ldd + j] = src[j * ld + e];
    memset(dst + e * ldd + n, 0, sizeof(float) * (size_t)(ldd - n));
  }
}

/* The rows of x (n rows, row stride ld, m columns) as the b operand of a small product: in
 * place when m is whole blocks of 16 columns, else a zero-padded copy in buf. */
static const float *operand_b(const float *x, int64_t ld, int64_t n, int64_t m, float *buf, int64_t *ldb) {
  if (m % VNC_MM_COLS == 0) {
    *ldb = ld;
    return x;
  }
  copy_padded(buf, pad(m), x, ld, n, m);
  *ldb = pad(m);
  return buf;
}

/* dst rows (row stride ld, m columns) = scale * src [n][lds] (scale 1: a copy). */
static void store_rows(float *dst, int64_t ld, const float *src, int64_t lds, int64_t n, int64_t m, float scale) {
  for (int64_t r = 0; r < n; r++)
    for (int64_t e = 0; e < m; e++) dst[r * ld + e] = src[r * lds + e] * scale;
}

static void product(float *c, int64_t ldc, const float *a, int64_t ars, int64_t ats, const float *b, int64_t ldb,
                    int64_t m, int64_t n, int64_t k, int tri) {
  const vnc_mm p = {c, ldc, a, ars, ats, b, ldb, m, n, k, tri};
  vnc_tier()->mm(&p);
}

/* dst (n rows of m columns, row stride ld) = scale * a small product (see product()), written
 * in place when m is whole blocks of 16 columns, else through tmp. */
static void product_to(float *dst, int64_t ld, float scale, float *tmp, const float *a, int64_t ars, int64_t ats,
                       const float *b, int64_t ldb, int64_t n, int64_t m, int64_t k, int tri) {
  const int direct = m % VNC_MM_COLS == 0;
  float *c = direct ? dst : tmp;
  const int64_t ldc = direct ? ld : pad(m);
  product(c, ldc, a, ars, ats, b, ldb, n, pad(m), k, tri);
  if (!direct || scale != 1.0f) store_rows(dst, ld, c, ldc, n, m, scale);
}


/* st [S][Lp] = K Q^T (qt: Q^T [E][Lp]), then the softmax passes of `mode` (vnc_attn_rows). */
static void scores(const vnc_attention *a, int64_t p, const float *qt, float *st, int mode, float *lse, float *scratch) {
  const int64_t Lp = pad(a->L);
  product(st, Lp, kv_rows(&a->k, a, p), a->k.row_stride, 1, qt, Lp, a->S, Lp, a->E,
          a->causal ? VNC_MM_C_GE_R : VNC_MM_FULL);
  vnc_attn_rows r = {.mode = mode, .causal = a->causal, .s = st, .ld = Lp, .L = a->L, .S = a->S,
                     .scale = (float)a->scale, .lse = lse, .scratch = scratch};
  if (a->bias) {
    r.bias = a->bias + (p / a->H) * a->bias_strides[0] + (p % a->H) * a->bias_strides[1];
    r.brs = a->bias_strides[2];
    r.bcs = a->bias_strides[3];
  }
  vnc_tier()->attn_cols(&r);
}

/* Per-pair workspace in floats: the forward's Q^T, padded V, transposed scores, output rows
 * and scratch; the backward's Q^T, dO^T, padded Q, K, dO, P^T, dS^T, D, output rows and
 * scratch. */
static int64_t workspace(const vnc_attention *a, int backward) {
  const int64_t L = a->L, S = a->S, Lp = pad(L), Ep = pad(a->E), Evp = pad(a->Ev), M = L > S ? L : S;
  const int64_t w = Ep > Evp ? Ep : Evp;
  return backward ? a->E * Lp + a->Ev * Lp + L * Ep + S * Ep + L * Evp + 2 * S * Lp + Lp + M * w + S + a->Ev
                  : a->E * Lp + S * Evp + S * Lp + L * Evp + S;
}

static void forward_pairs(void *ctx, int64_t p0, int64_t p1) {
  const attn_task *t = ctx;
  const vnc_attention *a = &t->a;
  const int64_t L = a->L, S = a->S, E = a->E, Ev = a->Ev, H = a->H, Lp = pad(L), Evp = pad(Ev);
  float *qt = malloc(sizeof(float) * (size_t)(workspace(a, 0) + 1)), *vp = qt + E * Lp, *st = vp + S * Evp,
        *ot = st + S * Lp, *scratch = ot + L * Evp;
  for (int64_t p = p0; p < p1; p++) {
    float *o = rows(&t->out, H, p);
    if (S == 0) {
      for (int64_t i = 0; i < L; i++) memset(o + i * t->out.row_stride, 0, sizeof(float) * (size_t)Ev);
      continue;
    }
    int64_t ldv;
    transpose_padded(qt, Lp, rows(&a->q, H, p), a->q.row_stride, L, E);
    const float *vb = operand_b(kv_rows(&a->v, a, p), a->v.row_stride, S, Ev, vp, &ldv);
    scores(a, p, qt, st, VNC_ATTN_SOFTMAX, t->lse_out + p * L, scratch);
    product_to(o, t->out.row_stride, 1.0f, ot, st, 1, Lp, vb, ldv, L, Ev, S,
               a->causal ? VNC_MM_T_LE_R : VNC_MM_FULL); /* O = P V */
  }
  free(qt);
}

static void backward_pairs(void *ctx, int64_t p0, int64_t p1) {
  const attn_task *t = ctx;
  const vnc_attention *a = &t->a;
  const int64_t L = a->L, S = a->S, E = a->E, Ev = a->Ev, H = a->H, Lp = pad(L), Ep = pad(E), Evp = pad(Ev);
  const int lower = a->causal ? VNC_MM_T_LE_R : VNC_MM_FULL, upper = a->causal ? VNC_MM_T_GE_R : VNC_MM_FULL;
  float *qt = malloc(sizeof(float) * (size_t)(workspace(a, 1) + 1)), *dot = qt + E * Lp, *qp = dot + Ev * Lp,
        *kp = qp + L * Ep, *dop = kp + S * Ep, *pt = dop + L * Evp, *dst = pt + S * Lp, *d = dst + S * Lp,
        *tmp = d + Lp, *scratch = tmp + (L > S ? L : S) * (Ep > Evp ? Ep : Evp);
  const float scale = (float)a->scale;
  for (int64_t p = p0; p < p1; p++) {
    const float *dout = rows(&t->dout, H, p), *out = rows(&t->out, H, p);
    const int64_t ldo = t->dout.row_stride, lo = t->out.row_stride;
    float *dq = rows(&t->dq, H, p), *dk = rows(&t->dk, H, p), *dv = rows(&t->dv, H, p);
    if (L == 0 || S == 0) {
      for (int64_t i = 0; i < L; i++) memset(dq + i * t->dq.row_stride, 0, sizeof(float) * (size_t)E);
      for (int64_t j = 0; j < S; j++) memset(dk + j * t->dk.row_stride, 0, sizeof(float) * (size_t)E);
      for (int64_t j = 0; j < S; j++) memset(dv + j * t->dv.row_stride, 0, sizeof(float) * (size_t)Ev);
      continue;
    }
    const float *q = rows(&a->q, H, p), *k = kv_rows(&a->k, a, p), *v = kv_rows(&a->v, a, p);
    int64_t ldq, ldk, lddo;
    transpose_padded(qt, Lp, q, a->q.row_stride, L, E);
    transpose_padded(dot, Lp, dout, ldo, L, Ev);
    const float *qb = operand_b(q, a->q.row_stride, L, E, qp, &ldq), *kb = operand_b(k, a->k.row_stride, S, E, kp, &ldk);
    const float *dob = operand_b(dout, ldo, L, Ev, dop, &lddo);
    scores(a, p, qt, pt, VNC_ATTN_PROBS, (float *)t->lse + p * L, scratch); /* P^T from the saved logsumexp */
    product_to(dv, t->dv.row_stride, 1.0f, tmp, pt, Lp, 1, dob, lddo, S, Ev, L, upper); /* dV = P^T dO */
    product(dst, Lp, v, a->v.row_stride, 1, dot, Lp, S, Lp, Ev, a->causal ? VNC_MM_C_GE_R : VNC_MM_FULL); /* dP^T = V dO^T */
    for (int64_t i = 0; i < Lp; i++) { /* D_i = dO_i . O_i (canonical sum) */
      if (i >= L) {
        d[i] = 0.0f;
        continue;
      }
      for (int64_t e = 0; e < Ev; e++) scratch[e] = dout[i * ldo + e] * out[i * lo + e];
      d[i] = vnc_canonical_sum(scratch, Ev);
    }
    const vnc_attn_rows g = {.mode = VNC_ATTN_GRAD, .causal = a->causal, .s = dst, .ld = Lp, .L = L, .S = S,
                             .p = pt, .d = d};
    vnc_tier()->attn_cols(&g); /* dS^T = P^T (dP^T - D) */
    if (t->dbias)
      for (int64_t i = 0; i < L; i++)
        for (int64_t j = 0; j < S; j++) t->dbias[(p * L + i) * S + j] = dst[j * Lp + i];
    product_to(dq, t->dq.row_stride, scale, tmp, dst, 1, Lp, kb, ldk, L, E, S, lower); /* dQ = scale dS K */
    product_to(dk, t->dk.row_stride, scale, tmp, dst, Lp, 1, qb, ldq, S, E, L, upper); /* dK = scale dS^T Q */
  }
  free(qt);
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
  if (a->group < 0 || (a->group > 1 && a->H % a->group))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: %lld query heads do not split into groups of %lld", op,
                         (long long)a->H, (long long)a->group);
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
