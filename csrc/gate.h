// The dtype gate: a native kernel never refuses an input CPU PyTorch accepts.
//
// A kernel (or the runtime launch it makes) that meets a dtype or configuration it does not
// implement throws UnsupportedOnNeuron (NEURON_CHECK_SUPPORTED, or a runtime call returning
// VNC_ERR_UNSUPPORTED) before it writes anything. Every aten kernel registered through
// NEURON_LIBRARY_IMPL is wrapped so that this exception hands the call, with its original
// arguments, to the boxed CPU fallback: warned once, counted by get_fallback_ops(), and CPU's
// own result or error. Where CPU refuses the input too, the user sees CPU's exception.
//
// The wrapper costs next to nothing on the native path (a try block and a read of the
// runtime's per-thread launch counter). A kernel that has already launched work when the
// exception reaches its wrapper may have written user-visible memory, so the exception is
// rethrown instead of retried on CPU (a NotImplementedError naming the op: a bug to fix,
// never wrong data).
#pragma once

#include "neuron.h"

#include <ATen/core/boxing/impl/boxing.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <atomic>
#include <initializer_list>
#include <string>
#include <type_traits>

namespace torch_neuronx {

// What a native kernel throws for an input it does not implement (a NotImplementedError if it
// escapes a gate).
class UnsupportedOnNeuron : public c10::NotImplementedError {
  using c10::NotImplementedError::NotImplementedError;
};

[[noreturn]] void throw_unsupported(const std::string& msg);

#define NEURON_CHECK_SUPPORTED(cond, ...) \
  do {                                                                              \
    if (C10_UNLIKELY(!(cond)))                                             \
      ::torch_neuronx::throw_unsupported(::c10::str(__VA_ARGS__));                  \
  } while (0)

// The boxed CPU fallback (ops.cpp), as a boxed kernel function.
void cpu_fallback_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// While alive, the CPU fallback on this thread names `why` (the refusal) in its strict-mode error.
class FallbackReason {
 public:
  explicit FallbackReason(const std::string& why);
  ~FallbackReason();
  FallbackReason(const FallbackReason&) = delete;
  FallbackReason& operator=(const FallbackReason&) = delete;

