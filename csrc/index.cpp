// Indexing ops on the neuron key: advanced indexing (index, index_put_), gather, scatter
// (with reductions), index_add/index_copy/index_fill_, nonzero, masked_select,
// masked_scatter_, take, count_nonzero. ATen's meta functions check arguments and size
// outputs; each op becomes one launch of the runtime's indexed copy (vnc/index.h) over a
// TensorIterator [destination, source, index...] in which the indexed side has stride 0
// along the indexed dims.
#include "neuron.h"
#include "gate.h"
#include "structured.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/native/ReductionType.h>
#include <ATen/native/TensorAdvancedIndexingUtils.h>
#include <ATen/ops/gather_meta.h>
#include <ATen/ops/index_add_meta.h>
#include <ATen/ops/index_copy_meta.h>
#include <ATen/ops/index_meta.h>
#include <ATen/ops/scatter_add_meta.h>
#include <ATen/ops/scatter_meta.h>
#include <ATen/ops/scatter_reduce_meta.h>
#include <torch/library.h>

#include <limits>

namespace torch_neuronx {
namespace {

using IndexList = c10::List<std::optional<at::Tensor>>;

// `t` (0-dim read as 1-dim) viewed with `sizes`, stride 0 along `dim`: the side the index
// addresses, so that each element's offset comes from the index operand alone. An empty `t`
// with a non-empty index (the shape checks leave only `dim` of size 0) has no storage to view:
// a one-element stand-in takes its place, never read or written, as every index then fails
// the kernel's bounds check (ATen's "index 0 is out of bounds for dimension 0 with size 0").
at::Tensor restride(const at::Tensor& t, int64_t dim, at::IntArrayRef sizes) {
  if (t.numel() == 0) return at::empty({1}, t.options()).as_strided(sizes, at::DimVector(sizes.size(), 0));
  at::DimVector strides(t.strides().begin(), t.strides().end());
  if (strides.empty()) strides.push_back(1);
  strides[dim] = 0;
  return t.as_strided(sizes, strides);
}
at::Tensor as_1d(const at::Tensor& t) { return t.dim() ? t : t.view({1}); }

at::TensorIterator index_iter(const at::Tensor& dst, const at::Tensor& src, at::TensorList indices) {
  at::TensorIteratorConfig config;
  config.set_check_mem_overlap(false).check_all_same_dtype(false).resize_outputs(false);
  config.add_output(dst).add_const_input(src);
  for (const at::Tensor& i : indices) config.add_const_input(i);
  return config.build();
}

void launch_index(const char* op, const at::TensorIteratorBase& iter, int direction, at::IntArrayRef sizes,
                  at::IntArrayRef byte_strides, int64_t dim, int flags, vnc_index_reduce reduce) {
  if (iter.numel() == 0) return;
  const int nidx = iter.ntensors() - 2;
  TORCH_CHECK(nidx <= VNC_INDEX_MAX, op, ": at most ", VNC_INDEX_MAX, " index tensors are supported, got ", nidx);
  vnc_iter it = iter_geometry(iter);
  c10::DeviceGuard guard(iter.tensor(0).device());
  check(vnc_index(stream_of(iter.tensor(0)), op, &it, direction, nidx, sizes.data(), byte_strides.data(), dim, flags,
                  reduce));
}

// Index tensors on another device (CPU indices of a neuron tensor, as CUDA allows) are moved
// to self's device before the kernel reads them. Any other pairing (a CPU tensor indexed by a
// neuron index) is refused with ATen's message, as its index meta does.
IndexList on_device(const at::Tensor& self, const IndexList& indices) {
  for (size_t k = 0; k < indices.size(); k++) {
    std::optional<at::Tensor> t = indices.get(k);
    TORCH_CHECK(!t || !t->defined() || t->is_cpu() || t->device() == self.device(), "indices should be either on ",
                at::kCPU, " or on the same device as the indexed tensor (", self.device(), ")");
  }
  IndexList out;
  out.reserve(indices.size());
  for (size_t k = 0; k < indices.size(); k++) {
    std::optional<at::Tensor> t = indices.get(k);
    if (t && t->defined() && t->device() != self.device()) t = t->to(self.device());
    out.push_back(std::move(t));
  }
  return out;
}

// ---------------------------------------------------------------- advanced indexing

// self[indices] (negative indices wrap) into op's output, as one launch named `name`.
void gather_indexed(const char* name, Structured<at::meta::structured_index_Tensor>& op, const at::Tensor& self,
                    const IndexList& indices) {
  auto geo = op.meta(self, indices);
  record_native(name);
  launch_index(name, op, VNC_INDEX_GATHER, geo.sizes, geo.strides, 0, VNC_INDEX_WRAP, VNC_REDUCE_NONE);
}

at::Tensor& index_out(const at::Tensor& self, const IndexList& indices, at::Tensor& out) {
  Structured<at::meta::structured_index_Tensor> op(Mode::Out, {out});
  gather_indexed("aten::index", op, self, on_device(self, indices));
  op.finish();
  return out;
}

at::Tensor index(const at::Tensor& self, const IndexList& indices) {
  Structured<at::meta::structured_index_Tensor> op(Mode::Functional);
  gather_indexed("aten::index", op, self, on_device(self, indices));
  return std::move(op.outs[0]);
}

at::Tensor& index_put_impl_(at::Tensor& self, const IndexList& indices, const at::Tensor& values, bool accumulate,
                            bool unsafe) {
  // CPU's kernel refuses an empty index list with a RuntimeError (an internal assert or a shape
  // mismatch); index's IndexError would come from the meta below.
  TORCH_CHECK(!indices.empty(), "index_put_: at least one index must be provided");
  TORCH_CHECK_INDEX(indices.size() <= static_cast<size_t>(self.dim()), "too many indices for tensor of dimension ",
                    self.dim(), " (got ", indices.size(), ")");
  if (at::has_internal_overlap(self) == at::MemOverlap::Yes)
    TORCH_WARN("Use of index_put_ on expanded tensors is deprecated. Please clone() the tensor before performing "
               "this operation. This also applies to advanced indexing e.g. tensor[indices] = tensor");
  // Accumulating computes: a stored-only dtype takes the CPU fallback before anything launches.
  NEURON_CHECK_SUPPORTED(!accumulate || in_set(kComputedDtypes, self.scalar_type()),
                         "index_put_ with accumulate=True: no native kernel for ", self.scalar_type());
  IndexList idx = on_device(self, indices);
  if (!accumulate) {
    auto [fill, mask] = at::native::canDispatchToMaskedFill(self, idx, values);
    if (fill) return self.masked_fill_(mask, values.item());
    // CPU's index_put_ takes masked_fill_ for every one-element value (a CPU tensor there), which
    // refuses a uint8 mask; a value on the device keeps the indexed write (no host sync) but
    // gets the same refusal.
    if (values.numel() == 1 && !values.is_cpu()) {
      auto [fill_on_cpu, m] = at::native::canDispatchToMaskedFill(self, idx, at::empty({}, values.options().device(at::kCPU)));
      TORCH_CHECK(!(fill_on_cpu && m.scalar_type() == at::kByte),
                  "masked_fill_ only supports boolean masks, but got mask with dtype ", m.dtype());
    }
  }
  at::Tensor value = values;
  if (value.device() != self.device() && value.dim() == 0) value = value.to(self.device());
  check_same_device("aten::index_put_", self, {&value});
  at::assert_no_overlap(self, value);
  for (size_t k = 0; k < idx.size(); k++) {
    std::optional<at::Tensor> i = idx.get(k);
    if (i && i->defined()) at::assert_no_overlap(self, *i);
  }
  // ATen's index meta computes the geometry (masks expanded by nonzero, indices broadcast
  // and moved together, self restrided): its operand 1 is the view of self to write.
  Structured<at::meta::structured_index_Tensor> geo_op(Mode::Placeholder);
  auto geo = geo_op.meta(self, idx);
  const at::Tensor& dst = geo_op.tensor(1);
  TORCH_CHECK(at::is_expandable_to(value.sizes(), dst.sizes()), "shape mismatch: value tensor of shape ",
              value.sizes(), " cannot be broadcast to indexing result of shape ", dst.sizes());
  TORCH_CHECK(value.scalar_type() == dst.scalar_type(), "Index put requires the source and destination dtypes match, got ",
              dst.scalar_type(), " for the destination and ", value.scalar_type(), " for the source.");
  std::vector<at::Tensor> index_ops;
  for (int k = 2; k < geo_op.ntensors(); k++) index_ops.push_back(geo_op.tensor(k));
  record_native("aten::_index_put_impl_");
  launch_index("aten::index_put_", index_iter(dst, value, index_ops), VNC_INDEX_SCATTER, geo.sizes, geo.strides, 0,
               VNC_INDEX_WRAP, accumulate ? VNC_REDUCE_SUM : VNC_REDUCE_NONE);
  return self;
}

// ---------------------------------------------------------------- gather / scatter

// ATen's names for the reductions: scatter_reduce's (with "max"/"min" as aliases of
// "amax"/"amin") and the deprecated scatter(reduce=) "add"/"multiply"; mean sums, then divides.
vnc_index_reduce scatter_reduction(c10::string_view reduce, bool scatter_reduce_names) {
  switch (at::native::get_operator_enum(reduce, scatter_reduce_names)) {
    case at::native::ReductionType::SUM:
    case at::native::ReductionType::MEAN: return VNC_REDUCE_SUM;
    case at::native::ReductionType::PROD: return VNC_REDUCE_PROD;
    case at::native::ReductionType::MAX: return VNC_REDUCE_MAX;
    case at::native::ReductionType::MIN: return VNC_REDUCE_MIN;
  }
  TORCH_CHECK(false, "unknown reduction ", reduce);
}

// ATen's CPU scatter kernels accumulate float16/bfloat16 sums and products (and means) in
// float32, rounding once at the end; index_add_ and index_put_(accumulate=True) accumulate in
// the tensor's own dtype on CPU, and so do they here.
bool accumulates_in_float(const at::Tensor& t, vnc_index_reduce r) {
  return (r == VNC_REDUCE_SUM || r == VNC_REDUCE_PROD) && at::isReducedFloatingType(t.scalar_type());
}

// out[..., index[e], ...] (op)= src[e] along `dim` for every element e of `index` (shapes
// checked by the meta; src may be larger than index).
void scatter_into(const char* op, const at::Tensor& out, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                  vnc_index_reduce reduce) {
  if (index.numel() == 0) return;
  check_same_device(op, out, {&index, &src});
  const at::Tensor out1 = as_1d(out), idx1 = as_1d(index).to(at::kLong);
  dim = at::maybe_wrap_dim(dim, out1.dim());
  at::Tensor src1 = as_1d(src);
  src1 = src1.as_strided(idx1.sizes(), src1.strides());
  launch_index(op, index_iter(restride(out1, dim, idx1.sizes()), src1, {idx1}), VNC_INDEX_SCATTER, {out1.size(dim)},
               {out1.stride(dim) * out1.element_size()}, dim, VNC_INDEX_RANGE_AS_INVALID, reduce);
}

// scatter_into, with 16-bit sums and products accumulated in a float32 copy of out that is
// rounded back once (accumulates_in_float).
void scatter_accumulating(const char* op, const at::Tensor& out, int64_t dim, const at::Tensor& index,
                          const at::Tensor& src, vnc_index_reduce reduce) {
  if (!accumulates_in_float(out, reduce)) return scatter_into(op, out, dim, index, src, reduce);
  const at::Tensor acc = out.to(at::kFloat);
  scatter_into(op, acc, dim, index, src.to(at::kFloat), reduce);
  out.copy_(acc);
}

// A 0-dim tensor of `like`'s dtype and device holding `value`.
at::Tensor value_tensor(const at::Scalar& value, const at::Tensor& like) { return at::full({}, value, like.options()); }

// The identity scatter_reduce starts from when include_self=False (PyTorch's choice: -inf/+inf
// for floating dtypes, the type's extremes otherwise).
at::Scalar reduce_identity(vnc_index_reduce r, at::ScalarType dt) {
  if (r == VNC_REDUCE_SUM) return 0;
  if (r == VNC_REDUCE_PROD) return 1;
  const bool hi = r == VNC_REDUCE_MIN;
  if (at::isFloatingType(dt)) return hi ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  at::Scalar s;
  AT_DISPATCH_INTEGRAL_TYPES_AND(at::kBool, dt, "scatter_reduce", [&] {
    s = hi ? at::Scalar(std::numeric_limits<scalar_t>::max()) : at::Scalar(std::numeric_limits<scalar_t>::lowest());
  });
  return s;
}

void copy_self(const at::Tensor& self, const at::Tensor& out) {
  if (!out.is_same(self)) out.copy_(self);
}

struct Gather {
  template <class Op>
  static void run(Op&, const at::Tensor& self, int64_t dim, const at::Tensor& index, bool, const at::Tensor& out) {
    if (index.numel() == 0) return;
    check_same_device("aten::gather", self, {&index, &out});
    record_native("aten::gather");
    const at::Tensor self1 = as_1d(self), idx1 = as_1d(index).to(at::kLong);
    dim = at::maybe_wrap_dim(dim, self1.dim());
    launch_index("aten::gather", index_iter(as_1d(out), restride(self1, dim, idx1.sizes()), {idx1}), VNC_INDEX_GATHER,
                 {self1.size(dim)}, {self1.stride(dim) * self1.element_size()}, dim, VNC_INDEX_RANGE_AS_INVALID,
                 VNC_REDUCE_NONE);
  }
};

// The scatter source: a tensor, or a value broadcast over the index.
const at::Tensor& scatter_source(const at::Tensor& src, const at::Tensor&, const at::Tensor&) { return src; }
at::Tensor scatter_source(const at::Scalar& value, const at::Tensor& out, const at::Tensor& index) {
  return value_tensor(value, out).expand(index.sizes());
}

// scatter with a tensor or value source, plain or with the deprecated reduce ("add", "multiply").
struct Scatter {
  template <class Op, class Src>
  static void run(Op&, const at::Tensor& self, int64_t dim, const at::Tensor& index, const Src& src,
                  const at::Tensor& out) {
    apply(self, dim, index, src, VNC_REDUCE_NONE, out);
  }
  template <class Op, class Src>
  static void run(Op&, const at::Tensor& self, int64_t dim, const at::Tensor& index, const Src& src,
                  c10::string_view reduce, const at::Tensor& out) {
    apply(self, dim, index, src, scatter_reduction(reduce, false), out);
  }
  template <class Src>
  static void apply(const at::Tensor& self, int64_t dim, const at::Tensor& index, const Src& src, vnc_index_reduce r,
                    const at::Tensor& out) {
    copy_self(self, out);
    record_native("aten::scatter");
    scatter_accumulating("aten::scatter", out, dim, index, scatter_source(src, out, index), r);
  }
};
struct ScatterAdd {
  template <class Op>
  static void run(Op&, const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                  const at::Tensor& out) {
    copy_self(self, out);
    record_native("aten::scatter_add");
    scatter_accumulating("aten::scatter_add", out, dim, index, src, VNC_REDUCE_SUM);
  }
};
struct ScatterReduceTwo {
  template <class Op>
  static void run(Op&, const at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& src,
                  c10::string_view reduce, bool include_self, const at::Tensor& out) {
    const vnc_index_reduce r = scatter_reduction(reduce, true);
    const bool mean = at::native::get_reduction_enum(reduce) == at::native::ReductionType::MEAN;
    // ATen's CPU kernels have no complex amax/amin nor bool mean (NotImplementedError)
    TORCH_CHECK_NOT_IMPLEMENTED(!(out.is_complex() && (r == VNC_REDUCE_MAX || r == VNC_REDUCE_MIN)) &&
                                    !(mean && out.scalar_type() == at::kBool),
                                "\"scatter_reduce\" with reduce=\"", reduce, "\" not implemented for '",
                                out.scalar_type(), "'");
    copy_self(self, out);
    if (index.numel() == 0) return;
    record_native("aten::scatter_reduce");
    const char* op = "aten::scatter_reduce";
    const bool wide = accumulates_in_float(out, r);
    const at::Tensor acc = wide ? out.to(at::kFloat) : out;
    if (!include_self)
      scatter_into(op, acc, dim, index, scatter_source(reduce_identity(r, acc.scalar_type()), acc, index),
                   VNC_REDUCE_NONE);
    scatter_into(op, acc, dim, index, wide ? src.to(at::kFloat) : src, r);
    if (mean) {  // sum / count, count including self's element when include_self
      at::Tensor count = include_self ? at::ones_like(acc) : at::zeros_like(acc);
      scatter_into(op, count, dim, index, at::ones_like(src, acc.options()), VNC_REDUCE_SUM);
      count.masked_fill_(count == 0, 1);
      if (acc.is_floating_point() || acc.is_complex()) acc.div_(count);
      else acc.div_(count, "floor");
    }
    if (wide) out.copy_(acc);
  }
};

// ---------------------------------------------------------------- index_add / index_copy / index_fill

// out[..., index[j], ...] (op)= source[..., j, ...] along `dim`. index: 0-/1-dim int32/int64.
void index_along(const char* op, const at::Tensor& out, int64_t dim, const at::Tensor& index, const at::Tensor& source,
                 vnc_index_reduce reduce, int flags) {
  if (index.numel() == 0) return;
  check_same_device(op, out, {&index, &source});
  const at::Tensor out1 = as_1d(out), src1 = as_1d(source);
  const at::Tensor idx = index.reshape({-1}).to(at::kLong);
  at::DimVector st(src1.dim(), 0);
  st[dim] = idx.stride(0);
  launch_index(op, index_iter(restride(out1, dim, src1.sizes()), src1, {idx.as_strided(src1.sizes(), st)}),
               VNC_INDEX_SCATTER, {out1.size(dim)}, {out1.stride(dim) * out1.element_size()}, dim, flags, reduce);
}

struct IndexAdd {
  template <class Pre>
  static void run(Pre& pre, const at::Tensor& self, int64_t, const at::Tensor& index, const at::Tensor& source,
                  const at::Scalar& alpha, const at::Tensor& out) {
    copy_self(self, out);
    record_native("aten::index_add");
    // ATen's CPU kernel: a bad index is an IndexError for int32 indices and for 0-/1-dim self,
    // a RuntimeError otherwise; an empty self of 2 or more dims is left as is, unchecked.
    if (out.dim() > 1 && out.numel() == 0) return;
    const int flags = index.scalar_type() == at::kInt || out.dim() <= 1 ? 0 : VNC_INDEX_RANGE_AS_INVALID;
    const at::Tensor src = alpha.equal(1) ? source : at::mul(source, alpha);
    index_along("aten::index_add", out, pre.dim, index, src, VNC_REDUCE_SUM, flags);
  }
};
struct IndexCopy {
  template <class Pre>
  static void run(Pre& pre, const at::Tensor& self, int64_t, const at::Tensor& index, const at::Tensor& source,
                  const at::Tensor& out) {
    copy_self(self, out);
    record_native("aten::index_copy");
    index_along("aten::index_copy", out, pre.dim, index, source, VNC_REDUCE_NONE, 0);
  }
};

at::Tensor& index_fill_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Scalar& value) {
  TORCH_CHECK_INDEX(index.dim() <= 1, "index_fill_(): Index is supposed to be a vector");
  TORCH_CHECK_INDEX(index.scalar_type() == at::kLong, "index_fill_(): Expected dtype int64 for index.");
  dim = at::maybe_wrap_dim(dim, self.dim());
  record_native("aten::index_fill_");
  if (index.numel() == 0 || self.numel() == 0) return self;
  const at::Tensor self1 = as_1d(self);
  at::DimVector sizes(self1.sizes().begin(), self1.sizes().end());
  sizes[dim] = index.numel();
  const at::Tensor idx = index.to(self.device());
  index_along("aten::index_fill_", self, dim, idx, value_tensor(value, self).expand(sizes), VNC_REDUCE_NONE,
              VNC_INDEX_WRAP);
  return self;
}
at::Tensor& index_fill_tensor_(at::Tensor& self, int64_t dim, const at::Tensor& index, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "index_fill_ only supports a 0-dimensional value tensor, but got tensor with ",
              value.dim(), " dimension(s).");
  return index_fill_(self, dim, index, value.item());
}

