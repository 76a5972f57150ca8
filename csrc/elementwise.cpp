// Elementwise ops on the neuron key: ATen's structured meta functions (TensorIterator) decide
// shapes, dtypes and errors; launch_ew hands the iterator's geometry to the runtime's
// elementwise instruction set (runtime/include/vnc/ew_table.h).
#include "neuron.h"
#include "gate.h"
#include "structured.h"

#include <ATen/Dispatch_v2.h>

#include <ATen/ops/add_meta.h>
#include <ATen/ops/addcdiv_meta.h>
#include <ATen/ops/addcmul_meta.h>
#include <ATen/ops/atan2_meta.h>
#include <ATen/ops/bitwise_and_meta.h>
#include <ATen/ops/bitwise_not_meta.h>
#include <ATen/ops/bitwise_or_meta.h>
#include <ATen/ops/bitwise_xor_meta.h>
#include <ATen/ops/clamp_max_meta.h>
#include <ATen/ops/clamp_meta.h>
#include <ATen/ops/clamp_min_meta.h>
#include <ATen/ops/copysign_meta.h>
#include <ATen/ops/threshold_meta.h>
#include <ATen/ops/softshrink_backward_meta.h>
#include <ATen/ops/hardshrink_backward_meta.h>
#include <ATen/ops/softshrink_meta.h>
#include <ATen/ops/hardshrink_meta.h>
#include <ATen/ops/div_meta.h>
#include <ATen/ops/elu_backward_meta.h>
#include <ATen/ops/elu_meta.h>
#include <ATen/ops/eq_meta.h>
#include <ATen/ops/fmax_meta.h>
#include <ATen/ops/fmin_meta.h>
#include <ATen/ops/fmod_meta.h>
#include <ATen/ops/ge_meta.h>
#include <ATen/ops/gelu_backward_meta.h>
#include <ATen/ops/gelu_meta.h>
#include <ATen/ops/gt_meta.h>
#include <ATen/ops/hardsigmoid_meta.h>
#include <ATen/ops/le_meta.h>
#include <ATen/ops/leaky_relu_backward_meta.h>
#include <ATen/ops/leaky_relu_meta.h>
#include <ATen/ops/hypot_meta.h>
#include <ATen/ops/isneginf_meta.h>
#include <ATen/ops/mish_meta.h>
#include <ATen/ops/xlogy_meta.h>
#include <ATen/ops/isposinf_meta.h>
#include <ATen/ops/lerp_meta.h>
#include <ATen/ops/lt_meta.h>
#include <ATen/ops/maximum_meta.h>
#include <ATen/ops/minimum_meta.h>
#include <ATen/ops/mul_meta.h>
#include <ATen/ops/ne_meta.h>
#include <ATen/ops/pow_meta.h>
#include <ATen/ops/remainder_meta.h>
#include <ATen/ops/sigmoid_backward_meta.h>
#include <ATen/ops/silu_backward_meta.h>
#include <ATen/ops/softplus_backward_meta.h>
#include <ATen/ops/softplus_meta.h>
#include <ATen/ops/sub_meta.h>
#include <ATen/ops/tanh_backward_meta.h>
#include <ATen/ops/threshold_backward_meta.h>
#include <ATen/MemoryOverlap.h>
#include <torch/library.h>

#define NEURON_UNARY_META(X)                                                                   \
  X(neg) X(sign) X(exp) X(exp2) X(expm1) X(log) X(log2) X(log10) X(log1p) X(sqrt) X(rsqrt)   \
  X(reciprocal) X(sin) X(cos) X(tan) X(asin) X(acos) X(atan) X(sinh) X(cosh) X(tanh) X(asinh) \
  X(acosh) X(atanh) X(erf) X(erfc) X(erfinv) X(sigmoid) X(ceil) X(floor) X(round) X(trunc) X(frac)     \
  X(silu)
#define NEURON_INCLUDE_META(name) <ATen/ops/name##_meta.h>

#include <ATen/ops/acos_meta.h>
#include <ATen/ops/acosh_meta.h>
#include <ATen/ops/asin_meta.h>
#include <ATen/ops/asinh_meta.h>
#include <ATen/ops/atan_meta.h>
#include <ATen/ops/atanh_meta.h>
#include <ATen/ops/ceil_meta.h>
#include <ATen/ops/cos_meta.h>
#include <ATen/ops/cosh_meta.h>
#include <ATen/ops/erf_meta.h>
#include <ATen/ops/erfc_meta.h>
#include <ATen/ops/erfinv_meta.h>
#include <ATen/ops/exp2_meta.h>
#include <ATen/ops/exp_meta.h>
#include <ATen/ops/expm1_meta.h>
#include <ATen/ops/floor_meta.h>
#include <ATen/ops/frac_meta.h>
#include <ATen/ops/log10_meta.h>
#include <ATen/ops/log1p_meta.h>
#include <ATen/ops/log2_meta.h>
#include <ATen/ops/log_meta.h>
#include <ATen/ops/neg_meta.h>
#include <ATen/ops/reciprocal_meta.h>
#include <ATen/ops/round_meta.h>
#include <ATen/ops/rsqrt_meta.h>
#include <ATen/ops/sigmoid_meta.h>
#include <ATen/ops/sign_meta.h>
#include <ATen/ops/silu_meta.h>
#include <ATen/ops/sin_meta.h>
#include <ATen/ops/sinh_meta.h>
#include <ATen/ops/sqrt_meta.h>
#include <ATen/ops/tan_meta.h>
#include <ATen/ops/tanh_meta.h>
#include <ATen/ops/trunc_meta.h>

#include <algorithm>
#include <array>
#include <cfloat>
#include <complex>
#include <string>

