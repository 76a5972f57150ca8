// Image ops on the neuron key (runtime: vnc/vision.h): avg_pool2d, native_group_norm, every
// upsampling op (nearest, nearest-exact, linear, bilinear, bicubic, trilinear; 1-D to 3-D),
// _adaptive_avg_pool3d, avg_pool3d, max_pool3d_with_indices, adaptive_max_pool2d/3d, reflection /
// replication padding of 1 to 3 dims, grid_sampler_2d/3d (F.grid_sample), each with its backward.
//
// Argument checks and output shapes come from ATen's structured metas where the op has one
// (so errors are PyTorch's own); outputs keep the memory format the meta picks (channels-last
// in, channels-last out) and the runtime reads and writes every operand at its strides.
#include "neuron.h"
#include "gate.h"
#include "structured.h"

#include <ATen/native/GridSamplerUtils.h>
#include <ATen/native/Padding.h>
#include <ATen/native/Pool.h>
#include <ATen/native/UpSample.h>
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/ops/_upsample_nearest_exact1d_backward_meta.h>
#include <ATen/ops/_upsample_nearest_exact1d_meta.h>
#include <ATen/ops/_upsample_nearest_exact2d_backward_meta.h>
#include <ATen/ops/_upsample_nearest_exact2d_meta.h>
#include <ATen/ops/_upsample_nearest_exact3d_backward_meta.h>
#include <ATen/ops/_upsample_nearest_exact3d_meta.h>
#include <ATen/ops/adaptive_max_pool2d_backward_meta.h>
#include <ATen/ops/adaptive_max_pool2d_meta.h>
#include <ATen/ops/adaptive_max_pool3d_backward_meta.h>
#include <ATen/ops/adaptive_max_pool3d_meta.h>
#include <ATen/ops/avg_pool2d_backward_meta.h>
#include <ATen/ops/avg_pool2d_meta.h>
#include <ATen/ops/avg_pool3d_backward_meta.h>
#include <ATen/ops/avg_pool3d_meta.h>
#include <ATen/ops/reflection_pad1d_meta.h>
#include <ATen/ops/reflection_pad3d_meta.h>
#include <ATen/ops/replication_pad1d_meta.h>
#include <ATen/ops/replication_pad2d_meta.h>
#include <ATen/ops/replication_pad3d_meta.h>
#include <ATen/ops/upsample_bicubic2d_backward_meta.h>
#include <ATen/ops/upsample_bicubic2d_meta.h>
#include <ATen/ops/upsample_bilinear2d_backward_meta.h>
#include <ATen/ops/upsample_bilinear2d_meta.h>
#include <ATen/ops/upsample_linear1d_backward_meta.h>
#include <ATen/ops/upsample_linear1d_meta.h>
#include <ATen/ops/upsample_nearest1d_backward_meta.h>
#include <ATen/ops/upsample_nearest1d_meta.h>
#include <ATen/ops/upsample_nearest2d_backward_meta.h>
#include <ATen/ops/upsample_nearest2d_meta.h>
#include <ATen/ops/upsample_nearest3d_backward_meta.h>
#include <ATen/ops/upsample_nearest3d_meta.h>
#include <ATen/ops/upsample_trilinear3d_backward_meta.h>
#include <ATen/ops/upsample_trilinear3d_meta.h>
#include <ATen/ops/pixel_shuffle_native.h>
#include <ATen/ops/pixel_unshuffle_native.h>
#include <torch/library.h>

namespace torch_neuronx {
namespace {

int32_t dt(const at::Tensor& t) { return static_cast<int32_t>(t.scalar_type()); }

// A 3-D (C, H, W) or 4-D (N, C, H, W) tensor as a runtime image.
vnc_image image_of(const at::Tensor& t) {
  TORCH_INTERNAL_ASSERT(t.dim() == 3 || t.dim() == 4);
  const int64_t o = t.dim() == 4 ? 1 : 0;
  vnc_image im{};
  im.data = element_ptr(t);
  im.N = o ? t.size(0) : 1;
  im.strides[0] = o ? t.stride(0) : 0;
  for (int64_t d = 0; d < 3; d++) {
    (&im.C)[d] = t.size(o + d);
    im.strides[1 + d] = t.stride(o + d);
  }
  return im;
}

void check_dtype(const char* name, const at::Tensor& t, bool allow_int64 = false, bool allow_uint8 = false) {
  const auto st = t.scalar_type();
  NEURON_CHECK_SUPPORTED(at::isFloatingType(st) || (allow_int64 && st == at::kLong) || (allow_uint8 && st == at::kByte),
                         "\"", name, "\" not implemented for '", c10::toString(st), "' on neuron");
}

// Runs the kernel into `out`, through a dense temporary when `out` overlaps itself (expanded).
template <class F>
void into(const at::Tensor& out, F&& launch) {
  if (out.numel() > 1 && !out.is_non_overlapping_and_dense()) {
    at::Tensor tmp = at::empty(out.sizes(), out.options());
    launch(tmp);
    out.copy_(tmp);
  } else {
    launch(out);
  }
}

// ---------------------------------------------------------------- avg_pool2d

vnc_avg_pool2d_params avg_params(at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef pad, bool count_include_pad,
                                 std::optional<int64_t> divisor) {
  vnc_avg_pool2d_params p{};
  p.KH = k[0];
  p.KW = k.size() == 1 ? p.KH : k[1];
  p.sh = s.empty() ? p.KH : s[0];
  p.sw = s.empty() ? p.KW : s.size() == 1 ? p.sh : s[1];
  p.ph = pad[0];
  p.pw = pad.size() == 1 ? p.ph : pad[1];
  p.count_include_pad = count_include_pad;
  p.divisor = divisor.value_or(0);
  return p;
}

void avg_pool2d_impl(Structured<at::meta::structured_avg_pool2d>& op, const at::Tensor& self, at::IntArrayRef k,
                     at::IntArrayRef s, at::IntArrayRef pad, bool ceil_mode, bool count_include_pad,
                     std::optional<int64_t> divisor) {
  op.meta(self, k, s, pad, ceil_mode, count_include_pad, divisor);
  check_dtype("avg_pool2d", self, /*allow_int64=*/true);
  record_native("aten::avg_pool2d");
  if (self.scalar_type() == at::kDouble) warn_float64("aten::avg_pool2d");
  const vnc_avg_pool2d_params p = avg_params(k, s, pad, count_include_pad, divisor);
  const vnc_image x = image_of(self);
  c10::DeviceGuard g(self.device());
  into(op.maybe_get_output(0), [&](const at::Tensor& out) {
    const vnc_image o = image_of(out);
    check(vnc_avg_pool2d(stream_of(self), "aten::avg_pool2d", &p, dt(self), &x, &o));
  });
}

at::Tensor avg_pool2d(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef pad, bool ceil_mode,
                      bool count_include_pad, std::optional<int64_t> divisor) {
  Structured<at::meta::structured_avg_pool2d> op(Mode::Functional);
  avg_pool2d_impl(op, self, k, s, pad, ceil_mode, count_include_pad, divisor);
  return std::move(op.outs[0]);
}

at::Tensor& avg_pool2d_out(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef pad,
                           bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor, at::Tensor& out) {
  check_same_device("aten::avg_pool2d", self, {&out});
  Structured<at::meta::structured_avg_pool2d> op(Mode::Out, {out});
  op.reads = {self};
  avg_pool2d_impl(op, self, k, s, pad, ceil_mode, count_include_pad, divisor);
  op.finish();
  return out;
}

void avg_pool2d_backward_impl(Structured<at::meta::structured_avg_pool2d_backward>& op, const at::Tensor& grad_output,
                              const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef pad,
                              bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor) {
  op.meta(grad_output, self, k, s, pad, ceil_mode, count_include_pad, divisor);
  check_same_device("aten::avg_pool2d_backward", self, {&grad_output});
  check_dtype("avg_pool2d_backward_out_frame", self);
  record_native("aten::avg_pool2d_backward");
  const vnc_avg_pool2d_params p = avg_params(k, s, pad, count_include_pad, divisor);
  const vnc_image go = image_of(grad_output);
  c10::DeviceGuard g(self.device());
  into(op.maybe_get_output(0), [&](const at::Tensor& gi) {
    const vnc_image i = image_of(gi);
    check(vnc_avg_pool2d_backward(stream_of(self), "aten::avg_pool2d_backward", &p, dt(self), &go, &i));
  });
}

at::Tensor avg_pool2d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef k,
                               at::IntArrayRef s, at::IntArrayRef pad, bool ceil_mode, bool count_include_pad,
                               std::optional<int64_t> divisor) {
  Structured<at::meta::structured_avg_pool2d_backward> op(Mode::Functional);
  avg_pool2d_backward_impl(op, grad_output, self, k, s, pad, ceil_mode, count_include_pad, divisor);
  return std::move(op.outs[0]);
}

at::Tensor& avg_pool2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef k,
                                    at::IntArrayRef s, at::IntArrayRef pad, bool ceil_mode, bool count_include_pad,
                                    std::optional<int64_t> divisor, at::Tensor& grad_input) {
  check_same_device("aten::avg_pool2d_backward", self, {&grad_input});
  Structured<at::meta::structured_avg_pool2d_backward> op(Mode::Out, {grad_input});
  op.reads = {grad_output, self};
  avg_pool2d_backward_impl(op, grad_output, self, k, s, pad, ceil_mode, count_include_pad, divisor);
  op.finish();
  return grad_input;
}

