// Attention on the neuron key: scaled_dot_product_attention's fused backend for PrivateUse1
// (_fused_sdp_choice answers "overrideable"; forward and backward run vnc/attention.h), and
// the fast-path ops PyTorch takes for any PrivateUse1 device in eval mode:
// _native_multi_head_attention (composed here from native ops) and
// _transformer_encoder_layer_fwd (ATen's own device-generic composition, which calls the former),
// and nn.TransformerEncoder's nested-tensor fast path (padded sequences plus a key padding mask).
#include "neuron.h"
#include "gate.h"

#include <ATen/Context.h>
#include <ATen/SDPBackend.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/NestedTensorImpl.h>
#include <ATen/native/nested/NestedTensorUtils.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/ops/_transformer_encoder_layer_fwd_native.h>
#include <ATen/ops/to_padded_tensor_native.h>
#include <torch/library.h>

#include <algorithm>
#include <array>
#include <cmath>

namespace torch_neuronx {
namespace {

// query/key/value: (B, L, E). mask_type: 0 = (L, L) attention mask, 1 = (B, L) key padding
// mask, 2 = any mask broadcastable to (B, heads, L, S); bool masks mark positions to drop.
std::tuple<at::Tensor, at::Tensor> native_mha(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                                              int64_t embed_dim, int64_t num_head, const at::Tensor& qkv_weight,
                                              const at::Tensor& qkv_bias, const at::Tensor& proj_weight,
                                              const at::Tensor& proj_bias, const std::optional<at::Tensor>& mask,
                                              bool need_weights, bool average_attn_weights,
                                              std::optional<int64_t> mask_type) {
  record_native("aten::_native_multi_head_attention");
  TORCH_CHECK(query.dim() == 3 && key.dim() == 3 && value.dim() == 3,
              "_native_multi_head_attention: expected (batch, length, embed) inputs");
  TORCH_CHECK(query.size(2) == embed_dim, "passed-in embed_dim ", embed_dim, " didn't match last dim of query ",
              query.size(2));  // CPU's checks and messages
  TORCH_CHECK(qkv_weight.dim() == 2 && qkv_weight.size(0) == 3 * embed_dim && qkv_weight.size(1) == embed_dim,
              "expected `qkv_weight` of shape (3 * embed_dim, embed_dim), got ", qkv_weight.sizes());
  TORCH_CHECK(embed_dim % num_head == 0, "embed_dim must be divisible by num_heads");
  const int64_t B = query.size(0), L = query.size(1), S = key.size(1), dh = embed_dim / num_head;
  if (mask && mask->defined() && mask_type && *mask_type == 1)
    TORCH_CHECK(mask->dim() == 2 && mask->size(0) == B && mask->size(1) == S,
                "For mask_type == 1 mask shape should be (B, L)");
  auto w = qkv_weight.chunk(3, 0);
  auto b = qkv_bias.chunk(3, 0);
  auto heads = [&](const at::Tensor& t, int64_t len) { return t.view({B, len, num_head, dh}).transpose(1, 2); };
  at::Tensor q = heads(at::linear(query, w[0], b[0]), L);
  at::Tensor k = heads(at::linear(key, w[1], b[1]), S);
  at::Tensor v = heads(at::linear(value, w[2], b[2]), S);
  at::Tensor bias;  // additive: MHA's bool masks mark the positions to drop
  if (mask && mask->defined()) {
    at::Tensor m = *mask;
    if (mask_type && *mask_type == 1) m = m.view({B, 1, 1, S});
    bias = m.scalar_type() == at::kBool
               ? at::zeros(m.sizes(), q.options()).masked_fill_(m, -std::numeric_limits<float>::infinity())
               : m;
  }
  at::Tensor ctx, attn;
  if (need_weights) {
    at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).div(std::sqrt(static_cast<double>(dh)));
    if (bias.defined()) scores = scores.add(bias);
    attn = at::softmax(scores, -1);
    ctx = at::matmul(attn, v);
  } else {  // no weights wanted: the fused attention kernel
    ctx = at::scaled_dot_product_attention(q, k, v, bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt);
  }
  at::Tensor out = at::linear(ctx.transpose(1, 2).reshape({B, L, embed_dim}), proj_weight, proj_bias);
  if (!need_weights) return {out, at::Tensor()};  // None in Python, as ATen's
  return {out, average_attn_weights ? attn.mean(1) : attn};
}

// ATen's device-generic composition, counted as one native op.
at::Tensor encoder_layer(const at::Tensor& src, int64_t embed_dim, int64_t num_heads, const at::Tensor& qkv_weight,
                         const at::Tensor& qkv_bias, const at::Tensor& proj_weight, const at::Tensor& proj_bias,
                         bool use_gelu, bool norm_first, double eps, const at::Tensor& norm_weight_1,
                         const at::Tensor& norm_bias_1, const at::Tensor& norm_weight_2, const at::Tensor& norm_bias_2,
                         const at::Tensor& ffn_weight_1, const at::Tensor& ffn_bias_1, const at::Tensor& ffn_weight_2,
                         const at::Tensor& ffn_bias_2, const std::optional<at::Tensor>& mask,
                         std::optional<int64_t> mask_type) {
  record_native("aten::_transformer_encoder_layer_fwd");
  return at::native::transformer_encoder_layer_forward(
      src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias, use_gelu, norm_first, eps,
      norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2,
      mask, mask_type);
}

// ---------------------------------------------------------------- nested fast path

// nn.TransformerEncoder in eval mode with a src_key_padding_mask packs its input into a nested
// tensor (_nested_tensor_from_mask), runs each layer on it (_transformer_encoder_layer_fwd) and
// pads the result (to_padded_tensor). ATen has nested kernels for CPU and CUDA only; here the
// nested tensor is ATen's own NestedTensorImpl (a packed buffer on neuron plus its (N, 2)
// sizes), and each layer is computed on the padded tensor with a key padding mask, so results
// equal CPU's at the valid positions; padding is written with the requested value (CPU: 0).

// ATen's checks of the two mask ops (NestedTensorTransformerFunctions.cpp).
void check_mask_args(const at::Tensor& t, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::ScalarType::Bool, "Expected mask to be of type Bool, but got ",
              mask.scalar_type(), " instead.");
  TORCH_CHECK(mask.dim() == 2, "Padding mask should be 2D");
  TORCH_CHECK(t.dim() == 3, "Input should be a 3D tensor, N * L * D");
  TORCH_CHECK(t.size(0) == mask.size(0) && t.size(1) == mask.size(1), "Mask size should match input size");
  check_same_device("aten::_nested_tensor_from_mask", t, {&mask});
}

