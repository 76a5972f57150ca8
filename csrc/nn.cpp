// Neural-network ops on the neuron key: softmax family, layer norm, NLL loss, regression losses
// (MSE, smooth L1, Huber), margin losses (multi-class, multi-label), CTC loss and log_sigmoid,
// index_select, embedding backward, embedding bags,
// arange, eye, linspace, tril/triu. ATen's meta functions (where they exist) check arguments
// and size outputs; the runtime's vnc/nn.h and vnc/embedding_bag.h kernels compute.
#include "neuron.h"
#include "gate.h"
#include "structured.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/OpMathType.h>
#include <ATen/native/RangeUtils.h>

#include <ATen/ops/_log_softmax_backward_data_meta.h>
#include <ATen/ops/_log_softmax_meta.h>
#include <ATen/ops/_softmax_backward_data_meta.h>
#include <ATen/ops/_softmax_meta.h>
#include <ATen/ops/cat_meta.h>
#include <ATen/ops/nll_loss_backward_meta.h>
#include <ATen/ops/nll_loss_forward_meta.h>
#include <ATen/ops/tril_meta.h>
#include <ATen/ops/triu_meta.h>
#include <torch/library.h>

namespace torch_neuronx {
namespace {

// A contiguous tensor as rows around `dim`.
vnc_rows rows_of(const at::Tensor& t, int64_t dim) {
  TORCH_INTERNAL_ASSERT(t.is_contiguous());
  vnc_rows r{};
  r.data = element_ptr(t);
  r.dtype = static_cast<int32_t>(t.scalar_type());
  r.outer = 1;
  for (int64_t d = 0; d < dim; d++) r.outer *= t.size(d);
  r.n = t.dim() ? t.size(dim) : 1;
  r.inner = 1;
  for (int64_t d = dim + 1; d < t.dim(); d++) r.inner *= t.size(d);
  r.inner_stride = 1;
  r.stride = r.inner;
  r.outer_stride = r.n * r.inner;
  return r;
}

// Runs `body(out)` into `out`, or into a contiguous temporary copied back when out is not (an
// expanded out only reaches here from ops whose CPU kernels write one: copy_written).
template <class F>
void into_contiguous(const at::Tensor& out, F body) {
  if (out.is_contiguous()) return body(out);
  at::Tensor tmp = at::empty(out.sizes(), out.options());
  body(tmp);
  copy_written(out, tmp);
}

template <bool LOG>
struct Softmax {
  template <class M>
  static void run(M&, const at::Tensor& self, int64_t dim, bool, const at::Tensor& out) {
    const char* name = LOG ? "aten::_log_softmax" : "aten::_softmax";
    record_native(name);
    if (self.scalar_type() == at::kDouble) warn_float64(name);
    int64_t d = at::maybe_wrap_dim(dim, self.dim());
    at::Tensor x = self.contiguous();
    into_contiguous(out, [&](const at::Tensor& o) {
      vnc_rows xr = rows_of(x, d), orows = rows_of(o, d);
      c10::DeviceGuard g(o.device());
      check(vnc_softmax(stream_of(o), name, LOG, &xr, &orows));
    });
  }
};

template <bool LOG>
struct SoftmaxBackward {
  template <class M>
  static void run(M&, const at::Tensor& grad, const at::Tensor& output, int64_t dim, at::ScalarType,
                  const at::Tensor& out) {
    const char* name = LOG ? "aten::_log_softmax_backward_data" : "aten::_softmax_backward_data";
    check_same_device(name, out, {&grad, &output});
    record_native(name);
    int64_t d = at::maybe_wrap_dim(dim, grad.dim());
    at::Tensor g = grad.contiguous(), y = output.contiguous();
    into_contiguous(out, [&](const at::Tensor& o) {
      vnc_rows gr = rows_of(g, d), yr = rows_of(y, d), orows = rows_of(o, d);
      c10::DeviceGuard guard(o.device());
      check(vnc_softmax_backward(stream_of(o), name, LOG, &gr, &yr, &orows));
    });
  }
};

// ---------------------------------------------------------------- layer norm

// ATen's argument checks (CPU's messages); the kernels read N weight and bias elements
std::pair<int64_t, int64_t> ln_dims(const at::Tensor& input, at::IntArrayRef normalized_shape,
                                    const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias) {
  TORCH_CHECK(!normalized_shape.empty(), "Expected normalized_shape to be at least 1-dimensional, i.e., containing at "
              "least one element, but got normalized_shape = ", normalized_shape);
  for (const auto* p : {&weight, &bias}) {
    const char* what = p == &weight ? "weight" : "bias";
    TORCH_CHECK(!*p || !(*p)->defined() || (*p)->sizes().equals(normalized_shape), "Expected ", what,
                " to be of same shape as normalized_shape, but got ", what, " of shape ", (*p)->sizes(),
                " and normalized_shape = ", normalized_shape);
  }
  const int64_t axis = input.dim() - static_cast<int64_t>(normalized_shape.size());
  TORCH_CHECK(axis >= 0 && input.sizes().slice(axis).equals(normalized_shape),
              "Given normalized_shape=", normalized_shape, ", expected input with shape [*, ",
              c10::Join(", ", normalized_shape), "], but got input of size", input.sizes());
  int64_t M = 1;
  for (int64_t d = 0; d < axis; d++) M *= input.size(d);
  return {M, c10::multiply_integers(normalized_shape)};
}

at::DimVector stat_shape(const at::Tensor& input, size_t nnorm) {
  at::DimVector s(input.sizes().begin(), input.sizes().end());
  for (size_t i = s.size() - nnorm; i < s.size(); i++) s[i] = 1;
  return s;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm(const at::Tensor& input, c10::SymIntArrayRef shape_sym,
                                                         const std::optional<at::Tensor>& weight,
                                                         const std::optional<at::Tensor>& bias, double eps) {
  auto shape = C10_AS_INTARRAYREF_SLOW(shape_sym);
  auto [M, N] = ln_dims(input, shape, weight, bias);
  const at::Tensor w = weight && weight->defined() ? *weight : at::Tensor();
  const at::Tensor b = bias && bias->defined() ? *bias : at::Tensor();
  bool mixed = (w.defined() && w.scalar_type() != input.scalar_type()) || (b.defined() && b.scalar_type() != input.scalar_type());
  if (mixed) {  // e.g. bfloat16 input, float32 parameters: compute in float32 as ATen's mixed path
    auto [y, mean, rstd] = layer_norm(input.to(at::kFloat), shape_sym, w.defined() ? std::optional<at::Tensor>(w.to(at::kFloat)) : std::nullopt,
                                      b.defined() ? std::optional<at::Tensor>(b.to(at::kFloat)) : std::nullopt, eps);
    return {y.to(input.scalar_type()), mean, rstd};
  }
  check_same_device("aten::native_layer_norm", input, {&w, &b});
  record_native("aten::native_layer_norm");
  if (input.scalar_type() == at::kDouble) warn_float64("aten::native_layer_norm");
  at::Tensor x = input.contiguous();
  at::Tensor y = at::empty(input.sizes(), x.options());
  // mean and rstd in the computation dtype (float32 for 16-bit inputs), as PyTorch's meta
  // function gives for every device but CPU (CUDA does the same): compiled graphs rely on it
  const auto stat_opts = x.options().dtype(at::toOpMathType(x.scalar_type()));
  at::Tensor mean = at::empty(stat_shape(input, shape.size()), stat_opts);
  at::Tensor rstd = at::empty(stat_shape(input, shape.size()), stat_opts);
  at::Tensor wc = w.defined() ? w.contiguous() : w, bc = b.defined() ? b.contiguous() : b;
  c10::DeviceGuard g(input.device());
  auto dt = static_cast<int32_t>(x.scalar_type());
  check(vnc_layer_norm(stream_of(x), "aten::native_layer_norm", M, N, dt, element_ptr(x), wc.defined() ? element_ptr(wc) : nullptr,
                       bc.defined() ? element_ptr(bc) : nullptr, eps, element_ptr(y), element_ptr(mean), element_ptr(rstd),
                       static_cast<int32_t>(mean.scalar_type())));
  return {y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> layer_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, c10::SymIntArrayRef shape_sym, const at::Tensor& mean,
    const at::Tensor& rstd, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    std::array<bool, 3> mask) {
  auto shape = C10_AS_INTARRAYREF_SLOW(shape_sym);
  auto [M, N] = ln_dims(input, shape, weight, bias);
  const at::Tensor w = weight && weight->defined() ? *weight : at::Tensor();
  const at::Tensor b = bias && bias->defined() ? *bias : at::Tensor();
  const bool stats_ok = mean.scalar_type() == input.scalar_type() ||
                        mean.scalar_type() == at::toOpMathType(input.scalar_type());
  if ((w.defined() && w.scalar_type() != input.scalar_type()) || !stats_ok || rstd.scalar_type() != mean.scalar_type()) {
    auto [dx, dw, db] = layer_norm_backward(grad_out.to(at::kFloat), input.to(at::kFloat), shape_sym, mean.to(at::kFloat),
                                            rstd.to(at::kFloat), w.defined() ? std::optional<at::Tensor>(w.to(at::kFloat)) : std::nullopt,
                                            b.defined() ? std::optional<at::Tensor>(b.to(at::kFloat)) : std::nullopt, mask);
    return {dx.defined() ? dx.to(input.scalar_type()) : dx, dw.defined() && w.defined() ? dw.to(w.scalar_type()) : dw,
            db.defined() && b.defined() ? db.to(b.scalar_type()) : db};
  }
  check_same_device("aten::native_layer_norm_backward", input, {&grad_out, &mean, &rstd, &w});
  record_native("aten::native_layer_norm_backward");
  at::Tensor x = input.contiguous(), dy = grad_out.contiguous(), mc = mean.contiguous(), rc = rstd.contiguous();
  at::Tensor wc = w.defined() ? w.contiguous() : w;
  at::Tensor dx = mask[0] ? at::empty(input.sizes(), x.options()) : at::Tensor();
  at::Tensor dw = mask[1] && w.defined() ? at::empty(w.sizes(), x.options()) : at::Tensor();
  at::Tensor db = mask[2] && b.defined() ? at::empty(b.sizes(), x.options()) : at::Tensor();
  c10::DeviceGuard g(input.device());
  auto dt = static_cast<int32_t>(x.scalar_type());
  check(vnc_layer_norm_backward(stream_of(x), "aten::native_layer_norm_backward", M, N, dt, element_ptr(dy), element_ptr(x),
                                element_ptr(mc), element_ptr(rc), static_cast<int32_t>(mc.scalar_type()),
                                wc.defined() ? element_ptr(wc) : nullptr,
                                dx.defined() ? element_ptr(dx) : nullptr, dw.defined() ? element_ptr(dw) : nullptr,
                                db.defined() ? element_ptr(db) : nullptr));
  return {dx, dw, db};
}

// ---------------------------------------------------------------- NLL loss

std::tuple<at::Tensor&, at::Tensor&> nll_loss_forward_out(const at::Tensor& self, const at::Tensor& target,
                                                          const std::optional<at::Tensor>& weight, int64_t reduction,
                                                          int64_t ignore_index, at::Tensor& output, at::Tensor& total_weight) {
  Structured<at::meta::structured_nll_loss_forward, 2> op(Mode::Out, {output, total_weight});
  op.reads = {self, target, weight.value_or(at::Tensor())};
  op.meta(self, target, to_meta(weight), reduction, ignore_index);
  const at::Tensor no_weight;
  check_same_device("aten::nll_loss_forward", self, {&target, weight ? &*weight : &no_weight});
  record_native("aten::nll_loss_forward");
  const int64_t N = self.dim() == 2 ? self.size(0) : 1, C = self.size(self.dim() - 1);
  at::Tensor x = self.contiguous(), t = target.to(at::kLong).contiguous();
  at::Tensor w = weight && weight->defined() ? weight->to(self.scalar_type()).contiguous() : at::Tensor();
  const at::Tensor& out = op.maybe_get_output(0);
  const at::Tensor& tw = op.maybe_get_output(1);
  c10::DeviceGuard g(self.device());
  into_contiguous(out, [&](const at::Tensor& o) {
    check(vnc_nll_loss(stream_of(x), "aten::nll_loss_forward", N, C, static_cast<int32_t>(x.scalar_type()), element_ptr(x),
                       static_cast<const int64_t*>(element_ptr(t)), w.defined() ? element_ptr(w) : nullptr, static_cast<int>(reduction),
                       ignore_index, element_ptr(o), element_ptr(tw)));
  });
  op.finish();
  return {output, total_weight};
}

std::tuple<at::Tensor, at::Tensor> nll_loss_forward(const at::Tensor& self, const at::Tensor& target,
                                                    const std::optional<at::Tensor>& weight, int64_t reduction,
                                                    int64_t ignore_index) {
  at::Tensor out = at::empty({0}, self.options()), tw = at::empty({0}, self.options());
  nll_loss_forward_out(self, target, weight, reduction, ignore_index, out, tw);
  return {out, tw};
}

at::Tensor& nll_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                  const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                                  const at::Tensor& total_weight, at::Tensor& grad_input) {
  Structured<at::meta::structured_nll_loss_backward> op(Mode::Out, {grad_input});
  op.reads = {grad_output, self, target, weight.value_or(at::Tensor()), total_weight};
  op.meta(grad_output, self, target, to_meta(weight), reduction, ignore_index, total_weight);
  const at::Tensor no_weight;
  check_same_device("aten::nll_loss_backward", self, {&grad_output, &target, &total_weight, weight ? &*weight : &no_weight});
  record_native("aten::nll_loss_backward");
  const int64_t N = self.dim() == 2 ? self.size(0) : 1, C = self.size(self.dim() - 1);
  at::Tensor t = target.to(at::kLong).contiguous(), go = grad_output.contiguous();
  at::Tensor w = weight && weight->defined() ? weight->to(self.scalar_type()).contiguous() : at::Tensor();
  at::Tensor tw = total_weight.contiguous();
  c10::DeviceGuard g(self.device());
  into_contiguous(op.maybe_get_output(0), [&](const at::Tensor& gi) {
    check(vnc_nll_loss_backward(stream_of(gi), "aten::nll_loss_backward", N, C, static_cast<int32_t>(gi.scalar_type()),
                                element_ptr(go), go.dim() ? go.stride(0) : 0, static_cast<const int64_t*>(element_ptr(t)),
                                w.defined() ? element_ptr(w) : nullptr, static_cast<int>(reduction), ignore_index, element_ptr(tw),
                                element_ptr(gi)));
  });
  op.finish();
  return grad_input;
}

at::Tensor nll_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                             const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                             const at::Tensor& total_weight) {
  at::Tensor gi = at::empty({0}, self.options());
  return nll_loss_backward_out(grad_output, self, target, weight, reduction, ignore_index, total_weight, gi);
}

// nll_loss2d (cross-entropy over (N, C, d1, ...) inputs, which ATen views as 4-D): the kernel
// above on rows (N*H*W, C), classes last.
at::Tensor class_rows(const at::Tensor& self) { return self.permute({0, 2, 3, 1}).reshape({-1, self.size(1)}); }

void check_nll2d(const at::Tensor& self, const at::Tensor& target) {
  TORCH_CHECK(self.dim() == 4, "only batches of spatial inputs supported (4D tensors), but got input of dimension: ",
              self.dim());
  TORCH_CHECK(target.dim() == 3, "only batches of spatial targets supported (3D tensors) but got targets of dimension: ",
              target.dim());
  TORCH_CHECK(self.size(0) == target.size(0) && self.size(2) == target.size(1) && self.size(3) == target.size(2),
              "size mismatch (got input: ", self.sizes(), " , target: ", target.sizes(), ")");
}

std::tuple<at::Tensor, at::Tensor> nll_loss2d_forward(const at::Tensor& self, const at::Tensor& target,
                                                      const std::optional<at::Tensor>& weight, int64_t reduction,
                                                      int64_t ignore_index) {
  check_nll2d(self, target);
  record_native("aten::nll_loss2d_forward");
  auto [out, tw] = at::nll_loss_forward(class_rows(self), target.reshape({-1}), weight, reduction, ignore_index);
  if (reduction == at::Reduction::None) out = out.view(target.sizes());
  return {out, tw};
}

at::Tensor nll_loss2d_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                               const std::optional<at::Tensor>& weight, int64_t reduction, int64_t ignore_index,
                               const at::Tensor& total_weight) {
  check_nll2d(self, target);
  record_native("aten::nll_loss2d_backward");
  const at::Tensor g = reduction == at::Reduction::None ? grad_output.reshape({-1}) : grad_output;
  at::Tensor gi = at::nll_loss_backward(g, class_rows(self), target.reshape({-1}), weight, reduction, ignore_index, total_weight);
  return gi.view({self.size(0), self.size(2), self.size(3), self.size(1)}).permute({0, 3, 1, 2}).contiguous();
}

// ---------------------------------------------------------------- margin losses

// multi_margin_loss and multilabel_margin_loss with their backward, composed from native ops
// with ATen's formulas (aten/src/ATen/native/LossMulti*.cpp). The targets are read on the
// host for ATen's range checks, as CPU reads them.
at::Tensor reduce_loss(const at::Tensor& l, int64_t reduction);  // with the regression losses below

// The gradient scale of each sample: grad_output expanded (none), or divided by N (mean).
at::Tensor sample_scale(const at::Tensor& grad_output, int64_t N, int64_t reduction) {
  if (reduction == at::Reduction::None) return grad_output.reshape({N, 1});
  return reduction == at::Reduction::Mean ? grad_output.reshape({1, 1}) / static_cast<double>(N)
                                          : grad_output.reshape({1, 1});
}

struct MultiMargin {
  at::Tensor x, t, onehot, z;
  int64_t N, C;
};

MultiMargin multi_margin_setup(const at::Tensor& self, const at::Tensor& target, const at::Scalar& p,
                               const at::Scalar& margin, const std::optional<at::Tensor>& weight, const char* name) {
  const int64_t nd = self.dim();
  TORCH_CHECK((nd == 2 && self.size(1) != 0) || (nd == 1 && self.size(0) != 0) || nd == 0,
              "Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", self.sizes());
  TORCH_CHECK(p.toLong() == 1 || p.toLong() == 2, "only p == 1 and p == 2 supported");
  check_same_device(name, self, {&target});
  MultiMargin m;
  m.x = nd == 2 ? self : self.reshape({1, -1});
  m.N = m.x.size(0);
  m.C = m.x.size(1);
  TORCH_CHECK(target.numel() == m.N && target.dim() <= 1,  // ATen's multi_margin_loss_shape_check
              "multi_margin_loss: target tensor should be 1-D with size equal to the number of input samples (batch "
              "size). Expected target size [", m.N, "], but got ", target.sizes(), ". Input has shape ", self.sizes(), ".");
  TORCH_CHECK(!weight || !weight->defined() || (weight->dim() <= 1 && weight->numel() == m.C),
              "inconsistent weight size, expected ", m.C, " but got ", weight ? weight->sizes() : at::IntArrayRef());
  TORCH_CHECK(target.scalar_type() == at::kLong, "expected scalar type Long but found ", target.scalar_type());
  m.t = target.reshape({m.N, 1}).to(at::kLong);
  if (m.N) TORCH_CHECK(m.t.min().item<int64_t>() >= 0 && m.t.max().item<int64_t>() < m.C, "target out of range");
  m.onehot = at::zeros({m.N, m.C}, self.options().dtype(at::kBool)).scatter_(1, m.t, true);
  m.z = (m.x - m.x.gather(1, m.t) + margin.toDouble()).masked_fill(m.onehot, 0.0);  // margin - x[y] + x[d], d != y
  return m;
}

at::Tensor nx_multi_margin_loss(const at::Tensor& self, const at::Tensor& target, const at::Scalar& p,
                             const at::Scalar& margin, const std::optional<at::Tensor>& weight, int64_t reduction) {
  MultiMargin m = multi_margin_setup(self, target, p, margin, weight, "aten::multi_margin_loss");
  record_native("aten::multi_margin_loss");
  at::Tensor h = m.z.clamp_min(0);
  if (p.toLong() == 2) h = h * h;
  if (weight && weight->defined()) h = h * weight->index_select(0, m.t.view({-1})).unsqueeze(1);
  at::Tensor per_sample = h.sum(1) / static_cast<double>(m.C);
  // CPU's per-sample shape is the target's: (1,) for a 1-D input with a (1,) target, () for a 0-dim one
  if (self.dim() <= 1 && target.dim() == 0 && reduction == at::Reduction::None) per_sample = per_sample.squeeze(0);
  return reduce_loss(per_sample, reduction);
}

at::Tensor& nx_multi_margin_loss_out(const at::Tensor& self, const at::Tensor& target, const at::Scalar& p,
                                  const at::Scalar& margin, const std::optional<at::Tensor>& weight, int64_t reduction,
                                  at::Tensor& out) {
  const at::Tensor r = nx_multi_margin_loss(self, target, p, margin, weight, reduction);
  at::native::resize_output(out, r.sizes());
  copy_written(out, r);  // CPU's kernel writes an expanded out too
  return out;
}

at::Tensor nx_multi_margin_loss_backward(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& target,
                                      const at::Scalar& p, const at::Scalar& margin,
                                      const std::optional<at::Tensor>& weight, int64_t reduction) {
  MultiMargin m = multi_margin_setup(self, target, p, margin, weight, "aten::multi_margin_loss_backward");
  record_native("aten::multi_margin_loss_backward");
  at::Tensor dz = p.toLong() == 2 ? 2 * m.z.clamp_min(0) : m.z.gt(0).to(self.scalar_type());
  dz = dz.masked_fill(m.onehot, 0.0);
  if (weight && weight->defined()) dz = dz * weight->index_select(0, m.t.view({-1})).unsqueeze(1);
  dz = dz * sample_scale(grad_output, m.N, reduction) / static_cast<double>(m.C);
  at::Tensor grad = dz.scatter(1, m.t, -dz.sum(1, /*keepdim=*/true));  // d loss / d x[y] = -sum over d != y
  return grad.view(self.sizes());
}

at::Tensor& nx_multi_margin_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Tensor& target, const at::Scalar& p, const at::Scalar& margin,
                                           const std::optional<at::Tensor>& weight, int64_t reduction,
                                           at::Tensor& grad_input) {
  return result_into("aten::multi_margin_loss_backward.grad_input",
                     nx_multi_margin_loss_backward(grad_output, self, target, p, margin, weight, reduction), grad_input);
}