// ---------------------------------------------------------------- upsampling

using OptScale = std::optional<double>;

// A tensor whose last `nd` dims are spatial as a volume: (N, C, spatial...) or, unbatched,
// (C, spatial...); missing spatial dims are size 1.
vnc_volume volume_of(const at::Tensor& t, int64_t nd) {
  const int64_t b = t.dim() - nd;  // 2 when batched, 1 when not
  TORCH_INTERNAL_ASSERT(b == 1 || b == 2);
  vnc_volume v{};
  v.data = element_ptr(t);
  v.N = b == 2 ? t.size(0) : 1;
  v.strides[0] = b == 2 ? t.stride(0) : 0;
  v.C = t.size(b - 1);
  v.strides[1] = t.stride(b - 1);
  int64_t* sizes[3] = {&v.D, &v.H, &v.W};
  for (int64_t i = 0; i < 3; i++) {
    const int64_t d = i - (3 - nd);  // spatial index, < 0 for a missing dim
    *sizes[i] = d >= 0 ? t.size(b + d) : 1;
    v.strides[2 + i] = d >= 0 ? t.stride(b + d) : 0;
  }
  return v;
}

// Per-dim resampling of the last `nd` dims; missing leading dims are identities.
template <size_t ND>
std::array<vnc_resample_dim, 3> resample_dims(vnc_resample_kind kind, bool align_corners, at::IntArrayRef in_spatial,
                                              at::IntArrayRef out_spatial, const std::array<OptScale, ND>& scales) {
  std::array<vnc_resample_dim, 3> dims{};
  for (auto& d : dims) d.kind = VNC_RS_NEAREST, d.scale = 1.0f;
  const bool nearest = kind == VNC_RS_NEAREST || kind == VNC_RS_NEAREST_EXACT;
  for (size_t i = 0; i < ND; i++) {
    vnc_resample_dim& d = dims[3 - ND + i];
    d.kind = kind;
    d.align_corners = align_corners;
    d.scale = nearest ? at::native::compute_scales_value<float>(scales[i], in_spatial[i], out_spatial[i])
                      : at::native::area_pixel_compute_scale<float>(in_spatial[i], out_spatial[i], align_corners, scales[i]);
  }
  return dims;
}

// Every upsampling op with its backward, functional and out=: ATen's structured metas check
// arguments and size outputs; the runtime's vnc_resample computes. Nearest modes copy any
// dtype CPU accepts (floating, uint8); the interpolating modes take floating inputs and hand
// others (uint8 bilinear: CPU's fixed-point algorithm) to the visible CPU fallback.
template <class Meta, class BwdMeta, vnc_resample_kind KIND, bool ALIGN, size_t ND>
struct Upsample {
  static constexpr bool kNearest = KIND == VNC_RS_NEAREST || KIND == VNC_RS_NEAREST_EXACT;

  template <class... S>
  static void forward(Structured<Meta>& op, const char* name, const at::Tensor& self, at::IntArrayRef size,
                      bool align, S... scales) {
    if constexpr (ALIGN) op.meta(self, size, align, scales...);
    else op.meta(self, size, scales...);
    record_native(name);
    if (self.scalar_type() == at::kDouble) warn_float64(name);
    const auto dims = resample_dims<ND>(KIND, align, self.sizes().slice(2), size, {scales...});
    const vnc_volume x = volume_of(self, ND);
    c10::DeviceGuard g(self.device());
    into(op.maybe_get_output(0), [&](const at::Tensor& out) {
      const vnc_volume o = volume_of(out, ND);
      check(vnc_resample(stream_of(self), name, dims.data(), dt(self), &x, &o));
    });
  }

  template <class... S>
  static void backward(Structured<BwdMeta>& op, const char* name, const at::Tensor& grad_output, at::IntArrayRef size,
                       at::IntArrayRef input_size, bool align, S... scales) {
    if constexpr (ALIGN) op.meta(grad_output, size, input_size, align, scales...);
    else op.meta(grad_output, size, input_size, scales...);
    check_dtype(name + 6, grad_output);
    record_native(name);
    const auto dims = resample_dims<ND>(KIND, align, input_size.slice(2), size, {scales...});
    const vnc_volume go = volume_of(grad_output, ND);
    c10::DeviceGuard g(grad_output.device());
    into(op.maybe_get_output(0), [&](const at::Tensor& gi) {
      const vnc_volume i = volume_of(gi, ND);
      check(vnc_resample_backward(stream_of(grad_output), name, dims.data(), dt(grad_output), &go, &i));
    });
  }

  static bool fallback(const at::Tensor& self) {
    return kNearest ? !(at::isFloatingType(self.scalar_type()) || self.scalar_type() == at::kByte)
                    : !at::isFloatingType(self.scalar_type());
  }
};

// The ATen signatures: (self, size, [align_corners,] scales...) and the backward's
// (grad_output, size, input_size, [align_corners,] scales...).
#define NEURON_UPSAMPLE_OPS(X)                                                                        \
  X(upsample_nearest1d, VNC_RS_NEAREST, false, 1, (OptScale s), (s))                                  \
  X(upsample_nearest2d, VNC_RS_NEAREST, false, 2, (OptScale sh, OptScale sw), (sh, sw))                \
  X(upsample_nearest3d, VNC_RS_NEAREST, false, 3, (OptScale sd, OptScale sh, OptScale sw), (sd, sh, sw)) \
  X(_upsample_nearest_exact1d, VNC_RS_NEAREST_EXACT, false, 1, (OptScale s), (s))                      \
  X(_upsample_nearest_exact2d, VNC_RS_NEAREST_EXACT, false, 2, (OptScale sh, OptScale sw), (sh, sw))    \
  X(_upsample_nearest_exact3d, VNC_RS_NEAREST_EXACT, false, 3, (OptScale sd, OptScale sh, OptScale sw), (sd, sh, sw)) \
  X(upsample_linear1d, VNC_RS_LINEAR, true, 1, (OptScale s), (s))                                     \
  X(upsample_bilinear2d, VNC_RS_LINEAR, true, 2, (OptScale sh, OptScale sw), (sh, sw))                \
  X(upsample_trilinear3d, VNC_RS_LINEAR, true, 3, (OptScale sd, OptScale sh, OptScale sw), (sd, sh, sw)) \
  X(upsample_bicubic2d, VNC_RS_CUBIC, true, 2, (OptScale sh, OptScale sw), (sh, sw))

#define NEURON_ALIGN_PARAM_true , bool align
#define NEURON_ALIGN_PARAM_false
#define NEURON_ALIGN_ARG_true align
#define NEURON_ALIGN_ARG_false false
#define NEURON_ALIGN_STACK_true , align
#define NEURON_ALIGN_STACK_false
#define NEURON_UNPACK(...) __VA_ARGS__