// True when every row of mask is a run of Trues followed by Falses (the position of the
// first False, from argmin over the row with a False appended, equals the row's count).
at::Tensor left_aligned(const at::Tensor& mask) {
  const at::Tensor pad = at::zeros({mask.size(0), 1}, mask.options());
  const at::Tensor first_false = at::cat({mask, pad}, 1).to(at::kInt).argmin(1);
  return at::eq(first_false, mask.sum(1)).all();
}

bool nested_from_mask_left_aligned(const at::Tensor& t, const at::Tensor& mask) {
  check_mask_args(t, mask);
  record_native("aten::_nested_tensor_from_mask_left_aligned");
  return left_aligned(mask).item<bool>();
}

// keep[n, l] = l < lengths[n]: the valid rows of each padded sequence.
at::Tensor valid_rows(const at::Tensor& lengths, int64_t L) {
  return at::arange(L, lengths.options()).unsqueeze(0).lt(lengths.unsqueeze(1));
}

// A nested tensor of N entries [lengths[n], D]: the first lengths[n] rows of each sequence of
// padded [N, L, D], packed in order (ATen's nested_from_padded layout).
at::Tensor pack(const at::Tensor& padded, const at::Tensor& lengths, const at::Tensor& lengths_cpu) {
  const int64_t N = padded.size(0), L = padded.size(1), D = padded.size(2);
  const at::Tensor keep = valid_rows(lengths, L).unsqueeze(2).expand({N, L, D});
  const at::Tensor buffer = padded.masked_select(keep).contiguous();
  const at::Tensor sizes = at::stack({lengths_cpu, at::full({N}, D, lengths_cpu.options())}, 1);
  return at::native::wrap_buffer(buffer, sizes);
}