 private:
  const std::string* previous_;
};

// The operator registered as `schema_name` ("add.Tensor") in namespace aten.
c10::OperatorHandle aten_op(const std::string& schema_name);

// A set of dtypes (bit k = at::ScalarType k): the dtypes a kernel runs natively, declared where it
// is registered. The gate hands calls whose first tensor argument has another dtype to the CPU
// fallback (which computes, or raises as CPU raises), and calls in which any tensor argument has
// a dtype neither in the set nor computed by the runtime (below).
using DtypeSet = uint64_t;
constexpr DtypeSet dtype_set(std::initializer_list<at::ScalarType> types) {
  DtypeSet s = 0;
  for (at::ScalarType t : types) s |= DtypeSet{1} << static_cast<int>(t);
  return s;
}
static_assert(static_cast<int>(at::ScalarType::NumOptions) <= 64, "a DtypeSet has a bit per dtype");
// Every dtype; the gate checks nothing (kernels that only look at or move storage: views,
// creation, copies, fills, each handling every dtype itself).
constexpr DtypeSet kAnyDtype = ~DtypeSet{0};
// The dtypes the runtime computes with (vnc_dtype_size != 0), the default native set.
constexpr DtypeSet kComputedDtypes =
    dtype_set({at::kByte, at::kChar, at::kShort, at::kInt, at::kLong, at::kHalf, at::kFloat, at::kDouble,
               at::kComplexHalf, at::kComplexFloat, at::kComplexDouble, at::kBool, at::kBFloat16});
// The dtypes the device stores but does not compute with (the runtime has no conversion or
// arithmetic loop for them, vnc_check_computed): float8, float4, uint16 to uint64, bits. CPU
// PyTorch's support for them differs per op (and for some ops per shape), so a kernel runs
// them natively only where it declares them, and declares only those CPU accepts for every
// input of the op; any other call holding one (in any tensor argument) goes to the CPU
// fallback, whose result or error is CPU's. So do dtypes outside both sets (the int1-7 and
// uint1-7 shells).
constexpr DtypeSet kFloat8Dtypes = dtype_set({at::kFloat8_e5m2, at::kFloat8_e4m3fn, at::kFloat8_e5m2fnuz,
                                              at::kFloat8_e4m3fnuz, at::kFloat8_e8m0fnu});  // AT_FLOAT8_TYPES
constexpr DtypeSet kUnsignedWideDtypes = dtype_set({at::kUInt16, at::kUInt32, at::kUInt64});  // AT_BAREBONES_UNSIGNED_TYPES
constexpr DtypeSet kBitsDtypes = dtype_set({at::kBits1x8, at::kBits2x4, at::kBits4x2, at::kBits8, at::kBits16});
constexpr DtypeSet kStoredOnlyDtypes =
    kFloat8Dtypes | kUnsignedWideDtypes | kBitsDtypes | dtype_set({at::kFloat4_e2m1fn_x2});
// For ops that only move elements (copies into slices), which CPU runs for every dtype but
// float4 whatever the input's layout.
constexpr DtypeSet kMovedDtypes = kComputedDtypes | kFloat8Dtypes | kUnsignedWideDtypes | kBitsDtypes;
// kComputedDtypes without complex32, for the ops CPU implements without it (gather, scatter,
// take, masked_scatter_, flip).
constexpr DtypeSet kComputedNoComplexHalf = kComputedDtypes & ~dtype_set({at::kComplexHalf});
constexpr DtypeSet kFloatingDtypes = dtype_set({at::kFloat, at::kDouble, at::kHalf, at::kBFloat16});
constexpr DtypeSet kIntegralDtypes = dtype_set({at::kByte, at::kChar, at::kShort, at::kInt, at::kLong});
constexpr DtypeSet kRealDtypes = kFloatingDtypes | kIntegralDtypes;  // no bool, no complex
constexpr DtypeSet kF32F64Dtypes = dtype_set({at::kFloat, at::kDouble});
inline bool in_set(DtypeSet s, at::ScalarType t) { return (s >> static_cast<int>(t)) & 1; }

// Records `schema_name`'s native dtypes for torch_neuronx._C._native_dtypes() (the op table).
void note_native_dtypes(const std::string& schema_name, DtypeSet native);
// ("aten::<schema name>", native dtypes) for every kernel registered with a dtype set.
std::vector<std::pair<std::string, std::vector<at::ScalarType>>> native_dtype_table();

// Coverage recording (the conformance harness): while on, every gated kernel notes its schema
// name when called. Off, it costs one relaxed atomic load per call.
inline std::atomic<bool> g_coverage_on{false};
void note_reached(const std::string& schema_name);
// Schema names noted since the last call ("aten::add.Tensor"); clears the record.
std::vector<std::string> take_reached();

// The first dtype in `s` among a tensor argument's tensors (a tensor, an optional one, or a list
// of them), or Undefined.
inline at::ScalarType dtype_in(DtypeSet s, const at::Tensor& t) {
  return t.defined() && in_set(s, t.scalar_type()) ? t.scalar_type() : at::ScalarType::Undefined;
}
template <class A>
at::ScalarType dtype_in(DtypeSet s, const A& a) {
  using T = std::decay_t<A>;
  if constexpr (std::is_same_v<T, std::optional<at::Tensor>>) {
    return a ? dtype_in(s, *a) : at::ScalarType::Undefined;
  } else if constexpr (std::is_same_v<T, at::TensorList> || std::is_same_v<T, at::ITensorListRef>) {
    for (const at::Tensor& t : a)
      if (dtype_in(s, t) != at::ScalarType::Undefined) return t.scalar_type();
  } else if constexpr (std::is_same_v<T, c10::List<std::optional<at::Tensor>>>) {
    for (size_t k = 0; k < a.size(); k++) {
      const std::optional<at::Tensor> t = a.get(k);
      if (t && dtype_in(s, *t) != at::ScalarType::Undefined) return t->scalar_type();
    }
  }
  return at::ScalarType::Undefined;
}
// The first dtype in `s` among all tensor arguments, or Undefined.
template <class... Args>
at::ScalarType first_dtype_in(DtypeSet s, const Args&... args) {
  at::ScalarType found = at::ScalarType::Undefined;
  ((found = found != at::ScalarType::Undefined ? found : dtype_in(s, args)), ...);
  return found;
}

// The dtype of the first tensor argument (Undefined if none).
inline at::ScalarType first_tensor_dtype() { return at::ScalarType::Undefined; }
template <class A, class... Rest>
at::ScalarType first_tensor_dtype(const A& a, const Rest&... rest) {
  if constexpr (std::is_same_v<std::decay_t<A>, at::Tensor>) {
    if (a.defined()) return a.scalar_type();
  }
  return first_tensor_dtype(rest...);
}

template <class FuncType, FuncType* func>
struct Gate;

template <class Ret, class... Args, Ret (*func)(Args...)>
struct Gate<Ret(Args...), func> {
  static Ret fallback(const std::string& schema_name, const std::string& why, Args... args) {
    FallbackReason reason(why);
    static const c10::BoxedKernel cpu = c10::BoxedKernel::makeFromFunction<&cpu_fallback_boxed>();
    return c10::impl::BoxedKernelWrapper<Ret(Args...)>::call(
        cpu, aten_op(schema_name), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1), args...);
  }

