// ATen registrations for the neuron dispatch key: tensor creation and views, copies,
// fill, random fills, and the boxed CPU fallback for every other op. Each kernel unpacks
// its tensors into vnc_tensor views and calls one runtime function.
#include "neuron.h"
#include "gate.h"

#include <ATen/Dispatch_v2.h>
#include <ATen/EmptyTensor.h>
#include <ATen/MemoryOverlap.h>
#include <ATen/TensorIterator.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/native/ResizeCommon.h>
#include <ATen/native/DistributionTemplates.h>
#include <ATen/native/Resize.h>
#include <ATen/native/TensorFactories.h>
#include <ATen/ops/_nested_view_from_buffer_native.h>
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/set_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <set>
#include <mutex>
#include <limits>
#include <unordered_map>
#include <unordered_set>

namespace torch_neuronx {

// ---------------------------------------------------------------- op tracking

namespace {

struct OpCounter {
  std::string name;
  std::atomic<int64_t> count{0};
};

struct Tracking {
  std::mutex mu;
  std::deque<OpCounter> counters;  // stable addresses
  std::unordered_map<std::string, OpCounter*> by_name;
  std::vector<std::string> fallbacks;  // one entry per invocation, up to fallback_cap()
  int64_t fallback_total = 0;
  std::unordered_set<std::string> warned;
};

// Entries kept in the fallback list; later invocations are only counted.
size_t fallback_cap() {
  static const size_t cap = [] {
    const char* v = std::getenv("TORCH_NEURONX_FALLBACK_LIST_CAP");
    long long n = v ? std::atoll(v) : 0;
    return n > 0 ? static_cast<size_t>(n) : size_t{100000};
  }();
  return cap;
}

Tracking& tracking() {
  static Tracking* t = new Tracking();  // leaked: used during interpreter teardown
  return *t;
}

thread_local bool g_paused = false;

OpCounter* counter_for(const std::string& name) {
  auto& t = tracking();
  std::lock_guard<std::mutex> g(t.mu);
  auto it = t.by_name.find(name);
  if (it != t.by_name.end()) return it->second;
  t.counters.emplace_back();
  OpCounter* c = &t.counters.back();
  c->name = name;
  t.by_name.emplace(name, c);
  return c;
}

}  // namespace

// Counts one native execution of `op`; the counter is looked up once per call site.
#define NEURON_TRACK(op)                              \
  do {                                                \
    static OpCounter* counter_ = counter_for(op);     \
    if (!g_paused) counter_->count.fetch_add(1, std::memory_order_relaxed); \
  } while (0)

namespace {
std::atomic<WarningHandler> g_warning_handler{nullptr};
}

void set_warning_handler(WarningHandler handler) { g_warning_handler = handler; }

bool user_warning(const std::string& msg, WarningKind kind) {
  if (WarningHandler h = g_warning_handler.load()) return h(msg, kind);
  TORCH_WARN(msg);
  return true;
}

// Callers pass literals or strings that live as long as the process, so each thread caches
// the counter by pointer and takes the registry's lock once per op name.
void record_native(const char* op) {
  if (g_paused) return;
  thread_local std::unordered_map<const char*, OpCounter*> cache;
  auto it = cache.find(op);
  OpCounter* c = it != cache.end() ? it->second : (cache[op] = counter_for(op));
  c->count.fetch_add(1, std::memory_order_relaxed);
}

void record_fallback(const std::string& op) {
  if (g_paused) return;
  auto& t = tracking();
  bool first;
  {
    std::lock_guard<std::mutex> g(t.mu);
    t.fallback_total++;
    if (t.fallbacks.size() < fallback_cap()) t.fallbacks.push_back(op);
    first = t.warned.insert(op).second;
  }
  if (first) user_warning("Operator '" + op + "' executed via CPU fallback", WarningKind::kFallback);
}

bool tracking_paused() { return g_paused; }
void set_tracking_paused(bool paused) { g_paused = paused; }

std::vector<std::pair<std::string, int64_t>> executed_op_counts() {
  auto& t = tracking();
  std::lock_guard<std::mutex> g(t.mu);
  std::vector<std::pair<std::string, int64_t>> out;
  for (auto& c : t.counters) {
    int64_t n = c.count.load();
    if (n) out.emplace_back(c.name, n);
  }
  return out;
}

std::vector<std::string> fallback_op_list() {
  auto& t = tracking();
  std::lock_guard<std::mutex> g(t.mu);
  return t.fallbacks;
}

int64_t fallback_op_total() {
  auto& t = tracking();
  std::lock_guard<std::mutex> g(t.mu);
  return t.fallback_total;
}

void clear_op_tracking() {
  auto& t = tracking();
  std::lock_guard<std::mutex> g(t.mu);
  for (auto& c : t.counters) c.count = 0;
  t.fallbacks.clear();
  t.fallback_total = 0;
}

// Once per process, at the first float64 op of the user's own (the handler declines those of
// PyTorch's internals, which do not count).
void warn_float64(const char* op) {
  static std::atomic<bool> warned{false};
  if (g_paused || warned.load(std::memory_order_relaxed)) return;
  if (user_warning(std::string("float64 is not natively supported on neuron: ") + op +
                       " (and every later float64 op) executed as float32 on neuron; inputs are "
                       "rounded to float32 and results stored as float64",
                   WarningKind::kFloat64))
    warned.store(true);
}

namespace {

bool strict_from_env() {
  const char* v = std::getenv("TORCH_NEURONX_STRICT");
  return v && std::strcmp(v, "1") == 0;
}
std::atomic<bool> g_strict{strict_from_env()};

}  // namespace

void set_strict_fallback(bool on) { g_strict = on; }
bool strict_fallback() { return g_strict; }

// ---------------------------------------------------------------- creation and views

namespace {

constexpr c10::DispatchKeySet kNeuronKeys(c10::DispatchKey::PrivateUse1);

c10::DeviceIndex index_of(const c10::Device& d) {
  return d.has_index() ? d.index() : static_cast<c10::DeviceIndex>(vnc_get_device());
}

void check_empty_args(std::optional<c10::Layout> layout, std::optional<bool> pin_memory) {
  TORCH_CHECK(c10::layout_or_default(layout) == c10::Layout::Strided,
              "neuron supports only the strided layout, got ", c10::layout_or_default(layout));
  TORCH_CHECK(!c10::pinned_memory_or_default(pin_memory), "only CPU tensors can be pinned");
}

// torch.utils.deterministic.fill_uninitialized_memory with deterministic algorithms: new memory of
// empty/empty_strided, and what resize_ adds to a storage, holds NaN (integers: their maximum), as
// ATen's CPU and CUDA factories fill it.
bool fill_uninitialized() {
  return at::globalContext().deterministicAlgorithms() && at::globalContext().deterministicFillUninitializedMemory();
}

at::Tensor empty_memory_format(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory,
                               std::optional<c10::MemoryFormat> memory_format) {
  check_empty_args(layout, pin_memory);
  c10::DeviceGuard guard(c10::Device(kNeuron, index_of(c10::device_or_default(device))));
  at::Tensor t = at::detail::empty_generic(C10_AS_INTARRAYREF_SLOW(size), c10::GetAllocator(kNeuron), kNeuronKeys,
                                           c10::dtype_or_default(dtype), memory_format);
  if (fill_uninitialized()) at::native::fill_empty_deterministic_(t);
  return t;
}

at::Tensor empty_strided(c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                         std::optional<at::ScalarType> dtype, std::optional<c10::Layout> layout,
                         std::optional<c10::Device> device, std::optional<bool> pin_memory) {
  check_empty_args(layout, pin_memory);
  c10::DeviceGuard guard(c10::Device(kNeuron, index_of(c10::device_or_default(device))));
  at::Tensor t = at::detail::empty_strided_generic(C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride),
                                                   c10::GetAllocator(kNeuron), kNeuronKeys, c10::dtype_or_default(dtype));
  if (fill_uninitialized()) at::native::fill_empty_deterministic_(t);
  return t;
}

at::Tensor as_strided(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride,
                      std::optional<c10::SymInt> storage_offset) {
  std::optional<int64_t> off;
  if (storage_offset) off = storage_offset->expect_int();
  return at::native::as_strided_tensorimpl(self, C10_AS_INTARRAYREF_SLOW(size),
                                           C10_AS_INTARRAYREF_SLOW(stride), off);
}

at::Tensor view(const at::Tensor& self, c10::SymIntArrayRef size) {
  return at::native::view(self, C10_AS_INTARRAYREF_SLOW(size));
}

at::Tensor reshape_alias(const at::Tensor& self, c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  return at::native::_reshape_alias(self, C10_AS_INTARRAYREF_SLOW(size), C10_AS_INTARRAYREF_SLOW(stride));
}

// aten::_efficientzerotensor, as ATen's CPU and CUDA kernels make it: a tensor of the given
// size whose storage holds no memory (a null data pointer from ATen's ZeroTensorAllocator)
// and whose key set carries ZeroTensor, so ATen's ZeroTensor kernels and fallback treat it
// as all zeros and refuse to mutate it. Forward-mode AD makes one for every tangent of a
// plain operand. The allocator lives as long as the storages that point to it: one per core.
at::Tensor efficientzerotensor(c10::SymIntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<c10::Layout> layout, std::optional<c10::Device> device,
                               std::optional<bool> pin_memory) {
  NEURON_TRACK("aten::_efficientzerotensor");
  check_empty_args(layout, pin_memory);
  const c10::Device dev(kNeuron, index_of(c10::device_or_default(device)));
  static std::mutex mu;
  static std::map<c10::DeviceIndex, at::native::ZeroTensorAllocator*> allocators;  // leaked: storages outlive exit
  at::native::ZeroTensorAllocator* allocator;
  {
    std::lock_guard<std::mutex> g(mu);
    auto& a = allocators[dev.index()];
    if (!a) a = new at::native::ZeroTensorAllocator(dev);
    allocator = a;
  }
  c10::DeviceGuard guard(dev);
  return at::detail::empty_generic(C10_AS_INTARRAYREF_SLOW(size), allocator,
                                   kNeuronKeys | c10::DispatchKeySet(c10::DispatchKey::ZeroTensor),
                                   c10::dtype_or_default(dtype), std::nullopt);
}

// Makes the storage large enough for self's sizes, strides and offset.
void ensure_storage(const at::Tensor& self) {
  size_t need = at::detail::computeStorageNbytes(self.sizes(), self.strides(), self.itemsize(),
                                                 self.storage_offset());
  if (self.numel() == 0) need = 0;
  if (need > self.storage().nbytes()) resize_storage_bytes(self.storage(), need);
}

const at::Tensor& resize_(const at::Tensor& self, c10::SymIntArrayRef size,
                          std::optional<c10::MemoryFormat> memory_format) {
  NEURON_TRACK("aten::resize_");
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  for (auto s : sizes) TORCH_CHECK(s >= 0, "resize_: negative dimension ", s, " in size ", sizes);
  auto* impl = self.unsafeGetTensorImpl();
  if (self.sizes() != sizes) impl->set_sizes_contiguous(sizes);
  if (memory_format && *memory_format != c10::MemoryFormat::Preserve)
    impl->empty_tensor_restride(*memory_format);
  const int64_t old_nbytes = static_cast<int64_t>(self.storage().nbytes());
  ensure_storage(self);
  if (fill_uninitialized()) at::native::fill_resize_deterministic_(self, old_nbytes);
  return self;
}

at::Tensor& set_storage(at::Tensor& self, at::Storage source, c10::SymInt storage_offset,
                        c10::SymIntArrayRef size, c10::SymIntArrayRef stride) {
  TORCH_CHECK(source.device() == self.device(), "set_: expected a storage on ", self.device(),
              " but got one on ", source.device());
  int64_t offset = storage_offset.expect_int();
  TORCH_CHECK(offset >= 0, "set_: storage offset must be non-negative, got ", offset);
  auto* impl = self.unsafeGetTensorImpl();
  if (!self.storage().is_alias_of(source)) impl->set_storage_keep_dtype(std::move(source));
  impl->set_storage_offset(offset);
  auto sizes = C10_AS_INTARRAYREF_SLOW(size);
  if (stride.data() == nullptr || stride.empty() && !sizes.empty())
    impl->set_sizes_contiguous(sizes);
  else
    impl->set_sizes_and_strides(sizes, C10_AS_INTARRAYREF_SLOW(stride));
  ensure_storage(self);
  return self;
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage empty(c10::Storage::use_byte_size_t(), 0, c10::GetAllocator(kNeuron), true);
  return set_storage(self, empty, 0, c10::SymIntArrayRef({c10::SymInt(0)}), {});
}

// ---------------------------------------------------------------- copies

// The same memory (storage, offset, sizes, strides) without the lazy conjugate/negative bits:
// what a kernel reads by pointer.
at::Tensor without_lazy_bits(const at::Tensor& t) {
  if (!t.is_conj() && !t.is_neg()) return t;
  at::Tensor raw(t.unsafeGetTensorImpl()->shallow_copy_and_detach(c10::VariableVersion(0), false));
  raw._set_conj(false);
  raw._set_neg(false);
  return raw;
}

// Conjugates and/or negates t's stored values in place with the device's own kernels (t has no
// lazy bits). Conjugation negates the imaginary parts: the second column of view_as_real.
void apply_lazy_bits(const at::Tensor& t, bool conj, bool neg) {
  if (conj && t.is_complex()) at::view_as_real(t).select(-1, 1).neg_();
  if (neg) t.neg_();
}

void copy_stored(const at::Tensor& s, const at::Tensor& d, bool non_blocking);

// A conversion the runtime has no loop for (from or to a stored-only dtype: float8, uint16 to
// uint64, bits): the visible CPU fallback of aten::_copy_from. Values move between host and
// device as bytes (native, same dtype) and CPU's copy_ converts them, so the results, and the
// errors for pairs CPU refuses (bits), are CPU's.
void copy_converting_on_host(const at::Tensor& s, const at::Tensor& d) {
  TORCH_CHECK_NOT_IMPLEMENTED(!g_strict, "Operator 'aten::_copy_from' has no native neuron kernel for a copy from ",
                              s.scalar_type(), " to ", d.scalar_type(),
                              " and TORCH_NEURONX_STRICT=1 forbids its CPU fallback");
  record_fallback("aten::_copy_from");
  at::Tensor hs = s;
  if (!s.is_cpu()) {
    hs = at::empty(s.sizes(), s.options().device(at::kCPU));
    copy_stored(s, hs, false);
  }
  if (d.is_cpu()) {
    d.copy_(hs);
    return;
  }
  at::Tensor hd = at::empty(d.sizes(), d.options().device(at::kCPU));
  hd.copy_(hs);
  copy_stored(hd, d, false);
}

// Copies stored values (any lazy bits are ignored) from s to d; one of them is on neuron.
void copy_stored(const at::Tensor& s, const at::Tensor& d, bool non_blocking) {
  if (s.is_complex() && !d.is_complex()) {
    TORCH_WARN_ONCE("Casting complex values to real discards the imaginary part");
  }
  if (!vnc_copy_supported(static_cast<int32_t>(d.scalar_type()), static_cast<int32_t>(s.scalar_type())))
    return copy_converting_on_host(s, d);
  vnc_tensor dv = to_vnc(d), sv = to_vnc(s);
  bool dst_dev = d.device().type() == kNeuron, src_dev = s.device().type() == kNeuron;
  if (dst_dev && src_dev) {
    c10::DeviceGuard guard(d.device());
    vnc_stream* stream = stream_of(d);
    if (d.device() == s.device()) {
      if (dv.data == sv.data && d.strides() == s.strides() && d.sizes() == s.sizes() &&
          d.scalar_type() == s.scalar_type())
        return;
      at::assert_no_internal_overlap(d);
      at::assert_no_partial_overlap(d, s);
    } else {
      // Cross-core: the copy runs on d's stream after s's pending work.
      vnc_event* ev = nullptr;
      check(vnc_event_create(0, &ev));
      vnc_status st = vnc_event_record(ev, stream_of(s));
      if (st == VNC_OK) st = vnc_stream_wait_event(stream, ev);
      vnc_event_destroy(ev);
      check(st);
      c10::impl::getDeviceGuardImpl(kNeuron)->recordDataPtrOnStream(s.storage().data_ptr(),
                                                                   c10_stream_of(stream));
    }
    check(vnc_copy(stream, "aten::copy_", &dv, &sv));
    return;
  }
  TORCH_INTERNAL_ASSERT(dst_dev || src_dev, "_copy_from called without a neuron tensor");
  at::assert_no_internal_overlap(d);  // as CPU's copy_ (a TensorIterator), to or from the host too
  const at::Tensor& dev = dst_dev ? d : s;
  const at::Tensor& host = dst_dev ? s : d;
  TORCH_CHECK(host.is_cpu(), "copy_ between ", s.device(), " and ", d.device(), " is not supported");
  c10::DeviceGuard guard(dev.device());
  vnc_stream* stream = stream_of(dev);
  check(vnc_copy(stream, "aten::copy_", &dv, &sv));
  if (non_blocking && is_pinned_ptr(host.storage().data())) {
    keep_alive_until_done(stream, host.storage());  // the copy reads/writes it later
  } else {
    check(vnc_stream_synchronize(stream));  // pageable memory: synchronous, like CUDA
  }
}

// copy_ between a neuron tensor and a neuron or CPU tensor. Lazy bits (x.conj(), x.imag of a
// conjugate, torch._neg_view) are flags over unchanged memory: dst's logical value must equal
// self's, so dst stores self's stored values conjugated where exactly one of the two has the
// conjugate bit and negated where exactly one has the negative bit (as ATen's copy_). The
// values are copied as stored and fixed up on the device by the native neg kernel; resolving
// them with resolve_conj() here would call copy_ again, without end.
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  NEURON_TRACK("aten::copy_");
  if (dst.numel() == 0) return dst;
  const bool conj = self.is_conj() != dst.is_conj() && dst.is_complex();
  const bool neg = self.is_neg() != dst.is_neg();
  const at::Tensor s = without_lazy_bits(self), d = without_lazy_bits(dst);
  if (!conj && !neg) {
    copy_stored(s, d, non_blocking);
  } else if (d.device().type() == kNeuron) {
    copy_stored(s, d, non_blocking);
    apply_lazy_bits(d, conj, neg);
  } else {  // to the host: fix the values up on the device first
    at::Tensor tmp = at::empty(s.sizes(), s.options().dtype(d.scalar_type()));
    copy_stored(s, tmp, false);
    apply_lazy_bits(tmp, conj, neg);
    copy_stored(tmp, d, non_blocking);
  }
  return dst;
}