at::Tensor nested_from_mask(const at::Tensor& t, const at::Tensor& mask, bool mask_check) {
  check_mask_args(t, mask);
  record_native("aten::_nested_tensor_from_mask");
  if (mask_check) TORCH_CHECK(left_aligned(mask).item<bool>(), "Mask must be left-aligned without gaps");
  // as ATen: entry n holds the first count(mask[n]) rows, whatever the mask's layout
  const at::Tensor lengths = mask.sum(1);
  return pack(t, lengths, lengths.cpu());
}

// The lengths (on the host and on the device) and feature size of a nested tensor made by
// nested_from_mask; other nested layouts are refused with the reason.
struct Entries {
  at::Tensor lengths_cpu, lengths;
  int64_t D, max_len;
};

Entries entries_of(const at::Tensor& nt, const char* op) {
  auto* impl = at::native::get_nested_tensor_impl(nt);
  const at::Tensor& sizes = impl->get_nested_sizes();
  TORCH_CHECK_NOT_IMPLEMENTED(
      sizes.dim() == 2 && sizes.size(1) == 2 && at::native::nested_tensor_impl_is_contiguous(impl), op,
      ": nested tensors on neuron support the [length, features] entries of nn.TransformerEncoder's fast path only, "
      "got entries of ", sizes.dim() == 2 ? sizes.size(1) : 0, " dims");
  Entries e;
  e.lengths_cpu = sizes.select(1, 0).contiguous();
  const at::Tensor features = sizes.select(1, 1);
  e.D = sizes.size(0) ? features[0].item<int64_t>() : 0;
  TORCH_CHECK_NOT_IMPLEMENTED(sizes.size(0) == 0 || features.eq(e.D).all().item<bool>(), op,
                              ": nested entries with different feature sizes are not supported on neuron");
  e.max_len = sizes.size(0) ? e.lengths_cpu.max().item<int64_t>() : 0;
  e.lengths = e.lengths_cpu.to(nt.device());
  return e;
}

at::Tensor unpack(const at::Tensor& nt, const Entries& e, double padding, int64_t L) {
  const int64_t N = e.lengths_cpu.size(0);
  at::Tensor out = at::full({N, L, e.D}, padding, nt.options().layout(at::kStrided));
  const at::Tensor keep = valid_rows(e.lengths, L).unsqueeze(2).expand({N, L, e.D});
  out.masked_scatter_(keep, at::native::get_nested_tensor_impl(nt)->get_buffer());
  return out;
}

// Whether nt has the fast path's layout: contiguous [length, features] entries of one feature size.
bool fast_path_layout(const at::Tensor& nt) {
  auto* impl = at::native::get_nested_tensor_impl(nt);
  const at::Tensor& sizes = impl->get_nested_sizes();
  if (!(sizes.dim() == 2 && sizes.size(1) == 2 && at::native::nested_tensor_impl_is_contiguous(impl))) return false;
  return sizes.size(0) == 0 || sizes.select(1, 1).eq(sizes[0][1]).all().item<bool>();
}

at::Tensor to_padded_tensor(const at::Tensor& self, double padding, at::OptionalSymIntArrayRef output_size) {
  record_native("aten::to_padded_tensor");
  // other layouts (strided nested tensors, SDPA's math path on them): ATen's device-generic
  // kernel (CPU's), which pads each entry with dense ops
  if (!fast_path_layout(self)) {
    std::optional<std::vector<int64_t>> size;
    if (output_size) size = C10_AS_INTARRAYREF_SLOW(*output_size).vec();
    return at::native::NestedTensor_to_padded_tensor_generic(self, padding, size ? at::OptionalIntArrayRef(*size)
                                                                                 : at::OptionalIntArrayRef());
  }
  const Entries e = entries_of(self, "aten::to_padded_tensor");
  const int64_t N = e.lengths_cpu.size(0);
  if (!output_size) return unpack(self, e, padding, e.max_len);
  auto size = C10_AS_INTARRAYREF_SLOW(*output_size);
  TORCH_CHECK(size.size() == 3, "Length of output_size does not match NestedTensor dims. Broadcasting is not supported.");
  TORCH_CHECK(size[0] == N && size[1] >= e.max_len && size[2] >= e.D,
              "Value in output_size is less than NestedTensor padded size. Truncation is not supported.");
  at::Tensor out = unpack(self, e, padding, size[1]);
  if (size[2] == e.D) return out;
  at::Tensor wide = at::full(size, padding, out.options());
  wide.narrow(2, 0, e.D).copy_(out);
  return wide;
}

