// Convolution, unfold/fold (im2col/col2im), batch norm and pooling on the neuron key
// (runtime: vnc/conv.h). Floating 1-D, 2-D and 3-D convolutions, plain and transposed, are
// native (with their backward; depthwise and pointwise ones on a channels_last input run in
// that layout); complex and integer ones go through the visible CPU fallback of
// aten::convolution.
#include "neuron.h"
#include "gate.h"
#include "structured.h"

#include <ATen/native/Resize.h>
#include <ATen/native/im2col_shape_check.h>
#include <ATen/ops/max_pool2d_with_indices_backward_meta.h>
#include <ATen/ops/max_pool2d_with_indices_meta.h>
#include <c10/util/strides.h>
#include <torch/library.h>

namespace torch_neuronx {
namespace {

int32_t dt(const at::Tensor& t) { return static_cast<int32_t>(t.scalar_type()); }

bool conv_native(const at::Tensor& input) {
  return input.dim() >= 3 && input.dim() <= 5 && at::isFloatingType(input.scalar_type());
}

// The geometry of a 1-D, 2-D or 3-D convolution, plain or transposed (ATen's _convolution
// has already expanded the parameter lists, checked the shapes and added the batch dim).
vnc_conv_params conv_params(const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                            at::IntArrayRef output_padding, int64_t groups) {
  // CPU's and CUDA's check (the kernels read both as one dtype): a bfloat16 model fed float32
  // images raises instead of reading the weight's bytes as the input's type
  TORCH_CHECK(input.scalar_type() == weight.scalar_type(), "Input type (", input.scalar_type(), ") and weight type (",
              weight.scalar_type(), ") should be the same");
  vnc_conv_params p{};
  p.nspatial = static_cast<int32_t>(input.dim() - 2);
  p.transposed = transposed;
  p.N = input.size(0);
  p.C = input.size(1);
  p.O = transposed ? weight.size(1) * groups : weight.size(0);
  p.groups = groups;
  auto at = [](at::IntArrayRef v, int64_t i, int64_t dflt) { return v.empty() ? dflt : v[v.size() == 1 ? 0 : i]; };
  for (int64_t i = 0; i < p.nspatial; i++) {
    p.in[i] = input.size(2 + i);
    p.k[i] = weight.size(2 + i);
    p.stride[i] = at(stride, i, 1);
    p.pad[i] = at(padding, i, 0);
    p.dil[i] = at(dilation, i, 1);
    TORCH_CHECK(p.dil[i] > 0, "dilation should be greater than zero, but got ", dilation);
    const int64_t out_pad = at(output_padding, i, 0);
    TORCH_CHECK(!transposed || (out_pad >= 0 && (out_pad < p.stride[i] || out_pad < p.dil[i])),
                "output padding must be smaller than either stride or dilation, but got output_padding ",
                output_padding, ", stride ", stride, ", dilation ", dilation);
    p.out[i] = transposed ? (p.in[i] - 1) * p.stride[i] - 2 * p.pad[i] + p.dil[i] * (p.k[i] - 1) + out_pad + 1
                          : (p.in[i] + 2 * p.pad[i] - p.dil[i] * (p.k[i] - 1) - 1) / p.stride[i] + 1;
  }
  p.dtype = dt(input);
  return p;
}

// CPU PyTorch returns channels_last results where the input (or a convolution's weight) is
// channels_last; a kernel that read and wrote contiguous NC... has such a result converted
// (one already in that layout is returned as it is).
at::MemoryFormat result_format(const at::Tensor& input, const at::Tensor* weight = nullptr) {
  const at::MemoryFormat fmt = input.suggest_memory_format();
  return fmt == at::MemoryFormat::Contiguous && weight ? weight->suggest_memory_format() : fmt;
}

at::Tensor in_layout_of(const at::Tensor& out, const at::Tensor& input, const at::Tensor* weight = nullptr) {
  const at::MemoryFormat fmt = result_format(input, weight);
  return fmt == at::MemoryFormat::Contiguous || out.dim() != input.dim() ? out : out.contiguous(fmt);
}

// A result of the NC... kernels that PyTorch returns in `fmt`: allocated with fmt's strides
// (CPU's) where they describe the same memory order (a depthwise weight's gradient [O, 1, k, k],
// a 1x1 weight's [O, C, 1, 1]), so in_layout_of has nothing to convert; else contiguous.
at::Tensor empty_result(at::IntArrayRef sizes, const at::TensorOptions& opts, at::MemoryFormat fmt) {
  if (fmt != at::MemoryFormat::Contiguous && sizes.size() == (fmt == at::MemoryFormat::ChannelsLast ? 4u : 5u)) {
    at::Tensor t = at::empty(sizes, opts.memory_format(fmt));
    if (t.is_contiguous()) return t;
  }
  return at::empty(sizes, opts);
}

// The memory order a convolution runs in: a channels_last (or channels_last_3d) input's own
// where the runtime has a kernel for that layout (depthwise and pointwise convolutions:
// vnc_conv_channels_last_ok; p.channels_last is set), else the kernels' NC... order (inputs
// copied to it, results converted back by in_layout_of).
at::MemoryFormat run_format(const at::Tensor& input, vnc_conv_params& p) {
  const at::MemoryFormat fmt = input.suggest_memory_format();
  if (fmt == at::MemoryFormat::Contiguous) return fmt;
  p.channels_last = 1;
  if (vnc_conv_channels_last_ok(&p)) return fmt;
  p.channels_last = 0;
  return at::MemoryFormat::Contiguous;
}

std::vector<int64_t> out_shape(const vnc_conv_params& p) {
  std::vector<int64_t> shape = {p.N, p.O};
  for (int i = 0; i < p.nspatial; i++) shape.push_back(p.out[i]);
  return shape;
}

at::Tensor convolution(const at::Tensor& input, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                       at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed,
                       at::IntArrayRef output_padding, int64_t groups) {
  if (!conv_native(input)) {  // complex and integer convolutions: the visible fallback
    std::vector<c10::IValue> stack{input, weight, bias, stride, padding, dilation, transposed, output_padding, groups};
    run_cpu_fallback("aten::convolution", "", stack);
    return stack.back().toTensor();
  }
  const at::Tensor no_bias;
  check_same_device("aten::convolution_overrideable", input, {&weight, bias ? &*bias : &no_bias});
  record_native("aten::convolution_overrideable");
  if (input.scalar_type() == at::kDouble) warn_float64("aten::convolution_overrideable");
  vnc_conv_params p = conv_params(input, weight, stride, padding, dilation, transposed, output_padding, groups);
  for (int i = 0; i < p.nspatial; i++)
    TORCH_CHECK(p.out[i] > 0, "convolution: calculated output size is too small for input of size ", input.sizes());
  const at::MemoryFormat fmt = run_format(input, p);
  at::Tensor x = input.contiguous(fmt), w = weight.contiguous();
  at::Tensor b = bias && bias->defined() ? bias->contiguous() : at::Tensor();
  at::Tensor out = p.channels_last ? at::empty(out_shape(p), x.options().memory_format(fmt))
                                   : empty_result(out_shape(p), x.options(), result_format(input, &weight));
  c10::DeviceGuard g(input.device());
  check(vnc_conv_forward(stream_of(x), "aten::convolution_overrideable", &p, element_ptr(x), element_ptr(w),
                         b.defined() ? element_ptr(b) : nullptr, element_ptr(out)));
  return in_layout_of(out, input, &weight);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> convolution_backward(
    const at::Tensor& grad_output, const at::Tensor& input, const at::Tensor& weight, at::IntArrayRef stride,
    at::IntArrayRef padding, at::IntArrayRef dilation, bool transposed, at::IntArrayRef output_padding, int64_t groups,
    std::array<bool, 3> mask) {
  if (!conv_native(input)) {
    c10::List<bool> output_mask({mask[0], mask[1], mask[2]});
    std::vector<c10::IValue> stack;
    const int64_t bias_len = transposed ? weight.size(1) * groups : weight.size(0);
    for (c10::IValue v : {c10::IValue(grad_output), c10::IValue(input), c10::IValue(weight),
                          c10::IValue(std::vector<int64_t>{bias_len}), c10::IValue(stride), c10::IValue(padding),
                          c10::IValue(dilation), c10::IValue(transposed), c10::IValue(output_padding), c10::IValue(groups),
                          c10::IValue(output_mask)})
      stack.push_back(std::move(v));
    run_cpu_fallback("aten::convolution_backward", "", stack);
    return {stack[0].toTensor(), stack[1].toTensor(), stack[2].toTensor()};
  }
  check_same_device("aten::convolution_backward_overrideable", input, {&grad_output, &weight});
  record_native("aten::convolution_backward_overrideable");
  vnc_conv_params p = conv_params(input, weight, stride, padding, dilation, transposed, output_padding, groups);
  TORCH_CHECK(grad_output.sizes() == at::IntArrayRef(out_shape(p)), "convolution_backward: expected grad_output of shape ",
              at::IntArrayRef(out_shape(p)), ", got ", grad_output.sizes());
  const at::MemoryFormat fmt = run_format(input, p);
  at::Tensor go = grad_output.contiguous(fmt), x = input.contiguous(fmt), w = weight.contiguous();
  const at::MemoryFormat rf = result_format(input, &weight);
  at::Tensor gi = !mask[0]          ? at::Tensor()
                  : p.channels_last ? at::empty(input.sizes(), x.options().memory_format(fmt))
                                    : empty_result(input.sizes(), x.options(), rf);
  at::Tensor gw = mask[1] ? empty_result(weight.sizes(), w.options(), rf) : at::Tensor();
  at::Tensor gb = mask[2] ? at::empty({p.O}, w.options()) : at::Tensor();
  c10::DeviceGuard g(input.device());
  check(vnc_conv_backward(stream_of(x), "aten::convolution_backward_overrideable", &p, element_ptr(go), element_ptr(x),
                          element_ptr(w), gi.defined() ? element_ptr(gi) : nullptr, gw.defined() ? element_ptr(gw) : nullptr,
                          gb.defined() ? element_ptr(gb) : nullptr));
  // gradients in the forward's layout (CPU PyTorch's, which follows input and weight)
  return {gi.defined() ? in_layout_of(gi, input, &weight) : gi, gw.defined() ? in_layout_of(gw, input, &weight) : gw, gb};
}

// ---------------------------------------------------------------- batch norm

int32_t param_dtype(const at::Tensor& input, std::initializer_list<const std::optional<at::Tensor>*> params) {
  for (auto* p : params)
    if (*p && (*p)->defined()) return dt(**p);
  return dt(input);
}

void* opt_ptr(const std::optional<at::Tensor>& t) { return t && t->defined() ? element_ptr(*t) : nullptr; }

void check_param(const std::optional<at::Tensor>& t, int32_t pdt, int64_t C, const char* what) {
  if (!t || !t->defined()) return;
  TORCH_CHECK(t->numel() == C, "batch_norm: ", what, " must have ", C, " elements, got ", t->sizes());
  TORCH_CHECK(dt(*t) == pdt, "batch_norm: ", what, " has dtype ", t->scalar_type(), " unlike the other parameters");
}

// A dense copy of an optional parameter (the tensor itself when already contiguous).
std::optional<at::Tensor> dense(const std::optional<at::Tensor>& t) {
  if (!t || !t->defined() || t->is_contiguous()) return t;
  return t->contiguous();
}

// The accumulate type of batch norm's statistics: float32 (float64 for float64 inputs).
at::ScalarType acc_type(at::ScalarType t) { return t == at::kDouble ? at::kDouble : at::kFloat; }

// A per-channel vector viewed as (1, C, 1, ...) against an input of `ndim` dims, in dtype `st`.
at::Tensor per_channel(const at::Tensor& t, int64_t ndim, at::ScalarType st) {
  std::vector<int64_t> shape(ndim, 1);
  shape[1] = t.size(0);
  return t.to(st).reshape(shape);
}

// Evaluation of a channels_last input: ATen's per-channel affine form, y = x * alpha + beta with
// alpha = weight * invstd and beta = bias - mean * alpha (in float32), as elementwise ops in the
// input's own layout, instead of the NCHW kernel between two transposing copies (~10x slower).
at::Tensor batch_norm_eval_in_layout(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                     const std::optional<at::Tensor>& bias, const at::Tensor& running_mean,
                                     const at::Tensor& running_var, double eps) {
  const at::ScalarType st = acc_type(input.scalar_type());
  const int64_t C = input.size(1);
  auto param = [&](const std::optional<at::Tensor>& t, double absent) {
    return t && t->defined() ? t->reshape({C}).to(st) : at::full({C}, absent, input.options().dtype(st));
  };
  const at::Tensor invstd = (running_var.reshape({C}).to(st) + eps).rsqrt();
  const at::Tensor alpha = param(weight, 1.0) * invstd;
  const at::Tensor beta = param(bias, 0.0) - running_mean.reshape({C}).to(st) * alpha;
  return at::addcmul(per_channel(beta, input.dim(), st), input, per_channel(alpha, input.dim(), st))
      .to(input.scalar_type());
}

// The layouts of CPU's batch norm results (ATen's batch_norm_cpu and
// batch_norm_backward_cpu_template, native/Normalization.cpp): where the operands are dense
// (the input contiguous in some format, checked with is_contiguous), the format the input
// is_contiguous in: not suggest_memory_format, which calls a channels_last input with
// non-canonical strides on size-1 dims (an (N, L, C) sequence permuted to (N, C, L) and
// unsqueezed) contiguous; else suggest_memory_format.
bool dense_in_a_format(const at::Tensor& t) {
  return t.is_contiguous() || t.is_contiguous(at::MemoryFormat::ChannelsLast) ||
         t.is_contiguous(at::MemoryFormat::ChannelsLast3d);
}
at::MemoryFormat bn_layout(const at::Tensor& input, bool dense) {
  if (!dense) return input.suggest_memory_format();
  return input.is_contiguous()                                     ? at::MemoryFormat::Contiguous
         : input.is_contiguous(at::MemoryFormat::ChannelsLast3d) ? at::MemoryFormat::ChannelsLast3d
                                                                   : at::MemoryFormat::ChannelsLast;
}
// The forward's output: dense means input, weight, bias and running statistics dense.
at::MemoryFormat bn_result_format(const at::Tensor& input, std::initializer_list<const std::optional<at::Tensor>*> params) {
  bool dense = dense_in_a_format(input);
  for (auto* p : params) dense &= !*p || !(*p)->defined() || (*p)->is_contiguous();
  return bn_layout(input, dense);
}

// `t` with the strides at::empty gives its shape in `fmt` (size-1 dims included), copied where
// its own differ.
at::Tensor with_format(const at::Tensor& t, at::MemoryFormat fmt) {
  const c10::DimVector contiguous = c10::contiguous_strides(t.sizes());
  const std::vector<int64_t> strides = fmt == at::MemoryFormat::ChannelsLast     ? c10::get_channels_last_strides_2d(t.sizes())
                                       : fmt == at::MemoryFormat::ChannelsLast3d ? c10::get_channels_last_strides_3d(t.sizes())
                                                                                 : std::vector<int64_t>(contiguous.begin(), contiguous.end());
  if (t.strides() == at::IntArrayRef(strides)) return t;
  return at::empty_strided(t.sizes(), strides, t.options()).copy_(t);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                                         const std::optional<at::Tensor>& bias,
                                                         const std::optional<at::Tensor>& running_mean,
                                                         const std::optional<at::Tensor>& running_var, bool training,
                                                         double momentum, double eps) {
  record_native("aten::native_batch_norm");
  TORCH_CHECK(input.dim() >= 2, "batch_norm: expected an input with at least 2 dims, got ", input.sizes());
  for (auto* t : {&weight, &bias, &running_mean, &running_var})
    if (*t) check_same_device("aten::native_batch_norm", input, {&**t});
  const int64_t N = input.size(0), C = input.size(1), S = input.numel() / std::max<int64_t>(N * C, 1);
  const int32_t pdt = param_dtype(input, {&weight, &bias, &running_mean, &running_var});
  for (auto [t, name] : {std::pair{&weight, "weight"}, {&bias, "bias"}, {&running_mean, "running_mean"}, {&running_var, "running_var"}})
    check_param(*t, pdt, C, name);
  TORCH_CHECK(training || (running_mean && running_mean->defined() && running_var && running_var->defined()),
              "running_mean and running_var must be defined in evaluation mode");
  const at::MemoryFormat fmt = bn_result_format(input, {&weight, &bias, &running_mean, &running_var});
  if (!training && input.dim() >= 3 && input.suggest_memory_format() != at::MemoryFormat::Contiguous)
    return {with_format(batch_norm_eval_in_layout(input, weight, bias, *running_mean, *running_var, eps), fmt),
            at::empty({0}, input.options().dtype(static_cast<at::ScalarType>(pdt))),
            at::empty({0}, input.options().dtype(static_cast<at::ScalarType>(pdt)))};
  at::Tensor x = input.contiguous();
  at::Tensor y = at::empty(input.sizes(), x.options());
  auto popts = x.options().dtype(static_cast<at::ScalarType>(pdt));
  at::Tensor save_mean = at::empty({training ? C : 0}, popts), save_invstd = at::empty({training ? C : 0}, popts);
  auto w = dense(weight), b = dense(bias), rm = dense(running_mean), rv = dense(running_var);
  c10::DeviceGuard g(input.device());
  check(vnc_batch_norm(stream_of(x), "aten::native_batch_norm", N, C, S, dt(x), element_ptr(x), opt_ptr(w), opt_ptr(b),
                       opt_ptr(rm), opt_ptr(rv), pdt, training, momentum, eps, element_ptr(y),
                       training ? element_ptr(save_mean) : nullptr, training ? element_ptr(save_invstd) : nullptr));
  // running statistics updated in a dense copy go back to the caller's tensors
  if (training && rm && !rm->is_same(*running_mean)) running_mean->copy_(*rm);
  if (training && rv && !rv->is_same(*running_var)) running_var->copy_(*rv);
  return {with_format(y, fmt), save_mean, save_invstd};
}

// The forms AOTAutograd and torch.func produce, as native_batch_norm with or without stats.
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                                               const std::optional<at::Tensor>& bias, at::Tensor& running_mean,
                                                               at::Tensor& running_var, bool training, double momentum,
                                                               double eps) {
  return batch_norm(input, weight, bias, running_mean, running_var, training, momentum, eps);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit_no_stats(const at::Tensor& input,
                                                                        const std::optional<at::Tensor>& weight,
                                                                        const std::optional<at::Tensor>& bias, bool training,
                                                                        double momentum, double eps) {
  return batch_norm(input, weight, bias, std::nullopt, std::nullopt, training, momentum, eps);
}
std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_legit_no_training(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const at::Tensor& running_mean, const at::Tensor& running_var, double momentum, double eps) {
  return batch_norm(input, weight, bias, running_mean, running_var, false, momentum, eps);
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> batch_norm_backward(
    const at::Tensor& grad_out, const at::Tensor& input, const std::optional<at::Tensor>& weight,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var,
    const std::optional<at::Tensor>& save_mean, const std::optional<at::Tensor>& save_invstd, bool train, double eps,
    std::array<bool, 3> mask) {
  check_same_device("aten::native_batch_norm_backward", input, {&grad_out});
  for (auto* t : {&weight, &running_mean, &running_var, &save_mean, &save_invstd})
    if (*t) check_same_device("aten::native_batch_norm_backward", input, {&**t});
  record_native("aten::native_batch_norm_backward");
  const int64_t N = input.size(0), C = input.size(1), S = input.numel() / std::max<int64_t>(N * C, 1);
  const int32_t pdt = param_dtype(input, {&weight, &running_mean, &running_var, &save_mean});
  at::Tensor x = input.contiguous(), dy = grad_out.contiguous();
  auto popts = x.options().dtype(static_cast<at::ScalarType>(pdt));
  at::Tensor dx = mask[0] ? at::empty(input.sizes(), x.options()) : at::Tensor();
  at::Tensor dw = mask[1] ? at::empty({C}, popts) : at::Tensor();
  at::Tensor db = mask[2] ? at::empty({C}, popts) : at::Tensor();
  c10::DeviceGuard g(input.device());
  auto w = dense(weight), rm = dense(running_mean), rv = dense(running_var), sm = dense(save_mean),
       si = dense(save_invstd);
  check(vnc_batch_norm_backward(stream_of(x), "aten::native_batch_norm_backward", N, C, S, dt(x), element_ptr(dy), element_ptr(x),
                                opt_ptr(w), opt_ptr(rm), opt_ptr(rv), opt_ptr(sm), opt_ptr(si), pdt, train, eps, dx.defined() ? element_ptr(dx) : nullptr,
                                dw.defined() ? element_ptr(dw) : nullptr, db.defined() ? element_ptr(db) : nullptr));
  // the backward's grad_input: dense means input and grad_out dense, in one suggested format
  const bool dense = dense_in_a_format(input) && dense_in_a_format(grad_out) &&
                     input.suggest_memory_format() == grad_out.suggest_memory_format();
  return {dx.defined() ? with_format(dx, bn_layout(input, dense)) : dx, dw, db};
}

// SyncBatchNorm's ops (aten::batch_norm_stats, batch_norm_gather_stats[_with_counts],
// batch_norm_elemt, batch_norm_backward_reduce, batch_norm_backward_elemt): CUDA-only in ATen
// (no CPU kernel, so no fallback), here compositions of native reductions and elementwise
// ops with CUDA's semantics. Statistics are kept in the accumulate type (float32 for float16,
// bfloat16 and float32 inputs; float64 for float64); channels are dim 1, any spatial dims.

void check_floating(const char* op, const at::Tensor& t, const char* name) {
  const at::ScalarType st = t.scalar_type();
  TORCH_CHECK_NOT_IMPLEMENTED(st == at::kFloat || st == at::kDouble || st == at::kHalf || st == at::kBFloat16,
                              op, ": ", name, " of dtype ", t.scalar_type(),
                              " is not supported (float32, float64, float16 or bfloat16)");
}

// The input's checks: floating, at least (N, C), and the dims reduced over (all but 1).
std::vector<int64_t> bn_reduce_dims(const char* op, const at::Tensor& input, const char* name = "input") {
  check_floating(op, input, name);
  TORCH_CHECK(input.dim() >= 2, op, ": expected ", name, " with at least 2 dims (N, C, ...), got shape ",
              input.sizes());
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); d++) dims.push_back(d);
  return dims;
}

// A per-channel vector of C elements (1-D), on input's device.
void check_channels(const char* op, const at::Tensor& input, const at::Tensor& t, const char* name) {
  check_same_device(op, input, {&t});
  check_floating(op, t, name);
  TORCH_CHECK(t.dim() == 1 && t.size(0) == input.size(1), op, ": expected ", name, " of shape [", input.size(1),
              "] (one value per channel of input ", input.sizes(), "), got ", t.sizes());
}
void check_channels(const char* op, const at::Tensor& input, const std::optional<at::Tensor>& t, const char* name) {
  if (t && t->defined()) check_channels(op, input, *t, name);
}

std::tuple<at::Tensor, at::Tensor> sync_bn_stats(const at::Tensor& input, double eps) {
  const char* op = "aten::batch_norm_stats";
  const auto dims = bn_reduce_dims(op, input);
  record_native(op);
  c10::DeviceGuard g(input.device());
  auto [var, mean] = at::var_mean(input.to(acc_type(input.scalar_type())), dims, std::optional<at::Scalar>(0));
  at::Tensor invstd = (var + eps).rsqrt();
  if (eps == 0) invstd.masked_fill_(var == 0, 0);  // CUDA's InvStd: 0 for a constant channel without eps
  return {mean, invstd};
}

std::tuple<at::Tensor, at::Tensor> sync_bn_gather_counts(
    const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, double momentum,
    double eps, const at::Tensor& counts) {
  const char* op = "aten::batch_norm_gather_stats_with_counts";
  check_same_device(op, input, {&mean, &invstd, &counts});
  check_floating(op, mean, "mean");
  check_floating(op, invstd, "invstd");
  TORCH_CHECK(mean.dim() == 2, op, ": expected mean of shape [world_size, C], got ", mean.sizes());
  TORCH_CHECK(invstd.sizes() == mean.sizes(), op, ": expected invstd of the shape of mean ", mean.sizes(), ", got ",
              invstd.sizes());
  TORCH_CHECK(counts.numel() == mean.size(0), op, ": expected counts with one element per row of mean (",
              mean.size(0), "), got shape ", counts.sizes());
  TORCH_CHECK(!counts.is_complex() && counts.scalar_type() != at::kBool, op, ": counts of dtype ",
              counts.scalar_type(), " is not supported");
  const int64_t C = mean.size(1);
  for (auto [t, name] : {std::pair{&running_mean, "running_mean"}, {&running_var, "running_var"}})
    if (*t && (*t)->defined()) {
      check_same_device(op, input, {&**t});
      check_floating(op, **t, name);
      TORCH_CHECK((*t)->dim() == 1 && (*t)->size(0) == C, op, ": expected ", name, " of shape [", C, "], got ",
                  (*t)->sizes());
    }
  record_native(op);
  c10::DeviceGuard g(input.device());
  const at::ScalarType st = acc_type(mean.scalar_type());
  // the ranks' (count, mean, biased variance) merged: n = sum c_j, mean = sum c_j m_j / n,
  // var_n = sum c_j (v_j + (m_j - mean)^2) with v_j = 1 / invstd_j^2 - eps
  at::Tensor cnt = counts.to(st).reshape({-1, 1}), m = mean.to(st), inv = invstd.to(st);
  at::Tensor n = cnt.sum(0);
  at::Tensor avg = (m * cnt).sum(0) / n;
  at::Tensor var_n = ((inv.reciprocal().square() - eps + (m - avg).square()) * cnt).sum(0);
  at::Tensor out_invstd = (var_n / n + eps).rsqrt();
  if (running_mean && running_mean->defined())
    running_mean->copy_(running_mean->to(st) * (1 - momentum) + avg * momentum);
  if (running_var && running_var->defined())  // the unbiased variance, as CUDA
    running_var->copy_(running_var->to(st) * (1 - momentum) + var_n / (n - 1) * momentum);
  return {avg, out_invstd};
}

// The same with every rank's count equal to `count`.
std::tuple<at::Tensor, at::Tensor> sync_bn_gather(const at::Tensor& input, const at::Tensor& mean,
                                                           const at::Tensor& invstd,
                                                           const std::optional<at::Tensor>& running_mean,
                                                           const std::optional<at::Tensor>& running_var,
                                                           double momentum, double eps, int64_t count) {
  TORCH_CHECK(mean.dim() >= 1, "aten::batch_norm_gather_stats: expected mean of shape [world_size, C], got ",
              mean.sizes());
  at::Tensor counts = at::full({mean.size(0)}, static_cast<double>(count), mean.options().dtype(acc_type(mean.scalar_type())));
  return sync_bn_gather_counts(input, mean, invstd, running_mean, running_var, momentum, eps, counts);
}

// ((x - mean) * invstd) * weight + bias, computed in the accumulate type, in input's dtype and layout.
at::Tensor bn_elemt(const char* op, const at::Tensor& input, const std::optional<at::Tensor>& weight,
                    const std::optional<at::Tensor>& bias, const at::Tensor& mean, const at::Tensor& invstd) {
  bn_reduce_dims(op, input);
  check_channels(op, input, mean, "mean");
  check_channels(op, input, invstd, "invstd");
  check_channels(op, input, weight, "weight");
  check_channels(op, input, bias, "bias");
  record_native(op);
  c10::DeviceGuard g(input.device());
  const at::ScalarType st = acc_type(input.scalar_type());
  const int64_t nd = input.dim();
  at::Tensor y = (input.to(st) - per_channel(mean, nd, st)) * per_channel(invstd, nd, st);
  if (weight && weight->defined()) y = y * per_channel(*weight, nd, st);
  if (bias && bias->defined()) y = y + per_channel(*bias, nd, st);
  return y.to(input.scalar_type()).contiguous(input.suggest_memory_format());
}

at::Tensor sync_bn_elemt(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                            const std::optional<at::Tensor>& bias, const at::Tensor& mean, const at::Tensor& invstd,
                            double /*eps*/) {
  return bn_elemt("aten::batch_norm_elemt", input, weight, bias, mean, invstd);
}

at::Tensor& sync_bn_elemt_out(const at::Tensor& input, const std::optional<at::Tensor>& weight,
                                 const std::optional<at::Tensor>& bias, const at::Tensor& mean,
                                 const at::Tensor& invstd, double /*eps*/, at::Tensor& out) {
  const char* op = "aten::batch_norm_elemt.out";
  check_same_device(op, input, {&out});
  TORCH_CHECK(out.scalar_type() == input.scalar_type(), op, ": expected out of dtype ", input.scalar_type(),
              ", got ", out.scalar_type());
  at::Tensor y = bn_elemt(op, input, weight, bias, mean, invstd);
  at::native::resize_output(out, y.sizes());
  out.copy_(y);
  return out;
}

// The checks of batch_norm_backward_reduce and _elemt: grad_out shaped as the input, per-channel
// mean and invstd of one dtype, an optional per-channel weight. Returns the dims reduced over.
std::vector<int64_t> check_bn_backward(const char* op, const at::Tensor& grad_out, const at::Tensor& input,
                                       const at::Tensor& mean, const at::Tensor& invstd,
                                       const std::optional<at::Tensor>& weight) {
  auto dims = bn_reduce_dims(op, input);
  check_same_device(op, input, {&grad_out});
  check_floating(op, grad_out, "grad_out");
  TORCH_CHECK(grad_out.sizes() == input.sizes(), op, ": expected grad_out of the input's shape ", input.sizes(),
              ", got ", grad_out.sizes());
  check_channels(op, input, mean, "mean");
  check_channels(op, input, invstd, "invstd");
  TORCH_CHECK(mean.scalar_type() == invstd.scalar_type(), op, ": mean and invstd need to have the same data types");
  check_channels(op, input, weight, "weight");
  return dims;
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> sync_bn_backward_reduce(
    const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean, const at::Tensor& invstd,
    const std::optional<at::Tensor>& weight, bool input_g, bool weight_g, bool bias_g) {
  const char* op = "aten::batch_norm_backward_reduce";
  const auto dims = check_bn_backward(op, grad_out, input, mean, invstd, weight);
  record_native(op);
  c10::DeviceGuard g(input.device());
  const at::ScalarType st = acc_type(input.scalar_type());
  at::Tensor dy = grad_out.to(st);
  at::Tensor sum_dy = dy.sum(dims);
  at::Tensor sum_dy_xmu = (dy * (input.to(st) - per_channel(mean, input.dim(), st))).sum(dims);
  // grad_weight / grad_bias in weight's dtype (mean's without a weight), each only when asked for
  const at::ScalarType wt = weight && weight->defined() ? weight->scalar_type() : mean.scalar_type();
  at::Tensor gw = weight_g ? (sum_dy_xmu * invstd.to(st)).to(wt) : at::Tensor();
  at::Tensor gb = bias_g ? sum_dy.to(wt) : at::Tensor();
  if (!input_g) return {at::Tensor(), at::Tensor(), gw, gb};
  return {sum_dy.to(mean.scalar_type()), sum_dy_xmu.to(mean.scalar_type()), gw, gb};
}

at::Tensor sync_bn_backward_elemt(const at::Tensor& grad_out, const at::Tensor& input, const at::Tensor& mean,
                                     const at::Tensor& invstd, const std::optional<at::Tensor>& weight,
                                     const at::Tensor& sum_dy, const at::Tensor& sum_dy_xmu, const at::Tensor& count) {
  const char* op = "aten::batch_norm_backward_elemt";
  check_bn_backward(op, grad_out, input, mean, invstd, weight);
  check_same_device(op, input, {&count});
  check_channels(op, input, sum_dy, "sum_dy");
  check_channels(op, input, sum_dy_xmu, "sum_dy_xmu");
  // CUDA reads the per-rank element counts as int32
  TORCH_CHECK(count.scalar_type() == at::kInt, op, ": expected count of dtype torch.int32 (the element count of each "
              "rank), got ", count.scalar_type());
  record_native(op);
  c10::DeviceGuard g(input.device());
  const at::ScalarType st = acc_type(input.scalar_type());
  const int64_t nd = input.dim();
  // grad_input = (dy - sum_dy / n - (x - mean) * invstd^2 * sum_dy_xmu / n) * invstd * weight
  at::Tensor norm = count.sum().to(st).reciprocal();
  at::Tensor inv = per_channel(invstd, nd, st);
  at::Tensor m_dy = per_channel(sum_dy, nd, st) * norm;
  at::Tensor f1 = inv.square() * per_channel(sum_dy_xmu, nd, st) * norm;
  at::Tensor f2 = weight && weight->defined() ? inv * per_channel(*weight, nd, st) : inv;
  at::Tensor gi = (grad_out.to(st) - m_dy - (input.to(st) - per_channel(mean, nd, st)) * f1) * f2;
  return gi.to(input.scalar_type()).contiguous(input.suggest_memory_format());
}

// ---------------------------------------------------------------- pooling

vnc_pool2d pool_params(const at::Tensor& x, const at::Tensor& out, at::IntArrayRef k, at::IntArrayRef s,
                       at::IntArrayRef pad, at::IntArrayRef dil) {
  auto pick = [](at::IntArrayRef v, size_t i, int64_t dflt) { return v.empty() ? dflt : v[v.size() == 1 ? 0 : i]; };
  vnc_pool2d p{};
  const int64_t d = x.dim();
  p.N = d == 4 ? x.size(0) : 1;
  p.C = x.size(d - 3);
  p.H = x.size(d - 2);
  p.W = x.size(d - 1);
  p.OH = out.size(out.dim() - 2);
  p.OW = out.size(out.dim() - 1);
  p.KH = pick(k, 0, 1);
  p.KW = pick(k, 1, 1);
  p.sh = pick(s, 0, p.KH);
  p.sw = pick(s, 1, p.KW);
  p.ph = pick(pad, 0, 0);
  p.pw = pick(pad, 1, 0);
  p.dh = pick(dil, 0, 1);
  p.dw = pick(dil, 1, 1);
  p.dtype = dt(x);
  return p;
}

std::tuple<at::Tensor&, at::Tensor&> max_pool2d_out(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s,
                                                    at::IntArrayRef pad, at::IntArrayRef dil, bool ceil_mode,
                                                    at::Tensor& out, at::Tensor& indices) {
  Structured<at::meta::structured_max_pool2d_with_indices, 2> op(Mode::Out, {out, indices});
  op.reads = {self};
  op.meta(self, k, s, pad, dil, ceil_mode);
  record_native("aten::max_pool2d_with_indices");
  at::Tensor x = self.contiguous();
  const at::Tensor& o = op.maybe_get_output(0);
  const at::Tensor& i = op.maybe_get_output(1);
  at::Tensor oc = o.is_contiguous() ? o : at::empty(o.sizes(), o.options());
  at::Tensor ic = i.is_contiguous() ? i : at::empty(i.sizes(), i.options());
  vnc_pool2d p = pool_params(x, oc, k, s, pad, dil);
  c10::DeviceGuard g(self.device());
  check(vnc_max_pool2d(stream_of(x), "aten::max_pool2d_with_indices", &p, element_ptr(x), element_ptr(oc), static_cast<int64_t*>(element_ptr(ic))));
  if (!oc.is_same(o)) o.copy_(oc);
  if (!ic.is_same(i)) i.copy_(ic);
  op.finish();
  return {out, indices};
}

std::tuple<at::Tensor, at::Tensor> max_pool2d(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s,
                                              at::IntArrayRef pad, at::IntArrayRef dil, bool ceil_mode) {
  at::Tensor out = at::empty({0}, self.options()), idx = at::empty({0}, self.options().dtype(at::kLong));
  max_pool2d_out(self, k, s, pad, dil, ceil_mode, out, idx);
  return {out, idx};
}

at::Tensor& max_pool2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef k,
                                    at::IntArrayRef s, at::IntArrayRef pad, at::IntArrayRef dil, bool ceil_mode,
                                    const at::Tensor& indices, at::Tensor& grad_input) {
  Structured<at::meta::structured_max_pool2d_with_indices_backward> op(Mode::Out, {grad_input});
  op.reads = {grad_output, self, indices};
  op.meta(grad_output, self, k, s, pad, dil, ceil_mode, indices);
  check_same_device("aten::max_pool2d_with_indices_backward", self, {&grad_output, &indices});
  record_native("aten::max_pool2d_with_indices_backward");
  at::Tensor go = grad_output.contiguous(), idx = indices.contiguous();
  const at::Tensor& gi = op.maybe_get_output(0);
  at::Tensor gc = gi.is_contiguous() ? gi : at::empty(gi.sizes(), gi.options());
  vnc_pool2d p = pool_params(self, go, k, s, pad, dil);
  c10::DeviceGuard g(self.device());
  check(vnc_max_pool2d_backward(stream_of(go), "aten::max_pool2d_with_indices_backward", &p, element_ptr(go),
                                static_cast<const int64_t*>(element_ptr(idx)), element_ptr(gc)));
  if (!gc.is_same(gi)) gi.copy_(gc);
  op.finish();
  return grad_input;
}

at::Tensor max_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef k,
                               at::IntArrayRef s, at::IntArrayRef pad, at::IntArrayRef dil, bool ceil_mode,
                               const at::Tensor& indices) {
  at::Tensor gi = at::empty({0}, self.options());
  return max_pool2d_backward_out(grad_output, self, k, s, pad, dil, ceil_mode, indices, gi);
}

at::Tensor adaptive_avg_pool2d(const at::Tensor& self, c10::SymIntArrayRef size_sym) {
  auto size = C10_AS_INTARRAYREF_SLOW(size_sym);
  TORCH_CHECK(size.size() == 2, "adaptive_avg_pool2d: output_size must be 2");
  TORCH_CHECK(self.dim() == 3 || self.dim() == 4, "adaptive_avg_pool2d(): Expected 3D or 4D tensor, but got ", self.sizes());
  for (int64_t d = 1; d < self.dim(); d++)
    TORCH_CHECK(self.size(d) > 0, "adaptive_avg_pool2d(): Expected input to have non-zero size for non-batch dimensions");
  record_native("aten::_adaptive_avg_pool2d");
  at::Tensor x = self.contiguous();
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end() - 2);
  shape.push_back(size[0]);
  shape.push_back(size[1]);
  at::Tensor out = at::empty(shape, x.options());
  const int64_t planes = self.numel() / (self.size(-1) * self.size(-2));
  c10::DeviceGuard g(self.device());
  check(vnc_adaptive_avg_pool2d(stream_of(x), "aten::_adaptive_avg_pool2d", planes, self.size(-2), self.size(-1), size[0],
                                size[1], dt(x), element_ptr(x), element_ptr(out)));
  return in_layout_of(out, self);
}

