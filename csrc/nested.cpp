// Strided nested tensors on the neuron key (torch.nested.nested_tensor(..., device="neuron"),
// and the strided form PyTorch's jagged SDPA math path converts to). A nested tensor is ATen's
// own NestedTensorImpl: a dense buffer on neuron plus its entries' sizes, strides and offsets
// (CPU tensors). ATen's nested kernels registered for both NestedTensorCPU and NestedTensorCUDA
// are device-generic compositions of dense ops on that buffer (whose kernels here are native or
// the visible CPU fallback); the table below registers them for NestedTensorPrivateUse1 too.
// Any other op on a nested neuron tensor raises a NotImplementedError that names it and says
// what to do, instead of PyTorch's "could not run" error.
#include "neuron.h"

#include <ATen/ops/_nested_tensor_size_native.h>
#include <ATen/ops/_nested_tensor_strides_native.h>
#include <ATen/ops/_safe_softmax_native.h>
#include <ATen/ops/_softmax_native.h>
#include <ATen/ops/_to_copy_native.h>
#include <ATen/ops/where_native.h>
#include <ATen/ops/masked_fill_native.h>
#include <ATen/ops/logical_not_native.h>
#include <ATen/ops/all_native.h>
#include <ATen/ops/isnan_native.h>
#include <ATen/ops/isinf_native.h>
#include <ATen/ops/isneginf_native.h>
#include <ATen/ops/alias_native.h>
#include <ATen/ops/chunk_native.h>
#include <ATen/ops/clone_native.h>
#include <ATen/ops/copy_native.h>
#include <ATen/ops/empty_like_native.h>
#include <ATen/ops/fill_native.h>
#include <ATen/ops/is_same_size_native.h>
#include <ATen/ops/linear_native.h>
#include <ATen/ops/matmul_native.h>
#include <ATen/ops/mul_native.h>
#include <ATen/ops/narrow_native.h>
#include <ATen/ops/select_native.h>
#include <ATen/ops/split_with_sizes_native.h>
#include <ATen/ops/squeeze_native.h>
#include <ATen/ops/transpose_native.h>
#include <ATen/ops/unbind_native.h>
#include <ATen/ops/unsqueeze_native.h>
#include <ATen/ops/values_native.h>
#include <ATen/ops/view_native.h>
#include <ATen/ops/zero_native.h>
#include <torch/library.h>

namespace torch_neuronx {
namespace {

void unsupported_nested(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op.schema().operator_name(),
                              ": not supported on nested tensors on neuron. Nested neuron tensors support moving "
                              "(.cpu(), .to()), clone, copy_, unbind, views (transpose, view, select, narrow, split, "
                              "chunk, squeeze, unsqueeze, values), fill_/zero_, mul.Scalar, linear, matmul, softmax (with the masking ops it uses) and "
                              "nn.TransformerEncoder's fast path; move the nested tensor to the CPU "
                              "(nt.cpu()) or work on its dense entries (nt.unbind()).");
}

}  // namespace

// (schema name, ATen's device-generic nested kernel); OV: the overload of an overloaded name,
// by its signature.
using FillScalar = at::Tensor&(at::Tensor&, const at::Scalar&);
using FillTensor = at::Tensor&(at::Tensor&, const at::Tensor&);
using SqueezeDim = at::Tensor(const at::Tensor&, int64_t);
using SqueezeDims = at::Tensor(const at::Tensor&, at::IntArrayRef);
#define OV(sig, fn) static_cast<sig*>(&at::native::fn)
#define NEURON_NESTED_KERNELS(X)                              \
  X("_to_copy", &at::native::_to_copy_nested)                \
  X("clone", &at::native::clone_nested)                      \
  X("copy_", &at::native::copy_nested_)                      \
  X("unbind.int", &at::native::NestedTensor_unbind)          \
  X("alias", &at::native::alias_nested)                      \
  X("transpose.int", &at::native::transpose_nested)          \
  X("view", &at::native::view_nested)                        \
  X("values", &at::native::values_nested)                    \
  X("select.int", &at::native::select_nested)                \
  X("narrow", &at::native::narrow_nested_symint)             \
  X("split_with_sizes", &at::native::split_with_sizes_nested) \
  X("chunk", &at::native::chunk_nested_tensor)               \
  X("squeeze", &at::native::squeeze_nested)                  \
  X("squeeze.dim", OV(SqueezeDim, squeeze_dim_nested))       \
  X("squeeze.dims", OV(SqueezeDims, squeeze_dim_nested))     \
  X("unsqueeze", &at::native::unsqueeze_nested)              \
  X("empty_like", &at::native::empty_like_nested)            \
  X("fill_.Scalar", OV(FillScalar, fill_nested_))            \
  X("fill_.Tensor", OV(FillTensor, fill_nested_))            \
  X("zero_", &at::native::zero_nested_)                      \
  X("is_same_size", &at::native::nested_is_same_size)        \
  X("_nested_tensor_size", &at::native::_nested_tensor_size) \
  X("_nested_tensor_strides", &at::native::_nested_tensor_strides) \
  X("linear", &at::native::nested_linear)                    \
  X("matmul", &at::native::matmul_nested)                    \
  X("_softmax", &at::native::softmax_nested)                 \
  X("_safe_softmax", &at::native::_safe_softmax)             \
  X("mul.Scalar", &at::native::NestedTensor_mul_Scalar)      \
  X("isneginf", &at::native::NestedTensor_isneginf)          \
  X("isinf", &at::native::NestedTensor_isinf)                \
  X("isnan", &at::native::NestedTensor_isnan)                \
  X("all.dim", &at::native::NestedTensor_all)                \
  X("logical_not", &at::native::NestedTensor_logical_not)    \
  X("masked_fill.Scalar", &at::native::NestedTensor_masked_fill) \
  X("where.self", &at::native::NestedTensor_where)           \
  X("where.self_out", &at::native::NestedTensor_where_out)

TORCH_LIBRARY_IMPL(aten, NestedTensorPrivateUse1, m) {
#define NEURON_NESTED_IMPL(name, fn) m.impl(name, fn);
  NEURON_NESTED_KERNELS(NEURON_NESTED_IMPL)
#undef NEURON_NESTED_IMPL
}
#undef OV

TORCH_LIBRARY_IMPL(_, NestedTensorPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&unsupported_nested>());
}

}  // namespace torch_neuronx
