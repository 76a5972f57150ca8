// Device-level registration: caching allocator, pinned host allocator, device guard with
// streams and events, Philox generator, PrivateUse1 hooks. Each method forwards to the C
// runtime; nothing here touches tensor elements.
#include "neuron.h"
#include "gate.h"

#include <ATen/core/CachingHostAllocator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <ATen/core/GeneratorForPrivateuseone.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/CallOnce.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/node.h>
#include <torch/csrc/profiler/stubs/base.h>
#include <c10/util/ApproximateClock.h>

#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

namespace torch_neuronx {

void raise_status(vnc_status st, const char* what) {
  std::string msg = vnc_last_error();
  if (what) msg = std::string(what) + ": " + msg;
  if (st == VNC_ERR_OUT_OF_MEMORY) TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
  if (st == VNC_ERR_INDEX) TORCH_CHECK_INDEX(false, msg);
  if (st == VNC_ERR_UNSUPPORTED) throw_unsupported(msg);
  TORCH_CHECK(false, msg);
}

void* element_ptr(const at::TensorBase& t) {
  return t.defined() && t.numel() ? static_cast<char*>(t.storage().mutable_data()) +
                                        t.storage_offset() * static_cast<int64_t>(t.itemsize())
                                  : nullptr;
}

// vnc_dtype numbers equal c10::ScalarType's, so to_vnc passes the dtype by cast.
#define NEURON_SAME_DTYPE_CODE(vnc, c10) \
  static_assert(static_cast<int>(vnc) == static_cast<int>(at::ScalarType::c10), #vnc " != " #c10);
NEURON_SAME_DTYPE_CODE(VNC_UINT8, Byte)
NEURON_SAME_DTYPE_CODE(VNC_BFLOAT16, BFloat16)
NEURON_SAME_DTYPE_CODE(VNC_BITS1X8, Bits1x8)
NEURON_SAME_DTYPE_CODE(VNC_BITS16, Bits16)
NEURON_SAME_DTYPE_CODE(VNC_FLOAT8_E5M2, Float8_e5m2)
NEURON_SAME_DTYPE_CODE(VNC_FLOAT8_E4M3FNUZ, Float8_e4m3fnuz)
NEURON_SAME_DTYPE_CODE(VNC_UINT16, UInt16)
NEURON_SAME_DTYPE_CODE(VNC_UINT64, UInt64)
NEURON_SAME_DTYPE_CODE(VNC_FLOAT8_E8M0FNU, Float8_e8m0fnu)
NEURON_SAME_DTYPE_CODE(VNC_FLOAT4_E2M1FN_X2, Float4_e2m1fn_x2)
#undef NEURON_SAME_DTYPE_CODE

vnc_tensor to_vnc(const at::TensorBase& t) {
  vnc_tensor v;
  TORCH_CHECK(t.dim() <= VNC_MAX_DIMS, "neuron supports tensors of at most ", VNC_MAX_DIMS,
              " dims, got ", t.dim());
  v.data = element_ptr(t);
  v.ndim = static_cast<int32_t>(t.dim());
  v.dtype = static_cast<int32_t>(t.scalar_type());
  for (int64_t d = 0; d < t.dim(); d++) {
    v.sizes[d] = t.size(d);
    v.strides[d] = t.stride(d);
  }
  return v;
}

// ---------------------------------------------------------------- streams

vnc_stream* vnc_stream_of(const c10::Stream& s) {
  vnc_stream* out = nullptr;
  check(vnc_stream_get(s.device_index(), s.id(), &out));
  return out;
}

c10::Stream c10_stream_of(vnc_stream* s) {
  return c10::Stream(c10::Stream::UNSAFE,
                     c10::Device(kNeuron, static_cast<c10::DeviceIndex>(vnc_stream_device(s))),
                     vnc_stream_id(s));
}

vnc_stream* current_vnc_stream(c10::DeviceIndex device) {
  vnc_stream* s = nullptr;
  check(vnc_current_stream(device, &s));
  return s;
}

namespace {
vnc_status noop_task(void*) { return VNC_OK; }
void drop_storage(void* payload) {
  c10::intrusive_ptr<c10::StorageImpl>::reclaim(*static_cast<c10::StorageImpl**>(payload));
}
}  // namespace

void keep_alive_until_done(vnc_stream* stream, c10::Storage storage) {
  // The task's payload is one owning pointer; its release drops the reference.
  c10::StorageImpl* raw = storage.unsafeReleaseStorageImpl();
  check(vnc_launch(stream, "keep_alive", noop_task, &raw, sizeof raw, drop_storage));
}

// ---------------------------------------------------------------- device allocator

namespace {

// An allocation (delta > 0) or free of the caching allocator, reported to PyTorch's profiler
// while it records memory (profile_memory=True), as CUDA's caching allocator reports them.
void report_to_profiler(void* ptr, int64_t delta, int device) {
  if (!c10::memoryProfilingEnabled()) return;
  vnc_memory_stats s;
  if (vnc_memory_stats_get(device, &s) != VNC_OK) return;
  c10::reportMemoryUsageToProfiler(ptr, delta, static_cast<size_t>(s.allocated_bytes[VNC_STAT_ALL].current),
                                   static_cast<size_t>(s.reserved_bytes[VNC_STAT_ALL].current),
                                   c10::Device(kNeuron, static_cast<c10::DeviceIndex>(device)));
}

void free_block(void* ctx) {
  auto* block = static_cast<vnc_block*>(ctx);
  void* ptr = vnc_block_ptr(block);
  const int64_t size = static_cast<int64_t>(vnc_block_size(block));
  const int device = vnc_block_device(block);
  vnc_free(block);
  report_to_profiler(ptr, -size, device);
}

void fill_stat(c10::CachingAllocator::StatArray& dst, const vnc_stat* src) {
  for (int k = 0; k < VNC_STAT_KINDS; k++) {
    dst[k].current = src[k].current;
    dst[k].peak = src[k].peak;
    dst[k].allocated = src[k].allocated;
    dst[k].freed = src[k].freed;
  }
}

struct NeuronAllocator final : public c10::DeviceAllocator {
  at::DataPtr allocate(size_t n) override {
    int device = vnc_get_device();
    void* ptr = nullptr;
    vnc_block* block = nullptr;
    vnc_stream* stream = nullptr;
    if (n) stream = current_vnc_stream(static_cast<c10::DeviceIndex>(device));
    check(vnc_malloc(device, n, stream, &ptr, &block));
    if (block) report_to_profiler(ptr, static_cast<int64_t>(vnc_block_size(block)), device);
    return {ptr, block, &free_block, c10::Device(kNeuron, static_cast<c10::DeviceIndex>(device))};
  }
  at::DeleterFnPtr raw_deleter() const override { return nullptr; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    if (!count) return;
    int64_t n = static_cast<int64_t>(count);
    vnc_tensor d = vnc_tensor_contiguous(dest, VNC_UINT8, 1, &n);
    vnc_tensor s = vnc_tensor_contiguous(const_cast<void*>(src), VNC_UINT8, 1, &n);
    vnc_stream* stream = current_vnc_stream(static_cast<c10::DeviceIndex>(vnc_get_device()));
    check(vnc_copy(stream, "storage copy", &d, &s));
    check(vnc_stream_synchronize(stream));
  }
  bool initialized() override { return vnc_is_initialized(); }
  void emptyCache(c10::MempoolId_t) override {
    for (int d = 0; d < vnc_device_count(); d++) check(vnc_empty_cache(d));
  }
  void recordStream(const at::DataPtr& ptr, c10::Stream stream) override {
    if (ptr.get_deleter() != &free_block) return;
    vnc_block_record_stream(static_cast<vnc_block*>(ptr.get_context()), vnc_stream_of(stream));
  }
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    vnc_memory_stats s;
    check(vnc_memory_stats_get(device, &s));
    c10::CachingDeviceAllocator::DeviceStats out;
    fill_stat(out.allocation, s.allocation);
    fill_stat(out.segment, s.segment);
    fill_stat(out.active, s.active);
    fill_stat(out.allocated_bytes, s.allocated_bytes);
    fill_stat(out.reserved_bytes, s.reserved_bytes);
    fill_stat(out.active_bytes, s.active_bytes);
    fill_stat(out.requested_bytes, s.requested_bytes);
    out.num_alloc_retries = s.num_alloc_retries;
    out.num_ooms = s.num_ooms;
    out.num_device_alloc = s.num_device_alloc;
    out.num_device_free = s.num_device_free;
    out.num_sync_all_streams = s.num_sync_all_streams;
    return out;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override { check(vnc_memory_reset_accumulated(device)); }
  void resetPeakStats(c10::DeviceIndex device) override { check(vnc_memory_reset_peak(device)); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    vnc_memory_stats s;
    check(vnc_memory_stats_get(device, &s));
    size_t total = s.capacity, used = static_cast<size_t>(s.reserved_bytes[VNC_STAT_ALL].current);
    return {total > used ? total - used : 0, total};
  }
};

NeuronAllocator g_allocator;

// ---------------------------------------------------------------- pinned host memory

// The neuron device type's host allocator (pin_memory(), torch.accelerator's host-memory calls):
// page-aligned blocks returned to the system when freed, so there is no cache to empty.
struct PinnedAllocator final : public at::HostAllocator {
  static std::mutex& mu() { static std::mutex m; return m; }
  static std::map<uintptr_t, size_t>& ranges() { static std::map<uintptr_t, size_t> r; return r; }
  static at::HostStats& stats() { static at::HostStats s; return s; }  // guarded by mu()
  static void deleter(void* p) {
    {
      std::lock_guard<std::mutex> g(mu());
      auto it = ranges().find(reinterpret_cast<uintptr_t>(p));
      if (it != ranges().end()) {
        at::HostStats& st = stats();
        for (auto* stat : {&st.active_requests, &st.allocations}) stat->decrease(1);
        for (auto* stat : {&st.active_bytes, &st.allocated_bytes}) stat->decrease(it->second);
        st.num_host_free++;
        ranges().erase(it);
      }
    }
    std::free(p);
  }
  at::DataPtr allocate(size_t n) override {
    void* p = nullptr;
    if (n) {
      TORCH_CHECK_WITH(OutOfMemoryError, posix_memalign(&p, 4096, n) == 0,
                       "could not allocate ", n, " bytes of pinned host memory");
      std::lock_guard<std::mutex> g(mu());
      ranges()[reinterpret_cast<uintptr_t>(p)] = n;
      at::HostStats& st = stats();
      for (auto* stat : {&st.active_requests, &st.allocations}) stat->increase(1);
      for (auto* stat : {&st.active_bytes, &st.allocated_bytes}) stat->increase(n);
      st.num_host_alloc++;
    }
    return {p, p, &deleter, c10::Device(c10::DeviceType::CPU)};
  }
  bool record_event(void*, void*, c10::Stream) override { return true; }  // blocks are not reused
  void empty_cache() override {}
  at::HostStats get_stats() override {
    std::lock_guard<std::mutex> g(mu());
    return stats();
  }
  void reset_accumulated_stats() override {
    std::lock_guard<std::mutex> g(mu());
    at::HostStats& st = stats();
    for (auto* stat : {&st.active_requests, &st.active_bytes, &st.allocations, &st.allocated_bytes})
      stat->reset_accumulated();
    st.num_host_alloc = st.num_host_free = 0;
  }
  void reset_peak_stats() override {
    std::lock_guard<std::mutex> g(mu());
    at::HostStats& st = stats();
    for (auto* stat : {&st.active_requests, &st.active_bytes, &st.allocations, &st.allocated_bytes})
      stat->reset_peak();
  }
  at::DeleterFnPtr raw_deleter() const override { return &deleter; }
  void copy_data(void* dest, const void* src, std::size_t count) const override {
    std::memcpy(dest, src, count);
  }
  static bool contains(const void* p) {
    auto a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> g(mu());
    auto it = ranges().upper_bound(a);
    if (it == ranges().begin()) return false;
    --it;
    return a < it->first + it->second;
  }
};

PinnedAllocator g_pinned;
REGISTER_HOST_ALLOCATOR(at::kPrivateUse1, &g_pinned)

// ---------------------------------------------------------------- generator

struct NeuronGenerator final : public c10::GeneratorImpl {
  explicit NeuronGenerator(c10::DeviceIndex device, uint64_t seed = c10::default_rng_seed_val)
      : c10::GeneratorImpl(c10::Device(kNeuron, device), c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        seed_(seed) {}
  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    uint64_t s = c10::detail::getNonDeterministicRandom(true);
    set_current_seed(s);
    return s;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  // State layout: 16 bytes, seed (uint64) then offset (uint64) — what DTensor's
  // OffsetBasedRNGTracker reads from a Philox device.
  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == 16,
                "neuron generator state must be a uint8 tensor of 16 bytes (seed, offset), got ",
                state.numel(), " elements of ", state.dtype().name());
    const auto* p = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed_, p, 8);
    std::memcpy(&offset_, p + 8, 8);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    auto t = at::detail::empty_cpu({16}, at::kByte, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
    auto* p = static_cast<uint8_t*>(t.data_ptr());
    std::memcpy(p, &seed_, 8);
    std::memcpy(p + 8, &offset_, 8);
    return t.getIntrusivePtr();
  }
  static c10::DeviceType device_type() { return kNeuron; }

 private:
  NeuronGenerator* clone_impl() const override {
    auto* g = new NeuronGenerator(device().index(), seed_);
    g->offset_ = offset_;
    return g;
  }
  uint64_t seed_;
  uint64_t offset_ = 0;
};

std::vector<at::Generator>& default_generators() {
  static std::vector<at::Generator> gens = [] {
    std::vector<at::Generator> v;
    for (int d = 0; d < vnc_device_count(); d++)
      v.push_back(at::make_generator<NeuronGenerator>(static_cast<c10::DeviceIndex>(d)));
    return v;
  }();
  return gens;
}

// ---------------------------------------------------------------- device guard

// A device without an index means the current one.
c10::DeviceIndex index_or_current(c10::Device d) {
  return d.has_index() ? d.index() : static_cast<c10::DeviceIndex>(vnc_get_device());
}

struct NeuronGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  NeuronGuardImpl() = default;
  explicit NeuronGuardImpl(c10::DeviceType t) { TORCH_INTERNAL_ASSERT(t == kNeuron); }
  c10::DeviceType type() const override { return kNeuron; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old = getDevice();
    if (d.index() != old.index()) setDevice(d);
    return old;
  }
  c10::Device getDevice() const override {
    return c10::Device(kNeuron, static_cast<c10::DeviceIndex>(vnc_get_device()));
  }
  void setDevice(c10::Device d) const override {
    TORCH_CHECK(d.type() == kNeuron, "expected a neuron device, got ", d);
    check(vnc_set_device(d.index()));
  }
  void uncheckedSetDevice(c10::Device d) const noexcept override { vnc_set_device(d.index()); }
  // torch.accelerator.get_device_capability: the dtypes neuron tensors can be allocated in and
  // converted between (float64 stored, computed as float32; quantized and bits types: none).
  c10::DeviceCapability getDeviceCapability(c10::Device d) const override {
    check(vnc_check_device(index_or_current(d)));
    c10::DeviceCapability cap;
    cap.capability_data.capability_bits = 0;
    for (c10::ScalarType t : {c10::kByte, c10::kChar, c10::kShort, c10::kInt, c10::kLong, c10::kHalf, c10::kFloat,
                              c10::kDouble, c10::kComplexHalf, c10::kComplexFloat, c10::kComplexDouble, c10::kBool,
                              c10::kBFloat16, c10::kFloat8_e5m2, c10::kFloat8_e4m3fn, c10::kFloat8_e5m2fnuz,
                              c10::kFloat8_e4m3fnuz, c10::kFloat8_e8m0fnu, c10::kUInt16, c10::kUInt32, c10::kUInt64})
      cap.capability_data.capability_bits |= 1ULL << static_cast<int>(t);  // (bit = the enum's index)
    return cap;
  }
  c10::Stream getStream(c10::Device d) const override {
    return c10_stream_of(current_vnc_stream(index_or_current(d)));
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::DEFAULT, c10::Device(kNeuron, index_or_current(d)));
  }
  c10::Stream getNewStream(c10::Device d, int /*priority*/) const override {
    vnc_stream* s = nullptr;
    check(vnc_stream_from_pool(index_or_current(d), &s));
    return c10_stream_of(s);
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool /*high_priority*/) const override {
    return getNewStream(d, 0);
  }
  c10::Stream exchangeStream(c10::Stream s) const override {
    vnc_stream* old = current_vnc_stream(s.device_index());
    vnc_set_current_stream(vnc_stream_of(s));
    return c10_stream_of(old);
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    return static_cast<c10::DeviceIndex>(vnc_device_count());
  }
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag flag) const override {
    TORCH_CHECK(device_index == -1 || device_index == stream.device_index(), "event device ",
                static_cast<int>(device_index), " does not match the recording stream's device ",
                static_cast<int>(stream.device_index()));  // (DeviceIndex is a char: printed as one)
    auto* e = static_cast<vnc_event*>(*event);
    if (!e) {
      check(vnc_event_create(flag == c10::EventFlag::BACKEND_DEFAULT, &e));
      *event = e;
    }
    check(vnc_event_record(e, vnc_stream_of(stream)));
  }
  void block(void* event, const c10::Stream& stream) const override {
    if (event) check(vnc_stream_wait_event(vnc_stream_of(stream), static_cast<vnc_event*>(event)));
  }
  bool queryEvent(void* event) const override {
    return !event || vnc_event_query(static_cast<vnc_event*>(event));
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    vnc_event_destroy(static_cast<vnc_event*>(event));
  }
  void synchronizeEvent(void* event) const override {
    if (event) check(vnc_event_synchronize(static_cast<vnc_event*>(event)));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "both events must be recorded before calculating elapsed time");
    double ms = 0;
    check(vnc_event_elapsed_ms(static_cast<vnc_event*>(start), static_cast<vnc_event*>(end), &ms));
    return ms;
  }
  bool queryStream(const c10::Stream& stream) const override {
    return vnc_stream_query(vnc_stream_of(stream));
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    check(vnc_stream_synchronize(vnc_stream_of(stream)));
  }
  void synchronizeDevice(const c10::DeviceIndex device) const override {
    check(vnc_device_synchronize(device < 0 ? vnc_get_device() : device));
  }
  void recordDataPtrOnStream(const c10::DataPtr& ptr, const c10::Stream& stream) const override {
    g_allocator.recordStream(ptr, stream);
  }
};