#define NEURON_UPSAMPLE_FNS(op, KIND, ALIGN, ND, PARAMS, ARGS)                                                      \
  using op##_t = Upsample<at::meta::structured_##op, at::meta::structured_##op##_backward, KIND, ALIGN, ND>;          \
  at::Tensor op##_fwd(const at::Tensor& self, c10::SymIntArrayRef size NEURON_ALIGN_PARAM_##ALIGN,                    \
                      NEURON_UNPACK PARAMS) {                                                                         \
    if (op##_t::fallback(self)) {                                                                                    \
      std::vector<c10::IValue> stack{self, size NEURON_ALIGN_STACK_##ALIGN, NEURON_UNPACK ARGS};                     \
      run_cpu_fallback("aten::" #op, "", stack);                                                                     \
      return stack.back().toTensor();                                                                                \
    }                                                                                                                \
    Structured<at::meta::structured_##op> st(Mode::Functional);                                                      \
    op##_t::forward(st, "aten::" #op, self, C10_AS_INTARRAYREF_SLOW(size), NEURON_ALIGN_ARG_##ALIGN,                 \
                    NEURON_UNPACK ARGS);                                                                             \
    return std::move(st.outs[0]);                                                                                    \
  }                                                                                                                  \
  at::Tensor& op##_fwd_out(const at::Tensor& self, c10::SymIntArrayRef size NEURON_ALIGN_PARAM_##ALIGN,               \
                           NEURON_UNPACK PARAMS, at::Tensor& out) {                                                  \
    check_same_device("aten::" #op, self, {&out});                                                                   \
    if (op##_t::fallback(self)) {                                                                                    \
      std::vector<c10::IValue> stack{self, size NEURON_ALIGN_STACK_##ALIGN, NEURON_UNPACK ARGS, out};                \
      run_cpu_fallback("aten::" #op, "out", stack);                                                                  \
      return out;                                                                                                    \
    }                                                                                                                \
    Structured<at::meta::structured_##op> st(Mode::Out, {out});                                                      \
    st.reads = {self};                                                                                               \
    op##_t::forward(st, "aten::" #op, self, C10_AS_INTARRAYREF_SLOW(size), NEURON_ALIGN_ARG_##ALIGN,                 \
                    NEURON_UNPACK ARGS);                                                                             \
    st.finish();                                                                                                     \
    return out;                                                                                                      \
  }                                                                                                                  \
  at::Tensor op##_bwd(const at::Tensor& grad_output, c10::SymIntArrayRef size,                                        \
                      c10::SymIntArrayRef input_size NEURON_ALIGN_PARAM_##ALIGN, NEURON_UNPACK PARAMS) {             \
    Structured<at::meta::structured_##op##_backward> st(Mode::Functional);                                           \
    op##_t::backward(st, "aten::" #op "_backward", grad_output, C10_AS_INTARRAYREF_SLOW(size),                       \
                     C10_AS_INTARRAYREF_SLOW(input_size), NEURON_ALIGN_ARG_##ALIGN, NEURON_UNPACK ARGS);              \
    return std::move(st.outs[0]);                                                                                    \
  }                                                                                                                  \
  at::Tensor& op##_bwd_out(const at::Tensor& grad_output, c10::SymIntArrayRef size,                                   \
                           c10::SymIntArrayRef input_size NEURON_ALIGN_PARAM_##ALIGN, NEURON_UNPACK PARAMS,           \
                           at::Tensor& grad_input) {                                                                 \
    check_same_device("aten::" #op "_backward", grad_output, {&grad_input});                                         \
    Structured<at::meta::structured_##op##_backward> st(Mode::Out, {grad_input});                                    \
    st.reads = {grad_output};                                                                                        \
    op##_t::backward(st, "aten::" #op "_backward", grad_output, C10_AS_INTARRAYREF_SLOW(size),                       \
                     C10_AS_INTARRAYREF_SLOW(input_size), NEURON_ALIGN_ARG_##ALIGN, NEURON_UNPACK ARGS);              \
    st.finish();                                                                                                     \
    return grad_input;                                                                                               \
  }
NEURON_UPSAMPLE_OPS(NEURON_UPSAMPLE_FNS)
#undef NEURON_UPSAMPLE_FNS

// ---------------------------------------------------------------- adaptive average pooling of volumes

// _adaptive_avg_pool3d: the AREA resampling (ATen's start/end windows); 4-D (unbatched) or 5-D.
at::Tensor adaptive_avg_pool3d(const at::Tensor& self, c10::SymIntArrayRef size_sym) {
  auto size = C10_AS_INTARRAYREF_SLOW(size_sym);
  TORCH_CHECK(size.size() == 3, "adaptive_avg_pool3d: output_size must be 3");
  TORCH_CHECK(self.dim() == 4 || self.dim() == 5, "adaptive_avg_pool3d(): Expected 4D or 5D tensor, but got ", self.sizes());
  for (int64_t d = 1; d < self.dim(); d++)
    TORCH_CHECK(self.size(d) > 0, "adaptive_avg_pool3d(): Expected input to have non-zero size for non-batch dimensions, but input has sizes ",
                self.sizes(), " with dimension ", d, " being empty");
  check_dtype("adaptive_avg_pool3d_cpu", self);
  record_native("aten::_adaptive_avg_pool3d");
  if (self.scalar_type() == at::kDouble) warn_float64("aten::_adaptive_avg_pool3d");
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end() - 3);
  shape.insert(shape.end(), size.begin(), size.end());
  at::Tensor out = at::empty(shape, self.options());
  std::array<vnc_resample_dim, 3> dims{};
  for (auto& d : dims) d.kind = VNC_RS_AREA;
  const vnc_volume x = volume_of(self, 3), o = volume_of(out, 3);
  c10::DeviceGuard g(self.device());
  check(vnc_resample(stream_of(self), "aten::_adaptive_avg_pool3d", dims.data(), dt(self), &x, &o));
  return out;
}

at::Tensor adaptive_avg_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self) {
  check_same_device("aten::_adaptive_avg_pool3d_backward", self, {&grad_output});
  TORCH_CHECK(grad_output.dim() == self.dim(), "adaptive_avg_pool3d_backward: grad_output and input differ in dims");
  check_dtype("adaptive_avg_pool3d_backward_cpu", self);
  record_native("aten::_adaptive_avg_pool3d_backward");
  at::Tensor gi = at::empty(self.sizes(), self.options());
  std::array<vnc_resample_dim, 3> dims{};
  for (auto& d : dims) d.kind = VNC_RS_AREA;
  const vnc_volume go = volume_of(grad_output, 3), i = volume_of(gi, 3);
  c10::DeviceGuard g(self.device());
  check(vnc_resample_backward(stream_of(self), "aten::_adaptive_avg_pool3d_backward", dims.data(), dt(self), &go, &i));
  return gi;
}

// ---------------------------------------------------------------- padding

void check_pad_dtype(const char* name, const at::Tensor& t) {
  NEURON_CHECK_SUPPORTED(t.scalar_type() != at::kBool, "\"", name, "\" not implemented for 'Bool' on neuron");
}

// ATen's reflection_pad2d_out_template checks (aten/src/ATen/native/ReflectionPad.cpp).
std::vector<int64_t> reflection_shape(const at::Tensor& input, at::IntArrayRef padding) {
  at::native::padding::check_valid_input<2>(input, padding);
  const int64_t dim_w = input.dim() - 1, dim_h = input.dim() - 2;
  const int64_t pl = padding[0], pr = padding[1], pt = padding[2], pb = padding[3];
  const int64_t iw = input.size(dim_w), ih = input.size(dim_h), ow = iw + pl + pr, oh = ih + pt + pb;
  TORCH_CHECK(pl < iw && pr < iw, "Argument #4: Padding size should be less than the corresponding input dimension, but got: padding (",
              pl, ", ", pr, ") at dimension ", dim_w, " of input ", input.sizes());
  TORCH_CHECK(pt < ih && pb < ih, "Argument #6: Padding size should be less than the corresponding input dimension, but got: padding (",
              pt, ", ", pb, ") at dimension ", dim_h, " of input ", input.sizes());
  TORCH_CHECK(ow >= 1 || oh >= 1, "input (H: ", ih, ", W: ", iw, ") is too small. Calculated output H: ", oh, " W: ", ow);
  std::vector<int64_t> shape(input.sizes().begin(), input.sizes().end() - 2);
  shape.push_back(oh);
  shape.push_back(ow);
  return shape;
}

void pad_launch(const char* name, vnc_pad_mode mode, const at::Tensor& self, at::IntArrayRef padding,
                const at::Tensor& out) {
  record_native(name);
  if (self.scalar_type() == at::kDouble) warn_float64(name);
  const int64_t pad[4] = {padding[0], padding[1], padding[2], padding[3]};
  const vnc_image x = image_of(self);
  c10::DeviceGuard g(self.device());
  into(out, [&](const at::Tensor& o) {
    const vnc_image oi = image_of(o);
    check(vnc_pad2d(stream_of(self), name, mode, pad, dt(self), &x, &oi));
  });
}

at::Tensor& reflection_pad2d_out(const at::Tensor& self, c10::SymIntArrayRef padding_sym, at::Tensor& out) {
  auto padding = C10_AS_INTARRAYREF_SLOW(padding_sym);
  check_same_device("aten::reflection_pad2d", self, {&out});
  check_pad_dtype("reflection_pad2d", self);
  auto shape = reflection_shape(self, padding);
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "Expected out tensor to have dtype ", self.scalar_type(),
              ", but got ", out.scalar_type(), " instead");
  at::native::resize_output(out, shape);
  pad_launch("aten::reflection_pad2d", VNC_PAD_REFLECT, self, padding, out);
  return out;
}

at::Tensor reflection_pad2d(const at::Tensor& self, c10::SymIntArrayRef padding_sym) {
  auto padding = C10_AS_INTARRAYREF_SLOW(padding_sym);
  check_pad_dtype("reflection_pad2d", self);
  auto shape = reflection_shape(self, padding);
  at::Tensor out = at::empty(shape, self.options().memory_format(self.suggest_memory_format()));
  pad_launch("aten::reflection_pad2d", VNC_PAD_REFLECT, self, padding, out);
  return out;
}

void replication_pad2d_impl(Structured<at::meta::structured_replication_pad2d>& op, const at::Tensor& self,
                            at::IntArrayRef padding) {
  op.meta(self, padding);
  check_pad_dtype("replication_pad2d", self);
  const at::Tensor& out = op.maybe_get_output(0);
  out.resize_(out.sizes(), self.suggest_memory_format());  // as CPU's kernel: the input's layout
  pad_launch("aten::replication_pad2d", VNC_PAD_REPLICATE, self, padding, op.maybe_get_output(0));
}

