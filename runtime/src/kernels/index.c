/* Indexed copies and nonzero (see vnc/index.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include "dtype.h"
#include "internal.h"
#include "vnc/index.h"

/* dst (op)= src for one element of a dtype; NULL means a plain copy. */
typedef void (*combine_fn)(char *dst, const char *src);

#define IS_NAN(x) _Generic((x), float: isnan((float)(x)), double: isnan((double)(x)), default: 0)
#define MUL(a, b) _Generic((a), _Bool: (a) && (b), default: (a) * (b)) /* bool PROD is "and" */
#define DEFINE_SUM_PROD(D)                                                                          \
  static void sum_##D(char *d, const char *s) { VNC_STORE_##D(d, VNC_LOAD_##D(d) + VNC_LOAD_##D(s)); } \
  static void prod_##D(char *d, const char *s) { VNC_STORE_##D(d, MUL(VNC_LOAD_##D(d), VNC_LOAD_##D(s))); }
#define DEFINE_MAX_MIN(D)                                                                           \
  static void max_##D(char *d, const char *s) {                                                     \
    VNC_COMPUTE_##D a = VNC_LOAD_##D(d), b = VNC_LOAD_##D(s);                                       \
    if (IS_NAN(b) || b > a) VNC_STORE_##D(d, b);                                                    \
  }                                                                                                 \
  static void min_##D(char *d, const char *s) {                                                     \
    VNC_COMPUTE_##D a = VNC_LOAD_##D(d), b = VNC_LOAD_##D(s);                                       \
    if (IS_NAN(b) || b < a) VNC_STORE_##D(d, b);                                                    \
  }
#define REAL_DTYPES(X) X(UINT8) X(INT8) X(INT16) X(INT32) X(INT64) X(FLOAT16) X(FLOAT32) X(FLOAT64) X(BOOL) X(BFLOAT16)
VNC_DTYPES(DEFINE_SUM_PROD)
REAL_DTYPES(DEFINE_MAX_MIN)

#define SUM_ENTRY(D) [VNC_##D] = sum_##D,
#define PROD_ENTRY(D) [VNC_##D] = prod_##D,
#define MAX_ENTRY(D) [VNC_##D] = max_##D,
#define MIN_ENTRY(D) [VNC_##D] = min_##D,
static const combine_fn combine_table[5][VNC_DTYPE_END] = {
    [VNC_REDUCE_SUM] = {VNC_DTYPES(SUM_ENTRY)},
    [VNC_REDUCE_PROD] = {VNC_DTYPES(PROD_ENTRY)},
    [VNC_REDUCE_MAX] = {REAL_DTYPES(MAX_ENTRY)},
    [VNC_REDUCE_MIN] = {REAL_DTYPES(MIN_ENTRY)},
};

typedef struct index_task {
  vnc_iter it;
  int direction, nidx, flags;
  int64_t sizes[VNC_INDEX_MAX], strides[VNC_INDEX_MAX], dim;
  combine_fn combine;
  size_t esize;
  int split; /* a reduction's dim run in parallel slices (split_dim), else -1 */
} index_task;

/* The bounds check runs over the whole iteration before any write; the first bad index in
 * iteration order is reported whatever the thread count. */
typedef struct check_ctx {
  const index_task *t;
  atomic_int any;
  pthread_mutex_t lock;
  int64_t pos, value, j;
} check_ctx;

static void check_loop(void *ctx, char **data, const int64_t *st, int64_t n, int64_t pos) {
  check_ctx *c = ctx;
  const index_task *t = c->t;
  for (int j = 0; j < t->nidx; j++) {
    const int64_t size = t->sizes[j], lo = (t->flags & VNC_INDEX_WRAP) ? -size : 0;
    for (int64_t i = 0; i < n; i++) {
      const int64_t v = *(const int64_t *)(data[2 + j] + i * st[2 + j]);
      if (v >= lo && v < size) continue;
      pthread_mutex_lock(&c->lock);
      if (!atomic_load(&c->any) || pos + i < c->pos) {
        c->pos = pos + i, c->value = v, c->j = j;
        atomic_store(&c->any, 1);
      }
      pthread_mutex_unlock(&c->lock);
      break;
    }
  }
}

