// Matrix products on the neuron key: ATen's meta functions check shapes and dtypes and
// size the output; the runtime's vnc_gemm (OpenBLAS) computes. Also torch.cdist's kernels
// (vnc/distance.h, or the GEMM form).
#include "neuron.h"
#include "gate.h"
#include "structured.h"

#include <ATen/ops/_addmm_activation_meta.h>
#include <ATen/ops/addmm_meta.h>
#include <ATen/ops/addmv_meta.h>
#include <ATen/ops/baddbmm_meta.h>
#include <ATen/ops/bmm_meta.h>
#include <ATen/ops/mm_meta.h>
#include <ATen/ExpandUtils.h>
#include <c10/util/accumulate.h>
#include <torch/library.h>

namespace torch_neuronx {
namespace {

// A 2-D or 3-D tensor as a (batch of) matrices; a 1-D tensor as a column.
vnc_matrix matrix(const at::Tensor& t) {
  vnc_matrix m{};
  m.data = element_ptr(t);
  m.dtype = static_cast<int32_t>(t.scalar_type());
  const int64_t d = t.dim();
  m.batch_stride = d == 3 ? t.stride(0) : 0;
  m.row_stride = d == 1 ? t.stride(0) : t.stride(d - 2);
  m.col_stride = d == 1 ? 1 : t.stride(d - 1);
  return m;
}

// vnc_gemm's dtypes: floating and integer (not complex or bool: the CPU fallback runs those).
// Checked before anything is launched, so that the fallback may take over (gate.h).
void check_gemm_dtype(const char* name, const at::Tensor& out) {
  NEURON_CHECK_SUPPORTED(!out.is_complex() && out.scalar_type() != at::kBool, "\"", name, "\" not implemented for '",
                         out.scalar_type(), "' on neuron");
}

// out = alpha * a @ b + beta * out, for 2-D (or batched 3-D) operands.
void gemm(const char* name, const at::Tensor& a, const at::Tensor& b, const at::Tensor& out, double alpha, double beta) {
  check_gemm_dtype(name, out);
  check_same_device(name, out, {&a, &b});
  record_native(name);
  if (out.scalar_type() == at::kDouble) warn_float64(name);
  const bool batched = out.dim() == 3;
  const int64_t batch = batched ? out.size(0) : 1;
  const int64_t M = out.size(batched ? 1 : 0);
  const int64_t N = out.dim() == 1 ? 1 : out.size(out.dim() - 1);
  const int64_t K = a.dim() == 1 ? a.size(0) : a.size(a.dim() - 1);
  vnc_matrix A = matrix(a), B = matrix(b), C = matrix(out);
  if (out.dim() == 1) {  // matrix @ vector: C is a column
    C.row_stride = out.stride(0);
    C.col_stride = 1;
  }
  c10::DeviceGuard guard(out.device());
  check(vnc_gemm(stream_of(out), name, batch, M, N, K, alpha, &A, &B, beta, &C));
}

// beta * self (broadcast) + alpha * product: self is copied into out first unless beta is 0.
void add_product(const char* name, const at::Tensor& self, const at::Tensor& a, const at::Tensor& b,
                 const at::Scalar& beta, const at::Scalar& alpha, const at::Tensor& out) {
  check_gemm_dtype(name, out);
  double bv = beta.toDouble();
  if (bv != 0.0 && !out.is_same(self)) out.copy_(self.expand(out.sizes()));
  gemm(name, a, b, out, alpha.toDouble(), bv);
}

// CPU's mm and addmm compute an expanded result (no layout BLAS can write) in a temporary and
// refuse it on the copy back, as at::assert_no_internal_overlap; with an empty inner dim and
// beta 0 they only zero the result, which an expanded one allows (fill_).
void check_mm_result(const at::Tensor& out, const at::Tensor& m1, double beta) {
  if (m1.size(1) > 0 || beta != 0.0) at::assert_no_internal_overlap(out);
}

// The dtype checks of ATen's CPU kernels (after the metas' shape checks), with their messages.
void check_mm_dtypes(const at::Tensor& m1, const at::Tensor& m2) {
  TORCH_CHECK(m1.scalar_type() == m2.scalar_type(), "expected m1 and m2 to have the same dtype, but got: ", m1.dtype(),
              " != ", m2.dtype());
}
void check_bmm_dtypes(const at::Tensor& result_like, std::initializer_list<at::Tensor> batches) {
  for (const at::Tensor& b : batches)
    TORCH_CHECK(b.scalar_type() == result_like.scalar_type(), "expected scalar type ", result_like.scalar_type(),
                " but found ", b.scalar_type());
}

struct Mm {
  template <class M>
  static void run(M&, const at::Tensor& self, const at::Tensor& mat2, const at::Tensor& out) {
    check_mm_dtypes(self, mat2);
    check_mm_result(out, self, 0.0);
    gemm("aten::mm", self, mat2, out, 1.0, 0.0);
  }
};
struct Bmm {
  template <class M>
  static void run(M&, const at::Tensor& self, const at::Tensor& mat2, const at::Tensor& out) {
    check_bmm_dtypes(self, {mat2});
    gemm("aten::bmm", self, mat2, out, 1.0, 0.0);
  }
};
struct Addmm {
  template <class M>
  static void run(M&, const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2, const at::Scalar& beta,
                  const at::Scalar& alpha, const at::Tensor& out) {
    check_mm_result(out, m1, beta.toDouble());
    add_product("aten::addmm", self, m1, m2, beta, alpha, out);
  }
};
struct AddmmActivation {  // addmm, then gelu (exact) or relu in place, as ATen
  template <class M>
  static void run(M&, const at::Tensor& self, const at::Tensor& m1, const at::Tensor& m2, const at::Scalar& beta,
                  const at::Scalar& alpha, bool use_gelu, const at::Tensor& out) {
    add_product("aten::_addmm_activation", self, m1, m2, beta, alpha, out);
    if (use_gelu) at::gelu_(const_cast<at::Tensor&>(out));
    else at::relu_(const_cast<at::Tensor&>(out));
  }
};
struct Baddbmm {
  template <class M>
  static void run(M&, const at::Tensor& self, const at::Tensor& b1, const at::Tensor& b2, const at::Scalar& beta,
                  const at::Scalar& alpha, const at::Tensor& out) {
    check_bmm_dtypes(self, {b1, b2});
    add_product("aten::baddbmm", self, b1, b2, beta, alpha, out);
    // ATen's CPU baddbmm computes small products (under 400 multiply-adds per matrix) in a
    // loop that scales the product by alpha even when alpha is 0, so NaN and inf in the batches
    // still reach the result; larger ones go to BLAS, which skips the product, as vnc_gemm does.
    if (alpha.toComplexDouble() == 0.0 && b1.size(2) * out.size(1) * out.size(2) < 400 && out.is_floating_point())
      const_cast<at::Tensor&>(out).add_(at::bmm(b1, b2).mul_(0));
  }
};
struct Addmv {
  template <class M>
  static void run(M& op, const at::Tensor& self, const at::Tensor& mat, const at::Tensor& vec, const at::Scalar& beta,
                  const at::Scalar& alpha, const at::Tensor& out) {
    // CPU refuses an out= partially overlapping self when it copies self into it (beta != 0);
    // mv (beta 0) computes (structured.h: the product is written through a temporary)
    if (op.mode == Mode::Out && beta.toComplexDouble() != 0.0) out_overlaps(op.outs[0], {self}, true);
    add_product("aten::addmv", self, mat, vec, beta, alpha, out);
  }
};

at::Tensor dot(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.dim() == 1 && other.dim() == 1, "1D tensors expected, but got ", self.dim(), "D and ",
              other.dim(), "D tensors");
  TORCH_CHECK(self.scalar_type() == other.scalar_type(), "dot : expected both vectors to have same dtype, but found ",
              self.scalar_type(), " and ", other.scalar_type());
  TORCH_CHECK(self.numel() == other.numel(), "inconsistent tensor size, expected tensor [", self.numel(),
              "] and src [", other.numel(), "] to have the same number of elements, but got ", self.numel(), " and ",
              other.numel(), " elements respectively");
  at::Tensor out = at::empty({}, self.options());
  gemm("aten::dot", self.unsqueeze(0), other, out.unsqueeze(0), 1.0, 0.0);
  return out;
}

// addr.out (behind addr_ and out=): PyTorch's device-generic composition (beta * self + alpha *
// outer(vec1, vec2), native ops) after ATen's CPU checks, which the composition lacks: an
// in-place self must already have the product's 2-D shape (ATen compares the two arguments by
// address, as here).
at::Tensor& addr_out(const at::Tensor& self, const at::Tensor& vec1, const at::Tensor& vec2, const at::Scalar& beta,
                     const at::Scalar& alpha, at::Tensor& result) {
  TORCH_CHECK(vec1.dim() == 1, "addr: Expected 1-D argument vec1, but got ", vec1.dim(), "-D");
  TORCH_CHECK(vec2.dim() == 1, "addr: Expected 1-D argument vec2, but got ", vec2.dim(), "-D");
  if (&result != &self) {  // CPU's refusals; the result is computed apart anyway
    out_overlaps(result, {self}, true);
    out_overlaps(result, {vec1}, true);
    out_overlaps(result, {vec2}, true);
  }
  if (&result == &self) {
    TORCH_CHECK(self.dim() == 2, "2D tensor expected, got ", self.dim(), "D tensor for input");
    TORCH_CHECK(self.size(0) == vec1.size(0) && self.size(1) == vec2.size(0), "size mismatch, input: ", self.sizes(),
                ", v1: ", vec1.sizes(), ", v2: ", vec2.sizes());
  }
  return result_into("aten::addr.out", at::addr(self, vec1, vec2, beta, alpha), result);
}

// torch.cdist's kernels, as ATen's Distance.cpp: _cdist_forward with p = 2 goes through the
// GEMM form (_euclidean_dist, native ops) when compute_mode is 1, or 0 with more than 25 rows
// on a side, else vnc_cdist on the batch-broadcast operands; _cdist_backward is x1's gradient
// (autograd calls it again with the operands swapped for x2's). CPU's direct kernels are
// float32/float64 only: other dtypes raise its NotImplementedError.
bool cdist_by_gemm(double p, int64_t mode, int64_t r1, int64_t r2) {
  return p == 2 && (mode == 1 || (mode == 0 && (r1 > 25 || r2 > 25)));
}

void check_cdist_direct_dtype(const char* name, const at::Tensor& t) {
  TORCH_CHECK_NOT_IMPLEMENTED(t.scalar_type() == at::kFloat || t.scalar_type() == at::kDouble, "\"", name,
                              "\" not implemented for '", t.scalar_type(), "'");
}

// The batch dims of x1 and x2 broadcast: (batch sizes, product).
std::pair<std::vector<int64_t>, int64_t> cdist_batch(const at::Tensor& x1, const at::Tensor& x2) {
  std::vector<int64_t> batch = at::infer_size(x1.sizes().slice(0, x1.dim() - 2), x2.sizes().slice(0, x2.dim() - 2));
  return {batch, c10::multiply_integers(batch)};
}

at::Tensor expanded(const at::Tensor& t, std::vector<int64_t> batch, int64_t product) {
  batch.push_back(t.size(-2));
  batch.push_back(t.size(-1));
  return t.expand(batch).contiguous().view({product, t.size(-2), t.size(-1)});
}

at::Tensor cdist_forward(const at::Tensor& x1, const at::Tensor& x2, double p, std::optional<int64_t> compute_mode) {
  TORCH_CHECK(x1.dim() >= 2, "cdist only supports at least 2D tensors, X1 got: ", x1.dim(), "D");
  TORCH_CHECK(x2.dim() >= 2, "cdist only supports at least 2D tensors, X2 got: ", x2.dim(), "D");
  TORCH_CHECK(x1.size(-1) == x2.size(-1), "X1 and X2 must have the same number of columns. X1: ", x1.size(-1),
              " X2: ", x2.size(-1));
  TORCH_CHECK(at::isFloatingType(x1.scalar_type()), "cdist only supports floating-point dtypes, X1 got: ",
              x1.scalar_type());
  TORCH_CHECK(at::isFloatingType(x2.scalar_type()), "cdist only supports floating-point dtypes, X2 got: ",
              x2.scalar_type());
  TORCH_CHECK(p >= 0, "cdist only supports non-negative p values");
  TORCH_CHECK(x1.device().type() == x2.device().type(), "X1 and X2 must have the same device type. X1: ",
              x1.device().type(), " X2: ", x2.device().type());
  check_same_device("aten::_cdist_forward", x1, {&x2});
  const int64_t mode = compute_mode.value_or(0);
  TORCH_CHECK(mode >= 0 && mode <= 2, "possible modes: 0, 1, 2, but was: ", mode);
  const int64_t r1 = x1.size(-2), r2 = x2.size(-2), c = x1.size(-1);
  const auto batched = cdist_batch(x1, x2);
  const std::vector<int64_t>& batch = batched.first;
  const int64_t product = batched.second;
  std::vector<int64_t> shape = batch;
  shape.push_back(r1);
  shape.push_back(r2);
  const bool gemm_form = cdist_by_gemm(p, mode, r1, r2);
  if (!gemm_form) check_cdist_direct_dtype("cdist", x1);
  if (r1 == 0 || r2 == 0 || product == 0) return at::empty(shape, x1.options());
  if (c == 0) return at::zeros(shape, x1.options());
  if (gemm_form) {
    auto with_rows = [&](int64_t r) {
      std::vector<int64_t> v = batch;
      v.push_back(r);
      v.push_back(c);
      return v;
    };
    const at::Tensor dist = product == 1 ? at::_euclidean_dist(x1, x2)
                                         : at::_euclidean_dist(x1.expand(with_rows(r1)), x2.expand(with_rows(r2)));
    return dist.view(shape);
  }
  TORCH_CHECK(x2.scalar_type() == x1.scalar_type(), "expected scalar type ", x1.scalar_type(), " but found ",
              x2.scalar_type());
  record_native("aten::_cdist_forward");
  if (x1.scalar_type() == at::kDouble) warn_float64("aten::_cdist_forward");
  const at::Tensor a = expanded(x1, batch, product), b = expanded(x2, batch, product);
  at::Tensor out = at::empty(shape, x1.options());
  c10::DeviceGuard g(x1.device());
  check(vnc_cdist(stream_of(a), "aten::_cdist_forward", product, r1, r2, c, p, static_cast<int32_t>(a.scalar_type()),
                  element_ptr(a), element_ptr(b), element_ptr(out)));
  return out;
}

at::Tensor cdist_backward(const at::Tensor& grad, const at::Tensor& x1, const at::Tensor& x2, double p,
                          const at::Tensor& cdist) {
  const int64_t r1 = x1.size(-2), r2 = x2.size(-2), c = x1.size(-1);
  auto batched = cdist_batch(x1, x2);
  std::vector<int64_t>& batch = batched.first;
  const int64_t product = batched.second;
  if (r1 == 0 || r2 == 0 || c == 0 || product == 0) return at::zeros_like(x1);
  check_cdist_direct_dtype("cdist_backward", x1);
  check_same_device("aten::_cdist_backward", x1, {&x2, &grad, &cdist});
  for (const at::Tensor* t : {&x2, &grad, &cdist})
    TORCH_CHECK(t->scalar_type() == x1.scalar_type(), "expected scalar type ", x1.scalar_type(), " but found ",
                t->scalar_type());
  const at::Tensor a = expanded(x1, batch, product), b = expanded(x2, batch, product);
  const at::Tensor go = grad.contiguous(), d = cdist.contiguous();
  TORCH_CHECK(go.numel() == product * r1 * r2 && d.numel() == go.numel(), "_cdist_backward: grad and cdist must have ",
              product * r1 * r2, " elements (", r1, " x ", r2, " per batch), got ", go.numel(), " and ", d.numel());
  record_native("aten::_cdist_backward");
  if (x1.scalar_type() == at::kDouble) warn_float64("aten::_cdist_backward");
  at::Tensor out = at::empty({product, r1, c}, x1.options());
  c10::DeviceGuard g(x1.device());
  check(vnc_cdist_backward(stream_of(a), "aten::_cdist_backward", product, r1, r2, c, p,
                           static_cast<int32_t>(a.scalar_type()), element_ptr(go), element_ptr(a), element_ptr(b),
                           element_ptr(d), element_ptr(out)));
  batch.push_back(r1);
  batch.push_back(c);
  return out.view(batch);
}

}  // namespace

