// Image ops on the neuron key (runtime: vnc/vision.h): avg_pool2d, native_group_norm,
// upsample_nearest2d / upsample_bilinear2d, reflection_pad2d / replication_pad2d, each with its
// backward.
//
// Argument checks and output shapes come from ATen's structured metas where the op has one
// (so errors are PyTorch's own); outputs keep the memory format the meta picks (channels-last
// in, channels-last out) and the runtime reads and writes every operand at its strides.
#include "neuron.h"
#include "gate.h"
#include "structured.h"

#include <ATen/native/Padding.h>
#include <ATen/native/UpSample.h>
#include <ATen/native/cpu/mixed_data_type.h>
#include <ATen/ops/avg_pool2d_backward_meta.h>
#include <ATen/ops/avg_pool2d_meta.h>
#include <ATen/ops/replication_pad2d_meta.h>
#include <ATen/ops/upsample_bilinear2d_backward_meta.h>
#include <ATen/ops/upsample_bilinear2d_meta.h>
#include <ATen/ops/upsample_nearest2d_backward_meta.h>
#include <ATen/ops/upsample_nearest2d_meta.h>
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
  avg_pool2d_backward_impl(op, grad_output, self, k, s, pad, ceil_mode, count_include_pad, divisor);
  op.finish();
  return grad_input;
}

// ---------------------------------------------------------------- upsampling

using OptScale = std::optional<double>;

template <class Meta>
void upsample_impl(Structured<Meta>& op, const char* name, vnc_upsample_mode mode, const at::Tensor& self,
                   at::IntArrayRef output_size, bool align_corners, OptScale sh, OptScale sw) {
  if constexpr (std::is_same_v<Meta, at::meta::structured_upsample_nearest2d>) op.meta(self, output_size, sh, sw);
  else op.meta(self, output_size, align_corners, sh, sw);
  check_dtype(mode == VNC_UPSAMPLE_NEAREST ? "upsample_nearest2d" : "upsample_bilinear2d", self, false, true);
  record_native(name);
  if (self.scalar_type() == at::kDouble) warn_float64(name);
  const int64_t H = self.size(2), W = self.size(3), OH = output_size[0], OW = output_size[1];
  const float scale_h = mode == VNC_UPSAMPLE_NEAREST ? at::native::compute_scales_value<float>(sh, H, OH)
                                                     : at::native::area_pixel_compute_scale<float>(H, OH, align_corners, sh);
  const float scale_w = mode == VNC_UPSAMPLE_NEAREST ? at::native::compute_scales_value<float>(sw, W, OW)
                                                     : at::native::area_pixel_compute_scale<float>(W, OW, align_corners, sw);
  const vnc_image x = image_of(self);
  c10::DeviceGuard g(self.device());
  into(op.maybe_get_output(0), [&](const at::Tensor& out) {
    const vnc_image o = image_of(out);
    check(vnc_upsample2d(stream_of(self), name, mode, align_corners, scale_h, scale_w, dt(self), &x, &o));
  });
}

template <class Meta>
void upsample_backward_impl(Structured<Meta>& op, const char* name, vnc_upsample_mode mode,
                            const at::Tensor& grad_output, at::IntArrayRef output_size, at::IntArrayRef input_size,
                            bool align_corners, OptScale sh, OptScale sw) {
  if constexpr (std::is_same_v<Meta, at::meta::structured_upsample_nearest2d_backward>)
    op.meta(grad_output, output_size, input_size, sh, sw);
  else
    op.meta(grad_output, output_size, input_size, align_corners, sh, sw);
  check_dtype(name + 6, grad_output);
  record_native(name);
  const int64_t H = input_size[2], W = input_size[3], OH = output_size[0], OW = output_size[1];
  const float scale_h = mode == VNC_UPSAMPLE_NEAREST ? at::native::compute_scales_value<float>(sh, H, OH)
                                                     : at::native::area_pixel_compute_scale<float>(H, OH, align_corners, sh);
  const float scale_w = mode == VNC_UPSAMPLE_NEAREST ? at::native::compute_scales_value<float>(sw, W, OW)
                                                     : at::native::area_pixel_compute_scale<float>(W, OW, align_corners, sw);
  const vnc_image go = image_of(grad_output);
  c10::DeviceGuard g(grad_output.device());
  into(op.maybe_get_output(0), [&](const at::Tensor& gi) {
    const vnc_image i = image_of(gi);
    check(vnc_upsample2d_backward(stream_of(grad_output), name, mode, align_corners, scale_h, scale_w, dt(grad_output),
                                  &go, &i));
  });
}