// conj_physical: the values with their imaginary parts negated (ATen's conj_physical.out, the
// kernel behind conj_physical, _conj_physical and resolve_conj's callers); real dtypes copy.
at::Tensor& conj_physical_out(const at::Tensor& self, at::Tensor& out) {
  NEURON_TRACK("aten::conj_physical");
  result_into("aten::conj_physical.out", self, out);  // the values, then their imaginary parts negated
  if (self.is_complex()) apply_lazy_bits(without_lazy_bits(out), true, false);
  return out;
}
at::Tensor& conj_physical_(at::Tensor& self) {
  NEURON_TRACK("aten::conj_physical_");
  if (self.is_complex()) apply_lazy_bits(without_lazy_bits(self), true, false);
  return self;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  if (dst.sizes() != self.sizes()) dst.resize_(self.sizes());
  return copy_from(self, dst, false);
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  NEURON_TRACK("aten::_local_scalar_dense");
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(), " elements cannot be converted to Scalar");
  at::Tensor host = at::empty({}, self.options().device(at::kCPU));
  vnc_tensor d = to_vnc(host), s = to_vnc(self);
  s.ndim = 0;
  c10::DeviceGuard guard(self.device());
  vnc_stream* stream = stream_of(self);
  check(vnc_copy(stream, "aten::_local_scalar_dense", &d, &s));
  check(vnc_stream_synchronize(stream));
  return host.item();
}