at::Tensor adaptive_avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  for (int64_t d = 1; d < grad_output.dim(); d++)
    TORCH_CHECK(grad_output.size(d) > 0, "adaptive_avg_pool2d_backward(): Expected grad_output to have non-zero size for "
                "non-batch dimensions, but grad_output has sizes ", grad_output.sizes(), " with dimension ", d, " being empty");
  record_native("aten::_adaptive_avg_pool2d_backward");
  at::Tensor go = grad_output.contiguous();
  at::Tensor gi = at::empty(self.sizes(), self.options());
  const int64_t planes = self.numel() / std::max<int64_t>(self.size(-1) * self.size(-2), 1);
  c10::DeviceGuard g(self.device());
  check(vnc_adaptive_avg_pool2d_backward(stream_of(go), "aten::_adaptive_avg_pool2d_backward", planes, self.size(-2),
                                         self.size(-1), go.size(-2), go.size(-1), dt(go), element_ptr(go), element_ptr(gi)));
  return gi.contiguous(self.suggest_memory_format());  // CPU's: the input's layout (channels_last stays)
}

// F.unfold and F.fold: aten::im2col and aten::col2im (each the other's backward in autograd's
// formulas), with ATen's argument and shape checks; the runtime's vnc_unfold / vnc_fold.
void check_pair(at::IntArrayRef v, const char* name) {
  TORCH_CHECK(v.size() == 2, "It is expected ", name, " equals to 2, but got size ", v.size());
}

