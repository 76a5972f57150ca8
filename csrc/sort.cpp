// Sorting, scans and sampling on the neuron key: sort, topk, median/nanmedian/kthvalue, isin,
// cumsum/cumprod/cummax/cummin, logcumsumexp, logsumexp, searchsorted, multinomial, randperm,
// flip, roll. ATen's meta functions (where the op is structured) check arguments and size
// outputs; the runtime's vnc/sort.h and vnc/scan.h kernels compute, reading and writing
// tensors at their own strides.
#include "neuron.h"
#include "gate.h"
#include "structured.h"

#include <ATen/ScalarOps.h>
#include <ATen/WrapDimUtilsMulti.h>
#include <ATen/native/BucketizationUtils.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/cumprod_meta.h>
#include <ATen/ops/cumsum_meta.h>
#include <ATen/ops/isin_meta.h>
#include <ATen/ops/sort_meta.h>
#include <ATen/ops/topk_meta.h>
#include <torch/library.h>

namespace torch_neuronx {
namespace {

int32_t wrap(int64_t dim, const at::Tensor& t) { return static_cast<int32_t>(at::maybe_wrap_dim(dim, t.dim())); }

// ---------------------------------------------------------------- sort / topk

std::tuple<at::Tensor&, at::Tensor&> sort_out(const at::Tensor& self, std::optional<bool> stable, int64_t dim,
                                              bool descending, at::Tensor& values, at::Tensor& indices) {
  Structured<at::meta::structured_sort_stable, 2> op(Mode::Out, {values, indices});
  op.reads = {self};
  op.meta(self, stable, dim, descending);
  TORCH_CHECK(!self.is_complex(), "Sort does not support complex dtypes on neuron");
  check_same_device("aten::sort", self, {&values, &indices});
  record_native("aten::sort");
  if (self.scalar_type() == at::kDouble) warn_float64("aten::sort");
  // Always stable: a stable order is also a valid answer to stable=False.
  vnc_tensor x = to_vnc(self), v = to_vnc(op.maybe_get_output(0)), i = to_vnc(op.maybe_get_output(1));
  c10::DeviceGuard g(self.device());
  check(vnc_sort(stream_of(self), "aten::sort", &x, wrap(dim, self), descending, &v, &i));
  op.finish();
  return {values, indices};
}

std::tuple<at::Tensor, at::Tensor> sort(const at::Tensor& self, std::optional<bool> stable, int64_t dim, bool descending) {
  at::Tensor values = at::empty({0}, self.options()), indices = at::empty({0}, self.options().dtype(at::kLong));
  sort_out(self, stable, dim, descending, values, indices);
  return {values, indices};
}

std::tuple<at::Tensor&, at::Tensor&> topk_out(const at::Tensor& self, int64_t k, int64_t dim, bool largest, bool sorted,
                                              at::Tensor& values, at::Tensor& indices) {
  Structured<at::meta::structured_topk, 2> op(Mode::Out, {values, indices});
  op.reads = {self};
  op.meta(self, k, dim, largest, sorted);
  TORCH_CHECK(self.scalar_type() != at::kBool, "topk does not support bool dtypes on neuron");
  TORCH_CHECK(!self.is_complex(), "topk does not support complex dtypes on neuron");
  check_same_device("aten::topk", self, {&values, &indices});
  record_native("aten::topk");
  if (self.scalar_type() == at::kDouble) warn_float64("aten::topk");
  c10::DeviceGuard g(self.device());
  if (self.dim() == 0) {  // ATen: a 0-dim input is its own top element, for k = 0 as for k = 1
    op.maybe_get_output(0).copy_(self);
    op.maybe_get_output(1).zero_();
    op.finish();
    return {values, indices};
  }
  // Always sorted, ties in original order: one of the answers sorted=False allows.
  vnc_tensor x = to_vnc(self), v = to_vnc(op.maybe_get_output(0)), i = to_vnc(op.maybe_get_output(1));
  check(vnc_topk(stream_of(self), "aten::topk", &x, wrap(dim, self), k, largest, &v, &i));
  op.finish();
  return {values, indices};
}

std::tuple<at::Tensor, at::Tensor> topk(const at::Tensor& self, int64_t k, int64_t dim, bool largest, bool sorted) {
  at::Tensor values = at::empty({0}, self.options()), indices = at::empty({0}, self.options().dtype(at::kLong));
  topk_out(self, k, dim, largest, sorted, values, indices);
  return {values, indices};
}

// ---------------------------------------------------------------- scans

// As ATen: the input is first cast to the result dtype, then scanned in that dtype's
// accumulation type. Complex goes through the visible CPU fallback.
void launch_scan(const char* name, vnc_scan_op kind, const at::Tensor& self, int64_t dim, const at::Tensor& out) {
  // Complex scans, and bool results (cumsum_ of a bool tensor, which CPU refuses when it has
  // elements), go to the CPU fallback.
  NEURON_CHECK_SUPPORTED(!self.is_complex() && !out.is_complex() && out.scalar_type() != at::kBool, name, " with a ",
                         out.scalar_type(), " result is not natively supported on neuron");
  check_same_device(name, self, {&out});
  record_native(name);
  if (out.scalar_type() == at::kDouble) warn_float64(name);
  at::Tensor x = self.scalar_type() == out.scalar_type() ? self : self.to(out.scalar_type());
  vnc_tensor xv = to_vnc(x), ov = to_vnc(out);
  c10::DeviceGuard g(out.device());
  check(vnc_scan(stream_of(out), name, kind, &xv, wrap(dim, self), &ov));
}

template <vnc_scan_op KIND>
struct Scan {
  template <class M>
  static void run(M&, const at::Tensor& self, int64_t dim, std::optional<at::ScalarType> dtype, const at::Tensor& out) {
    if (KIND == VNC_SCAN_SUM) launch_scan("aten::cumsum", KIND, self, dim, out);
    else launch_scan("aten::cumprod", KIND, self, dim, out);
  }
};

// cummax / cummin: ATen's composite sizes the outputs and handles 0-dim inputs; the helper
// fills them along `dim`.
template <bool MAX>
void cum_extreme_helper(const at::Tensor& self, at::Tensor& values, at::Tensor& indices, int64_t dim) {
  const char* name = MAX ? "aten::_cummax_helper" : "aten::_cummin_helper";
  check_same_device(name, self, {&values, &indices});
  if (out_overlaps(values, {self}, false) || out_overlaps(indices, {self}, false)) {  // computed apart
    at::Tensor v = at::empty_like(values), i = at::empty_like(indices);
    cum_extreme_helper<MAX>(self, v, i, dim);
    values.copy_(v);
    indices.copy_(i);
    return;
  }
  record_native(name);
  if (self.scalar_type() == at::kDouble) warn_float64(name);
  vnc_tensor x = to_vnc(self), v = to_vnc(values), i = to_vnc(indices);
  c10::DeviceGuard g(self.device());
  check(vnc_cum_extreme(stream_of(self), name, &x, wrap(dim, self), MAX, &v, &i));
}

at::Tensor& logcumsumexp_out(const at::Tensor& self, int64_t dim, at::Tensor& out) {
  TORCH_CHECK_NOT_IMPLEMENTED(at::isFloatingType(self.scalar_type()) || self.is_complex(),
                              "\"logcumsumexp_out_neuron\" not implemented for '", self.scalar_type(), "'");
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "expected out to have dtype ", self.scalar_type(), ", got ",
              out.scalar_type());
  at::maybe_wrap_dim(dim, self.dim());  // a bad dim is an IndexError even for an empty self
  resize_out(out, self.sizes());
  if (self.numel() == 0) return out;
  if (out_overlaps(out, {self}, true)) {  // a full overlap (out is self): computed apart
    out.copy_(logcumsumexp(self, dim));
    return out;
  }
  launch_scan("aten::_logcumsumexp", VNC_SCAN_LOGSUMEXP, self, dim, out);
  return out;
}

at::Tensor logcumsumexp(const at::Tensor& self, int64_t dim) {
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Contiguous);
  return logcumsumexp_out(self, dim, out);
}

