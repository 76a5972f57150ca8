// FFT on the neuron key: _fft_r2c, _fft_c2r, _fft_c2c (the ops torch.fft's functions reach),
// functional and out=. A transform over several dims is a sequence of 1-D runtime transforms
// (vnc/fft.h): r2c on the last listed dim then c2c on the others; c2r after c2c on all but the
// last. Normalization (0 none, 1 1/sqrt(n), 2 1/n with n the product of the signal sizes, as
// ATen's fft_norm_mode) is applied by the last transform. Results are laid out as CPU's
// (MKL) kernels lay them out (fft_layout).
#include "neuron.h"
#include "gate.h"

#include <ATen/native/Resize.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <numeric>

namespace torch_neuronx {
namespace {

double norm_scale(int64_t normalization, const at::Tensor& signal_holder, at::IntArrayRef dims,
                  int64_t last_size = -1) {
  double n = 1;
  for (size_t i = 0; i < dims.size(); i++)
    n *= static_cast<double>(i + 1 == dims.size() && last_size >= 0 ? last_size : signal_holder.size(dims[i]));
  TORCH_CHECK(normalization >= 0 && normalization <= 2, "fft: unknown normalization mode ", normalization);
  return normalization == 0 ? 1.0 : normalization == 1 ? 1.0 / std::sqrt(n) : 1.0 / n;
}

std::vector<int64_t> wrap_dims(const at::Tensor& t, at::IntArrayRef dims) {
  std::vector<int64_t> out;
  for (int64_t d : dims) out.push_back(at::maybe_wrap_dim(d, t.dim()));
  return out;
}

// CPU's result layout, from ATen's _exec_fft (aten/src/ATen/native/mkl/SpectralOps.cpp): the
// batch (untransformed) dims outermost, ordered by the input's strides, largest first, then
// the transformed dims, dense, in the order `dims` lists them. std::partition and std::sort
// are the calls _exec_fft makes, so dims of equal input strides (size-1 dims) end up in the
// same order as on CPU (neither is stable; tests/test_fft.py compares every layout with CPU).
std::vector<int64_t> fft_layout(at::IntArrayRef in_strides, at::IntArrayRef out_sizes, at::IntArrayRef dims) {
  const int64_t ndim = static_cast<int64_t>(out_sizes.size());
  std::vector<int64_t> perm(ndim);
  std::iota(perm.begin(), perm.end(), int64_t{0});
  std::vector<bool> transformed(ndim, false);
  for (int64_t d : dims) transformed[d] = true;
  const auto batch_end = std::partition(perm.begin(), perm.end(), [&](int64_t d) { return !transformed[d]; });
  std::sort(perm.begin(), batch_end, [&](int64_t a, int64_t b) { return in_strides[a] > in_strides[b]; });
  std::vector<int64_t> strides(ndim);
  int64_t step = 1;  // the dense signal block: transformed dims, the last innermost
  for (size_t i = dims.size(); i-- > 0;) {
    strides[dims[i]] = step;
    step *= std::max<int64_t>(out_sizes[dims[i]], 1);
  }
  for (auto it = batch_end; it != perm.begin();) {  // batch dims, the last listed innermost
    --it;
    strides[*it] = step;
    step *= out_sizes[*it];
  }
  return strides;
}

// The order CPU runs (and lays out) the transformed dims in (ATen's _sort_dims): by the
// input's strides, largest first; a one-sided transform keeps its halved dim last.
std::vector<int64_t> sorted_dims(at::IntArrayRef in_strides, at::IntArrayRef dims, bool keep_last) {
  std::vector<int64_t> sorted(dims.begin(), dims.end());
  std::sort(sorted.begin(), sorted.end() - (keep_last ? 1 : 0),
            [&](int64_t a, int64_t b) { return in_strides[a] > in_strides[b]; });
  return sorted;
}

void c2c_steps(const char* name, at::Tensor& buf, at::IntArrayRef dims, int sign, double last_scale) {
  c10::DeviceGuard g(buf.device());
  for (size_t i = 0; i < dims.size(); i++) {
    vnc_tensor v = to_vnc(buf);  // in place: each line is read whole before it is written
    check(vnc_fft_c2c(stream_of(buf), name, &v, &v, static_cast<int>(dims[i]), sign, i + 1 == dims.size() ? last_scale : 1.0));
  }
}

void check_input(const char* name, const at::Tensor& self, bool complex_in) {
  TORCH_CHECK(complex_in ? self.is_complex() : at::isFloatingType(self.scalar_type()), name, ": expected a ",
              complex_in ? "complex" : "real floating", " input, got ", self.scalar_type());
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kHalf && self.scalar_type() != at::kBFloat16 &&
                                  self.scalar_type() != at::kComplexHalf,
                              name, ": ", self.scalar_type(), " is not supported (as on CPU)");
  if (self.scalar_type() == at::kDouble || self.scalar_type() == at::kComplexDouble) warn_float64(name);
}

at::Tensor fft_r2c(const at::Tensor& self, at::IntArrayRef dim_, int64_t normalization, bool onesided) {
  constexpr const char* name = "aten::_fft_r2c";
  check_input(name, self, false);
  record_native(name);
  const auto dims = wrap_dims(self, dim_);
  TORCH_CHECK(!dims.empty(), name, ": expected at least one dim");
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  const int64_t last = dims.back();
  if (onesided) shape[last] = self.size(last) / 2 + 1;
  at::Tensor out = at::empty_strided(shape, fft_layout(self.strides(), shape, sorted_dims(self.strides(), dims, true)),
                                     self.options().dtype(c10::toComplexType(self.scalar_type())));
  if (out.numel() == 0) return out;
  const double scale = norm_scale(normalization, self, dims);
  vnc_tensor x = to_vnc(self), o = to_vnc(out);
  c10::DeviceGuard g(self.device());
  check(vnc_fft_r2c(stream_of(self), name, &x, &o, static_cast<int>(last), dims.size() == 1 ? scale : 1.0));
  c2c_steps(name, out, at::IntArrayRef(dims).slice(0, dims.size() - 1), -1, scale);
  return out;
}

at::Tensor fft_c2r(const at::Tensor& self, at::IntArrayRef dim_, int64_t normalization, c10::SymInt last_dim_size_) {
  constexpr const char* name = "aten::_fft_c2r";
  check_input(name, self, true);
  record_native(name);
  const int64_t last_dim_size = last_dim_size_.expect_int();
  const auto dims = wrap_dims(self, dim_);
  TORCH_CHECK(!dims.empty(), name, ": expected at least one dim");
  TORCH_CHECK(last_dim_size >= 1, "Invalid number of data points (", last_dim_size, ") specified");
  const int64_t last = dims.back();
  TORCH_CHECK(self.size(last) >= last_dim_size / 2 + 1, name, ": expected at least ", last_dim_size / 2 + 1,
              " input entries along dim ", last, " for ", last_dim_size, " outputs, got ", self.size(last));
  std::vector<int64_t> shape(self.sizes().begin(), self.sizes().end());
  shape[last] = last_dim_size;
  // CPU runs a c2c over the other dims first, then a c2r laid out from that intermediate's layout
  std::vector<int64_t> in_strides(self.strides().begin(), self.strides().end());
  if (dims.size() > 1) {
    const auto c2c_dims = at::IntArrayRef(dims).slice(0, dims.size() - 1);
    in_strides = fft_layout(self.strides(), self.sizes(), sorted_dims(self.strides(), c2c_dims, false));
  }
  at::Tensor out = at::empty_strided(shape, fft_layout(in_strides, shape, {last}),
                                     self.options().dtype(c10::toRealValueType(self.scalar_type())));
  if (out.numel() == 0) return out;
  const double scale = norm_scale(normalization, out, dims);
  at::Tensor buf = self;
  if (dims.size() > 1) {  // the other dims first, on a copy of the input
    buf = self.narrow(last, 0, last_dim_size / 2 + 1).clone(at::MemoryFormat::Contiguous);
    c2c_steps(name, buf, at::IntArrayRef(dims).slice(0, dims.size() - 1), 1, 1.0);
  }
  vnc_tensor x = to_vnc(buf), o = to_vnc(out);
  c10::DeviceGuard g(self.device());
  check(vnc_fft_c2r(stream_of(self), name, &x, &o, static_cast<int>(last), scale));
  return out;
}

at::Tensor fft_c2c(const at::Tensor& self, c10::SymIntArrayRef dim_sym, int64_t normalization, bool forward) {
  constexpr const char* name = "aten::_fft_c2c";
  check_input(name, self, true);
  record_native(name);
  const auto dims = wrap_dims(self, C10_AS_INTARRAYREF_SLOW(dim_sym));
  if (dims.empty()) return self.clone();  // as CPU: a copy in the input's layout
  at::Tensor out = at::empty_strided(self.sizes(), fft_layout(self.strides(), self.sizes(), sorted_dims(self.strides(), dims, false)),
                                     self.options());
  if (out.numel() == 0) return out;
  const double scale = norm_scale(normalization, self, dims);
  const int sign = forward ? -1 : 1;
  vnc_tensor x = to_vnc(self), o = to_vnc(out);
  c10::DeviceGuard g(self.device());
  check(vnc_fft_c2c(stream_of(self), name, &x, &o, static_cast<int>(dims[0]), sign, dims.size() == 1 ? scale : 1.0));
  c2c_steps(name, out, at::IntArrayRef(dims).slice(1), sign, scale);
  return out;
}

// The result into an out= tensor, as CPU's _fft_*_mkl_out (resized to contiguous when its shape differs).
at::Tensor& into(const at::Tensor& r, at::Tensor& out) {
  TORCH_CHECK(out.scalar_type() == r.scalar_type(), "fft: expected out of dtype ", r.scalar_type(), ", got ",
              out.scalar_type());
  at::native::resize_output(out, r.sizes());
  return out.copy_(r);
}

at::Tensor& fft_r2c_out(const at::Tensor& self, at::IntArrayRef dim, int64_t normalization, bool onesided, at::Tensor& out) {
  check_same_device("aten::_fft_r2c", out, {&self});  // before the kernel's device guard
  return into(fft_r2c(self, dim, normalization, onesided), out);
}
at::Tensor& fft_c2r_out(const at::Tensor& self, at::IntArrayRef dim, int64_t normalization, c10::SymInt last_dim_size,
                        at::Tensor& out) {
  check_same_device("aten::_fft_c2r", out, {&self});  // before the kernel's device guard
  return into(fft_c2r(self, dim, normalization, std::move(last_dim_size)), out);
}
at::Tensor& fft_c2c_out(const at::Tensor& self, c10::SymIntArrayRef dim, int64_t normalization, bool forward,
                        at::Tensor& out) {
  check_same_device("aten::_fft_c2c", out, {&self});  // before the kernel's device guard
  return into(fft_c2c(self, dim, normalization, forward), out);
}

}  // namespace

NEURON_LIBRARY_IMPL(m) {
  m.impl("_fft_r2c", TORCH_FN(fft_r2c));
  m.impl("_fft_r2c.out", TORCH_FN(fft_r2c_out));
  m.impl("_fft_c2r", TORCH_FN(fft_c2r));
  m.impl("_fft_c2r.out", TORCH_FN(fft_c2r_out));
  m.impl("_fft_c2c", TORCH_FN(fft_c2c));
  m.impl("_fft_c2c.out", TORCH_FN(fft_c2c_out));
}

}  // namespace torch_neuronx