// multilabel: each target row lists class indices up to its first -1.
struct MultiLabel {
  at::Tensor x, idx, valid, is_target, active;  // active[n, j, k]: target position j vs non-target class k, hinge > 0
  at::Tensor z;
  int64_t N, C;
};

MultiLabel multilabel_setup(const at::Tensor& self, const at::Tensor& target, const char* name) {
  const int64_t nd = self.dim();
  TORCH_CHECK((nd == 2 && self.size(1) != 0) || (nd == 1 && self.size(0) != 0) || nd == 0,
              "Expected non-empty vector or matrix with optional 0-dim batch size, but got: ", self.sizes());
  TORCH_CHECK(target.sizes() == self.sizes(), "inconsistent target size: ", target.sizes(), " for input of size: ",
              self.sizes());
  check_same_device(name, self, {&target});
  MultiLabel m;
  m.x = nd == 2 ? self : self.reshape({1, -1});
  m.N = m.x.size(0);
  m.C = m.x.size(1);
  const at::Tensor t = target.reshape({m.N, m.C}).to(at::kLong);
  if (t.numel()) TORCH_CHECK(t.min().item<int64_t>() >= -1 && t.max().item<int64_t>() < m.C, "argument #2 'target' is out of range");
  m.valid = t.ge(0).to(at::kLong).cumprod(1).to(at::kBool);  // positions before the first -1
  m.idx = t.clamp_min(0);
  m.is_target = at::zeros({m.N, m.C}, self.options())
                    .scatter_add_(1, m.idx, m.valid.to(self.scalar_type()))
                    .gt(0)
                    .to(self.scalar_type());
  const at::Tensor xj = m.x.gather(1, m.idx);  // the target classes' scores, per target position
  m.z = 1.0 - xj.unsqueeze(2) + m.x.unsqueeze(1);  // [n, j, k]
  m.active = m.valid.unsqueeze(2).logical_and(m.is_target.eq(0).unsqueeze(1));
  return m;
}