namespace torch_neuronx {
namespace {

// "aten::<table name>", stored for the life of the process (op tracking keys on the pointer).
const char* aten_name(vnc_ew_op op) {
  static const auto names = [] {
    std::array<std::string, VNC_EW_COUNT> n;
    for (int i = 0; i < VNC_EW_COUNT; i++) n[i] = std::string("aten::") + vnc_elementwise_name(static_cast<vnc_ew_op>(i));
    return n;
  }();
  return names[op].c_str();
}

// Whether ATen's CPU kernel reads a bfloat16/float16 op's scalar operand in float32 (its
// opmath): mul and the divisions do (BinaryOpsKernel.cpp); every other kernel reads it
// converted to the tensor dtype, as TensorIterator casts its inputs to the common dtype.
bool opmath_scalar(vnc_ew_op op) {
  return op == VNC_EW_mul || op == VNC_EW_div || op == VNC_EW_div_trunc || op == VNC_EW_div_floor;
}

// Scalar operand value, read from the host tensor the TensorIterator wraps, as ATen's CPU
// kernel of `op` reads it (a 16-bit computation may round it first: opmath_scalar).
int32_t put_scalar(at::TensorIteratorBase& iter, int k, vnc_ew_op op, at::ScalarType compute, vnc_scalar_bytes& out) {
  if (at::isComplexType(compute)) {
    auto v = iter.original_scalar_value<c10::complex<double>>(k);
    std::memcpy(out, &v, sizeof v);
    return VNC_COMPLEX128;
  }
  if (at::isFloatingType(compute)) {
    double v = iter.original_scalar_value<double>(k);
    if (at::isReducedFloatingType(compute) && !opmath_scalar(op))
      AT_DISPATCH_REDUCED_FLOATING_TYPES(compute, "put_scalar", [&] { v = static_cast<double>(static_cast<scalar_t>(v)); });
    std::memcpy(out, &v, sizeof v);
    return VNC_FLOAT64;
  }
  if (compute == at::kBool) {
    bool v = iter.original_scalar_value<bool>(k);
    std::memcpy(out, &v, sizeof v);
    return VNC_BOOL;
  }
  int64_t v = iter.original_scalar_value<int64_t>(k);
  std::memcpy(out, &v, sizeof v);
  return VNC_INT64;
}

// Launches `op` over a built TensorIterator (operand 0 = output). Extra scalar inputs (for
// ops whose ATen form takes a Scalar the table reads as an operand) follow the iterator's.
void launch_ew(at::TensorIteratorBase& iter, vnc_ew_op op, const vnc_ew_params& params,
               const char* name, std::initializer_list<double> extra_scalars = {},
               at::ScalarType compute = at::ScalarType::Undefined) {
  if (compute == at::ScalarType::Undefined) compute = iter.common_dtype();
  NEURON_CHECK_SUPPORTED(vnc_elementwise_supports(op, static_cast<int32_t>(compute)), "\"", name,
                         "\" not implemented for '", c10::toString(compute), "' on neuron");
  record_native(name);
  const int nt = iter.ntensors();
  TORCH_CHECK(nt + static_cast<int>(extra_scalars.size()) <= VNC_ITER_MAX_OPERANDS, name, ": too many operands");
  vnc_iter it = iter_geometry(iter);
  it.nops = nt + static_cast<int>(extra_scalars.size());
  std::array<vnc_scalar_bytes, VNC_ITER_MAX_OPERANDS> scalars{};
  uint32_t mask = 0;
  bool f64 = false;
  for (int k = 0; k < nt; k++) {
    if (k >= iter.noutputs() && iter.is_cpu_scalar(k)) {  // Python numbers are not float64 tensors
      mask |= 1u << k;
      it.dtypes[k] = put_scalar(iter, k, op, compute, scalars[k]);
      continue;
    }
    f64 |= iter.dtype(k) == at::kDouble || iter.dtype(k) == at::kComplexDouble;
  }
  int k = nt;
  for (double v : extra_scalars) {
    mask |= 1u << k;
    it.dtypes[k] = VNC_FLOAT64;
    std::memcpy(scalars[k], &v, sizeof v);
    k++;
  }
  if (f64) warn_float64(name);
  if (it.numel == 0) return;
  const at::Tensor& out = iter.tensor(0);
  c10::DeviceGuard guard(out.device());
  check(vnc_elementwise(stream_of(out), name, op, &it,
                        static_cast<int32_t>(compute), &params, mask, scalars.data()));
}

vnc_ew_params no_params() { return vnc_ew_params{}; }

}  // namespace

vnc_iter iter_geometry(const at::TensorIteratorBase& iter) {
  vnc_iter it{};
  const int nt = iter.ntensors();
  TORCH_CHECK(nt <= VNC_ITER_MAX_OPERANDS && iter.ndim() <= VNC_MAX_DIMS, "neuron kernels take at most ",
              VNC_ITER_MAX_OPERANDS, " operands of at most ", VNC_MAX_DIMS, " dims");
  it.nops = nt;
  it.ndim = std::max(iter.ndim(), 1);
  it.numel = iter.numel();
  auto shape = iter.shape();
  for (int d = 0; d < it.ndim; d++) it.shape[d] = d < iter.ndim() ? shape[d] : 1;
  for (int k = 0; k < nt; k++) {
    it.dtypes[k] = static_cast<int32_t>(iter.dtype(k));
    it.data[k] = static_cast<char*>(iter.data_ptr(k));
    auto st = iter.strides(k);
    for (int d = 0; d < it.ndim; d++) it.strides[k][d] = d < iter.ndim() ? st[d] : 0;
  }
  return it;
}

namespace {

// Parameters from a Scalar: the float and the integer view.
vnc_ew_params scalar_params(const at::Scalar& s) {
  vnc_ew_params p{};
  p.f[0] = s.isComplex() ? s.toComplexDouble().real() : s.toDouble();
  p.i[0] = s.isIntegral(true) ? s.toLong() : static_cast<int64_t>(p.f[0]);
  return p;
}

// ---------------------------------------------------------------- impls
// Each Impl::run(op, self, args..., out) launches one runtime op on the prepared iterator.

template <vnc_ew_op OP>
struct Plain {
  template <class M, class... X>
  static void run(M& op, X&&...) { launch_ew(op, OP, no_params(), aten_name(OP)); }
};

template <vnc_ew_op OP>
struct WithAlpha {  // add / sub: alpha
  // The kernels take a real alpha: a complex one with an imaginary part takes the visible fallback.
  static void precheck(const at::Tensor&, const at::Tensor&, const at::Scalar& alpha) {
    NEURON_CHECK_SUPPORTED(!alpha.isComplex() || alpha.toComplexDouble().imag() == 0.0,
                           aten_name(OP), " with a complex alpha is not natively supported on neuron");
  }
  template <class M>
  static void run(M& op, const at::Tensor&, const at::Tensor&, const at::Scalar& alpha, const at::Tensor&) {
    // alpha converted to the computation's dtype as ATen's kernels do: out of range raises,
    // float16/bfloat16 round it (the product of two 16-bit values is exact in float32, so
    // multiplying and adding in float32 gives ATen's fused multiply-add's result)
    const at::ScalarType dt = op.common_dtype();
    AT_DISPATCH_V2(dt, "add", AT_WRAP([&] { (void)alpha.to<scalar_t>(); }), AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kHalf,
                   at::kBFloat16, at::kBool, at::kComplexHalf);
    vnc_ew_params p = scalar_params(alpha);
    if (at::isReducedFloatingType(dt))
      AT_DISPATCH_REDUCED_FLOATING_TYPES(dt, "add", [&] { p.f[0] = static_cast<double>(alpha.to<scalar_t>()); });
    launch_ew(op, OP, p, aten_name(OP));
  }
};

struct DivMode {
  template <class M>
  static void run(M& op, const at::Tensor&, const at::Tensor&, std::optional<c10::string_view> mode, const at::Tensor&) {
    if (!mode) return launch_ew(op, VNC_EW_div, no_params(), "aten::div");
    if (*mode == "trunc") {
      if (at::isReducedFloatingType(op.common_dtype())) {
        // ATen rounds the bfloat16/float16 quotient before truncating it.
        launch_ew(op, VNC_EW_div, no_params(), "aten::div");
        op.maybe_get_output(0).trunc_();
        return;
      }
      return launch_ew(op, VNC_EW_div_trunc, no_params(), "aten::div");
    }
    TORCH_CHECK(*mode == "floor", "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", *mode, "'");
    launch_ew(op, VNC_EW_div_floor, no_params(), "aten::div");
  }
};

// ATen's get_gelutype_enum: the kernels, not the metas, refuse another approximation.
void check_gelu_approximate(c10::string_view approximate) {
  TORCH_CHECK(approximate == "none" || approximate == "tanh", "approximate argument must be either none or tanh.");
}

struct Gelu {
  template <class M>
  static void run(M& op, const at::Tensor&, c10::string_view approximate, const at::Tensor&) {
    check_gelu_approximate(approximate);
    launch_ew(op, approximate == "tanh" ? VNC_EW_gelu_tanh : VNC_EW_gelu, no_params(), "aten::gelu");
  }
};

struct GeluBackward {
  template <class M>
  static void run(M& op, const at::Tensor&, const at::Tensor&, c10::string_view approximate, const at::Tensor&) {
    check_gelu_approximate(approximate);
    launch_ew(op, approximate == "tanh" ? VNC_EW_gelu_tanh_backward : VNC_EW_gelu_backward, no_params(),
              "aten::gelu_backward");
  }
};

template <vnc_ew_op OP>
struct OneScalar {  // leaky_relu(negative_slope), threshold_backward(threshold), addcmul/div(value)
  template <class M, class... X>
  static void run(M& op, const at::Tensor&, X&&... x) { run_scalar(op, x...); }
  template <class M, class... X>
  static void run_scalar(M& op, const at::Scalar& s, X&&...) { launch_ew(op, OP, scalar_params(s), aten_name(OP)); }
  template <class M, class T, class... X, std::enable_if_t<!std::is_convertible_v<T, const at::Scalar&>, int> = 0>
  static void run_scalar(M& op, T&&, X&&... x) { run_scalar(op, x...); }
};

// Ops whose scalars fill the parameters in order (threshold(threshold, value), hardshrink(lambda)),
// recorded under an explicit name (one row may serve several ops).
template <vnc_ew_op OP, const char* NAME>
struct Scalars {
  template <class M, class... X>
  static void run(M& op, X&&... x) {
    vnc_ew_params p{};
    int k = 0;
    (collect(p, k, x), ...);
    launch_ew(op, OP, p, NAME);
  }
  template <class T>
  static void collect(vnc_ew_params& p, int& k, const T& v) {
    if constexpr (std::is_convertible_v<const T&, const at::Scalar&> && !std::is_same_v<T, at::Tensor>) {
      const at::Scalar& s = v;
      p.f[k] = s.toDouble();
      p.i[k] = s.isIntegral(true) ? s.toLong() : static_cast<int64_t>(p.f[k]);
      k++;
    }
  }
};
constexpr char kHardshrink[] = "aten::hardshrink", kSoftshrink[] = "aten::softshrink",
               kHardshrinkBackward[] = "aten::hardshrink_backward", kSoftshrinkBackward[] = "aten::softshrink_backward",
               kThreshold[] = "aten::threshold";
using Hardshrink = Scalars<VNC_EW_hardshrink, kHardshrink>;
using Softshrink = Scalars<VNC_EW_softshrink, kSoftshrink>;
using HardshrinkBackward = Scalars<VNC_EW_shrink_backward, kHardshrinkBackward>;
using SoftshrinkBackward = Scalars<VNC_EW_shrink_backward, kSoftshrinkBackward>;
using Threshold = Scalars<VNC_EW_threshold, kThreshold>;

// prelu (weight broadcast to self by ATen's composite prelu): x > 0 ? x : w x; the backward's
// elementwise gradients as ATen's kernel returns them (grad_weight reduced by autograd).
at::Tensor nx_prelu(const at::Tensor& self, const at::Tensor& weight) {
  record_native("aten::_prelu_kernel");
  check_same_device("aten::_prelu_kernel", self, {&weight});
  at::Tensor out = at::empty_like(self);  // CPU's _prelu_kernel result
  return at::where_out(out, self.gt(0), self, weight * self);
}
std::tuple<at::Tensor, at::Tensor> nx_prelu_backward(const at::Tensor& grad, const at::Tensor& self,
                                                     const at::Tensor& weight) {
  record_native("aten::_prelu_kernel_backward");
  check_same_device("aten::_prelu_kernel_backward", self, {&grad, &weight});
  const at::Tensor pos = self.gt(0);
  return {at::where(pos, grad, weight * grad), at::where(pos, at::zeros({}, grad.options()), self * grad)};
}

// glu: a * sigmoid(b) for the halves a, b of `dim`; its backward as ATen's kernel computes it.
std::pair<at::Tensor, at::Tensor> glu_halves(const char* name, const at::Tensor& self, int64_t dim) {
  TORCH_CHECK(self.dim() > 0, "glu does not support scalars because halving size must be even");
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const int64_t n = self.size(d);
  TORCH_CHECK(n % 2 == 0, "Halving dimension must be even, but dimension ", d, " is size ", n);
  record_native(name);
  return {self.narrow(d, 0, n / 2), self.narrow(d, n / 2, n / 2)};
}
at::Tensor& nx_glu_out(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  auto [a, b] = glu_halves("aten::glu", self, dim);
  return at::mul_out(out, a, at::sigmoid(b));
}
at::Tensor nx_glu(const at::Tensor& self, int64_t dim) {
  auto [a, b] = glu_halves("aten::glu", self, dim);
  return at::mul(a, at::sigmoid(b));
}
at::Tensor& nx_glu_backward_out(const at::Tensor& grad, const at::Tensor& self, int64_t dim, at::Tensor& grad_input) {
  auto [a, b] = glu_halves("aten::glu_backward", self, dim);
  const int64_t d = at::maybe_wrap_dim(dim, self.dim());
  const at::Tensor sig = at::sigmoid(b);
  at::native::resize_output(grad_input, self.sizes());
  grad_input.narrow(d, 0, a.size(d)).copy_(grad * sig);
  grad_input.narrow(d, a.size(d), b.size(d)).copy_(grad * a * sig * (1 - sig));
  return grad_input;
}
at::Tensor nx_glu_backward(const at::Tensor& grad, const at::Tensor& self, int64_t dim) {
  at::Tensor gi = at::empty(self.sizes(), self.options());
  return nx_glu_backward_out(grad, self, dim, gi);
}

struct Softplus {
  template <class M, class... X>
  static void run(M& op, X&&... x) { run_tail<M>(op, x...); }
  template <class M, class... X>
  static void run_tail(M& op, const at::Tensor&, X&&... x) { run_tail<M>(op, x...); }
  template <class M, class... X>
  static void run_tail(M& op, const at::Scalar& beta, const at::Scalar& threshold, X&&...) {
    vnc_ew_params p{};
    p.f[0] = beta.toDouble();
    p.f[1] = threshold.toDouble();
    launch_ew(op, std::is_same_v<M, Structured<at::meta::structured_softplus>> ? VNC_EW_softplus
                                                                              : VNC_EW_softplus_backward,
              p, std::is_same_v<M, Structured<at::meta::structured_softplus>> ? "aten::softplus" : "aten::softplus_backward");
  }
};

struct Elu {
  template <class M>
  static void run(M& op, const at::Tensor&, const at::Scalar& alpha, const at::Scalar& scale,
                  const at::Scalar& input_scale, const at::Tensor&) {
    vnc_ew_params p{};
    p.f[0] = alpha.toDouble();
    p.f[1] = scale.toDouble();
    p.f[2] = input_scale.toDouble();
    launch_ew(op, VNC_EW_elu, p, "aten::elu");
  }
};

struct EluBackward {
  template <class M>
  static void run(M& op, const at::Tensor&, const at::Scalar& alpha, const at::Scalar& scale,
                  const at::Scalar& input_scale, bool is_result, const at::Tensor&, const at::Tensor&) {
    vnc_ew_params p{};
    p.f[0] = alpha.toDouble();
    p.f[1] = scale.toDouble();
    p.f[2] = input_scale.toDouble();
    p.flags = is_result ? 1 : 0;
    launch_ew(op, VNC_EW_elu_backward, p, "aten::elu_backward");
  }
};

struct LeakyReluBackward {
  template <class M>
  static void run(M& op, const at::Tensor&, const at::Tensor&, const at::Scalar& slope, bool, const at::Tensor&) {
    launch_ew(op, VNC_EW_leaky_relu_backward, scalar_params(slope), "aten::leaky_relu_backward");
  }
};

// A Scalar argument as ATen's CPU kernels read it in the compute dtype (Scalar::to<scalar_t>,
// c10's checked conversion): out of the type's range it raises "value cannot be converted to
// type uint8_t without overflow"; a negative integer within range wraps into an unsigned type
// (-3 is 253 for uint8); float16 / bfloat16 round it.
at::Scalar scalar_as(const at::Scalar& s, at::ScalarType dt) {
  at::Scalar r;
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, dt, "scalar_as", [&] { r = at::Scalar(s.to<scalar_t>()); });
  return r;
}

// clamp family: bits 1 (min) and 2 (max) of flags say which bounds are present; the bounds are
// read in the compute dtype `dt`, as ATen's clamp kernels read them.
vnc_ew_params clamp_params(const std::optional<at::Scalar>& lo, const std::optional<at::Scalar>& hi,
                           at::ScalarType dt) {
  vnc_ew_params p{};
  const std::optional<at::Scalar>* bounds[2] = {&lo, &hi};
  for (int k = 0; k < 2; k++) {
    if (!*bounds[k]) continue;
    const at::Scalar v = scalar_as(**bounds[k], dt);
    p.flags |= 1 << k;
    p.f[k] = v.toDouble();
    p.i[k] = at::isIntegralType(dt, true) ? v.toLong() : 0;
  }
  return p;
}

struct Clamp {
  template <class M>
  static void run(M& op, const at::Tensor&, const std::optional<at::Scalar>& lo,
                  const std::optional<at::Scalar>& hi, const at::Tensor& out) {
    // ATen: with both bounds given, a NaN bound makes every element NaN.
    if (lo && hi && (std::isnan(lo->toDouble()) || std::isnan(hi->toDouble()))) {
      const_cast<at::Tensor&>(out).fill_(std::numeric_limits<double>::quiet_NaN());
      return;
    }
    launch_ew(op, VNC_EW_clamp, clamp_params(lo, hi, op.common_dtype()), "aten::clamp");
  }
};

struct ClampMin {
  template <class M>
  static void run(M& op, const at::Tensor&, const at::Scalar& lo, const at::Tensor&) {
    launch_ew(op, VNC_EW_clamp, clamp_params(lo, std::nullopt, op.common_dtype()), "aten::clamp_min");
  }
};

struct ClampMax {
  template <class M>
  static void run(M& op, const at::Tensor&, const at::Scalar& hi, const at::Tensor&) {
    launch_ew(op, VNC_EW_clamp, clamp_params(std::nullopt, hi, op.common_dtype()), "aten::clamp_max");
  }
};

template <vnc_ew_op OP>
struct InputTyped {  // bool-valued tests of the input: compute in the input's own dtype
  template <class M>
  static void run(M& op, const at::Tensor& self, const at::Tensor&) {
    launch_ew(op, OP, no_params(), aten_name(OP), {}, self.scalar_type());
  }
};

// x ** scalar: ATen's special cases (0: ones, 1: copy) and integer checks, then pow with the
// exponent as a scalar operand, read as ATen's kernel reads it: as double for float32/64, in the
// compute dtype otherwise (checked: uint8 ** 300 raises; float16 / bfloat16 round it).
struct PowScalar {
  // A complex exponent makes the result complex: refused before the meta converts the base.
  static void precheck(const at::Tensor&, const at::Scalar& exponent) {
    NEURON_CHECK_SUPPORTED(!exponent.isComplex(), "pow with a complex exponent is not natively supported on neuron");
  }
  template <class M>
  static void run(M& op, const at::Tensor& self, const at::Scalar& exponent, const at::Tensor& out) {
    if (exponent.equal(0.0) || exponent.equal(false)) {
      const_cast<at::Tensor&>(out).fill_(1);
      return;
    }
    if (exponent.equal(1.0) || exponent.equal(true)) {
      const_cast<at::Tensor&>(out).copy_(self);
      return;
    }
    TORCH_CHECK(!(at::isIntegralType(op.common_dtype(), true) && exponent.isIntegral(true) && exponent.toLong() < 0),
                "Integers to negative integer powers are not allowed.");
    const at::ScalarType dt = op.common_dtype();
    const bool as_double = dt == at::kFloat || dt == at::kDouble || at::isComplexType(dt);
    launch_ew(op, VNC_EW_pow, no_params(), "aten::pow", {(as_double ? exponent : scalar_as(exponent, dt)).toDouble()});
  }
};

struct LerpScalar {
  template <class M>
  static void run(M& op, const at::Tensor&, const at::Tensor&, const at::Scalar& w, const at::Tensor&) {
    NEURON_CHECK_SUPPORTED(!at::isComplexType(op.common_dtype()) && !w.isComplex(),
                           "lerp of ", op.common_dtype(), " tensors is not natively supported on neuron");
    launch_ew(op, VNC_EW_lerp, no_params(), "aten::lerp", {w.toDouble()});
  }
};

// ---------------------------------------------------------------- non-structured ops

// relu = clamp_min(0) with NaN propagation; bool is rejected like CPU.
at::Tensor& nx_relu_out_impl(const at::Tensor& self, at::Tensor& out) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Boolean inputs not supported for relu");
  auto iter = at::TensorIteratorConfig().add_output(out).add_const_input(self).build();
  launch_ew(iter, VNC_EW_relu, no_params(), "aten::relu");
  return out;
}
at::Tensor nx_relu(const at::Tensor& self) {
  at::Tensor out = empty_like_iter({self}, self.scalar_type());  // (CPU's clamp_min iterator)
  return nx_relu_out_impl(self, out);
}
at::Tensor& nx_relu_(at::Tensor& self) { return nx_relu_out_impl(self, self); }

