// Functional / in-place / out= variants of ATen's structured ops for the neuron key.
//
// ATen defines each structured op as a meta function (shapes, dtypes, argument checks —
// for elementwise ops a TensorIterator build) plus a per-backend impl. The code PyTorch
// generates for CPU and CUDA wraps them into three kernels; Variants<Meta, Args...> does the
// same for neuron: it runs ATen's own meta (so semantics and error messages are PyTorch's)
// and hands the prepared op to an Impl that launches a runtime kernel.
#pragma once

#include "neuron.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/native/Resize.h>

#include <array>
#include <optional>
#include <type_traits>

namespace torch_neuronx {

// Placeholder: the output is one broadcast element, for metas used only for the geometry
// they compute (never written).
enum class Mode { Functional, Inplace, Out, Placeholder };

// An out= or in-place result whose elements share memory (an expanded, stride-0 view) is
// refused with ATen's "more than one element of the written-to tensor refers to a single
// memory location" (at::assert_no_internal_overlap), as CPU's kernels refuse it: a
// TensorIterator meta checks in its own build (where the op wants it); every other meta's
// output is checked here, after its resize. A meta whose CPU kernel writes such a tensor
// without refusing it (each shared element then holds whichever write came last, depending
// on the order of the writes) is marked with NEURON_WRITES_OVERLAPPING(meta), next to its
// registration (tests/test_internal_overlap.py compares each with CPU).
template <class Meta>
struct WritesOverlapping : std::false_type {};
#define NEURON_WRITES_OVERLAPPING(META) \
  template <>                           \
  struct WritesOverlapping<at::meta::META> : std::true_type {};

// An out= tensor that overlaps an input the kernel reads (Structured::reads; metas other than
// TensorIterators, which check overlaps in their build) is written through a temporary, so
// that the kernel never reads what it has written; one that overlaps it partially is refused
// first with ATen's "some elements of the input tensor and the written-to
// tensor refer to a single memory location" (at::assert_no_partial_overlap), as most CPU
// kernels refuse it (scans, sorts, top-k, reductions with indices, addmm, index_add, scatter),
// except for the metas marked NEURON_COMPUTES_PARTIAL_OVERLAP next to their registration, whose
// CPU kernels compute through it (softmax, bmm, tril/triu, pooling): those get the values of
// the call without overlap (tests/test_internal_overlap.py compares every OpInfo with CPU).
template <class Meta>
struct ComputesPartialOverlap : std::false_type {};
#define NEURON_COMPUTES_PARTIAL_OVERLAP(META) \
  template <>                                 \
  struct ComputesPartialOverlap<at::meta::META> : std::true_type {};

template <class Meta, size_t N = 1>
struct Structured final : Meta {
  Mode mode;
  std::array<at::Tensor, N> outs;
  std::array<std::optional<at::Tensor>, N> proxies;
  // The inputs the kernel reads (set before the meta, Mode::Out): an out= tensor sharing memory
  // with one is written through a temporary (out_overlaps), as the kernels read their inputs
  // while they write.
  std::vector<at::Tensor> reads;

  explicit Structured(Mode m) : mode(m) {}
  Structured(Mode m, std::array<at::Tensor, N> given) : mode(m), outs(std::move(given)) {}

  void set_output_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                          at::TensorOptions options) override {
    prepare(i, sizes, strides, options);
  }
  void set_output_raw_strided(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides,
                              at::TensorOptions options) override {
    prepare(i, sizes, strides, options);
  }
  const at::Tensor& maybe_get_output(int64_t i) override {
    return proxies[i] ? *proxies[i] : outs[i];
  }
  // Writes every out= tensor not yet written through a temporary through a contiguous one (for
  // kernels that need what the outs' own strides do not give, such as equal strides).
  void through_temporaries() {
    for (size_t i = 0; i < N; i++)
      if (!proxies[i]) proxies[i] = at::empty(outs[i].sizes(), outs[i].options());
  }
  // Copies proxies (temporaries with the strides the op wanted) back into out= tensors.
  void finish() {
    for (size_t i = 0; i < N; i++)
      if (proxies[i]) copy_written(outs[i], *proxies[i]);
  }

