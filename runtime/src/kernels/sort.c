/* Sorting, selection, binary search and sampling (see vnc/sort.h).
 *
 * Every element maps to a 64-bit key whose unsigned order is the value order; a line is
 * sorted as (key, position) pairs by a least-significant-digit radix sort (8-bit digits,
 * digits equal across the line skipped; insertion sort for short lines). Radix sort is
 * stable, so the result is the unique stable order whatever the thread count; outputs are
 * then gathered from a copy of the line, so values keep their exact bits. topk of a k at most
 * 1/16 of the line selects with a heap in one pass instead, giving the same first k pairs. */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "lines.h"
#include "philox.h"
#include "tier.h"
#include "vnc/sort.h"
#include "vnc/threadpool.h"

typedef struct pair {
  uint64_t key;
  int64_t idx;
} pair;

/* ---------------------------------------------------------------- keys */

/* Floats by their bits: sign-magnitude to unsigned order; -0.0 folds into +0.0 and every NaN
 * into one key above +inf (0xFF800000), as CPU PyTorch orders NaN last. */
static inline uint64_t float_key(float f) {
  if (isnan(f)) return UINT32_MAX;
  if (f == 0.0f) f = 0.0f;
  uint32_t b = vnc_f32_bits(f);
  return (b & 0x80000000u) ? (uint64_t)(uint32_t)~b : (uint64_t)(b | 0x80000000u);
}

typedef uint64_t (*key_fn)(const char *p);

/* Signed integers: two's complement with the sign bit of their own width flipped, so the
 * unused high bytes stay zero and the radix sort skips them. */
#define KEY_UNSIGNED(D) \
  static uint64_t key_##D(const char *p) { return (uint64_t)VNC_LOAD_##D(p); }
#define KEY_SIGNED(D, U, BITS) \
  static uint64_t key_##D(const char *p) { return (uint64_t)(U)((U)VNC_LOAD_##D(p) ^ ((U)1 << (BITS - 1))); }
#define KEY_FLOAT(D) \
  static uint64_t key_##D(const char *p) { return float_key((float)VNC_LOAD_##D(p)); }
KEY_UNSIGNED(UINT8)
KEY_UNSIGNED(BOOL)
KEY_SIGNED(INT8, uint8_t, 8)
KEY_SIGNED(INT16, uint16_t, 16)
KEY_SIGNED(INT32, uint32_t, 32)
KEY_SIGNED(INT64, uint64_t, 64)
KEY_FLOAT(FLOAT16)
KEY_FLOAT(BFLOAT16)
KEY_FLOAT(FLOAT32)
KEY_FLOAT(FLOAT64) /* through float32: the device rule */

/* X(dtype, key bytes) for every dtype these kernels order. */
#define SORT_DTYPES(X) X(UINT8, 1) X(BOOL, 1) X(INT8, 1) X(INT16, 2) X(INT32, 4) X(INT64, 8) \
  X(FLOAT16, 4) X(BFLOAT16, 4) X(FLOAT32, 4) X(FLOAT64, 4)
#define KEY_ENTRY(D, W) [VNC_##D] = key_##D,
#define WIDTH_ENTRY(D, W) [VNC_##D] = W,
static const key_fn key_table[VNC_DTYPE_END] = {SORT_DTYPES(KEY_ENTRY)};
static const int key_width[VNC_DTYPE_END] = {SORT_DTYPES(WIDTH_ENTRY)};

static vnc_status check_dtype(const char *op, int32_t dt) {
  if (dt < 0 || dt >= VNC_DTYPE_END || !key_table[dt])
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s is not implemented for %s on neuron", op, vnc_dtype_name(dt));
  return VNC_OK;
}

/* ---------------------------------------------------------------- stable pair sort */

#define INSERTION_MAX 32 /* lines up to this length: insertion sort */

