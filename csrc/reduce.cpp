// Reductions on the neuron key: ATen's meta functions and make_reduction build the
// reduction TensorIterator (shapes, keepdim, dtype rules, errors); launch_reduce hands its
// geometry to the runtime's fixed-schedule reduction kernels (runtime/include/vnc/reduce.h).
// Also histc and histogram (runtime/include/vnc/histogram.h).
#include "neuron.h"
#include "gate.h"
#include "structured.h"

#include <ATen/native/ReduceOpsUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/all_meta.h>
#include <ATen/ops/amax_meta.h>
#include <ATen/ops/amin_meta.h>
#include <ATen/ops/any_meta.h>
#include <ATen/ops/argmax_meta.h>
#include <ATen/ops/argmin_meta.h>
#include <ATen/ops/linalg_vector_norm_meta.h>
#include <ATen/ops/max_meta.h>
#include <ATen/ops/mean_meta.h>
#include <ATen/ops/min_meta.h>
#include <ATen/ops/prod_meta.h>
#include <ATen/ops/sum_meta.h>
#include <torch/library.h>

namespace torch_neuronx {
namespace {

void launch_reduce(at::TensorIteratorBase& iter, vnc_reduce_op op, const char* name, int nout = 1,
                   vnc_reduce_params params = {}) {
  at::ScalarType in = iter.dtype(iter.ntensors() - 1);
  NEURON_CHECK_SUPPORTED(!at::isComplexType(in), "\"", name, "\" is not natively implemented for '",
                         c10::toString(in), "' on neuron");
  record_native(name);
  if (in == at::kDouble || iter.dtype(0) == at::kDouble) warn_float64(name);
  vnc_iter it = iter_geometry(iter);
  const at::Tensor& out = iter.tensor(0);
  c10::DeviceGuard guard(out.device());
  check(vnc_reduce(stream_of(out), name, op, &it, nout, &params));
}

// sum / mean / prod. ATen casts the input to the output dtype first (CPU's mean into float16
// or bfloat16: to float32, then sums, divides and rounds); the runtime converts while it reads
// (integers accumulate in int64, floating types in float32), so the cast is skipped where
// reading converts to the same values: both integral (sums and products wrap alike), or a
// floating cast that rounds nothing (to a wider type; float64 to float32, which the device
// reads as float32). A narrowing one (sum of float32 into float16) rounds each input first.
template <vnc_reduce_op OP>
struct SumLike {
  static constexpr const char* name() { return OP == VNC_RED_SUM ? "aten::sum" : OP == VNC_RED_MEAN ? "aten::mean" : "aten::prod"; }
  static at::ScalarType read_dtype(const at::Tensor& self, const at::Tensor& out) {
    const at::ScalarType s = self.scalar_type();
    if (self.is_complex() || out.is_complex()) return out.scalar_type();
    const bool half_mean = OP == VNC_RED_MEAN && (out.scalar_type() == at::kHalf || out.scalar_type() == at::kBFloat16);
    const at::ScalarType o = half_mean ? at::kFloat : out.scalar_type();
    const bool integral = at::isIntegralType(s, true) && at::isIntegralType(o, true);
    const bool exact_float = at::isFloatingType(s) && at::isFloatingType(o) &&
                             (c10::promoteTypes(s, o) == o || (s == at::kDouble && o == at::kFloat));
    return integral || exact_float ? s : o;
  }
  template <class M, class Dim>
  static void run(M&, const at::Tensor& self, Dim dim, bool keepdim, std::optional<at::ScalarType>, const at::Tensor& out) {
    // complex products: the visible fallback (refused before the input's cast to the out dtype launches)
    NEURON_CHECK_SUPPORTED(OP != VNC_RED_PROD || !out.is_complex(), "\"aten::prod\" is not natively implemented for '",
                           out.scalar_type(), "' on neuron");
    // ATen's mean.out is sum_out then an in-place true division of the out tensor
    TORCH_CHECK(OP != VNC_RED_MEAN || !at::isIntegralType(out.scalar_type(), /*includeBool=*/true), "result type ",
                c10::typeMetaToScalarType(at::get_default_dtype()), " can't be cast to the desired output type ",
                out.scalar_type());
    if constexpr (!std::is_same_v<std::decay_t<Dim>, int64_t>) {
      if (out.is_complex()) {  // sum / mean of complex values: of the real view, re and im apart
        // CPU's sum has no complex32 kernel: the fallback raises its error
        NEURON_CHECK_SUPPORTED(out.scalar_type() != at::kComplexHalf, "\"", name(),
                               "\" is not implemented for 'ComplexHalf'");
        const at::Tensor src = self.scalar_type() == out.scalar_type() ? self : self.to(out.scalar_type());
        at::DimVector dims;
        if (dim && !dim->empty()) {
          for (int64_t d : *dim) dims.push_back(at::maybe_wrap_dim(d, std::max<int64_t>(self.dim(), 1)));
        } else {
          for (int64_t d = 0; d < self.dim(); d++) dims.push_back(d);
        }
        const at::Tensor re = at::view_as_real(src), ro = at::view_as_real(out);
        auto iter = at::meta::make_reduction(re, ro, dims, keepdim, re.scalar_type());
        launch_reduce(iter, OP, name());
        return;
      }
    }
    if constexpr (std::is_same_v<std::decay_t<Dim>, int64_t>) {
      int64_t d = dim;
      auto iter = at::meta::make_reduction(self, out, at::IntArrayRef(&d, 1), keepdim, read_dtype(self, out));
      launch_reduce(iter, OP, name());
    } else {
      auto iter = at::meta::make_reduction(self, out, dim, keepdim, read_dtype(self, out));
      launch_reduce(iter, OP, name());
    }
  }
};

template <vnc_reduce_op OP>
struct Extreme {  // amax / amin
  template <class M>
  static void run(M&, const at::Tensor& self, at::IntArrayRef dim, bool keepdim, const at::Tensor& out) {
    auto iter = at::meta::make_reduction(self, out, dim, keepdim, self.scalar_type());
    if (iter.numel() != 0) launch_reduce(iter, OP, OP == VNC_RED_AMAX ? "aten::amax" : "aten::amin");
  }
};

template <vnc_reduce_op OP>
struct Arg {  // argmax / argmin: over the flattened tensor when dim is None
  template <class M>
  static void run(M&, const at::Tensor& self, std::optional<int64_t> dim, bool keepdim, const at::Tensor& out) {
    c10::MaybeOwned<at::Tensor> in;
    at::DimVector dims;
    if (dim) {
      int64_t d = at::maybe_wrap_dim(*dim, self.dim());
      if (self.dim() > 0) dims.push_back(d);
      in = c10::MaybeOwned<at::Tensor>::borrowed(self);
    } else {
      in = c10::MaybeOwned<at::Tensor>::owned(self.reshape({-1}));
      keepdim = false;
    }
    auto iter = at::meta::make_reduction(*in, out, dims, keepdim, self.scalar_type());
    if (iter.numel() != 0) launch_reduce(iter, OP, OP == VNC_RED_ARGMAX ? "aten::argmax" : "aten::argmin");
  }
};

template <vnc_reduce_op OP>
struct AnyAll {
  template <class M, class Dim>
  static void run(M&, const at::Tensor& self, Dim dim, bool keepdim, const at::Tensor& out) {
    at::DimVector dims;
    if constexpr (std::is_same_v<std::decay_t<Dim>, int64_t>) dims.push_back(dim);
    else if (dim) dims.assign(dim->begin(), dim->end());
    auto iter = at::meta::make_reduction(self, out, dims, keepdim, self.scalar_type());
    launch_reduce(iter, OP, OP == VNC_RED_ANY ? "aten::any" : "aten::all");
  }
};

// max.dim / min.dim: values and indices (hand-written: two outputs and a precompute struct).
template <class Meta, vnc_reduce_op OP>
std::tuple<at::Tensor&, at::Tensor&> extreme_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                     at::Tensor& values, at::Tensor& indices) {
  Structured<Meta, 2> op(Mode::Out, {values, indices});
  op.reads = {self};
  auto pre = op.meta(self, dim, keepdim);
  int64_t d = pre.dim;
  // the reduction writes values and indices at one set of strides (CPU's kernel takes any)
  if (op.maybe_get_output(0).strides() != op.maybe_get_output(1).strides()) op.through_temporaries();
  auto& v = const_cast<at::Tensor&>(op.maybe_get_output(0));
  auto& i = const_cast<at::Tensor&>(op.maybe_get_output(1));
  if (self.numel() == 0) return {values, indices};
  auto iter = at::meta::make_reduction(self, v, i, at::IntArrayRef(&d, 1), keepdim, self.scalar_type(), at::kLong);
  launch_reduce(iter, OP, OP == VNC_RED_MAX_INDEX ? "aten::max" : "aten::min", 2);
  op.finish();
  return {values, indices};
}

template <class Meta, vnc_reduce_op OP>
std::tuple<at::Tensor, at::Tensor> extreme_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  at::Tensor values = at::empty({0}, self.options());
  at::Tensor indices = at::empty({0}, self.options().dtype(at::kLong));
  extreme_dim_out<Meta, OP>(self, dim, keepdim, values, indices);
  return {values, indices};
}