// ---------------------------------------------------------------- fill

// Every element of self = one element's bytes (self.itemsize() of them).
void fill_bytes(at::Tensor& self, const unsigned char* bytes) {
  if (self.numel() == 0) return;
  // overlapping elements are allowed, as on CPU (they all take the value): expanded dims are
  // written once
  at::Tensor dst = self;
  for (int64_t d = 0; d < self.dim(); d++)
    if (self.stride(d) == 0) dst = dst.narrow(d, 0, 1);
  vnc_tensor t = to_vnc(dst);
  c10::DeviceGuard guard(self.device());
  check(vnc_fill(stream_of(self), "aten::fill_", &t, bytes));
}

at::Tensor& fill_scalar(at::Tensor& self, const at::Scalar& value) {
  NEURON_TRACK("aten::fill_");
  unsigned char bytes[16];
  at::ScalarType st = self.scalar_type();
  // CPU's fill_ dtypes (float64 too: a fill stores the value, exact, as copies do), with its
  // conversion of the value: checked (out of range raises), except CPU's one-element path,
  // which rounds a 16-bit float (too large: inf), as torch.scalar_tensor and Python scalars in
  // where() reach it
  const bool one = self.numel() == 1;
  AT_DISPATCH_V2(st, "fill_", AT_WRAP([&] {
                   scalar_t v;
                   if constexpr (std::is_same_v<scalar_t, at::Half> || std::is_same_v<scalar_t, at::BFloat16>)
                     v = one ? static_cast<scalar_t>(value.to<double>()) : value.to<scalar_t>();
                   else
                     v = value.to<scalar_t>();
                   std::memcpy(bytes, &v, sizeof v);
                 }),
                 AT_EXPAND(AT_ALL_TYPES_AND_COMPLEX), at::kHalf, at::kBFloat16, at::kBool, at::kComplexHalf,
                 AT_EXPAND(AT_FLOAT8_TYPES), AT_EXPAND(AT_BAREBONES_UNSIGNED_TYPES));
  fill_bytes(self, bytes);
  return self;
}

at::Tensor& fill_tensor(at::Tensor& self, const at::Tensor& value) {
  TORCH_CHECK(value.dim() == 0, "fill_ only supports 0-dimension value tensor but got tensor with ",
              value.dim(), " dimensions.");
  at::assert_no_internal_overlap(self);  // CPU PyTorch refuses what fill_.Scalar allows
  return fill_scalar(self, value.item());
}

// The bits dtypes have no value to fill with; CPU's zero_ still clears contiguous ones
// (a memset), and so does this.
at::Tensor& zero_(at::Tensor& self) {
  const bool bits = c10::isBitsType(self.scalar_type()) || self.scalar_type() == at::kFloat4_e2m1fn_x2;
  if (!bits || !self.is_contiguous()) return fill_scalar(self, 0);
  NEURON_TRACK("aten::fill_");
  const unsigned char zeros[16] = {0};
  fill_bytes(self, zeros);
  return self;
}

// ---------------------------------------------------------------- random fills
// ATen's own distribution templates (ATen/native/DistributionTemplates.h) check the arguments,
// bounds and dtypes, return early for empty tensors and draw complex tensors on their real
// view, exactly as on CPU; the kernels below only draw, on the device's Philox generator.
// A dtype CPU's kernel refuses goes to the CPU fallback (gate.h), which raises CPU's error.

namespace tmpl = at::native::templates;
struct PhiloxRNG {};  // the templates' generator type parameter; ours comes from philox_reserve