// logsumexp over `dims` (all when empty): the kept dims are moved to the front and the
// reduced ones flattened into rows of the runtime's [rows, n] kernel.
at::Tensor& logsumexp_out(const at::Tensor& self, at::IntArrayRef dims, bool keepdim, at::Tensor& out) {
  NEURON_CHECK_SUPPORTED(!self.is_complex(), "logsumexp of complex tensors is not natively supported on neuron");
  if (at::isIntegralType(self.scalar_type(), true))
    return logsumexp_out(self.to(c10::typeMetaToScalarType(c10::get_default_dtype())), dims, keepdim, out);
  TORCH_CHECK(out.scalar_type() == self.scalar_type(), "logsumexp(): Expected out tensor to have dtype ",
              self.scalar_type(), ", but got ", out.scalar_type(), " instead");
  check_same_device("aten::logsumexp", self, {&out});
  const int64_t nd = self.dim();
  std::bitset<at::dim_bitset_size> reduce = at::dim_list_to_bitset(dims, nd);
  if (dims.empty()) reduce.set();
  at::DimVector order, shape;
  int64_t rows = 1;
  for (int64_t d = 0; d < nd; d++)
    if (!reduce[d]) {
      order.push_back(d);
      rows *= self.size(d);
      shape.push_back(self.size(d));
    } else if (keepdim) {
      shape.push_back(1);
    }
  for (int64_t d = 0; d < nd; d++)
    if (reduce[d]) order.push_back(d);
  at::native::resize_output(out, shape);
  record_native("aten::logsumexp");
  if (self.scalar_type() == at::kDouble) warn_float64("aten::logsumexp");
  if (rows == 0) return out;
  at::Tensor x = (nd ? self.permute(order) : self).reshape({rows, rows ? self.numel() / rows : 0});
  const bool direct = out.is_contiguous() && !out_overlaps(out, {self}, false);
  at::Tensor o = direct ? out.view({rows}) : at::empty({rows}, out.options());
  vnc_tensor xv = to_vnc(x), ov = to_vnc(o);
  c10::DeviceGuard g(out.device());
  check(vnc_logsumexp(stream_of(out), "aten::logsumexp", &xv, &ov));
  if (!direct) out.copy_(o.view(shape));
  return out;
}