// ---------------------------------------------------------------- hooks

struct NeuronHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return vnc_device_count() > 0; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return vnc_is_initialized(); }
  void init() const override {}
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return at::make_generator<NeuronGenerator>(device < 0 ? static_cast<c10::DeviceIndex>(vnc_get_device()) : device);
  }
  at::Device getDeviceFromPtr(void*) const override {
    return c10::Device(kNeuron, static_cast<c10::DeviceIndex>(vnc_get_device()));
  }
  bool isPinnedPtr(const void* p) const override { return PinnedAllocator::contains(p); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned; }
  c10::DeviceIndex deviceCount() const override { return static_cast<c10::DeviceIndex>(vnc_device_count()); }
  void setCurrentDevice(c10::DeviceIndex d) const override { check(vnc_set_device(d)); }
  c10::DeviceIndex getCurrentDevice() const override { return static_cast<c10::DeviceIndex>(vnc_get_device()); }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = getCurrentDevice();
    if (d >= 0 && d != old) setCurrentDevice(d);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override {
    auto old = getCurrentDevice();
    if (d >= 0 && d < deviceCount()) vnc_set_device(d);
    return old;
  }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    resize_storage_bytes(storage, newsize);
  }
};

// The autograd profiler's device hooks (profile(use_device="neuron"), whose legacy path needs
// them): an event is a timing-enabled runtime event recorded on the current stream, elapsed()
// the time between two in microseconds (the unit of CUDA's hooks). Marks and ranges have no
// device-side tool to go to.
struct NeuronProfilerStubs final : torch::profiler::impl::ProfilerStubs {
  using Event = torch::profiler::impl::ProfilerVoidEventStub;
  void record(c10::DeviceIndex* device, Event* event, int64_t* cpu_ns) const override {
    const int d = vnc_get_device();
    if (device) *device = static_cast<c10::DeviceIndex>(d);
    vnc_event* e = nullptr;
    check(vnc_event_create(1, &e));
    Event owned(e, [](void* p) { vnc_event_destroy(static_cast<vnc_event*>(p)); });
    if (cpu_ns) *cpu_ns = c10::getTime();
    check(vnc_event_record(e, current_vnc_stream(static_cast<c10::DeviceIndex>(d))));
    *event = std::move(owned);
  }
  float elapsed(const Event* start, const Event* end) const override {
    auto* s = static_cast<vnc_event*>(start->get());
    auto* e = static_cast<vnc_event*>(end->get());
    check(vnc_event_synchronize(s));
    check(vnc_event_synchronize(e));
    double ms = 0.0;
    check(vnc_event_elapsed_ms(s, e, &ms));
    return static_cast<float>(ms * 1000.0);
  }
  void mark(const char*) const override {}
  void rangePush(const char*) const override {}
  void rangePop() const override {}
  bool enabled() const override { return true; }
  void onEachDevice(std::function<void(int)> op) const override {
    const int current = vnc_get_device();
    for (int d = 0; d < vnc_device_count(); d++) {
      check(vnc_set_device(d));
      op(d);
    }
    check(vnc_set_device(current));
  }
  void synchronize() const override {
    for (int d = 0; d < vnc_device_count(); d++) check(vnc_device_synchronize(d));
  }
};

}  // namespace

