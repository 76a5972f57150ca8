/* Random fills. Element k of the output (row-major logical index) takes Philox counter
 * offset + k, so results depend on (seed, offset, k) alone. Arithmetic is float32 for
 * every floating dtype (float64 follows the device rule). Uniform, normal, log-normal and
 * exponential draws are blocks of the CPU tier's rng_f32 (tier.h: the same bits on every
 * tier), the other distributions one element at a time here. */
#include <math.h>
#include <stdatomic.h>
#include "dtype.h"
#include "vnc/iter.h"
#include "internal.h"
#include "philox.h"
#include "tier.h"
#include "vnc/kernels.h"

typedef enum { RNG_RANDOM = VNC_RNG_DIST_COUNT, RNG_BERNOULLI, RNG_POISSON } rng_extra_kind;

/* The continuous-parameter distributions of vnc_rng_draw: the ATen op (for errors), whether
 * only floating dtypes are drawn, and which parameters must be > 0 / in (0, 1). The argument
 * checks repeat ATen's (DistributionTemplates.h) so that a C caller gets the same refusal. */
static const struct {
  const char *op;
  int floating_only;
  const char *check; /* printf format naming the bad parameter, NULL: none */
} DISTS[VNC_RNG_DIST_COUNT] = {
    [VNC_RNG_UNIFORM] = {"aten::uniform_", 1, NULL},
    [VNC_RNG_NORMAL] = {"aten::normal_", 1, "normal expects std >= 0.0, but found std %g"},
    [VNC_RNG_EXPONENTIAL] = {"aten::exponential_", 1, "exponential_ expects lambda > 0.0, but found lambda=%g"},
    [VNC_RNG_CAUCHY] = {"aten::cauchy_", 1, "cauchy_ expects sigma > 0.0, but found sigma=%g"},
    [VNC_RNG_LOG_NORMAL] = {"aten::log_normal_", 1, "log_normal_ expects std > 0.0, but found std=%g"},
    [VNC_RNG_GEOMETRIC] = {"aten::geometric_", 0, "geometric_ expects p to be in (0, 1), but got p=%g"},
};

/* The parameter each check above tests, and whether it holds. */
static int dist_args_ok(vnc_rng_dist d, double a, double b, double *bad) {
  switch (d) {
    case VNC_RNG_NORMAL: *bad = b; return b >= 0.0;
    case VNC_RNG_EXPONENTIAL: *bad = a; return a > 0.0;
    case VNC_RNG_CAUCHY:
    case VNC_RNG_LOG_NORMAL: *bad = b; return b > 0.0;
    case VNC_RNG_GEOMETRIC: *bad = a; return a > 0.0 && a < 1.0;
    default: return 1;
  }
}

typedef struct rng_task {
  vnc_iter it;
  int kind;          /* vnc_rng_dist or rng_extra_kind */
  uint64_t seed, offset;
  double a, b;       /* from/to, mean/std, lambd, median/sigma, p */
  int64_t from;      /* random_ */
  uint64_t range;    /* random_: 0 = 2^64 */
  atomic_int bad;    /* bernoulli_/poisson: an input tensor held a value outside the domain */
} rng_task;

#define PI_F 3.14159265358979323846f

/* Uniform in (0, 1) from 23 bits: (k + 0.5) / 2^23 is exact in float32 and lies in
 * [2^-24, 1 - 2^-24], so log(u) < 0 and tan(pi (u - 1/2)) stay finite (ATen's float cauchy
 * clips to [eps, 1 - eps] for the same reason). */
static inline float open_unit(uint32_t w) { return ((float)(w >> 9) + 0.5f) * 0x1.0p-23f; }
/* Uniform in [0, 1) with 53 bits from two words, for poisson's double arithmetic (as CPU). */
static inline double unit53(uint32_t hi, uint32_t lo) {
  return (double)((((uint64_t)hi << 32) | lo) >> 11) * 0x1.0p-53;
}

/* Stores a whole number into any real dtype; integer outputs saturate at int64's range
 * instead of the undefined conversion of a larger double. */