// where as CPU PyTorch: the result type of self and other (out= must have it), a uint8
// condition taken as bool with CPU's deprecation warning.
at::Tensor& nx_where_out(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  const auto dtype = at::result_type(self, other);
  TORCH_CHECK(out.scalar_type() == dtype, "Expected out type to be ", dtype, " but got ", out.scalar_type());
  at::Tensor c = cond;
  if (c.scalar_type() == at::kByte) {
    TORCH_WARN_ONCE("where received a uint8 condition tensor. This behavior is deprecated and will be removed in a "
                    "future version of PyTorch. Use a boolean condition instead.");
    c = c.to(at::kBool);
  }
  TORCH_CHECK(c.scalar_type() == at::kBool, "where expected condition to be a boolean tensor, but got a tensor with dtype ",
              c.scalar_type());
  // ATen's rule: 0-dim tensors on another device (CPU scalars) are taken. The iterator reads one
  // as a kernel parameter; any other is moved to out's device.
  int cpu_scalars = 0;
  auto on_out = [&](const at::Tensor& t) {
    return t.dim() != 0 || t.device() == out.device() || cpu_scalars++ == 0 ? t : t.to(out.device());
  };
  c = on_out(c);
  at::Tensor a = on_out(self.scalar_type() == dtype ? self : self.to(dtype));
  at::Tensor b = on_out(other.scalar_type() == dtype ? other : other.to(dtype));
  auto iter = at::TensorIteratorConfig()
                  .check_all_same_dtype(false)
                  .allow_cpu_scalars(true)
                  .add_output(out)
                  .add_const_input(c)
                  .add_const_input(a)
                  .add_const_input(b)
                  .build();
  // A selection moves bits: float64 kept exact (its int64 view), not rounded to float32;
  // complex128 as its float64 pairs; the dtypes the device only stores (float8, uint16-64, bits,
  // float4) selected as the integers of their width.
  if (dtype == at::kComplexDouble) {
    auto bits = [&](const at::Tensor& t) {  // (a CPU scalar's pair view has a dimension: moved first)
      return at::view_as_real(t.to(out.device())).view(at::kLong);
    };
    at::Tensor o = bits(out);  // (out sized and laid out by the iterator)
    nx_where_out(c.to(out.device()).unsqueeze(-1), bits(a), bits(b), o);
    return out;
  }
  if (dtype == at::kDouble || in_set(kStoredOnlyDtypes, dtype)) {
    const at::ScalarType as = c10::elementSize(dtype) == 1   ? at::kByte
                              : c10::elementSize(dtype) == 2 ? at::kShort
                              : c10::elementSize(dtype) == 4 ? at::kInt
                                                             : at::kLong;
    at::Tensor bits = out.view(as);  // (out sized and laid out by the iterator)
    nx_where_out(c, a.view(as), b.view(as), bits);
    return out;
  }
  launch_ew(iter, VNC_EW_where, no_params(), "aten::where", {}, dtype);
  return out;
}