std::tuple<at::Tensor, at::Tensor> nx_multilabel_margin_loss_forward(const at::Tensor& self, const at::Tensor& target,
                                                                  int64_t reduction) {
  MultiLabel m = multilabel_setup(self, target, "aten::multilabel_margin_loss_forward");
  record_native("aten::multilabel_margin_loss_forward");
  at::Tensor per_sample = (m.z.clamp_min(0) * m.active).sum({1, 2}) / static_cast<double>(m.C);
  if (self.dim() <= 1 && reduction == at::Reduction::None) per_sample = per_sample.squeeze(0);
  return {reduce_loss(per_sample, reduction), m.is_target.view(self.sizes())};
}

std::tuple<at::Tensor&, at::Tensor&> nx_multilabel_margin_loss_forward_out(const at::Tensor& self, const at::Tensor& target,
                                                                        int64_t reduction, at::Tensor& output,
                                                                        at::Tensor& is_target) {
  auto [o, it] = nx_multilabel_margin_loss_forward(self, target, reduction);
  at::native::resize_output(output, o.sizes());
  at::native::resize_output(is_target, it.sizes());
  copy_written(output, o);  // CPU's kernel writes an expanded output too
  is_target.copy_(it);
  return {output, is_target};
}

at::Tensor nx_multilabel_margin_loss_backward(const at::Tensor& grad_output, const at::Tensor& self,
                                           const at::Tensor& target, int64_t reduction, const at::Tensor&) {
  MultiLabel m = multilabel_setup(self, target, "aten::multilabel_margin_loss_backward");
  record_native("aten::multilabel_margin_loss_backward");
  const at::Tensor a = m.z.gt(0).logical_and(m.active).to(self.scalar_type()) / static_cast<double>(m.C);
  // + for each non-target class k, - for each target position j (added to its class)
  at::Tensor grad = a.sum(1);
  grad = grad.scatter_add(1, m.idx, -a.sum(2));
  grad = grad * sample_scale(grad_output, m.N, reduction);
  return grad.view(self.sizes());
}

at::Tensor& nx_multilabel_margin_loss_backward_out(const at::Tensor& grad_output, const at::Tensor& self,
                                                const at::Tensor& target, int64_t reduction, const at::Tensor& is_target,
                                                at::Tensor& grad_input) {
  return result_into("aten::multilabel_margin_loss_backward.grad_input",
                     nx_multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target), grad_input);
}

// ---------------------------------------------------------------- CTC loss

// _ctc_loss and its backward (runtime vnc/ctc.h, ATen's CPU algorithm), with ATen's argument
// checks (LossCTC.cpp). Lengths given as tensors are read on the host, as CPU reads them.
std::vector<int64_t> host_lengths(const at::Tensor& t) {
  TORCH_CHECK(t.dim() <= 1 && at::isIntegralType(t.scalar_type(), false), "ctc_loss: lengths must be a 1-D integer tensor");
  const at::Tensor c = t.to(at::kCPU, at::kLong).contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

vnc_ctc_args ctc_args(const char* name, const at::Tensor& log_probs, const at::Tensor& targets, at::IntArrayRef in_len,
                      at::IntArrayRef tg_len, int64_t blank, int64_t& max_target) {
  check_same_device(name, log_probs, {&targets});
  TORCH_CHECK(log_probs.dim() == 3, name, ": expected log_probs of shape [T, N, C], got ", log_probs.sizes());
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(log_probs.scalar_type()), "\"ctc_loss_cpu\" not implemented for '",
                              log_probs.scalar_type(), "'");
  TORCH_CHECK(targets.scalar_type() == at::kLong || targets.scalar_type() == at::kInt, name,
              ": targets must be int32 or int64, got ", targets.scalar_type());
  const int64_t T = log_probs.size(0), N = log_probs.size(1), C = log_probs.size(2);
  TORCH_CHECK(blank < C && blank >= 0, "blank must be in label range");
  TORCH_CHECK(static_cast<int64_t>(in_len.size()) == N, "input_lengths must be of size batch_size");
  TORCH_CHECK(static_cast<int64_t>(tg_len.size()) == N, "target_lengths must be of size batch_size");
  max_target = 0;
  int64_t total = 0;
  for (int64_t n = 0; n < N; n++) {
    TORCH_CHECK(in_len[n] >= 0, "Expected input_lengths to have value at least 0, but got value ", in_len[n],
                " (while checking arguments for ctc_loss_allocate_outputs)");
    TORCH_CHECK(in_len[n] <= T, "Expected input_lengths to have value at most ", T, ", but got value ", in_len[n],
                " (while checking arguments for ctc_loss_allocate_outputs)");
    TORCH_CHECK(tg_len[n] >= 0, "Expected target_lengths to have value at least 0, but got value ", tg_len[n],
                " (while checking arguments for ctc_loss_allocate_outputs)");
    max_target = std::max(max_target, tg_len[n]);
    total += tg_len[n];
  }
  if (targets.dim() == 1) {
    TORCH_CHECK(targets.size(0) == total, "Expected tensor to have size ", total,
                " at dimension 0, but got size ", targets.size(0), " for argument #2 'targets' (while checking arguments for ctc_loss_allocate_outputs)");
  } else {
    TORCH_CHECK(targets.dim() == 2 && targets.size(0) == N && targets.size(1) >= max_target,
                "Expected tensor to have size at least ", max_target, " at dimension 1, but got size ",
                targets.dim() == 2 ? targets.size(1) : 0, " for argument #2 'targets' (while checking arguments for ctc_loss_allocate_outputs)");
  }
  vnc_ctc_args a{};
  a.log_probs = to_vnc(log_probs);
  a.targets = to_vnc(targets);
  a.input_lengths = in_len.data();
  a.target_lengths = tg_len.data();
  a.blank = blank;
  return a;
}

