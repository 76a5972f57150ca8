/* Fused optimizer steps (see vnc/optim.h): Adam, AdamW, SGD, Adagrad. The list is cut into
 * chunks of CHUNK elements, processed in parallel; each chunk is loaded into float32 buffers,
 * updated with the foreach sequence's roundings (its add with alpha, addcmul and lerp as the
 * elementwise rows compute them: fused multiply-adds, vnc/ew_scalar.h; Adagrad: ATen's fused
 * kernel's), and stored back. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "tier.h"
#include "vnc/ew_scalar.h"
#include "vnc/optim.h"
#include "vnc/threadpool.h"

#define CHUNK 2048

typedef struct optim_task {
  vnc_optim_config cfg;
  int64_t n, nchunks;
  vnc_optim_param *params;  /* n entries, then n+1 chunk prefix counts (one allocation) */
  int64_t *first_chunk;
} optim_task;

static void load(float *dst, const void *base, int32_t dtype, int64_t off, int64_t len) {
  vnc_to_f32(dst, (const char *)base + off * (int64_t)vnc_dtype_size(dtype), dtype, 1, len);
}
static void store(void *base, int32_t dtype, int64_t off, const float *src, int64_t len) {
  vnc_from_f32((char *)base + off * (int64_t)vnc_dtype_size(dtype), dtype, 1, src, len);
}

/* Scalars of one parameter's step, rounded as the elementwise kernels round Python floats. */
typedef struct step_scalars {
  float decay, wd, lerp_w, beta2, one_minus_beta2, bc2_sqrt, eps, step_size; /* Adam (wd, eps: Adagrad) */
  float momentum, one_minus_dampening, neg_lr;                               /* SGD */
  float clr;                                                                 /* Adagrad */
} step_scalars;

static step_scalars scalars_for(const vnc_optim_config *c, const vnc_optim_param *p) {
  const double lr = c->lr_tensor ? (double)*c->lr_tensor : c->lr;
  step_scalars s = {0};
  s.wd = (float)c->weight_decay;
  if (c->kind == VNC_OPTIM_SGD) {
    s.momentum = (float)c->momentum;
    s.one_minus_dampening = (float)(1.0 - c->dampening);
    s.neg_lr = (float)-lr;
    return s;
  }
  if (c->kind == VNC_OPTIM_ADAGRAD) { /* ATen's fused_adagrad: clr in double, then float */
    s.clr = (float)(lr / (1.0 + ((double)*p->step - 1.0) * c->lr_decay));
    s.eps = (float)c->eps;
    return s;
  }
  const double t = (double)*p->step, bc1 = 1.0 - pow(c->beta1, t), bc2 = 1.0 - pow(c->beta2, t);
  s.decay = (float)(1.0 - lr * c->weight_decay);
  s.lerp_w = (float)(1.0 - c->beta1);
  s.beta2 = (float)c->beta2;
  s.one_minus_beta2 = (float)(1.0 - c->beta2);
  s.bc2_sqrt = (float)pow(bc2, 0.5);
  s.eps = (float)c->eps;
  s.step_size = (float)((lr / bc1) * -1.0);
  return s;
}

/* Adam's and SGD's update loops, defined once per form of the fused multiply-add, which give
 * the same bits (vnc/ew_scalar.h): the FMA instruction for the avx2 and avx512 tiers (this file
 * is built for baseline x86-64, where vnc_fmaf is an exact emulation several times slower),
 * vnc_fmaf elsewhere. lerp is vnc_f_lerp's form with that FMA. */