at::Tensor nx_where(const at::Tensor& cond, const at::Tensor& self, const at::Tensor& other) {
  // the output on the device of the first non-CPU argument (ATen's rule: CPU 0-dim tensors ride along)
  const at::Device dev = !self.is_cpu() ? self.device() : !other.is_cpu() ? other.device() : cond.device();
  at::Tensor out = at::empty({0}, self.options().dtype(at::result_type(self, other)).device(dev));
  return nx_where_out(cond, self, other, out);
}

template <vnc_ew_op OP>
at::Tensor& nx_logical_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  auto iter = at::TensorIteratorConfig()
                  .check_all_same_dtype(false)
                  .allow_cpu_scalars(true)
                  .add_output(out)
                  .add_const_input(self)
                  .add_const_input(other)
                  .build();
  launch_ew(iter, OP, no_params(), aten_name(OP), {}, at::promote_types(self.scalar_type(), other.scalar_type()));
  return out;
}
template <vnc_ew_op OP>
at::Tensor nx_logical(const at::Tensor& self, const at::Tensor& other) {
  at::Tensor out = at::empty({0}, self.options().dtype(at::kBool));
  return nx_logical_out<OP>(self, other, out);
}
template <vnc_ew_op OP>
at::Tensor& nx_logical_(at::Tensor& self, const at::Tensor& other) {
  return nx_logical_out<OP>(self, other, self);
}