// N samples of C planes H x W (the image side of both ops).
vnc_conv_params fold_params(const at::Tensor& t, int64_t N, int64_t C, int64_t H, int64_t W, at::IntArrayRef k,
                            at::IntArrayRef dil, at::IntArrayRef pad, at::IntArrayRef stride) {
  vnc_conv_params p{};
  p.nspatial = 2;
  p.N = N;
  p.C = C;
  p.groups = 1;
  p.O = p.C;
  p.dtype = dt(t);
  for (int i = 0; i < 2; i++) {
    p.in[i] = i == 0 ? H : W;
    p.k[i] = k[i], p.dil[i] = dil[i], p.pad[i] = pad[i], p.stride[i] = stride[i];
    p.out[i] = at::native::sliding_window_count(p.in[i], pad[i], dil[i], k[i], stride[i]);
  }
  return p;
}

// CPU's dtypes: floating, bool (native here) and complex (the visible fallback, refused before
// anything is launched); integers raise CPU's error after its shape checks.
void check_fold_dtype(const char* cpu_name, const at::Tensor& self) {
  NEURON_CHECK_SUPPORTED(!self.is_complex(), "\"", cpu_name, "\" of complex tensors is not native on neuron");
}
void check_fold_dtype_after_shapes(const char* cpu_name, const at::Tensor& self) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()) || self.scalar_type() == at::kBool, "\"",
                              cpu_name, "\" not implemented for '", self.scalar_type(), "'");
}