// max() / min() over all elements.
template <vnc_reduce_op OP>
at::Tensor extreme_all(const at::Tensor& self) {
  TORCH_CHECK(self.numel() > 0, OP == VNC_RED_AMAX ? "max" : "min",
              "(): Expected reduction dim to be specified for input.numel() == 0. Specify the reduction dim with the 'dim' argument.");
  at::Tensor out = at::empty({}, self.options());
  auto iter = at::meta::make_reduction(self, out, at::IntArrayRef{}, false, self.scalar_type());
  launch_reduce(iter, OP, OP == VNC_RED_AMAX ? "aten::max" : "aten::min");
  return out;
}

// linalg_vector_norm: ord 0 (nonzero count), +-inf (max/min |x|), or (sum |x|^ord)^(1/ord).
struct VectorNorm {
  template <class M>
  static void run(M&, const at::Tensor& self, const at::Scalar& ord, at::OptionalIntArrayRef dim, bool keepdim,
                  std::optional<at::ScalarType>, const at::Tensor& out) {
    NEURON_CHECK_SUPPORTED(!self.is_complex(), "linalg.vector_norm of complex tensors is not natively supported on neuron");
    at::IntArrayRef dims = dim.value_or(at::IntArrayRef{});
    auto iter = at::meta::make_reduction(self, out, dims, keepdim, self.scalar_type());
    vnc_reduce_params p{};
    p.p = ord.toDouble();
    launch_reduce(iter, VNC_RED_NORM, "aten::linalg_vector_norm", 1, p);
  }
};

