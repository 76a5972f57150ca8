// Fused optimizer ops on the neuron key (torch.optim's fused=True path): _fused_adam_,
// _fused_adamw_, _fused_sgd_, _fused_adagrad_ and their tensor_lr overloads. One runtime launch
// (vnc/optim.h) updates the whole parameter list; device scalars (step counts, lr,
// grad_scale, found_inf) are read when the task runs, so nothing synchronises the host.
#include "neuron.h"
#include "gate.h"

#include <torch/library.h>

namespace torch_neuronx {
namespace {

// The kernel takes contiguous tensors; others are updated through a contiguous copy that is
// written back after the launch (stream order keeps the copies after the update). Every copy
// is held until the launch is queued: a released one's block would be handed to the next copy.
struct Operands {
  std::vector<std::pair<at::Tensor, at::Tensor>> copies;  // (original, contiguous copy)
  std::vector<bool> written;
  void* take(const at::Tensor& t, bool write) {
    if (!t.defined()) return nullptr;
    if (t.is_contiguous()) return element_ptr(t);
    copies.emplace_back(t, t.contiguous());
    written.push_back(write);
    return element_ptr(copies.back().second);
  }
  void finish() {
    for (size_t i = 0; i < copies.size(); i++)
      if (written[i]) copies[i].first.copy_(copies[i].second);
  }
};

// A float32 copy of a 1-element device tensor (held by `keep` until the launch is queued).
const float* device_scalar(const char* op, const char* name, const std::optional<at::Tensor>& t, const at::Tensor& ref,
                           std::vector<at::Tensor>& keep) {
  if (!t || !t->defined()) return nullptr;
  TORCH_CHECK(t->numel() == 1, op, ": ", name, " must have one element, got ", t->numel());
  TORCH_CHECK(t->device() == ref.device(), op, ": ", name, " must be on ", ref.device(), ", got ", t->device());
  keep.push_back(t->to(at::kFloat).contiguous());
  return static_cast<const float*>(element_ptr(keep.back()));
}

void launch(const char* op, vnc_optim_config cfg, at::TensorList params, at::TensorList grads, at::TensorList m,
            at::TensorList v, at::TensorList vmax, at::TensorList steps, const std::optional<at::Tensor>& lr_tensor,
            const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  const size_t n = params.size();
  if (n == 0) return;
  auto same_length = [&](at::TensorList l, const char* name, bool optional) {
    TORCH_CHECK(l.size() == n || (optional && l.empty()), op, ": ", name, " has ", l.size(),
                " tensors, expected ", n, " (one per parameter)");
  };
  const bool sgd = cfg.kind == VNC_OPTIM_SGD;
  const char* m_name = sgd ? "momentum_buffer_list" : cfg.kind == VNC_OPTIM_ADAGRAD ? "state_sums" : "exp_avgs";
  same_length(grads, "grads", false);
  same_length(m, m_name, sgd);
  same_length(v, "exp_avg_sqs", sgd || cfg.kind == VNC_OPTIM_ADAGRAD);
  same_length(vmax, "max_exp_avg_sqs", !cfg.amsgrad);
  same_length(steps, "state_steps", sgd);
  TORCH_CHECK(!sgd || cfg.momentum == 0 || !m.empty(), op,
              ": momentum_buffer_list is required when momentum != 0");
  const at::Tensor& ref = params[0];
  record_native(op);
  if (ref.scalar_type() == at::kDouble) warn_float64(op);
  cfg.param_dtype = static_cast<int32_t>(ref.scalar_type());
  cfg.grad_dtype = static_cast<int32_t>(grads[0].scalar_type());
  std::vector<at::Tensor> keep;
  if (lr_tensor) {
    if (lr_tensor->is_cpu()) cfg.lr = lr_tensor->item<double>();
    else cfg.lr_tensor = device_scalar(op, "lr", lr_tensor, ref, keep);
  }
  cfg.grad_scale = device_scalar(op, "grad_scale", grad_scale, ref, keep);
  cfg.found_inf = device_scalar(op, "found_inf", found_inf, ref, keep);

  Operands ops;
  std::vector<vnc_optim_param> list(n);
  for (size_t i = 0; i < n; i++) {
    auto check_like = [&](const at::Tensor& t, const char* name, at::ScalarType dtype) {
      TORCH_CHECK(t.device() == ref.device(), op, ": ", name, "[", i, "] is on ", t.device(), ", expected ", ref.device());
      TORCH_CHECK(t.sizes() == params[i].sizes(), op, ": ", name, "[", i, "] has shape ", t.sizes(), ", expected ",
                  params[i].sizes());
      TORCH_CHECK(t.scalar_type() == dtype, op, ": ", name, "[", i, "] has dtype ", t.scalar_type(), ", expected ",
                  dtype, " (lists are grouped by dtype)");
    };
    check_like(params[i], "params", ref.scalar_type());
    check_like(grads[i], "grads", grads[0].scalar_type());
    vnc_optim_param& q = list[i];
    q.numel = params[i].numel();
    q.param = ops.take(params[i], true);
    q.grad = ops.take(grads[i], cfg.grad_scale != nullptr);
    if (!m.empty()) check_like(m[i], m_name, ref.scalar_type()), q.m = ops.take(m[i], true);
    if (!v.empty()) check_like(v[i], "exp_avg_sqs", ref.scalar_type()), q.v = ops.take(v[i], true);
    if (!vmax.empty() && cfg.amsgrad) check_like(vmax[i], "max_exp_avg_sqs", ref.scalar_type()), q.vmax = ops.take(vmax[i], true);
    if (!steps.empty()) {
      TORCH_CHECK(steps[i].numel() == 1 && steps[i].device() == ref.device(), op, ": state_steps[", i,
                  "] must be a one-element tensor on ", ref.device());
      keep.push_back(steps[i].to(at::kFloat).contiguous());
      q.step = static_cast<const float*>(element_ptr(keep.back()));
    }
  }
  c10::DeviceGuard guard(ref.device());
  check(vnc_fused_optim(stream_of(ref), op, &cfg, static_cast<int64_t>(n), list.data()));
  ops.finish();
}

template <bool decoupled>
void fused_adam(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                at::TensorList max_exp_avg_sqs, at::TensorList state_steps, double lr,
                const std::optional<at::Tensor>& lr_tensor, double beta1, double beta2, double weight_decay, double eps,
                bool amsgrad, bool maximize, const std::optional<at::Tensor>& grad_scale,
                const std::optional<at::Tensor>& found_inf) {
  vnc_optim_config cfg{};
  cfg.kind = decoupled ? VNC_OPTIM_ADAMW : VNC_OPTIM_ADAM;
  cfg.lr = lr, cfg.beta1 = beta1, cfg.beta2 = beta2, cfg.weight_decay = weight_decay, cfg.eps = eps;
  cfg.amsgrad = amsgrad, cfg.maximize = maximize;
  launch(decoupled ? "aten::_fused_adamw_" : "aten::_fused_adam_", cfg, self, grads, exp_avgs, exp_avg_sqs,
         max_exp_avg_sqs, state_steps, lr_tensor, grad_scale, found_inf);
}

template <bool decoupled>
void fused_adam_float_lr(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs, at::TensorList exp_avg_sqs,
                         at::TensorList max_exp_avg_sqs, at::TensorList state_steps, double lr, double beta1,
                         double beta2, double weight_decay, double eps, bool amsgrad, bool maximize,
                         const std::optional<at::Tensor>& grad_scale, const std::optional<at::Tensor>& found_inf) {
  fused_adam<decoupled>(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, std::nullopt, beta1,
                        beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);
}

template <bool decoupled>
void fused_adam_tensor_lr(at::TensorList self, at::TensorList grads, at::TensorList exp_avgs,
                          at::TensorList exp_avg_sqs, at::TensorList max_exp_avg_sqs, at::TensorList state_steps,
                          const at::Tensor& lr, double beta1, double beta2, double weight_decay, double eps,
                          bool amsgrad, bool maximize, const std::optional<at::Tensor>& grad_scale,
                          const std::optional<at::Tensor>& found_inf) {
  fused_adam<decoupled>(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, 0.0, lr, beta1, beta2,
                        weight_decay, eps, amsgrad, maximize, grad_scale, found_inf);
}

void fused_sgd(at::TensorList self, at::TensorList grads, at::TensorList momentum_buffers, double weight_decay,
               double momentum, double lr, const std::optional<at::Tensor>& lr_tensor, double dampening, bool nesterov,
               bool maximize, bool is_first_step, const std::optional<at::Tensor>& grad_scale,
               const std::optional<at::Tensor>& found_inf) {
  vnc_optim_config cfg{};
  cfg.kind = VNC_OPTIM_SGD;
  cfg.lr = lr, cfg.weight_decay = weight_decay, cfg.momentum = momentum, cfg.dampening = dampening;
  cfg.nesterov = nesterov, cfg.maximize = maximize, cfg.first_step = is_first_step;
  launch("aten::_fused_sgd_", cfg, self, grads, momentum != 0 ? momentum_buffers : at::TensorList(), {}, {}, {},
         lr_tensor, grad_scale, found_inf);
}

void fused_sgd_float_lr(at::TensorList self, at::TensorList grads, at::TensorList momentum_buffers, double weight_decay,
                        double momentum, double lr, double dampening, bool nesterov, bool maximize,
                        bool is_first_step, const std::optional<at::Tensor>& grad_scale,
                        const std::optional<at::Tensor>& found_inf) {
  fused_sgd(self, grads, momentum_buffers, weight_decay, momentum, lr, std::nullopt, dampening, nesterov, maximize,
            is_first_step, grad_scale, found_inf);
}

void fused_sgd_tensor_lr(at::TensorList self, at::TensorList grads, at::TensorList momentum_buffers,
                         double weight_decay, double momentum, const at::Tensor& lr, double dampening, bool nesterov,
                         bool maximize, bool is_first_step, const std::optional<at::Tensor>& grad_scale,
                         const std::optional<at::Tensor>& found_inf) {
  fused_sgd(self, grads, momentum_buffers, weight_decay, momentum, 0.0, lr, dampening, nesterov, maximize,
            is_first_step, grad_scale, found_inf);
}

void fused_adagrad(at::TensorList self, at::TensorList grads, at::TensorList state_sums, at::TensorList state_steps,
                   double lr, const std::optional<at::Tensor>& lr_tensor, double lr_decay, double weight_decay,
                   double eps, bool maximize, const std::optional<at::Tensor>& grad_scale,
                   const std::optional<at::Tensor>& found_inf) {
  vnc_optim_config cfg{};
  cfg.kind = VNC_OPTIM_ADAGRAD;
  cfg.lr = lr, cfg.lr_decay = lr_decay, cfg.weight_decay = weight_decay, cfg.eps = eps, cfg.maximize = maximize;
  launch("aten::_fused_adagrad_", cfg, self, grads, state_sums, {}, {}, state_steps, lr_tensor, grad_scale, found_inf);
}

void fused_adagrad_float_lr(at::TensorList self, at::TensorList grads, at::TensorList state_sums,
                            at::TensorList state_steps, double lr, double lr_decay, double weight_decay, double eps,
                            bool maximize, const std::optional<at::Tensor>& grad_scale,
                            const std::optional<at::Tensor>& found_inf) {
  fused_adagrad(self, grads, state_sums, state_steps, lr, std::nullopt, lr_decay, weight_decay, eps, maximize,
                grad_scale, found_inf);
}

void fused_adagrad_tensor_lr(at::TensorList self, at::TensorList grads, at::TensorList state_sums,
                             at::TensorList state_steps, const at::Tensor& lr, double lr_decay, double weight_decay,
                             double eps, bool maximize, const std::optional<at::Tensor>& grad_scale,
                             const std::optional<at::Tensor>& found_inf) {
  fused_adagrad(self, grads, state_sums, state_steps, 0.0, lr, lr_decay, weight_decay, eps, maximize, grad_scale,
                found_inf);
}

}  // namespace

NEURON_LIBRARY_IMPL(m) {
  m.impl("_fused_adam_", TORCH_FN(fused_adam_float_lr<false>));
  m.impl("_fused_adam_.tensor_lr", TORCH_FN(fused_adam_tensor_lr<false>));
  m.impl("_fused_adamw_", TORCH_FN(fused_adam_float_lr<true>));
  m.impl("_fused_adamw_.tensor_lr", TORCH_FN(fused_adam_tensor_lr<true>));
  m.impl("_fused_sgd_", TORCH_FN(fused_sgd_float_lr));
  m.impl("_fused_sgd_.tensor_lr", TORCH_FN(fused_sgd_tensor_lr));
  m.impl("_fused_adagrad_", TORCH_FN(fused_adagrad_float_lr));
  m.impl("_fused_adagrad_.tensor_lr", TORCH_FN(fused_adagrad_tensor_lr));
}

}  // namespace torch_neuronx