static void insertion_sort(pair *a, int64_t n) {
  for (int64_t i = 1; i < n; i++) {
    pair v = a[i];
    int64_t j = i;
    for (; j > 0 && a[j - 1].key > v.key; j--) a[j] = a[j - 1];
    a[j] = v;
  }
}

/* Stable sort of a[0..n) by key, using tmp (n pairs); keys have at most `width` nonzero
 * low bytes. Returns the buffer that holds the result (a or tmp). */
static pair *sort_pairs(pair *a, pair *tmp, int64_t n, int width) {
  if (n <= INSERTION_MAX) {
    insertion_sort(a, n);
    return a;
  }
  int64_t hist[8][256];
  memset(hist, 0, sizeof(int64_t) * 256 * (size_t)width);
  for (int64_t i = 0; i < n; i++)
    for (int b = 0; b < width; b++) hist[b][(a[i].key >> (8 * b)) & 255u]++;
  pair *src = a, *dst = tmp;
  for (int b = 0; b < width; b++) {
    int64_t *h = hist[b];
    if (h[(src[0].key >> (8 * b)) & 255u] == n) continue; /* one digit value: order unchanged */
    int64_t pos = 0;
    for (int d = 0; d < 256; d++) {
      int64_t c = h[d];
      h[d] = pos;
      pos += c;
    }
    for (int64_t i = 0; i < n; i++) dst[h[(src[i].key >> (8 * b)) & 255u]++] = src[i];
    pair *swap = src;
    src = dst;
    dst = swap;
  }
  return src;
}

/* ---------------------------------------------------------------- sort / topk */

typedef struct sort_task {
  vnc_lines l;          /* 0: x, 1: values, 2: indices */
  int has_values, has_indices, descending;
  int select;           /* topk of a small k: one pass with a heap instead of sorting the line */
  atomic_int failed;    /* a line's buffers could not be allocated */
} sort_task;

/* Pairs in sort order: by key, then position (the stable order the radix sort gives). */
static inline int pair_before(pair a, pair b) { return a.key < b.key || (a.key == b.key && a.idx < b.idx); }

/* Restores the max-heap h[0..n) (the last pair in sort order at the top) below position i. */
static void sift_down(pair *h, int64_t n, int64_t i) {
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) return;
    if (c + 1 < n && pair_before(h[c], h[c + 1])) c++;
    if (!pair_before(h[i], h[c])) return;
    const pair t = h[i];
    h[i] = h[c];
    h[c] = t;
    i = c;
  }
}

static int compare_pairs(const void *a, const void *b) {
  const pair *x = a, *y = b;
  return pair_before(*x, *y) ? -1 : pair_before(*y, *x) ? 1 : 0;
}

/* The first k pairs in sort order of each line, in one pass: a max-heap holds the k first seen
 * so far, and a pair enters only when it comes before the heap's last (so ties keep the lowest
 * positions, as the stable sort); then the k are sorted. O(n + k log k) for the usual input. */
static void select_lines(void *ctx, int64_t l0, int64_t l1) {
  sort_task *t = ctx;
  const vnc_lines *l = &t->l;
  const int64_t n = l->len[0], es = l->es[0], k = l->len[1];
  const key_fn key = key_table[l->dtypes[0]];
  const uint64_t flip = t->descending ? UINT64_MAX : 0;
  pair *heap = malloc(sizeof(pair) * (size_t)k);
  if (!heap) {
    atomic_store(&t->failed, 1);
    return;
  }
  for (int64_t line = l0; line < l1; line++) {
    char *p[3];
    vnc_lines_base(l, line, p);
    const char *x = p[0];
    const int64_t step = l->step[0];
    for (int64_t j = 0; j < k; j++) heap[j] = (pair){key(x + j * step) ^ flip, j};
    for (int64_t i = k / 2 - 1; i >= 0; i--) sift_down(heap, k, i);
    for (int64_t j = k; j < n; j++) {
      const uint64_t kj = key(x + j * step) ^ flip;
      if (kj < heap[0].key) { /* (an equal key comes after: its position is larger) */
        heap[0] = (pair){kj, j};
        sift_down(heap, k, 0);
      }
    }
    qsort(heap, (size_t)k, sizeof(pair), compare_pairs);
    for (int64_t j = 0; j < k; j++) {
      if (t->has_values) memcpy(p[1] + j * l->step[1], x + heap[j].idx * step, (size_t)es);
      if (t->has_indices) *(int64_t *)(p[2] + j * l->step[2]) = heap[j].idx;
    }
  }
  free(heap);
}