#define UPDATE_LOOPS(SFX, ATTR, FMA)                                                                             \
  ATTR static void adam_chunk##SFX(const vnc_optim_config *c, const step_scalars *s, float *p, float *g, float *m, \
                                   float *v, float *vmax, int64_t len) {                                         \
    for (int64_t i = 0; i < len; i++) {                                                                          \
      float gi = c->maximize ? -g[i] : g[i];                                                                     \
      if (c->weight_decay != 0) {                                                                                \
        if (c->kind == VNC_OPTIM_ADAMW) p[i] = p[i] * s->decay;                                                  \
        else gi = FMA(p[i], s->wd, gi); /* _foreach_add(grads, params, alpha=wd) */                             \
      }                                                                                                          \
      const float w = s->lerp_w; /* _foreach_lerp_ */                                                          \
      m[i] = fabsf(w) < 0.5f ? FMA(w, gi - m[i], m[i]) : FMA(w - 1.0f, gi - m[i], gi);                           \
      v[i] = v[i] * s->beta2;                                                                                    \
      v[i] = FMA(s->one_minus_beta2 * gi, gi, v[i]); /* _foreach_addcmul_ */                                   \
      float d;                                                                                                   \
      if (c->amsgrad) {                                                                                          \
        vmax[i] = (isnan(v[i]) || v[i] > vmax[i]) ? v[i] : vmax[i];                                              \
        d = sqrtf(vmax[i]);                                                                                      \
      } else {                                                                                                   \
        d = sqrtf(v[i]);                                                                                         \
      }                                                                                                          \
      d = d / s->bc2_sqrt;                                                                                       \
      d = d + s->eps;                                                                                            \
      p[i] = p[i] + (s->step_size * m[i]) / d; /* _foreach_addcdiv_ */                                         \
    }                                                                                                            \
  }                                                                                                              \
  ATTR static void sgd_chunk##SFX(const vnc_optim_config *c, const step_scalars *s, float *p, float *g, float *m,  \
                                  float *v, float *vmax, int64_t len) {                                          \
    (void)v, (void)vmax;                                                                                         \
    for (int64_t i = 0; i < len; i++) {                                                                          \
      float gi = c->maximize ? -g[i] : g[i];                                                                     \
      if (c->weight_decay != 0) gi = FMA(p[i], s->wd, gi);                                                       \
      if (c->momentum != 0) {                                                                                    \
        m[i] = c->first_step ? gi : FMA(gi, s->one_minus_dampening, m[i] * s->momentum);                         \
        gi = c->nesterov ? FMA(m[i], s->momentum, gi) : m[i];                                                    \
      }                                                                                                          \
      p[i] = FMA(gi, s->neg_lr, p[i]);                                                                           \
    }                                                                                                            \
  }
UPDATE_LOOPS(_emulated, , vnc_fmaf)
#if defined(__x86_64__) && defined(__GNUC__)
UPDATE_LOOPS(_fma, __attribute__((target("avx2,fma"))), __builtin_fmaf)
#define HAVE_FMA_LOOPS 1
#else
#define HAVE_FMA_LOOPS 0
#endif

static void adagrad_chunk(const vnc_optim_config *c, const step_scalars *s, float *p, float *g, float *m, float *v,
                          float *vmax, int64_t len) {
  (void)v, (void)vmax;
  for (int64_t i = 0; i < len; i++) {
    float gi = c->maximize ? -g[i] : g[i];
    if (c->weight_decay != 0) gi = gi + p[i] * s->wd;
    m[i] = m[i] + gi * gi;
    p[i] = p[i] - s->clr * gi / (sqrtf(m[i]) + s->eps);
  }
}

/* Per kind: the element update, and whether it keeps Adam's second moment (v, and vmax
 * with amsgrad). Every kind keeps m except SGD without momentum. */
typedef void (*chunk_fn)(const vnc_optim_config *, const step_scalars *, float *p, float *g, float *m, float *v,
                         float *vmax, int64_t len);
typedef struct optim_kind {
  chunk_fn update;
  int second_moment;
} optim_kind;
static const optim_kind KINDS[2][VNC_OPTIM_KINDS] = {
    {[VNC_OPTIM_ADAM] = {adam_chunk_emulated, 1},
     [VNC_OPTIM_ADAMW] = {adam_chunk_emulated, 1},
     [VNC_OPTIM_SGD] = {sgd_chunk_emulated, 0},
     [VNC_OPTIM_ADAGRAD] = {adagrad_chunk, 0}},
#if HAVE_FMA_LOOPS
    {[VNC_OPTIM_ADAM] = {adam_chunk_fma, 1},
     [VNC_OPTIM_ADAMW] = {adam_chunk_fma, 1},
     [VNC_OPTIM_SGD] = {sgd_chunk_fma, 0},
     [VNC_OPTIM_ADAGRAD] = {adagrad_chunk, 0}},
#endif
};