at::Tensor replication_pad2d(const at::Tensor& self, c10::SymIntArrayRef padding) {
  Structured<at::meta::structured_replication_pad2d> op(Mode::Functional);
  replication_pad2d_impl(op, self, C10_AS_INTARRAYREF_SLOW(padding));
  return std::move(op.outs[0]);
}

at::Tensor& replication_pad2d_out(const at::Tensor& self, c10::SymIntArrayRef padding, at::Tensor& out) {
  check_same_device("aten::replication_pad2d", self, {&out});
  Structured<at::meta::structured_replication_pad2d> op(Mode::Out, {out});
  replication_pad2d_impl(op, self, C10_AS_INTARRAYREF_SLOW(padding));
  op.finish();
  return out;
}

template <vnc_pad_mode MODE>
at::Tensor& pad2d_backward_out(const at::Tensor& grad_output, const at::Tensor& self, c10::SymIntArrayRef padding_sym,
                               at::Tensor& grad_input) {
  const char* name = MODE == VNC_PAD_REFLECT ? "aten::reflection_pad2d_backward" : "aten::replication_pad2d_backward";
  auto padding = C10_AS_INTARRAYREF_SLOW(padding_sym);
  check_same_device(name, self, {&grad_output, &grad_input});
  NEURON_CHECK_SUPPORTED(!self.is_complex(), name, " of complex tensors is not natively supported on neuron");
  TORCH_CHECK(padding.size() == 4, "padding size is expected to be 4, but got: ", padding.size());
  auto shape = MODE == VNC_PAD_REFLECT ? reflection_shape(self, padding) : [&] {
    std::vector<int64_t> s(self.sizes().begin(), self.sizes().end() - 2);
    s.push_back(self.size(-2) + padding[2] + padding[3]);
    s.push_back(self.size(-1) + padding[0] + padding[1]);
    return s;
  }();
  TORCH_CHECK(grad_output.sizes() == at::IntArrayRef(shape), "gradOutput size unexpected. Expected: ",
              at::IntArrayRef(shape), ", Got: ", grad_output.sizes());
  check_dtype(name + 6, self);
  at::native::resize_output(grad_input, self.sizes());
  record_native(name);
  const int64_t pad[4] = {padding[0], padding[1], padding[2], padding[3]};
  const vnc_image go = image_of(grad_output);
  c10::DeviceGuard g(self.device());
  into(grad_input, [&](const at::Tensor& gi) {
    const vnc_image i = image_of(gi);
    check(vnc_pad2d_backward(stream_of(self), name, MODE, pad, dt(self), &go, &i));
  });
  return grad_input;
}

template <vnc_pad_mode MODE>
at::Tensor pad2d_backward(const at::Tensor& grad_output, const at::Tensor& self, c10::SymIntArrayRef padding) {
  at::Tensor gi = at::empty(self.sizes(), self.options().memory_format(self.suggest_memory_format()));
  return pad2d_backward_out<MODE>(grad_output, self, padding, gi);
}

// ---------------------------------------------------------------- 3-D and adaptive max pooling

// Parameter lists as ATen's pool3d functions read them: one value for every dim, or three.
int64_t pick3(at::IntArrayRef v, size_t i, int64_t dflt) { return v.empty() ? dflt : v[v.size() == 1 ? 0 : i]; }

vnc_pool3d_params pool3d_params(at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef pad, at::IntArrayRef dil) {
  vnc_pool3d_params p{};
  for (size_t i = 0; i < 3; i++) {
    p.k[i] = pick3(k, i, 1);
    p.stride[i] = pick3(s, i, p.k[i]);
    p.pad[i] = pick3(pad, i, 0);
    p.dil[i] = pick3(dil, i, 1);
  }
  return p;
}

void avg_pool3d_impl(Structured<at::meta::structured_avg_pool3d>& op, const at::Tensor& self, at::IntArrayRef k,
                     at::IntArrayRef s, at::IntArrayRef pad, bool ceil_mode, bool count_include_pad,
                     std::optional<int64_t> divisor) {
  op.meta(self, k, s, pad, ceil_mode, count_include_pad, divisor);
  check_dtype("avg_pool3d_out_frame", self);
  record_native("aten::avg_pool3d");
  if (self.scalar_type() == at::kDouble) warn_float64("aten::avg_pool3d");
  vnc_pool3d_params p = pool3d_params(k, s, pad, {});
  p.count_include_pad = count_include_pad;
  p.divisor = divisor.value_or(0);
  const vnc_volume x = volume_of(self, 3);
  c10::DeviceGuard g(self.device());
  into(op.maybe_get_output(0), [&](const at::Tensor& out) {
    const vnc_volume o = volume_of(out, 3);
    check(vnc_avg_pool3d(stream_of(self), "aten::avg_pool3d", &p, dt(self), &x, &o));
  });
}

at::Tensor avg_pool3d(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef pad, bool ceil_mode,
                      bool count_include_pad, std::optional<int64_t> divisor) {
  if (!at::isFloatingType(self.scalar_type())) {  // integer means (truncating division): the visible fallback
    std::vector<c10::IValue> stack{self, k, s, pad, ceil_mode, count_include_pad, divisor};
    run_cpu_fallback("aten::avg_pool3d", "", stack);
    return stack.back().toTensor();
  }
  Structured<at::meta::structured_avg_pool3d> op(Mode::Functional);
  avg_pool3d_impl(op, self, k, s, pad, ceil_mode, count_include_pad, divisor);
  return std::move(op.outs[0]);
}

at::Tensor& avg_pool3d_out(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef pad,
                           bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor, at::Tensor& out) {
  check_same_device("aten::avg_pool3d", self, {&out});
  if (!at::isFloatingType(self.scalar_type())) {
    std::vector<c10::IValue> stack{self, k, s, pad, ceil_mode, count_include_pad, divisor, out};
    run_cpu_fallback("aten::avg_pool3d", "out", stack);
    return out;
  }
  Structured<at::meta::structured_avg_pool3d> op(Mode::Out, {out});
  op.reads = {self};
  avg_pool3d_impl(op, self, k, s, pad, ceil_mode, count_include_pad, divisor);
  op.finish();
  return out;
}

void avg_pool3d_backward_impl(Structured<at::meta::structured_avg_pool3d_backward>& op, const at::Tensor& grad_output,
                              const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef pad,
                              bool ceil_mode, bool count_include_pad, std::optional<int64_t> divisor) {
  op.meta(grad_output, self, k, s, pad, ceil_mode, count_include_pad, divisor);
  check_same_device("aten::avg_pool3d_backward", self, {&grad_output});
  check_dtype("avg_pool3d_backward_out_frame", self);
  record_native("aten::avg_pool3d_backward");
  vnc_pool3d_params p = pool3d_params(k, s, pad, {});
  p.count_include_pad = count_include_pad;
  p.divisor = divisor.value_or(0);
  const vnc_volume go = volume_of(grad_output, 3);
  c10::DeviceGuard g(self.device());
  into(op.maybe_get_output(0), [&](const at::Tensor& gi) {
    const vnc_volume i = volume_of(gi, 3);
    check(vnc_avg_pool3d_backward(stream_of(self), "aten::avg_pool3d_backward", &p, dt(self), &go, &i));
  });
}

at::Tensor avg_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef k,
                               at::IntArrayRef s, at::IntArrayRef pad, bool ceil_mode, bool count_include_pad,
                               std::optional<int64_t> divisor) {
  Structured<at::meta::structured_avg_pool3d_backward> op(Mode::Functional);
  avg_pool3d_backward_impl(op, grad_output, self, k, s, pad, ceil_mode, count_include_pad, divisor);
  return std::move(op.outs[0]);
}

at::Tensor& avg_pool3d_backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef k,
                                    at::IntArrayRef s, at::IntArrayRef pad, bool ceil_mode, bool count_include_pad,
                                    std::optional<int64_t> divisor, at::Tensor& grad_input) {
  check_same_device("aten::avg_pool3d_backward", self, {&grad_input});
  Structured<at::meta::structured_avg_pool3d_backward> op(Mode::Out, {grad_input});
  avg_pool3d_backward_impl(op, grad_output, self, k, s, pad, ceil_mode, count_include_pad, divisor);
  op.finish();
  return grad_input;
}