at::Tensor& nx_logical_not_out(const at::Tensor& self, at::Tensor& out) {
  auto iter = at::TensorIteratorConfig().check_all_same_dtype(false).add_output(out).add_const_input(self).build();
  launch_ew(iter, VNC_EW_logical_not, no_params(), "aten::logical_not", {}, self.scalar_type());
  return out;
}
at::Tensor nx_logical_not(const at::Tensor& self) {
  at::Tensor out = at::empty({0}, self.options().dtype(at::kBool));
  return nx_logical_not_out(self, out);
}
at::Tensor& nx_logical_not_(at::Tensor& self) { return nx_logical_not_out(self, self); }

// abs: real tensors only here (complex abs changes dtype; it stays on the fallback).
at::Tensor& nx_abs_out(const at::Tensor& self, at::Tensor& out) {
  NEURON_CHECK_SUPPORTED(self.scalar_type() != at::kBool, "abs of bool tensors is not natively supported on neuron");
  if (self.is_complex()) {  // |z| = hypot(re, im), as std::abs of a complex
    const at::Tensor r = at::view_as_real(self);
    return at::hypot_out(out, r.select(-1, 0), r.select(-1, 1));
  }
  auto iter = at::TensorIteratorConfig().add_output(out).add_const_input(self).build();
  launch_ew(iter, VNC_EW_abs, no_params(), "aten::abs");
  return out;
}

at::Tensor& nx_hardswish_out(const at::Tensor& self, at::Tensor& out) {
  auto iter = at::TensorIterator::unary_op(out, self);
  launch_ew(iter, VNC_EW_hardswish, no_params(), "aten::hardswish");
  return out;
}
at::Tensor nx_hardswish(const at::Tensor& self) {
  at::Tensor out;
  auto iter = at::TensorIterator::unary_op(out, self);
  launch_ew(iter, VNC_EW_hardswish, no_params(), "aten::hardswish");
  return iter.output();
}
at::Tensor& nx_hardswish_(at::Tensor& self) { return nx_hardswish_out(self, self); }

at::Tensor nx_hardswish_backward(const at::Tensor& grad, const at::Tensor& self) {
  at::Tensor out;
  auto iter = at::TensorIterator::borrowing_binary_op(out, grad, self);
  launch_ew(iter, VNC_EW_hardswish_backward, no_params(), "aten::hardswish_backward");
  return iter.output();
}

at::Tensor& nx_hardtanh_backward_out(const at::Tensor& grad, const at::Tensor& self, const at::Scalar& lo,
                                  const at::Scalar& hi, at::Tensor& out) {
  auto iter = at::TensorIterator::borrowing_binary_op(out, grad, self);
  vnc_ew_params p{};
  p.f[0] = lo.toDouble();
  p.f[1] = hi.toDouble();
  launch_ew(iter, VNC_EW_hardtanh_backward, p, "aten::hardtanh_backward");
  return out;
}
at::Tensor nx_hardtanh_backward(const at::Tensor& grad, const at::Tensor& self, const at::Scalar& lo, const at::Scalar& hi) {
  at::Tensor out;
  auto iter = at::TensorIterator::borrowing_binary_op(out, grad, self);
  vnc_ew_params p{};
  p.f[0] = lo.toDouble();
  p.f[1] = hi.toDouble();
  launch_ew(iter, VNC_EW_hardtanh_backward, p, "aten::hardtanh_backward");
  return iter.output();
}

at::Tensor& nx_floor_divide_out(const at::Tensor& self, const at::Tensor& other, at::Tensor& out) {
  auto iter = at::TensorIterator::binary_op(out, self, other);
  launch_ew(iter, VNC_EW_div_floor, no_params(), "aten::floor_divide");
  return out;
}
at::Tensor nx_floor_divide(const at::Tensor& self, const at::Tensor& other) {
  at::Tensor out;
  auto iter = at::TensorIterator::binary_op(out, self, other);
  launch_ew(iter, VNC_EW_div_floor, no_params(), "aten::floor_divide");
  return iter.output();
}
at::Tensor& nx_floor_divide_(at::Tensor& self, const at::Tensor& other) { return nx_floor_divide_out(self, other, self); }

// hardtanh = clamp with integer bounds kept integral for integer inputs (as ATen).
at::Tensor& nx_hardtanh_out(const at::Tensor& self, const at::Scalar& lo, const at::Scalar& hi, at::Tensor& out) {
  TORCH_CHECK(self.scalar_type() != at::kBool, "Bool inputs not supported for hardtanh");
  if (at::isIntegralType(self.scalar_type(), false)) {
    TORCH_CHECK(self.dtype() != at::kByte || (lo.toLong() >= 0 && hi.toLong() >= 0),
                "cannot do hardtanh on an unsigned type with negative limits");
    return at::clamp_out(out, self, lo.toLong(), hi.toLong());
  }
  return at::clamp_out(out, self, lo, hi);
}
at::Tensor nx_hardtanh(const at::Tensor& self, const at::Scalar& lo, const at::Scalar& hi) {
  at::Tensor out = at::empty_like(self);
  return nx_hardtanh_out(self, lo, hi, out);
}
at::Tensor& nx_hardtanh_(at::Tensor& self, const at::Scalar& lo, const at::Scalar& hi) {
  return nx_hardtanh_out(self, lo, hi, self);
}