at::Generator& default_generator(c10::DeviceIndex device) {
  auto& gens = default_generators();
  if (device < 0) device = static_cast<c10::DeviceIndex>(vnc_get_device());
  check(vnc_check_device(device));
  return gens[static_cast<size_t>(device)];
}

std::pair<uint64_t, uint64_t> philox_reserve(const std::optional<at::Generator>& gen, const c10::Device& device,
                                             int64_t numel) {
  TORCH_CHECK(device.type() == kNeuron, "Expected a '", device.type(), "' device type for generator but found '",
              gen ? gen->device().type() : kNeuron, "'");
  auto* g = at::get_generator_or_default<NeuronGenerator>(gen, default_generator(device.index()));
  std::lock_guard<std::mutex> lock(g->mutex_);
  uint64_t seed = g->current_seed(), offset = g->get_offset();
  g->set_offset(offset + vnc_rng_offset_increment(numel));
  return {seed, offset};
}

at::Allocator* pinned_allocator() { return &g_pinned; }
bool is_pinned_ptr(const void* p) { return PinnedAllocator::contains(p); }

void resize_storage_bytes(const c10::Storage& storage, size_t new_bytes) {
  c10::StorageImpl* impl = storage.unsafeGetStorageImpl();
  TORCH_CHECK(impl->resizable(), "Trying to resize storage that is not resizable");
  size_t old_bytes = impl->nbytes();
  c10::DeviceIndex device = storage.device().index();
  c10::DeviceGuard guard(storage.device());
  at::DataPtr fresh = impl->allocator()->allocate(new_bytes);
  size_t keep = std::min(old_bytes, new_bytes);
  if (keep && impl->data()) {
    int64_t n = static_cast<int64_t>(keep);
    vnc_tensor d = vnc_tensor_contiguous(fresh.get(), VNC_UINT8, 1, &n);
    vnc_tensor s = vnc_tensor_contiguous(impl->mutable_data(), VNC_UINT8, 1, &n);
    check(vnc_copy(current_vnc_stream(device), "resize_", &d, &s));
  }
  impl->set_data_ptr_noswap(std::move(fresh));  // old block freed: stream-ordered reuse
  impl->set_nbytes(new_bytes);
}