static void store_count(int32_t dt, char *p, double v) {
  if (vnc_dtype_is_floating(dt)) {
    vnc_store_f64[dt](p, v);
    return;
  }
  int64_t k = v >= 0x1.0p63 ? INT64_MAX : v <= -0x1.0p63 ? INT64_MIN : (int64_t)v;
  vnc_store_i64[dt](p, k);
}

/* Poisson(lambda) for element `index`, as ATen's CPU sampler (Distributions.cpp): the
 * product of uniforms (Knuth) below 10, Hoermann's transformed rejection (PTRS, "The
 * transformed rejection method for generating Poisson random variables", 1993) from 10 on.
 * Each rejection round takes the element's next Philox round. */
static double sample_poisson(const rng_task *t, uint64_t index, double lambda) {
  uint32_t w[4];
  if (lambda == 0.0) return 0.0;
  if (lambda < 10.0) {
    double limit = exp(-lambda), prod = 1.0;
    int64_t x = 0;
    for (uint64_t round = 0;; round++) {
      vnc_philox_element_round(t->seed, t->offset, index, round, w);
      for (int j = 0; j < 4; j += 2) {
        prod *= unit53(w[j], w[j + 1]);
        if (prod <= limit) return (double)x;
        x++;
      }
    }
  }
  double slam = sqrt(lambda), loglam = log(lambda);
  double b = 0.931 + 2.53 * slam, a = -0.059 + 0.02483 * b;
  double inv_alpha = 1.1239 + 1.1328 / (b - 3.4), v_r = 0.9277 - 3.6224 / (b - 2.0);
  for (uint64_t round = 0;; round++) {
    vnc_philox_element_round(t->seed, t->offset, index, round, w);
    double u = unit53(w[0], w[1]) - 0.5, v = unit53(w[2], w[3]);
    double us = 0.5 - fabs(u);
    double k = floor((2.0 * a / us + b) * u + lambda + 0.43);
    if (us >= 0.07 && v <= v_r) return k;
    if (k < 0.0 || (us < 0.013 && v > us)) continue;
    if (log(v) + log(inv_alpha) - log(a / (us * us) + b) <= -lambda + k * loglam - lgamma(k + 1.0)) return k;
  }
}

/* The distributions the tier draws as float32 blocks (tier.h's rng_f32). */
static int tier_drawn(int kind) {
  return kind == VNC_RNG_UNIFORM || kind == VNC_RNG_NORMAL || kind == VNC_RNG_LOG_NORMAL ||
         kind == VNC_RNG_EXPONENTIAL;
}

/* A run of n elements from logical index `index` drawn by the tier: into the output itself
 * when it is dense float32, else into a block converted to its dtype and strides. */
static void tier_run(const rng_task *t, char *p, int64_t st, int64_t n, int64_t index) {
  enum { BUF = 1024 };
  const int32_t dt = t->it.dtypes[0];
  const int direct = dt == VNC_FLOAT32 && st == 4;
  const int clamp = t->kind == VNC_RNG_UNIFORM && t->b > t->a; /* rounding may reach `to` */
  float buf[BUF];
  for (int64_t i0 = 0; i0 < n; i0 += BUF) {
    const int64_t m = n - i0 < BUF ? n - i0 : BUF;
    char *q = p + i0 * st;
    float *y = direct ? (float *)q : buf;
    vnc_tier()->rng_f32(y, m, t->seed, t->offset + (uint64_t)(index + i0), t->kind, (float)t->a, (float)t->b);
    if (direct) {
      if (clamp)
        for (int64_t i = 0; i < m; i++) y[i] = (double)y[i] >= t->b ? (float)t->a : y[i];
      continue;
    }
    char *ptrs[2] = {q, (char *)buf};
    const int64_t strides[2] = {st, 4};
    vnc_copy_loop(dt, VNC_FLOAT32)(NULL, ptrs, strides, m, 0);
    if (clamp)
      for (int64_t i = 0; i < m; i++)
        if (vnc_load_f64[dt](q + i * st) >= t->b) vnc_store_f64[dt](q + i * st, t->a);
  }
}

/* Bernoulli with one probability into a dense 1-byte or float32 run (dropout's masks): the
 * generic loop's test, u = w0 / 2^32 < p, without its per-element store call. 0: not this case. */