// Draws into `t` (any strides) with numel Philox counters reserved from the generator.
template <typename F>
void draw(const at::TensorBase& t, const char* op, const std::optional<at::Generator>& gen, F launch) {
  at::assert_no_internal_overlap(t);  // as CPU's kernels (those given a TensorIterator check in its build)
  if (t.numel() == 0) return;
  if (t.scalar_type() == at::kDouble) warn_float64(op);
  c10::DeviceGuard guard(t.device());
  auto [seed, offset] = philox_reserve(gen, t.device(), t.numel());
  vnc_tensor v = to_vnc(t);
  check(launch(stream_of(t), &v, seed, offset));
}

// The continuous-parameter distributions (runtime's vnc_rng_draw table), as one kernel
// template per distribution for ATen's *_impl_ templates, which call it as
// (iter, a, b, gen) (uniform, cauchy, log_normal), (self, a, b, gen) (normal) or
// (iter, a, gen) (exponential, geometric). Geometric also draws integer dtypes, as CPU.
template <vnc_rng_dist D>
struct Dist {
  static void fill(const at::TensorBase& t, double a, double b, const std::optional<at::Generator>& gen) {
    static const char* const ops[] = {"aten::uniform_",    "aten::normal_",     "aten::exponential_",
                                      "aten::cauchy_",     "aten::log_normal_", "aten::geometric_"};
    static_assert(sizeof ops / sizeof *ops == VNC_RNG_DIST_COUNT, "one op per distribution");
    const at::ScalarType st = t.scalar_type();
    NEURON_CHECK_SUPPORTED(D == VNC_RNG_GEOMETRIC ? !at::isComplexType(st) && st != at::kBool : at::isFloatingType(st),
                           ops[D] + 6, " of ", st, " tensors is not natively supported on neuron");
    draw(t, ops[D], gen, [&](vnc_stream* s, vnc_tensor* v, uint64_t seed, uint64_t off) {
      return vnc_rng_draw(s, v, D, a, b, seed, off);
    });
  }
  template <typename RNG>
  struct Kernel {
    void operator()(at::TensorIteratorBase& iter, double a, double b, std::optional<at::Generator> gen) {
      fill(iter.tensor_base(0), a, b, gen);
    }
    void operator()(const at::TensorBase& self, double a, double b, std::optional<at::Generator> gen) {
      fill(self, a, b, gen);
    }
    void operator()(at::TensorIteratorBase& iter, double a, std::optional<at::Generator> gen) {
      fill(iter.tensor_base(0), a, 0.0, gen);
    }
  };
};
template <typename RNG> using UniformKernel = Dist<VNC_RNG_UNIFORM>::Kernel<RNG>;
template <typename RNG> using NormalKernel = Dist<VNC_RNG_NORMAL>::Kernel<RNG>;
template <typename RNG> using ExponentialKernel = Dist<VNC_RNG_EXPONENTIAL>::Kernel<RNG>;
template <typename RNG> using CauchyKernel = Dist<VNC_RNG_CAUCHY>::Kernel<RNG>;
template <typename RNG> using LogNormalKernel = Dist<VNC_RNG_LOG_NORMAL>::Kernel<RNG>;
template <typename RNG> using GeometricKernel = Dist<VNC_RNG_GEOMETRIC>::Kernel<RNG>;

// Integers uniform in [base, base + range) (range 0: all 2^64 values).
void draw_integers(const at::TensorBase& t, uint64_t range, int64_t base, const std::optional<at::Generator>& gen) {
  NEURON_CHECK_SUPPORTED(!t.is_complex(), "random_ of complex tensors is not natively supported on neuron");
  draw(t, "aten::random_", gen, [&](vnc_stream* s, vnc_tensor* v, uint64_t seed, uint64_t off) {
    return vnc_rng_random(s, v, base, range, seed, off);
  });
}

template <typename RNG>
struct RandomFromToKernel {
  void operator()(at::TensorIteratorBase& iter, uint64_t range, int64_t base, std::optional<at::Generator> gen) {
    draw_integers(iter.tensor_base(0), range, base, gen);
  }
  void operator()(at::TensorIteratorBase& iter, std::optional<at::Generator> gen) {
    draw_integers(iter.tensor_base(0), 0, std::numeric_limits<int64_t>::lowest(), gen);
  }
};

// random_() without bounds: [0, 2^digits] for floating types, [0, max] for integers (as ATen).
template <typename RNG>
struct RandomKernel {
  void operator()(at::TensorIteratorBase& iter, std::optional<at::Generator> gen) {
    const at::TensorBase& t = iter.tensor_base(0);
    uint64_t range = 0;
    switch (t.scalar_type()) {
      case at::kBool: range = 2; break;
      case at::kHalf: range = (uint64_t{1} << 11) + 1; break;
      case at::kBFloat16: range = (uint64_t{1} << 8) + 1; break;
      case at::kFloat:
      case at::kDouble: range = (uint64_t{1} << 24) + 1; break;  // float64 by the float32 rule
      default:
        if (at::isIntegralType(t.scalar_type(), false))
          AT_DISPATCH_V2(t.scalar_type(), "random_", AT_WRAP([&] {
                           range = static_cast<uint64_t>(std::numeric_limits<scalar_t>::max()) + 1;
                         }), AT_EXPAND(AT_INTEGRAL_TYPES));
    }
    draw_integers(t, range, 0, gen);
  }
};

template <typename RNG>
struct BernoulliKernel {
  void operator()(const at::TensorBase& self, double p, std::optional<at::Generator> gen) {
    NEURON_CHECK_SUPPORTED(!self.is_complex(), "bernoulli_ of complex tensors is not natively supported on neuron");
    draw(self, "aten::bernoulli_", gen, [&](vnc_stream* s, vnc_tensor* t, uint64_t seed, uint64_t off) {
      return vnc_rng_bernoulli(s, t, p, nullptr, seed, off);
    });
  }
  void operator()(const at::TensorBase& self, const at::TensorBase& p_, std::optional<at::Generator> gen) {
    NEURON_CHECK_SUPPORTED(!self.is_complex() && at::isFloatingType(p_.scalar_type()), "bernoulli_ of ",
                           self.scalar_type(), " tensors with ", p_.scalar_type(),
                           " probabilities is not natively supported on neuron");
    at::assert_no_partial_overlap(self, p_);  // CPU's kernel is a TensorIterator over (self, p)
    at::Tensor p = at::Tensor(p_).to(self.device());
    vnc_tensor pv = to_vnc(p);
    draw(self, "aten::bernoulli_", gen, [&](vnc_stream* s, vnc_tensor* t, uint64_t seed, uint64_t off) {
      return vnc_rng_bernoulli(s, t, 0.0, &pv, seed, off);
    });
  }
};