std::tuple<at::Tensor, at::Tensor> ctc_loss(const at::Tensor& log_probs, const at::Tensor& targets, at::IntArrayRef in_len,
                                            at::IntArrayRef tg_len, int64_t blank, bool) {
  constexpr const char* name = "aten::_ctc_loss";
  int64_t max_target = 0;
  const vnc_ctc_args a = ctc_args(name, log_probs, targets, in_len, tg_len, blank, max_target);
  record_native(name);
  if (log_probs.scalar_type() == at::kDouble) warn_float64(name);
  at::Tensor nll = at::empty({log_probs.size(1)}, log_probs.options());
  at::Tensor log_alpha = at::empty({log_probs.size(1), log_probs.size(0), 2 * max_target + 1}, log_probs.options());
  vnc_tensor nv = to_vnc(nll), lv = to_vnc(log_alpha);
  c10::DeviceGuard g(log_probs.device());
  check(vnc_ctc_loss(stream_of(log_probs), name, &a, &nv, &lv));
  return {nll, log_alpha};
}

std::tuple<at::Tensor, at::Tensor> ctc_loss_tensor(const at::Tensor& log_probs, const at::Tensor& targets,
                                                   const at::Tensor& in_len, const at::Tensor& tg_len, int64_t blank,
                                                   bool zero_infinity) {
  return ctc_loss(log_probs, targets, host_lengths(in_len), host_lengths(tg_len), blank, zero_infinity);
}

at::Tensor ctc_loss_backward(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                             at::IntArrayRef in_len, at::IntArrayRef tg_len, const at::Tensor& nll,
                             const at::Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  constexpr const char* name = "aten::_ctc_loss_backward";
  check_same_device(name, log_probs, {&grad, &nll, &log_alpha});
  int64_t max_target = 0;
  const vnc_ctc_args a = ctc_args(name, log_probs, targets, in_len, tg_len, blank, max_target);
  record_native(name);
  at::Tensor out = at::empty(log_probs.sizes(), log_probs.options());
  vnc_tensor gv = to_vnc(grad), nv = to_vnc(nll), lv = to_vnc(log_alpha), ov = to_vnc(out);
  c10::DeviceGuard g(log_probs.device());
  check(vnc_ctc_loss_backward(stream_of(log_probs), name, &a, &gv, &nv, &lv, zero_infinity, &ov));
  return out;
}

at::Tensor ctc_loss_backward_tensor(const at::Tensor& grad, const at::Tensor& log_probs, const at::Tensor& targets,
                                    const at::Tensor& in_len, const at::Tensor& tg_len, const at::Tensor& nll,
                                    const at::Tensor& log_alpha, int64_t blank, bool zero_infinity) {
  return ctc_loss_backward(grad, log_probs, targets, host_lengths(in_len), host_lengths(tg_len), nll, log_alpha, blank,
                           zero_infinity);
}

// ---------------------------------------------------------------- embedding bags

// _embedding_bag / _embedding_bag_forward_only and the gradients PyTorch's autograd formula
// reaches (_embedding_bag_backward is a composite over _embedding_bag_dense_backward and
// _embedding_bag_per_sample_weights_backward): runtime vnc/embedding_bag.h. The side outputs
// (offset2bag, bag_size, max_indices) are int64 whatever the index dtype; only these kernels
// read them.
vnc_bag_args bag_args(const char* name, const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets,
                      int64_t mode, const at::Tensor& psw, bool include_last_offset, int64_t padding_idx,
                      std::array<at::Tensor, 3>& hold) {
  TORCH_CHECK(indices.scalar_type() == at::kLong || indices.scalar_type() == at::kInt, name,
              ": expected indices of dtype Long or Int, got ", indices.scalar_type());
  TORCH_CHECK(!offsets.defined() || offsets.scalar_type() == at::kLong || offsets.scalar_type() == at::kInt, name,
              ": expected offsets of dtype Long or Int, got ", offsets.scalar_type());
  TORCH_CHECK(indices.dim() == 1, name, ": input has to be a 1D Tensor, but got Tensor of dimension ", indices.dim());
  TORCH_CHECK(!offsets.defined() || offsets.dim() == 1, name, ": offsets has to be a 1D Tensor, but got Tensor of dimension ",
              offsets.dim());
  TORCH_CHECK(weight.dim() == 2, name, ": weight has to be a 2D Tensor, but got Tensor of dimension ", weight.dim());
  TORCH_CHECK(!include_last_offset || !offsets.defined() || offsets.size(0) >= 1,
              "include_last_offset: number of offset should be at least 1");
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(weight.scalar_type()), "\"", name, "\" not implemented for '",
                              c10::toString(weight.scalar_type()), "'");
  TORCH_CHECK(mode >= 0 && mode <= 2, name, ": mode must be 0 (sum), 1 (mean) or 2 (max), got ", mode);
  if (psw.defined()) {
    TORCH_CHECK(mode == 0, name, ": per_sample_weights only supported with mode='sum'");
    TORCH_CHECK(psw.scalar_type() == weight.scalar_type(), name, ": expected per_sample_weights of dtype ",
                weight.scalar_type(), ", got ", psw.scalar_type());
    TORCH_CHECK(psw.dim() == 1 && psw.numel() == indices.numel(), name,
                ": per_sample_weights must have the same shape as the input, got ", psw.sizes(), " and ", indices.sizes());
  }
  // indices and offsets in one dtype (ATen promotes int32 + int64 to int64)
  const bool wide = indices.scalar_type() == at::kLong || (offsets.defined() && offsets.scalar_type() == at::kLong);
  hold[0] = wide ? indices.to(at::kLong) : indices;
  hold[1] = offsets.defined() ? (wide ? offsets.to(at::kLong) : offsets) : offsets;
  hold[2] = psw;
  vnc_bag_args a{};
  a.weight = to_vnc(weight);
  a.indices = to_vnc(hold[0]);
  if (hold[1].defined()) a.offsets = to_vnc(hold[1]);
  a.mode = static_cast<vnc_bag_mode>(mode);
  a.include_last_offset = include_last_offset;
  a.padding_idx = padding_idx;
  return a;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> embedding_bag_impl(
    const char* name, const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets,
    int64_t mode, const std::optional<at::Tensor>& psw_opt, bool include_last_offset, int64_t padding_idx) {
  const at::Tensor psw = psw_opt.value_or(at::Tensor());
  check_same_device(name, weight, {&indices, &offsets, &psw});
  std::array<at::Tensor, 3> hold;
  vnc_bag_args a = bag_args(name, weight, indices, offsets, mode, psw, include_last_offset, padding_idx, hold);
  vnc_tensor pv = psw.defined() ? to_vnc(psw) : vnc_tensor{};
  a.per_sample_weights = psw.defined() ? &pv : nullptr;
  record_native(name);
  if (weight.scalar_type() == at::kDouble) warn_float64(name);
  const int64_t bags = include_last_offset ? std::max<int64_t>(offsets.size(0) - 1, 0) : offsets.size(0);
  const auto long_opts = weight.options().dtype(at::kLong);
  at::Tensor out = at::empty({bags, weight.size(1)}, weight.options());
  at::Tensor offset2bag = at::empty({indices.numel()}, long_opts), bag_size = at::empty({bags}, long_opts);
  at::Tensor max_indices = mode == 2 ? at::empty({bags, weight.size(1)}, long_opts) : at::empty({bags}, long_opts).zero_();
  vnc_tensor ov = to_vnc(out), o2b = to_vnc(offset2bag), bs = to_vnc(bag_size), mi = to_vnc(max_indices);
  c10::DeviceGuard g(weight.device());
  check(vnc_embedding_bag(stream_of(weight), name, &a, &ov, &o2b, &bs, mode == 2 ? &mi : nullptr));
  return {out, offset2bag, bag_size, max_indices};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> embedding_bag(
    const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets, bool, int64_t mode, bool sparse,
    const std::optional<at::Tensor>& psw, bool include_last_offset, int64_t padding_idx) {
  return embedding_bag_impl("aten::_embedding_bag", weight, indices, offsets, mode, psw, include_last_offset, padding_idx);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> embedding_bag_forward_only(
    const at::Tensor& weight, const at::Tensor& indices, const at::Tensor& offsets, bool, int64_t mode, bool,
    const std::optional<at::Tensor>& psw, bool include_last_offset, int64_t padding_idx) {
  return embedding_bag_impl("aten::_embedding_bag_forward_only", weight, indices, offsets, mode, psw,
                            include_last_offset, padding_idx);
}

at::Tensor embedding_bag_dense_backward(const at::Tensor& grad, const at::Tensor& indices, const at::Tensor& offset2bag,
                                        const at::Tensor& bag_size, const at::Tensor& max_indices,
                                        c10::SymInt num_weights, bool scale_grad_by_freq, int64_t mode,
                                        const std::optional<at::Tensor>& psw_opt, int64_t padding_idx) {
  constexpr const char* name = "aten::_embedding_bag_dense_backward";
  const at::Tensor psw = psw_opt.value_or(at::Tensor());
  check_same_device(name, grad, {&indices, &offset2bag, &bag_size, &max_indices, &psw});
  TORCH_CHECK(grad.dim() == 2, name, ": expected a 2-D gradient, got ", grad.sizes());
  const int64_t nw = num_weights.expect_int();
  // a weight of the right shape and dtype for the argument checks (the kernel reads no values)
  at::Tensor gw = at::empty({nw, grad.size(1)}, grad.options());
  std::array<at::Tensor, 3> hold;
  vnc_bag_args a = bag_args(name, gw, indices, at::Tensor(), mode, psw, false, padding_idx, hold);
  vnc_tensor pv = psw.defined() ? to_vnc(psw) : vnc_tensor{};
  a.per_sample_weights = psw.defined() ? &pv : nullptr;
  record_native(name);
  const at::Tensor o2b = offset2bag.to(at::kLong), bs = bag_size.to(at::kLong), mi = max_indices.to(at::kLong);
  vnc_tensor gv = to_vnc(grad), o2bv = to_vnc(o2b), bsv = to_vnc(bs), miv = to_vnc(mi), gwv = to_vnc(gw);
  c10::DeviceGuard g(grad.device());
  check(vnc_embedding_bag_backward(stream_of(grad), name, &a, &gv, &o2bv, &bsv, mode == 2 ? &miv : nullptr,
                                   scale_grad_by_freq, &gwv));
  return gw;
}

// The weight gradient autograd asks for: dense only (sparse tensors do not exist on neuron).
at::Tensor embedding_bag_backward(const at::Tensor& grad, const at::Tensor& indices, const at::Tensor& offsets,
                                  const at::Tensor& offset2bag, const at::Tensor& bag_size,
                                  const at::Tensor& max_indices, c10::SymInt num_weights, bool scale_grad_by_freq,
                                  int64_t mode, bool sparse, const std::optional<at::Tensor>& psw,
                                  int64_t padding_idx) {
  TORCH_CHECK_NOT_IMPLEMENTED(!sparse, "aten::_embedding_bag_backward: sparse gradients are not supported on neuron "
                                       "(dense tensors only); nn.EmbeddingBag needs sparse=False.");
  return embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, max_indices, std::move(num_weights),
                                      scale_grad_by_freq, mode, psw, padding_idx);
}

at::Tensor embedding_bag_psw_backward(const at::Tensor& grad, const at::Tensor& weight, const at::Tensor& indices,
                                      const at::Tensor& offsets, const at::Tensor& offset2bag, int64_t mode,
                                      int64_t padding_idx) {
  constexpr const char* name = "aten::_embedding_bag_per_sample_weights_backward";
  check_same_device(name, grad, {&weight, &indices, &offsets, &offset2bag});
  TORCH_CHECK(mode == 0, "embedding_bag_backward: per_sample_weights only supported for mode='sum'");
  TORCH_CHECK(grad.dim() == 2 && grad.size(1) == weight.size(1), name, ": expected a gradient of shape [bags, ",
              weight.size(1), "], got ", grad.sizes());
  std::array<at::Tensor, 3> hold;
  vnc_bag_args a = bag_args(name, weight, indices, offsets, mode, at::Tensor(), false, padding_idx, hold);
  record_native(name);
  at::Tensor out = at::empty({indices.numel()}, weight.options());
  const at::Tensor o2b = offset2bag.to(at::kLong);
  vnc_tensor gv = to_vnc(grad), o2bv = to_vnc(o2b), ov = to_vnc(out);
  c10::DeviceGuard g(grad.device());
  check(vnc_embedding_bag_psw_backward(stream_of(grad), name, &a, &gv, &o2bv, &ov));
  return out;
}

// ---------------------------------------------------------------- index_select / embedding backward

at::Tensor& index_select_out(const at::Tensor& self, int64_t dim, const at::Tensor& index, at::Tensor& out) {
  // ATen's checks, in its order; like CUDA's kernel, index and out must be on self's device
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_select(): Index is supposed to be a vector");
  TORCH_CHECK(self.dim() > 0 || index.numel() == 1, "index_select(): Index to scalar can have only 1 value, got ",
              index.numel(), " value(s)");
  TORCH_CHECK(index.scalar_type() == at::kLong || index.scalar_type() == at::kInt,
              "index_select(): Expected dtype int32 or int64 for index");
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "index_select(): self and result must have the same scalar type");
  check_same_device("aten::index_select", self, {&index});
  check_select_out("aten::index_select", self, index, out);
  int64_t d = at::maybe_wrap_dim(dim, self.dim());
  TORCH_CHECK(self.dim() == 0 || self.size(d) > 0 || index.numel() == 0,
              "index_select(): self indexing axis dim should be positive");
  record_native("aten::index_select");
  at::Tensor idx = index.to(self.device()).contiguous().reshape(-1);
  at::DimVector shape(self.sizes().begin(), self.sizes().end());
  if (self.dim() > 0) shape[d] = idx.numel();
  at::native::resize_output(out, shape);
  at::Tensor src = self.dim() ? self.contiguous() : self.reshape({1});
  into_contiguous(out, [&](const at::Tensor& o) {
    vnc_rows s = rows_of(src, self.dim() ? d : 0), dst = rows_of(self.dim() ? o : o.reshape({1}), self.dim() ? d : 0);
    c10::DeviceGuard g(self.device());
    check(vnc_index_select(stream_of(src), "aten::index_select", &s, element_ptr(idx), static_cast<int32_t>(idx.scalar_type()), 1,
                           idx.numel(), self.dim() ? d : 0, &dst));
  });
  return out;
}

