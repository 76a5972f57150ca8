/* Discrete Fourier transforms (vnc/fft.h): a plan per task (factors, the n roots of unity and,
 * for lengths with a prime factor above 13, Bluestein's chirp and kernel spectrum), then every
 * line in parallel: loaded into a complex double buffer, transformed out of place by
 * recursive mixed-radix Cooley-Tukey, scaled and stored. Roots come from integer angles
 * (t mod n), so their error does not grow with the index. */
#include <complex.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "lines.h"
#include "vnc/fft.h"

typedef double _Complex cd;

#define FFT_MAX_RADIX 13
#define FFT_MAX_FACTORS 64

typedef struct fft_plan {
  int64_t n;
  int nf;
  int64_t f[FFT_MAX_FACTORS];
  cd *w;               /* w[t] = exp(sign 2 pi i t / n), t < n */
  /* Bluestein (nf == 0): chirp c[t] = exp(sign pi i t^2 / n), t < n; the circular kernel's
   * spectrum K (length m, a power of two), and the forward plan of length m */
  cd *chirp, *kernel;
  struct fft_plan *sub;
} fft_plan;

static void plan_free(fft_plan *p) {
  if (!p) return;
  free(p->w);
  free(p->chirp);
  free(p->kernel);
  plan_free(p->sub);
  free(p->sub);
}

/* exp(sign * 2 pi i t / n) for 0 <= t: the angle is reduced to a quadrant and to at most pi/4
 * within it, so roots on the axes are exactly 0 and +-1 (an FFT of a constant gives exact zeros,
 * as CPU's) and the others are as accurate as cos/sin near 0. */
static cd root(int64_t t, int64_t n, int sign) {
  const unsigned __int128 q = ((unsigned __int128)(uint64_t)t * 4u) % ((unsigned __int128)(uint64_t)n * 4u);
  const int64_t k = (int64_t)(q / (uint64_t)n), rem = (int64_t)(q % (uint64_t)n); /* angle = pi/2 (k + rem/n) */
  double c, s;
  if (2 * rem <= n) {
    const double a = 0.5 * M_PI * (double)rem / (double)n;
    c = cos(a), s = sin(a);
  } else {
    const double a = 0.5 * M_PI * (double)(n - rem) / (double)n;
    c = sin(a), s = cos(a);
  }
  const double cr = k == 0 ? c : k == 1 ? -s : k == 2 ? -c : s;
  const double sr = k == 0 ? s : k == 1 ? c : k == 2 ? -s : -c;
  return CMPLX(cr, sign * sr);
}

/* X = DFT_n(x) by decimation in time: the f sub-sequences x[j::f] (length m = n / f) are
 * transformed into out[j*m : (j+1)*m], then combined by size-f butterflies with twiddles
 * W_n^{jk}. `ws` = N / n, where W_n^t = w[t * ws] in the top-level table of N roots. */
static void fft_rec(const fft_plan *p, int level, int64_t n, const cd *in, int64_t is, cd *out, int64_t ws) {
  if (n == 1) {
    out[0] = in[0];
    return;
  }
  const int64_t f = p->f[level], m = n / f, N = p->n;
  for (int64_t j = 0; j < f; j++) fft_rec(p, level + 1, m, in + j * is, is * f, out + j * m, ws * f);
  cd t[FFT_MAX_RADIX];
  for (int64_t k = 0; k < m; k++) {
    for (int64_t j = 0; j < f; j++) t[j] = j == 0 ? out[k] : out[j * m + k] * p->w[(j * k * ws) % N];
    if (f == 2) {
      out[k] = t[0] + t[1];
      out[m + k] = t[0] - t[1];
      continue;
    }
    for (int64_t q = 0; q < f; q++) {
      cd acc = t[0];
      for (int64_t j = 1; j < f; j++) acc += t[j] * p->w[((j * q) % f) * m * ws];
      out[q * m + k] = acc;
    }
  }
}

static int factorize(int64_t n, int64_t *f) {
  int nf = 0;
  while (n % 4 == 0) f[nf++] = 4, n /= 4;
  for (int64_t r = 2; r <= FFT_MAX_RADIX && n > 1; r++)
    while (n % r == 0) f[nf++] = r, n /= r;
  return n == 1 ? nf : -1; /* -1: a prime factor above FFT_MAX_RADIX */
}