static int bernoulli_dense(const rng_task *t, char *p, int64_t st, int64_t m, const uint32_t *w0) {
  const int32_t dt = t->it.dtypes[0];
  const double thr = t->a * 0x1.0p32; /* exact: w0 / 2^32 < p  <=>  w0 < p 2^32 */
  if ((dt == VNC_BOOL || dt == VNC_UINT8 || dt == VNC_INT8) && st == 1) {
    for (int64_t j = 0; j < m; j++) ((uint8_t *)p)[j] = (double)w0[j] < thr;
    return 1;
  }
  if (dt == VNC_FLOAT32 && st == 4) {
    for (int64_t j = 0; j < m; j++) ((float *)p)[j] = (double)w0[j] < thr ? 1.0f : 0.0f;
    return 1;
  }
  return 0;
}

static void rng_loop(void *ctx, char **data, const int64_t *st, int64_t n, int64_t index) {
  rng_task *t = ctx;
  if (tier_drawn(t->kind)) {
    tier_run(t, data[0], st[0], n, index);
    return;
  }
  int32_t dt = t->it.dtypes[0];
  vnc_store_f64_fn store = vnc_store_f64[dt];
  uint32_t w0[VNC_RNG_BLOCK], w1[VNC_RNG_BLOCK];
  for (int64_t i0 = 0; i0 < n; i0 += VNC_RNG_BLOCK) {
    const int64_t m = n - i0 < VNC_RNG_BLOCK ? n - i0 : VNC_RNG_BLOCK;
    if (t->kind != RNG_POISSON) /* poisson draws its own rounds per element */
      vnc_tier()->philox_words(t->seed, t->offset + (uint64_t)(index + i0), m, w0, w1);
    if (t->kind == RNG_BERNOULLI && t->it.nops == 1 && bernoulli_dense(t, data[0] + i0 * st[0], st[0], m, w0))
      continue;
    for (int64_t j = 0; j < m; j++) {
      const int64_t i = i0 + j;
      char *p = data[0] + i * st[0];
      switch (t->kind) {
        case VNC_RNG_CAUCHY: /* median + sigma tan(pi (u - 1/2)), the inverse CDF */
          store(p, (float)t->a + (float)t->b * tanf(PI_F * (open_unit(w0[j]) - 0.5f)));
          break;
        case VNC_RNG_GEOMETRIC: /* ceil(log(u) / log(1 - p)): trials up to the first success */
          store_count(dt, p, ceil((double)logf(open_unit(w0[j])) / t->b));
          break;
        case RNG_RANDOM: {
          uint64_t r = ((uint64_t)w1[j] << 32) | w0[j];
          uint64_t v = t->range ? r % t->range : r;
          vnc_store_i64[dt](p, (int64_t)((uint64_t)t->from + v));
          break;
        }
        case RNG_BERNOULLI: {
          double prob = t->it.nops > 1 ? vnc_load_f64[t->it.dtypes[1]](data[1] + i * st[1]) : t->a;
          if (!(prob >= 0.0 && prob <= 1.0)) atomic_store_explicit(&t->bad, 1, memory_order_relaxed);
          double u = (double)w0[j] * 0x1.0p-32; /* [0, 1) */
          vnc_store_i64[dt](p, u < prob ? 1 : 0);
          break;
        }
        case RNG_POISSON: {
          double lambda = vnc_load_f64[t->it.dtypes[1]](data[1] + i * st[1]);
          if (!(lambda >= 0.0 && lambda < INFINITY)) { /* CPU refuses < 0 and NaN (and never ends at inf) */
            atomic_store_explicit(&t->bad, 1, memory_order_relaxed);
            lambda = 0.0;
          }
          store_count(dt, p, sample_poisson(t, (uint64_t)(index + i), lambda));
          break;
        }
      }
    }
  }
}

static vnc_status rng_run(void *p) {
  rng_task *t = p;
  atomic_init(&t->bad, 0);
  vnc_iter_for_each(&t->it, rng_loop, t, 4096);
  if (!atomic_load(&t->bad)) return VNC_OK;
  /* CPU PyTorch checks each probability / rate as it draws */
  if (t->kind == RNG_POISSON)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "invalid Poisson rate, expected rate to be non-negative "
                         "(a rate is negative or NaN; an infinite rate is refused too)");
  return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "Expected p_in >= 0 && p_in <= 1 (a probability "
                       "tensor holds a value outside [0, 1] or NaN)");
}