at::Tensor& uniform_(at::Tensor& self, double from, double to, std::optional<at::Generator> gen) {
  NEURON_TRACK("aten::uniform_");
  return tmpl::uniform_impl_<UniformKernel, PhiloxRNG>(self, from, to, gen);
}
at::Tensor& normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  NEURON_TRACK("aten::normal_");
  return tmpl::normal_impl_<NormalKernel, PhiloxRNG>(self, mean, std, gen);
}
// normal with a tensor mean and/or std: N(0, 1) (or N(0, std)) draws scaled and shifted by
// native ops, as ATen composes them.
at::Tensor normal_tensor_float(const at::Tensor& mean, double std, std::optional<at::Generator> gen) {
  return tmpl::normal_impl<NormalKernel, PhiloxRNG>(mean, std, gen);
}
at::Tensor normal_float_tensor(double mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  return tmpl::normal_impl<NormalKernel, PhiloxRNG>(mean, std, gen);
}
at::Tensor normal_tensor_tensor(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> gen) {
  return tmpl::normal_impl<NormalKernel, PhiloxRNG>(mean, std, gen);
}
at::Tensor& normal_tensor_float_out(const at::Tensor& mean, double std, std::optional<at::Generator> gen,
                                    at::Tensor& out) {
  return tmpl::normal_out_impl<NormalKernel, PhiloxRNG>(out, mean, std, gen);
}
at::Tensor& normal_float_tensor_out(double mean, const at::Tensor& std, std::optional<at::Generator> gen,
                                    at::Tensor& out) {
  return tmpl::normal_out_impl<NormalKernel, PhiloxRNG>(out, mean, std, gen);
}
at::Tensor& normal_tensor_tensor_out(const at::Tensor& mean, const at::Tensor& std, std::optional<at::Generator> gen,
                                     at::Tensor& out) {
  return tmpl::normal_out_impl<NormalKernel, PhiloxRNG>(out, mean, std, gen);
}
at::Tensor& exponential_(at::Tensor& self, double lambd, std::optional<at::Generator> gen) {
  NEURON_TRACK("aten::exponential_");
  return tmpl::exponential_impl_<ExponentialKernel, PhiloxRNG>(self, lambd, gen);
}
at::Tensor& cauchy_(at::Tensor& self, double median, double sigma, std::optional<at::Generator> gen) {
  NEURON_TRACK("aten::cauchy_");
  return tmpl::cauchy_impl_<CauchyKernel, PhiloxRNG>(self, median, sigma, gen);
}
at::Tensor& log_normal_(at::Tensor& self, double mean, double std, std::optional<at::Generator> gen) {
  NEURON_TRACK("aten::log_normal_");
  return tmpl::log_normal_impl_<LogNormalKernel, PhiloxRNG>(self, mean, std, gen);
}
at::Tensor& geometric_(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  NEURON_TRACK("aten::geometric_");
  return tmpl::geometric_impl_<GeometricKernel, PhiloxRNG>(self, p, gen);
}
// poisson(rates): a fresh contiguous tensor of rates' dtype (as CPU's _s_poisson_cpu); a bad
// rate (negative, NaN, inf) fails the kernel with ATen's message, raised at the next
// synchronization. Its gradient (zeros) comes from autograd's own formula.
at::Tensor poisson(const at::Tensor& rates, std::optional<at::Generator> gen) {
  NEURON_TRACK("aten::poisson");
  NEURON_CHECK_SUPPORTED(at::isFloatingType(rates.scalar_type()), "poisson of ", rates.scalar_type(),
                         " tensors is not natively supported on neuron");
  at::Tensor out = at::empty(rates.sizes(), rates.options());
  vnc_tensor r = to_vnc(rates);
  draw(out, "aten::poisson", gen, [&](vnc_stream* s, vnc_tensor* t, uint64_t seed, uint64_t off) {
    return vnc_rng_poisson(s, t, &r, seed, off);
  });
  return out;
}
at::Tensor& random_from(at::Tensor& self, int64_t from, std::optional<int64_t> to, std::optional<at::Generator> gen) {
  NEURON_TRACK("aten::random_");
  return tmpl::random_from_to_impl<RandomFromToKernel, PhiloxRNG>(self, from, to, gen);
}
at::Tensor& random_to(at::Tensor& self, int64_t to, std::optional<at::Generator> gen) {
  return random_from(self, 0, to, gen);
}
at::Tensor& random_default(at::Tensor& self, std::optional<at::Generator> gen) {
  NEURON_TRACK("aten::random_");
  return tmpl::random_impl<RandomKernel, PhiloxRNG>(self, gen);
}
at::Tensor& bernoulli_scalar(at::Tensor& self, double p, std::optional<at::Generator> gen) {
  NEURON_TRACK("aten::bernoulli_");
  return tmpl::bernoulli_impl_<BernoulliKernel, PhiloxRNG>(self, p, gen);
}
at::Tensor& bernoulli_tensor(at::Tensor& self, const at::Tensor& p, std::optional<at::Generator> gen) {
  NEURON_TRACK("aten::bernoulli_");
  return tmpl::bernoulli_impl_<BernoulliKernel, PhiloxRNG>(self, p, gen);
}
// torch.bernoulli(p, out=o): ATen's bernoulli_out_impl (resize_, then o.bernoulli_(p)), so its
// draws come from the neuron generator as torch.bernoulli(p)'s do.
at::Tensor& bernoulli_out(const at::Tensor& self, std::optional<at::Generator> gen, at::Tensor& out) {
  out.resize_(self.sizes());
  return bernoulli_tensor(out, self, gen);
}

// ---------------------------------------------------------------- boxed CPU fallback

std::string device_str(const c10::Device& d) { return d.str(); }

// Calls f(tensor) for every defined tensor inside an IValue.
template <typename F>
void for_each_tensor(const c10::IValue& v, F f) {
  if (v.isTensor()) {
    if (v.toTensor().defined()) f(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList().vec())
      if (t.defined()) f(t);
  } else if (v.isList()) {
    for (const c10::IValue& e : v.toListRef())
      if (e.isTensor() && e.toTensor().defined()) f(e.toTensor());
  }
}

// Returns v with every tensor replaced by g(tensor).
template <typename G>
c10::IValue map_tensors(const c10::IValue& v, G g) {
  if (v.isTensor()) return v.toTensor().defined() ? c10::IValue(g(v.toTensor())) : v;
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor& t : v.toTensorList().vec()) out.push_back(t.defined() ? g(t) : t);
    return out;
  }
  if (v.isList() && v.type()->containedType(0)->kind() == c10::TypeKind::OptionalType) {
    c10::List<std::optional<at::Tensor>> out;
    for (const c10::IValue& e : v.toListRef())
      out.push_back(e.isTensor() ? std::optional<at::Tensor>(g(e.toTensor())) : std::nullopt);
    return out;
  }
  return v;
}

// The elements t's strides span (its largest offset + 1) when no two of its elements share
// memory (a sufficient test: each stride steps past what the smaller ones span), else -1.
int64_t distinct_span(const at::Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dims that move
  for (int64_t d = 0; d < t.dim(); d++)
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  std::sort(dims.begin(), dims.end());
  int64_t span = 1;
  for (const auto& [stride, size] : dims) {
    if (stride < span) return -1;
    span += stride * (size - 1);
  }
  return span;
}

// Whether a copy of t keeps t's strides. CPU's kernels branch on layouts (det/slogdet factorise
// A^H for a contiguous real input, and their backward reads the factors by the input's
// layout; lstsq's solution is a column-major view): a copy that keeps them meets the same
// branches. Kept unless elements share memory (expanded: copied dense) or the strides span
// more than 16x the elements and 16M (memory reserved, never touched, beyond the elements).
bool keeps_strides(const at::Tensor& t) {
  const int64_t span = distinct_span(t);
  return span >= 0 && (span <= 16 * t.numel() || span <= (int64_t{1} << 24));
}

// A copy of t on `device`, in t's strides where keeps_strides (else dense, as Tensor::to).
at::Tensor copy_keeping_strides(const at::Tensor& t, c10::Device device) {
  if (t.numel() < 2 || t.is_non_overlapping_and_dense() || !keeps_strides(t)) return t.to(device);
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(device)).copy_(t);
}

at::Tensor to_host(const at::Tensor& t, bool& saw_f64) {
  if (t.device().type() != kNeuron) return t;
  at::Tensor h = copy_keeping_strides(t, at::kCPU);
  if (h.scalar_type() == at::kDouble) {
    saw_f64 = true;
    h = h.to(at::kFloat).to(at::kDouble);  // the float64 device rule: inputs rounded to float32
  }
  return h;
}

// The host copy of an argument the op writes. A tensor whose elements share memory (expanded)
// is copied as its distinct elements expanded again, so that CPU's kernel meets the same
// aliasing: it refuses the tensor where CPU refuses one (at::assert_no_internal_overlap), or
// writes it as it writes an expanded CPU tensor.
at::Tensor to_host_written(const at::Tensor& t, bool& saw_f64) {
  if (t.device().type() != kNeuron || at::has_internal_overlap(t) != at::MemOverlap::Yes) return to_host(t, saw_f64);
  return to_host(distinct_elements(t), saw_f64).expand(t.sizes());
}