at::Tensor logsumexp(const at::Tensor& self, at::IntArrayRef dims, bool keepdim) {
  auto dt = at::isIntegralType(self.scalar_type(), true) ? c10::typeMetaToScalarType(c10::get_default_dtype())
                                                         : self.scalar_type();
  at::Tensor out = at::empty({0}, self.options().dtype(dt));
  return logsumexp_out(self, dims, keepdim, out);
}

// ---------------------------------------------------------------- searchsorted

at::Tensor& searchsorted_out(const at::Tensor& sorted, const at::Tensor& self, bool out_int32, bool right,
                             std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter_opt,
                             at::Tensor& result) {
  const at::Tensor sorter = sorter_opt && sorter_opt->defined() ? *sorter_opt : at::Tensor();
  at::native::searchsorted_pre_check(sorted, self, result, out_int32, right, side, at::Tensor());
  const at::ScalarType common = at::result_type(sorted, self);
  NEURON_CHECK_SUPPORTED(common != at::kBool && !at::isComplexType(common), "searchsorted of ", common,
                         " tensors is not natively supported on neuron");
  if (sorter.defined()) {  // ATen's sorter checks, with reductions that run natively
    TORCH_CHECK(sorter.device() == sorted.device(), "torch.searchsorted(): sorter and boundary tensors should have same device type, but got sorter tensor device type ",
                sorter.device(), " and input value tensor device type ", sorted.device());
    TORCH_CHECK(sorter.sizes() == sorted.sizes(), "torch.searchsorted(): boundary and sorter must have the same size, but got boundary tensor ",
                sorted.sizes(), "and got sorter tensor ", sorter.sizes());
    TORCH_CHECK(sorter.scalar_type() == at::kLong, "torch.searchsorted(): sorter must be a tensor of long dtype but got dtype ",
                sorter.scalar_type());
    if (sorter.numel() > 0) {
      int64_t lo = sorter.amin().item<int64_t>(), hi = sorter.amax().item<int64_t>();
      TORCH_CHECK(lo >= 0 && hi < sorter.sizes().back(), "torch.searchsorted(): sorter index out of range");
    }
  }
  check_same_device("aten::searchsorted", sorted, {&self, &result});
  resize_out(result, self.sizes());
  if (self.numel() == 0) return result;
  // CPU's kernel copies non-contiguous operands and says so once per program (ATen's
  // BucketizationUtils.h); this kernel reads strides, but a script should see the same warnings.
#define NEURON_WARN_NONCONTIGUOUS(t, what)                                                                  \
  do {                                                                                                      \
    if (t.defined() && !t.is_contiguous()) {                                                                \
      TORCH_WARN_ONCE("torch.searchsorted(): " what " tensor is non-contiguous, this will lower the performance " \
                      "due to extra data copy when converting non-contiguous tensor to contiguous, please use "   \
                      "contiguous " what " tensor if possible. This message will only appear once per program."); \
    }                                                                                                       \
  } while (0)
  NEURON_WARN_NONCONTIGUOUS(self, "input value");
  NEURON_WARN_NONCONTIGUOUS(sorted, "boundary");
  NEURON_WARN_NONCONTIGUOUS(sorter, "sorter");
#undef NEURON_WARN_NONCONTIGUOUS
  record_native("aten::searchsorted");
  if (common == at::kDouble) warn_float64("aten::searchsorted");
  at::Tensor bd = sorted.scalar_type() == common ? sorted : sorted.to(common);
  at::Tensor in = self.scalar_type() == common ? self : self.to(common);
  bool is_right = right || (side && *side == "right");
  vnc_tensor b = to_vnc(bd), v = to_vnc(in), o = to_vnc(result), so = sorter.defined() ? to_vnc(sorter) : vnc_tensor{};
  c10::DeviceGuard g(result.device());
  check(vnc_searchsorted(stream_of(result), "aten::searchsorted", &b, &v, sorter.defined() ? &so : nullptr, is_right, &o));
  return result;
}