/* Byte offset of element i of a run: the sum of its (wrapped) index values times the strides. */
static int64_t index_offset(const index_task *t, char **data, const int64_t *st, int64_t i) {
  int64_t off = 0;
  for (int j = 0; j < t->nidx; j++) {
    const int64_t v = *(const int64_t *)(data[2 + j] + i * st[2 + j]);
    off += (v < 0 ? v + t->sizes[j] : v) * t->strides[j];
  }
  return off;
}

static void index_loop(void *ctx, char **data, const int64_t *st, int64_t n, int64_t pos) {
  const index_task *t = ctx;
  (void)pos;
  int fixed = t->combine != NULL; /* a reduction's run with one index value: the offset once */
  for (int j = 0; j < t->nidx; j++) fixed &= st[2 + j] == 0;
  if (fixed && n > 1) {
    const int64_t off = index_offset(t, data, st, 0);
    char *d = data[0] + (t->direction == VNC_INDEX_GATHER ? 0 : off);
    const char *s = data[1] + (t->direction == VNC_INDEX_GATHER ? off : 0);
    if (t->combine == sum_FLOAT32 && st[0] == 4 && st[1] == 4) { /* sum_FLOAT32's additions, vectorised */
      for (int64_t i = 0; i < n; i++) {
        float a, b;
        memcpy(&a, d + 4 * i, 4);
        memcpy(&b, s + 4 * i, 4);
        a = a + b;
        memcpy(d + 4 * i, &a, 4);
      }
    } else {
      for (int64_t i = 0; i < n; i++) t->combine(d + i * st[0], s + i * st[1]);
    }
    return;
  }
  if (t->nidx == 1) {
    /* One index tensor: the commonest element operations inlined, operands in registers (a
     * loop of few instructions keeps more of its random accesses in flight). */
    const int64_t size = t->sizes[0], stride = t->strides[0], sd = st[0], ss = st[1], si = st[2];
    const int64_t dmul = t->direction == VNC_INDEX_GATHER ? 0 : stride, smul = stride - dmul;
#define ONE_INDEX_LOOP(BODY)                                                       \
  do {                                                                             \
    char *d = data[0];                                                             \
    const char *s = data[1], *ip = data[2];                                        \
    for (int64_t i = 0; i < n; i++, d += sd, s += ss, ip += si) {                  \
      int64_t v;                                                                   \
      memcpy(&v, ip, 8);                                                           \
      v += v < 0 ? size : 0;                                                       \
      char *dp = d + v * dmul;                                                     \
      const char *sp = s + v * smul;                                               \
      BODY;                                                                        \
    }                                                                              \
    return;                                                                        \
  } while (0)
    if (t->combine == sum_FLOAT32) ONE_INDEX_LOOP(float a; float b; memcpy(&a, dp, 4); memcpy(&b, sp, 4);
                                                  a = a + b; memcpy(dp, &a, 4));
    if (!t->combine && t->esize == 4) ONE_INDEX_LOOP(memcpy(dp, sp, 4));
    if (!t->combine && t->esize == 8) ONE_INDEX_LOOP(memcpy(dp, sp, 8));
#undef ONE_INDEX_LOOP
  }
  for (int64_t i = 0; i < n; i++) {
    const int64_t off = index_offset(t, data, st, i);
    char *d = data[0] + i * st[0];
    const char *s = data[1] + i * st[1];
    if (t->direction == VNC_INDEX_GATHER) s += off;
    else d += off;
    if (t->combine) t->combine(d, s);
    else switch (t->esize) {
        case 1: *d = *s; break;
        case 2: memcpy(d, s, 2); break;
        case 4: memcpy(d, s, 4); break;
        case 8: memcpy(d, s, 8); break;
        default: memcpy(d, s, t->esize);
      }
  }
}

/* The largest dim (at least 2) along which the destination moves and no index does, or -1: its
 * positions write disjoint output elements. */
static int split_dim(const index_task *t) {
  int best = -1;
  for (int d = 0; d < t->it.ndim; d++) {
    int still = t->it.strides[0][d] != 0 && t->it.shape[d] >= 2;
    for (int j = 0; j < t->nidx; j++) still &= t->it.strides[2 + j][d] == 0;
    if (still && (best < 0 || t->it.shape[d] > t->it.shape[best])) best = d;
  }
  return best;
}

/* Positions [c0, c1) of the split dim, made the innermost dim: a run along it has one index
 * value (index_loop's fast case), and every output element still sees its contributions in the
 * order of the other dims, as in the serial range. */