// Resizes `out` as ATen's CPU kernels do (resize_, no warning) and runs `kernel` into it, or
// into a contiguous temporary copied into it.
template <class Kernel>
void into_out(const char* op, const at::Tensor& self, at::Tensor& out, at::IntArrayRef shape, Kernel kernel) {
  check_same_device(op, self, {&out});
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "expected scalar type ", self.scalar_type(), " but found ",
              out.scalar_type());
  out.resize_(shape);
  record_native(op);
  if (self.scalar_type() == at::kDouble) warn_float64(op);
  at::Tensor oc = out.is_contiguous() ? out : at::empty(out.sizes(), out.options());
  c10::DeviceGuard g(self.device());
  kernel(oc);
  if (!oc.is_same(out)) out.copy_(oc);
}

at::Tensor& im2col_out(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef dil, at::IntArrayRef pad,
                       at::IntArrayRef stride, at::Tensor& out) {
  check_fold_dtype("im2col_out_cpu", self);
  check_pair(k, "kernel_size"), check_pair(dil, "dilation"), check_pair(pad, "padding"), check_pair(stride, "stride");
  at::native::im2col_shape_check(self, at::Tensor(), k[0], k[1], dil[0], dil[1], pad[0], pad[1], stride[0], stride[1]);
  check_fold_dtype_after_shapes("im2col_out_cpu", self);
  const bool batched = self.dim() == 4;
  const at::Tensor x = batched ? self.contiguous() : self.contiguous().unsqueeze(0);
  const vnc_conv_params p = fold_params(x, x.size(0), x.size(1), x.size(2), x.size(3), k, dil, pad, stride);
  into_out("aten::im2col", self, out, {p.N, p.C * k[0] * k[1], p.out[0] * p.out[1]}, [&](at::Tensor& o) {
    check(vnc_unfold(stream_of(x), "aten::im2col", &p, element_ptr(x), element_ptr(o)));
  });
  if (!batched) out.squeeze_(0);
  return out;
}