// any() / all() over all elements.
template <vnc_reduce_op OP>
at::Tensor& any_all_out(const at::Tensor& self, at::Tensor& out) {
  at::native::resize_output(out, {});
  auto iter = at::meta::make_reduction(self, out, at::IntArrayRef{}, false, self.scalar_type());
  launch_reduce(iter, OP, OP == VNC_RED_ANY ? "aten::any" : "aten::all");
  return out;
}
template <vnc_reduce_op OP>
at::Tensor any_all(const at::Tensor& self) {
  at::Tensor out = at::empty({}, self.options().dtype(self.scalar_type() == at::kByte ? at::kByte : at::kBool));
  return any_all_out<OP>(self, out);
}

// var / std with correction (default 1), as ATen's std_var_out.
template <bool STD>
at::Tensor& var_out(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction,
                    bool keepdim, at::Tensor& out) {
  const char* name = STD ? "aten::std" : "aten::var";
  NEURON_CHECK_SUPPORTED(at::isFloatingType(self.scalar_type()), name, " of ", self.scalar_type(),
                         " tensors is not natively supported on neuron");
  at::ScalarType dtype = self.scalar_type();
  auto iter = at::native::make_reduction(name, out, self, dim, keepdim, dtype);
  vnc_reduce_params p{};
  p.correction = correction ? correction->toDouble() : 1.0;
  p.take_sqrt = STD;
  if (iter.numel() == 0) {
    out.fill_(std::numeric_limits<double>::quiet_NaN());
    return out;
  }
  launch_reduce(iter, VNC_RED_VAR, name, 1, p);
  return out;
}