static void sort_lines(void *ctx, int64_t l0, int64_t l1) {
  sort_task *t = ctx;
  const vnc_lines *l = &t->l;
  const int64_t n = l->len[0], es = l->es[0], kout = l->len[1];
  const int32_t dt = l->dtypes[0];
  const key_fn key = key_table[dt];
  const int width = t->descending ? 8 : key_width[dt];
  const uint64_t flip = t->descending ? UINT64_MAX : 0;
  pair *buf = malloc(sizeof(pair) * 2 * (size_t)n);
  char *raw = malloc((size_t)(n * es));
  if (!buf || !raw) {
    atomic_store(&t->failed, 1);
    free(buf);
    free(raw);
    return;
  }
  const vnc_loop_fn gather = vnc_copy_loop(dt, dt);
  for (int64_t line = l0; line < l1; line++) {
    char *p[3];
    vnc_lines_base(l, line, p);
    gather(NULL, (char *[]){raw, p[0]}, (const int64_t[]){es, l->step[0]}, n, 0);
    for (int64_t j = 0; j < n; j++) buf[j] = (pair){key(raw + j * es) ^ flip, j};
    const pair *s = sort_pairs(buf, buf + n, n, width);
    for (int64_t j = 0; j < kout; j++) {
      if (t->has_values) memcpy(p[1] + j * l->step[1], raw + s[j].idx * es, (size_t)es);
      if (t->has_indices) *(int64_t *)(p[2] + j * l->step[2]) = s[j].idx;
    }
  }
  free(buf);
  free(raw);
}

static vnc_status sort_run(void *p) {
  sort_task *t = p;
  const int64_t n = t->l.len[0];
  vnc_parallel_for(t->l.count, n >= 16384 ? 1 : 16384 / (n + 1) + 1, t->select ? select_lines : sort_lines, t);
  if (atomic_load(&t->failed))
    return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "could not allocate sort buffers for lines of %lld elements", (long long)n);
  return VNC_OK;
}

static vnc_status launch_sort(vnc_stream *s, const char *op, const vnc_tensor *x, int dim, int64_t k, int descending,
                              const vnc_tensor *values, const vnc_tensor *indices) {
  vnc_status st = check_dtype(op, x->dtype);
  if (st != VNC_OK) return st;
  if (values && values->dtype != x->dtype)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: values must have the input's dtype", op);
  if (indices && indices->dtype != VNC_INT64)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: indices must be int64", op);
  /* A missing output is stood in for by one of the other tensor views (never written). */
  const vnc_tensor *vt = values ? values : indices, *it = indices ? indices : values;
  if (!vt) return VNC_OK;
  sort_task t;
  memset(&t, 0, sizeof t);
  const vnc_tensor *ops[3] = {x, vt, it};
  st = vnc_lines_init(&t.l, 3, ops, dim, op);
  if (st != VNC_OK) return st;
  if (t.l.len[1] != k || t.l.len[2] != k || k > t.l.len[0])
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: outputs must have %lld entries along dim", op, (long long)k);
  if (t.l.count == 0 || t.l.len[0] == 0 || k == 0) return VNC_OK;
  t.has_values = values != NULL;
  t.has_indices = indices != NULL;
  t.descending = descending;
  t.select = k <= t.l.len[0] / 16; /* (a sort passes k = n) */
  atomic_init(&t.failed, 0);
  return vnc_launch(s, op, sort_run, &t, sizeof t, NULL);
}