at::Tensor index_select(const at::Tensor& self, int64_t dim, const at::Tensor& index) {
  at::Tensor out = at::empty({0}, self.options());
  return index_select_out(self, dim, index, out);
}

at::Tensor embedding_dense_backward(const at::Tensor& grad_output, const at::Tensor& indices, c10::SymInt num_weights,
                                    c10::SymInt padding_idx, bool scale_grad_by_freq) {
  check_same_device("aten::embedding_dense_backward", grad_output, {&indices});
  record_native("aten::embedding_dense_backward");
  const int64_t nw = num_weights.expect_int(), D = grad_output.size(grad_output.dim() - 1);
  at::Tensor idx = indices.contiguous().reshape(-1);
  at::Tensor g = grad_output.contiguous().reshape({idx.numel(), D});
  at::Tensor out = at::empty({nw, D}, grad_output.options());
  vnc_rows dst = rows_of(out, 0), src = rows_of(g, 0);
  c10::DeviceGuard guard(out.device());
  check(vnc_index_add_rows(stream_of(out), "aten::embedding_dense_backward", &dst, element_ptr(idx),
                           static_cast<int32_t>(idx.scalar_type()), idx.numel(), &src, padding_idx.expect_int(),
                           scale_grad_by_freq, 1));
  return out;
}

// ---------------------------------------------------------------- regression losses, log_sigmoid
// Compositions of native elementwise ops and reductions with ATen's formulas (forward and
// the backward ops autograd calls), so these losses train without a fallback.

at::Tensor reduce_loss(const at::Tensor& l, int64_t reduction) {
  if (reduction == at::Reduction::Mean) return l.mean();
  if (reduction == at::Reduction::Sum) return l.sum();
  return l;
}
double loss_norm(const at::Tensor& self, int64_t reduction) {
  return reduction == at::Reduction::Mean ? 1.0 / static_cast<double>(self.numel()) : 1.0;
}
void check_loss_inputs(const char* op, const at::Tensor& self, const at::Tensor& target) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) && at::isFloatingType(target.scalar_type()), op,
              ": expected floating point input and target, got ", self.scalar_type(), " and ", target.scalar_type());
  check_same_device(op, self, {&target});
}

at::Tensor nx_mse_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  check_loss_inputs("aten::mse_loss", self, target);
  record_native("aten::mse_loss");
  const at::Tensor d = at::sub(self, target);
  if (reduction != at::Reduction::None) return reduce_loss(at::mul(d, d), reduction);
  at::Tensor out = empty_like_iter({self, target}, d.scalar_type());  // CPU's (input, target) iterator
  return at::mul_out(out, d, d);
}
at::Tensor& nx_mse_loss_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, at::Tensor& out) {
  return result_into("aten::mse_loss.out", nx_mse_loss(self, target, reduction), out);
}
at::Tensor nx_mse_loss_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target, int64_t reduction) {
  check_loss_inputs("aten::mse_loss_backward", self, target);
  record_native("aten::mse_loss_backward");
  return at::mul(at::mul(at::sub(self, target), 2.0 * loss_norm(self, reduction)), grad);
}
at::Tensor& nx_mse_loss_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                  int64_t reduction, at::Tensor& out) {
  return result_into("aten::mse_loss_backward.grad_input", nx_mse_loss_backward(grad, self, target, reduction), out);
}

// smooth L1 (beta) and Huber (delta): quadratic below the threshold, linear above.
at::Tensor nx_smooth_l1_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double beta) {
  check_loss_inputs("aten::smooth_l1_loss", self, target);
  TORCH_CHECK(beta >= 0, "smooth_l1_loss does not support negative values for beta.");
  record_native("aten::smooth_l1_loss");
  const at::Tensor z = at::abs(at::sub(self, target));
  const at::Tensor l = beta == 0 ? z : at::where(z < beta, at::div(at::mul(at::mul(z, 0.5), z), beta), at::sub(z, 0.5 * beta));
  if (reduction != at::Reduction::None) return reduce_loss(l, reduction);
  return laid_out_as(l, empty_like_iter({self, target}, l.scalar_type()));  // CPU's (input, target) iterator
}
at::Tensor& nx_smooth_l1_loss_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double beta,
                               at::Tensor& out) {
  return result_into("aten::smooth_l1_loss.out", nx_smooth_l1_loss(self, target, reduction, beta), out);
}
at::Tensor& nx_smooth_l1_loss_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                        int64_t reduction, double beta, at::Tensor& out) {
  check_loss_inputs("aten::smooth_l1_loss_backward", self, target);
  record_native("aten::smooth_l1_loss_backward");
  const double norm = loss_norm(self, reduction);
  const at::Tensor x = at::sub(self, target), g = grad.expand_as(x);
  const at::Tensor inner = beta == 0 ? at::zeros_like(x) : at::div(at::mul(at::mul(x, norm), g), beta);
  return result_into("aten::smooth_l1_loss_backward.grad_input", at::where(x <= -beta, at::mul(g, -norm), at::where(x >= beta, at::mul(g, norm), inner)), out);
}

at::Tensor nx_huber_loss(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta) {
  check_loss_inputs("aten::huber_loss", self, target);
  TORCH_CHECK(delta > 0, "huber_loss does not support non-positive values for delta.");
  record_native("aten::huber_loss");
  const at::Tensor z = at::abs(at::sub(self, target));
  const at::Tensor l = at::where(z < delta, at::mul(at::mul(z, 0.5), z), at::mul(at::sub(z, 0.5 * delta), delta));
  if (reduction != at::Reduction::None) return reduce_loss(l, reduction);
  return laid_out_as(l, at::empty_like(self));  // CPU's loss = empty_like(input)
}
at::Tensor& nx_huber_loss_out(const at::Tensor& self, const at::Tensor& target, int64_t reduction, double delta,
                           at::Tensor& out) {
  return result_into("aten::huber_loss.out", nx_huber_loss(self, target, reduction, delta), out);
}
at::Tensor& nx_huber_loss_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                    int64_t reduction, double delta, at::Tensor& out) {
  check_loss_inputs("aten::huber_loss_backward", self, target);
  record_native("aten::huber_loss_backward");
  const double norm = loss_norm(self, reduction);
  const at::Tensor x = at::sub(self, target), g = grad.expand_as(x);
  return result_into("aten::huber_loss_backward.out", at::where(x <= -delta, at::mul(g, -norm * delta),
                          at::where(x >= delta, at::mul(g, norm * delta), at::mul(at::mul(x, norm), g))),
                     out);
}