// ---------------------------------------------------------------- autograd device threads
//
// Because deviceCount() > 0, PyTorch's autograd engine runs neuron backward nodes on its own
// threads, one per device ("pt_autograd_<d>"). Each backward's GraphTask holds Python objects
// (PyTorch 2.13's _engine_run_backward stashes a contextvars.Context in the thread-local
// state the GraphTask copies; python hooks, custom Functions). The device thread drops its
// reference to the GraphTask only after it has woken the caller, so when the caller wins that
// race the device thread drops the last reference and must take the GIL to free them. If the
// interpreter starts finalising meanwhile, CPython ends the waiting thread with pthread_exit;
// the forced unwind crosses the noexcept destructors on its stack and std::terminate aborts
// the process ("terminate called without an active exception", pytorch/pytorch#38228).
// CUDA shares the race; a backward followed quickly by exit made it show here.
//
// flush_autograd_device_threads runs at Python exit (atexit), before finalisation: it sends
// one empty node through each device thread and waits for it. A device thread takes the next
// node only after releasing the previous GraphTask, so afterwards none holds a Python object.
// The node has sequence number 0, which the ready queue pops after every pending node of
// user graphs. The flush runs on a fresh C++ thread so its own GraphTask copies no Python
// thread-local state, and the GIL is released meanwhile so the device threads can take it.
namespace {
struct FlushNode final : torch::autograd::Node {
  FlushNode() : Node(/*sequence_nr=*/0) {}
  torch::autograd::variable_list apply(torch::autograd::variable_list&&) override { return {}; }
  std::string name() const override { return "torch_neuronx::AutogradThreadFlush"; }
};
}  // namespace