vnc_status vnc_sort(vnc_stream *s, const char *op, const vnc_tensor *x, int dim, int descending,
                    const vnc_tensor *values, const vnc_tensor *indices) {
  if (x->ndim && (dim < -x->ndim || dim >= x->ndim))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: dim %d out of range", op, dim);
  const int64_t n = x->ndim == 0 ? 1 : x->sizes[dim < 0 ? dim + x->ndim : dim];
  return launch_sort(s, op, x, dim, n, descending, values, indices);
}

vnc_status vnc_topk(vnc_stream *s, const char *op, const vnc_tensor *x, int dim, int64_t k, int largest,
                    const vnc_tensor *values, const vnc_tensor *indices) {
  if (k < 0) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: k must be non-negative", op);
  return launch_sort(s, op, x, dim, k, largest, values, indices);
}

/* ---------------------------------------------------------------- searchsorted */

#define SEARCH_CHUNK 4096 /* values per parallel unit */

typedef struct search_task {
  vnc_lines l; /* 0: values, 1: out, 2: sorted, 3: sorter */
  int right, has_sorter, floating;
  int64_t chunks; /* units per line */
  atomic_int bad_sorter;
} search_task;

static void search_units(void *ctx, int64_t u0, int64_t u1) {
  search_task *t = ctx;
  const vnc_lines *l = &t->l;
  const key_fn key = key_table[l->dtypes[0]];
  const int64_t nv = l->len[0], nb = l->len[2];
  const vnc_store_i64_fn store = vnc_store_i64[l->dtypes[1]];
  for (int64_t u = u0; u < u1; u++) {
    char *p[4];
    vnc_lines_base(l, u / t->chunks, p);
    const int64_t j0 = (u % t->chunks) * SEARCH_CHUNK, j1 = j0 + SEARCH_CHUNK < nv ? j0 + SEARCH_CHUNK : nv;
    for (int64_t j = j0; j < j1; j++) {
      const uint64_t v = key(p[0] + j * l->step[0]);
      int64_t lo = 0, hi = nb;
      if (t->floating && v == UINT32_MAX) lo = nb; /* NaN: after everything */
      while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2, at = mid;
        if (t->has_sorter) {
          at = *(const int64_t *)(p[3] + mid * l->step[3]);
          if (at < 0 || at >= nb) {
            atomic_store(&t->bad_sorter, 1);
            at = mid;
          }
        }
        const uint64_t b = key(p[2] + at * l->step[2]);
        /* CPU PyTorch's test, !(b >= v) or !(b > v): a NaN boundary sends the search right */
        if ((t->right ? b <= v : b < v) || (t->floating && b == UINT32_MAX)) lo = mid + 1;
        else hi = mid;
      }
      store(p[1] + j * l->step[1], lo);
    }
  }
}

static vnc_status search_run(void *p) {
  search_task *t = p;
  vnc_parallel_for(t->l.count * t->chunks, 1, search_units, t);
  if (atomic_load(&t->bad_sorter)) return vnc_set_error(VNC_ERR_INDEX, "torch.searchsorted(): sorter index out of range");
  return VNC_OK;
}

/* `b` (1-D) seen with `like`'s sizes: zero strides on every dim but the last. */
static vnc_tensor broadcast_line(const vnc_tensor *b, const vnc_tensor *like) {
  vnc_tensor v = *like;
  v.data = b->data;
  v.dtype = b->dtype;
  for (int i = 0; i < v.ndim; i++) v.strides[i] = 0;
  v.sizes[v.ndim - 1] = b->sizes[0];
  v.strides[v.ndim - 1] = b->strides[0];
  return v;
}