at::Tensor searchsorted_tensor(const at::Tensor& sorted, const at::Tensor& self, bool out_int32, bool right,
                        std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  at::Tensor result = at::empty({0}, self.options().dtype(out_int32 ? at::kInt : at::kLong), at::MemoryFormat::Contiguous);
  return searchsorted_out(sorted, self, out_int32, right, side, sorter, result);
}

at::Tensor& searchsorted_scalar_out(const at::Tensor& sorted, const at::Scalar& self, bool out_int32, bool right,
                                    std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter,
                                    at::Tensor& result) {
  return searchsorted_out(sorted, at::native::searchsorted_scalar_tensor(self, sorted.device()), out_int32, right, side,
                          sorter, result);
}

at::Tensor searchsorted_scalar(const at::Tensor& sorted, const at::Scalar& self, bool out_int32, bool right,
                               std::optional<c10::string_view> side, const std::optional<at::Tensor>& sorter) {
  return searchsorted_tensor(sorted, at::native::searchsorted_scalar_tensor(self, sorted.device()), out_int32, right, side, sorter);
}

// ---------------------------------------------------------------- multinomial / randperm

at::Tensor& multinomial_out(const at::Tensor& self, int64_t n_sample, bool replacement, std::optional<at::Generator> gen,
                            at::Tensor& result) {
  TORCH_CHECK(result.device() == self.device(), "multinomial arguments must have the same device");
  TORCH_CHECK(self.dim() > 0 && self.dim() <= 2, "prob_dist must be 1 or 2 dim");
  TORCH_CHECK(at::isFloatingType(self.scalar_type()), "multinomial only supports floating-point dtypes for input, got: ",
              self.scalar_type());
  TORCH_CHECK(result.scalar_type() == at::kLong, "multinomial expects Long tensor out, got: ", result.scalar_type());
  TORCH_CHECK(n_sample > 0, "cannot sample n_sample <= 0 samples");
  const int64_t n_categories = self.size(-1);
  TORCH_CHECK(replacement || n_sample <= n_categories, "cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  TORCH_CHECK(n_categories <= (int64_t{1} << 24), "number of categories cannot exceed 2^24");
  if (self.dim() == 1) resize_out(result, {n_sample});
  else resize_out(result, {self.size(0), n_sample});
  if (result.numel() == 0) return result;
  TORCH_CHECK(n_categories > 0, "invalid multinomial distribution (sum of probabilities <= 0)");
  record_native("aten::multinomial");
  if (self.scalar_type() == at::kDouble) warn_float64("aten::multinomial");
  const int64_t rows = self.dim() == 1 ? 1 : self.size(0);
  c10::DeviceGuard g(self.device());
  auto [seed, offset] = philox_reserve(gen, self.device(), rows * (replacement ? n_sample : n_categories));
  vnc_tensor p = to_vnc(self), o = to_vnc(result);
  // ATen validates up front (one message set) unless it samples several draws with replacement.
  const int checked = !replacement || n_sample == 1;
  check(vnc_multinomial(stream_of(self), "aten::multinomial", &p, n_sample, replacement, checked, &o, seed, offset));
  return result;
}

at::Tensor multinomial(const at::Tensor& self, int64_t n_sample, bool replacement, std::optional<at::Generator> gen) {
  at::Tensor result = at::empty({0}, self.options().dtype(at::kLong));
  return multinomial_out(self, n_sample, replacement, std::move(gen), result);
}

at::Tensor& randperm_out(int64_t n, std::optional<at::Generator> gen, at::Tensor& result) {
  TORCH_CHECK(n >= 0, "n must be non-negative, got", n);
  TORCH_CHECK_NOT_IMPLEMENTED(result.scalar_type() != at::kBool && !result.is_complex(),
                              "\"randperm\" not implemented for '", result.scalar_type(), "'");
  at::native::check_supported_max_int_with_precision(n, result);
  at::native::resize_output(result, {n});
  record_native("aten::randperm");
  if (n == 0) return result;
  c10::DeviceGuard g(result.device());
  auto [seed, offset] = philox_reserve(gen, result.device(), n);
  vnc_tensor o = to_vnc(result);
  check(vnc_randperm(stream_of(result), "aten::randperm", &o, seed, offset));
  return result;
}

// ---------------------------------------------------------------- flip / roll

// flip: one strided copy from a view of self that starts at the last element of every
// flipped dim and walks it with negated strides.
at::Tensor flip_dims(const at::Tensor& self, at::IntArrayRef dims) {
  const int64_t nd = std::max<int64_t>(self.dim(), 1);
  std::bitset<at::dim_bitset_size> flipped = at::dim_list_to_bitset(dims, nd);
  at::Tensor out = at::empty_like(self, at::MemoryFormat::Preserve);
  record_native("aten::flip");
  if (self.numel() == 0) return out;
  vnc_tensor src = to_vnc(self), dst = to_vnc(out);
  const int64_t es = static_cast<int64_t>(self.element_size());
  for (int64_t d = 0; d < self.dim(); d++)
    if (flipped[d]) {
      src.data = static_cast<char*>(src.data) + (src.sizes[d] - 1) * src.strides[d] * es;
      src.strides[d] = -src.strides[d];
    }
  c10::DeviceGuard g(out.device());
  check(vnc_copy(stream_of(out), "aten::flip", &dst, &src));
  return out;
}

// roll along one dim: two slice copies; several dims roll one after another (as ATen).
at::Tensor roll_dims(const at::Tensor& self, at::IntArrayRef shifts, at::IntArrayRef dims) {
  TORCH_CHECK(!shifts.empty(), "`shifts` required");
  if (dims.empty() && shifts.size() == 1) {
    const int64_t zero = 0;
    return roll_dims(self.contiguous().view(self.numel()), shifts, at::IntArrayRef(&zero, 1)).view(self.sizes());
  }
  TORCH_CHECK(shifts.size() == dims.size(), "shifts and dimensions must align. shifts: ", shifts.size(), ", dims:", dims.size());
  if (dims.size() > 1) return roll_dims(roll_dims(self, shifts.slice(0, 1), dims.slice(0, 1)), shifts.slice(1), dims.slice(1));
  const int64_t d = at::maybe_wrap_dim(dims[0], self.dim(), /*wrap_scalar=*/false);  // a 0-dim self: IndexError
  record_native("aten::roll");
  if (self.numel() == 0) return self.clone(at::MemoryFormat::Preserve);
  const int64_t n = self.size(d);
  const int64_t s = ((shifts[0] % n) + n) % n;
  // CPU's roll is cat(self[n-s:], self[:n-s]) along d: the pieces' layout (contiguous or
  // channels_last), contiguous when a piece is empty (no shift)
  at::Tensor out = at::empty_like(self, s == 0 ? at::MemoryFormat::Contiguous : self.suggest_memory_format());
  if (s == 0) return out.copy_(self);
  out.narrow(d, s, n - s).copy_(self.narrow(d, 0, n - s));
  out.narrow(d, 0, s).copy_(self.narrow(d, n - s, s));
  return out;
}

// Order statistics of each line along `dim` from its stable sort (NaN sorts last): the element
// at a per-line position, with the index it came from.
//   median:    the lower median, (n-1)/2; a line holding NaN gives NaN and its first NaN's
//              index (the first NaN of the sorted line), as on CPU.
//   nanmedian: the lower median of the non-NaN values, (count-1)/2; an all-NaN line gives its
//              first NaN (position 0), as CPU's (count-1)/2 truncated toward zero.
//   kthvalue:  the k-th smallest (position k-1; NaN counts as the largest value).
enum class OrderStat { Median, NanMedian, Kth };

std::tuple<at::Tensor, at::Tensor> order_statistic(const at::Tensor& self, int64_t dim, bool keepdim, OrderStat kind,
                                                   int64_t k = 0) {
  const char* name = kind == OrderStat::Median ? "median" : kind == OrderStat::NanMedian ? "nanmedian" : "kthvalue";
  // CPU has no bool or complex kernels for these: the fallback raises its error.
  NEURON_CHECK_SUPPORTED(self.scalar_type() != at::kBool && !self.is_complex(), name, " of ", self.scalar_type(),
                         " tensors is not natively supported on neuron");
  record_native(kind == OrderStat::Median ? "aten::median" : kind == OrderStat::NanMedian ? "aten::nanmedian" : "aten::kthvalue");
  dim = at::maybe_wrap_dim(dim, std::max<int64_t>(self.dim(), 1));
  const at::Tensor s = self.dim() ? self : self.view({1});
  const int64_t n = s.size(dim);
  TORCH_CHECK_INDEX(n > 0, kind == OrderStat::Kth ? "kthvalue" : "median", "(): Expected reduction dim ", dim,
                    " to have non-zero size.");
  TORCH_CHECK(kind != OrderStat::Kth || (k >= 1 && k <= n), name, "(): selected number k out of range for dimension ", dim);
  auto [sorted, order] = at::sort(s, /*stable=*/true, dim, false);
  at::DimVector one(s.sizes().begin(), s.sizes().end());
  one[dim] = 1;
  at::Tensor pos = at::full(one, kind == OrderStat::Kth ? k - 1 : (n - 1) / 2, s.options().dtype(at::kLong));
  if (kind != OrderStat::Kth && at::isFloatingType(s.scalar_type())) {
    const at::Tensor not_nan = at::logical_not(at::isnan(s)).sum(dim, /*keepdim=*/true);
    pos = kind == OrderStat::Median ? at::where(not_nan < n, not_nan, pos)
                                    : at::floor_divide(at::clamp_min(not_nan - 1, 0), 2);
  }
  at::Tensor values = sorted.gather(dim, pos), indices = order.gather(dim, pos);
  if (!keepdim || self.dim() == 0) {
    values = values.squeeze(dim);  // a 0-dim input was read as one element: back to 0-dim
    indices = indices.squeeze(dim);
  }
  return {values, indices};
}

std::tuple<at::Tensor, at::Tensor> median_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return order_statistic(self, dim, keepdim, OrderStat::Median);
}