// masked_fill: where(mask, value, self) written back into self (value cast to self's dtype).
at::Tensor& nx_masked_fill_(at::Tensor& self, const at::Tensor& mask, const at::Scalar& value) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_fill_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes) {
    // CPU PyTorch fills expanded tensors, with this warning: an element that several positions
    // share takes the value if any of them is masked
    TORCH_WARN("Use of masked_fill_ on expanded tensors is deprecated. Please clone() the tensor before performing "
               "this operation. This also applies to advanced indexing e.g. tensor[mask] = scalar");
    at::Tensor base = self;
    std::vector<int64_t> shared;
    for (int64_t d = 0; d < self.dim(); d++)
      if (self.stride(d) == 0 && self.size(d) > 1) {
        base = base.narrow(d, 0, 1);
        shared.push_back(d);
      }
    if (!shared.empty()) {
      nx_masked_fill_(base, at::any(mask.expand(self.sizes()), shared, /*keepdim=*/true), value);
      return self;
    }
  }
  at::assert_no_internal_overlap(self);
  // the value converted to self's dtype as ATen's kernel does (checked: out of range raises)
  AT_DISPATCH_V2(self.scalar_type(), "masked_fill_", AT_WRAP([&] { (void)value.to<scalar_t>(); }),
                 AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kHalf, at::kBFloat16, at::kBool, at::kComplexHalf);
  at::Tensor fill = at::scalar_tensor(value, self.options().device(at::kCPU));
  at::Tensor out = at::empty_like(self);
  nx_where_out(mask, fill, self, out);
  return self.copy_(out);
}
at::Tensor& nx_masked_fill_tensor_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return nx_masked_fill_(self, mask, value.item());
}

at::Tensor& nx_isnan_out(const at::Tensor& self, at::Tensor& out) {
  auto iter = at::TensorIteratorConfig().check_all_same_dtype(false).add_output(out).add_const_input(self).build();
  launch_ew(iter, VNC_EW_isnan, no_params(), "aten::isnan", {}, self.scalar_type());
  return out;
}
at::Tensor nx_isnan(const at::Tensor& self) {
  if (self.is_complex()) return at::logical_or(at::isnan(at::real(self)), at::isnan(at::imag(self)));
  at::Tensor out = empty_like_iter({self}, at::kBool);  // (CPU's self != self iterator)
  return nx_isnan_out(self, out);
}

// clamp with tensor bounds: both bounds one kernel; one bound is maximum / minimum (as ATen).
struct ClampTensor {
  template <class M>
  static void run(M& op, const at::Tensor&, const std::optional<at::Tensor>& lo, const std::optional<at::Tensor>& hi,
                  const at::Tensor&) {
    const bool has_lo = lo && lo->defined(), has_hi = hi && hi->defined();
    const vnc_ew_op k = has_lo && has_hi ? VNC_EW_clamp_tensor : has_lo ? VNC_EW_maximum : VNC_EW_minimum;
    launch_ew(op, k, no_params(), "aten::clamp");
  }
};

template <vnc_ew_op OP>
struct ClampBound {  // clamp_min / clamp_max with a tensor bound
  template <class M, class... X>
  static void run(M& op, X&&...) {
    launch_ew(op, OP, no_params(), OP == VNC_EW_maximum ? "aten::clamp_min" : "aten::clamp_max");
  }
};

at::Tensor& nx_mish_backward_out(const at::Tensor& grad, const at::Tensor& self, at::Tensor& out) {
  auto iter = at::TensorIterator::borrowing_binary_op(out, grad, self);
  launch_ew(iter, VNC_EW_mish_backward, no_params(), "aten::mish_backward");
  return out;
}
at::Tensor nx_mish_backward(const at::Tensor& grad, const at::Tensor& self) {
  at::Tensor out;
  auto iter = at::TensorIterator::borrowing_binary_op(out, grad, self);
  launch_ew(iter, VNC_EW_mish_backward, no_params(), "aten::mish_backward");
  return iter.output();
}

// nan_to_num: NaN -> nan (default 0), +-inf -> posinf / neginf (default: the dtype's largest and
// lowest finite values; float64, computed in float32, takes float32's). Integer and bool
// tensors are copied unchanged, as ATen does.
at::Tensor& nx_nan_to_num_out(const at::Tensor& self, std::optional<double> nan, std::optional<double> posinf,
                              std::optional<double> neginf, at::Tensor& out) {
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "nan_to_num: dtype of out: ", out.scalar_type(),
              " should be same as input: ", self.scalar_type());
  if (!at::isFloatingType(self.scalar_type()) && !self.is_complex()) {
    at::native::resize_output(out, self.sizes());
    out.copy_(self);
    return out;
  }
  NEURON_CHECK_SUPPORTED(!self.is_complex(), "nan_to_num of complex tensors is not natively supported on neuron");
  vnc_ew_params p{};
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, self.scalar_type(), "nan_to_num", [&] {
    p.f[0] = nan.value_or(0.0);
    p.f[1] = posinf.value_or(static_cast<double>(std::numeric_limits<scalar_t>::max()));
    p.f[2] = neginf.value_or(static_cast<double>(std::numeric_limits<scalar_t>::lowest()));
  });
  if (self.scalar_type() == at::kDouble)  // computed in float32: its finite range, so the result stays finite
    for (int i = 1; i < 3; i++) p.f[i] = std::clamp(p.f[i], -double(FLT_MAX), double(FLT_MAX));
  auto iter = at::TensorIterator::unary_op(out, self);
  launch_ew(iter, VNC_EW_nan_to_num, p, "aten::nan_to_num");
  return out;
}
at::Tensor nx_nan_to_num(const at::Tensor& self, std::optional<double> nan, std::optional<double> posinf,
                         std::optional<double> neginf) {
  at::Tensor out = at::empty_like(self);
  return nx_nan_to_num_out(self, nan, posinf, neginf, out);
}
at::Tensor& nx_nan_to_num_(at::Tensor& self, std::optional<double> nan, std::optional<double> posinf,
                           std::optional<double> neginf) {
  return nx_nan_to_num_out(self, nan, posinf, neginf, self);
}

// round(decimals=d): ATen's round_decimals_kernel — x * 10^d rounded half to even, then
// divided by 10^d (for d < 0: x / 10^-d rounded, times 10^-d), in float32 (ATen's opmath: a
// 16-bit tensor is rounded once, at the end). Floating tensors only, as ATen.
at::Tensor& nx_round_decimals_out(const at::Tensor& self, int64_t decimals, at::Tensor& out) {
  NEURON_CHECK_SUPPORTED(at::isFloatingType(self.scalar_type()), "round(decimals) of ", self.scalar_type(),
                         " tensors is not natively supported on neuron");  // CPU raises for those
  check_same_device("aten::round.decimals_out", self, {&out});
  TORCH_CHECK(at::canCast(self.scalar_type(), out.scalar_type()), "result type ", self.scalar_type(),
              " can't be cast to the desired output type ", out.scalar_type());
  out_overlaps(out, {self}, true);  // CPU's refusal (a TensorIterator); computed apart anyway
  record_native("aten::round");
  const at::Tensor x = at::isReducedFloatingType(self.scalar_type()) ? self.to(at::kFloat) : self;
  const double p = std::pow(10.0, static_cast<double>(decimals < 0 ? -decimals : decimals));
  const at::Tensor r = decimals == 0 ? at::round(x) : decimals > 0 ? at::round(x * p) / p : at::round(x / p) * p;
  at::native::resize_output(out, self.sizes());
  return out.copy_(r);
}
at::Tensor nx_round_decimals(const at::Tensor& self, int64_t decimals) {
  at::Tensor out = empty_like_iter({self}, self.scalar_type());
  return nx_round_decimals_out(self, decimals, out);
}
at::Tensor& nx_round_decimals_(at::Tensor& self, int64_t decimals) { return nx_round_decimals_out(self, decimals, self); }