vnc_status vnc_searchsorted(vnc_stream *s, const char *op, const vnc_tensor *sorted, const vnc_tensor *values,
                            const vnc_tensor *sorter, int right, const vnc_tensor *out) {
  vnc_status st = check_dtype(op, values->dtype);
  if (st != VNC_OK) return st;
  if (sorted->dtype != values->dtype)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: boundaries and values must have one dtype", op);
  if (out->dtype != VNC_INT64 && out->dtype != VNC_INT32)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: out must be int64 or int32", op);
  if (sorter && (sorter->dtype != VNC_INT64 || sorter->ndim != sorted->ndim))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: sorter must be int64 with the boundaries' shape", op);
  if (sorted->ndim == 0) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: boundaries must have a dim", op);
  vnc_tensor v = *values, o = *out; /* a 0-dim value searches like a 1-element line */
  if (v.ndim == 0) {
    v.ndim = o.ndim = 1;
    v.sizes[0] = o.sizes[0] = 1;
    v.strides[0] = o.strides[0] = 0;
  }
  vnc_tensor b = *sorted, so = sorter ? *sorter : *sorted;
  if (sorted->ndim == 1 && v.ndim != 1) {
    b = broadcast_line(sorted, &v);
    so = broadcast_line(sorter ? sorter : sorted, &v);
  }
  search_task t;
  memset(&t, 0, sizeof t);
  const vnc_tensor *ops[4] = {&v, &o, &b, &so};
  st = vnc_lines_init(&t.l, 4, ops, -1, op);
  if (st != VNC_OK) return st;
  if (t.l.len[1] != t.l.len[0] || t.l.len[3] != t.l.len[2])
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: out must have the values' shape", op);
  if (t.l.count == 0 || t.l.len[0] == 0) return VNC_OK;
  t.right = right;
  t.has_sorter = sorter != NULL;
  t.floating = vnc_dtype_is_floating(values->dtype);
  t.chunks = (t.l.len[0] + SEARCH_CHUNK - 1) / SEARCH_CHUNK;
  atomic_init(&t.bad_sorter, 0);
  return vnc_launch(s, op, search_run, &t, sizeof t, NULL);
}

/* ---------------------------------------------------------------- randperm */

/* Durstenfeld's form of the Fisher-Yates shuffle (Knuth, TAOCP vol. 2, 3.4.2, algorithm P):
 * for i = n-1 .. 1 swap a[i] with a[j], j uniform in [0, i]. Each j comes from the 64-bit Philox
 * word of counter offset + i scaled to [0, i] by its high product (Lemire, "Fast random integer
 * generation in an interval", 2019, without the rejection step: a bias below n / 2^64). The
 * j's are computed in parallel, the swaps run serially: the same permutation whatever the
 * thread count. */
typedef struct perm_task {
  vnc_tensor out;
  uint64_t seed, offset;
  int64_t *j; /* j[i]: the position swapped with i */
} perm_task;

static void perm_draws(void *ctx, int64_t i0, int64_t i1) {
  const perm_task *t = ctx;
  uint32_t w0[VNC_RNG_BLOCK], w1[VNC_RNG_BLOCK];
  for (int64_t b = i0; b < i1; b += VNC_RNG_BLOCK) {
    const int64_t m = i1 - b < VNC_RNG_BLOCK ? i1 - b : VNC_RNG_BLOCK;
    vnc_tier()->philox_words(t->seed, t->offset + (uint64_t)b, m, w0, w1); /* vnc_philox_element's words */
    for (int64_t k = 0; k < m; k++) {
      const uint64_t w = ((uint64_t)w1[k] << 32) | w0[k];
      t->j[b + k] = (int64_t)(((unsigned __int128)w * (uint64_t)(b + k + 1)) >> 64);
    }
  }
}