template <bool STD>
at::Tensor var(const at::Tensor& self, at::OptionalIntArrayRef dim, const std::optional<at::Scalar>& correction, bool keepdim) {
  at::Tensor out = at::empty({0}, self.options());
  return var_out<STD>(self, dim, correction, keepdim, out);
}

// prod of all elements: the dim kernel over the flattened tensor.
at::Tensor nx_prod(const at::Tensor& self, std::optional<at::ScalarType> dtype) {
  return at::prod(self.reshape({-1}), 0, false, dtype);
}

// trace: the sum of the main diagonal (a view), with ATen's checks and result dtype (integers
// to int64, as sum). CPU's kernel takes every dtype but bool.
at::Tensor nx_trace(const at::Tensor& self) {
  TORCH_CHECK(self.dim() == 2, "trace: expected a matrix, but got tensor with dim ", self.dim());
  TORCH_CHECK_NOT_IMPLEMENTED(self.scalar_type() != at::kBool, "\"trace\" not implemented for 'Bool'");
  return at::sum(self.diagonal(), c10::IntArrayRef{}, false, std::nullopt);
}

// torch.equal: same sizes and every element equal (NaN is not equal to itself, as on CPU).
bool nx_equal(const at::Tensor& self, const at::Tensor& other) {
  check_same_device("aten::equal", self, {&other});
  record_native("aten::equal");
  return self.sizes() == other.sizes() && at::eq(self, other).all().item<bool>();
}

// var_mean / std_mean: compositions of the native var/std and mean.
// Complex inputs (var/std are native for floating dtypes only) take the visible fallback.
template <bool STD>
std::tuple<at::Tensor, at::Tensor> var_mean(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                            const std::optional<at::Scalar>& correction, bool keepdim) {
  NEURON_CHECK_SUPPORTED(!self.is_complex(), STD ? "std_mean" : "var_mean",
                         " of complex tensors is not natively supported on neuron");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), STD ? "std_mean" : "var_mean",
              " only support floating point and complex dtypes");  // ATen's, before var/std's own
  at::Tensor v = STD ? at::std(self, dim, correction, keepdim) : at::var(self, dim, correction, keepdim);
  return {v, at::mean(self, dim, keepdim)};
}

template <bool STD>
std::tuple<at::Tensor&, at::Tensor&> var_mean_out(const at::Tensor& self, at::OptionalIntArrayRef dim,
                                                  const std::optional<at::Scalar>& correction, bool keepdim,
                                                  at::Tensor& out0, at::Tensor& out1) {
  auto [v, m] = var_mean<STD>(self, dim, correction, keepdim);
  at::native::resize_output(out0, v.sizes());
  at::native::resize_output(out1, m.sizes());
  out0.copy_(v);
  out1.copy_(m);
  return {out0, out1};
}

// ---------------------------------------------------------------- histograms

// torch.histc and torch.histogram as ATen's CPU kernels compute them (aten/src/ATen/native/
// Histogram.cpp): outer edges from the arguments or the data's min and max (a host read, as
// on CPU), edges by native linspace, bins by the runtime's vnc_histogram.
void check_hist_dtype(const char* name, const at::Tensor& self) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()), "\"", name, "\" not implemented for '",
                              c10::toString(self.scalar_type()), "'");
}