// One encoder layer on a nested input: the dense layer on the padded sequences with a key
// padding mask (True = padding), then the valid rows packed again.
at::Tensor encoder_layer_nested(const at::Tensor& src, int64_t embed_dim, int64_t num_heads, const at::Tensor& qkv_weight,
                                const at::Tensor& qkv_bias, const at::Tensor& proj_weight, const at::Tensor& proj_bias,
                                bool use_gelu, bool norm_first, double eps, const at::Tensor& norm_weight_1,
                                const at::Tensor& norm_bias_1, const at::Tensor& norm_weight_2,
                                const at::Tensor& norm_bias_2, const at::Tensor& ffn_weight_1,
                                const at::Tensor& ffn_bias_1, const at::Tensor& ffn_weight_2,
                                const at::Tensor& ffn_bias_2, const std::optional<at::Tensor>& mask,
                                std::optional<int64_t> mask_type) {
  TORCH_CHECK(!mask || !mask->defined(), "_transformer_encoder_layer_fwd: a mask is not supported with a nested input "
                                         "(its padding is the mask)");
  const Entries e = entries_of(src, "aten::_transformer_encoder_layer_fwd");
  const at::Tensor padded = unpack(src, e, 0.0, e.max_len);
  const at::Tensor padding_mask = valid_rows(e.lengths, e.max_len).logical_not();
  const at::Tensor out = encoder_layer(padded, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
                                       use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2,
                                       ffn_weight_1, ffn_bias_1, ffn_weight_2, ffn_bias_2, padding_mask, 1);
  return pack(out, e.lengths, e.lengths_cpu);
}

// ---------------------------------------------------------------- scaled_dot_product_attention

constexpr const char* kSdpa = "aten::_scaled_dot_product_fused_attention_overrideable";

// (Sizes are compared as SymInts: under torch.compile's dynamic shapes this runs on fake
// tensors, and reading a plain size would specialise the graph to it.)
// The fused kernel runs where CPU's backend choice runs its fused (flash) kernel, and PyTorch's
// math path (a composition of native ops) where CPU's runs math: the two kernels compute the
// same values except in rows whose logits are all huge finite negatives (a finfo.min padding
// mask), whose gradients both fused kernels rebuild from a logsumexp float32 cannot hold there
// (too large by up to the key length), so each input gets CPU's values by taking CPU's path.
// Fused: 4-D float32/bfloat16/float16 inputs (float64 computes through float32: math), no
// dropout, equal batch sizes, equal head counts or (enable_gqa) key/value heads dividing the
// query's, one head dim for query, key and value, non-empty lengths, unit last-dim strides, and
// an attn_mask that does not require grad (a learned bias) and is 2-D or 4-D with its leading
// dims 1 or the batch's and heads' (sdp_utils_cpp's use_flash_attention_cpp gates).
bool cpu_flash_mask(const at::Tensor& q, const at::Tensor& k, const std::optional<at::Tensor>& mask) {
  if (!mask || !mask->defined()) return true;
  const at::Tensor& m = *mask;
  if (m.device() != q.device() || m.requires_grad() || (m.dim() != 2 && m.dim() != 4)) return false;
  if ((m.sym_size(-2) != q.sym_size(2) && m.sym_size(-2) != 1) || (m.sym_size(-1) != k.sym_size(2) && m.sym_size(-1) != 1))
    return false;
  return m.dim() == 2 || ((m.sym_size(0) == 1 || m.sym_size(0) == q.sym_size(0)) &&
                          (m.sym_size(1) == 1 || m.sym_size(1) == q.sym_size(1)));
}