// ---------------------------------------------------------------- nonzero and mask ops

// Writes the coordinates into out, resized to (count, ndim); a column-major out (nonzero's own
// result) is written in place as well as a contiguous one.
at::Tensor& nonzero_into(const at::Tensor& self, at::Tensor& out, bool column_major) {
  TORCH_CHECK(out.scalar_type() == at::kLong, "nonzero: Expected out tensor to have scalar type Long but got scalar type",
              out.scalar_type());
  check_same_device("aten::nonzero", self, {&out});
  at::assert_no_internal_overlap(out);  // CPU's refusals
  at::assert_no_overlap(out, self);
  record_native("aten::nonzero");
  c10::DeviceGuard guard(self.device());
  vnc_tensor x = to_vnc(self);
  vnc_stream* s = stream_of(self);
  int64_t count = 0;
  check(vnc_count_nonzero(s, "aten::nonzero", &x, &count));
  check(vnc_stream_synchronize(s));  // the output's size is data-dependent (errors are earlier ops')
  if (column_major) {
    out = at::empty_strided({count, self.dim()}, {1, count}, out.options());
  } else {
    at::native::resize_output(out, {count, self.dim()});
  }
  const bool direct = column_major || out.is_contiguous();
  at::Tensor o = direct ? out : at::empty({count, self.dim()}, out.options());
  check(vnc_nonzero(s, "aten::nonzero", &x, o.data_ptr<int64_t>(), count, o.stride(0), o.stride(1)));
  if (!direct) out.copy_(o);
  return out;
}
at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out) { return nonzero_into(self, out, false); }
at::Tensor nonzero(const at::Tensor& self) {
  // CPU PyTorch's result is column-major (strides (1, N)): each index column, and each tensor
  // of nonzero(as_tuple=True), is contiguous
  at::Tensor out = at::empty({0}, self.options().dtype(at::kLong));
  return nonzero_into(self, out, true);
}