at::Tensor im2col(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef dil, at::IntArrayRef pad,
                  at::IntArrayRef stride) {
  at::Tensor out = at::empty({0}, self.options());
  return im2col_out(self, k, dil, pad, stride, out);
}

at::Tensor& col2im_out(const at::Tensor& self, c10::SymIntArrayRef output_size_sym, at::IntArrayRef k,
                       at::IntArrayRef dil, at::IntArrayRef pad, at::IntArrayRef stride, at::Tensor& out) {
  check_fold_dtype("col2im_out_cpu", self);
  const at::IntArrayRef output_size = C10_AS_INTARRAYREF_SLOW(output_size_sym);
  check_pair(output_size, "output_size"), check_pair(k, "kernel_size"), check_pair(dil, "dilation");
  check_pair(pad, "padding"), check_pair(stride, "stride");
  at::native::col2im_shape_check(self, at::Tensor(), output_size[0], output_size[1], k[0], k[1], dil[0], dil[1], pad[0],
                                 pad[1], stride[0], stride[1]);
  check_fold_dtype_after_shapes("col2im_out_cpu", self);
  const bool batched = self.dim() == 3;
  const at::Tensor col = batched ? self.contiguous() : self.contiguous().unsqueeze(0);
  const vnc_conv_params p =
      fold_params(col, col.size(0), col.size(1) / (k[0] * k[1]), output_size[0], output_size[1], k, dil, pad, stride);
  into_out("aten::col2im", self, out, {p.N, p.C, output_size[0], output_size[1]}, [&](at::Tensor& o) {
    check(vnc_fold(stream_of(col), "aten::col2im", &p, element_ptr(col), element_ptr(o)));
  });
  if (!batched) out.squeeze_(0);
  return out;
}