std::tuple<at::Tensor, at::Tensor> nanmedian_dim(const at::Tensor& self, int64_t dim, bool keepdim) {
  return order_statistic(self, dim, keepdim, OrderStat::NanMedian);
}

std::tuple<at::Tensor, at::Tensor> kthvalue_dim(const at::Tensor& self, int64_t k, int64_t dim, bool keepdim) {
  return order_statistic(self, dim, keepdim, OrderStat::Kth, k);
}

// The out= forms: ATen's resize rules, then a copy of the functional result.
std::tuple<at::Tensor&, at::Tensor&> into_outs(const char* name, std::tuple<at::Tensor, at::Tensor> r,
                                               at::Tensor& values, at::Tensor& indices) {
  const auto& [v, i] = r;
  TORCH_CHECK(values.scalar_type() == v.scalar_type(), "Expected out tensor to have dtype ", v.scalar_type(),
              ", but got ", values.scalar_type(), " instead");
  TORCH_CHECK(indices.scalar_type() == at::kLong, "Expected out tensor to have dtype Long, but got ",
              indices.scalar_type(), " instead");
  check_same_device(name, v, {&values, &indices});
  at::native::resize_output(values, v.sizes());
  at::native::resize_output(indices, i.sizes());
  values.copy_(v);
  indices.copy_(i);
  return {values, indices};
}