at::Tensor count_nonzero(const at::Tensor& self, at::IntArrayRef dims) {
  record_native("aten::count_nonzero");
  return at::sum(at::ne(self, 0), dims, false, at::kLong);
}

at::Tensor nx_masked_select(const at::Tensor& self, const at::Tensor& mask) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_select: expected BoolTensor for mask");
  check_same_device("aten::masked_select", self, {&mask});
  record_native("aten::masked_select");
  auto [s, m] = at::expand_outplace(self, mask);
  return at::index(as_1d(*s), IndexList({std::optional<at::Tensor>(as_1d(*m))}));
}
at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out) {
  TORCH_CHECK(self.scalar_type() == out.scalar_type(), "masked_select(): self and result must have the same scalar type");
  check_select_out("aten::masked_select", self, mask, out);
  at::Tensor r = nx_masked_select(self, mask);
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

at::Tensor& masked_scatter_(at::Tensor& self, const at::Tensor& mask, const at::Tensor& source) {
  TORCH_CHECK(mask.scalar_type() == at::kBool, "masked_scatter_ only supports boolean masks, but got mask with dtype ",
              mask.scalar_type());
  TORCH_CHECK(self.scalar_type() == source.scalar_type(),
              "masked_scatter_: expected self and source to have same dtypes but got", self.scalar_type(), " and ",
              source.scalar_type());
  check_same_device("aten::masked_scatter_", self, {&mask, &source});
  at::assert_no_internal_overlap(self);  // as CPU (index_put_, below, only warns)
  record_native("aten::masked_scatter_");
  const at::Tensor m = mask.expand(self.sizes());
  const int64_t n = at::count_nonzero(m).item<int64_t>();
  TORCH_CHECK(source.numel() >= n, "masked_scatter_: expected source to have at least ", n,
              " elements (the number of ones in mask), got ", source.numel());
  at::Tensor self1 = as_1d(self);
  at::index_put_(self1, IndexList({std::optional<at::Tensor>(as_1d(m))}), source.reshape({-1}).narrow(0, 0, n));
  return self;
}

// ATen's take checks (types and messages); `out`: the out= tensor, or self for the functional form.
void check_take(const at::Tensor& self, const at::Tensor& index, const at::Tensor& out) {
  TORCH_CHECK(index.scalar_type() == at::kLong, "take(): Expected a long tensor for index, but got ", index.scalar_type());
  TORCH_CHECK(self.scalar_type() == out.scalar_type(),
              "take(): self and out expected to have the same dtype, but got self.dtype = ", self.scalar_type(),
              " and out.dtype = ", out.scalar_type());
  TORCH_CHECK(self.device() == out.device() && self.device() == index.device(),
              "take(): self, index and out expected to be in the same device, but got self.device = ", self.device(),
              ", index.device = ", index.device(), ", and out.device = ", out.device());
  TORCH_CHECK_INDEX(self.numel() > 0 || index.numel() == 0, "take(): tried to take from an empty tensor");
}

at::Tensor nx_take(const at::Tensor& self, const at::Tensor& index) {
  check_take(self, index, self);
  Structured<at::meta::structured_index_Tensor> op(Mode::Functional);
  gather_indexed("aten::take", op, self.reshape({-1}), IndexList({std::optional<at::Tensor>(index)}));
  return std::move(op.outs[0]);
}
at::Tensor& take_out(const at::Tensor& self, const at::Tensor& index, at::Tensor& out) {
  check_take(self, index, out);
  check_select_out("aten::take", self, index, out);
  Structured<at::meta::structured_index_Tensor> op(Mode::Out, {out});
  gather_indexed("aten::take", op, self.reshape({-1}), IndexList({std::optional<at::Tensor>(index)}));
  op.finish();
  return out;
}

// bincount: counts (or summed weights) of each value of a 1-D non-negative integer tensor, as a
// scatter-add into max(input) + 1 bins (one host read for the size, as the output shape needs).
at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t minlength) {
  NEURON_CHECK_SUPPORTED(at::isIntegralType(self.scalar_type(), false), "bincount of ", self.scalar_type(),
                         " tensors is not natively supported on neuron");  // CPU raises for those
  TORCH_CHECK(self.dim() == 1 && !at::isFloatingType(self.scalar_type()) && self.scalar_type() != at::kBool,
              "bincount only supports 1-d non-negative integral inputs.");
  TORCH_CHECK(minlength >= 0, "minlength should be >= 0");
  const bool weighted = weights && weights->defined();
  if (weighted)
    TORCH_CHECK(weights->dim() == 1 && weights->size(0) == self.size(0),
                "weights should be 1-d and have the same length as input");
  record_native("aten::bincount");
  int64_t bins = minlength;
  if (self.numel() > 0) {
    TORCH_CHECK(self.min().item<int64_t>() >= 0, "bincount only supports 1-d non-negative integral inputs.");
    bins = std::max(bins, self.max().item<int64_t>() + 1);
  }
  // ATen's result dtypes: int64 counts; float32 weights sum in float32, any other in float64.
  const auto dtype = weighted ? (weights->scalar_type() == at::kFloat ? at::kFloat : at::kDouble) : at::kLong;
  at::Tensor out = at::zeros({bins}, self.options().dtype(dtype));
  if (self.numel() == 0) return out;
  // unweighted: one 1 broadcast (stride 0), not a tensor of ones as long as the input
  const at::Tensor src = weighted ? weights->to(dtype) : at::ones({1}, out.options()).expand({self.size(0)});
  scatter_into("aten::bincount", out, 0, self.to(at::kLong), src, VNC_REDUCE_SUM);
  return out;
}

