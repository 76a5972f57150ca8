// The fused fast-path ops PyTorch takes for any PrivateUse1 device in eval mode:
// _native_multi_head_attention (composed here from native ops) and
// _transformer_encoder_layer_fwd (ATen's own device-generic composition, which calls the former).
#include "neuron.h"

#include <ATen/ops/_transformer_encoder_layer_fwd_native.h>
#include <torch/library.h>

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
  TORCH_CHECK(embed_dim % num_head == 0, "embed_dim must be divisible by num_heads");
  const int64_t B = query.size(0), L = query.size(1), S = key.size(1), dh = embed_dim / num_head;
  auto w = qkv_weight.chunk(3, 0);
  auto b = qkv_bias.chunk(3, 0);
  auto heads = [&](const at::Tensor& t, int64_t len) { return t.view({B, len, num_head, dh}).transpose(1, 2); };
  at::Tensor q = heads(at::linear(query, w[0], b[0]), L);
  at::Tensor k = heads(at::linear(key, w[1], b[1]), S);
  at::Tensor v = heads(at::linear(value, w[2], b[2]), S);
  at::Tensor scores = at::matmul(q, k.transpose(-2, -1)).div(std::sqrt(static_cast<double>(dh)));
  if (mask && mask->defined()) {
    at::Tensor m = *mask;
    if (mask_type && *mask_type == 1) m = m.view({B, 1, 1, S});
    if (m.scalar_type() == at::kBool) scores = scores.masked_fill(m, -std::numeric_limits<float>::infinity());
    else scores = scores.add(m);
  }
  at::Tensor attn = at::softmax(scores, -1);
  at::Tensor out = at::matmul(attn, v).transpose(1, 2).reshape({B, L, embed_dim});
  out = at::linear(out, proj_weight, proj_bias);
  if (!need_weights) return {out, at::empty({0}, out.options())};
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

}  // namespace

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  m.impl("_native_multi_head_attention", TORCH_FN(native_mha));
  m.impl("_transformer_encoder_layer_fwd", TORCH_FN(encoder_layer));
}

}  // namespace torch_neuronx