// binary cross-entropy on probabilities, ATen's formula (logs clamped at -100; the gradient's
// denominator at 1e-12). Inputs or targets outside [0, 1] raise, as on CPU (host reads of two
// flags).
at::Tensor nx_binary_cross_entropy(const at::Tensor& self, const at::Tensor& target,
                                   const std::optional<at::Tensor>& weight, int64_t reduction) {
  check_loss_inputs("aten::binary_cross_entropy", self, target);
  record_native("aten::binary_cross_entropy");
  TORCH_CHECK(at::logical_and(at::ge(self, 0), at::le(self, 1)).all().item<bool>(),
              "all elements of input should be between 0 and 1");
  TORCH_CHECK(at::logical_and(at::ge(target, 0), at::le(target, 1)).all().item<bool>(),
              "all elements of target should be between 0 and 1");
  at::Tensor l = at::sub(at::mul(at::sub(target, 1), at::clamp_min(at::log1p(at::neg(self)), -100)),
                         at::mul(target, at::clamp_min(at::log(self), -100)));
  if (weight && weight->defined()) l = at::mul(l, *weight);
  if (reduction != at::Reduction::None) return reduce_loss(l, reduction);
  return laid_out_as(l, at::empty_like(self));  // CPU's loss = empty_like(input)
}
at::Tensor nx_binary_cross_entropy_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& target,
                                            const std::optional<at::Tensor>& weight, int64_t reduction) {
  check_loss_inputs("aten::binary_cross_entropy_backward", self, target);
  record_native("aten::binary_cross_entropy_backward");
  at::Tensor g = at::div(at::mul(grad, at::sub(self, target)), at::clamp_min(at::mul(at::rsub(self, 1), self), 1e-12));
  if (weight && weight->defined()) g = at::mul(g, *weight);
  if (reduction == at::Reduction::Mean) g = at::div(g, static_cast<double>(self.numel()));
  return g;
}

// log_sigmoid(x) = min(x, 0) - log1p(exp(-|x|)); the buffer output is unused (empty, as CUDA).
std::tuple<at::Tensor, at::Tensor> nx_log_sigmoid_forward(const at::Tensor& self) {
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "log_sigmoid_forward: expected a floating point input, got ",
              self.scalar_type());
  record_native("aten::log_sigmoid_forward");
  at::Tensor out = at::sub(at::clamp_max(self, 0), at::log1p(at::exp(at::neg(at::abs(self)))));
  return {out, at::empty({0}, self.options())};
}
std::tuple<at::Tensor&, at::Tensor&> nx_log_sigmoid_forward_out(const at::Tensor& self, at::Tensor& out, at::Tensor& buffer) {
  auto [o, b] = nx_log_sigmoid_forward(self);
  result_into("aten::log_sigmoid_forward.output", o, out);
  at::native::resize_output(buffer, {0});
  return {out, buffer};
}
at::Tensor nx_log_sigmoid_backward(const at::Tensor& grad, const at::Tensor& self, const at::Tensor&) {
  record_native("aten::log_sigmoid_backward");
  const at::Tensor neg = self < 0, z = at::exp(at::neg(at::abs(self)));
  const at::Tensor max_deriv = neg.to(self.scalar_type()), sign = at::where(neg, 1.0, -1.0).to(self.scalar_type());
  return at::mul(grad, at::sub(max_deriv, at::mul(sign, at::div(z, at::add(z, 1)))));
}
at::Tensor& nx_log_sigmoid_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Tensor& buffer,
                                     at::Tensor& out) {
  return result_into("aten::log_sigmoid_backward.grad_input", nx_log_sigmoid_backward(grad, self, buffer), out);
}

// ---------------------------------------------------------------- fused LSTM / GRU cells
// nn.LSTM / nn.GRU on any non-CPU device call these fused cells (CUDA's kernels); composed
// here from native ops with the same gate order and workspace layout, so autograd's backward
// formulas (which read the workspace) apply unchanged.

at::Tensor gates_with_bias(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                           const std::optional<at::Tensor>& input_bias, const std::optional<at::Tensor>& hidden_bias) {
  at::Tensor g = at::add(input_gates, hidden_gates);
  if (input_bias && input_bias->defined()) g = at::add(g, *input_bias);
  if (hidden_bias && hidden_bias->defined()) g = at::add(g, *hidden_bias);
  return g;
}