void flush_autograd_device_threads() {
  if (!vnc_is_initialized() || vnc_in_bad_fork()) return;  // no neuron tensor: no neuron node ran
  std::exception_ptr error;
  std::thread flusher([&error] {
    try {
      for (int d = 0; d < vnc_device_count(); d++) {
        at::Tensor grad = at::empty({0}, at::TensorOptions().device(kNeuron, static_cast<c10::DeviceIndex>(d)));
        auto node = c10::make_intrusive<FlushNode>();
        node->add_input_metadata(grad);
        torch::autograd::Engine::get_default_engine().execute({torch::autograd::Edge(node, 0)}, {grad},
                                                              /*keep_graph=*/false, /*create_graph=*/false,
                                                              /*accumulate_grad=*/true);
      }
    } catch (...) {
      error = std::current_exception();
    }
  });
  flusher.join();
  if (error) std::rethrow_exception(error);
}

void register_backend() {
  static c10::once_flag once;
  c10::call_once(once, [] {
    at::RegisterPrivateUse1HooksInterface(new NeuronHooks());
    c10::SetAllocator(kNeuron, &g_allocator);
    static c10::impl::DeviceGuardImplRegistrar reg(kNeuron, new NeuronGuardImpl());
    static NeuronProfilerStubs profiler_stubs;
    torch::profiler::impl::registerPrivateUse1Methods(&profiler_stubs);
  });
}

}  // namespace torch_neuronx