static void combine_slices(void *ctx, int64_t c0, int64_t c1) {
  const index_task *t = ctx;
  const int d = t->split;
  vnc_iter sub = t->it;
  for (int k = 0; k < sub.nops; k++) sub.data[k] += c0 * sub.strides[k][d];
  sub.numel = t->it.numel / t->it.shape[d] * (c1 - c0);
  for (int e = d; e > 0; e--) { /* rotate d to position 0 */
    sub.shape[e] = sub.shape[e - 1];
    for (int k = 0; k < sub.nops; k++) sub.strides[k][e] = sub.strides[k][e - 1];
  }
  sub.shape[0] = c1 - c0;
  for (int k = 0; k < sub.nops; k++) sub.strides[k][0] = t->it.strides[k][d];
  vnc_iter_run(&sub, index_loop, (void *)t, 0, sub.numel);
}

static vnc_status index_run(void *p) {
  const index_task *t = p;
  check_ctx c = {.t = t};
  atomic_init(&c.any, 0);
  pthread_mutex_init(&c.lock, NULL);
  /* Each index value once: dims along which no index moves (a row's columns) kept at their
   * first position. The first bad value in this order is the first in the full order. */
  vnc_iter values = t->it;
  values.numel = 1;
  for (int d = 0; d < values.ndim; d++) {
    int moves = 0;
    for (int j = 0; j < t->nidx; j++) moves |= values.strides[2 + j][d] != 0;
    if (!moves) values.shape[d] = 1;
    values.numel *= values.shape[d];
  }
  vnc_iter_for_each(&values, check_loop, &c, VNC_ITER_GRAIN);
  pthread_mutex_destroy(&c.lock);
  if (atomic_load(&c.any))
    return vnc_set_error((t->flags & VNC_INDEX_RANGE_AS_INVALID) ? VNC_ERR_INVALID_ARGUMENT : VNC_ERR_INDEX,
                         "index %lld is out of bounds for dimension %lld with size %lld",
                         (long long)c.value, (long long)(t->dim + c.j), (long long)t->sizes[c.j]);
  /* Reductions apply every duplicate in iteration order: one serial range, or one per slice of a
   * dim the indices do not move along (index_add_ of rows, index_put_ with accumulate: the
   * columns), each output element in one slice, its contributions in the same order. */
  const int d = t->split;
  if (d >= 0) { /* one slice per thread at most: the runs along d stay long */
    const int64_t n = t->it.shape[d], threads = vnc_threadpool_size();
    const int64_t min_grain = 1 + VNC_ITER_GRAIN / (t->it.numel / n), per_thread = (n + threads - 1) / threads;
    vnc_parallel_for(n, min_grain > per_thread ? min_grain : per_thread, combine_slices, (void *)t);
  }
  else vnc_iter_for_each(&t->it, index_loop, (void *)t, t->combine ? t->it.numel : VNC_ITER_GRAIN);
  return VNC_OK;
}

vnc_status vnc_index(vnc_stream *s, const char *op, const vnc_iter *it, int direction, int nidx, const int64_t *sizes,
                     const int64_t *strides, int64_t dim, int flags, vnc_index_reduce reduce) {
  if (nidx < 1 || nidx > VNC_INDEX_MAX || it->nops != nidx + 2)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: %d index tensors given; 1 to %d are supported", op, nidx,
                         VNC_INDEX_MAX);
  if (it->dtypes[0] != it->dtypes[1])
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: source dtype %s differs from destination dtype %s", op,
                         vnc_dtype_name(it->dtypes[1]), vnc_dtype_name(it->dtypes[0]));
  for (int j = 0; j < nidx; j++)
    if (it->dtypes[2 + j] != VNC_INT64)
      return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: index tensors must be int64, got %s", op,
                           vnc_dtype_name(it->dtypes[2 + j]));
  if ((unsigned)reduce > VNC_REDUCE_MIN)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s: unknown reduction %d", op, (int)reduce);
  /* A plain indexed copy moves elements of any stored dtype by their size; a reduction
   * computes, in the dtypes that have a combine loop. */
  const size_t esize = vnc_dtype_storage_size(it->dtypes[0]);
  if (reduce != VNC_REDUCE_NONE) VNC_CHECK_COMPUTED(op, it->dtypes[0]);
  else if (esize == 0) return vnc_check_computed(op, 1, it->dtypes);
  combine_fn combine = reduce == VNC_REDUCE_NONE ? NULL : combine_table[reduce][it->dtypes[0]];
  if (reduce != VNC_REDUCE_NONE && !combine)
    return vnc_set_error(VNC_ERR_UNSUPPORTED, "%s: reduction not supported for dtype %s", op,
                         vnc_dtype_name(it->dtypes[0]));
  if (it->numel == 0) return VNC_OK;
  index_task t = {.it = *it, .direction = direction, .nidx = nidx, .flags = flags, .dim = dim, .combine = combine,
                  .esize = esize};
  memcpy(t.sizes, sizes, sizeof(int64_t) * (size_t)nidx);
  memcpy(t.strides, strides, sizeof(int64_t) * (size_t)nidx);
  t.split = combine ? split_dim(&t) : -1;
  return vnc_launch(s, op, index_run, &t, sizeof t, NULL);
}