uint64_t vnc_rng_offset_increment(int64_t numel) { return ((uint64_t)numel + 3u) / 4u * 4u; }

static vnc_status launch_rng(vnc_stream *s, const char *op, rng_task *t, const vnc_tensor *out,
                             const vnc_tensor *extra, int need_float) {
  if (need_float && !vnc_dtype_is_floating(out->dtype))
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s expects a floating point tensor, got %s", op,
                         vnc_dtype_name(out->dtype));
  if (vnc_dtype_is_complex(out->dtype))
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s is not implemented for %s", op,
                         vnc_dtype_name(out->dtype));
  const vnc_tensor *ops[2] = {out, extra};
  vnc_status st = vnc_iter_init(&t->it, extra ? 2 : 1, ops, VNC_ITER_KEEP_ORDER);
  if (st != VNC_OK) return st;
  if (t->it.numel == 0) return VNC_OK;
  return vnc_launch(s, op, rng_run, t, sizeof *t, NULL);
}

vnc_status vnc_rng_draw(vnc_stream *s, const vnc_tensor *t, vnc_rng_dist dist, double a, double b,
                        uint64_t seed, uint64_t offset) {
  if ((unsigned)dist >= VNC_RNG_DIST_COUNT)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "vnc_rng_draw: unknown distribution %d", (int)dist);
  double bad = 0.0;
  if (!dist_args_ok(dist, a, b, &bad)) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, DISTS[dist].check, bad);
  if (dist == VNC_RNG_GEOMETRIC && t->dtype == VNC_BOOL)
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "aten::geometric_ is not implemented for bool");
  rng_task k = {.kind = (int)dist, .seed = seed, .offset = offset, .a = a, .b = b};
  if (dist == VNC_RNG_GEOMETRIC) k.b = log1p(-a); /* the divisor, once */
  return launch_rng(s, DISTS[dist].op, &k, t, NULL, DISTS[dist].floating_only);
}

vnc_status vnc_rng_uniform(vnc_stream *s, const vnc_tensor *t, double from, double to,
                           uint64_t seed, uint64_t offset) {
  return vnc_rng_draw(s, t, VNC_RNG_UNIFORM, from, to, seed, offset);
}

vnc_status vnc_rng_normal(vnc_stream *s, const vnc_tensor *t, double mean, double std,
                          uint64_t seed, uint64_t offset) {
  return vnc_rng_draw(s, t, VNC_RNG_NORMAL, mean, std, seed, offset);
}

vnc_status vnc_rng_random(vnc_stream *s, const vnc_tensor *t, int64_t from, uint64_t range,
                          uint64_t seed, uint64_t offset) {
  rng_task k = {.kind = RNG_RANDOM, .seed = seed, .offset = offset, .from = from, .range = range};
  return launch_rng(s, "aten::random_", &k, t, NULL, 0);
}

vnc_status vnc_rng_bernoulli(vnc_stream *s, const vnc_tensor *t, double p, const vnc_tensor *p_tensor,
                             uint64_t seed, uint64_t offset) {
  if (!p_tensor && !(p >= 0.0 && p <= 1.0))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "bernoulli_ expects 0 <= p <= 1, but got p=%g", p);
  rng_task k = {.kind = RNG_BERNOULLI, .seed = seed, .offset = offset, .a = p};
  return launch_rng(s, "aten::bernoulli_", &k, t, p_tensor, 0);
}

vnc_status vnc_rng_exponential(vnc_stream *s, const vnc_tensor *t, double lambd, uint64_t seed,
                               uint64_t offset) {
  return vnc_rng_draw(s, t, VNC_RNG_EXPONENTIAL, lambd, 0.0, seed, offset);
}

vnc_status vnc_rng_poisson(vnc_stream *s, const vnc_tensor *t, const vnc_tensor *rates, uint64_t seed,
                           uint64_t offset) {
  rng_task k = {.kind = RNG_POISSON, .seed = seed, .offset = offset};
  return launch_rng(s, "aten::poisson", &k, t, rates, 1);
}