std::tuple<at::Tensor&, at::Tensor&> kthvalue_out(const at::Tensor& self, int64_t k, int64_t dim, bool keepdim,
                                                  at::Tensor& values, at::Tensor& indices) {
  at::assert_no_overlap(self, values);  // CPU's refusals; the result is computed apart anyway
  out_overlaps(indices, {self}, true);
  return into_outs("aten::kthvalue", kthvalue_dim(self, k, dim, keepdim), values, indices);
}

std::tuple<at::Tensor&, at::Tensor&> nanmedian_dim_out(const at::Tensor& self, int64_t dim, bool keepdim,
                                                       at::Tensor& values, at::Tensor& indices) {
  at::assert_no_overlap(values, self);  // CPU's refusal; the result is computed apart anyway
  return into_outs("aten::nanmedian", nanmedian_dim(self, dim, keepdim), values, indices);
}

// median / nanmedian of all elements (an empty input gives NaN, as on CPU).
template <OrderStat KIND>
at::Tensor median_all(const at::Tensor& self) {
  if (self.numel() == 0) {
    record_native(KIND == OrderStat::Median ? "aten::median" : "aten::nanmedian");
    return at::full({}, std::numeric_limits<double>::quiet_NaN(), self.options());
  }
  return std::get<0>(order_statistic(self.reshape({-1}), 0, false, KIND));
}