// Host copies of the neuron arguments that share memory with one the op writes (ATen's overlap
// test; where it cannot tell, sharing a storage counts), as views of one host copy of the
// memory they span: CPU's kernel then meets the sharing as it would on CPU (it refuses a
// partial overlap, or computes through it, as its LAPACK-based kernels do) instead of reading
// separate snapshots. With several dtypes over the memory, a partial overlap is refused
// (at::assert_no_partial_overlap, TensorIterator's refusal) and the copies stay separate.
struct WrittenArg {
  at::Tensor t;
  bool written;
};
std::unordered_map<const c10::TensorImpl*, at::Tensor> host_views_of_shared_memory(const std::vector<WrittenArg>& args,
                                                                                   bool& saw_f64) {
  std::unordered_map<const c10::TensorImpl*, at::Tensor> host;
  for (const auto& [w, written] : args) {
    if (!written || host.count(w.unsafeGetTensorImpl()) || w.numel() == 0) continue;
    std::vector<at::Tensor> group;
    bool shares = false, one_dtype = true;
    for (const auto& a : args) {
      if (a.t.numel() == 0 || !a.t.storage().is_alias_of(w.storage())) continue;
      group.push_back(a.t);
      shares |= a.t.unsafeGetTensorImpl() != w.unsafeGetTensorImpl() && out_overlaps(w, {a.t}, false);
      one_dtype &= a.t.scalar_type() == w.scalar_type();
    }
    if (!shares) continue;
    if (!one_dtype) {
      out_overlaps(w, group, true);
      continue;
    }
    int64_t lo = std::numeric_limits<int64_t>::max(), hi = 0;  // element span in the storage
    for (const at::Tensor& t : group) {
      int64_t end = t.storage_offset() + 1;
      for (int64_t d = 0; d < t.dim(); d++) end += (t.size(d) - 1) * t.stride(d);
      lo = std::min(lo, t.storage_offset());
      hi = std::max(hi, end);
    }
    const at::Tensor span = to_host(w.as_strided({hi - lo}, {1}, lo), saw_f64);
    for (const at::Tensor& t : group)
      host[t.unsafeGetTensorImpl()] = span.as_strided(t.sizes(), t.strides(), t.storage_offset() - lo);
  }
  return host;
}

at::Tensor round_f64(const at::Tensor& t, const char* op) {
  if (t.scalar_type() != at::kDouble) return t;
  warn_float64(op);
  return t.to(at::kFloat).to(at::kDouble);
}

bool same_alias_set(const c10::AliasInfo* a, const c10::AliasInfo* b) {
  return a && b && a->beforeSets() == b->beforeSets();
}

// Ops whose CPU fallback is running on this thread, outermost first. A fallback moves its
// arguments and results with native copies only, so an op that reaches its own fallback again
// (or a chain deeper than kMaxFallbackNesting) is a loop through a missing kernel: it raises
// instead of recursing until the stack overflows.
thread_local std::vector<std::string> g_fallback_chain;
constexpr size_t kMaxFallbackNesting = 4;

struct FallbackScope {
  explicit FallbackScope(const std::string& name) {
    bool reentered = std::find(g_fallback_chain.begin(), g_fallback_chain.end(), name) != g_fallback_chain.end();
    if (reentered || g_fallback_chain.size() >= kMaxFallbackNesting) {
      std::string chain;
      for (const auto& n : g_fallback_chain) chain += n + " -> ";
      TORCH_CHECK(false, "Operator '", name, "' re-entered the neuron CPU fallback (", chain, name,
                  "): a neuron kernel this fallback needs is missing, so it would recurse without end. "
                  "Please report this as a bug of torch_neuronx.");
    }
    g_fallback_chain.push_back(name);
  }
  ~FallbackScope() { g_fallback_chain.pop_back(); }
  FallbackScope(const FallbackScope&) = delete;
  FallbackScope& operator=(const FallbackScope&) = delete;
};

// The refusal of the native kernel this fallback stands in for (gate.h), if any.
thread_local const std::string* g_fallback_reason = nullptr;

void neuron_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const std::string name = schema.operator_name().name;
  FallbackScope scope(name);
  for (const auto& ret : schema.returns())
    TORCH_CHECK(!(ret.alias_info() && !ret.alias_info()->isWrite()), "Operator '", name,
                "' returns a view but has no neuron kernel; the CPU fallback cannot keep its "
                "aliasing. Please report this as a bug of torch_neuronx.");
  const std::string* reason = std::exchange(g_fallback_reason, nullptr);  // not for nested fallbacks
  TORCH_CHECK_NOT_IMPLEMENTED(!g_strict, "Operator '", name, "' has no native neuron kernel",
                              reason ? " for these inputs (" + *reason + ")" : std::string(),
                              " and TORCH_NEURONX_STRICT=1 forbids its CPU fallback");
  const auto& args_schema = schema.arguments();
  const size_t nargs = args_schema.size();
  const size_t base = stack->size() - nargs;

  // Devices: every neuron tensor on one core; CPU tensors only as 0-dim scalars (or indices).
  std::optional<c10::Device> target;
  bool has_neuron_tensor = false;
  for (size_t i = 0; i < nargs; i++) {
    const c10::IValue& v = (*stack)[base + i];
    if (v.isDevice() && v.toDevice().type() == kNeuron && !target)
      target = c10::Device(kNeuron, index_of(v.toDevice()));
    for_each_tensor(v, [&](const at::Tensor& t) {
      if (t.device().type() != kNeuron) return;
      has_neuron_tensor = true;
      if (!target) target = t.device();
      TORCH_CHECK(*target == t.device(), "Expected all tensors to be on the same device, but found at least two devices, ",
                  device_str(*target), " and ", device_str(t.device()), "! (in ", name, ")");
    });
  }
  if (!target) target = c10::Device(kNeuron, static_cast<c10::DeviceIndex>(vnc_get_device()));
  for (size_t i = 0; has_neuron_tensor && i < nargs; i++) {
    // CPU index tensors are read as on CUDA, CPU 0-dim tensors as scalars; a written tensor
    // (an out= `indices` too) must be on the op's device.
    const bool written = args_schema[i].alias_info() && args_schema[i].alias_info()->isWrite();
    if (!written && args_schema[i].name() == "indices") continue;
    for_each_tensor((*stack)[base + i], [&](const at::Tensor& t) {
      TORCH_CHECK(!(t.is_cpu() && (t.dim() > 0 || written)),
                  "Expected all tensors to be on the same device, but found at least two devices, ",
                  device_str(*target), " and cpu! (in ", name, ", argument '", args_schema[i].name(), "')");
    });
  }
  record_fallback(name);

  // Move arguments to the host, remembering the neuron tensors the op mutates.
  bool saw_f64 = false;
  std::vector<WrittenArg> neuron_args;
  for (size_t i = 0; i < nargs; i++) {
    const bool written = args_schema[i].alias_info() && args_schema[i].alias_info()->isWrite();
    for_each_tensor((*stack)[base + i], [&](const at::Tensor& t) {
      if (t.device().type() == kNeuron) neuron_args.push_back({t, written});
    });
  }
  const auto shared = host_views_of_shared_memory(neuron_args, saw_f64);
  std::vector<std::pair<c10::IValue, c10::IValue>> mutated;  // (original, host copy)
  for (size_t i = 0; i < nargs; i++) {
    c10::IValue& v = (*stack)[base + i];
    if (v.isDevice() && v.toDevice().type() == kNeuron) {
      v = c10::Device(at::kCPU);
      continue;
    }
    const auto* alias = args_schema[i].alias_info();
    const bool written = alias && alias->isWrite();
    c10::IValue host = map_tensors(v, [&](const at::Tensor& t) {
      auto s = shared.find(t.unsafeGetTensorImpl());
      if (s != shared.end()) return s->second;
      return written ? to_host_written(t, saw_f64) : to_host(t, saw_f64);
    });
    if (written) mutated.emplace_back(v, host);
    v = std::move(host);
  }
  if (saw_f64) warn_float64(name.c_str());

  op.callBoxed(stack);

  // Write mutated arguments back (resizing out= tensors), then move new results over.
  for (auto& [orig, host] : mutated) {
    std::vector<at::Tensor> os, hs;
    for_each_tensor(orig, [&](const at::Tensor& t) { os.push_back(t); });
    for_each_tensor(host, [&](const at::Tensor& t) { hs.push_back(t); });
    for (size_t k = 0; k < os.size() && k < hs.size(); k++) {
      if (os[k].device().type() != kNeuron) continue;
      // An expanded tensor the kernel wrote without resizing: its distinct elements.
      const at::Tensor od = distinct_elements(os[k]), hd = distinct_elements(hs[k]);
      if (od.dim() && hs[k].sizes() == os[k].sizes() && hd.sizes() == od.sizes() && od.numel() < os[k].numel()) {
        od.copy_(round_f64(hd, name.c_str()));
      } else {
        // A tensor the kernel resized takes the layout CPU's kernel gave it (its result's: a
        // transposed input's digamma into an empty out= is transposed too, lstsq's solution a
        // column-major view), where keeps_strides; _copy_from_and_resize alone would make it
        // contiguous.
        const at::Tensor h = round_f64(hs[k], name.c_str());
        if (h.sizes() != os[k].sizes() && keeps_strides(h)) {
          os[k].resize_({h.numel() == 0 ? 0 : distinct_span(h)});
          os[k].as_strided_(h.sizes(), h.strides());
        }
        at::_copy_from_and_resize(h, os[k]);
      }
    }
  }
  const auto& rets = schema.returns();
  const size_t rbase = stack->size() - rets.size();
  for (size_t r = 0; r < rets.size(); r++) {
    c10::IValue& v = (*stack)[rbase + r];
    const auto* ralias = rets[r].alias_info();
    if (ralias && ralias->isWrite()) {
      for (size_t i = 0, m = 0; i < nargs; i++) {
        const auto* aalias = args_schema[i].alias_info();
        if (!(aalias && aalias->isWrite())) continue;
        if (same_alias_set(aalias, ralias)) {
          v = mutated[m].first;
          break;
        }
        m++;
      }
      continue;
    }
    v = map_tensors(v, [&](const at::Tensor& t) { return copy_keeping_strides(round_f64(t, name.c_str()), *target); });
  }
}

}  // namespace