int64_t fused_sdp_choice(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const std::optional<at::Tensor>& mask, double dropout_p, bool, std::optional<double>,
                         bool enable_gqa) {
  const auto dt = q.scalar_type();
  const auto dense4 = [&](const at::Tensor& t) { return t.dim() == 4 && !t.is_nested() && t.scalar_type() == dt; };
  const bool fused = at::globalContext().userEnabledOverrideableSDP() && dropout_p == 0.0 && dense4(q) &&
                     dense4(k) && dense4(v) && (dt == at::kFloat || dt == at::kBFloat16 || dt == at::kHalf) &&
                     q.device() == k.device() && q.device() == v.device() && k.sym_size(0) == q.sym_size(0) &&
                     v.sym_size(0) == q.sym_size(0) && v.sym_size(1) == k.sym_size(1) &&
                     (k.sym_size(1) == q.sym_size(1) ||  // grouped-query attention: the kernel's groups
                      (enable_gqa && k.sym_size(1) > 0 && q.sym_size(1) % k.sym_size(1) == 0)) &&
                     k.sym_size(3) == q.sym_size(3) && v.sym_size(3) == q.sym_size(3) &&
                     v.sym_size(2) == k.sym_size(2) && q.sym_size(2) > 0 && k.sym_size(2) > 0 &&
                     q.sym_stride(3) == 1 && k.sym_stride(3) == 1 && v.sym_stride(3) == 1 && cpu_flash_mask(q, k, mask);
  return static_cast<int64_t>(fused ? at::SDPBackend::overrideable : at::SDPBackend::math);
}

// Rows (the last dim) contiguous and apart: what the attention kernels read and write in place.
bool rows_ok(const at::Tensor& t) {
  return (t.stride(3) == 1 || t.size(3) == 1) && (t.size(2) == 1 || t.stride(2) >= t.size(3));
}

// A float32 view the kernel reads in place when its rows are contiguous (a (B, L, H, E) tensor
// transposed to (B, H, L, E) qualifies), else a contiguous float32 copy.
at::Tensor f32_rows(const at::Tensor& t) {
  const at::Tensor f = t.to(at::kFloat);
  return rows_ok(f) ? f : f.contiguous();
}

// A float32 result laid out as the op's meta function lays it out for torch.compile
// (alloc_with_matching_layout: the query's dim order; the same shape takes empty_like), so
// eager and compiled strides agree.
at::Tensor float_like(const at::Tensor& like, at::IntArrayRef shape) {
  const auto opts = like.options().dtype(at::kFloat);
  if (like.sizes() == shape) return at::empty_like(like, opts);
  std::array<int64_t, 4> order{0, 1, 2, 3};
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return like.stride(a) > like.stride(b); });
  std::array<int64_t, 4> strides{};
  int64_t stride = 1;
  for (int i = 3; i >= 0; i--) {
    strides[order[i]] = stride;
    stride *= shape[order[i]];
  }
  return at::empty_strided(shape, strides, opts);
}

// Where the kernel writes `t`: t itself when its rows are contiguous, else a row-major buffer
// copied into t afterwards (written_back).
at::Tensor rows_of(const at::Tensor& t) { return rows_ok(t) ? t : at::empty(t.sizes(), t.options()); }
void written_back(at::Tensor& t, const at::Tensor& rows) {
  if (!rows.is_same(t)) t.copy_(rows);
}

vnc_attn_operand operand(const at::Tensor& t) {
  return {static_cast<float*>(element_ptr(t)), t.stride(0), t.stride(1), t.size(2) == 1 ? t.size(3) : t.stride(2)};
}

// The additive float32 bias, expanded to (B, H, L, S): bool masks keep True positions
// (0) and drop False ones (-inf), as PyTorch's math path.
at::Tensor bias_of(const at::Tensor& mask, int64_t B, int64_t H, int64_t L, int64_t S) {
  if (!mask.defined()) return mask;
  at::Tensor b = mask.scalar_type() == at::kBool
                     ? at::zeros(mask.sizes(), mask.options().dtype(at::kFloat))
                           .masked_fill_(mask.logical_not(), -std::numeric_limits<float>::infinity())
                     : mask.to(at::kFloat);
  return b.expand({B, H, L, S});
}