void launch_histogram(const char* name, const at::Tensor& self, const std::optional<at::Tensor>& weight,
                      const at::Tensor& edges, vnc_bins_mode mode, const at::Tensor& hist) {
  const at::Tensor w = weight && weight->defined() ? weight->reshape({-1}) : at::Tensor();
  check_same_device(name, self, {&edges, &hist, &w});
  record_native(name);
  if (self.scalar_type() == at::kDouble) warn_float64(name);
  const at::Tensor x = self.reshape({-1});
  vnc_tensor xv = to_vnc(x), ev = to_vnc(edges), hv = to_vnc(hist), wv = w.defined() ? to_vnc(w) : vnc_tensor{};
  c10::DeviceGuard g(self.device());
  check(vnc_histogram(stream_of(self), name, &xv, w.defined() ? &wv : nullptr, &ev, mode, &hv));
}

at::Tensor& histc_out(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max, at::Tensor& out) {
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension 0");
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "torch.histogram: input tensor and hist tensor should have the same dtype, but got input ",
              self.scalar_type(), " and hist ", out.scalar_type());
  double lo = min.to<double>(), hi = max.to<double>();
  if (lo == hi && self.numel() > 0) {
    lo = at::amin(self).item<double>();
    hi = at::amax(self).item<double>();
  }
  if (lo == hi) {
    lo -= 1;
    hi += 1;
  }
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "torch.histc: range of [", lo, ", ", hi, "] is not finite");
  TORCH_CHECK(lo < hi, "torch.histc: max must be larger than min");
  at::native::resize_output(out, {bins});
  // CPU's order: the edges in self's dtype first (an integer range past int64 refused there),
  // then the dtype of the kernel.
  const at::Tensor edges = at::linspace(lo, hi, bins + 1, self.options());
  check_hist_dtype("histogram_cpu", self);
  launch_histogram("aten::histc", self, std::nullopt, edges, VNC_BINS_LINEAR, out);
  return out;
}

at::Tensor histc(const at::Tensor& self, int64_t bins, const at::Scalar& min, const at::Scalar& max) {
  at::Tensor out = at::empty({0}, self.options());
  return histc_out(self, bins, min, max, out);
}

void check_histogram_args(const at::Tensor& self, const std::optional<at::Tensor>& weight, const at::Tensor& hist,
                          const at::Tensor& edges_out) {
  check_hist_dtype("histogram_cpu", self);
  for (const at::Tensor* t : {&hist, &edges_out})
    TORCH_CHECK(t->scalar_type() == self.scalar_type(), "torch.histogram: input tensor and ",
                t == &hist ? "hist" : "bin_edges", " tensor should have the same dtype, but got input ", self.scalar_type(),
                " and ", t == &hist ? "hist " : "bin_edges ", t->scalar_type());
  if (weight && weight->defined()) {
    TORCH_CHECK(weight->scalar_type() == self.scalar_type(), "torch.histogramdd: if weight tensor is provided, input tensor and weight tensor should have the same dtype, but got input(",
                self.scalar_type(), "), and weight(", weight->scalar_type(), ")");
    TORCH_CHECK(weight->numel() == self.numel(), "torch.histogramdd: if weight tensor is provided it should have the same shape as the input tensor excluding its innermost dimension, but got input with shape ",
                self.sizes(), " and weight with shape ", weight->sizes());
  }
}

// density: each count divided by the total and by its bin's width (as ATen).
void apply_density(at::Tensor& hist, const at::Tensor& edges) {
  hist.div_(hist.sum());
  hist.div_(edges.diff());
}

std::tuple<at::Tensor&, at::Tensor&> histogram_bins_out(const at::Tensor& self, const at::Tensor& bins,
                                                        const std::optional<at::Tensor>& weight, bool density,
                                                        at::Tensor& hist, at::Tensor& bin_edges) {
  check_histogram_args(self, weight, hist, bin_edges);
  TORCH_CHECK(bins.scalar_type() == self.scalar_type(), "torch.histogramdd: input tensor and bins tensors should have the same dtype, but got input with dtype ",
              self.scalar_type(), " and bins for dimension 0 with dtype ", bins.scalar_type());
  TORCH_CHECK(bins.dim() == 1, "torch.histogramdd: bins tensor should have one dimension, but got ", bins.dim(),
              " dimensions in the bins tensor for dimension 0");
  TORCH_CHECK(bins.numel() > 1, "torch.histogram(): bins must be > 0, but got ", bins.numel() - 1, " for dimension 0");
  at::native::resize_output(bin_edges, {bins.numel()});
  at::native::resize_output(hist, {bins.numel() - 1});
  bin_edges.copy_(bins);
  launch_histogram("aten::histogram", self, weight, bin_edges, VNC_BINS_SEARCH, hist);
  if (density) apply_density(hist, bin_edges);
  return {hist, bin_edges};
}