using T = const at::Tensor&;
using GatherV = Variants<at::meta::structured_gather, int64_t, T, bool>;
using ScatterSrcV = Variants<at::meta::structured_scatter_src, int64_t, T, T>;
using ScatterValueV = Variants<at::meta::structured_scatter_value, int64_t, T, const at::Scalar&>;
using ScatterReduceV = Variants<at::meta::structured_scatter_reduce, int64_t, T, T, c10::string_view>;
using ScatterValueReduceV = Variants<at::meta::structured_scatter_value_reduce, int64_t, T, const at::Scalar&, c10::string_view>;
using ScatterAddV = Variants<at::meta::structured_scatter_add, int64_t, T, T>;
using ScatterReduceTwoV = Variants<at::meta::structured_scatter_reduce_two, int64_t, T, T, c10::string_view, bool>;
using IndexAddV = Variants<at::meta::structured_index_add, int64_t, T, T, const at::Scalar&>;
using IndexCopyV = Variants<at::meta::structured_index_copy, int64_t, T, T>;

}  // namespace

// Registers the three variants PyTorch generates for a structured op.
#define NEURON_STRUCTURED(m, name, V, Impl, ...)                      \
  m.impl(name, TORCH_FN(V::functional<Impl>), ##__VA_ARGS__);           \
  m.impl(name "_", TORCH_FN(V::inplace<Impl>), ##__VA_ARGS__);          \
  m.impl(name ".out", TORCH_FN(V::out<Impl>), ##__VA_ARGS__)

// The dtypes of stored values each op moves natively besides the computed ones: those CPU's
// kernel accepts for every input (advanced indexing: float8 and uint16-64; index_put_ float8
// but e8m0fnu; masked_select float8). gather, scatter, take and masked_scatter_ have no CPU
// kernel for complex32 either.
constexpr DtypeSet kIndexDtypes = kComputedDtypes | kFloat8Dtypes | kUnsignedWideDtypes;
constexpr DtypeSet kIndexPutDtypes = kComputedDtypes | (kFloat8Dtypes & ~dtype_set({at::kFloat8_e8m0fnu}));

NEURON_LIBRARY_IMPL(m) {
  m.impl("index.Tensor", TORCH_FN(index), kIndexDtypes);
  m.impl("index.Tensor_out", TORCH_FN(index_out), kIndexDtypes);
  m.impl("_index_put_impl_", TORCH_FN(index_put_impl_), kIndexPutDtypes);
  m.impl("gather", TORCH_FN(GatherV::functional<Gather>), kComputedNoComplexHalf);
  m.impl("gather.out", TORCH_FN(GatherV::out<Gather>), kComputedNoComplexHalf);
  m.impl("scatter.src", TORCH_FN(ScatterSrcV::functional<Scatter>), kComputedNoComplexHalf);
  m.impl("scatter_.src", TORCH_FN(ScatterSrcV::inplace<Scatter>), kComputedNoComplexHalf);
  m.impl("scatter.src_out", TORCH_FN(ScatterSrcV::out<Scatter>), kComputedNoComplexHalf);
  m.impl("scatter.value", TORCH_FN(ScatterValueV::functional<Scatter>), kComputedNoComplexHalf);
  m.impl("scatter_.value", TORCH_FN(ScatterValueV::inplace<Scatter>), kComputedNoComplexHalf);
  m.impl("scatter.value_out", TORCH_FN(ScatterValueV::out<Scatter>), kComputedNoComplexHalf);
  m.impl("scatter.reduce", TORCH_FN(ScatterReduceV::functional<Scatter>), kComputedNoComplexHalf);
  m.impl("scatter_.reduce", TORCH_FN(ScatterReduceV::inplace<Scatter>), kComputedNoComplexHalf);
  m.impl("scatter.reduce_out", TORCH_FN(ScatterReduceV::out<Scatter>), kComputedNoComplexHalf);
  m.impl("scatter.value_reduce", TORCH_FN(ScatterValueReduceV::functional<Scatter>), kComputedNoComplexHalf);
  m.impl("scatter_.value_reduce", TORCH_FN(ScatterValueReduceV::inplace<Scatter>), kComputedNoComplexHalf);
  m.impl("scatter.value_reduce_out", TORCH_FN(ScatterValueReduceV::out<Scatter>), kComputedNoComplexHalf);
  NEURON_STRUCTURED(m, "scatter_add", ScatterAddV, ScatterAdd, kComputedNoComplexHalf);
  m.impl("scatter_reduce.two", TORCH_FN(ScatterReduceTwoV::functional<ScatterReduceTwo>), kComputedNoComplexHalf);
  m.impl("scatter_reduce_.two", TORCH_FN(ScatterReduceTwoV::inplace<ScatterReduceTwo>), kComputedNoComplexHalf);
  m.impl("scatter_reduce.two_out", TORCH_FN(ScatterReduceTwoV::out<ScatterReduceTwo>), kComputedNoComplexHalf);
  NEURON_STRUCTURED(m, "index_add", IndexAddV, IndexAdd);
  NEURON_STRUCTURED(m, "index_copy", IndexCopyV, IndexCopy);
  m.impl("index_fill_.int_Scalar", TORCH_FN(index_fill_));
  m.impl("index_fill_.int_Tensor", TORCH_FN(index_fill_tensor_));
  m.impl("nonzero", TORCH_FN(nonzero));
  m.impl("nonzero.out", TORCH_FN(nonzero_out));
  m.impl("count_nonzero.dim_IntList", TORCH_FN(count_nonzero));
  m.impl("masked_select", TORCH_FN(nx_masked_select), kComputedDtypes | kFloat8Dtypes);
  m.impl("masked_select.out", TORCH_FN(masked_select_out), kComputedDtypes | kFloat8Dtypes);
  m.impl("masked_scatter_", TORCH_FN(masked_scatter_), kComputedNoComplexHalf);
  m.impl("take", TORCH_FN(nx_take), kComputedNoComplexHalf);
  m.impl("bincount", TORCH_FN(bincount));
  m.impl("take.out", TORCH_FN(take_out), kComputedNoComplexHalf);
}

}  // namespace torch_neuronx