// gates (i, f, g, o): cy = f*cx + i*g, hy = o*tanh(cy); workspace = activated gates [N, 4H].
std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell(const at::Tensor& input_gates,
                                                               const at::Tensor& hidden_gates, const at::Tensor& cx,
                                                               const std::optional<at::Tensor>& input_bias,
                                                               const std::optional<at::Tensor>& hidden_bias) {
  record_native("aten::_thnn_fused_lstm_cell");
  auto c = gates_with_bias(input_gates, hidden_gates, input_bias, hidden_bias).chunk(4, 1);
  const at::Tensor i = at::sigmoid(c[0]), f = at::sigmoid(c[1]), g = at::tanh(c[2]), o = at::sigmoid(c[3]);
  at::Tensor cy = at::add(at::mul(f, cx), at::mul(i, g));
  at::Tensor hy = at::mul(o, at::tanh(cy));
  return {hy, cy, at::cat({i, f, g, o}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> fused_lstm_cell_backward(const std::optional<at::Tensor>& grad_hy,
                                                                        const std::optional<at::Tensor>& grad_cy,
                                                                        const at::Tensor& cx, const at::Tensor& cy,
                                                                        const at::Tensor& workspace, bool has_bias) {
  record_native("aten::_thnn_fused_lstm_cell_backward_impl");
  auto w = workspace.chunk(4, 1);
  const at::Tensor &i = w[0], &f = w[1], &g = w[2], &o = w[3];
  const at::Tensor ghy = grad_hy && grad_hy->defined() ? *grad_hy : at::zeros_like(cy);
  const at::Tensor tcy = at::tanh(cy);
  at::Tensor gcy = at::mul(at::mul(ghy, o), at::rsub(at::mul(tcy, tcy), 1));
  if (grad_cy && grad_cy->defined()) gcy = at::add(gcy, *grad_cy);
  const at::Tensor d_i = at::mul(at::mul(gcy, g), at::mul(i, at::rsub(i, 1)));
  const at::Tensor d_f = at::mul(at::mul(gcy, cx), at::mul(f, at::rsub(f, 1)));
  const at::Tensor d_g = at::mul(at::mul(gcy, i), at::rsub(at::mul(g, g), 1));
  const at::Tensor d_o = at::mul(at::mul(ghy, tcy), at::mul(o, at::rsub(o, 1)));
  at::Tensor grad_gates = at::cat({d_i, d_f, d_g, d_o}, 1);
  return {grad_gates, at::mul(gcy, f), has_bias ? grad_gates.sum(0) : at::Tensor()};
}

// gates (r, z, n): n = tanh(in + r*hn), hy = n + z*(hx - n); workspace = [r, z, n, hx, hn].
std::tuple<at::Tensor, at::Tensor> fused_gru_cell(const at::Tensor& input_gates, const at::Tensor& hidden_gates,
                                                  const at::Tensor& hx, const std::optional<at::Tensor>& input_bias,
                                                  const std::optional<at::Tensor>& hidden_bias) {
  record_native("aten::_thnn_fused_gru_cell");
  at::Tensor ig = input_gates, hg = hidden_gates;
  if (input_bias && input_bias->defined()) ig = at::add(ig, *input_bias);
  if (hidden_bias && hidden_bias->defined()) hg = at::add(hg, *hidden_bias);
  auto a = ig.chunk(3, 1), b = hg.chunk(3, 1);
  const at::Tensor r = at::sigmoid(at::add(a[0], b[0])), z = at::sigmoid(at::add(a[1], b[1]));
  const at::Tensor n = at::tanh(at::add(a[2], at::mul(r, b[2])));
  at::Tensor hy = at::add(n, at::mul(z, at::sub(hx, n)));
  return {hy, at::cat({r, z, n, hx, b[2]}, 1)};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor, at::Tensor> fused_gru_cell_backward(
    const at::Tensor& grad_hy, const at::Tensor& workspace, bool has_bias) {
  record_native("aten::_thnn_fused_gru_cell_backward");
  auto w = workspace.chunk(5, 1);
  const at::Tensor &r = w[0], &z = w[1], &n = w[2], &hx = w[3], &hn = w[4];
  const at::Tensor d_hx = at::mul(grad_hy, z);
  const at::Tensor d_z = at::mul(at::mul(grad_hy, at::sub(hx, n)), at::mul(z, at::rsub(z, 1)));
  const at::Tensor d_n = at::mul(at::mul(grad_hy, at::rsub(z, 1)), at::rsub(at::mul(n, n), 1));
  const at::Tensor d_r = at::mul(at::mul(d_n, hn), at::mul(r, at::rsub(r, 1)));
  at::Tensor grad_input = at::cat({d_r, d_z, d_n}, 1), grad_hidden = at::cat({d_r, d_z, at::mul(d_n, r)}, 1);
  return {grad_input, grad_hidden, d_hx, has_bias ? grad_input.sum(0) : at::Tensor(),
          has_bias ? grad_hidden.sum(0) : at::Tensor()};
}

// ---------------------------------------------------------------- arange, tril/triu

at::Tensor& arange_out(const at::Scalar& start, const at::Scalar& end, const at::Scalar& step, at::Tensor& out) {
  NEURON_CHECK_SUPPORTED(out.scalar_type() != at::kBool && !out.is_complex(), "arange of ", out.scalar_type(),
                         " is not natively supported on neuron");  // CPU refuses those
  record_native("aten::arange");
  const double s = start.toDouble(), st = step.toDouble();
  // ATen's own sizing and checks: int64 ranges sized in exact int64 arithmetic (ValueError for
  // a step that truncates to 0), others in double; "invalid size" where the length overflows.
  const int64_t n = out.scalar_type() == at::kLong ? at::native::compute_arange_size<int64_t>(start, end, step)
                                                   : at::native::compute_arange_size<double>(start, end, step);
  if (out.numel() != n) {  // ATen's arange_out: its own warning (not resize_output's), then resize_
    if (out.numel() > 0)
      TORCH_WARN("The number of elements in the out tensor of shape ", out.sizes(), " is ", out.numel(),
                 " which does not match the computed number of elements ", n,
                 ". Note that this may occur as a result of rounding error. "
                 "The out tensor will be resized to a tensor of shape (", n, ",).");
    out.resize_({n});
  }
  at::assert_no_internal_overlap(out);  // as CPU's kernel (a TensorIterator)
  vnc_tensor t = to_vnc(out);
  c10::DeviceGuard g(out.device());
  check(vnc_arange(stream_of(out), "aten::arange", &t, s, st, start.toLong(), step.toLong()));
  return out;
}

// eye: zeros with ones on the main diagonal (fill_ of the diagonal view).
at::Tensor& eye_m_out(int64_t n, int64_t m, at::Tensor& out) {
  TORCH_CHECK(n >= 0, "n must be greater or equal to 0, got ", n);
  TORCH_CHECK(m >= 0, "m must be greater or equal to 0, got ", m);
  record_native("aten::eye");
  at::native::resize_output(out, {n, m});
  out.zero_();
  if (n > 0 && m > 0) out.diagonal().fill_(1);
  return out;
}
at::Tensor& eye_out(int64_t n, at::Tensor& out) { return eye_m_out(n, n, out); }
at::Tensor eye_m(int64_t n, int64_t m, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                 std::optional<at::Device> device, std::optional<bool> pin_memory) {
  at::Tensor out = at::empty({0}, at::TensorOptions().dtype(dtype).layout(layout).device(device).pinned_memory(pin_memory));
  return at::eye_outf(n, m, out);  // through the dtype gate: dtypes CPU refuses take its refusal
}
at::Tensor eye(int64_t n, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
               std::optional<at::Device> device, std::optional<bool> pin_memory) {
  return eye_m(n, n, dtype, layout, device, pin_memory);
}

// linspace with ATen's formula: start + step*i for the first half, end - step*(steps-1-i) for
// the rest (so both ends are exact), computed in float32 on the device.
at::Tensor& linspace_out(const at::Scalar& start, const at::Scalar& end, int64_t steps, at::Tensor& out) {
  TORCH_CHECK(steps >= 0, "number of steps must be non-negative");
  // Complex outputs take the visible CPU fallback.
  NEURON_CHECK_SUPPORTED(!out.is_complex(), "linspace with a ", out.scalar_type(),
                         " output is not natively supported on neuron");
  record_native("aten::linspace");
  if (out.numel() != steps) at::native::resize_output(out, {steps});
  at::assert_no_internal_overlap(out);  // CPU computes a non-contiguous out in a copy, copied back
  if (steps == 0) return out;
  if (steps == 1) return out.fill_(start);
  if (at::isIntegralType(out.scalar_type(), true)) {
    // As ATen: bounds converted to the integer dtype, the step and each value in double,
    // truncated on store (a float32 computation would differ at integer boundaries).
    double s = 0, e = 0;
    AT_DISPATCH_INTEGRAL_TYPES(out.scalar_type(), "linspace", [&] {
      s = static_cast<double>(start.to<scalar_t>());
      e = static_cast<double>(end.to<scalar_t>());
    });
    vnc_tensor t = to_vnc(out);
    c10::DeviceGuard g(out.device());
    check(vnc_linspace(stream_of(out), "aten::linspace", &t, s, e, steps));
    return out;
  }
  // As ATen: bounds and step in the output dtype, every product and sum in it too.
  const at::ScalarType dt = out.scalar_type();
  double s = 0, e = 0, step = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, dt, "linspace", [&] {
    const scalar_t a = start.to<scalar_t>(), b = end.to<scalar_t>();
    s = static_cast<double>(a), e = static_cast<double>(b);
    step = static_cast<double>(static_cast<scalar_t>((b - a) / static_cast<scalar_t>(steps - 1)));
  });
  const at::Tensor idx = at::arange(steps, out.options());
  const at::Tensor lo = at::add(at::mul(idx, step), s);
  const at::Tensor hi = at::rsub(at::mul(at::rsub(idx, static_cast<double>(steps - 1)), step), e);
  out.copy_(at::where(idx < static_cast<double>(steps / 2), lo, hi));
  return out;
}
at::Tensor linspace(const at::Scalar& start, const at::Scalar& end, int64_t steps, std::optional<at::ScalarType> dtype,
                    std::optional<at::Layout> layout, std::optional<at::Device> device, std::optional<bool> pin_memory) {
  // ATen's inference: the default dtype, its complex counterpart for a complex endpoint
  const at::ScalarType dflt = c10::typeMetaToScalarType(at::get_default_dtype());
  const at::ScalarType dt = dtype ? *dtype : start.isComplex() || end.isComplex() ? c10::toComplexType(dflt) : dflt;
  at::Tensor out = at::empty({0}, at::TensorOptions().dtype(dt).layout(layout).device(device).pinned_memory(pin_memory));
  return linspace_out(start, end, steps, out);
}

template <bool UPPER>
struct Tri {
  template <class M>
  static void run(M&, const at::Tensor& self, int64_t diagonal, const at::Tensor& out) {
    const char* name = UPPER ? "aten::triu" : "aten::tril";
    record_native(name);
    vnc_tensor s = to_vnc(self), o = to_vnc(out);
    c10::DeviceGuard g(out.device());
    check(vnc_tri(stream_of(out), name, &s, &o, UPPER, diagonal));
  }
};

// cat: ATen's meta sizes the output (and checks shapes, dtypes, devices); each input is
// then one stream-ordered copy into its slice of the output.
void cat_into(const at::ITensorListRef& tensors, int64_t dim, const at::Tensor& out) {
  for (const at::Tensor& t : tensors) check_same_device("aten::cat", out, {&t});
  record_native("aten::cat");
  int64_t offset = 0;
  for (const at::Tensor& t : tensors) {
    if (t.dim() == 1 && t.size(0) == 0 && out.dim() != 1) continue;  // legacy empty inputs
    int64_t n = t.size(dim);
    if (n) out.narrow(dim, offset, n).copy_(t);
    offset += n;
  }
}

at::Tensor& cat_out(const at::ITensorListRef& tensors, int64_t dim, at::Tensor& out) {
  Structured<at::meta::structured_cat> op(Mode::Out, {out});
  auto pre = op.meta(tensors, dim);
  cat_into(tensors, pre.dim, op.maybe_get_output(0));
  op.finish();
  return out;
}

at::Tensor cat(const at::ITensorListRef& tensors, int64_t dim) {
  Structured<at::meta::structured_cat> op(Mode::Functional);
  auto pre = op.meta(tensors, dim);
  cat_into(tensors, pre.dim, op.maybe_get_output(0));
  return std::move(op.outs[0]);
}

// native_dropout / its backward, composed from native ops; the mask comes from the neuron
// Philox generator (bernoulli_), so it follows torch.manual_seed like every neuron RNG op.
std::tuple<at::Tensor, at::Tensor> native_dropout(const at::Tensor& input, double p, std::optional<bool> train) {
  TORCH_CHECK(p >= 0 && p <= 1, "dropout probability has to be between 0 and 1, but got ", p);
  if ((train.has_value() && !*train) || p == 0 || input.numel() == 0)
    return {input.clone(), at::ones_like(input, input.options().dtype(at::kBool))};
  // F.dropout reaches this kernel on neuron; on CPU it draws its mask with bernoulli_ in the
  // input's dtype, which has no complex kernel: refuse complex inputs as CPU's dropout does.
  TORCH_CHECK_NOT_IMPLEMENTED(!input.is_complex(), "\"bernoulli_\" not implemented for '", input.scalar_type(),
                              "' (dropout draws its mask in the input's dtype)");
  if (p == 1) return {at::zeros_like(input), at::zeros_like(input, input.options().dtype(at::kBool))};
  at::Tensor mask = at::empty_like(input, input.options().dtype(at::kBool));
  mask.bernoulli_(1 - p);
  return {input.mul(mask).mul_(1.0 / (1.0 - p)), mask};
}

at::Tensor native_dropout_backward(const at::Tensor& grad_output, const at::Tensor& mask, double scale) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "Mask should be Bool Scalar Type", mask.scalar_type());
  return grad_output.mul(mask).mul(scale);  // out of place: integer gradients promote, as ATen
}

// Weight norm (nn.utils.parametrizations.weight_norm, fused form for dim 0 or the last dim):
// ATen's composite forms on native kernels, in float32 for half and bfloat16 as CPU's kernels
// compute; the norms (the shape of g) stay float32 as CPU returns them.
at::Tensor wide(const at::Tensor& t) { return at::isReducedFloatingType(t.scalar_type()) ? t.to(at::kFloat) : t; }

std::tuple<at::Tensor, at::Tensor> weight_norm_interface(const at::Tensor& v, const at::Tensor& g, int64_t dim) {
  record_native("aten::_weight_norm_interface");
  const at::Tensor vw = wide(v), norms = at::norm_except_dim(vw, 2, dim);
  return {(vw * (wide(g) / norms)).to(v.scalar_type()), norms};
}

std::tuple<at::Tensor, at::Tensor> weight_norm_interface_backward(const at::Tensor& grad_w, const at::Tensor& v,
                                                                  const at::Tensor& g, const at::Tensor& norms,
                                                                  int64_t dim) {
  record_native("aten::_weight_norm_interface_backward");
  auto [gv, gg] = at::_weight_norm_differentiable_backward(wide(grad_w), wide(v), wide(g), wide(norms), dim);
  return {gv.to(v.scalar_type()), gg.to(g.scalar_type())};
}

}  // namespace