at::Tensor col2im(const at::Tensor& self, c10::SymIntArrayRef output_size, at::IntArrayRef k, at::IntArrayRef dil,
                  at::IntArrayRef pad, at::IntArrayRef stride) {
  at::Tensor out = at::empty({0}, self.options());
  return col2im_out(self, output_size, k, dil, pad, stride, out);
}

}  // namespace

// Native dtypes as CPU's kernels have them (batch norm, adaptive pooling and max-pool backward:
// floating; max pooling: no bool or complex); other dtypes go to the CPU fallback (gate.h).
NEURON_LIBRARY_IMPL(m) {
  m.impl("convolution_overrideable", TORCH_FN(convolution));
  m.impl("convolution_backward_overrideable", TORCH_FN(convolution_backward));
  m.impl("native_batch_norm", TORCH_FN(batch_norm), kFloatingDtypes);
  m.impl("native_batch_norm_backward", TORCH_FN(batch_norm_backward), kFloatingDtypes);
  m.impl("_native_batch_norm_legit", TORCH_FN(batch_norm_legit), kFloatingDtypes);
  m.impl("_native_batch_norm_legit.no_stats", TORCH_FN(batch_norm_legit_no_stats), kFloatingDtypes);
  m.impl("_native_batch_norm_legit_no_training", TORCH_FN(batch_norm_legit_no_training), kFloatingDtypes);
  // SyncBatchNorm's ops (CUDA-only in ATen: another dtype reaches the fallback, which raises CPU's
  // "Could not run" NotImplementedError; floating inputs with other bad arguments raise here)
  m.impl("batch_norm_stats", TORCH_FN(sync_bn_stats), kFloatingDtypes);
  m.impl("batch_norm_gather_stats", TORCH_FN(sync_bn_gather), kFloatingDtypes);
  m.impl("batch_norm_gather_stats_with_counts", TORCH_FN(sync_bn_gather_counts), kFloatingDtypes);
  m.impl("batch_norm_elemt", TORCH_FN(sync_bn_elemt), kFloatingDtypes);
  m.impl("batch_norm_elemt.out", TORCH_FN(sync_bn_elemt_out), kFloatingDtypes);
  m.impl("batch_norm_backward_reduce", TORCH_FN(sync_bn_backward_reduce), kFloatingDtypes);
  m.impl("batch_norm_backward_elemt", TORCH_FN(sync_bn_backward_elemt), kFloatingDtypes);
  m.impl("max_pool2d_with_indices", TORCH_FN(max_pool2d), kRealDtypes);
  m.impl("max_pool2d_with_indices.out", TORCH_FN(max_pool2d_out), kRealDtypes);
  m.impl("max_pool2d_with_indices_backward", TORCH_FN(max_pool2d_backward), kFloatingDtypes);
  m.impl("max_pool2d_with_indices_backward.grad_input", TORCH_FN(max_pool2d_backward_out), kFloatingDtypes);
  m.impl("_adaptive_avg_pool2d", TORCH_FN(adaptive_avg_pool2d), kFloatingDtypes);
  m.impl("_adaptive_avg_pool2d_backward", TORCH_FN(adaptive_avg_pool2d_backward), kFloatingDtypes);
  // unfold/fold: floating and bool; complex takes the visible fallback, integers raise as on CPU
  m.impl("im2col", TORCH_FN(im2col));
  m.impl("im2col.out", TORCH_FN(im2col_out));
  m.impl("col2im", TORCH_FN(col2im));
  m.impl("col2im.out", TORCH_FN(col2im_out));
}

}  // namespace torch_neuronx