// pow with a scalar base (2 ** t): the tensor-tensor kernel with the base as a host 0-dim
// operand of the result dtype, as ATen composes it (a base of 1 gives ones). The base converts
// as TensorIterator casts a wrapped number, unchecked: 300 is 44 in uint8, 1e10 inf in float16.
// The result is contiguous whatever the exponent's layout, as ATen's pow.Scalar meta allocates it.
at::Tensor nx_pow_scalar_base(const at::Scalar& base, const at::Tensor& exponent) {
  const at::ScalarType dt = at::result_type(base, exponent);
  at::Tensor out = at::empty(exponent.sizes(), exponent.options().dtype(dt));
  if (base.equal(1)) return out.fill_(1);
  return at::pow_out(out, c10::scalar_to_tensor(base).to(dt), exponent);
}

// sgn: sign for real dtypes; complex inputs (z / |z|) take the visible CPU fallback.
at::Tensor& nx_sgn_out(const at::Tensor& self, at::Tensor& out) {
  NEURON_CHECK_SUPPORTED(!self.is_complex(), "sgn of complex tensors is not natively supported on neuron");
  return at::sign_out(out, self);
}
at::Tensor nx_sgn(const at::Tensor& self) {
  at::Tensor out = at::empty({0}, self.options());
  return nx_sgn_out(self, out);
}
at::Tensor& nx_sgn_(at::Tensor& self) { return nx_sgn_out(self, self); }

}  // namespace