std::tuple<at::Tensor, at::Tensor> histogram_bins(const at::Tensor& self, const at::Tensor& bins,
                                                  const std::optional<at::Tensor>& weight, bool density) {
  at::Tensor hist = at::empty({0}, self.options()), edges = at::empty({0}, self.options());
  histogram_bins_out(self, bins, weight, density, hist, edges);
  return {hist, edges};
}

std::tuple<at::Tensor&, at::Tensor&> histogram_ct_out(const at::Tensor& self, int64_t bins,
                                                      std::optional<at::ArrayRef<double>> range,
                                                      const std::optional<at::Tensor>& weight, bool density,
                                                      at::Tensor& hist, at::Tensor& bin_edges) {
  check_histogram_args(self, weight, hist, bin_edges);
  TORCH_CHECK(bins > 0, "torch.histogram(): bins must be > 0, but got ", bins, " for dimension 0");
  double lo = 0., hi = 1.;  // numpy's default for an empty input
  if (range) {
    TORCH_CHECK(range->size() == 2, "torch.histogramdd: for a 1-dimensional histogram range should have 2 elements, but got ",
                range->size());
    lo = (*range)[0];
    hi = (*range)[1];
  } else if (self.numel() > 0) {
    lo = at::amin(self).item<double>();
    hi = at::amax(self).item<double>();
  }
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "torch.histogramdd: dimension 0's range [", lo, ", ", hi,
              "] is not finite");
  TORCH_CHECK(lo <= hi, "torch.histogramdd: min should not exceed max, but got min ", lo, " max ", hi, " for dimension 0");
  if (lo == hi) {
    lo -= 0.5;
    hi += 0.5;
  }
  at::native::resize_output(hist, {bins});
  at::linspace_out(bin_edges, lo, hi, bins + 1);
  launch_histogram("aten::histogram", self, weight, bin_edges, VNC_BINS_LINEAR_SEARCH, hist);
  if (density) apply_density(hist, bin_edges);
  return {hist, bin_edges};
}

std::tuple<at::Tensor, at::Tensor> histogram_ct(const at::Tensor& self, int64_t bins,
                                                std::optional<at::ArrayRef<double>> range,
                                                const std::optional<at::Tensor>& weight, bool density) {
  at::Tensor hist = at::empty({0}, self.options()), edges = at::empty({0}, self.options());
  histogram_ct_out(self, bins, range, weight, density, hist, edges);
  return {hist, edges};
}


// The legacy norm.ScalarOpt_dim(_dtype) overloads (norm_except_dim, weight norm and older
// code call them): linalg_vector_norm, as ATen implements them.
void check_norm_dtypes(const at::Tensor& self, std::optional<at::ScalarType> dtype) {  // ATen's norm meta checks
  TORCH_CHECK(at::isFloatingType(self.scalar_type()) || at::isComplexType(self.scalar_type()),
              "norm(): input dtype should be either floating point or complex. Got ", self.scalar_type(), " instead.");
  TORCH_CHECK(!dtype || at::isFloatingType(*dtype) || at::isComplexType(*dtype),
              "norm(): the desired output dtype should be either floating point or complex. Got ", *dtype, " instead.");
}
at::Tensor& norm_dim_out(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                         std::optional<at::ScalarType> dtype, at::Tensor& out) {
  check_norm_dtypes(self, dtype);
  return at::linalg_vector_norm_out(out, self, p.value_or(2.0), dim, keepdim, dtype);
}
at::Tensor& norm_out(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                     at::Tensor& out) {
  return norm_dim_out(self, p, dim, keepdim, std::nullopt, out);
}
at::Tensor& norm_dtype_out(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim,
                           bool keepdim, at::ScalarType dtype, at::Tensor& out) {
  return norm_dim_out(self, p, dim, keepdim, dtype, out);
}
at::Tensor norm_dim(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim, bool keepdim) {
  check_norm_dtypes(self, std::nullopt);
  return at::linalg_vector_norm(self, p.value_or(2.0), dim, keepdim, std::nullopt);
}
at::Tensor norm_dim_dtype(const at::Tensor& self, const std::optional<at::Scalar>& p, at::IntArrayRef dim, bool keepdim,
                          at::ScalarType dtype) {
  check_norm_dtypes(self, dtype);
  return at::linalg_vector_norm(self, p.value_or(2.0), dim, keepdim, dtype);
}

}  // namespace