/* The loops with the FMA instruction where the tier in use has it (TORCH_NEURONX_ISA caps it). */
static const optim_kind *kind_of(int32_t k) {
  return &KINDS[HAVE_FMA_LOOPS && strcmp(vnc_tier()->name, "baseline") != 0][k];
}

static void optim_chunks(void *ctx, int64_t c0, int64_t c1) {
  const optim_task *t = ctx;
  const vnc_optim_config *c = &t->cfg;
  const int32_t pd = c->param_dtype, gd = c->grad_dtype;
  float p[CHUNK], g[CHUNK], m[CHUNK], v[CHUNK], vmax[CHUNK];
  int64_t k = 0;
  for (int64_t ch = c0; ch < c1; ch++) {
    while (t->first_chunk[k + 1] <= ch) k++; /* the parameter holding chunk ch */
    const vnc_optim_param *q = &t->params[k];
    const int64_t off = (ch - t->first_chunk[k]) * CHUNK, len = q->numel - off < CHUNK ? q->numel - off : CHUNK;
    const step_scalars s = scalars_for(c, q);
    load(p, q->param, pd, off, len);
    load(g, q->grad, gd, off, len);
    if (c->grad_scale) {
      for (int64_t i = 0; i < len; i++) g[i] = g[i] / *c->grad_scale;
      store(q->grad, gd, off, g, len);
    }
    const optim_kind *kind = kind_of(c->kind);
    const int use_m = c->kind != VNC_OPTIM_SGD || c->momentum != 0;
    if (use_m && !(c->kind == VNC_OPTIM_SGD && c->first_step)) load(m, q->m, pd, off, len);
    if (kind->second_moment) {
      load(v, q->v, pd, off, len);
      if (c->amsgrad) load(vmax, q->vmax, pd, off, len);
    }
    kind->update(c, &s, p, g, m, v, vmax, len);
    if (kind->second_moment) {
      store(q->v, pd, off, v, len);
      if (c->amsgrad) store(q->vmax, pd, off, vmax, len);
    }
    store(q->param, pd, off, p, len);
    if (use_m) store(q->m, pd, off, m, len);
  }
}

static vnc_status optim_run(void *payload) {
  optim_task *t = payload;
  if (t->cfg.found_inf && *t->cfg.found_inf != 0.0f) return VNC_OK; /* GradScaler: skip the step */
  vnc_parallel_for(t->nchunks, 4, optim_chunks, t);
  return VNC_OK;
}

static void optim_release(void *payload) { free(((optim_task *)payload)->params); }

vnc_status vnc_fused_optim(vnc_stream *s, const char *op, const vnc_optim_config *cfg, int64_t n,
                           const vnc_optim_param *params) {
  if (cfg->kind < 0 || cfg->kind >= VNC_OPTIM_KINDS)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: unknown optimizer kind %d", op, (int)cfg->kind);
  VNC_CHECK_COMPUTED(op, cfg->param_dtype, cfg->grad_dtype);
  if (!vnc_dtype_is_floating(cfg->param_dtype) || !vnc_dtype_is_floating(cfg->grad_dtype))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: parameters and gradients must be floating point, got %s and %s",
                         op, vnc_dtype_name(cfg->param_dtype), vnc_dtype_name(cfg->grad_dtype));
  if (n == 0) return VNC_OK;
  optim_task t = {.cfg = *cfg, .n = n};
  t.params = malloc(sizeof(vnc_optim_param) * (size_t)n + sizeof(int64_t) * (size_t)(n + 1));
  if (!t.params) return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "%s: no host memory for the task", op);
  memcpy(t.params, params, sizeof(vnc_optim_param) * (size_t)n);
  t.first_chunk = (int64_t *)(t.params + n);
  t.first_chunk[0] = 0;
  for (int64_t k = 0; k < n; k++) t.first_chunk[k + 1] = t.first_chunk[k] + (params[k].numel + CHUNK - 1) / CHUNK;
  t.nchunks = t.first_chunk[n];
  return vnc_launch(s, op, optim_run, &t, sizeof t, optim_release);
}