// max_pool3d_with_indices has no structured meta: ATen's argument lists, shape checks
// (pool3d_shape_check) and output sizes (pooling_output_shape) from ATen/native/Pool.h.
std::vector<int64_t> max_pool3d_shape(const at::Tensor& self, const vnc_pool3d_params& p, bool ceil_mode,
                                      at::IntArrayRef k, at::IntArrayRef s, at::IntArrayRef pad, at::IntArrayRef dil) {
  TORCH_CHECK(k.size() == 1 || k.size() == 3, "max_pool3d: kernel_size must either be a single int, or a tuple of three ints");
  TORCH_CHECK(s.empty() || s.size() == 1 || s.size() == 3, "max_pool3d: stride must either be omitted, a single int, or a tuple of three ints");
  TORCH_CHECK(pad.size() == 1 || pad.size() == 3, "max_pool3d: padding must either be a single int, or a tuple of three ints");
  TORCH_CHECK(dil.size() == 1 || dil.size() == 3, "max_pool3d: dilation must be either a single int, or a tuple of three ints");
  TORCH_CHECK(self.dim() == 4 || self.dim() == 5, "max_pool3d_with_indices_out(): Expected 4D or 5D tensor for input, but got: ",
              self.sizes());
  int64_t o[3];
  const int64_t b = self.dim() - 3;
  for (int i = 0; i < 3; i++)
    o[i] = at::native::pooling_output_shape<int64_t>(self.size(b + i), p.k[i], p.pad[i], p.stride[i], p.dil[i], ceil_mode);
  at::native::pool3d_shape_check(self, self.size(b - 1), p.k[0], p.k[1], p.k[2], p.stride[0], p.stride[1], p.stride[2],
                                 p.pad[0], p.pad[1], p.pad[2], p.dil[0], p.dil[1], p.dil[2], self.size(b), self.size(b + 1),
                                 self.size(b + 2), o[0], o[1], o[2], "max_pool3d_with_indices_out()");
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end() - 3);
  shape.insert(shape.end(), o, o + 3);
  return shape;
}

void launch_max(const char* name, const at::Tensor& self, const vnc_pool3d_params* p, int64_t nd, const at::Tensor& out,
                const at::Tensor& indices) {
  check_dtype(name + 6, self);
  record_native(name);
  if (self.scalar_type() == at::kDouble) warn_float64(name);
  const vnc_volume x = volume_of(self, nd), o = volume_of(out, nd), i = volume_of(indices, nd);
  c10::DeviceGuard g(self.device());
  check(vnc_max_pool3d(stream_of(self), name, p, dt(self), &x, &o, &i));
}

std::tuple<at::Tensor&, at::Tensor&> max_pool3d_out(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s,
                                                    at::IntArrayRef pad, at::IntArrayRef dil, bool ceil_mode,
                                                    at::Tensor& out, at::Tensor& indices) {
  check_same_device("aten::max_pool3d_with_indices", self, {&out, &indices});
  if (!at::isFloatingType(self.scalar_type())) {  // integer inputs: the visible fallback
    std::vector<c10::IValue> stack{self, k, s, pad, dil, ceil_mode, out, indices};
    run_cpu_fallback("aten::max_pool3d_with_indices", "out", stack);
    return {out, indices};
  }
  const vnc_pool3d_params p = pool3d_params(k, s, pad, dil);
  const auto shape = max_pool3d_shape(self, p, ceil_mode, k, s, pad, dil);
  at::native::resize_output(out, shape);
  at::native::resize_output(indices, shape);
  if (self.dim() == 5) {  // as CPU's kernel: a batch keeps the input's layout (channels_last_3d)
    out.resize_(shape, self.suggest_memory_format());
    indices.resize_(shape, self.suggest_memory_format());
  }
  launch_max("aten::max_pool3d_with_indices", self, &p, 3, out, indices);
  return {out, indices};
}

std::tuple<at::Tensor, at::Tensor> max_pool3d(const at::Tensor& self, at::IntArrayRef k, at::IntArrayRef s,
                                              at::IntArrayRef pad, at::IntArrayRef dil, bool ceil_mode) {
  at::Tensor out = at::empty({0}, self.options()), idx = at::empty({0}, self.options().dtype(at::kLong));
  max_pool3d_out(self, k, s, pad, dil, ceil_mode, out, idx);
  return {out, idx};
}

// The backward of every max pooling with indices over the last `nd` dims.
at::Tensor& max_backward_into(const char* name, const at::Tensor& grad_output, const at::Tensor& self,
                              const at::Tensor& indices, int64_t nd, at::Tensor& grad_input) {
  check_same_device(name, self, {&grad_output, &indices, &grad_input});
  TORCH_CHECK(grad_output.sizes() == indices.sizes() && grad_output.dim() == self.dim(), name,
              ": grad_output ", grad_output.sizes(), " and indices ", indices.sizes(), " must match the output of input ",
              self.sizes());
  TORCH_CHECK(indices.scalar_type() == at::kLong, name, ": expected int64 indices, got ", indices.scalar_type());
  check_dtype(name + 6, self);
  at::native::resize_output(grad_input, self.sizes());
  record_native(name);
  const vnc_volume go = volume_of(grad_output, nd), i = volume_of(indices, nd);
  c10::DeviceGuard g(self.device());
  into(grad_input, [&](const at::Tensor& gi) {
    const vnc_volume gv = volume_of(gi, nd);
    check(vnc_max_pool3d_backward(stream_of(self), name, dt(self), &go, &i, &gv));
  });
  return grad_input;
}

at::Tensor& max_pool3d_backward_out(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef,
                                    at::IntArrayRef, at::IntArrayRef, at::IntArrayRef, bool, const at::Tensor& indices,
                                    at::Tensor& grad_input) {
  if (self.dim() == 5) grad_input.resize_(self.sizes(), self.suggest_memory_format());  // as the forward's output
  return max_backward_into("aten::max_pool3d_with_indices_backward", grad_output, self, indices, 3, grad_input);
}

at::Tensor max_pool3d_backward(const at::Tensor& grad_output, const at::Tensor& self, at::IntArrayRef k,
                               at::IntArrayRef s, at::IntArrayRef pad, at::IntArrayRef dil, bool ceil_mode,
                               const at::Tensor& indices) {
  at::Tensor gi = at::empty({0}, self.options());
  return max_pool3d_backward_out(grad_output, self, k, s, pad, dil, ceil_mode, indices, gi);
}

// adaptive_max_pool2d / 3d: ATen's structured metas size (out, indices); the runtime's adaptive windows.
template <class Meta, class BwdMeta, int ND>
struct AdaptiveMax {
  static constexpr const char* kName = ND == 2 ? "aten::adaptive_max_pool2d" : "aten::adaptive_max_pool3d";
  static constexpr const char* kBwd = ND == 2 ? "aten::adaptive_max_pool2d_backward" : "aten::adaptive_max_pool3d_backward";
  static void impl(Structured<Meta, 2>& op, const at::Tensor& self, at::IntArrayRef size) {
    op.meta(self, size);
    into(op.maybe_get_output(0), [&](const at::Tensor& out) {
      into(op.maybe_get_output(1), [&](const at::Tensor& idx) { launch_max(kName, self, nullptr, ND, out, idx); });
    });
  }
  static std::tuple<at::Tensor, at::Tensor> fwd(const at::Tensor& self, at::IntArrayRef size) {
    Structured<Meta, 2> op(Mode::Functional);
    impl(op, self, size);
    return {std::move(op.outs[0]), std::move(op.outs[1])};
  }
  static std::tuple<at::Tensor&, at::Tensor&> fwd_out(const at::Tensor& self, at::IntArrayRef size, at::Tensor& out,
                                                      at::Tensor& indices) {
    check_same_device(kName, self, {&out, &indices});
    Structured<Meta, 2> op(Mode::Out, {out, indices});
    impl(op, self, size);
    op.finish();
    return {out, indices};
  }
  static at::Tensor& bwd_out(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& indices,
                             at::Tensor& grad_input) {
    Structured<BwdMeta> op(Mode::Out, {grad_input});
    op.meta(grad_output, self, indices);
    at::Tensor gi = op.maybe_get_output(0);
    max_backward_into(kBwd, grad_output, self, indices, ND, gi);
    op.finish();
    return grad_input;
  }
  static at::Tensor bwd(const at::Tensor& grad_output, const at::Tensor& self, const at::Tensor& indices) {
    at::Tensor gi = at::empty({0}, self.options());
    return bwd_out(grad_output, self, indices, gi);
  }
};
using AdaptiveMax2d = AdaptiveMax<at::meta::structured_adaptive_max_pool2d, at::meta::structured_adaptive_max_pool2d_backward, 2>;
using AdaptiveMax3d = AdaptiveMax<at::meta::structured_adaptive_max_pool3d, at::meta::structured_adaptive_max_pool3d_backward, 3>;

// ---------------------------------------------------------------- 1-D and 3-D padding

// The resampling dims of a padding of the last ND dims: padding lists (before, after) pairs
// from the last dim backwards, as F.pad.
template <size_t ND>
std::array<vnc_resample_dim, 3> pad_dims(vnc_resample_kind kind, at::IntArrayRef padding) {
  std::array<vnc_resample_dim, 3> dims{};
  for (auto& d : dims) d.kind = VNC_RS_REPLICATE;  // no padding: identity
  for (size_t i = 0; i < ND; i++) {
    vnc_resample_dim& d = dims[2 - i];
    d.kind = kind;
    d.pad_before = padding[2 * i];
    d.pad_after = padding[2 * i + 1];
  }
  return dims;
}

