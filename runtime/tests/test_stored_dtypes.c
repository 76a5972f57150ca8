/* Stored-only dtypes (float8, float4, uint16 to uint64, bits) and unknown dtype codes at every
 * kernel entry: the kernels that move bytes (copy between equal dtypes, fill, the indexed copy,
 * index_select) move them bit for bit; every kernel that converts or computes refuses them with
 * VNC_ERR_UNSUPPORTED before enqueueing anything (no conversion loop exists for them; reaching
 * one would call through a NULL table entry). */
#include <stdint.h>
#include <stdlib.h>
#include "check.h"

static vnc_stream *S;
static char *buf; /* zeroed scratch every refused call points at (never touched when refused) */

#define REFUSED(expr)                                                                               \
  do {                                                                                              \
    vnc_status st_ = (expr);                                                                        \
    check_count++;                                                                                  \
    if (st_ != VNC_ERR_UNSUPPORTED) {                                                               \
      check_failures++;                                                                             \
      fprintf(stderr, "%s:%d: dtype %d: %s returned %s, not VNC_ERR_UNSUPPORTED: %s\n", __FILE__, __LINE__, dt, \
              #expr, vnc_status_name(st_), st_ == VNC_OK ? "" : vnc_last_error());                 \
    }                                                                                               \
  } while (0)

static vnc_tensor t2(int32_t dtype) { return vnc_tensor_contiguous(buf, dtype, 2, (int64_t[]){2, 4}); }
static vnc_tensor t1(int32_t dtype, int64_t n) { return vnc_tensor_contiguous(buf, dtype, 1, &n); }

/* A 1-D iteration of 4 elements over nops operands of the given dtypes. */
static vnc_iter iter_of(int nops, const int32_t *dtypes) {
  vnc_iter it;
  memset(&it, 0, sizeof it);
  it.nops = nops;
  it.ndim = 1;
  it.shape[0] = 4;
  it.numel = 4;
  for (int k = 0; k < nops; k++) {
    it.data[k] = buf;
    it.dtypes[k] = dtypes[k];
    it.strides[k][0] = (int64_t)vnc_dtype_size(dtypes[k]);
  }
  return it;
}

static void computing_kernels_refuse(int32_t dt) {
  vnc_tensor x = t2(dt), f = t2(VNC_FLOAT32), l = t2(VNC_INT64);
  /* elementwise, reductions, scans, sorts, RNG */
  vnc_iter ew = iter_of(3, (int32_t[]){dt, dt, dt});
  vnc_ew_params p = {0};
  REFUSED(vnc_elementwise(S, "add", VNC_EW_add, &ew, VNC_FLOAT32, &p, 0, NULL));
  vnc_iter ew2 = iter_of(3, (int32_t[]){VNC_FLOAT32, dt, VNC_FLOAT32});
  REFUSED(vnc_elementwise(S, "add", VNC_EW_add, &ew2, VNC_FLOAT32, &p, 0, NULL));
  vnc_iter red = iter_of(2, (int32_t[]){VNC_FLOAT32, dt});
  red.strides[0][0] = 0;
  REFUSED(vnc_reduce(S, "sum", VNC_RED_SUM, &red, 1, NULL));
  vnc_iter red2 = iter_of(2, (int32_t[]){dt, VNC_FLOAT32});
  red2.strides[0][0] = 0;
  REFUSED(vnc_reduce(S, "sum", VNC_RED_SUM, &red2, 1, NULL));
  REFUSED(vnc_scan(S, "cumsum", VNC_SCAN_SUM, &x, 1, &x));
  REFUSED(vnc_scan(S, "cumsum", VNC_SCAN_SUM, &f, 1, &x));
  REFUSED(vnc_logsumexp(S, "logsumexp", &x, &f));
  REFUSED(vnc_cum_extreme(S, "cummax", &x, 1, 1, &x, &l));
  REFUSED(vnc_sort(S, "sort", &x, 1, 0, &x, &l));
  REFUSED(vnc_topk(S, "topk", &x, 1, 2, 1, &x, &l));
  vnc_tensor v1 = t1(dt, 4), o1 = t1(VNC_INT64, 4);
  REFUSED(vnc_searchsorted(S, "searchsorted", &v1, &v1, NULL, 0, &o1));
  REFUSED(vnc_randperm(S, "randperm", &v1, 0, 0));
  REFUSED(vnc_multinomial(S, "multinomial", &x, 1, 1, 0, &l, 0, 0));
  REFUSED(vnc_rng_uniform(S, &x, 0, 1, 0, 0));
  REFUSED(vnc_rng_random(S, &x, 0, 10, 0, 0));
  REFUSED(vnc_rng_bernoulli(S, &x, 0.5, NULL, 0, 0));
  REFUSED(vnc_rng_poisson(S, &f, &x, 0, 0));
  REFUSED(vnc_arange(S, "arange", &x, 0, 1, 0, 1));
  REFUSED(vnc_linspace(S, "linspace", &v1, 0, 1, 4));
  REFUSED(vnc_tri(S, "tril", &x, &x, 0, 0));
  REFUSED(vnc_count_nonzero(S, "count_nonzero", &x, (int64_t *)buf));
  REFUSED(vnc_nonzero(S, "nonzero", &x, (int64_t *)buf, 1, 1, 1));
  REFUSED(vnc_histogram(S, "histc", &v1, NULL, &v1, VNC_BINS_LINEAR, &v1));
  REFUSED(vnc_fft_c2c(S, "fft", &x, &x, 1, -1, 1.0));
  /* an indexed copy with a reduction computes */
  vnc_iter ix = iter_of(3, (int32_t[]){dt, dt, VNC_INT64});
  REFUSED(vnc_index(S, "scatter_add", &ix, VNC_INDEX_SCATTER, 1, (int64_t[]){4}, (int64_t[]){1}, 0, 0, VNC_REDUCE_SUM));
  /* copies converting to or from it */
  REFUSED(vnc_copy(S, "copy", &f, &x));
  REFUSED(vnc_copy(S, "copy", &x, &f));
  /* linear algebra and nn */
  vnc_matrix m = {.data = buf, .batch_stride = 16, .row_stride = 4, .col_stride = 1, .dtype = dt};
  REFUSED(vnc_gemm(S, "mm", 1, 4, 4, 4, 1.0, &m, &m, 0.0, &m));
  vnc_rows r = {.data = buf, .dtype = dt, .outer = 1, .n = 4, .inner = 1, .outer_stride = 4, .stride = 1, .inner_stride = 1};
  vnc_rows rf = r;
  rf.dtype = VNC_FLOAT32;
  REFUSED(vnc_softmax(S, "softmax", 0, &r, &r));
  REFUSED(vnc_softmax(S, "softmax", 0, &rf, &r));
  REFUSED(vnc_softmax_backward(S, "softmax_backward", 0, &r, &r, &r));
  REFUSED(vnc_layer_norm(S, "layer_norm", 2, 4, dt, buf, NULL, NULL, 1e-5, buf, buf, buf, VNC_FLOAT32));
  REFUSED(vnc_layer_norm(S, "layer_norm", 2, 4, VNC_FLOAT32, buf, NULL, NULL, 1e-5, buf, buf, buf, dt));
  REFUSED(vnc_layer_norm_backward(S, "layer_norm_backward", 2, 4, dt, buf, buf, buf, buf, VNC_FLOAT32, NULL, buf, NULL,
                                  NULL));
  REFUSED(vnc_nll_loss(S, "nll_loss", 2, 4, dt, buf, (const int64_t *)buf, NULL, 1, -100, buf, buf));
  REFUSED(vnc_nll_loss_backward(S, "nll_loss_backward", 2, 4, dt, buf, 0, (const int64_t *)buf, NULL, 1, -100, buf, buf));
  REFUSED(vnc_index_add_rows(S, "index_add", &r, buf, VNC_INT64, 1, &r, INT64_MIN, 0, 0));
  REFUSED(vnc_index_select(S, "index_select", &rf, buf, VNC_INT64, 1, 1, 0, &r)); /* converting */
  vnc_conv_params cp = {.nspatial = 1, .N = 1, .C = 1, .O = 1, .groups = 1, .in = {4}, .k = {1}, .out = {4},
                        .stride = {1}, .pad = {0}, .dil = {1}, .dtype = dt};
  REFUSED(vnc_conv_forward(S, "conv", &cp, buf, buf, NULL, buf));
  REFUSED(vnc_conv_backward(S, "conv_backward", &cp, buf, buf, buf, buf, buf, NULL));
  REFUSED(vnc_batch_norm(S, "batch_norm", 2, 1, 4, dt, buf, NULL, NULL, NULL, NULL, VNC_FLOAT32, 1, 0.1, 1e-5, buf, buf,
                         buf));
  REFUSED(vnc_batch_norm(S, "batch_norm", 2, 1, 4, VNC_FLOAT32, buf, buf, NULL, NULL, NULL, dt, 1, 0.1, 1e-5, buf, buf,
                         buf));
  REFUSED(vnc_batch_norm_backward(S, "batch_norm_backward", 2, 1, 4, dt, buf, buf, NULL, NULL, NULL, buf, buf,
                                  VNC_FLOAT32, 1, 1e-5, buf, NULL, NULL));
  vnc_pool2d pl = {.N = 1, .C = 1, .H = 2, .W = 2, .OH = 1, .OW = 1, .KH = 2, .KW = 2, .sh = 1, .sw = 1, .dh = 1, .dw = 1,
                   .dtype = dt};
  REFUSED(vnc_max_pool2d(S, "max_pool2d", &pl, buf, buf, (int64_t *)buf));
  REFUSED(vnc_max_pool2d_backward(S, "max_pool2d_backward", &pl, buf, (const int64_t *)buf, buf));
  REFUSED(vnc_adaptive_avg_pool2d(S, "adaptive_avg_pool2d", 1, 2, 2, 1, 1, dt, buf, buf));
  REFUSED(vnc_adaptive_avg_pool2d_backward(S, "adaptive_avg_pool2d_backward", 1, 2, 2, 1, 1, dt, buf, buf));
  vnc_image im = {.data = buf, .N = 1, .C = 2, .H = 2, .W = 1, .strides = {4, 2, 1, 1}};
  vnc_avg_pool2d_params ap = {.KH = 1, .KW = 1, .sh = 1, .sw = 1};
  REFUSED(vnc_avg_pool2d(S, "avg_pool2d", &ap, dt, &im, &im));
  REFUSED(vnc_avg_pool2d_backward(S, "avg_pool2d_backward", &ap, dt, &im, &im));
  REFUSED(vnc_upsample2d(S, "upsample", VNC_UPSAMPLE_NEAREST, 0, 1.0f, 1.0f, dt, &im, &im));
  REFUSED(vnc_upsample2d(S, "upsample", VNC_UPSAMPLE_BILINEAR, 0, 1.0f, 1.0f, dt, &im, &im));
  REFUSED(vnc_pad2d(S, "pad", VNC_PAD_REPLICATE, (int64_t[]){0, 0, 0, 0}, dt, &im, &im));
  REFUSED(vnc_group_norm(S, "group_norm", 1, dt, &im, NULL, NULL, VNC_FLOAT32, 1e-5, &im, buf, buf, VNC_FLOAT32));
  REFUSED(vnc_group_norm(S, "group_norm", 1, VNC_FLOAT32, &im, NULL, NULL, dt, 1e-5, &im, buf, buf, VNC_FLOAT32));
  REFUSED(vnc_group_norm(S, "group_norm", 1, VNC_FLOAT32, &im, NULL, NULL, VNC_FLOAT32, 1e-5, &im, buf, buf, dt));
  REFUSED(vnc_group_norm_backward(S, "group_norm_backward", 1, VNC_FLOAT32, &im, &im, buf, buf, dt, NULL, VNC_FLOAT32,
                                  &im, NULL, NULL));
  vnc_volume vo = {.data = buf, .N = 1, .C = 1, .D = 1, .H = 2, .W = 2, .strides = {4, 4, 4, 2, 1}};
  vnc_pool3d_params p3 = {.k = {1, 1, 1}, .stride = {1, 1, 1}, .pad = {0, 0, 0}, .dil = {1, 1, 1}};
  REFUSED(vnc_avg_pool3d(S, "avg_pool3d", &p3, dt, &vo, &vo));
  REFUSED(vnc_max_pool3d(S, "max_pool3d", &p3, dt, &vo, &vo, &vo));
  vnc_resample_dim rd[3] = {{.kind = VNC_RS_NEAREST, .scale = 1.0f}, {.kind = VNC_RS_NEAREST, .scale = 1.0f},
                            {.kind = VNC_RS_NEAREST, .scale = 1.0f}};
  REFUSED(vnc_resample(S, "resample", rd, dt, &vo, &vo));
  vnc_optim_config oc = {.kind = VNC_OPTIM_SGD, .param_dtype = dt, .grad_dtype = dt, .lr = 0.1};
  vnc_optim_param op = {.param = buf, .grad = buf, .numel = 4};
  REFUSED(vnc_fused_optim(S, "sgd", &oc, 1, &op));
  vnc_tensor w = t2(dt), idx = t1(VNC_INT64, 2), o2b = t1(VNC_INT64, 2);
  vnc_bag_args ba = {.weight = w, .indices = idx, .offsets = idx, .mode = VNC_BAG_SUM, .padding_idx = -1};
  REFUSED(vnc_embedding_bag(S, "embedding_bag", &ba, &w, &o2b, &idx, NULL));
  vnc_bag_args bf = ba;
  bf.weight = f;
  REFUSED(vnc_embedding_bag_backward(S, "embedding_bag_backward", &bf, &x, &o2b, &idx, NULL, 0, &f));
  REFUSED(vnc_embedding_bag_psw_backward(S, "embedding_bag_psw_backward", &bf, &x, &o2b, &v1));
  vnc_tensor lp = vnc_tensor_contiguous(buf, dt, 3, (int64_t[]){2, 1, 3}), tg = t1(VNC_INT64, 1);
  vnc_ctc_args ca = {.log_probs = lp, .targets = tg, .input_lengths = (const int64_t *)buf,
                     .target_lengths = (const int64_t *)buf};
  vnc_tensor nll = t1(VNC_FLOAT32, 1), la = vnc_tensor_contiguous(buf, VNC_FLOAT32, 3, (int64_t[]){1, 2, 3});
  REFUSED(vnc_ctc_loss(S, "ctc_loss", &ca, &nll, &la));
  ca.log_probs.dtype = VNC_FLOAT32;
  nll.dtype = dt;
  REFUSED(vnc_ctc_loss(S, "ctc_loss", &ca, &nll, &la));
}

/* Byte-moving kernels: bit for bit, whatever the bytes mean. */
static void byte_kernels_move(int32_t dt) {
  const int64_t es = (int64_t)vnc_dtype_storage_size(dt);
  unsigned char src[64], dst[64], want[64];
  for (int i = 0; i < 64; i++) src[i] = (unsigned char)(i * 37 + 11);
  /* copy of a transposed 4x2 view into a contiguous 2x4 tensor */
  memset(dst, 0, sizeof dst);
  vnc_tensor d = vnc_tensor_contiguous(dst, dt, 2, (int64_t[]){2, 4});
  vnc_tensor s = vnc_tensor_contiguous(src, dt, 2, (int64_t[]){2, 4});
  s.strides[0] = 1;
  s.strides[1] = 2;
  CHECK_OK(vnc_copy(S, "copy", &d, &s));
  CHECK_OK(vnc_stream_synchronize(S));
  for (int i = 0; i < 2; i++)
    for (int j = 0; j < 4; j++) memcpy(want + (i * 4 + j) * es, src + (j * 2 + i) * es, (size_t)es);
  CHECK(memcmp(dst, want, (size_t)(8 * es)) == 0);
  /* fill */
  CHECK_OK(vnc_fill(S, "fill", &d, src + 3));
  CHECK_OK(vnc_stream_synchronize(S));
  for (int i = 0; i < 8; i++) CHECK(memcmp(dst + i * es, src + 3, (size_t)es) == 0);
  /* index_select of rows 2, 0 of a 3x2 matrix */
  memset(dst, 0, sizeof dst);
  int64_t rows[2] = {2, 0};
  vnc_rows rs = {.data = src, .dtype = dt, .outer = 1, .n = 3, .inner = 2, .outer_stride = 6, .stride = 2, .inner_stride = 1};
  vnc_rows ro = {.data = dst, .dtype = dt, .outer = 1, .n = 2, .inner = 2, .outer_stride = 4, .stride = 2, .inner_stride = 1};
  CHECK_OK(vnc_index_select(S, "index_select", &rs, rows, VNC_INT64, 1, 2, 0, &ro));
  CHECK_OK(vnc_stream_synchronize(S));
  CHECK(memcmp(dst, src + 4 * es, (size_t)(2 * es)) == 0 && memcmp(dst + 2 * es, src, (size_t)(2 * es)) == 0);
  /* the indexed copy (gather): dst[e] = src[idx[e]] */
  memset(dst, 0, sizeof dst);
  int64_t gi[4] = {3, 1, -1, 0};
  vnc_iter it = iter_of(3, (int32_t[]){dt, dt, VNC_INT64});
  it.data[0] = (char *)dst;
  it.data[1] = (char *)src;
  it.data[2] = (char *)gi;
  it.strides[0][0] = es;
  it.strides[1][0] = 0;
  it.strides[2][0] = 8;
  CHECK_OK(vnc_index(S, "index", &it, VNC_INDEX_GATHER, 1, (int64_t[]){4}, (int64_t[]){es}, 0, VNC_INDEX_WRAP,
                     VNC_REDUCE_NONE));
  CHECK_OK(vnc_stream_synchronize(S));
  const int pick[4] = {3, 1, 3, 0};
  for (int i = 0; i < 4; i++) CHECK(memcmp(dst + i * es, src + pick[i] * es, (size_t)es) == 0);
}

int main(void) {
  CHECK_OK(vnc_stream_get(0, 0, &S));
  buf = calloc(1, 1 << 16);
  const int32_t stored[] = {VNC_FLOAT8_E5M2,  VNC_FLOAT8_E4M3FN, VNC_FLOAT8_E5M2FNUZ, VNC_FLOAT8_E4M3FNUZ,
                            VNC_FLOAT8_E8M0FNU, VNC_FLOAT4_E2M1FN_X2, VNC_UINT16, VNC_UINT32, VNC_UINT64,
                            VNC_BITS1X8, VNC_BITS2X4, VNC_BITS4X2, VNC_BITS8, VNC_BITS16};
  for (size_t k = 0; k < sizeof stored / sizeof stored[0]; k++) {
    CHECK(vnc_dtype_size(stored[k]) == 0 && vnc_dtype_storage_size(stored[k]) != 0);
    computing_kernels_refuse(stored[k]);
    byte_kernels_move(stored[k]);
  }
  /* codes that are no dtype at all (and quantized ones the runtime does not store) */
  const int32_t unknown[] = {12, 13, 14, 16, 17, 30, 43, 46, 1000, -1};
  for (size_t k = 0; k < sizeof unknown / sizeof unknown[0]; k++) {
    int32_t dt = unknown[k];
    computing_kernels_refuse(dt);
    vnc_tensor x = t2(dt);
    REFUSED(vnc_copy(S, "copy", &x, &x));
    REFUSED(vnc_fill(S, "fill", &x, buf));
    vnc_iter ix = iter_of(3, (int32_t[]){dt, dt, VNC_INT64});
    REFUSED(vnc_index(S, "index", &ix, VNC_INDEX_GATHER, 1, (int64_t[]){4}, (int64_t[]){1}, 0, 0, VNC_REDUCE_NONE));
    vnc_rows r = {.data = buf, .dtype = dt, .outer = 1, .n = 4, .inner = 1, .outer_stride = 4, .stride = 1, .inner_stride = 1};
    REFUSED(vnc_index_select(S, "index_select", &r, buf, VNC_INT64, 1, 1, 0, &r));
  }
  CHECK_OK(vnc_stream_synchronize(S)); /* nothing refused was enqueued */
  for (int i = 0; i < 1 << 16; i++)
    if (buf[i]) {
      CHECK(!"a refused call wrote the scratch buffer");
      break;
    }
  free(buf);
  CHECK_DONE();
}