// The geometry eager builds for a reduction of `self` into `out` (meta tensors will do): the
// compiler hands the same geometry to vnc_reduce, so compiled sums follow eager's order.
// `sum_like`: sum/mean/prod (read dtype as SumLike), else the input's dtype (amax/amin).
// Returns false when eager would first cast the input (the compiler then does not lower it).
bool reduction_geometry(bool sum_like, const at::Tensor& self, const at::Tensor& out, at::IntArrayRef dims,
                        bool keepdim, vnc_iter* it) {
  const at::ScalarType read = sum_like ? SumLike<VNC_RED_SUM>::read_dtype(self, out) : self.scalar_type();
  if (read != self.scalar_type() || self.is_complex() || out.is_complex()) return false;
  auto iter = at::meta::make_reduction(self, out, dims, keepdim, read);
  *it = iter_geometry(iter);
  return true;
}

// CPU's reduction kernels write an expanded out= tensor without refusing it (structured.h);
// mean.out refuses it (its division in place is a TensorIterator).
NEURON_WRITES_OVERLAPPING(structured_sum_dim_IntList)
NEURON_WRITES_OVERLAPPING(structured_prod_dim_int)
NEURON_WRITES_OVERLAPPING(structured_amax)
NEURON_WRITES_OVERLAPPING(structured_amin)
NEURON_WRITES_OVERLAPPING(structured_argmax)
NEURON_WRITES_OVERLAPPING(structured_argmin)
NEURON_WRITES_OVERLAPPING(structured_linalg_vector_norm)
NEURON_WRITES_OVERLAPPING(structured_any_dim)
NEURON_WRITES_OVERLAPPING(structured_any_dims)
NEURON_WRITES_OVERLAPPING(structured_all_dim)
NEURON_WRITES_OVERLAPPING(structured_all_dims)
// CPU's reduction kernels compute an out= tensor partially overlapping their input (structured.h).
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_sum_dim_IntList)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_mean_dim)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_prod_dim_int)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_amax)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_amin)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_argmax)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_argmin)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_linalg_vector_norm)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_any_dim)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_any_dims)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_all_dim)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_all_dims)