vnc_attention attention_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, const at::Tensor& bias,
                             bool causal, std::optional<double> scale) {
  vnc_attention a{};
  a.B = q.size(0), a.H = q.size(1), a.L = q.size(2), a.E = q.size(3), a.S = k.size(2), a.Ev = v.size(3);
  a.scale = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(a.E));
  a.causal = causal;
  a.q = operand(q), a.k = operand(k), a.v = operand(v);
  a.group = a.H / std::max<int64_t>(k.size(1), 1);
  if (bias.defined()) {
    a.bias = static_cast<const float*>(element_ptr(bias));
    for (int d = 0; d < 4; d++) a.bias_strides[d] = bias.stride(d);
  }
  return a;
}

// Key and value heads: as many as the query's, or (grouped-query attention) a divisor of them.
void check_heads(const char* op, const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  TORCH_CHECK_VALUE(k.size(1) == v.size(1) && (k.size(1) == q.size(1) || (k.size(1) > 0 && q.size(1) % k.size(1) == 0)),
                    op, ": query has ",
                    q.size(1), " heads, key ", k.size(1), " and value ", v.size(1),
                    "; key and value need the same number of heads, which must divide the query's");
}

// dk or dv of grouped-query attention: the kernel's per-query-head gradient `full` ([B, H, S, E])
// summed over each group of query heads into `into` ([B, H / G, S, E]).
void sum_groups(at::Tensor& into, const at::Tensor& full) {
  const int64_t kv = into.size(1);
  at::sum_out(into, full.view({full.size(0), kv, full.size(1) / kv, full.size(2), full.size(3)}), {2});
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
sdpa_forward(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
             const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal, bool, std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, kSdpa, ": dropout is not supported by the fused kernel (dropout_p must be 0)");
  TORCH_CHECK(query.dim() == 4 && key.dim() == 4 && value.dim() == 4, kSdpa,
              ": expected 4-D (batch, heads, length, dim) query, key and value");
  check_heads(kSdpa, query, key, value);
  const at::Tensor mask = attn_bias.value_or(at::Tensor());
  check_same_device(kSdpa, query, {&key, &value, &mask});
  record_native(kSdpa);
  const at::Tensor q = f32_rows(query), k = f32_rows(key), v = f32_rows(value);
  const int64_t B = q.size(0), H = q.size(1), L = q.size(2), Ev = v.size(3);
  const at::Tensor bias = bias_of(mask, B, H, L, k.size(2));
  at::Tensor out = float_like(query, {B, H, L, Ev});
  const at::Tensor out_rows = rows_of(out);
  at::Tensor lse = at::empty({B, H, L}, q.options());
  const vnc_attention a = attention_args(q, k, v, bias, is_causal, scale);
  const vnc_attn_operand o = operand(out_rows);
  c10::DeviceGuard guard(query.device());
  check(vnc_attention_forward(stream_of(q), kSdpa, &a, &o, lse.data_ptr<float>()));
  written_back(out, out_rows);
  const at::Tensor none = at::empty({0}, query.options().dtype(at::kLong));
  return {out.to(query.scalar_type()), lse, none, none, c10::SymInt(a.L), c10::SymInt(a.S), none, none, none};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_backward(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor& out, const at::Tensor& logsumexp,
    const at::Tensor&, const at::Tensor&, c10::SymInt, c10::SymInt, double dropout_p, bool is_causal, const at::Tensor&,
    const at::Tensor&, std::optional<double> scale) {
  constexpr const char* name = "aten::_scaled_dot_product_fused_attention_overrideable_backward";
  if (!grad_out.defined()) return {};  // no gradient flows back (CPU's fused backwards: undefined grads)
  TORCH_CHECK(dropout_p == 0.0, name, ": dropout is not supported by the fused kernel (dropout_p must be 0)");
  check_same_device(name, query, {&grad_out, &key, &value, &attn_bias, &out, &logsumexp});
  check_heads(name, query, key, value);
  record_native(name);
  const at::Tensor q = f32_rows(query), k = f32_rows(key), v = f32_rows(value);
  const at::Tensor go = f32_rows(grad_out), o = f32_rows(out), lse = logsumexp.to(at::kFloat).contiguous();
  const at::Tensor bias = bias_of(attn_bias, q.size(0), q.size(1), q.size(2), k.size(2));
  at::Tensor dq = float_like(query, query.sizes()), dk = float_like(key, key.sizes()),
             dv = float_like(value, value.sizes()), dbias;
  const bool grouped = key.size(1) != query.size(1);  // the kernel writes per query head
  const at::Tensor dq_rows = rows_of(dq),
                   dk_rows = grouped ? at::empty({q.size(0), q.size(1), k.size(2), k.size(3)}, q.options()) : rows_of(dk),
                   dv_rows = grouped ? at::empty({q.size(0), q.size(1), v.size(2), v.size(3)}, q.options()) : rows_of(dv);
  const bool want_dbias = grad_input_mask[3] && attn_bias.defined() && at::isFloatingType(attn_bias.scalar_type());
  if (want_dbias) dbias = at::empty({q.size(0), q.size(1), q.size(2), k.size(2)}, q.options());
  const vnc_attention a = attention_args(q, k, v, bias, is_causal, scale);
  const vnc_attn_operand gop = operand(go), oop = operand(o), dqo = operand(dq_rows), dko = operand(dk_rows),
                         dvo = operand(dv_rows);
  c10::DeviceGuard guard(query.device());
  check(vnc_attention_backward(stream_of(q), name, &a, &gop, &oop, lse.data_ptr<float>(), &dqo, &dko, &dvo,
                               want_dbias ? dbias.data_ptr<float>() : nullptr));
  written_back(dq, dq_rows);
  if (grouped) {
    sum_groups(dk, dk_rows);
    sum_groups(dv, dv_rows);
  } else {
    written_back(dk, dk_rows);
    written_back(dv, dv_rows);
  }
  if (want_dbias) dbias = dbias.sum_to_size(attn_bias.sizes()).to(attn_bias.scalar_type());
  return {dq.to(query.scalar_type()), dk.to(key.scalar_type()), dv.to(value.scalar_type()), dbias};
}

// ---- under torch.func.vmap: the same op composed of ops that have batching rules
// PyTorch has no batching rule for the overrideable op, and vmap (of grad, say) reaches it with
// batched tensors; these kernels of the FuncTorchBatched key compute what the fused kernels
// compute (a row whose positions are all masked gives zeros and a -inf logsumexp) from matmul,
// logsumexp and exp, which vmap batches and which run on the device's native kernels.

// Key or value with one head per query head (grouped-query attention repeats each G times).
at::Tensor per_query_head(const at::Tensor& kv, const at::Tensor& q) {
  return kv.size(-3) == q.size(-3) ? kv : kv.repeat_interleave(q.size(-3) / kv.size(-3), -3);
}

// A gradient per query head summed over each group into the key's or value's heads.
at::Tensor per_kv_head(const at::Tensor& g, const at::Tensor& kv) {
  return kv.size(-3) == g.size(-3) ? g : g.unflatten(-3, {kv.size(-3), g.size(-3) / kv.size(-3)}).sum(-3);
}

// Scaled scores QK^T * scale in float32 with the causal mask and the bias applied (-inf where dropped).
at::Tensor scores(const at::Tensor& q, const at::Tensor& k, const at::Tensor& bias, bool causal,
                  std::optional<double> scale) {
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(q.size(-1)));
  at::Tensor s = at::matmul(q.to(at::kFloat), per_query_head(k, q).to(at::kFloat).transpose(-2, -1)).mul(sc);
  const double inf = std::numeric_limits<double>::infinity();
  if (causal)
    s = s.masked_fill(at::ones({q.size(-2), k.size(-2)}, q.options().dtype(at::kBool)).triu(1), -inf);
  if (bias.defined())
    s = bias.scalar_type() == at::kBool ? s.masked_fill(bias.logical_not(), -inf) : s.add(bias.to(at::kFloat));
  return s;
}

