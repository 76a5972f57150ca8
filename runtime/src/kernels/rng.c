/* Random fills. Element k of the output (row-major logical index) takes Philox counter
 * offset + k, so results depend on (seed, offset, k) alone. Arithmetic is float32 for
 * every floating dtype (float64 follows the device rule). */
#include <math.h>
#include <stdatomic.h>
#include "dtype.h"
#include "vnc/iter.h"
#include "philox.h"
#include "vnc/kernels.h"

typedef enum { RNG_UNIFORM, RNG_NORMAL, RNG_RANDOM, RNG_BERNOULLI, RNG_EXPONENTIAL } rng_kind;

typedef struct rng_task {
  vnc_iter it;
  rng_kind kind;
  uint64_t seed, offset;
  double a, b;       /* from/to, mean/std, p, lambd */
  int64_t from;      /* random_ */
  uint64_t range;    /* random_: 0 = 2^64 */
  atomic_int bad_p;  /* bernoulli_: a probability tensor held a value outside [0, 1] (or NaN) */
} rng_task;

#define TWO_PI_F 6.2831853071795864769f

static void rng_loop(void *ctx, char **data, const int64_t *st, int64_t n, int64_t index) {
  rng_task *t = ctx;
  int32_t dt = t->it.dtypes[0];
  vnc_store_f64_fn store = vnc_store_f64[dt];
  for (int64_t i = 0; i < n; i++) {
    uint32_t w[4];
    vnc_philox_element(t->seed, t->offset, (uint64_t)(index + i), w);
    char *p = data[0] + i * st[0];
    float u24 = (float)(w[0] >> 8) * 0x1.0p-24f; /* [0, 1) */
    switch (t->kind) {
      case RNG_UNIFORM: {
        float from = (float)t->a, to = (float)t->b;
        float v = from + (to - from) * u24;
        store(p, v);
        if (vnc_load_f64[dt](p) >= t->b && t->b > t->a) store(p, t->a); /* rounding reached `to` */
        break;
      }
      case RNG_NORMAL: {
        float u1 = ((float)(w[0] >> 8) + 1.0f) * 0x1.0p-24f; /* (0, 1] */
        float u2 = (float)(w[1] >> 8) * 0x1.0p-24f;
        float z = sqrtf(-2.0f * logf(u1)) * cosf(TWO_PI_F * u2);
        store(p, (float)t->a + (float)t->b * z);
        break;
      }
      case RNG_RANDOM: {
        uint64_t r = ((uint64_t)w[1] << 32) | w[0];
        uint64_t v = t->range ? r % t->range : r;
        vnc_store_i64[dt](p, (int64_t)((uint64_t)t->from + v));
        break;
      }
      case RNG_BERNOULLI: {
        double prob = t->it.nops > 1 ? vnc_load_f64[t->it.dtypes[1]](data[1] + i * st[1]) : t->a;
        if (!(prob >= 0.0 && prob <= 1.0)) atomic_store_explicit(&t->bad_p, 1, memory_order_relaxed);
        double u = (double)w[0] * 0x1.0p-32; /* [0, 1) */
        vnc_store_i64[dt](p, u < prob ? 1 : 0);
        break;
      }
      case RNG_EXPONENTIAL: {
        float v = -log1pf(-u24) / (float)t->a;
        store(p, v);
        break;
      }
    }
  }
}

static vnc_status rng_run(void *p) {
  rng_task *t = p;
  atomic_init(&t->bad_p, 0);
  vnc_iter_for_each(&t->it, rng_loop, t, 4096);
  if (atomic_load(&t->bad_p)) /* CPU PyTorch checks each probability as it draws */
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "Expected p_in >= 0 && p_in <= 1 (a probability "
                         "tensor holds a value outside [0, 1] or NaN)");
  return VNC_OK;
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

vnc_status vnc_rng_uniform(vnc_stream *s, const vnc_tensor *t, double from, double to,
                           uint64_t seed, uint64_t offset) {
  rng_task k = {.kind = RNG_UNIFORM, .seed = seed, .offset = offset, .a = from, .b = to};
  return launch_rng(s, "aten::uniform_", &k, t, NULL, 1);
}

vnc_status vnc_rng_normal(vnc_stream *s, const vnc_tensor *t, double mean, double std,
                          uint64_t seed, uint64_t offset) {
  rng_task k = {.kind = RNG_NORMAL, .seed = seed, .offset = offset, .a = mean, .b = std};
  return launch_rng(s, "aten::normal_", &k, t, NULL, 1);
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
  if (!(lambd > 0.0))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "exponential_ expects lambda > 0.0, but found lambda=%g", lambd);
  rng_task k = {.kind = RNG_EXPONENTIAL, .seed = seed, .offset = offset, .a = lambd};
  return launch_rng(s, "aten::exponential_", &k, t, NULL, 1);
}