// reflection_pad1d/3d and replication_pad1d/3d: ATen's structured metas check and size; the
// backward ops of replication padding have no meta, so their shapes are checked here.
template <class Meta, vnc_resample_kind KIND, size_t ND>
struct Pad {
  static void forward(Structured<Meta>& op, const char* name, const at::Tensor& self, at::IntArrayRef padding) {
    op.meta(self, padding);
    check_pad_dtype(name + 6, self);
    const at::Tensor& out = op.maybe_get_output(0);
    out.resize_(out.sizes(), self.suggest_memory_format());  // as CPU's kernels: the input's layout
    record_native(name);
    if (self.scalar_type() == at::kDouble) warn_float64(name);
    const auto dims = pad_dims<ND>(KIND, padding);
    const vnc_volume x = volume_of(self, ND);
    c10::DeviceGuard g(self.device());
    into(op.maybe_get_output(0), [&](const at::Tensor& o) {
      const vnc_volume ov = volume_of(o, ND);
      check(vnc_resample(stream_of(self), name, dims.data(), dt(self), &x, &ov));
    });
  }
  static at::Tensor fwd(const at::Tensor& self, c10::SymIntArrayRef padding) {
    Structured<Meta> op(Mode::Functional);
    forward(op, name(), self, C10_AS_INTARRAYREF_SLOW(padding));
    return std::move(op.outs[0]);
  }
  static at::Tensor& fwd_out(const at::Tensor& self, c10::SymIntArrayRef padding, at::Tensor& out) {
    check_same_device(name(), self, {&out});
    Structured<Meta> op(Mode::Out, {out});
    forward(op, name(), self, C10_AS_INTARRAYREF_SLOW(padding));
    op.finish();
    return out;
  }
  static at::Tensor& bwd_out(const at::Tensor& grad_output, const at::Tensor& self, c10::SymIntArrayRef padding_sym,
                             at::Tensor& grad_input) {
    const std::string bname = std::string(name()) + "_backward";
    auto padding = C10_AS_INTARRAYREF_SLOW(padding_sym);
    check_same_device(bname.c_str(), self, {&grad_output, &grad_input});
    TORCH_CHECK(padding.size() == 2 * ND, "padding size is expected to be ", 2 * ND, ", but got: ", padding.size());
    TORCH_CHECK(self.dim() == static_cast<int64_t>(ND) + 1 || self.dim() == static_cast<int64_t>(ND) + 2,
                bname, ": expected a ", ND + 1, "-D or ", ND + 2, "-D input, got ", self.sizes());
    std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
    for (size_t i = 0; i < ND; i++) shape[shape.size() - 1 - i] += padding[2 * i] + padding[2 * i + 1];
    TORCH_CHECK(grad_output.sizes() == at::IntArrayRef(shape), "gradOutput size unexpected. Expected: ",
                at::IntArrayRef(shape), ", Got: ", grad_output.sizes());
    check_dtype(bname.c_str() + 6, self);
    at::native::resize_output(grad_input, self.sizes());
    record_native(bname.c_str());
    const auto dims = pad_dims<ND>(KIND, padding);
    const vnc_volume go = volume_of(grad_output, ND);
    c10::DeviceGuard g(self.device());
    into(grad_input, [&](const at::Tensor& gi) {
      const vnc_volume i = volume_of(gi, ND);
      check(vnc_resample_backward(stream_of(self), bname.c_str(), dims.data(), dt(self), &go, &i));
    });
    return grad_input;
  }
  static at::Tensor bwd(const at::Tensor& grad_output, const at::Tensor& self, c10::SymIntArrayRef padding) {
    at::Tensor gi = at::empty(self.sizes(), self.options().memory_format(self.suggest_memory_format()));
    return bwd_out(grad_output, self, padding, gi);
  }
  static const char* name();
};

#define NEURON_PAD_OPS(X)                                  \
  X(reflection_pad1d, VNC_RS_REFLECT, 1)                   \
  X(reflection_pad3d, VNC_RS_REFLECT, 3)                   \
  X(replication_pad1d, VNC_RS_REPLICATE, 1)                \
  X(replication_pad3d, VNC_RS_REPLICATE, 3)
#define NEURON_PAD_TYPES(op, KIND, ND)                                       \
  using op##_t = Pad<at::meta::structured_##op, KIND, ND>;                   \
  template <> const char* op##_t::name() { return "aten::" #op; }
NEURON_PAD_OPS(NEURON_PAD_TYPES)
#undef NEURON_PAD_TYPES

// ---------------------------------------------------------------- group norm

// `t` as (N, C, S, 1) images when its spatial dims collapse into one stride; else a contiguous copy.
vnc_image gn_image(const at::Tensor& t, int64_t N, int64_t C, int64_t S, at::Tensor& holder) {
  holder = t;
  auto collapsible = [&](const at::Tensor& x) {
    if (x.dim() < 2 || x.size(0) != N || x.size(1) != C) return false;
    int64_t inner = -1;  // the next non-unit spatial dim
    for (int64_t d = x.dim() - 1; d >= 2; d--) {
      if (x.size(d) == 1) continue;
      if (inner >= 0 && x.stride(d) != x.stride(inner) * x.size(inner)) return false;
      inner = d;
    }
    return true;
  };
  if (!collapsible(holder)) holder = t.contiguous().view({N, C, S});
  vnc_image im{};
  im.data = element_ptr(holder);
  im.N = N;
  im.C = C;
  im.H = S;
  im.W = 1;
  im.strides[0] = holder.stride(0);
  im.strides[1] = holder.stride(1);
  im.strides[2] = 1;
  for (int64_t d = holder.dim() - 1; d >= 2; d--)
    if (holder.size(d) != 1) {
      im.strides[2] = holder.stride(d);
      break;
    }
  return im;
}