/* ---------------------------------------------------------------- nonzero */

/* Per dtype: the nonzero elements among n at p, step st bytes (NaN counts, -0.0 does not),
 * counted, or marked in m (1 or 0 each); the unit step loops vectorise. */
typedef int64_t (*nz_count_fn)(const char *p, int64_t st, int64_t n);
typedef void (*nz_mark_fn)(const char *p, int64_t st, int64_t n, uint8_t *m);
#define NZ_AT(D, p, st, i) (VNC_LOAD_##D((p) + (i) * (st)) != 0)
#define NZ_UNIT(D) ((int64_t)sizeof(VNC_STORAGE_##D))
#define NZ_FNS(D)                                                                          \
  static int64_t nz_count_##D(const char *p, int64_t st, int64_t n) {                     \
    int64_t k = 0;                                                                         \
    if (st == NZ_UNIT(D))                                                                  \
      for (int64_t i = 0; i < n; i++) k += NZ_AT(D, p, NZ_UNIT(D), i);                     \
    else                                                                                   \
      for (int64_t i = 0; i < n; i++) k += NZ_AT(D, p, st, i);                             \
    return k;                                                                              \
  }                                                                                        \
  static void nz_mark_##D(const char *p, int64_t st, int64_t n, uint8_t *m) {             \
    if (st == NZ_UNIT(D))                                                                  \
      for (int64_t i = 0; i < n; i++) m[i] = NZ_AT(D, p, NZ_UNIT(D), i);                   \
    else                                                                                   \
      for (int64_t i = 0; i < n; i++) m[i] = NZ_AT(D, p, st, i);                           \
  }
VNC_DTYPES(NZ_FNS)
#define NZ_COUNT_ENTRY(D) [VNC_##D] = nz_count_##D,
#define NZ_MARK_ENTRY(D) [VNC_##D] = nz_mark_##D,
static const nz_count_fn nz_count_table[VNC_DTYPE_END] = {VNC_DTYPES(NZ_COUNT_ENTRY)};
static const nz_mark_fn nz_mark_table[VNC_DTYPE_END] = {VNC_DTYPES(NZ_MARK_ENTRY)};

/* The linear range splits into chunks counted in parallel; a prefix sum of the counts gives
 * each chunk its first output row, and the chunks then write their rows in parallel, so the
 * rows come in row-major order whatever the thread count. */
#define NZ_MAX_CHUNKS 64
typedef struct nz_task {
  vnc_iter it; /* logical row-major order: a position is the element's linear index */
  nz_count_fn count_fn;
  nz_mark_fn mark_fn;
  int64_t *count, *out, capacity, ndim, sizes[VNC_MAX_DIMS];
  int64_t row_step, col_step; /* elements */
  int64_t nchunks, chunk_count[NZ_MAX_CHUNKS], chunk_first[NZ_MAX_CHUNKS];
} nz_task;

typedef struct nz_run {
  const nz_task *t;
  int64_t found, next; /* rows counted; the next row written */
} nz_run;

static void count_loop(void *ctx, char **data, const int64_t *st, int64_t n, int64_t pos) {
  nz_run *r = ctx;
  (void)pos;
  r->found += r->t->count_fn(data[0], st[0], n);
}