// CPU's kernels of these write an expanded out= or in-place tensor without refusing it
// (structured.h).
NEURON_WRITES_OVERLAPPING(structured_tril)
NEURON_WRITES_OVERLAPPING(structured_triu)
NEURON_WRITES_OVERLAPPING(structured_nll_loss_forward)
NEURON_WRITES_OVERLAPPING(structured_nll_loss_backward)
// CPU's kernels of these compute an out= tensor partially overlapping their input (structured.h).
NEURON_COMPUTES_PARTIAL_OVERLAP(structured__softmax)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured__log_softmax)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_tril)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_triu)

using T = const at::Tensor&;

// Softmax, layer norm, the losses and log_sigmoid run natively for floating dtypes only, as CPU's
// kernels do; other dtypes go to the CPU fallback (gate.h), which computes or raises as CPU.
NEURON_LIBRARY_IMPL(m) {
  m.impl("_weight_norm_interface", TORCH_FN(weight_norm_interface), kFloatingDtypes);
  m.impl("_weight_norm_interface_backward", TORCH_FN(weight_norm_interface_backward), kFloatingDtypes);
  m.impl("_softmax", TORCH_FN((Variants<at::meta::structured__softmax, int64_t, bool>::functional<Softmax<false>>)), kFloatingDtypes);
  m.impl("_softmax.out", TORCH_FN((Variants<at::meta::structured__softmax, int64_t, bool>::out<Softmax<false>>)), kFloatingDtypes);
  m.impl("_log_softmax", TORCH_FN((Variants<at::meta::structured__log_softmax, int64_t, bool>::functional<Softmax<true>>)), kFloatingDtypes);
  m.impl("_log_softmax.out", TORCH_FN((Variants<at::meta::structured__log_softmax, int64_t, bool>::out<Softmax<true>>)), kFloatingDtypes);
  m.impl("_softmax_backward_data",
         TORCH_FN((Variants<at::meta::structured__softmax_backward_data, T, int64_t, at::ScalarType>::functional<SoftmaxBackward<false>>)), kFloatingDtypes);
  m.impl("_softmax_backward_data.out",
         TORCH_FN((Variants<at::meta::structured__softmax_backward_data, T, int64_t, at::ScalarType>::out<SoftmaxBackward<false>>)), kFloatingDtypes);
  m.impl("_log_softmax_backward_data",
         TORCH_FN((Variants<at::meta::structured__log_softmax_backward_data, T, int64_t, at::ScalarType>::functional<SoftmaxBackward<true>>)), kFloatingDtypes);
  m.impl("_log_softmax_backward_data.out",
         TORCH_FN((Variants<at::meta::structured__log_softmax_backward_data, T, int64_t, at::ScalarType>::out<SoftmaxBackward<true>>)), kFloatingDtypes);
  m.impl("native_layer_norm", TORCH_FN(layer_norm), kFloatingDtypes);
  m.impl("native_layer_norm_backward", TORCH_FN(layer_norm_backward), kFloatingDtypes);
  m.impl("nll_loss_forward", TORCH_FN(nll_loss_forward), kFloatingDtypes);
  m.impl("nll_loss_forward.output", TORCH_FN(nll_loss_forward_out), kFloatingDtypes);
  m.impl("nll_loss_backward", TORCH_FN(nll_loss_backward), kFloatingDtypes);
  m.impl("nll_loss_backward.grad_input", TORCH_FN(nll_loss_backward_out), kFloatingDtypes);
  m.impl("nll_loss2d_forward", TORCH_FN(nll_loss2d_forward), kFloatingDtypes);
  m.impl("nll_loss2d_backward", TORCH_FN(nll_loss2d_backward), kFloatingDtypes);
  m.impl("binary_cross_entropy", TORCH_FN(nx_binary_cross_entropy), kFloatingDtypes);
  m.impl("binary_cross_entropy_backward", TORCH_FN(nx_binary_cross_entropy_backward), kFloatingDtypes);
  m.impl("mse_loss", TORCH_FN(nx_mse_loss), kFloatingDtypes);
  m.impl("mse_loss.out", TORCH_FN(nx_mse_loss_out), kFloatingDtypes);
  m.impl("mse_loss_backward", TORCH_FN(nx_mse_loss_backward), kFloatingDtypes);
  m.impl("mse_loss_backward.grad_input", TORCH_FN(nx_mse_loss_backward_out), kFloatingDtypes);
  m.impl("smooth_l1_loss", TORCH_FN(nx_smooth_l1_loss), kFloatingDtypes);
  m.impl("smooth_l1_loss.out", TORCH_FN(nx_smooth_l1_loss_out), kFloatingDtypes);
  m.impl("smooth_l1_loss_backward.grad_input", TORCH_FN(nx_smooth_l1_loss_backward_out), kFloatingDtypes);
  m.impl("huber_loss", TORCH_FN(nx_huber_loss), kFloatingDtypes);
  m.impl("huber_loss.out", TORCH_FN(nx_huber_loss_out), kFloatingDtypes);
  m.impl("huber_loss_backward.out", TORCH_FN(nx_huber_loss_backward_out), kFloatingDtypes);
  m.impl("log_sigmoid_forward", TORCH_FN(nx_log_sigmoid_forward), kFloatingDtypes);
  m.impl("log_sigmoid_forward.output", TORCH_FN(nx_log_sigmoid_forward_out), kFloatingDtypes);
  m.impl("log_sigmoid_backward", TORCH_FN(nx_log_sigmoid_backward), kFloatingDtypes);
  m.impl("log_sigmoid_backward.grad_input", TORCH_FN(nx_log_sigmoid_backward_out), kFloatingDtypes);
  m.impl("_thnn_fused_lstm_cell", TORCH_FN(fused_lstm_cell));
  m.impl("_thnn_fused_lstm_cell_backward_impl", TORCH_FN(fused_lstm_cell_backward));
  m.impl("_thnn_fused_gru_cell", TORCH_FN(fused_gru_cell));
  m.impl("_thnn_fused_gru_cell_backward", TORCH_FN(fused_gru_cell_backward));
  // Rows move bit for bit (any stored dtype in the runtime); natively for the float8 dtypes,
  // which CPU selects at every rank (uint16-64, bits and float4 only from 2 dims up: fallback).
  m.impl("index_select", TORCH_FN(index_select), kComputedDtypes | kFloat8Dtypes);
  m.impl("index_select.out", TORCH_FN(index_select_out), kComputedDtypes | kFloat8Dtypes);
  m.impl("embedding_dense_backward", TORCH_FN(embedding_dense_backward));
  // CPU's margin and CTC losses are float32/float64 only: other dtypes go to it, and it raises.
  m.impl("multi_margin_loss", TORCH_FN(nx_multi_margin_loss), kF32F64Dtypes);
  m.impl("multi_margin_loss.out", TORCH_FN(nx_multi_margin_loss_out), kF32F64Dtypes);
  m.impl("multi_margin_loss_backward", TORCH_FN(nx_multi_margin_loss_backward), kF32F64Dtypes);
  m.impl("multi_margin_loss_backward.grad_input", TORCH_FN(nx_multi_margin_loss_backward_out), kF32F64Dtypes);
  m.impl("multilabel_margin_loss_forward", TORCH_FN(nx_multilabel_margin_loss_forward), kF32F64Dtypes);
  m.impl("multilabel_margin_loss_forward.output", TORCH_FN(nx_multilabel_margin_loss_forward_out), kF32F64Dtypes);
  m.impl("multilabel_margin_loss_backward", TORCH_FN(nx_multilabel_margin_loss_backward), kF32F64Dtypes);
  m.impl("multilabel_margin_loss_backward.grad_input", TORCH_FN(nx_multilabel_margin_loss_backward_out), kF32F64Dtypes);
  m.impl("_ctc_loss", TORCH_FN(ctc_loss), kF32F64Dtypes);
  m.impl("_ctc_loss.Tensor", TORCH_FN(ctc_loss_tensor), kF32F64Dtypes);
  m.impl("_ctc_loss_backward", TORCH_FN(ctc_loss_backward), kF32F64Dtypes);
  m.impl("_ctc_loss_backward.Tensor", TORCH_FN(ctc_loss_backward_tensor), kF32F64Dtypes);
  m.impl("_embedding_bag", TORCH_FN(embedding_bag));
  m.impl("_embedding_bag_forward_only", TORCH_FN(embedding_bag_forward_only));
  m.impl("_embedding_bag_backward", TORCH_FN(embedding_bag_backward));
  m.impl("_embedding_bag_dense_backward", TORCH_FN(embedding_bag_dense_backward));
  m.impl("_embedding_bag_per_sample_weights_backward", TORCH_FN(embedding_bag_psw_backward));
  m.impl("arange.start_out", TORCH_FN(arange_out));
  m.impl("eye", TORCH_FN(eye));
  m.impl("eye.m", TORCH_FN(eye_m));
  m.impl("eye.out", TORCH_FN(eye_out));
  m.impl("eye.m_out", TORCH_FN(eye_m_out));
  m.impl("linspace", TORCH_FN(linspace));
  m.impl("linspace.out", TORCH_FN(linspace_out));
  m.impl("native_dropout", TORCH_FN(native_dropout));
  m.impl("native_dropout_backward", TORCH_FN(native_dropout_backward));
  // Slice copies move bytes: every stored dtype but float4, which CPU concatenates only for
  // some layouts (the fallback gives CPU's result or error).
  m.impl("cat", TORCH_FN(cat), kMovedDtypes);
  m.impl("cat.out", TORCH_FN(cat_out), kMovedDtypes);
  m.impl("tril", TORCH_FN((Variants<at::meta::structured_tril, int64_t>::functional<Tri<false>>)));
  m.impl("tril_", TORCH_FN((Variants<at::meta::structured_tril, int64_t>::inplace<Tri<false>>)));
  m.impl("tril.out", TORCH_FN((Variants<at::meta::structured_tril, int64_t>::out<Tri<false>>)));
  m.impl("triu", TORCH_FN((Variants<at::meta::structured_triu, int64_t>::functional<Tri<true>>)));
  m.impl("triu_", TORCH_FN((Variants<at::meta::structured_triu, int64_t>::inplace<Tri<true>>)));
  m.impl("triu.out", TORCH_FN((Variants<at::meta::structured_triu, int64_t>::out<Tri<true>>)));
}

}  // namespace torch_neuronx