void check_same_device(const char* op, const at::Tensor& ref, std::initializer_list<const at::Tensor*> others) {
  for (const at::Tensor* t : others)
    TORCH_CHECK(!t->defined() || t->device() == ref.device(),
                "Expected all tensors to be on the same device, but found at least two devices, ", ref.device(), " and ",
                t->device(), "! (in ", op, ")");
}

at::Tensor empty_like_iter(std::initializer_list<at::Tensor> inputs, at::ScalarType dtype) {
  at::TensorIteratorConfig config;
  config.check_all_same_dtype(false).declare_static_dtype(dtype).add_owned_output(at::Tensor());
  for (const at::Tensor& t : inputs) config.add_const_input(t);
  return config.build().output();  // (the iterator allocates it, on the inputs' device)
}

at::Tensor laid_out_as(const at::Tensor& r, const at::Tensor& dst) {
  return r.strides() == dst.strides() ? r : dst.copy_(r);
}

at::Tensor distinct_elements(const at::Tensor& t) {
  at::Tensor r = t;
  for (int64_t d = 0; d < t.dim(); d++)
    if (t.stride(d) == 0 && t.size(d) > 1) r = r.narrow(d, 0, 1);
  return r;
}

void copy_written(const at::Tensor& out, const at::Tensor& src) {
  if (at::has_internal_overlap(out) != at::MemOverlap::Yes) {
    out.copy_(src);
    return;
  }
  at::Tensor last = src;
  for (int64_t d = 0; d < out.dim(); d++)
    if (out.stride(d) == 0 && out.size(d) > 1) last = last.narrow(d, out.size(d) - 1, 1);
  distinct_elements(out).copy_(last);
}

bool out_overlaps(const at::Tensor& out, at::ArrayRef<at::Tensor> inputs, bool refuse) {
  bool any = false;
  for (const at::Tensor& in : inputs) {
    if (!in.defined() || !out.defined()) continue;
    const at::MemOverlapStatus st = at::get_overlap_status(out, in);
    if (st == at::MemOverlapStatus::Partial && refuse) at::assert_no_partial_overlap(out, in);
    // TooHard: not both dense; they overlap only if they share a storage
    any |= st == at::MemOverlapStatus::Full || st == at::MemOverlapStatus::Partial ||
           (st == at::MemOverlapStatus::TooHard && out.storage().is_alias_of(in.storage()));
  }
  return any;
}

void resize_out(const at::Tensor& out, at::IntArrayRef sizes) {
  at::native::resize_output(out, sizes);
  at::assert_no_internal_overlap(out);
}

at::Tensor& result_into(const char* op, const at::Tensor& r, at::Tensor& out) {
  check_same_device(op, r, {&out});
  TORCH_CHECK(at::canCast(r.scalar_type(), out.scalar_type()), "result type ", r.scalar_type(),
              " can't be cast to the desired output type ", out.scalar_type());
  at::native::resize_output(out, r.sizes());
  out.copy_(r);
  return out;
}

void check_select_out(const char* op, const at::Tensor& self, const at::Tensor& index, const at::Tensor& out) {
  TORCH_CHECK(out.device() == self.device(), "Expected out tensor to have device ", self.device(), ", but got ",
              out.device(), " instead (in ", op, ")");
  at::assert_no_internal_overlap(out);
  at::assert_no_overlap(out, self);
  at::assert_no_overlap(out, index);
}

void throw_unsupported(const std::string& msg) {
  throw UnsupportedOnNeuron({__func__, __FILE__, static_cast<uint32_t>(__LINE__)}, msg);
}

void cpu_fallback_boxed(const c10::OperatorHandle& op, torch::jit::Stack* stack) { neuron_fallback(op, stack); }

namespace {
std::map<std::string, DtypeSet>& native_dtype_map() {
  static auto* m = new std::map<std::string, DtypeSet>();  // leaked: read during teardown
  return *m;
}
}  // namespace

namespace {
struct Coverage {
  std::mutex mu;
  std::set<std::string> reached;
};
Coverage& coverage() {
  static auto* c = new Coverage();  // leaked: used during teardown
  return *c;
}
}  // namespace

void note_reached(const std::string& schema_name) {
  auto& c = coverage();
  std::lock_guard<std::mutex> g(c.mu);
  c.reached.insert(schema_name);
}

std::vector<std::string> take_reached() {
  auto& c = coverage();
  std::lock_guard<std::mutex> g(c.mu);
  std::vector<std::string> out;
  for (const auto& n : c.reached) out.push_back("aten::" + n);
  c.reached.clear();
  return out;
}

void note_native_dtypes(const std::string& schema_name, DtypeSet native) {
  if (native != kComputedDtypes) native_dtype_map()[schema_name] = native;
}

std::vector<std::pair<std::string, std::vector<at::ScalarType>>> native_dtype_table() {
  std::vector<std::pair<std::string, std::vector<at::ScalarType>>> out;
  for (const auto& [name, set] : native_dtype_map()) {
    std::vector<at::ScalarType> types;  // the computed and stored-only dtypes among them
    for (int k = 0; k < static_cast<int>(at::ScalarType::NumOptions) && k < 64; k++)
      if (in_set(set & (kComputedDtypes | kStoredOnlyDtypes), static_cast<at::ScalarType>(k)))
        types.push_back(static_cast<at::ScalarType>(k));
    out.emplace_back("aten::" + name, std::move(types));
  }
  return out;
}

FallbackReason::FallbackReason(const std::string& why) : previous_(g_fallback_reason) { g_fallback_reason = &why; }
FallbackReason::~FallbackReason() { g_fallback_reason = previous_; }

c10::OperatorHandle aten_op(const std::string& schema_name) {
  const size_t dot = schema_name.find('.');
  const std::string name = "aten::" + schema_name.substr(0, dot);
  const std::string overload = dot == std::string::npos ? "" : schema_name.substr(dot + 1);
  return c10::Dispatcher::singleton().findSchemaOrThrow(name.c_str(), overload.c_str());
}