 private:
  void prepare(int64_t i, at::IntArrayRef sizes, at::IntArrayRef strides, at::TensorOptions options) {
    at::Tensor& out = outs[i];
    if (mode == Mode::Functional) {
      out = strides.empty() ? at::empty(sizes, options) : at::empty_strided(sizes, strides, options);
    } else if (mode == Mode::Placeholder) {
      out = at::empty({1}, options).expand(sizes);
    } else {
      if (mode == Mode::Out) {
        TORCH_CHECK(options.dtype() == out.dtype(), "Expected out tensor to have dtype ",
                    options.dtype(), ", but got ", out.dtype(), " instead");
        TORCH_CHECK(options.device() == out.device(), "Expected out tensor to have device ",
                    options.device(), ", but got ", out.device(), " instead");
        if (at::native::resize_output(out, sizes)) {
          if (!strides.empty()) out.as_strided_(sizes, strides);
          else if (options.memory_format_opt()) out.unsafeGetTensorImpl()->empty_tensor_restride(*options.memory_format_opt());
        }
      } else {
        TORCH_CHECK(options.dtype() == out.dtype(), "Bad in-place call: input tensor dtype ",
                    out.dtype(), " and output tensor dtype ", options.dtype(), " should match");
        TORCH_CHECK(options.device() == out.device(), "Bad in-place call: input tensor device ",
                    out.device(), " and output tensor device ", options.device(), " should match");
        TORCH_CHECK(sizes == out.sizes(), "Bad in-place call: input tensor size ", out.sizes(),
                    " and output tensor size ", sizes, " should match");
      }
      if constexpr (!std::is_base_of_v<at::TensorIteratorBase, Meta> && !WritesOverlapping<Meta>::value)
        at::assert_no_internal_overlap(out);
      // (a TensorIterator meta checks overlaps in its build and writes the out= tensor itself)
      const bool overlaps = !std::is_base_of_v<at::TensorIteratorBase, Meta> && mode == Mode::Out &&
                            out_overlaps(out, reads, !ComputesPartialOverlap<Meta>::value);
      if (overlaps || (!strides.empty() && out.strides() != strides))
        proxies[i] = strides.empty() ? at::empty(sizes, options) : at::empty_strided(sizes, strides, options);
    }
    if constexpr (std::is_base_of_v<at::TensorIteratorBase, Meta>)
      Meta::set_output_raw_strided(i, sizes, strides, options);
  }
};

// Arguments as the meta functions take them: optional Scalars/Tensors by reference wrapper.
template <class A>
const A& to_meta(const A& a) { return a; }
inline at::OptionalScalarRef to_meta(const std::optional<at::Scalar>& s) {
  return s ? at::OptionalScalarRef(&*s) : at::OptionalScalarRef();
}
inline at::OptionalTensorRef to_meta(const std::optional<at::Tensor>& t) {
  return t && t->defined() ? at::OptionalTensorRef(*t) : at::OptionalTensorRef();
}

// Impl: a type with static run(Pre& pre, const at::Tensor& self, Args... args, const at::Tensor& out),
// where `pre` is the Structured op itself, or, for metas that precompute values (a wrapped
// dim, index geometry), the struct the meta returned.
// An Impl may declare static precheck(self, args...): it runs before the meta, for refusals
// (NEURON_CHECK_SUPPORTED) that must precede the meta's own device work (an input's dtype
// conversion), so that the gate can still hand the call to the CPU fallback.
template <class Impl, class = void>
struct HasPrecheck : std::false_type {};
template <class Impl>
struct HasPrecheck<Impl, std::void_t<decltype(&Impl::precheck)>> : std::true_type {};

inline void add_read(std::vector<at::Tensor>& reads, const at::Tensor& t) { reads.push_back(t); }
inline void add_read(std::vector<at::Tensor>& reads, const std::optional<at::Tensor>& t) {
  if (t) reads.push_back(*t);
}
template <class A>
void add_read(std::vector<at::Tensor>&, const A&) {}

template <class Meta, class... Args>
struct Variants {
  template <class Impl>
  static void invoke(Structured<Meta>& op, const at::Tensor& self, Args... args) {
    if constexpr (HasPrecheck<Impl>::value) Impl::precheck(self, args...);
    if constexpr (std::is_void_v<decltype(op.meta(self, to_meta(args)...))>) {
      op.meta(self, to_meta(args)...);
      Impl::run(op, self, args..., op.maybe_get_output(0));
    } else {
      auto pre = op.meta(self, to_meta(args)...);
      Impl::run(pre, self, args..., op.maybe_get_output(0));
    }
  }
  template <class Impl>
  static at::Tensor functional(const at::Tensor& self, Args... args) {
    Structured<Meta> op(Mode::Functional);
    invoke<Impl>(op, self, args...);
    return std::move(op.outs[0]);
  }
  template <class Impl>
  static at::Tensor& inplace(at::Tensor& self, Args... args) {
    Structured<Meta> op(Mode::Inplace, {self});
    invoke<Impl>(op, self, args...);
    op.finish();
    return self;
  }
  template <class Impl>
  static at::Tensor& out(const at::Tensor& self, Args... args, at::Tensor& result) {
    Structured<Meta> op(Mode::Out, {result});
    op.reads = {self};
    (add_read(op.reads, args), ...);
    invoke<Impl>(op, self, args...);
    op.finish();
    return result;
  }
};

}  // namespace torch_neuronx