// CPU's addmv, bmm and baddbmm write an expanded result without refusing it (structured.h);
// an out= tensor other than self is still refused when beta is not 0, by the copy of self
// into it (add_product), as on CPU. mm and addmm refuse it unless they only zero it
// (check_mm_result); _addmm_activation always does (its relu_/gelu_).
NEURON_WRITES_OVERLAPPING(structured_mm)
NEURON_WRITES_OVERLAPPING(structured_addmm)
NEURON_WRITES_OVERLAPPING(structured_addmv)
NEURON_WRITES_OVERLAPPING(structured_bmm)
NEURON_WRITES_OVERLAPPING(structured_baddbmm)
// CPU's kernels of these compute an out= tensor partially overlapping an input (structured.h);
// addmm and baddbmm refuse it (their copy of self into out).
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_mm)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_bmm)
NEURON_COMPUTES_PARTIAL_OVERLAP(structured_addmv)

using T = const at::Tensor&;
using S = const at::Scalar&;

// vnc_gemm computes floating and integer products; complex and bool go to the CPU fallback
// before ATen's metas run (baddbmm's meta already copies self into the output).
NEURON_LIBRARY_IMPL(m) {
  m.impl("mm", TORCH_FN((Variants<at::meta::structured_mm, T>::functional<Mm>)), kRealDtypes);
  m.impl("mm.out", TORCH_FN((Variants<at::meta::structured_mm, T>::out<Mm>)), kRealDtypes);
  m.impl("bmm", TORCH_FN((Variants<at::meta::structured_bmm, T>::functional<Bmm>)), kRealDtypes);
  m.impl("bmm.out", TORCH_FN((Variants<at::meta::structured_bmm, T>::out<Bmm>)), kRealDtypes);
  m.impl("addmm", TORCH_FN((Variants<at::meta::structured_addmm, T, T, S, S>::functional<Addmm>)), kRealDtypes);
  m.impl("addmm_", TORCH_FN((Variants<at::meta::structured_addmm, T, T, S, S>::inplace<Addmm>)), kRealDtypes);
  m.impl("addmm.out", TORCH_FN((Variants<at::meta::structured_addmm, T, T, S, S>::out<Addmm>)), kRealDtypes);
  m.impl("_addmm_activation", TORCH_FN((Variants<at::meta::structured__addmm_activation, T, T, S, S, bool>::functional<AddmmActivation>)), kRealDtypes);
  m.impl("_addmm_activation.out", TORCH_FN((Variants<at::meta::structured__addmm_activation, T, T, S, S, bool>::out<AddmmActivation>)), kRealDtypes);
  m.impl("baddbmm", TORCH_FN((Variants<at::meta::structured_baddbmm, T, T, S, S>::functional<Baddbmm>)), kRealDtypes);
  m.impl("baddbmm_", TORCH_FN((Variants<at::meta::structured_baddbmm, T, T, S, S>::inplace<Baddbmm>)), kRealDtypes);
  m.impl("baddbmm.out", TORCH_FN((Variants<at::meta::structured_baddbmm, T, T, S, S>::out<Baddbmm>)), kRealDtypes);
  m.impl("addmv", TORCH_FN((Variants<at::meta::structured_addmv, T, T, S, S>::functional<Addmv>)), kRealDtypes);
  m.impl("addmv_", TORCH_FN((Variants<at::meta::structured_addmv, T, T, S, S>::inplace<Addmv>)), kRealDtypes);
  m.impl("addmv.out", TORCH_FN((Variants<at::meta::structured_addmv, T, T, S, S>::out<Addmv>)), kRealDtypes);
  m.impl("dot", TORCH_FN(dot), kRealDtypes);
  // cdist: floating (16-bit ones only through the GEMM form); other dtypes raise CPU's errors
  m.impl("_cdist_forward", TORCH_FN(cdist_forward));
  m.impl("_cdist_backward", TORCH_FN(cdist_backward));
  m.impl("addr.out", TORCH_FN(addr_out));
}

}  // namespace torch_neuronx