#define REG2(FN, OUT, META, IMPL, ...)                                                        \
  m.impl(FN, TORCH_FN((Variants<at::meta::META, ##__VA_ARGS__>::functional<IMPL>)));         \
  m.impl(OUT, TORCH_FN((Variants<at::meta::META, ##__VA_ARGS__>::out<IMPL>)));

using OptDims = at::OptionalIntArrayRef;
using OptType = std::optional<at::ScalarType>;
using S = const at::Scalar&;

NEURON_LIBRARY_IMPL(m) {
  m.impl("var_mean.correction", TORCH_FN(var_mean<false>));
  m.impl("var_mean.correction_out", TORCH_FN(var_mean_out<false>));
  m.impl("std_mean.correction", TORCH_FN(var_mean<true>));
  m.impl("std_mean.correction_out", TORCH_FN(var_mean_out<true>));

  m.impl("equal", TORCH_FN(nx_equal));
  m.impl("prod", TORCH_FN(nx_prod));
  m.impl("trace", TORCH_FN(nx_trace));
  REG2("sum.dim_IntList", "sum.IntList_out", structured_sum_dim_IntList, SumLike<VNC_RED_SUM>, OptDims, bool, OptType)
  REG2("mean.dim", "mean.out", structured_mean_dim, SumLike<VNC_RED_MEAN>, OptDims, bool, OptType)
  REG2("prod.dim_int", "prod.int_out", structured_prod_dim_int, SumLike<VNC_RED_PROD>, int64_t, bool, OptType)
  REG2("amax", "amax.out", structured_amax, Extreme<VNC_RED_AMAX>, at::IntArrayRef, bool)
  REG2("amin", "amin.out", structured_amin, Extreme<VNC_RED_AMIN>, at::IntArrayRef, bool)
  REG2("argmax", "argmax.out", structured_argmax, Arg<VNC_RED_ARGMAX>, std::optional<int64_t>, bool)
  REG2("argmin", "argmin.out", structured_argmin, Arg<VNC_RED_ARGMIN>, std::optional<int64_t>, bool)
  REG2("linalg_vector_norm", "linalg_vector_norm.out", structured_linalg_vector_norm, VectorNorm, S, OptDims, bool, OptType)
  m.impl("norm.ScalarOpt_dim", TORCH_FN(norm_dim));
  m.impl("norm.ScalarOpt_dim_dtype", TORCH_FN(norm_dim_dtype));
  m.impl("norm.out", TORCH_FN(norm_out));
  m.impl("norm.dtype_out", TORCH_FN(norm_dtype_out));
  REG2("any.dim", "any.out", structured_any_dim, AnyAll<VNC_RED_ANY>, int64_t, bool)
  REG2("any.dims", "any.dims_out", structured_any_dims, AnyAll<VNC_RED_ANY>, OptDims, bool)
  REG2("all.dim", "all.out", structured_all_dim, AnyAll<VNC_RED_ALL>, int64_t, bool)
  REG2("all.dims", "all.dims_out", structured_all_dims, AnyAll<VNC_RED_ALL>, OptDims, bool)
  m.impl("max.dim", TORCH_FN((extreme_dim<at::meta::structured_max_dim, VNC_RED_MAX_INDEX>)));
  m.impl("max.dim_max", TORCH_FN((extreme_dim_out<at::meta::structured_max_dim, VNC_RED_MAX_INDEX>)));
  m.impl("min.dim", TORCH_FN((extreme_dim<at::meta::structured_min_dim, VNC_RED_MIN_INDEX>)));
  m.impl("min.dim_min", TORCH_FN((extreme_dim_out<at::meta::structured_min_dim, VNC_RED_MIN_INDEX>)));
  m.impl("max", TORCH_FN(extreme_all<VNC_RED_AMAX>));
  m.impl("min", TORCH_FN(extreme_all<VNC_RED_AMIN>));
  m.impl("any", TORCH_FN(any_all<VNC_RED_ANY>));
  m.impl("any.all_out", TORCH_FN(any_all_out<VNC_RED_ANY>));
  m.impl("all", TORCH_FN(any_all<VNC_RED_ALL>));
  m.impl("all.all_out", TORCH_FN(any_all_out<VNC_RED_ALL>));
  m.impl("histc", TORCH_FN(histc));
  m.impl("histc.out", TORCH_FN(histc_out));
  // CPU's histogram (histogramdd) is float32/float64 only; histc also takes 16-bit floats.
  m.impl("histogram.bins_tensor", TORCH_FN(histogram_bins), kF32F64Dtypes);
  m.impl("histogram.bins_tensor_out", TORCH_FN(histogram_bins_out), kF32F64Dtypes);
  m.impl("histogram.bin_ct", TORCH_FN(histogram_ct), kF32F64Dtypes);
  m.impl("histogram.bin_ct_out", TORCH_FN(histogram_ct_out), kF32F64Dtypes);
  m.impl("var.correction", TORCH_FN(var<false>));
  m.impl("var.correction_out", TORCH_FN(var_out<false>));
  m.impl("std.correction", TORCH_FN(var<true>));
  m.impl("std.correction_out", TORCH_FN(var_out<true>));
}

}  // namespace torch_neuronx