static vnc_status perm_run(void *p) {
  perm_task *t = p;
  const int64_t n = t->out.sizes[0];
  const int in_place = t->out.dtype == VNC_INT64 && t->out.strides[0] == 1;
  t->j = malloc(sizeof(int64_t) * (size_t)(in_place ? n : 2 * n));
  if (!t->j) return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "could not allocate randperm buffers for %lld elements", (long long)n);
  int64_t *a = in_place ? (int64_t *)t->out.data : t->j + n;
  vnc_parallel_for(n, 32768, perm_draws, t);
  for (int64_t i = 0; i < n; i++) a[i] = i;
  enum { AHEAD = 16 }; /* the swaps' loads are random: fetch a later one's target meanwhile */
  for (int64_t i = n - 1; i > 0; i--) {
    if (i > AHEAD) __builtin_prefetch(a + t->j[i - AHEAD], 1);
    const int64_t j = t->j[i], v = a[i];
    a[i] = a[j];
    a[j] = v;
  }
  if (!in_place) {
    const vnc_store_i64_fn store = vnc_store_i64[t->out.dtype];
    const int64_t step = t->out.strides[0] * (int64_t)vnc_dtype_size(t->out.dtype);
    for (int64_t i = 0; i < n; i++) store((char *)t->out.data + i * step, a[i]);
  }
  free(t->j);
  return VNC_OK;
}

vnc_status vnc_randperm(vnc_stream *s, const char *op, const vnc_tensor *out, uint64_t seed, uint64_t offset) {
  vnc_status st = check_dtype(op, out->dtype);
  if (st != VNC_OK) return st;
  if (out->ndim != 1) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: out must be 1-D", op);
  if (out->sizes[0] == 0) return VNC_OK;
  perm_task t = {.out = *out, .seed = seed, .offset = offset};
  return vnc_launch(s, op, perm_run, &t, sizeof t, NULL);
}

/* ---------------------------------------------------------------- multinomial */

typedef struct multinomial_task {
  vnc_lines l; /* 0: probs, 1: out */
  int64_t k;
  int replacement, checked;
  uint64_t seed, offset;
  atomic_int failed;
} multinomial_task;

static void load_probs(const vnc_lines *l, int64_t line, float *p) {
  char *ptr[2];
  vnc_lines_base(l, line, ptr);
  vnc_to_f32(p, ptr[0], l->dtypes[0], l->step[0] / l->es[0], l->len[0]);
}

/* Every row valid, checked in row order so the message does not depend on threads. */
static vnc_status multinomial_check(const multinomial_task *t, float *p) {
  const int64_t n = t->l.len[0];
  for (int64_t r = 0; r < t->l.count; r++) {
    load_probs(&t->l, r, p);
    float sum = 0.0f;
    for (int64_t c = 0; c < n; c++) {
      const float v = p[c];
      if (t->checked && !(v >= 0.0f && !isinf(v)))
        return vnc_set_error(VNC_ERR_KERNEL, "probability tensor contains either `inf`, `nan` or element < 0");
      if (!(v >= 0.0f)) return vnc_set_error(VNC_ERR_KERNEL, "invalid multinomial distribution (encountering probability entry < 0)");
      if (!isfinite(v))
        return vnc_set_error(VNC_ERR_KERNEL, "invalid multinomial distribution (encountering probability entry = infinity or NaN)");
      sum += v;
    }
    if (!(sum > 0.0f)) return vnc_set_error(VNC_ERR_KERNEL, "invalid multinomial distribution (sum of probabilities <= 0)");
  }
  return VNC_OK;
}