void check_gn_inputs(const at::Tensor& X, const at::Tensor& gamma, const at::Tensor& beta, int64_t N, int64_t C,
                     int64_t HxW, int64_t group) {
  TORCH_CHECK(group > 0, "Expected num groups to be greater than 0, got ", group);
  TORCH_CHECK(C % group == 0, "Expected number of channels in input to be divisible by num_groups, but got input of shape ",
              X.sizes(), " and num_groups=", group);
  TORCH_CHECK(!gamma.defined() || (gamma.dim() == 1 && gamma.numel() == C),
              "Expected weight to be a vector of size equal to the number of channels in input, but got weight of shape ",
              gamma.sizes(), " and input of shape ", X.sizes());
  TORCH_CHECK(!beta.defined() || (beta.dim() == 1 && beta.numel() == C),
              "Expected bias to be a vector of size equal to the number of channels in input, but got bias of shape ",
              beta.sizes(), " and input of shape ", X.sizes());
  TORCH_CHECK(X.numel() == N * C * HxW, "native_group_norm: input of shape ", X.sizes(), " has not N * C * HxW = ",
              N, " * ", C, " * ", HxW, " elements");
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm(const at::Tensor& X,
                                                                const std::optional<at::Tensor>& gamma_opt,
                                                                const std::optional<at::Tensor>& beta_opt,
                                                                c10::SymInt N_, c10::SymInt C_, c10::SymInt HxW_,
                                                                int64_t group, double eps) {
  const int64_t N = N_.guard_int(__FILE__, __LINE__), C = C_.guard_int(__FILE__, __LINE__),
                HxW = HxW_.guard_int(__FILE__, __LINE__);
  const at::Tensor gamma = gamma_opt.value_or(at::Tensor()), beta = beta_opt.value_or(at::Tensor());
  check_same_device("aten::native_group_norm", X, {&gamma, &beta});
  check_gn_inputs(X, gamma, beta, N, C, HxW, group);
  const bool mixed = at::native::is_mixed_type(X, gamma, beta);
  if (mixed) at::native::check_mixed_data_type(X, gamma, beta);
  check_dtype("GroupNormKernelImpl", X);
  for (const at::Tensor* p : {&gamma, &beta})
    TORCH_CHECK(!p->defined() || mixed || p->scalar_type() == X.scalar_type(), "native_group_norm: expected ",
                p == &gamma ? "weight" : "bias", " of dtype ", X.scalar_type(), ", but got ", p->scalar_type());
  record_native("aten::native_group_norm");
  if (X.scalar_type() == at::kDouble) warn_float64("aten::native_group_norm");
  const auto memory_format = X.suggest_memory_format();
  const auto stat_options = X.options().memory_format(at::MemoryFormat::Contiguous).dtype(at::native::param_scalar_type(X, mixed));
  at::Tensor mean = at::empty({N, group}, stat_options), rstd = at::empty({N, group}, stat_options);
  at::Tensor Y = at::empty_like(X, memory_format);
  if (!X.numel()) return {Y, mean.zero_(), rstd.fill_(NAN)};
  at::Tensor hx, hy;
  const vnc_image x = gn_image(X, N, C, HxW, hx);
  const vnc_image y = gn_image(Y, N, C, HxW, hy);
  const at::Tensor w = gamma.defined() ? gamma.contiguous() : gamma, b = beta.defined() ? beta.contiguous() : beta;
  const int32_t pdt = w.defined() ? dt(w) : b.defined() ? dt(b) : dt(X);
  c10::DeviceGuard g(X.device());
  check(vnc_group_norm(stream_of(X), "aten::native_group_norm", group, dt(X), &x, w.defined() ? element_ptr(w) : nullptr,
                       b.defined() ? element_ptr(b) : nullptr, pdt, eps, &y, element_ptr(mean), element_ptr(rstd),
                       dt(mean)));
  if (!hy.is_same(Y)) Y.copy_(hy.view(Y.sizes()));
  return {Y, mean, rstd};
}

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_group_norm_backward(
    const at::Tensor& dY, const at::Tensor& X, const at::Tensor& mean, const at::Tensor& rstd,
    const std::optional<at::Tensor>& gamma_opt, c10::SymInt N_, c10::SymInt C_, c10::SymInt HxW_, int64_t group,
    std::array<bool, 3> mask) {
  const int64_t N = N_.guard_int(__FILE__, __LINE__), C = C_.guard_int(__FILE__, __LINE__),
                HxW = HxW_.guard_int(__FILE__, __LINE__);
  const at::Tensor gamma = gamma_opt.value_or(at::Tensor());
  check_same_device("aten::native_group_norm_backward", X, {&dY, &mean, &rstd, &gamma});
  TORCH_CHECK(X.scalar_type() == dY.scalar_type(), "Expected scalar types of X and dY are same.");
  const bool mixed = at::native::is_mixed_type(X, mean, rstd);
  if (mixed) at::native::check_mixed_data_type(X, mean, rstd);
  check_dtype("GroupNormBackwardKernelImpl", X);
  TORCH_CHECK(group > 0 && C % group == 0 && X.numel() == N * C * HxW && dY.numel() == X.numel() &&
                  mean.numel() == N * group && rstd.numel() == N * group && (!gamma.defined() || gamma.numel() == C),
              "native_group_norm_backward: inconsistent shapes: input ", X.sizes(), ", grad_out ", dY.sizes(), ", mean ",
              mean.sizes(), ", rstd ", rstd.sizes(), " for N=", N, ", C=", C, ", HxW=", HxW, ", group=", group);
  record_native("aten::native_group_norm_backward");
  const auto memory_format = X.suggest_memory_format();
  const auto dparam_options = (gamma.defined() ? gamma.options() : X.options()).memory_format(at::MemoryFormat::Contiguous);
  at::Tensor dX = mask[0] ? at::empty_like(X, memory_format) : at::Tensor();
  at::Tensor dgamma = mask[1] ? at::empty({C}, dparam_options) : at::Tensor();
  at::Tensor dbeta = mask[2] ? at::empty({C}, dparam_options) : at::Tensor();
  if (!X.numel()) {
    if (dX.defined()) dX.zero_();
    if (dgamma.defined()) dgamma.zero_();
    if (dbeta.defined()) dbeta.zero_();
    return {dX, dgamma, dbeta};
  }
  at::Tensor hx, hdy, hdx;
  const vnc_image x = gn_image(X, N, C, HxW, hx), dy = gn_image(dY, N, C, HxW, hdy);
  vnc_image dx{};
  if (dX.defined()) dx = gn_image(dX, N, C, HxW, hdx);
  const at::Tensor m = mean.contiguous(), r = rstd.contiguous(), w = gamma.defined() ? gamma.contiguous() : gamma;
  const int32_t pdt = w.defined() ? dt(w) : dt(X);
  c10::DeviceGuard g(X.device());
  check(vnc_group_norm_backward(stream_of(X), "aten::native_group_norm_backward", group, dt(X), &dy, &x, element_ptr(m),
                                element_ptr(r), dt(m), w.defined() ? element_ptr(w) : nullptr, pdt,
                                dX.defined() ? &dx : nullptr, dgamma.defined() ? element_ptr(dgamma) : nullptr,
                                dbeta.defined() ? element_ptr(dbeta) : nullptr));
  if (dX.defined() && !hdx.is_same(dX)) dX.copy_(hdx.view(dX.sizes()));
  return {dX, dgamma, dbeta};
}

// ---------------------------------------------------------------- grid_sampler_2d / 3d

// grid_sampler_2d and grid_sampler_3d (F.grid_sample), forward and backward, over ND spatial dims.
template <int ND>
struct GridSampler {
  static constexpr const char* kName = ND == 2 ? "aten::grid_sampler_2d" : "aten::grid_sampler_3d";
  static constexpr const char* kBwd = ND == 2 ? "aten::grid_sampler_2d_backward" : "aten::grid_sampler_3d_backward";

  // A (N, [D,] H, W, ND) grid as the runtime's.
  static vnc_grid grid_of(const at::Tensor& g) {
    vnc_grid v{};
    v.data = element_ptr(g);
    v.N = g.size(0);
    v.strides[0] = g.stride(0);
    v.D = ND == 3 ? g.size(1) : 1;
    v.strides[1] = ND == 3 ? g.stride(1) : 0;
    v.H = g.size(ND - 1);
    v.W = g.size(ND);
    for (int64_t d = 0; d < 3; d++) v.strides[2 + d] = g.stride(ND - 1 + d);  // H, W, coordinate
    return v;
  }

  // ATen's checks (GridSamplerUtils.h: CPU's messages), the modes, and the dtypes: input, grid
  // (and grad_output) of one floating dtype, else CPU's kernel decides (it raises on a mismatch).
  static vnc_grid_sample_params args(const char* name, const at::Tensor& input, const at::Tensor& grid,
                                     int64_t interpolation_mode, int64_t padding_mode, bool align_corners,
                                     const at::Tensor* grad_output = nullptr) {
    at::native::check_grid_sampler_common(input, grid);
    if (ND == 2) {
      at::native::check_grid_sampler_2d(input, grid);
    } else {
      at::native::check_grid_sampler_3d(input, grid, interpolation_mode);
    }
    TORCH_CHECK(interpolation_mode >= 0 && interpolation_mode <= (ND == 2 ? 2 : 1), name,
                ND == 2 ? ": expected interpolation_mode 0 (bilinear), 1 (nearest) or 2 (bicubic), but got "
                        : ": expected interpolation_mode 0 (bilinear) or 1 (nearest), but got ",
                interpolation_mode);
    TORCH_CHECK(padding_mode >= 0 && padding_mode <= 2, name,
                ": expected padding_mode 0 (zeros), 1 (border) or 2 (reflection), but got ", padding_mode);
    check_dtype(name + 6, input);
    NEURON_CHECK_SUPPORTED(grid.scalar_type() == input.scalar_type() &&
                               (!grad_output || grad_output->scalar_type() == input.scalar_type()),
                           name, ": input, grid and grad_output of different dtypes");
    if (grad_output) {
      check_same_device(name, input, {grad_output});
      std::vector<int64_t> shape{input.size(0), input.size(1)};
      for (int64_t d = 1; d <= ND; d++) shape.push_back(grid.size(d));
      TORCH_CHECK(grad_output->sizes() == at::IntArrayRef(shape), name, ": expected grad_output of sizes ",
                  at::IntArrayRef(shape), ", but got ", grad_output->sizes());
    }
    vnc_grid_sample_params p{};
    p.nd = ND;
    p.interp = static_cast<int32_t>(interpolation_mode);
    p.padding = static_cast<int32_t>(padding_mode);
    p.align_corners = align_corners;
    return p;
  }

  static at::Tensor& fwd_out(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation_mode,
                             int64_t padding_mode, bool align_corners, at::Tensor& out) {
    const vnc_grid_sample_params p = args(kName, input, grid, interpolation_mode, padding_mode, align_corners);
    check_same_device(kName, input, {&out});
    NEURON_CHECK_SUPPORTED(out.scalar_type() == input.scalar_type(), kName, ": out of another dtype than input");
    std::vector<int64_t> shape{input.size(0), input.size(1)};
    for (int64_t d = 1; d <= ND; d++) shape.push_back(grid.size(d));
    at::native::resize_output(out, shape);
    record_native(kName);
    if (input.scalar_type() == at::kDouble) warn_float64(kName);
    const vnc_volume x = volume_of(input, ND);
    const vnc_grid g = grid_of(grid);
    c10::DeviceGuard guard(input.device());
    into(out, [&](const at::Tensor& o) {
      const vnc_volume ov = volume_of(o, ND);
      check(vnc_grid_sample(stream_of(input), kName, &p, dt(input), &x, &g, &ov));
    });
    return out;
  }

  static at::Tensor fwd(const at::Tensor& input, const at::Tensor& grid, int64_t interpolation_mode,
                        int64_t padding_mode, bool align_corners) {
    at::Tensor out = at::empty({0}, input.options());  // contiguous, as CPU's
    return fwd_out(input, grid, interpolation_mode, padding_mode, align_corners, out);
  }

  static std::tuple<at::Tensor&, at::Tensor&> bwd_out(const at::Tensor& grad_output, const at::Tensor& input,
                                                      const at::Tensor& grid, int64_t interpolation_mode,
                                                      int64_t padding_mode, bool align_corners,
                                                      std::array<bool, 2> output_mask, at::Tensor& grad_input,
                                                      at::Tensor& grad_grid) {
    const vnc_grid_sample_params p =
        args(kBwd, input, grid, interpolation_mode, padding_mode, align_corners, &grad_output);
    check_same_device(kBwd, input, {&grad_input, &grad_grid});
    NEURON_CHECK_SUPPORTED((!output_mask[0] || grad_input.scalar_type() == input.scalar_type()) &&
                               grad_grid.scalar_type() == input.scalar_type(),
                           kBwd, ": outputs of another dtype than input");
    if (output_mask[0]) at::native::resize_output(grad_input, input.sizes());
    at::native::resize_output(grad_grid, grid.sizes());
    record_native(kBwd);
    if (input.scalar_type() == at::kDouble) warn_float64(kBwd);
    const vnc_volume go = volume_of(grad_output, ND), x = volume_of(input, ND);
    const vnc_grid g = grid_of(grid);
    c10::DeviceGuard guard(input.device());
    auto launch = [&](const at::Tensor* gi) {
      into(grad_grid, [&](const at::Tensor& gg) {
        const vnc_grid ggv = grid_of(gg);
        const vnc_volume giv = gi ? volume_of(*gi, ND) : vnc_volume{};
        check(vnc_grid_sample_backward(stream_of(input), kBwd, &p, dt(input), &go, &x, &g, gi ? &giv : nullptr, &ggv));
      });
    };
    if (output_mask[0]) {
      into(grad_input, [&](const at::Tensor& gi) { launch(&gi); });
    } else {
      launch(nullptr);
    }
    return {grad_input, grad_grid};
  }

  static std::tuple<at::Tensor, at::Tensor> bwd(const at::Tensor& grad_output, const at::Tensor& input,
                                                const at::Tensor& grid, int64_t interpolation_mode,
                                                int64_t padding_mode, bool align_corners,
                                                std::array<bool, 2> output_mask) {
    // CPU's layouts: contiguous gradients; grad_input undefined unless requested
    at::Tensor grad_input = output_mask[0] ? at::empty(input.sizes(), input.options()) : at::Tensor();
    at::Tensor grad_grid = at::empty(grid.sizes(), grid.options());
    bwd_out(grad_output, input, grid, interpolation_mode, padding_mode, align_corners, output_mask, grad_input,
            grad_grid);
    return {grad_input, grad_grid};
  }
};

// ---------------------------------------------------------------- pixel shuffle

// ATen's device-generic composition (views and one copy), its result in the input's layout as
// CPU's kernels give it (channels_last stays channels_last); counted as one native op.
template <bool Shuffle>
at::Tensor pixel_shuffle(const at::Tensor& self, int64_t factor) {
  record_native(Shuffle ? "aten::pixel_shuffle" : "aten::pixel_unshuffle");
  at::Tensor out = Shuffle ? at::native::math_pixel_shuffle(self, factor) : at::native::math_pixel_unshuffle(self, factor);
  const at::MemoryFormat fmt = self.suggest_memory_format();
  if (out.dim() != 4 || fmt == at::MemoryFormat::Contiguous) return out;
  return at::empty(out.sizes(), out.options().memory_format(fmt)).copy_(out);  // CPU's strides, even where C is 1
}

}  // namespace

