// torch.autocast("neuron"): CUDA's op policy lists (ATen's AT_FORALL_* lists) registered for
// the AutocastPrivateUse1 key, and a fallthrough for every other op. Also the two ops of
// torch.amp.GradScaler, composed from native ops without host synchronisation.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

#include "neuron.h"
#include "gate.h"

namespace {

using at::Tensor;

// As under CUDA autocast: BCE on half-precision probabilities is unsafe; refuse with advice.
Tensor binary_cross_entropy_banned(const Tensor&, const Tensor&, const std::optional<Tensor>&, int64_t) {
  TORCH_CHECK(false,
              "torch.nn.functional.binary_cross_entropy and torch.nn.BCELoss are unsafe to autocast. Many models "
              "use a sigmoid layer right before the binary cross entropy layer. In this case, combine the two layers "
              "using torch.nn.functional.binary_cross_entropy_with_logits or torch.nn.BCEWithLogitsLoss, which are "
              "safe to autocast.");
}

// found_inf = 1 if any gradient has an inf or NaN; every gradient *= inv_scale, the product
// taken in float32 and rounded once to the gradient's dtype (ATen's checks and arithmetic).
void amp_unscale(at::TensorList grads, at::Tensor& found_inf, const at::Tensor& inv_scale) {
  torch_neuronx::record_native("aten::_amp_foreach_non_finite_check_and_unscale_");
  TORCH_CHECK(inv_scale.numel() == 1, "inv_scale must be a 1-element tensor.");
  TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  TORCH_CHECK(inv_scale.scalar_type() == at::kFloat, "inv_scale must be a float tensor.");
  TORCH_CHECK(found_inf.scalar_type() == at::kFloat, "found_inf must be a float tensor.");
  for (const at::Tensor& g : grads) {
    TORCH_CHECK(g.layout() == at::kStrided, "one of scaled_grads was not a strided tensor.");
    TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(g.scalar_type()),
                                "_amp_foreach_non_finite_check_and_unscale_: not implemented for '",
                                g.scalar_type(), "' gradients (floating-point only)");
  }
  const at::Tensor inv = inv_scale.reshape({});
  for (const at::Tensor& g : grads) {
    at::Tensor bad = at::logical_not(at::isfinite(g)).any().to(at::kFloat);
    found_inf.copy_(at::maximum(found_inf, bad.view(found_inf.sizes())));
    at::Tensor& grad = const_cast<at::Tensor&>(g);
    if (g.scalar_type() == at::kFloat || g.scalar_type() == at::kDouble) grad.mul_(inv);
    else grad.copy_(g.to(at::kFloat).mul_(inv));
  }
}

// Scale backoff on a found inf, growth after growth_interval clean steps unless the grown
// scale would overflow (as ATen's _amp_update_scale_), as device ops: no host read decides.
at::Tensor& amp_update_scale(at::Tensor& scale, at::Tensor& growth_tracker, const at::Tensor& found_inf,
                             double growth_factor, double backoff_factor, int64_t growth_interval) {
  torch_neuronx::record_native("aten::_amp_update_scale_");
  TORCH_CHECK(growth_tracker.numel() == 1, "growth_tracker must be a 1-element tensor.");
  TORCH_CHECK(scale.numel() == 1, "current_scale must be a 1-element tensor.");
  TORCH_CHECK(found_inf.numel() == 1, "found_inf must be a 1-element tensor.");
  TORCH_CHECK(growth_tracker.scalar_type() == at::kInt, "growth_tracker must be an int tensor.");
  TORCH_CHECK(scale.scalar_type() == at::kFloat, "current_scale must be a float tensor.");
  TORCH_CHECK(found_inf.scalar_type() == at::kFloat, "found_inf must be a float tensor.");
  at::Tensor found = found_inf.ne(0).view(scale.sizes());
  at::Tensor tracker = at::where(found, at::zeros_like(growth_tracker), growth_tracker.add(1));
  at::Tensor grow = tracker.eq(growth_interval);
  at::Tensor grown = scale.mul(growth_factor);
  grown = at::where(at::isfinite(grown), grown, scale);
  at::Tensor new_scale = at::where(found, scale.mul(backoff_factor), at::where(grow, grown, scale));
  growth_tracker.copy_(at::where(grow, at::zeros_like(tracker), tracker));
  scale.copy_(new_scale);
  return scale;
}

NEURON_LIBRARY_IMPL(m) {
  m.impl("_amp_foreach_non_finite_check_and_unscale_", TORCH_FN(amp_unscale));
  m.impl("_amp_update_scale_", TORCH_FN(amp_update_scale));
}

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define NEURON_LOWER_PRECISION_FP(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
  AT_FORALL_LOWER_PRECISION_FP(NEURON_LOWER_PRECISION_FP)
#undef NEURON_LOWER_PRECISION_FP
#define NEURON_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
  AT_FORALL_FP32(NEURON_FP32)
#undef NEURON_FP32
#define NEURON_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
  AT_FORALL_FP32_SET_OPT_DTYPE(NEURON_FP32_SET_OPT_DTYPE)
#undef NEURON_FP32_SET_OPT_DTYPE
#define NEURON_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)
  AT_FORALL_PROMOTE(NEURON_PROMOTE)
#undef NEURON_PROMOTE
  m.impl(TORCH_SELECTIVE_NAME("aten::binary_cross_entropy"), TORCH_FN((&binary_cross_entropy_banned)));
}

}  // namespace