static void multinomial_rows(void *ctx, int64_t r0, int64_t r1) {
  multinomial_task *t = ctx;
  const int64_t n = t->l.len[0], k = t->k;
  float *p = malloc(sizeof(float) * (size_t)n);
  /* cdf in double so that categories far below 2^-24 of the total are still drawn */
  double *cdf = t->replacement ? malloc(sizeof(double) * (size_t)n) : NULL;
  pair *a = t->replacement ? NULL : malloc(sizeof(pair) * 2 * (size_t)n);
  if (!p || (t->replacement ? !cdf : !a)) {
    atomic_store(&t->failed, 1);
    free(p);
    free(cdf);
    free(a);
    return;
  }
  for (int64_t r = r0; r < r1; r++) {
    char *ptr[2];
    vnc_lines_base(&t->l, r, ptr);
    load_probs(&t->l, r, p);
    if (t->replacement) {
      double acc = 0.0;
      int64_t last = 0; /* last category with p > 0: where a draw rounding up to the total lands */
      for (int64_t c = 0; c < n; c++) {
        acc += p[c];
        cdf[c] = acc;
        if (p[c] > 0.0f) last = c;
      }
      for (int64_t j = 0; j < k; j++) {
        uint32_t w[4];
        vnc_philox_element(t->seed, t->offset, (uint64_t)(r * k + j), w);
        const double u = (double)((((uint64_t)w[1] << 32) | w[0]) >> 11) * 0x1.0p-53 * acc;
        int64_t lo = 0, hi = n; /* first c with cdf[c] > u: never a zero-probability category */
        while (lo < hi) {
          int64_t mid = lo + (hi - lo) / 2;
          if (cdf[mid] > u) hi = mid;
          else lo = mid + 1;
        }
        *(int64_t *)(ptr[1] + j * t->l.step[1]) = lo < n ? lo : last;
      }
    } else {
      for (int64_t c = 0; c < n; c++) {
        uint32_t w[4];
        vnc_philox_element(t->seed, t->offset, (uint64_t)(r * n + c), w);
        const double u = (double)(((((uint64_t)w[1] << 32) | w[0]) >> 11) + 1) * 0x1.0p-53; /* (0, 1] */
        const double e = -log(u), key = p[c] > 0.0f ? e / (double)p[c] : INFINITY;
        uint64_t bits;
        memcpy(&bits, &key, sizeof bits); /* non-negative doubles order as their bits */
        a[c] = (pair){bits, c};
      }
      const pair *s = sort_pairs(a, a + n, n, 8);
      for (int64_t j = 0; j < k; j++) *(int64_t *)(ptr[1] + j * t->l.step[1]) = s[j].idx;
    }
  }
  free(p);
  free(cdf);
  free(a);
}

static vnc_status multinomial_run(void *ptr) {
  multinomial_task *t = ptr;
  const int64_t n = t->l.len[0];
  float *p = malloc(sizeof(float) * (size_t)n);
  if (!p) return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "could not allocate multinomial buffers");
  vnc_status st = multinomial_check(t, p);
  free(p);
  if (st != VNC_OK) return st;
  vnc_parallel_for(t->l.count, n >= 4096 ? 1 : 4096 / n + 1, multinomial_rows, t);
  if (atomic_load(&t->failed)) return vnc_set_error(VNC_ERR_OUT_OF_MEMORY, "could not allocate multinomial buffers");
  return VNC_OK;
}

vnc_status vnc_multinomial(vnc_stream *s, const char *op, const vnc_tensor *probs, int64_t k, int replacement,
                           int checked, const vnc_tensor *out, uint64_t seed, uint64_t offset) {
  if (!vnc_dtype_is_floating(probs->dtype))
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s: probabilities must be floating, got %s", op, vnc_dtype_name(probs->dtype));
  if (out->dtype != VNC_INT64) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: out must be int64", op);
  if (probs->ndim < 1 || probs->ndim > 2 || out->ndim != probs->ndim)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: probabilities must be 1-D or 2-D, out alike", op);
  multinomial_task t;
  memset(&t, 0, sizeof t);
  const vnc_tensor *ops[2] = {probs, out};
  vnc_status st = vnc_lines_init(&t.l, 2, ops, -1, op);
  if (st != VNC_OK) return st;
  if (t.l.len[1] != k || k < 0 || (!replacement && k > t.l.len[0]))
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: out must hold k <= categories samples per row", op);
  if (t.l.count == 0 || k == 0) return VNC_OK;
  if (t.l.len[0] == 0) return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: no categories to draw from", op);
  t.k = k;
  t.replacement = replacement;
  t.checked = checked;
  t.seed = seed;
  t.offset = offset;
  atomic_init(&t.failed, 0);
  return vnc_launch(s, op, multinomial_run, &t, sizeof t, NULL);
}