// CPU's pooling kernels compute an out= tensor partially overlapping their input (structured.h).
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_avg_pool2d)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_avg_pool3d)

NEURON_LIBRARY_IMPL(m) {
  m.impl("pixel_shuffle", TORCH_FN(pixel_shuffle<true>));
  m.impl("pixel_unshuffle", TORCH_FN(pixel_shuffle<false>));
  m.impl("avg_pool2d", TORCH_FN(avg_pool2d));
  m.impl("avg_pool2d.out", TORCH_FN(avg_pool2d_out));
  m.impl("avg_pool2d_backward", TORCH_FN(avg_pool2d_backward));
  m.impl("avg_pool2d_backward.grad_input", TORCH_FN(avg_pool2d_backward_out));
#define NEURON_UPSAMPLE_REG(op, ...)                                         \
  m.impl(#op, TORCH_FN(op##_fwd));                                            \
  m.impl(#op ".out", TORCH_FN(op##_fwd_out));                                 \
  m.impl(#op "_backward", TORCH_FN(op##_bwd));                                \
  m.impl(#op "_backward.grad_input", TORCH_FN(op##_bwd_out));
  NEURON_UPSAMPLE_OPS(NEURON_UPSAMPLE_REG)
#undef NEURON_UPSAMPLE_REG
#define NEURON_PAD_REG(op, ...)                                       \
  m.impl(#op, TORCH_FN(op##_t::fwd));                                   \
  m.impl(#op ".out", TORCH_FN(op##_t::fwd_out));                        \
  m.impl(#op "_backward", TORCH_FN(op##_t::bwd));                       \
  m.impl(#op "_backward.grad_input", TORCH_FN(op##_t::bwd_out));
  NEURON_PAD_OPS(NEURON_PAD_REG)
#undef NEURON_PAD_REG
  // CPU's avg_pool3d: float32, float64, int64 (no 16-bit floats); others go to it, and it raises.
  constexpr DtypeSet kAvgPool3dDtypes = dtype_set({at::kFloat, at::kDouble, at::kLong});
  m.impl("avg_pool3d", TORCH_FN(avg_pool3d), kAvgPool3dDtypes);
  m.impl("avg_pool3d.out", TORCH_FN(avg_pool3d_out), kAvgPool3dDtypes);
  m.impl("avg_pool3d_backward", TORCH_FN(avg_pool3d_backward), kAvgPool3dDtypes);
  m.impl("avg_pool3d_backward.grad_input", TORCH_FN(avg_pool3d_backward_out), kAvgPool3dDtypes);
  m.impl("max_pool3d_with_indices", TORCH_FN(max_pool3d));
  m.impl("max_pool3d_with_indices.out", TORCH_FN(max_pool3d_out));
  m.impl("max_pool3d_with_indices_backward", TORCH_FN(max_pool3d_backward));
  m.impl("max_pool3d_with_indices_backward.grad_input", TORCH_FN(max_pool3d_backward_out));
  m.impl("adaptive_max_pool2d", TORCH_FN(AdaptiveMax2d::fwd));
  m.impl("adaptive_max_pool2d.out", TORCH_FN(AdaptiveMax2d::fwd_out));
  m.impl("adaptive_max_pool2d_backward", TORCH_FN(AdaptiveMax2d::bwd));
  m.impl("adaptive_max_pool2d_backward.grad_input", TORCH_FN(AdaptiveMax2d::bwd_out));
  m.impl("adaptive_max_pool3d", TORCH_FN(AdaptiveMax3d::fwd));
  m.impl("adaptive_max_pool3d.out", TORCH_FN(AdaptiveMax3d::fwd_out));
  m.impl("adaptive_max_pool3d_backward", TORCH_FN(AdaptiveMax3d::bwd));
  m.impl("adaptive_max_pool3d_backward.grad_input", TORCH_FN(AdaptiveMax3d::bwd_out));
  m.impl("_adaptive_avg_pool3d", TORCH_FN(adaptive_avg_pool3d));
  m.impl("_adaptive_avg_pool3d_backward", TORCH_FN(adaptive_avg_pool3d_backward));
  m.impl("reflection_pad2d", TORCH_FN(reflection_pad2d));
  m.impl("reflection_pad2d.out", TORCH_FN(reflection_pad2d_out));
  m.impl("reflection_pad2d_backward", TORCH_FN(pad2d_backward<VNC_PAD_REFLECT>));
  m.impl("reflection_pad2d_backward.grad_input", TORCH_FN(pad2d_backward_out<VNC_PAD_REFLECT>));
  m.impl("replication_pad2d", TORCH_FN(replication_pad2d));
  m.impl("replication_pad2d.out", TORCH_FN(replication_pad2d_out));
  m.impl("replication_pad2d_backward", TORCH_FN(pad2d_backward<VNC_PAD_REPLICATE>));
  m.impl("replication_pad2d_backward.grad_input", TORCH_FN(pad2d_backward_out<VNC_PAD_REPLICATE>));
  m.impl("grid_sampler_2d", TORCH_FN(GridSampler<2>::fwd), kFloatingDtypes);
  m.impl("grid_sampler_2d.out", TORCH_FN(GridSampler<2>::fwd_out), kFloatingDtypes);
  m.impl("grid_sampler_2d_backward", TORCH_FN(GridSampler<2>::bwd), kFloatingDtypes);
  m.impl("grid_sampler_2d_backward.out", TORCH_FN(GridSampler<2>::bwd_out), kFloatingDtypes);
  m.impl("grid_sampler_3d", TORCH_FN(GridSampler<3>::fwd), kFloatingDtypes);
  m.impl("grid_sampler_3d.out", TORCH_FN(GridSampler<3>::fwd_out), kFloatingDtypes);
  m.impl("grid_sampler_3d_backward", TORCH_FN(GridSampler<3>::bwd), kFloatingDtypes);
  m.impl("grid_sampler_3d_backward.out", TORCH_FN(GridSampler<3>::bwd_out), kFloatingDtypes);
  m.impl("native_group_norm", TORCH_FN(native_group_norm));
  m.impl("native_group_norm_backward", TORCH_FN(native_group_norm_backward));
}

}  // namespace torch_neuronx