// ---------------------------------------------------------------- isin

// isin as ATen computes it: both sides in their common dtype; few test elements (ATen's
// threshold, 10 * numel^0.145) compare by broadcasting, else each element is looked up by
// binary search in the sorted test elements. NaN matches nothing; -0.0 matches 0.0.
void isin_into(const at::Tensor& elements, const at::Tensor& test, bool invert, const at::Tensor& out) {
  check_same_device("aten::isin", elements, {&test, &out});
  record_native("aten::isin");
  if (elements.numel() == 0) return;
  const at::ScalarType common = at::result_type(elements, test);
  if (common == at::kDouble) warn_float64("aten::isin");
  const at::Tensor e = elements.to(common), t = test.to(common).reshape({-1});
  at::Tensor hit;
  if (static_cast<double>(t.numel()) < 10.0 * std::pow(static_cast<double>(e.numel()), 0.145)) {
    hit = at::eq(e.unsqueeze(-1), t).any(-1);
  } else {
    const at::Tensor sorted = std::get<0>(at::sort(t, /*stable=*/true, 0, false));
    const at::Tensor flat = e.reshape({-1});
    const at::Tensor pos = at::searchsorted(sorted, flat).clamp_max_(t.numel() - 1);
    hit = at::eq(sorted.index_select(0, pos), flat).view(e.sizes());
  }
  out.copy_(invert ? at::logical_not(hit) : hit);
}

struct IsinTensor {
  template <class M>
  static void run(M&, const at::Tensor& elements, const at::Tensor& test, bool, bool invert, const at::Tensor& out) {
    isin_into(elements, test, invert, out);
  }
};
struct IsinScalar {  // one test element: an (in)equality, as ATen
  template <class M>
  static void run(M&, const at::Tensor& elements, const at::Scalar& test, bool, bool invert, const at::Tensor& out) {
    record_native("aten::isin");
    if (invert) at::ne_out(const_cast<at::Tensor&>(out), elements, test);
    else at::eq_out(const_cast<at::Tensor&>(out), elements, test);
  }
};

// A scalar element: the tensor overload on the scalar wrapped as a number (ATen's composition).
at::Tensor& isin_scalar_tensor_out(const at::Scalar& element, const at::Tensor& test, bool assume_unique, bool invert,
                                   at::Tensor& out) {
  return at::isin_out(out, at::native::wrapped_scalar_tensor(element, test.device()), test, assume_unique, invert);
}

at::Tensor isin_scalar_tensor(const at::Scalar& element, const at::Tensor& test, bool assume_unique, bool invert) {
  return at::isin(at::native::wrapped_scalar_tensor(element, test.device()), test, assume_unique, invert);
}

// unique (torch.unique without dim): a stable sort, then the first element of each run of
// equal values (NaNs are all distinct, as on CPU); inverse indices scatter each run's number
// back through the sort permutation; counts are the run lengths. Values come out sorted
// whatever `sorted` says (PyTorch allows any order when sorted=False).
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool, bool return_inverse,
                                                       bool return_counts) {
  NEURON_CHECK_SUPPORTED(!self.is_complex(), "unique of complex tensors is not natively supported on neuron");
  record_native("aten::_unique2");
  const at::Tensor flat = self.reshape({-1});
  const int64_t n = flat.numel();
  const auto long_opts = self.options().dtype(at::kLong);
  at::Tensor inverse = return_inverse ? at::empty(self.sizes(), long_opts) : at::empty({0}, long_opts);
  if (n == 0) return {at::empty({0}, self.options()), inverse, at::empty({0}, long_opts)};
  auto [values, order] = at::sort(flat, /*stable=*/true, 0, false);
  at::Tensor first = at::ones({n}, self.options().dtype(at::kBool));
  first.narrow(0, 1, n - 1).copy_(at::ne(values.narrow(0, 1, n - 1), values.narrow(0, 0, n - 1)));
  at::Tensor uniq = at::masked_select(values, first);
  if (return_inverse) {
    at::Tensor run = at::cumsum(first, 0, at::kLong).sub_(1);
    inverse = at::empty({n}, long_opts).scatter_(0, order, run).view(self.sizes());
  }
  at::Tensor counts = at::empty({0}, long_opts);
  if (return_counts) {
    at::Tensor starts = at::nonzero(first).view({-1});
    at::Tensor ends = at::cat({starts.narrow(0, 1, starts.numel() - 1), at::full({1}, n, long_opts)});
    counts = at::sub(ends, starts);
  }
  return {uniq, inverse, counts};
}

}  // namespace