static int plan_init(fft_plan *p, int64_t n, int sign) {
  memset(p, 0, sizeof *p);
  p->n = n;
  int nf = factorize(n, p->f);
  if (nf >= 0) {
    p->nf = nf;
    p->w = malloc(sizeof(cd) * (size_t)n);
    if (!p->w) return 0;
    for (int64_t t = 0; t < n; t++) p->w[t] = root(t, n, sign);
    return 1;
  }
  int64_t m = 1;
  while (m < 2 * n - 1) m *= 2;
  p->chirp = malloc(sizeof(cd) * (size_t)n);
  p->kernel = calloc((size_t)m, sizeof(cd));
  p->sub = malloc(sizeof(fft_plan));
  if (!p->chirp || !p->kernel || !p->sub) return 0;
  if (!plan_init(p->sub, m, -1)) return 0;
  for (int64_t t = 0; t < n; t++) { /* t^2 mod 2n keeps the angle exact */
    const int64_t t2 = (int64_t)(((unsigned __int128)t * (unsigned __int128)t) % (unsigned __int128)(2 * n));
    p->chirp[t] = root(t2, 2 * n, sign);
  }
  cd *b = malloc(sizeof(cd) * (size_t)m);
  if (!b) return 0;
  for (int64_t t = 0; t < m; t++) b[t] = 0;
  b[0] = conj(p->chirp[0]);
  for (int64_t t = 1; t < n; t++) b[t] = b[m - t] = conj(p->chirp[t]);
  fft_rec(p->sub, 0, m, b, 1, p->kernel, 1);
  free(b);
  return 1;
}

/* out = DFT_n(in) (in is clobbered for Bluestein); work holds 2 m entries for Bluestein. */
static void fft_exec(const fft_plan *p, cd *in, cd *out, cd *work) {
  if (p->w) {
    fft_rec(p, 0, p->n, in, 1, out, 1);
    return;
  }
  const int64_t n = p->n, m = p->sub->n;
  cd *a = work, *A = work + m;
  for (int64_t j = 0; j < n; j++) a[j] = in[j] * p->chirp[j];
  for (int64_t j = n; j < m; j++) a[j] = 0;
  fft_rec(p->sub, 0, m, a, 1, A, 1);
  for (int64_t j = 0; j < m; j++) A[j] = conj(A[j] * p->kernel[j]); /* inverse by conjugation */
  fft_rec(p->sub, 0, m, A, 1, a, 1);
  for (int64_t k = 0; k < n; k++) out[k] = conj(a[k]) / (double)m * p->chirp[k];
}

typedef enum { KIND_C2C, KIND_R2C, KIND_C2R } fft_kind;

typedef struct fft_task {
  vnc_lines l; /* 0: x, 1: out */
  fft_kind kind;
  int sign;
  int64_t n;   /* transform length */
  double scale;
  fft_plan plan;
  atomic_int failed;
} fft_task;

static double rnd(int32_t dt, double v) { return dt == VNC_FLOAT64 || dt == VNC_COMPLEX128 ? (double)(float)v : v; }

static cd load_c(const char *p, int32_t dt) {
  if (dt == VNC_COMPLEX64) return CMPLX(((const float *)p)[0], ((const float *)p)[1]);
  if (dt == VNC_COMPLEX128) return CMPLX(rnd(dt, ((const double *)p)[0]), rnd(dt, ((const double *)p)[1]));
  return CMPLX(rnd(dt, vnc_load_f64[dt](p)), 0.0);
}

static void store_c(char *p, int32_t dt, cd v) {
  if (dt == VNC_COMPLEX64) {
    ((float *)p)[0] = (float)creal(v);
    ((float *)p)[1] = (float)cimag(v);
  } else if (dt == VNC_COMPLEX128) {
    ((double *)p)[0] = (double)(float)creal(v);
    ((double *)p)[1] = (double)(float)cimag(v);
  } else {
    vnc_store_f64[dt](p, (double)(float)creal(v));
  }
}