  // The kernel as registered: `func`, or the CPU fallback of `schema_name` if the first tensor
  // argument's dtype is not in `native`, or any tensor argument has a dtype neither in `native`
  // nor computed by the runtime, or if func throws UnsupportedOnNeuron before launching any work.
  static auto kernel(std::string schema_name, DtypeSet native) {
    return [schema_name, native](Args... args) -> Ret {
      if (C10_UNLIKELY(g_coverage_on.load(std::memory_order_relaxed))) note_reached(schema_name);
      if (native != kAnyDtype) {
        const at::ScalarType dt = first_tensor_dtype(args...);
        if (dt != at::ScalarType::Undefined && !in_set(native, dt))
          return fallback(schema_name, c10::str("no native kernel for ", dt), args...);
        const at::ScalarType stored = first_dtype_in(~(native | kComputedDtypes), args...);
        if (C10_UNLIKELY(stored != at::ScalarType::Undefined))
          return fallback(schema_name, c10::str("no native kernel for ", stored), args...);
      }
      const uint64_t launches = vnc_thread_launches();
      try {
        return func(args...);
      } catch (const UnsupportedOnNeuron& e) {
        if (vnc_thread_launches() != launches) throw;
        return fallback(schema_name, e.msg(), args...);
      }
    };
  }
};

// torch::Library for the aten ops of the neuron key whose impl() wraps each kernel in its Gate.
class GatedLibrary {
 public:
  explicit GatedLibrary(torch::Library& lib) : lib_(lib) {}
  // `native`: the dtypes of the first tensor argument the kernel runs natively, and the
  // stored-only dtypes it accepts in any tensor argument (default: the dtypes the runtime
  // computes with, no stored-only one).
  template <class FuncType, FuncType* func>
  GatedLibrary& impl(const char* schema_name, c10::CompileTimeFunctionPointer<FuncType, func>,
                     DtypeSet native = kComputedDtypes) {
    note_native_dtypes(schema_name, native);
    lib_.impl(schema_name, Gate<FuncType, func>::kernel(schema_name, native));
    return *this;
  }

 private:
  torch::Library& lib_;
};

}  // namespace torch_neuronx

// TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) with every m.impl(name, TORCH_FN(f)) gated.
#define NEURON_LIBRARY_IMPL(m)                                                                    \
  static void C10_CONCATENATE(neuron_library_impl_, __LINE__)(::torch_neuronx::GatedLibrary&);    \
  TORCH_LIBRARY_IMPL(aten, PrivateUse1, neuron_lib_) {                                            \
    ::torch_neuronx::GatedLibrary gated(neuron_lib_);                                             \
    C10_CONCATENATE(neuron_library_impl_, __LINE__)(gated);                                       \
  }                                                                                               \
  static void C10_CONCATENATE(neuron_library_impl_, __LINE__)(::torch_neuronx::GatedLibrary & m)