// The three variants of a structured op: functional, in-place and out= kernels.
#define REG3(FN, IN, OUT, META, IMPL, ...)                                                    \
  m.impl(FN, TORCH_FN((Variants<at::meta::META, ##__VA_ARGS__>::functional<IMPL>)));         \
  m.impl(IN, TORCH_FN((Variants<at::meta::META, ##__VA_ARGS__>::inplace<IMPL>)));            \
  m.impl(OUT, TORCH_FN((Variants<at::meta::META, ##__VA_ARGS__>::out<IMPL>)));
// Functional and out= only (backward ops).
#define REG2(FN, OUT, META, IMPL, ...)                                                        \
  m.impl(FN, TORCH_FN((Variants<at::meta::META, ##__VA_ARGS__>::functional<IMPL>)));         \
  m.impl(OUT, TORCH_FN((Variants<at::meta::META, ##__VA_ARGS__>::out<IMPL>)));

using T = const at::Tensor&;
using S = const at::Scalar&;

NEURON_LIBRARY_IMPL(m) {
#define REG_UNARY(name) REG3(#name, #name "_", #name ".out", structured_##name, Plain<VNC_EW_##name>)
  NEURON_UNARY_META(REG_UNARY)
#undef REG_UNARY
  REG3("add.Tensor", "add_.Tensor", "add.out", structured_add_Tensor, WithAlpha<VNC_EW_add>, T, S)
  REG3("sub.Tensor", "sub_.Tensor", "sub.out", structured_sub_Tensor, WithAlpha<VNC_EW_sub>, T, S)
  REG3("mul.Tensor", "mul_.Tensor", "mul.out", structured_mul_Tensor, Plain<VNC_EW_mul>, T)
  REG3("div.Tensor", "div_.Tensor", "div.out", structured_div_Tensor, Plain<VNC_EW_div>, T)
  REG3("div.Tensor_mode", "div_.Tensor_mode", "div.out_mode", structured_div_Tensor_mode, DivMode, T,
       std::optional<c10::string_view>)
  REG3("remainder.Tensor", "remainder_.Tensor", "remainder.Tensor_out", structured_remainder_Tensor,
       Plain<VNC_EW_remainder>, T)
  REG3("fmod.Tensor", "fmod_.Tensor", "fmod.Tensor_out", structured_fmod_Tensor, Plain<VNC_EW_fmod>, T)
  REG3("pow.Tensor_Tensor", "pow_.Tensor", "pow.Tensor_Tensor_out", structured_pow_Tensor_Tensor, Plain<VNC_EW_pow>, T)
  REG3("pow.Tensor_Scalar", "pow_.Scalar", "pow.Tensor_Scalar_out", structured_pow_Tensor_Scalar, PowScalar, S)
  REG3("atan2", "atan2_", "atan2.out", structured_atan2, Plain<VNC_EW_atan2>, T)
  REG2("maximum", "maximum.out", structured_maximum, Plain<VNC_EW_maximum>, T)
  REG2("minimum", "minimum.out", structured_minimum, Plain<VNC_EW_minimum>, T)
  REG2("fmax", "fmax.out", structured_fmax, Plain<VNC_EW_fmax>, T)
  REG2("fmin", "fmin.out", structured_fmin, Plain<VNC_EW_fmin>, T)
#define REG_CMP(name)                                                                          \
  REG3(#name ".Tensor", #name "_.Tensor", #name ".Tensor_out", structured_##name##_Tensor, Plain<VNC_EW_##name>, T) \
  REG3(#name ".Scalar", #name "_.Scalar", #name ".Scalar_out", structured_##name##_Scalar, Plain<VNC_EW_##name>, S)
  REG_CMP(eq) REG_CMP(ne) REG_CMP(lt) REG_CMP(le) REG_CMP(gt) REG_CMP(ge)
#undef REG_CMP
  REG3("bitwise_and.Tensor", "bitwise_and_.Tensor", "bitwise_and.Tensor_out", structured_bitwise_and_Tensor, Plain<VNC_EW_bitwise_and>, T)
  REG3("bitwise_or.Tensor", "bitwise_or_.Tensor", "bitwise_or.Tensor_out", structured_bitwise_or_Tensor, Plain<VNC_EW_bitwise_or>, T)
  REG3("bitwise_xor.Tensor", "bitwise_xor_.Tensor", "bitwise_xor.Tensor_out", structured_bitwise_xor_Tensor, Plain<VNC_EW_bitwise_xor>, T)
  REG3("bitwise_not", "bitwise_not_", "bitwise_not.out", structured_bitwise_not, Plain<VNC_EW_bitwise_not>)
  REG3("gelu", "gelu_", "gelu.out", structured_gelu, Gelu, c10::string_view)
  REG2("gelu_backward", "gelu_backward.grad_input", structured_gelu_backward, GeluBackward, T, c10::string_view)
  REG2("silu_backward", "silu_backward.grad_input", structured_silu_backward, Plain<VNC_EW_silu_backward>, T)
  REG2("sigmoid_backward", "sigmoid_backward.grad_input", structured_sigmoid_backward, Plain<VNC_EW_sigmoid_backward>, T)
  REG2("tanh_backward", "tanh_backward.grad_input", structured_tanh_backward, Plain<VNC_EW_tanh_backward>, T)
  REG2("threshold_backward", "threshold_backward.grad_input", structured_threshold_backward,
       OneScalar<VNC_EW_threshold_backward>, T, S)
  REG2("softplus", "softplus.out", structured_softplus, Softplus, S, S)  // ATen has no softplus_
  REG2("softplus_backward", "softplus_backward.grad_input", structured_softplus_backward, Softplus, T, S, S)
  REG3("leaky_relu", "leaky_relu_", "leaky_relu.out", structured_leaky_relu, OneScalar<VNC_EW_leaky_relu>, S)
  REG2("leaky_relu_backward", "leaky_relu_backward.grad_input", structured_leaky_relu_backward,
       LeakyReluBackward, T, S, bool)
  REG3("elu", "elu_", "elu.out", structured_elu, Elu, S, S, S)
  REG2("elu_backward", "elu_backward.grad_input", structured_elu_backward, EluBackward, S, S, S, bool, T)
  REG3("hardsigmoid", "hardsigmoid_", "hardsigmoid.out", structured_hardsigmoid, Plain<VNC_EW_hardsigmoid>)
  REG3("clamp", "clamp_", "clamp.out", structured_clamp, Clamp, const std::optional<at::Scalar>&,
       const std::optional<at::Scalar>&)
  REG3("hypot", "hypot_", "hypot.out", structured_hypot, Plain<VNC_EW_hypot>, T)
  REG3("copysign.Tensor", "copysign_.Tensor", "copysign.out", structured_copysign_Tensor, Plain<VNC_EW_copysign>, T)
  REG2("hardshrink", "hardshrink.out", structured_hardshrink, Hardshrink, S)
  REG2("softshrink", "softshrink.out", structured_softshrink, Softshrink, S)
  REG2("hardshrink_backward", "hardshrink_backward.grad_input", structured_hardshrink_backward, HardshrinkBackward, T, S)
  REG2("softshrink_backward", "softshrink_backward.grad_input", structured_softshrink_backward, SoftshrinkBackward, T, S)
  // CPU's threshold has no bool or complex kernel: those go to it, and it raises.
  m.impl("threshold", TORCH_FN((Variants<at::meta::structured_threshold, S, S>::functional<Threshold>)), kRealDtypes);
  m.impl("threshold_", TORCH_FN((Variants<at::meta::structured_threshold, S, S>::inplace<Threshold>)), kRealDtypes);
  m.impl("threshold.out", TORCH_FN((Variants<at::meta::structured_threshold, S, S>::out<Threshold>)), kRealDtypes);
  // CPU's prelu and glu kernels are floating only: other dtypes go to it, and it raises.
  m.impl("_prelu_kernel", TORCH_FN(nx_prelu), kFloatingDtypes);
  m.impl("_prelu_kernel_backward", TORCH_FN(nx_prelu_backward), kFloatingDtypes);
  m.impl("glu", TORCH_FN(nx_glu), kFloatingDtypes);
  m.impl("glu.out", TORCH_FN(nx_glu_out), kFloatingDtypes);
  m.impl("glu_backward", TORCH_FN(nx_glu_backward), kFloatingDtypes);
  m.impl("glu_backward.grad_input", TORCH_FN(nx_glu_backward_out), kFloatingDtypes);
  REG3("xlogy.Tensor", "xlogy_.Tensor", "xlogy.OutTensor", structured_xlogy_Tensor, Plain<VNC_EW_xlogy>, T)
  REG3("mish", "mish_", "mish.out", structured_mish, Plain<VNC_EW_mish>)
  m.impl("mish_backward", TORCH_FN(nx_mish_backward));
  m.impl("nan_to_num", TORCH_FN(nx_nan_to_num));
  m.impl("nan_to_num_", TORCH_FN(nx_nan_to_num_));
  m.impl("nan_to_num.out", TORCH_FN(nx_nan_to_num_out));
  m.impl("round.decimals", TORCH_FN(nx_round_decimals));
  m.impl("round_.decimals", TORCH_FN(nx_round_decimals_));
  m.impl("round.decimals_out", TORCH_FN(nx_round_decimals_out));
  m.impl("pow.Scalar", TORCH_FN(nx_pow_scalar_base));
  m.impl("sgn", TORCH_FN(nx_sgn));
  m.impl("sgn_", TORCH_FN(nx_sgn_));
  m.impl("sgn.out", TORCH_FN(nx_sgn_out));
  REG3("clamp.Tensor", "clamp_.Tensor", "clamp.Tensor_out", structured_clamp_Tensor, ClampTensor,
       const std::optional<at::Tensor>&, const std::optional<at::Tensor>&)
  REG3("clamp_min.Tensor", "clamp_min_.Tensor", "clamp_min.Tensor_out", structured_clamp_min_Tensor,
       ClampBound<VNC_EW_maximum>, T)
  REG3("clamp_max.Tensor", "clamp_max_.Tensor", "clamp_max.Tensor_out", structured_clamp_max_Tensor,
       ClampBound<VNC_EW_minimum>, T)
  REG3("clamp_min", "clamp_min_", "clamp_min.out", structured_clamp_min, ClampMin, S)
  REG3("clamp_max", "clamp_max_", "clamp_max.out", structured_clamp_max, ClampMax, S)
  REG2("isneginf", "isneginf.out", structured_isneginf, InputTyped<VNC_EW_isneginf>)
  REG2("isposinf", "isposinf.out", structured_isposinf, InputTyped<VNC_EW_isposinf>)
  REG3("lerp.Scalar", "lerp_.Scalar", "lerp.Scalar_out", structured_lerp_Scalar, LerpScalar, T, S)
  REG3("lerp.Tensor", "lerp_.Tensor", "lerp.Tensor_out", structured_lerp_Tensor, Plain<VNC_EW_lerp>, T, T)
  REG3("addcmul", "addcmul_", "addcmul.out", structured_addcmul, OneScalar<VNC_EW_addcmul>, T, T, S)
  REG3("addcdiv", "addcdiv_", "addcdiv.out", structured_addcdiv, OneScalar<VNC_EW_addcdiv>, T, T, S)
  m.impl("relu", TORCH_FN(nx_relu));
  m.impl("relu_", TORCH_FN(nx_relu_));
  m.impl("where.self", TORCH_FN(nx_where), kAnyDtype);  // (the first tensor is the condition)
  m.impl("where.self_out", TORCH_FN(nx_where_out), kAnyDtype);
  m.impl("logical_and", TORCH_FN(nx_logical<VNC_EW_logical_and>));
  m.impl("logical_and_", TORCH_FN(nx_logical_<VNC_EW_logical_and>));
  m.impl("logical_and.out", TORCH_FN(nx_logical_out<VNC_EW_logical_and>));
  m.impl("logical_or", TORCH_FN(nx_logical<VNC_EW_logical_or>));
  m.impl("logical_or_", TORCH_FN(nx_logical_<VNC_EW_logical_or>));
  m.impl("logical_or.out", TORCH_FN(nx_logical_out<VNC_EW_logical_or>));
  m.impl("logical_xor", TORCH_FN(nx_logical<VNC_EW_logical_xor>));
  m.impl("logical_xor_", TORCH_FN(nx_logical_<VNC_EW_logical_xor>));
  m.impl("logical_xor.out", TORCH_FN(nx_logical_out<VNC_EW_logical_xor>));
  m.impl("logical_not", TORCH_FN(nx_logical_not));
  m.impl("logical_not_", TORCH_FN(nx_logical_not_));
  m.impl("logical_not.out", TORCH_FN(nx_logical_not_out));
  m.impl("abs.out", TORCH_FN(nx_abs_out));
  m.impl("hardswish", TORCH_FN(nx_hardswish));
  m.impl("hardswish_", TORCH_FN(nx_hardswish_));
  m.impl("hardswish.out", TORCH_FN(nx_hardswish_out));
  m.impl("hardswish_backward", TORCH_FN(nx_hardswish_backward));
  m.impl("hardtanh_backward", TORCH_FN(nx_hardtanh_backward));
  m.impl("hardtanh_backward.grad_input", TORCH_FN(nx_hardtanh_backward_out));
  m.impl("isnan", TORCH_FN(nx_isnan));
  m.impl("masked_fill_.Scalar", TORCH_FN(nx_masked_fill_));
  m.impl("masked_fill_.Tensor", TORCH_FN(nx_masked_fill_tensor_));
  m.impl("hardtanh", TORCH_FN(nx_hardtanh));
  m.impl("hardtanh_", TORCH_FN(nx_hardtanh_));
  m.impl("hardtanh.out", TORCH_FN(nx_hardtanh_out));
  m.impl("floor_divide", TORCH_FN(nx_floor_divide));
  m.impl("floor_divide_.Tensor", TORCH_FN(nx_floor_divide_));
  m.impl("floor_divide.out", TORCH_FN(nx_floor_divide_out));
}

}  // namespace torch_neuronx