using OptType = std::optional<at::ScalarType>;

NEURON_LIBRARY_IMPL(m) {
  m.impl("sort.stable", TORCH_FN(sort));
  m.impl("_unique2", TORCH_FN(unique2));
  m.impl("median", TORCH_FN(median_all<OrderStat::Median>));
  m.impl("median.dim", TORCH_FN(median_dim));
  m.impl("nanmedian", TORCH_FN(median_all<OrderStat::NanMedian>));
  m.impl("nanmedian.dim", TORCH_FN(nanmedian_dim));
  m.impl("nanmedian.dim_values", TORCH_FN(nanmedian_dim_out));
  m.impl("kthvalue", TORCH_FN(kthvalue_dim));
  m.impl("kthvalue.values", TORCH_FN(kthvalue_out));
  m.impl("isin.Tensor_Tensor", TORCH_FN((Variants<at::meta::structured_isin_Tensor_Tensor, const at::Tensor&, bool, bool>::functional<IsinTensor>)));
  m.impl("isin.Tensor_Tensor_out", TORCH_FN((Variants<at::meta::structured_isin_Tensor_Tensor, const at::Tensor&, bool, bool>::out<IsinTensor>)));
  m.impl("isin.Tensor_Scalar", TORCH_FN((Variants<at::meta::structured_isin_Tensor_Scalar, const at::Scalar&, bool, bool>::functional<IsinScalar>)));
  m.impl("isin.Tensor_Scalar_out", TORCH_FN((Variants<at::meta::structured_isin_Tensor_Scalar, const at::Scalar&, bool, bool>::out<IsinScalar>)));
  m.impl("isin.Scalar_Tensor", TORCH_FN(isin_scalar_tensor));
  m.impl("isin.Scalar_Tensor_out", TORCH_FN(isin_scalar_tensor_out));
  m.impl("sort.values_stable", TORCH_FN(sort_out));
  m.impl("topk", TORCH_FN(topk));
  m.impl("topk.values", TORCH_FN(topk_out));
  m.impl("cumsum", TORCH_FN((Variants<at::meta::structured_cumsum, int64_t, OptType>::functional<Scan<VNC_SCAN_SUM>>)));
  m.impl("cumsum_", TORCH_FN((Variants<at::meta::structured_cumsum, int64_t, OptType>::inplace<Scan<VNC_SCAN_SUM>>)));
  m.impl("cumsum.out", TORCH_FN((Variants<at::meta::structured_cumsum, int64_t, OptType>::out<Scan<VNC_SCAN_SUM>>)));
  m.impl("cumprod", TORCH_FN((Variants<at::meta::structured_cumprod, int64_t, OptType>::functional<Scan<VNC_SCAN_PROD>>)));
  m.impl("cumprod_", TORCH_FN((Variants<at::meta::structured_cumprod, int64_t, OptType>::inplace<Scan<VNC_SCAN_PROD>>)));
  m.impl("cumprod.out", TORCH_FN((Variants<at::meta::structured_cumprod, int64_t, OptType>::out<Scan<VNC_SCAN_PROD>>)));
  m.impl("_cummax_helper", TORCH_FN(cum_extreme_helper<true>));
  m.impl("_cummin_helper", TORCH_FN(cum_extreme_helper<false>));
  m.impl("_logcumsumexp", TORCH_FN(logcumsumexp));
  m.impl("_logcumsumexp.out", TORCH_FN(logcumsumexp_out));
  m.impl("logsumexp", TORCH_FN(logsumexp));
  m.impl("logsumexp.out", TORCH_FN(logsumexp_out));
  m.impl("searchsorted.Tensor", TORCH_FN(searchsorted_tensor));
  m.impl("searchsorted.Tensor_out", TORCH_FN(searchsorted_out));
  m.impl("searchsorted.Scalar", TORCH_FN(searchsorted_scalar));
  m.impl("searchsorted.Scalar_out", TORCH_FN(searchsorted_scalar_out));
  m.impl("multinomial", TORCH_FN(multinomial));
  m.impl("multinomial.out", TORCH_FN(multinomial_out));
  m.impl("randperm.generator_out", TORCH_FN(randperm_out));
  m.impl("flip", TORCH_FN(flip_dims), kComputedNoComplexHalf);  // CPU flips no stored-only dtype, nor complex32
  m.impl("roll", TORCH_FN(roll_dims), kMovedDtypes);  // CPU's roll is a cat
}

}  // namespace torch_neuronx