static void coords_loop(void *ctx, char **data, const int64_t *st, int64_t n, int64_t pos) {
  nz_run *r = ctx;
  const nz_task *t = r->t;
  const int64_t nd = t->ndim, last = nd - 1;
  int64_t c[VNC_MAX_DIMS];
  for (int64_t d = last, e = pos; d >= 0; d--) { /* the run's first coordinates, then counted up */
    c[d] = e % t->sizes[d];
    e /= t->sizes[d];
  }
  enum { BLOCK = 1024 };
  uint8_t m[BLOCK];
  for (int64_t b = 0; b < n; b += BLOCK) {
    const int64_t len = n - b < BLOCK ? n - b : BLOCK;
    t->mark_fn(data[0] + b * st[0], st[0], len, m);
    for (int64_t i = 0; i < len; i++) {
      if (m[i]) {
        if (r->next >= t->capacity) return;
        int64_t *row = t->out + r->next++ * t->row_step;
        if (nd == 1) row[0] = pos + b + i;
        else for (int64_t d = 0; d < nd; d++) row[d * t->col_step] = c[d];
      }
      if (nd > 1)
        for (int64_t d = last; d >= 0 && ++c[d] == t->sizes[d]; d--) c[d] = 0;
    }
  }
}

static void chunk_range(const nz_task *t, int64_t k, int64_t *b, int64_t *e) {
  *b = t->it.numel * k / t->nchunks;
  *e = t->it.numel * (k + 1) / t->nchunks;
}

static void count_chunks(void *ctx, int64_t k0, int64_t k1) {
  nz_task *t = ctx;
  for (int64_t k = k0; k < k1; k++) {
    int64_t b, e;
    chunk_range(t, k, &b, &e);
    nz_run r = {.t = t};
    vnc_iter_run(&t->it, count_loop, &r, b, e);
    t->chunk_count[k] = r.found;
  }
}

static void coords_chunks(void *ctx, int64_t k0, int64_t k1) {
  nz_task *t = ctx;
  for (int64_t k = k0; k < k1; k++) {
    int64_t b, e;
    chunk_range(t, k, &b, &e);
    nz_run r = {.t = t, .next = t->chunk_first[k]};
    vnc_iter_run(&t->it, coords_loop, &r, b, e);
  }
}

static int64_t count_all(nz_task *t) {
  vnc_parallel_for(t->nchunks, 1, count_chunks, t);
  int64_t total = 0;
  for (int64_t k = 0; k < t->nchunks; k++) {
    t->chunk_first[k] = total;
    total += t->chunk_count[k];
  }
  return total;
}

static vnc_status count_run(void *p) {
  nz_task *t = p;
  *t->count = count_all(t);
  return VNC_OK;
}

static vnc_status coords_run(void *p) {
  nz_task *t = p;
  const int64_t found = count_all(t);
  if (found != t->capacity)
    return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "the input changed between counting (%lld nonzeros) and "
                         "writing (%lld)", (long long)t->capacity, (long long)found);
  vnc_parallel_for(t->nchunks, 1, coords_chunks, t);
  return VNC_OK;
}

static vnc_status nz_launch(vnc_stream *s, const char *op, const vnc_tensor *x, vnc_task_fn fn, int64_t *count,
                            int64_t *out, int64_t capacity, int64_t row_step, int64_t col_step) {
  nz_task t = {.count = count, .out = out, .capacity = capacity, .ndim = x->ndim, .row_step = row_step,
               .col_step = col_step};
  memcpy(t.sizes, x->sizes, sizeof(int64_t) * (size_t)x->ndim);
  const vnc_tensor *ops[1] = {x};
  vnc_status st = vnc_iter_init(&t.it, 1, ops, VNC_ITER_KEEP_ORDER);
  if (st != VNC_OK) return st;
  t.count_fn = nz_count_table[x->dtype];
  t.mark_fn = nz_mark_table[x->dtype];
  if (!t.count_fn) return vnc_check_computed(op, 1, &x->dtype);
  if (t.it.numel == 0) {
    if (count) *count = 0;
    return VNC_OK;
  }
  t.nchunks = 1 + (t.it.numel - 1) / VNC_ITER_GRAIN;
  if (t.nchunks > NZ_MAX_CHUNKS) t.nchunks = NZ_MAX_CHUNKS;
  return vnc_launch(s, op, fn, &t, sizeof t, NULL);
}

vnc_status vnc_count_nonzero(vnc_stream *s, const char *op, const vnc_tensor *x, int64_t *count) {
  return nz_launch(s, op, x, count_run, count, NULL, 0, 0, 0);
}

vnc_status vnc_nonzero(vnc_stream *s, const char *op, const vnc_tensor *x, int64_t *out, int64_t count,
                       int64_t row_step, int64_t col_step) {
  if (count == 0) return VNC_OK;
  return nz_launch(s, op, x, coords_run, NULL, out, count, row_step, col_step);
}