at::Tensor upsample_nearest2d(const at::Tensor& self, c10::SymIntArrayRef size, OptScale sh, OptScale sw) {
  Structured<at::meta::structured_upsample_nearest2d> op(Mode::Functional);
  upsample_impl(op, "aten::upsample_nearest2d", VNC_UPSAMPLE_NEAREST, self, C10_AS_INTARRAYREF_SLOW(size), false, sh, sw);
  return std::move(op.outs[0]);
}

at::Tensor& upsample_nearest2d_out(const at::Tensor& self, c10::SymIntArrayRef size, OptScale sh, OptScale sw,
                                   at::Tensor& out) {
  check_same_device("aten::upsample_nearest2d", self, {&out});
  Structured<at::meta::structured_upsample_nearest2d> op(Mode::Out, {out});
  upsample_impl(op, "aten::upsample_nearest2d", VNC_UPSAMPLE_NEAREST, self, C10_AS_INTARRAYREF_SLOW(size), false, sh, sw);
  op.finish();
  return out;
}

at::Tensor upsample_nearest2d_backward(const at::Tensor& grad_output, c10::SymIntArrayRef size,
                                       c10::SymIntArrayRef input_size, OptScale sh, OptScale sw) {
  Structured<at::meta::structured_upsample_nearest2d_backward> op(Mode::Functional);
  upsample_backward_impl(op, "aten::upsample_nearest2d_backward", VNC_UPSAMPLE_NEAREST, grad_output,
                         C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(input_size), false, sh, sw);
  return std::move(op.outs[0]);
}

at::Tensor& upsample_nearest2d_backward_out(const at::Tensor& grad_output, c10::SymIntArrayRef size,
                                            c10::SymIntArrayRef input_size, OptScale sh, OptScale sw,
                                            at::Tensor& grad_input) {
  check_same_device("aten::upsample_nearest2d_backward", grad_output, {&grad_input});
  Structured<at::meta::structured_upsample_nearest2d_backward> op(Mode::Out, {grad_input});
  upsample_backward_impl(op, "aten::upsample_nearest2d_backward", VNC_UPSAMPLE_NEAREST, grad_output,
                         C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(input_size), false, sh, sw);
  op.finish();
  return grad_input;
}

// uint8 bilinear: CPU uses a fixed-point algorithm of its own; the visible fallback runs it.
void check_bilinear_dtype(const at::Tensor& self) {
  NEURON_CHECK_SUPPORTED(self.scalar_type() != at::kByte, "upsample_bilinear2d of uint8 images (CPU's fixed-point "
                         "algorithm) is not natively supported on neuron");
}

at::Tensor upsample_bilinear2d(const at::Tensor& self, c10::SymIntArrayRef size, bool align_corners, OptScale sh,
                               OptScale sw) {
  check_bilinear_dtype(self);
  Structured<at::meta::structured_upsample_bilinear2d> op(Mode::Functional);
  upsample_impl(op, "aten::upsample_bilinear2d", VNC_UPSAMPLE_BILINEAR, self, C10_AS_INTARRAYREF_SLOW(size),
                align_corners, sh, sw);
  return std::move(op.outs[0]);
}