// softmax rows from the scores and their logsumexp (zeros where the logsumexp is -inf)
at::Tensor probabilities(const at::Tensor& s, const at::Tensor& lse) {
  const at::Tensor l = lse.unsqueeze(-1);
  return s.sub(l).exp().masked_fill(l.isneginf(), 0.0);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, c10::SymInt, c10::SymInt, at::Tensor, at::Tensor, at::Tensor>
sdpa_forward_batched(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                     const std::optional<at::Tensor>& attn_bias, double dropout_p, bool is_causal, bool,
                     std::optional<double> scale) {
  TORCH_CHECK(dropout_p == 0.0, kSdpa, ": dropout is not supported by the fused kernel (dropout_p must be 0)");
  const at::Tensor s = scores(query, key, attn_bias.value_or(at::Tensor()), is_causal, scale);
  const at::Tensor lse = at::logsumexp(s, -1);
  const at::Tensor out = at::matmul(probabilities(s, lse), per_query_head(value, query).to(at::kFloat))
                             .to(query.scalar_type());
  const at::Tensor none = at::empty({0}, query.options().dtype(at::kLong));
  return {out, lse, none, none, query.sym_size(-2), key.sym_size(-2), none, none, none};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sdpa_backward_batched(
    const at::Tensor& grad_out, const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
    const at::Tensor& attn_bias, std::array<bool, 4> grad_input_mask, const at::Tensor&, const at::Tensor& logsumexp,
    const at::Tensor&, const at::Tensor&, c10::SymInt, c10::SymInt, double dropout_p, bool is_causal, const at::Tensor&,
    const at::Tensor&, std::optional<double> scale) {
  if (!grad_out.defined()) return {};  // as sdpa_backward
  TORCH_CHECK(dropout_p == 0.0, kSdpa, "_backward: dropout is not supported by the fused kernel (dropout_p must be 0)");
  const double sc = scale ? *scale : 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  const at::Tensor q = query.to(at::kFloat), k = per_query_head(key, query).to(at::kFloat),
                   v = per_query_head(value, query).to(at::kFloat), go = grad_out.to(at::kFloat);
  const at::Tensor p = probabilities(scores(query, key, attn_bias, is_causal, scale), logsumexp.to(at::kFloat));
  const at::Tensor dp = at::matmul(go, v.transpose(-2, -1));
  const at::Tensor ds = p.mul(dp.sub(p.mul(dp).sum(-1, /*keepdim=*/true)));  // softmax backward
  const at::Tensor dq = at::matmul(ds, k).mul(sc), dk = per_kv_head(at::matmul(ds.transpose(-2, -1), q).mul(sc), key),
                   dv = per_kv_head(at::matmul(p.transpose(-2, -1), go), value);
  at::Tensor dbias;
  if (grad_input_mask[3] && attn_bias.defined() && at::isFloatingType(attn_bias.scalar_type()))
    dbias = ds.sum_to_size(attn_bias.sizes()).to(attn_bias.scalar_type());
  return {dq.to(query.scalar_type()), dk.to(key.scalar_type()), dv.to(value.scalar_type()), dbias};
}

}  // namespace

TORCH_LIBRARY_IMPL(aten, FuncTorchBatched, m) {
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(sdpa_forward_batched));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(sdpa_backward_batched));
}

NEURON_LIBRARY_IMPL(m) {
  m.impl("_nested_tensor_from_mask", TORCH_FN(nested_from_mask));
  m.impl("_nested_tensor_from_mask_left_aligned", TORCH_FN(nested_from_mask_left_aligned));
  m.impl("_fused_sdp_choice", TORCH_FN(fused_sdp_choice));
  m.impl("_scaled_dot_product_fused_attention_overrideable", TORCH_FN(sdpa_forward));
  m.impl("_scaled_dot_product_fused_attention_overrideable_backward", TORCH_FN(sdpa_backward));
  m.impl("_native_multi_head_attention", TORCH_FN(native_mha));
  m.impl("_transformer_encoder_layer_fwd", TORCH_FN(encoder_layer));
}

TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
  m.impl("_transformer_encoder_layer_fwd", TORCH_FN(encoder_layer_nested));
  m.impl("to_padded_tensor", TORCH_FN(to_padded_tensor));
}

}  // namespace torch_neuronx

// scaled_dot_product_attention asks this DispatchStub (keyed by device type) for its backend.
namespace at::native {
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torch_neuronx::fused_sdp_choice)
}  // namespace at::native