static void fft_lines(void *ctx, int64_t a, int64_t b) {
  fft_task *t = ctx;
  const vnc_lines *l = &t->l;
  const int64_t n = t->n, m = t->plan.sub ? t->plan.sub->n : 0;
  cd *in = malloc(sizeof(cd) * (size_t)(2 * n + 2 * m + 1)), *out = in + n, *work = out + n;
  if (!in) {
    atomic_store(&t->failed, 1);
    return;
  }
  for (int64_t line = a; line < b; line++) {
    char *p[2];
    vnc_lines_base(l, line, p);
    if (t->kind == KIND_C2R) { /* the Hermitian spectrum from its first half */
      const int64_t h = n / 2 + 1;
      for (int64_t k = 0; k < h; k++) in[k] = load_c(p[0] + k * l->step[0], l->dtypes[0]);
      in[0] = creal(in[0]);
      if (n % 2 == 0) in[n / 2] = creal(in[n / 2]);
      for (int64_t k = h; k < n; k++) in[k] = conj(in[n - k]);
    } else {
      for (int64_t j = 0; j < n; j++) in[j] = load_c(p[0] + j * l->step[0], l->dtypes[0]);
    }
    fft_exec(&t->plan, in, out, work);
    const int64_t len = l->len[1];
    for (int64_t k = 0; k < len; k++) store_c(p[1] + k * l->step[1], l->dtypes[1], out[k] * t->scale);
  }
  free(in);
}

static vnc_status fft_run(void *arg) {
  fft_task *t = arg;
  if (!plan_init(&t->plan, t->n, t->sign)) {
    plan_free(&t->plan);
    return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "out of host memory for an FFT plan of length %lld", (long long)t->n);
  }
  vnc_parallel_for(t->l.count, t->n >= 4096 ? 1 : 4096 / t->n + 1, fft_lines, t);
  plan_free(&t->plan);
  if (atomic_load(&t->failed)) return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "out of host memory for FFT buffers");
  return VNC_OK;
}

static vnc_status fft_launch(vnc_stream *s, const char *op, fft_kind kind, const vnc_tensor *x, const vnc_tensor *out,
                             int dim, int sign, double scale) {
  const int xc = vnc_dtype_is_complex(x->dtype), oc = vnc_dtype_is_complex(out->dtype);
  const int x_ok = kind == KIND_R2C ? (x->dtype == VNC_FLOAT32 || x->dtype == VNC_FLOAT64)
                                    : (x->dtype == VNC_COMPLEX64 || x->dtype == VNC_COMPLEX128);
  const int o_ok = kind == KIND_C2R ? (out->dtype == VNC_FLOAT32 || out->dtype == VNC_FLOAT64)
                                    : (out->dtype == VNC_COMPLEX64 || out->dtype == VNC_COMPLEX128);
  (void)xc, (void)oc;
  if (!x_ok || !o_ok)
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s: unsupported dtypes %s -> %s", op, vnc_dtype_name(x->dtype),
                         vnc_dtype_name(out->dtype));
  if (sign != 1 && sign != -1) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: sign must be -1 or +1", op);
  fft_task t;
  memset(&t, 0, sizeof t);
  const vnc_tensor *ops[2] = {x, out};
  vnc_status st = vnc_lines_init(&t.l, 2, ops, dim, op);
  if (st != VNC_OK) return st;
  const int64_t lx = t.l.len[0], lo = t.l.len[1];
  t.n = kind == KIND_C2R ? lo : lx;
  const int ok = kind == KIND_C2C ? lx == lo : kind == KIND_R2C ? (lo == lx / 2 + 1 || lo == lx) : lx >= lo / 2 + 1;
  if (!ok) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: lengths %lld -> %lld do not match the transform", op,
                                (long long)lx, (long long)lo);
  if (t.l.count == 0 || lo == 0) return VNC_OK;
  if (t.n == 0) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: transform of length 0", op);
  t.kind = kind;
  t.sign = sign;
  t.scale = scale;
  atomic_init(&t.failed, 0);
  return vnc_launch(s, op, fft_run, &t, sizeof t, NULL);
}

vnc_status vnc_fft_c2c(vnc_stream *s, const char *op, const vnc_tensor *x, const vnc_tensor *out, int dim, int sign,
                       double scale) {
  return fft_launch(s, op, KIND_C2C, x, out, dim, sign, scale);
}

vnc_status vnc_fft_r2c(vnc_stream *s, const char *op, const vnc_tensor *x, const vnc_tensor *out, int dim, double scale) {
  return fft_launch(s, op, KIND_R2C, x, out, dim, -1, scale);
}

vnc_status vnc_fft_c2r(vnc_stream *s, const char *op, const vnc_tensor *x, const vnc_tensor *out, int dim, double scale) {
  return fft_launch(s, op, KIND_C2R, x, out, dim, 1, scale);
}