at::Tensor& upsample_bilinear2d_out(const at::Tensor& self, c10::SymIntArrayRef size, bool align_corners, OptScale sh,
                                    OptScale sw, at::Tensor& out) {
  check_same_device("aten::upsample_bilinear2d", self, {&out});
  check_bilinear_dtype(self);
  Structured<at::meta::structured_upsample_bilinear2d> op(Mode::Out, {out});
  upsample_impl(op, "aten::upsample_bilinear2d", VNC_UPSAMPLE_BILINEAR, self, C10_AS_INTARRAYREF_SLOW(size),
                align_corners, sh, sw);
  op.finish();
  return out;
}

at::Tensor upsample_bilinear2d_backward(const at::Tensor& grad_output, c10::SymIntArrayRef size,
                                        c10::SymIntArrayRef input_size, bool align_corners, OptScale sh, OptScale sw) {
  Structured<at::meta::structured_upsample_bilinear2d_backward> op(Mode::Functional);
  upsample_backward_impl(op, "aten::upsample_bilinear2d_backward", VNC_UPSAMPLE_BILINEAR, grad_output,
                         C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(input_size), align_corners, sh, sw);
  return std::move(op.outs[0]);
}

at::Tensor& upsample_bilinear2d_backward_out(const at::Tensor& grad_output, c10::SymIntArrayRef size,
                                             c10::SymIntArrayRef input_size, bool align_corners, OptScale sh,
                                             OptScale sw, at::Tensor& grad_input) {
  check_same_device("aten::upsample_bilinear2d_backward", grad_output, {&grad_input});
  Structured<at::meta::structured_upsample_bilinear2d_backward> op(Mode::Out, {grad_input});
  upsample_backward_impl(op, "aten::upsample_bilinear2d_backward", VNC_UPSAMPLE_BILINEAR, grad_output,
                         C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(input_size), align_corners, sh, sw);
  op.finish();
  return grad_input;
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

}  // namespace

NEURON_LIBRARY_IMPL(m) {
  m.impl("avg_pool2d", TORCH_FN(avg_pool2d));
  m.impl("avg_pool2d.out", TORCH_FN(avg_pool2d_out));
  m.impl("avg_pool2d_backward", TORCH_FN(avg_pool2d_backward));
  m.impl("avg_pool2d_backward.grad_input", TORCH_FN(avg_pool2d_backward_out));
  m.impl("upsample_nearest2d", TORCH_FN(upsample_nearest2d));
  m.impl("upsample_nearest2d.out", TORCH_FN(upsample_nearest2d_out));
  m.impl("upsample_nearest2d_backward", TORCH_FN(upsample_nearest2d_backward));
  m.impl("upsample_nearest2d_backward.grad_input", TORCH_FN(upsample_nearest2d_backward_out));
  m.impl("upsample_bilinear2d", TORCH_FN(upsample_bilinear2d));
  m.impl("upsample_bilinear2d.out", TORCH_FN(upsample_bilinear2d_out));
  m.impl("upsample_bilinear2d_backward", TORCH_FN(upsample_bilinear2d_backward));
  m.impl("upsample_bilinear2d_backward.grad_input", TORCH_FN(upsample_bilinear2d_backward_out));
  m.impl("reflection_pad2d", TORCH_FN(reflection_pad2d));
  m.impl("reflection_pad2d.out", TORCH_FN(reflection_pad2d_out));
  m.impl("reflection_pad2d_backward", TORCH_FN(pad2d_backward<VNC_PAD_REFLECT>));
  m.impl("reflection_pad2d_backward.grad_input", TORCH_FN(pad2d_backward_out<VNC_PAD_REFLECT>));
  m.impl("replication_pad2d", TORCH_FN(replication_pad2d));
  m.impl("replication_pad2d.out", TORCH_FN(replication_pad2d_out));
  m.impl("replication_pad2d_backward", TORCH_FN(pad2d_backward<VNC_PAD_REPLICATE>));
  m.impl("replication_pad2d_backward.grad_input", TORCH_FN(pad2d_backward_out<VNC_PAD_REPLICATE>));
  m.impl("native_group_norm", TORCH_FN(native_group_norm));
  m.impl("native_group_norm_backward", TORCH_FN(native_group_norm_backward));
}

}  // namespace torch_neuronx