void run_cpu_fallback(const char* name, const char* overload, std::vector<c10::IValue>& stack) {
  auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
  neuron_fallback(op, &stack);
}

// Module.to() moves a parameter in place (param.data = moved, keeping the Parameter object,
// so optimizers and tied weights stay attached) only when the two tensor types are
// shallow-copy compatible. c10 knows the in-tree dense backends only and, as it documents,
// leaves PrivateUse1 to answer: dense CPU and dense neuron tensors are compatible.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto dense = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && !t.is_nested() && (t.is_cpu() || t.device().type() == kNeuron);
  };
  return self.unsafeGetTensorImpl()->has_compatible_shallow_copy_type(from.key_set()) || (dense(self) && dense(from));
}

// Tensor.record_stream: the caching allocator keeps the tensor's block from reuse until the
// work queued on `s` when the tensor is freed has run (CUDA's semantics).
void record_stream(at::Tensor& self, c10::Stream s) {
  TORCH_CHECK(s.device_type() == kNeuron, "record_stream: expected a neuron stream, got a stream of device ", s.device());
  c10::impl::getDeviceGuardImpl(kNeuron)->recordDataPtrOnStream(self.storage().data_ptr(), s);
}

NEURON_LIBRARY_IMPL(m) {
  // Storage, views, copies, fills and item(): every dtype, stored-only ones included (each
  // kernel refuses what CPU refuses itself: fill_ and item() the bits dtypes, which have no value).
  m.impl("empty.memory_format", TORCH_FN(empty_memory_format), kAnyDtype);
  m.impl("_has_compatible_shallow_copy_type", TORCH_FN(has_compatible_shallow_copy_type), kAnyDtype);
  m.impl("empty_strided", TORCH_FN(empty_strided), kAnyDtype);
  m.impl("_efficientzerotensor", TORCH_FN(efficientzerotensor), kAnyDtype);
  m.impl("as_strided", TORCH_FN(as_strided), kAnyDtype);
  m.impl("view", TORCH_FN(view), kAnyDtype);
  m.impl("_reshape_alias", TORCH_FN(reshape_alias), kAnyDtype);
  m.impl("unfold", TORCH_FN(at::native::unfold), kAnyDtype);
  m.impl("view_as_real", TORCH_FN(at::native::view_as_real), kAnyDtype);
  m.impl("view_as_complex", TORCH_FN(at::native::view_as_complex), kAnyDtype);
  m.impl("_nested_view_from_buffer", TORCH_FN(at::native::_nested_view_from_buffer), kAnyDtype);
  m.impl("resize_", TORCH_FN(resize_), kAnyDtype);
  m.impl("set_.source_Storage_storage_offset", TORCH_FN(set_storage), kAnyDtype);
  m.impl("set_.source_Storage", TORCH_FN(at::native::set_), kAnyDtype);
  m.impl("set_.source_Tensor", TORCH_FN(at::native::set_tensor_), kAnyDtype);
  m.impl("set_", TORCH_FN(set_empty), kAnyDtype);
  m.impl("is_set_to", TORCH_FN(at::native::is_set_to), kAnyDtype);  // metadata: a fallback would compare host copies
  m.impl("_copy_from", TORCH_FN(copy_from), kAnyDtype);
  m.impl("record_stream", TORCH_FN(record_stream), kAnyDtype);
  m.impl("_copy_from_and_resize", TORCH_FN(copy_from_and_resize), kAnyDtype);
  m.impl("conj_physical.out", TORCH_FN(conj_physical_out));
  m.impl("conj_physical_", TORCH_FN(conj_physical_));
  m.impl("_local_scalar_dense", TORCH_FN(local_scalar_dense), kAnyDtype);
  m.impl("fill_.Scalar", TORCH_FN(fill_scalar), kAnyDtype);
  m.impl("fill_.Tensor", TORCH_FN(fill_tensor), kAnyDtype);
  m.impl("zero_", TORCH_FN(zero_), kAnyDtype);
  m.impl("uniform_", TORCH_FN(uniform_));
  m.impl("normal_", TORCH_FN(normal_));
  m.impl("normal.Tensor_float", TORCH_FN(normal_tensor_float));
  m.impl("normal.float_Tensor", TORCH_FN(normal_float_tensor));
  m.impl("normal.Tensor_Tensor", TORCH_FN(normal_tensor_tensor));
  m.impl("normal.Tensor_float_out", TORCH_FN(normal_tensor_float_out));
  m.impl("normal.float_Tensor_out", TORCH_FN(normal_float_tensor_out));
  m.impl("normal.Tensor_Tensor_out", TORCH_FN(normal_tensor_tensor_out));
  m.impl("exponential_", TORCH_FN(exponential_));
  m.impl("cauchy_", TORCH_FN(cauchy_));
  m.impl("log_normal_", TORCH_FN(log_normal_));
  m.impl("geometric_", TORCH_FN(geometric_));
  m.impl("poisson", TORCH_FN(poisson));
  m.impl("random_.from", TORCH_FN(random_from));
  m.impl("random_.to", TORCH_FN(random_to));
  m.impl("random_", TORCH_FN(random_default));
  m.impl("bernoulli_.float", TORCH_FN(bernoulli_scalar));
  m.impl("bernoulli_.Tensor", TORCH_FN(bernoulli_tensor));
  m.impl("bernoulli.out", TORCH_FN(bernoulli_out));
}

// _copy_from is where copies to and from neuron end (ATen's copy_ hands every device it does
// not know to it). ATen's Conjugate and Negative fallbacks would resolve its lazy-bit arguments
// with clone(), which copies through _copy_from again, without end; copy_from handles the
// bits itself, so the two keys pass it through, as they pass copy_.
TORCH_LIBRARY_IMPL(aten, Conjugate, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}
TORCH_LIBRARY_IMPL(aten, Negative, m) {
  m.impl("_copy_from", torch::CppFunction::makeFallthrough());
  m.impl("_copy_from_and_resize", torch::CppFunction::makeFallthrough());
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&neuron_fallback>());
}

// Ops whose ATen kernel is a device-generic (CompositeExplicitAutograd) wrapper that still
// refuses neuron: mode.values accepts CPU, CUDA and XPU tensors only; kaiser_window (each
// overload calls the same C++ function, not the op) reaches a DispatchStub that has CPU and
// CUDA kernels only (an internal assert elsewhere). The visible CPU fallback runs CPU's whole
// kernel instead (its checks, resize and writes included). Each is noted with no native dtype
// (the op table and the conformance harness count it as a fallback, not a native kernel).
TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  for (const char* op : {"mode.values", "kaiser_window", "kaiser_window.periodic", "kaiser_window.beta"}) {
    note_native_dtypes(op, DtypeSet{0});
    m.impl(op, torch::CppFunction::makeFromBoxedFunction<&neuron_fallback>());
  }
}

// Sparse and quantized tensors do not exist on neuron: say so, and what to do instead, instead
// of PyTorch's "could not run" error. (Nested tensors: nested.cpp.)
void unsupported_sparse(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op.schema().operator_name(),
                              ": sparse tensors are not supported on neuron (dense tensors only). nn.Embedding and "
                              "nn.EmbeddingBag need sparse=False.");
}
void unsupported_quantized(const c10::OperatorHandle& op, torch::jit::Stack*) {
  TORCH_CHECK_NOT_IMPLEMENTED(false, op.schema().operator_name(),
                              ": quantized tensors (qint8, quint8, qint32, ...) are not supported on neuron (dense "
                              "tensors only): keep them on the CPU, or dequantize() before moving to neuron. Fake "
                              "quantization (torch.fake_quantize_per_tensor_affine, quantization-aware training) "
                              "works on neuron tensors.");
}
TORCH_LIBRARY_IMPL(_, SparsePrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&unsupported_sparse>());
}
TORCH_LIBRARY_IMPL(_, SparseCsrPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&unsupported_sparse>());
}
TORCH_LIBRARY_IMPL(_, QuantizedPrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&unsupported_quantized>());
}

}  // namespace torch_neuronx
