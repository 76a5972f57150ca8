// The torch.distributed backend of the neuron device ("neuron"): a c10d::Backend whose
// transport is PyTorch's own Gloo over TCP. The Gloo groups are created in Python (the wheel
// ships no Gloo headers) and driven here through the c10d::Backend interface only.
//
// Memory: device memory is host memory, so a contiguous neuron tensor is handed to Gloo as a
// CPU tensor aliasing its buffer (no copy); a strided or offset view is staged through a
// contiguous host buffer and copied back, so Gloo never reads or writes outside the view.
//
// Ordering (a device backend's stream semantics): a collective records its device's current
// stream and the number of tasks enqueued there so far (the producer ticket) and is queued on
// the group's communication thread. That thread waits for the ticket (the host does not),
// checks the collective's fingerprint against the other ranks and starts the Gloo collective;
// Gloo's completion callback copies staged outputs back and completes the work. Work::wait()
// puts a runtime hold on the caller's current stream, released at completion (failing with the
// collective's error): the stream waits, the host runs on, and a failure is raised at the next
// synchronisation naming the collective (as a failed kernel is). One collective of a group is
// in flight at a time, in call order; one that is ready when called starts on the caller's
// thread.
//
// Safety: Gloo aborts the process (an exception on its transport thread) when a rank receives
// more bytes than it posted, and silently mixes up dtypes of equal size. Before a collective
// reaches the data group, its fingerprint (op, dtype, element count, root, reduce op, shapes,
// sequence number) is compared across ranks on a second Gloo group of fixed-size messages,
// which cannot mismatch. A fingerprint equal to the one the common history predicts (the one
// that followed the previous fingerprint last time) skips the exchange: all ranks make the
// same prediction, so ranks whose calls differ cannot all skip, and the data group never
// pairs mismatched calls (at worst the exchange times out). Point-to-point messages carry a
// fixed-size header (dtype, element count) received and checked before the data is posted.
#include "neuron.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/utils/pybind.h>

#include <pybind11/chrono.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <tuple>
#include <mutex>
#include <numeric>
#include <optional>
#include <shared_mutex>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace torch_neuronx {
namespace {

namespace py = pybind11;
using c10d::OpType;
using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

// Python's exit. Once the interpreter has begun to shut down, Python ends any thread that takes
// the GIL (pthread_exit, which unwinding through C++ frames turns into std::terminate). Our
// threads (and Gloo's, in our callbacks) may hold the last reference of a tensor whose Python
// object C++ owns, and releasing it takes the GIL: a script that ends with a collective in
// flight (an exception mid-step, no destroy_process_group) would abort. An atexit hook
// (torch_neuronx.distributed) closes this gate before the shutdown starts, waiting for
// releases in progress; from then on such references are kept until the process ends.
std::shared_mutex g_exit_m;
bool g_python_exiting = false;

// Runs `release` (which may drop Python-owned references) unless Python is exiting, in which
// case `keep` is called to leak them instead; returns whether `release` ran.
template <class Release, class Keep>
bool release_unless_exiting(Release&& release, Keep&& keep) {
  std::shared_lock<std::shared_mutex> g(g_exit_m);
  if (g_python_exiting) {
    keep();
    return false;
  }
  release();
  return true;
}

// ---------------------------------------------------------------- completion

// Completion state of one collective, shared by its job and its Work.
struct Completion {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::string error;  // empty on success
  // The Work's future, made by the first getFuture() (most collectives are never asked), and
  // what completing it needs: the output tensors (held from then on only: our threads should
  // not be the last owners of tensors) and the stream its events are recorded on.
  c10::intrusive_ptr<c10::ivalue::Future> future;
  std::vector<at::Tensor> outputs;
  c10::DeviceIndex device = -1;
  vnc_stream* stream = nullptr;

  std::vector<vnc_hold*> holds;  // streams waiting for this collective

  // Marks completion and releases the streams; returns the future to complete, if one was
  // made already.
  c10::intrusive_ptr<c10::ivalue::Future> finish(std::string err) {
    c10::intrusive_ptr<c10::ivalue::Future> fut;
    std::vector<vnc_hold*> waiting;
    {
      std::lock_guard<std::mutex> g(m);
      if (done) return fut;
      done = true;
      error = std::move(err);
      fut = future;
      waiting.swap(holds);
    }
    cv.notify_all();
    for (vnc_hold* h : waiting) release(h);
    return fut;
  }
  void add_hold(vnc_hold* h) {
    {
      std::lock_guard<std::mutex> g(m);
      if (!done) {
        holds.push_back(h);
        return;
      }
    }
    release(h);
  }
  void release(vnc_hold* h) {
    std::string err = failure();
    vnc_hold_release(h, err.empty() ? VNC_OK : VNC_ERR_KERNEL, err.c_str());
  }
  // Completes `fut` (on the calling thread, whose current stream of `device` must be `stream`).
  void complete(const c10::intrusive_ptr<c10::ivalue::Future>& fut) {
    std::string err = failure();
    if (!err.empty()) {
      fut->setErrorIfNeeded(std::make_exception_ptr(std::runtime_error(err)));
      return;
    }
    try {
      fut->markCompleted(c10::IValue(outputs));
    } catch (const std::exception&) {
      fut->setErrorIfNeeded(std::current_exception());
    }
  }
  c10::intrusive_ptr<c10::ivalue::Future> get_future(const std::vector<at::Tensor>& values) {
    c10::intrusive_ptr<c10::ivalue::Future> fut;
    bool complete_now;
    {
      std::lock_guard<std::mutex> g(m);
      if (future) return future;
      outputs = values;
      auto type = c10::ListType::create(c10::TensorType::get());
      future = device >= 0 ? c10::make_intrusive<c10::ivalue::Future>(
                                 type, std::vector<c10::Device>{c10::Device(kNeuron, device)})
                           : c10::make_intrusive<c10::ivalue::Future>(type);
      fut = future;
      complete_now = done;
    }
    if (complete_now) complete(fut);  // events recorded on the caller's current stream
    return fut;
  }
  // Waits until done or `deadline`; returns whether done.
  bool wait(std::optional<Clock::time_point> deadline) {
    std::unique_lock<std::mutex> lk(m);
    if (!deadline) {
      cv.wait(lk, [&] { return done; });
      return true;
    }
    return cv.wait_until(lk, *deadline, [&] { return done; });
  }
  bool is_done() {
    std::lock_guard<std::mutex> g(m);
    return done;
  }
  std::string failure() {  // empty while pending or after success
    std::lock_guard<std::mutex> g(m);
    return done ? error : std::string();
  }
};

// Makes `stream` wait for `c`: a runtime hold that the collective's completion releases (from
// Gloo's thread, which then wakes the stream's waiters directly), failing with the collective's
// error (sticky, prefixed by `op`). Under NEURON_LAUNCH_BLOCKING=1 the host waits instead and
// the error is raised here.
void stream_wait(vnc_stream* stream, const char* op, const std::shared_ptr<Completion>& c) {
  if (vnc_launch_blocking()) {
    c->wait(std::nullopt);
    std::string err = c->failure();
    TORCH_CHECK(err.empty(), op, ": ", err);
    return;
  }
  vnc_hold* h = nullptr;
  check(vnc_stream_hold(stream, op, &h));
  c->add_hold(h);
}

// ---------------------------------------------------------------- serial worker thread

// One thread running posted functions in order; started on the first post. The destructor
// runs what is queued, then joins.
class SerialWorker {
 public:
  ~SerialWorker() { stop(); }
  void post(std::function<void()> fn) {
    std::lock_guard<std::mutex> g(m_);
    if (!thread_.joinable()) thread_ = std::thread([this] { loop(); });
    queue_.push_back(std::move(fn));
    cv_.notify_one();
  }
  void stop() {
    {
      std::lock_guard<std::mutex> g(m_);
      stopping_ = true;
      cv_.notify_one();
    }
    if (thread_.joinable()) thread_.join();
  }
  // Nothing queued or running (stays so while the caller holds whatever serialises post()).
  bool idle() {
    std::lock_guard<std::mutex> g(m_);
    return queue_.empty() && !running_;
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lk(m_);
    for (;;) {
      cv_.wait(lk, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;
      auto fn = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
      lk.unlock();
      fn();
      lk.lock();
      running_ = false;
    }
  }
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false, running_ = false;
  std::thread thread_;
};

// Python's name of a dtype ("torch.int16"), for messages.
std::string dname(at::ScalarType t) {
  switch (t) {
#define NAME(st, py) \
  case at::ScalarType::st: return "torch." py;
    NAME(Float, "float32") NAME(Double, "float64") NAME(Half, "float16") NAME(BFloat16, "bfloat16")
    NAME(Long, "int64") NAME(Int, "int32") NAME(Short, "int16") NAME(Char, "int8") NAME(Byte, "uint8")
    NAME(Bool, "bool") NAME(ComplexFloat, "complex64") NAME(ComplexDouble, "complex128")
    NAME(UInt16, "uint16") NAME(UInt32, "uint32") NAME(UInt64, "uint64")
    NAME(Float8_e4m3fn, "float8_e4m3fn") NAME(Float8_e5m2, "float8_e5m2")
#undef NAME
    default: return c10::toString(t);
  }
}
std::string dname(int64_t code) {
  return code >= 0 && code < static_cast<int64_t>(at::ScalarType::NumOptions) ? dname(static_cast<at::ScalarType>(code))
                                                                              : "none";
}

// ---------------------------------------------------------------- host views of device tensors

// Dtypes Gloo handles natively (ProcessGroupGloo's type switch); data-movement collectives
// carry any other dtype as bytes.
bool gloo_dtype(at::ScalarType t) {
  switch (t) {
    case at::kFloat: case at::kDouble: case at::kHalf: case at::kBFloat16: case at::kLong:
    case at::kInt: case at::kChar: case at::kByte: case at::kBool:
      return true;
    default:
      return false;
  }
}

enum Role { kIn = 1, kOut = 2, kInOut = 3, kScratchIn = 4 };

// What Gloo reads and writes for a set of device tensors: CPU aliases of contiguous ones, or
// contiguous host copies of strided ones (copied in before the collective, back after it).
// kScratchIn always copies: Gloo uses a reduce's input on non-root ranks as scratch space.
class Staging {
 public:
  std::atomic<int64_t>* staged_counter = nullptr;

  at::Tensor add(const at::Tensor& t, int role, bool as_bytes = false) {
    View v;
    auto opts = t.options().device(at::kCPU);
    void* p = element_ptr(t);
    if (t.numel() == 0) {
      v.host = at::empty(t.sizes(), opts);
    } else if (t.is_contiguous() && role != kScratchIn) {
      v.host = at::from_blob(p, t.sizes(), opts);
    } else {
      v.alias = at::from_blob(p, t.sizes(), t.strides(), opts);
      v.host = at::empty(t.sizes(), opts);
      v.role = role;
      if (staged_counter) (*staged_counter)++;
    }
    views_.push_back(v);
    return as_bytes ? bytes(v.host) : v.host;
  }
  std::vector<at::Tensor> add_all(const std::vector<at::Tensor>& ts, int role, bool as_bytes = false) {
    std::vector<at::Tensor> out;
    for (const auto& t : ts) out.push_back(add(t, role, as_bytes));
    return out;
  }
  void copy_in() {
    for (auto& v : views_)
      if (v.alias.defined() && (v.role & (kIn | kScratchIn))) v.host.copy_(v.alias);
  }
  void copy_out() {
    for (auto& v : views_)
      if (v.alias.defined() && (v.role & kOut)) v.alias.copy_(v.host);
  }
  // A contiguous tensor as uint8 rows: dim 0 kept (all-to-all splits count rows), the rest
  // flattened into bytes.
  static at::Tensor bytes(const at::Tensor& host) {
    int64_t rows = host.dim() ? host.size(0) : 1;
    if (host.numel() == 0) return at::empty({rows, 0}, at::kByte);
    return host.reshape({rows, -1}).view(at::kByte);
  }

 private:
  struct View {
    at::Tensor host, alias;
    int role = 0;
  };
  std::vector<View> views_;
};

// ---------------------------------------------------------------- fingerprints

constexpr int kFields = 8;
using Record = std::array<int64_t, kFields>;
// Field 0 (the sequence number) is left out of the signature the skip prediction compares.
using Signature = std::array<int64_t, kFields - 1>;
const char* const kFieldNames[kFields] = {"collective number", "collective",  "dtype",
                                          "number of elements", "root rank", "reduce op",
                                          "tensor shape",      "number of tensors"};

int64_t shape_hash(const std::vector<at::Tensor>& ts) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a (Fowler, Noll, Vo), 64-bit
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; i++) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (const auto& t : ts) {
    mix(static_cast<uint64_t>(t.dim()));
    for (int64_t s : t.sizes()) mix(static_cast<uint64_t>(s));
  }
  return static_cast<int64_t>(h >> 1);
}

int64_t total_numel(const std::vector<at::Tensor>& ts) {
  int64_t n = 0;
  for (const auto& t : ts) n += t.numel();
  return n;
}

// ---------------------------------------------------------------- jobs and work

// A failure of this rank's call that leaves the ranks in step (a p2p message that did not fit
// was received and discarded): reported as any failure (at the Work or the stream's next
// synchronisation), but the group stays usable.
struct CallError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct Job {
  const char* name = "";       // Python-level name: "all_reduce"
  const char* stream_op = "";  // dispatcher op of the collective: "c10d::allreduce_"
  OpType type = OpType::UNKNOWN;
  c10::DeviceIndex device = -1;
  vnc_stream* producer = nullptr;  // the caller's current stream on `device`
  uint64_t ticket = 0;             // ... and its enqueue count at the call
  Record record{};                 // fingerprint; field 0 is the collective's number
  bool check = true;               // compare the fingerprint (point-to-point: no)
  bool cacheable = true;           // may skip the comparison when predicted
  bool contiguous = true;          // no staging copies (may be issued on the caller's thread)
  std::vector<int64_t> counts;     // all-to-all: elements sent to / received from each rank
  // Stages inputs and starts the Gloo collective (null: finished synchronously); `after`
  // post-processes the host buffers once Gloo completed, before staged outputs are copied back.
  std::function<c10::intrusive_ptr<c10d::Work>(Job&)> start;
  std::function<void()> after;
  Staging staging;
  std::vector<at::Tensor> keep;  // device tensors in use until completion
  std::vector<at::Tensor> outputs;
  std::shared_ptr<Completion> done = std::make_shared<Completion>();
  std::shared_ptr<std::atomic<int>> source = std::make_shared<std::atomic<int>>(-1);  // recv
};

class NeuronWork : public c10d::Work {
 public:
  NeuronWork(int rank, const Job& job, bool host_wait, uint64_t seq)
      : c10d::Work(rank, job.type),
        done_(job.done),
        outputs_(job.outputs),
        stream_op_(job.stream_op),
        device_(job.device),
        host_wait_(host_wait),
        seq_(seq),
        source_(job.source) {}

  int sourceRank() const override { return source_->load(); }

  bool isCompleted() override { return done_->is_done(); }
  bool isSuccess() const override { return done_->is_done() && done_->failure().empty(); }
  std::exception_ptr exception() const override {
    std::string err = done_->failure();
    return err.empty() ? nullptr : std::make_exception_ptr(std::runtime_error(err));
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  uint64_t getSequencenumber() const override { return seq_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return done_->get_future(outputs_); }

  // Device semantics: the current stream waits (the host returns at once). A barrier, or a
  // wait with a timeout, blocks the host instead, up to the timeout.
  bool wait(ms timeout) override {
    if (host_wait_ || timeout != kNoTimeout || device_ < 0) {
      std::optional<Clock::time_point> deadline;
      if (timeout != kNoTimeout) deadline = Clock::now() + timeout;
      bool finished;
      {
        std::optional<py::gil_scoped_release> nogil;  // Python's Work.wait already released it
        if (PyGILState_Check()) nogil.emplace();
        finished = done_->wait(deadline);
      }
      TORCH_CHECK(finished, stream_op_, ": Work.wait timed out after ", timeout.count(),
                  " ms (the collective is still running)");
      rethrow();
      return true;
    }
    rethrow();
    if (!done_->is_done()) stream_wait(current_vnc_stream(device_), stream_op_, done_);
    return true;
  }
  void synchronize() override { wait(kNoTimeout); }
  void blockCurrentStream() override {
    if (device_ >= 0 && !done_->is_done()) stream_wait(current_vnc_stream(device_), stream_op_, done_);
  }

 private:
  void rethrow() {
    std::string err = done_->failure();
    TORCH_CHECK(err.empty(), err);
  }
  std::shared_ptr<Completion> done_;
  std::vector<at::Tensor> outputs_;
  const char* stream_op_;
  c10::DeviceIndex device_;
  bool host_wait_;
  uint64_t seq_;
  std::shared_ptr<std::atomic<int>> source_;
};

// ---------------------------------------------------------------- the backend

const char* reduce_op_name(c10d::ReduceOp::RedOpType op) {
  static const char* const names[] = {"SUM", "AVG",  "PRODUCT", "MIN",       "MAX",
                                      "BAND", "BOR", "BXOR",    "PREMUL_SUM", "UNUSED"};
  return op <= c10d::ReduceOp::UNUSED ? names[op] : "?";
}

class NeuronBackend : public c10d::Backend {
 public:
  NeuronBackend(c10::intrusive_ptr<c10d::Backend> data, c10::intrusive_ptr<c10d::Backend> meta, int rank,
                int size, ms timeout, std::string group_name)
      : c10d::Backend(rank, size),
        data_(std::move(data)),
        meta_(std::move(meta)),
        options_(c10::make_intrusive<Options>("neuron", timeout)) {
    options_->group_name = std::move(group_name);
    init();
  }

  ~NeuronBackend() override { shutdown(); }

  const std::string getBackendName() const override { return "neuron"; }
  c10::intrusive_ptr<Options> getBackendOptions() override { return options_; }
  void setTimeout(ms timeout) override {
    options_->timeout = timeout;
    if (data_) data_->setTimeout(timeout);
    if (meta_) meta_->setTimeout(timeout);
  }
  void setSequenceNumberForGroup() override {}
  uint64_t getSequenceNumberForGroup() override { return seq_.load(); }
  void eagerConnectSingleDevice(at::Device) override {}  // Gloo connected at construction
  bool supportsSplitting() const override { return true; }

  // dist.split_group: a new backend over new Gloo groups on the split's store, made by the same
  // Python code as init_process_group's (nullptr on ranks outside `ranks`).
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store, const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<Options>& opts) override {
    auto it = std::find(ranks.begin(), ranks.end(), rank_);
    if (it == ranks.end()) return nullptr;
    int group_rank = static_cast<int>(it - ranks.begin());
    ms timeout = opts ? opts->timeout : options_->timeout;
    std::string name = opts ? opts->group_name : std::string();
    py::gil_scoped_acquire gil;
    py::object make = py::module_::import("torch_neuronx.distributed").attr("_make_backend");
    py::object backend = make(store, group_rank, static_cast<int>(ranks.size()), timeout, name);
    return backend.cast<c10::intrusive_ptr<c10d::Backend>>();
  }

  // Stops the threads after the queued work (each bounded by the group's timeout), then drops
  // the Gloo groups. All of it without the GIL: our threads and Gloo's may need it to run
  // Python callbacks or to free tensors whose Python objects C++ keeps alive, and Gloo's
  // destructor joins its threads.
  void shutdown() override {
    std::optional<py::gil_scoped_release> nogil;
    if (Py_IsInitialized() && PyGILState_Check()) nogil.emplace();
    {
      std::lock_guard<std::mutex> g(m_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (comm_thread_.joinable()) comm_thread_.join();
    std::unique_lock<std::mutex> lk(m_);  // a job started on a caller's thread may be in flight
    cv_.wait(lk, [&] { return !busy_; });
    lk.unlock();
    {
      std::lock_guard<std::mutex> g(peers_m_);
      peers_stopped_ = true;
    }
    for (auto& [key, worker] : peers_) worker->stop();
    waiter_.stop();
    completion_.stop();
    data_.reset();
    meta_.reset();
  }

  std::map<std::string, int64_t> stats() {
    return {{"collectives", static_cast<int64_t>(seq_.load())},
            {"fingerprint_exchanges", exchanges_.load()},
            {"fingerprint_skips", skips_.load()},
            {"staged_tensors", staged_.load()},
            {"p2p_messages", p2p_.load()}};
  }

  // ---- collectives

  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override {
    Job job = make_job("all_reduce", "c10d::allreduce_", OpType::ALLREDUCE, tensors, {}, tensors);
    auto reduce = reduction("all_reduce", tensors, opts.reduceOp, job);
    job.record[3] = total_numel(tensors);
    job.start = [this, t = tensors[0], reduce, timeout = opts.timeout](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      Staging& st = job.staging;
      at::Tensor h = st.add(t, kInOut);
      st.copy_in();
      c10d::AllreduceOptions o;
      o.reduceOp = reduce.gloo_op;
      o.timeout = timeout;
      std::vector<at::Tensor> v{reduce.complex ? at::view_as_real(h) : h};
      job.after = [reduce, h]() mutable { reduce.scale(h); };
      return data_->allreduce(v, o);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(std::vector<at::Tensor>& tensors,
                                                     const c10d::AllreduceCoalescedOptions& opts) override {
    Job job = make_job("all_reduce_coalesced", "c10d::allreduce_coalesced_", OpType::ALLREDUCE_COALESCED, tensors,
                       {}, tensors);
    auto reduce = reduction("all_reduce_coalesced", tensors, opts.reduceOp, job);
    job.start = [this, tensors, reduce, timeout = opts.timeout](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      Staging& st = job.staging;
      std::vector<at::Tensor> hs, v;
      hs = st.add_all(tensors, kInOut);
      for (const auto& h : hs) v.push_back(reduce.complex ? at::view_as_real(h) : h);
      st.copy_in();
      c10d::AllreduceCoalescedOptions o;
      o.reduceOp = reduce.gloo_op;
      o.timeout = timeout;
      job.after = [reduce, hs]() mutable {
        for (auto& h : hs) reduce.scale(h);
      };
      if (v.empty()) return {};
      return data_->allreduce_coalesced(v, o);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors, const c10d::ReduceOptions& opts) override {
    Job job = make_job("reduce", "c10d::reduce_", OpType::REDUCE, tensors, {}, tensors);
    check_root("reduce", opts.rootRank);
    auto reduce = reduction("reduce", tensors, opts.reduceOp, job);
    job.record[4] = opts.rootRank;
    bool root = opts.rootRank == rank_;
    if (!root) job.contiguous = false;  // scratch copy
    job.start = [this, t = tensors[0], reduce, root, opts](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      Staging& st = job.staging;
      at::Tensor h = st.add(t, root ? kInOut : kScratchIn);
      st.copy_in();
      c10d::ReduceOptions o = opts;
      o.reduceOp = reduce.gloo_op;
      std::vector<at::Tensor> v{reduce.complex ? at::view_as_real(h) : h};
      if (root) job.after = [reduce, h]() mutable { reduce.scale(h); };
      return data_->reduce(v, o);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override {
    Job job = make_job("broadcast", "c10d::broadcast_", OpType::BROADCAST, tensors, {}, tensors);
    check_root("broadcast", opts.rootRank);
    job.record[3] = total_numel(tensors);
    job.record[4] = opts.rootRank;
    bool root = opts.rootRank == rank_;
    job.start = [this, t = tensors[0], root, opts](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      Staging& st = job.staging;
      std::vector<at::Tensor> v{st.add(t, root ? kIn : kOut, true)};
      st.copy_in();
      return data_->broadcast(v, opts);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override {
    TORCH_CHECK_VALUE(outputs.size() == 1, "all_gather: expected one list of output tensors, got ", outputs.size());
    TORCH_CHECK_VALUE(inputs.size() == 1, "all_gather: expected one input tensor, got ", inputs.size());
    auto& outs = outputs[0];
    Job job = make_job("all_gather", "c10d::allgather_", OpType::ALLGATHER, inputs, outs, outs);
    check_list("all_gather", "tensor_list", outs, inputs[0]);
    job.record[3] = inputs[0].numel();
    job.start = [this, outs, in = inputs[0], opts](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      Staging& st = job.staging;
      std::vector<at::Tensor> vi{st.add(in, kIn, true)};
      std::vector<std::vector<at::Tensor>> vo{st.add_all(outs, kOut, true)};
      st.copy_in();
      return data_->allgather(vo, vi, opts);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override {
    std::vector<at::Tensor> in{input}, out{output};
    Job job = make_job("all_gather_into_tensor", "c10d::_allgather_base_", OpType::_ALLGATHER_BASE, in, out, out);
    check_flat("all_gather_into_tensor", "output_tensor", output, input);
    job.record[3] = input.numel();
    job.start = [this, output, input, opts](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      Staging& st = job.staging;
      at::Tensor hi = st.add(input, kIn, true).reshape({-1}), ho = st.add(output, kOut, true).reshape({-1});
      st.copy_in();
      return data_->_allgather_base(ho, hi, opts);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::AllgatherOptions& opts) override {
    Job job = make_job("all_gather_into_tensor_coalesced", "c10d::allgather_into_tensor_coalesced_",
                       OpType::COALESCED, inputs, outputs, outputs);
    TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "all_gather_into_tensor_coalesced: ", outputs.size(),
                      " outputs for ", inputs.size(), " inputs");
    for (size_t i = 0; i < inputs.size(); i++) check_flat("all_gather_into_tensor_coalesced", "an output", outputs[i], inputs[i]);
    job.record[3] = total_numel(inputs);
    job.start = [this, outputs, inputs, opts](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      Staging& st = job.staging;
      std::vector<at::Tensor> vi = st.add_all(inputs, kIn, true), vo = st.add_all(outputs, kOut, true);
      st.copy_in();
      if (vi.empty()) return {};
      for (auto* list : {&vi, &vo})  // flat: the stacked (world size, ...) form included
        for (auto& t : *list) t = t.reshape({-1});
      return data_->allgather_into_tensor_coalesced(vo, vi, opts);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override {
    std::vector<at::Tensor> flat_out;
    for (auto& l : outputs) flat_out.insert(flat_out.end(), l.begin(), l.end());
    Job job = make_job("all_gather_coalesced", "c10d::allgather_coalesced_", OpType::ALLGATHER_COALESCED, inputs,
                       flat_out, flat_out);
    TORCH_CHECK_VALUE(outputs.size() == static_cast<size_t>(size_), "all_gather_coalesced: expected ", size_,
                      " output lists (one per rank), got ", outputs.size());
    for (const auto& l : outputs) {
      TORCH_CHECK_VALUE(l.size() == inputs.size(), "all_gather_coalesced: each output list needs ", inputs.size(),
                        " tensors, got ", l.size());
      for (size_t i = 0; i < l.size(); i++)
        TORCH_CHECK_VALUE(l[i].numel() == inputs[i].numel() && l[i].scalar_type() == inputs[i].scalar_type(),
                          "all_gather_coalesced: output tensor ", i, " must match input ", i, " (",
                          inputs[i].numel(), " elements of ", dname(inputs[i].scalar_type()), ")");
    }
    job.record[3] = total_numel(inputs);
    job.start = [this, outputs, inputs, opts](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      Staging& st = job.staging;
      std::vector<at::Tensor> vi = st.add_all(inputs, kIn, true);
      std::vector<std::vector<at::Tensor>> vo;
      for (const auto& l : outputs) vo.push_back(st.add_all(l, kOut, true));
      st.copy_in();
      if (vi.empty()) return {};
      return data_->allgather_coalesced(vo, vi, opts);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs, const c10d::GatherOptions& opts) override {
    TORCH_CHECK_VALUE(inputs.size() == 1, "gather: expected one input tensor, got ", inputs.size());
    bool root = check_root("gather", opts.rootRank);
    auto outs = root_list("gather", "gather_list", outputs, root, inputs[0]);
    Job job = make_job("gather", "c10d::gather_", OpType::GATHER, inputs, outs, outs);
    job.record[3] = inputs[0].numel();
    job.record[4] = opts.rootRank;
    job.start = [this, outs, in = inputs[0], root, opts](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      std::vector<at::Tensor> vi{job.staging.add(in, kIn, true)};
      std::vector<std::vector<at::Tensor>> vo;
      if (root) vo.push_back(job.staging.add_all(outs, kOut, true));
      job.staging.copy_in();
      return data_->gather(vo, vi, opts);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override {
    TORCH_CHECK_VALUE(outputs.size() == 1, "scatter: expected one output tensor, got ", outputs.size());
    bool root = check_root("scatter", opts.rootRank);
    auto ins = root_list("scatter", "scatter_list", inputs, root, outputs[0]);
    Job job = make_job("scatter", "c10d::scatter_", OpType::SCATTER, ins, outputs, outputs);
    job.record[3] = outputs[0].numel();
    job.record[4] = opts.rootRank;
    job.start = [this, ins, out = outputs[0], root, opts](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      std::vector<at::Tensor> vo{job.staging.add(out, kOut, true)};
      std::vector<std::vector<at::Tensor>> vi;
      if (root) vi.push_back(job.staging.add_all(ins, kIn, true));
      job.staging.copy_in();
      return data_->scatter(vo, vi, opts);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override {
    TORCH_CHECK_VALUE(inputs.size() == 1 && outputs.size() == 1,
                      "reduce_scatter: expected one output tensor and one list of input tensors");
    Job job = make_job("reduce_scatter", "c10d::reduce_scatter_", OpType::REDUCE_SCATTER, inputs[0], outputs, outputs);
    check_list("reduce_scatter", "input_list", inputs[0], outputs[0]);
    auto reduce = reduction("reduce_scatter", outputs, opts.reduceOp, job);
    job.record[3] = outputs[0].numel();
    job.start = [this, ins = inputs[0], out = outputs[0], reduce, opts](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      Staging& st = job.staging;
      at::Tensor ho = st.add(out, kOut);
      std::vector<at::Tensor> vo{reduce.complex ? at::view_as_real(ho) : ho};
      std::vector<std::vector<at::Tensor>> vi(1);
      for (const auto& t : ins) {
        at::Tensor h = st.add(t, kIn);
        vi[0].push_back(reduce.complex ? at::view_as_real(h) : h);
      }
      st.copy_in();
      c10d::ReduceScatterOptions o = opts;
      o.reduceOp = reduce.gloo_op;
      job.after = [reduce, ho]() mutable { reduce.scale(ho); };
      return data_->reduce_scatter(vo, vi, o);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(at::Tensor& output, at::Tensor& input,
                                                      const c10d::ReduceScatterOptions& opts) override {
    std::vector<at::Tensor> in{input}, out{output};
    Job job = make_job("reduce_scatter_tensor", "c10d::_reduce_scatter_base_", OpType::_REDUCE_SCATTER_BASE, in,
                       out, out);
    check_flat("reduce_scatter_tensor", "input", input, output);
    auto reduce = reduction("reduce_scatter_tensor", out, opts.reduceOp, job);
    job.record[3] = output.numel();
    job.start = [this, output, input, reduce, opts](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      Staging& st = job.staging;
      at::Tensor hi = st.add(input, kIn), ho = st.add(output, kOut);
      st.copy_in();
      c10d::ReduceScatterOptions o = opts;
      o.reduceOp = reduce.gloo_op;
      at::Tensor gi = (reduce.complex ? at::view_as_real(hi) : hi).reshape({-1});
      at::Tensor go = (reduce.complex ? at::view_as_real(ho) : ho).reshape({-1});
      job.after = [reduce, ho]() mutable { reduce.scale(ho); };
      return data_->_reduce_scatter_base(go, gi, o);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(std::vector<at::Tensor>& outputs,
                                                                 std::vector<at::Tensor>& inputs,
                                                                 const c10d::ReduceScatterOptions& opts) override {
    Job job = make_job("reduce_scatter_tensor_coalesced", "c10d::reduce_scatter_tensor_coalesced_",
                       OpType::REDUCE_SCATTER_TENSOR_COALESCED, inputs, outputs, outputs);
    TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "reduce_scatter_tensor_coalesced: ", outputs.size(),
                      " outputs for ", inputs.size(), " inputs");
    for (size_t i = 0; i < inputs.size(); i++) check_flat("reduce_scatter_tensor_coalesced", "an input", inputs[i], outputs[i]);
    auto reduce = reduction("reduce_scatter_tensor_coalesced", outputs, opts.reduceOp, job);
    job.record[3] = total_numel(outputs);
    job.start = [this, outputs, inputs, reduce, opts](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      Staging& st = job.staging;
      std::vector<at::Tensor> hi, ho, gi, go;
      hi = st.add_all(inputs, kIn);
      ho = st.add_all(outputs, kOut);
      for (const auto& h : hi) gi.push_back((reduce.complex ? at::view_as_real(h) : h).reshape({-1}));
      for (const auto& h : ho) go.push_back((reduce.complex ? at::view_as_real(h) : h).reshape({-1}));
      st.copy_in();
      c10d::ReduceScatterOptions o = opts;
      o.reduceOp = reduce.gloo_op;
      job.after = [reduce, ho]() mutable {
        for (auto& h : ho) reduce.scale(h);
      };
      if (gi.empty()) return {};
      return data_->reduce_scatter_tensor_coalesced(go, gi, o);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& outputCounts, std::vector<int64_t>& inputCounts,
                                               const c10d::AllToAllOptions& opts) override {
    std::vector<at::Tensor> in{input}, out{output};
    Job job = make_job("all_to_all_single", "c10d::alltoall_base_", OpType::ALLTOALL_BASE, in, out, out);
    TORCH_CHECK_VALUE(input.dim() >= 1 || (inputCounts.empty() && outputCounts.empty()),
                      "all_to_all_single: split sizes need tensors with at least one dim");
    auto rows = [&](const at::Tensor& t, const std::vector<int64_t>& counts, const char* what) {
      std::vector<int64_t> c = counts;
      int64_t dim0 = t.dim() ? t.size(0) : 1;
      if (c.empty()) {
        TORCH_CHECK_VALUE(dim0 % size_ == 0, "all_to_all_single: ", what, " dim 0 (", dim0,
                          ") must divide evenly by the world size ", size_, " when no split sizes are given");
        c.assign(size_, dim0 / size_);
      }
      TORCH_CHECK_VALUE(c.size() == static_cast<size_t>(size_), "all_to_all_single: ", what,
                        "_split_sizes must have ", size_, " entries (one per rank), got ", c.size());
      int64_t sum = 0;
      for (int64_t v : c) {
        TORCH_CHECK_VALUE(v >= 0, "all_to_all_single: ", what, "_split_sizes must not be negative");
        sum += v;
      }
      TORCH_CHECK_VALUE(sum == dim0, "all_to_all_single: ", what, "_split_sizes sum to ", sum, " but the ", what,
                        " has ", dim0, " rows in dim 0");
      return c;
    };
    auto in_rows = rows(input, inputCounts, "input"), out_rows = rows(output, outputCounts, "output");
    int64_t in_row = input.dim() && input.size(0) ? input.numel() / input.size(0) : 1;
    int64_t out_row = output.dim() && output.size(0) ? output.numel() / output.size(0) : 1;
    for (int r = 0; r < size_; r++) job.counts.push_back(in_rows[r] * in_row);
    for (int r = 0; r < size_; r++) job.counts.push_back(out_rows[r] * out_row);
    job.cacheable = false;
    job.start = [this, output, input, outputCounts, inputCounts, opts](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      Staging& st = job.staging;
      at::Tensor hi = st.add(input, kIn, true), ho = st.add(output, kOut, true);
      st.copy_in();
      std::vector<int64_t> oc = outputCounts, ic = inputCounts;
      return data_->alltoall_base(ho, hi, oc, ic, opts);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override {
    Job job = make_job("all_to_all", "c10d::alltoall_", OpType::ALLTOALL, inputs, outputs, outputs);
    TORCH_CHECK_VALUE(inputs.size() == static_cast<size_t>(size_) && outputs.size() == static_cast<size_t>(size_),
                      "all_to_all: input_tensor_list and output_tensor_list need ", size_,
                      " tensors each (one per rank), got ", inputs.size(), " and ", outputs.size());
    for (const auto& t : inputs) job.counts.push_back(t.numel());
    for (const auto& t : outputs) job.counts.push_back(t.numel());
    job.cacheable = false;
    job.start = [this, outputs, inputs, opts](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      // Gloo's list all-to-all needs equal sizes: carry each tensor as flat bytes through
      // one uneven all-to-all.
      Staging& st = job.staging;
      std::vector<at::Tensor> hi, ho;
      std::vector<int64_t> ic, oc;
      for (const auto& t : inputs) {
        hi.push_back(st.add(t, kIn, true).reshape({-1}));
        ic.push_back(hi.back().numel());
      }
      for (const auto& t : outputs) {
        ho.push_back(st.add(t, kOut, true).reshape({-1}));
        oc.push_back(ho.back().numel());
      }
      st.copy_in();
      at::Tensor send = at::cat(hi), recv = at::empty({std::accumulate(oc.begin(), oc.end(), int64_t{0})}, at::kByte);
      job.after = [ho, recv, oc]() mutable {
        int64_t off = 0;
        for (size_t i = 0; i < ho.size(); i++) {
          ho[i].copy_(recv.narrow(0, off, oc[i]));
          off += oc[i];
        }
      };
      return data_->alltoall_base(recv, send, oc, ic, opts);
    };
    return enqueue(std::move(job));
  }

  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override {
    std::vector<at::Tensor> none;
    Job job = make_job("barrier", "c10d::barrier", OpType::BARRIER, none, none, none);
    job.start = [this, opts](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      c10d::BarrierOptions o = opts;
      o.device_ids.clear();
      return data_->barrier(o);
    };
    return enqueue(std::move(job), /*host_wait=*/true);
  }

  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override {
    TORCH_CHECK(data_, "monitored_barrier: the process group has been destroyed");
    data_->monitoredBarrier(opts, waitAllRanks);
  }

  // ---- point to point

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override {
    std::vector<at::Tensor> none;
    Job job = make_job("send", "c10d::send", OpType::SEND, tensors, none, none);
    check_peer("send", "dst", dst, tag);
    job.check = false;
    job.start = [this, t = tensors[0], dst, tag](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      Staging& st = job.staging;
      at::Tensor data = st.add(t, kIn, true);
      st.copy_in();
      std::vector<at::Tensor> header{p2p_header(t)}, payload{data};
      auto h = data_->send(header, dst, 2 * tag);
      auto d = data_->send(payload, dst, 2 * tag + 1);
      p2p_ += 1;
      h->wait();
      d->wait();
      return {};
    };
    return enqueue_p2p(std::move(job), dst, /*recv=*/false, tag);
  }

  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override {
    std::vector<at::Tensor> none;
    Job job = make_job("recv", "c10d::recv_", OpType::RECV, none, tensors, tensors);
    check_peer("recv", "src", src, tag);
    job.check = false;
    job.start = [this, t = tensors[0], src, tag](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      std::vector<at::Tensor> header{at::empty({4}, at::kLong)};
      data_->recv(header, src, 2 * tag)->wait();
      receive_payload(t, header[0], src, tag);
      return {};
    };
    return enqueue_p2p(std::move(job), src, /*recv=*/true, tag);
  }

  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override {
    std::vector<at::Tensor> none;
    Job job = make_job("recv", "c10d::recv_any_source_", OpType::RECVANYSOURCE, none, tensors, tensors);
    check_peer("recv", "src", -1, tag);
    job.check = false;
    job.start = [this, t = tensors[0], tag](Job& job) -> c10::intrusive_ptr<c10d::Work> {
      std::vector<at::Tensor> header{at::empty({4}, at::kLong)};
      auto w = data_->recvAnysource(header, 2 * tag);
      w->wait();
      *job.source = w->sourceRank();
      receive_payload(t, header[0], *job.source, tag);
      return {};
    };
    return enqueue_p2p(std::move(job), -1, /*recv=*/true, tag);
  }

 private:
  struct Reduction {
    c10d::ReduceOp gloo_op;
    bool complex = false;
    double factor = 1.0;  // PREMUL_SUM: applied after the sum (f * sum x = sum f * x)
    at::Tensor tensor_factor;
    void scale(at::Tensor& h) const {
      if (tensor_factor.defined()) {
        auto f = at::from_blob(element_ptr(tensor_factor), {}, tensor_factor.options().device(at::kCPU));
        h.mul_(f.item());
      } else if (factor != 1.0) {
        h.mul_(factor);
      }
    }
  };

  // Validates a root rank; returns whether this rank is the root.
  bool check_root(const char* op, int64_t root) {
    TORCH_CHECK_VALUE(root >= 0 && root < size_, op, ": root rank ", root, " is out of range: the group has ranks 0 to ",
                      size_ - 1);
    return root == rank_;
  }

  // The root's list of a gather or scatter, checked against `ref` (empty on other ranks).
  std::vector<at::Tensor> root_list(const char* op, const char* arg, const std::vector<std::vector<at::Tensor>>& lists,
                                    bool root, const at::Tensor& ref) const {
    if (!root) {
      TORCH_CHECK_VALUE(lists.empty() || lists[0].empty(), op, ": ", arg, " must be empty on non-root ranks");
      return {};
    }
    TORCH_CHECK_VALUE(lists.size() == 1, op, ": the root needs one ", arg);
    check_list(op, arg, lists[0], ref);
    return lists[0];
  }

  void check_peer(const char* op, const char* arg, int peer, int tag) {
    TORCH_CHECK_VALUE(peer == -1 || (peer >= 0 && peer < size_ && peer != rank_), op, ": ", arg, "=", peer,
                      " must be another rank of the group (0 to ", size_ - 1, ", not this rank ", rank_, ")");
    TORCH_CHECK_VALUE(tag >= 0 && tag < (1 << 30), op, ": tag ", tag, " is out of range: 0 to ", (1 << 30) - 1,
                      " on neuron");
  }

  // Every tensor of a list must match `ref` in elements and dtype.
  // A list of one tensor per rank, each with ref's element count and dtype (checked at the call:
  // Gloo's own checks run on the communication thread, where a failure ends the group).
  void check_list(const char* op, const char* arg, const std::vector<at::Tensor>& list, const at::Tensor& ref) const {
    TORCH_CHECK_VALUE(list.size() == static_cast<size_t>(size_), op, ": ", arg, " must hold one tensor per rank (",
                      size_, "), got ", list.size());
    for (size_t i = 0; i < list.size(); i++)
      TORCH_CHECK_VALUE(list[i].numel() == ref.numel() && list[i].scalar_type() == ref.scalar_type(), op, ": ", arg,
                        "[", i, "] has ", list[i].numel(), " elements of ", dname(list[i].scalar_type()), "; expected ",
                        ref.numel(), " of ", dname(ref.scalar_type()));
  }

  // The flat tensor of a *_into_tensor / *_tensor collective: world size x `part` elements of
  // part's dtype (any shape: the stacked (world size, ...) form included).
  void check_flat(const char* op, const char* arg, const at::Tensor& flat, const at::Tensor& part) const {
    TORCH_CHECK_VALUE(flat.numel() == part.numel() * size_ && flat.scalar_type() == part.scalar_type(), op, ": ", arg,
                      " must have ", size_, " x ", part.numel(), " = ", part.numel() * size_, " elements of ",
                      dname(part.scalar_type()), " (world size x the other tensor's elements), got ", flat.numel(),
                      " of ", dname(flat.scalar_type()));
  }

  // Validates a reduction; fills the fingerprint's reduce-op field.
  Reduction reduction(const char* op, const std::vector<at::Tensor>& tensors, const c10d::ReduceOp& rop, Job& job) {
    Reduction r;
    auto kind = rop.op_;
    r.gloo_op = c10d::ReduceOp(kind == c10d::ReduceOp::PREMUL_SUM ? c10d::ReduceOp::SUM : kind);
    job.record[5] = static_cast<int64_t>(kind);
    if (tensors.empty()) return r;
    at::ScalarType dt = tensors[0].scalar_type();
    for (const auto& t : tensors)
      TORCH_CHECK_VALUE(t.scalar_type() == dt, op, ": all tensors need one dtype, got ", dname(dt), " and ", dname(t.scalar_type()));
    r.complex = at::isComplexType(dt);
    bool floating = at::isFloatingType(dt) || r.complex;
    TORCH_CHECK_VALUE(gloo_dtype(dt) || r.complex, op, ": cannot reduce ", dname(dt),
                      " on neuron (Gloo reduces float32, float64, float16, bfloat16, int64, int32, int8, uint8 and "
                      "bool); cast the tensor first");
    TORCH_CHECK_VALUE(!r.complex || kind == c10d::ReduceOp::SUM || kind == c10d::ReduceOp::AVG ||
                          kind == c10d::ReduceOp::PREMUL_SUM,
                      op, ": ReduceOp.", reduce_op_name(kind), " is not defined for complex tensors");
    TORCH_CHECK_VALUE(kind != c10d::ReduceOp::AVG || floating, op, ": ReduceOp.AVG needs a floating-point tensor, got ",
                      dname(dt), " (use SUM and divide)");
    TORCH_CHECK_VALUE(kind < c10d::ReduceOp::BAND || kind > c10d::ReduceOp::BXOR || !floating, op, ": ReduceOp.",
                      reduce_op_name(kind), " needs an integer or bool tensor, got ", dname(dt));
    TORCH_CHECK_VALUE(kind != c10d::ReduceOp::UNUSED, op, ": invalid reduce op");
    if (kind == c10d::ReduceOp::PREMUL_SUM) {
      TORCH_CHECK_VALUE(floating, op, ": ReduceOp.PREMUL_SUM needs a floating-point tensor, got ", dname(dt));
      auto* s = dynamic_cast<c10d::PreMulSumSupplement*>(rop.supplement_.get());
      TORCH_CHECK_VALUE(s, op, ": ReduceOp.PREMUL_SUM without a factor (use dist._make_nccl_premul_sum)");
      if (s->tensor_factor.defined()) {
        const at::Tensor& f = s->tensor_factor;
        TORCH_CHECK_VALUE(f.numel() == 1, op, ": the PREMUL_SUM factor must have one element");
        if (f.device().type() == kNeuron) {
          r.tensor_factor = f;  // read on the comm thread, after its producer
          job.keep.push_back(f);
        } else {
          r.factor = f.item<double>();
        }
      } else {
        r.factor = s->double_factor;
      }
    }
    return r;
  }

  // Common validation and the job's frame: every tensor defined, strided, on one neuron
  // device; outputs without internal overlap.
  Job make_job(const char* name, const char* stream_op, OpType type, const std::vector<at::Tensor>& inputs,
               const std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& results) {
    Job job;
    job.name = name;
    job.stream_op = stream_op;
    job.type = type;
    bool needs_tensor = type != OpType::BARRIER;
    TORCH_CHECK_VALUE(!needs_tensor || !inputs.empty() || !outputs.empty(), name, ": no tensors given");
    if (type == OpType::ALLREDUCE || type == OpType::REDUCE || type == OpType::BROADCAST || type == OpType::SEND ||
        type == OpType::RECV || type == OpType::RECVANYSOURCE)
      TORCH_CHECK_VALUE(inputs.size() + outputs.size() == 1, name,
                        ": the neuron backend takes one tensor per rank (multi-tensor lists are not supported), got ",
                        inputs.size() + outputs.size());
    auto visit = [&](const at::Tensor& t, bool output) {
      TORCH_CHECK_VALUE(t.defined(), name, ": undefined tensor");
      TORCH_CHECK_VALUE(t.device().type() == kNeuron, name, ": expected neuron tensors, got one on ", t.device(),
                        " (a group with a CPU backend, e.g. init_process_group('cpu:gloo,neuron:neuron'), takes CPU "
                        "tensors)");
      TORCH_CHECK_VALUE(t.layout() == at::kStrided, name, ": only strided (dense) tensors are supported, got ",
                        t.layout());
      if (job.device < 0) job.device = t.device().index();
      TORCH_CHECK_VALUE(t.device().index() == job.device, name,
                        ": all tensors must be on one neuron device, got neuron:", job.device, " and ", t.device());
      if (output)
        TORCH_CHECK_VALUE(at::has_internal_overlap(t) != at::MemOverlap::Yes, name,
                          ": an output tensor has overlapping elements (expanded or stride-0 view); pass a "
                          "contiguous or non-overlapping tensor");
      job.keep.push_back(t);
      if (!t.is_contiguous()) job.contiguous = false;
    };
    // An in-place collective (all_reduce, reduce, broadcast: no outputs, its inputs are its
    // results) writes its inputs: each rank refuses an overlapping one at the call, root or not,
    // so that no rank goes on to wait for the ones that refused.
    const bool in_place = outputs.empty() && !results.empty();
    for (const auto& t : inputs) visit(t, in_place);
    for (const auto& t : outputs) visit(t, true);
    job.outputs = results;
    job.staging.staged_counter = &staged_;
    job.record[1] = static_cast<int64_t>(type);
    const at::Tensor* ref = !inputs.empty() ? &inputs[0] : !outputs.empty() ? &outputs[0] : nullptr;
    job.record[2] = ref ? static_cast<int64_t>(ref->scalar_type()) : -1;
    job.record[6] = shape_hash(inputs.empty() ? outputs : inputs);
    job.record[7] = static_cast<int64_t>(inputs.size() * 1000003 + outputs.size());
    if (job.device >= 0) {
      job.producer = current_vnc_stream(job.device);
      job.ticket = vnc_stream_enqueued(job.producer);
    }
    job.done->device = job.device;
    job.done->stream = job.producer;
    return job;
  }

  // Rank-dependent fields of a collective's fingerprint are not compared: gather/scatter
  // lists exist on the root only, and list lengths follow from it.
  static void rank_invariant(Job& job) {
    if (job.type == OpType::GATHER || job.type == OpType::SCATTER || job.type == OpType::ALLTOALL ||
        job.type == OpType::ALLTOALL_BASE)
      job.record[6] = job.record[7] = 0;
  }

  using JobPtr = std::shared_ptr<Job>;

  // Queues a collective for the communication thread, or starts it on this thread when that
  // changes nothing: no job queued or in flight, the producer's work done, no staging copies
  // and no fingerprint exchange due (the Gloo call only enqueues; it does not block). That
  // saves two thread hand-offs on a small collective.
  c10::intrusive_ptr<c10d::Work> enqueue(Job&& j, bool host_wait = false) {
    rank_invariant(j);
    auto job = std::make_shared<Job>(std::move(j));
    c10::intrusive_ptr<NeuronWork> work;
    bool here = false;
    {
      std::lock_guard<std::mutex> g(m_);
      TORCH_CHECK(!stopping_, job->name, ": the process group has been destroyed");
      uint64_t seq = ++seq_;
      job->record[0] = static_cast<int64_t>(seq);
      work = c10::make_intrusive<NeuronWork>(rank_, *job, host_wait, seq);
      here = queue_.empty() && claim_locked(*job);
      if (!here) {
        queue_.push_back(job);
        if (!comm_thread_.joinable()) comm_thread_ = std::thread([this] { comm_loop(); });
        cv_.notify_all();
      }
    }
    if (here) launch(job);
    return work;
  }

  static bool ticket_reached(const Job& job) {
    return !job.producer || vnc_stream_completed(job.producer) >= job.ticket;
  }

  // Whether `job` may start on the thread at hand rather than the communication thread: nothing
  // in flight, its producer's work has run, no staging copies and no fingerprint exchange due.
  // If so, takes the issue slot (busy_) and advances the fingerprint history. m_ held.
  bool claim_locked(const Job& job) {
    if (busy_ || stopping_ || !job.contiguous || !ticket_reached(job) || (job.check && !predicted(job)) ||
        !broken_message().empty())
      return false;
    busy_ = true;
    if (job.check) {
      advance_history(job);
      skips_ += 1;
    }
    return true;
  }

  // The communication thread: one collective at a time, in call order.
  void comm_loop() {
    std::unique_lock<std::mutex> lk(m_);
    for (;;) {
      cv_.wait(lk, [&] { return !busy_ && (stopping_ || !queue_.empty()); });
      if (queue_.empty()) return;
      JobPtr job = queue_.front();
      queue_.pop_front();
      busy_ = true;
      lk.unlock();
      std::string err;
      try {
        std::string broken = broken_message();
        TORCH_CHECK(broken.empty(), broken);
        if (job->producer) vnc_stream_wait_ticket(job->producer, job->ticket);
        if (job->check) verify(*job);
      } catch (const std::exception& e) {
        err = describe_failure(*job, e.what());
      }
      if (err.empty())
        launch(job);
      else
        finish(job, err);
      lk.lock();
    }
  }

  // Starts the job's Gloo call; completion runs in Gloo's future callback (on Gloo's thread),
  // or on the waiter thread for Gloo works without a future.
  void launch(const JobPtr& job) {
    c10::intrusive_ptr<c10d::Work> w;
    try {
      w = job->start(*job);
    } catch (const CallError& e) {
      finish(job, e.what());
      return;
    } catch (const std::exception& e) {
      finish(job, describe_failure(*job, e.what()));
      return;
    }
    if (!w) {
      finish(job, "");
      return;
    }
    c10::intrusive_ptr<c10::ivalue::Future> f;
    try {
      f = w->getFuture();
    } catch (const std::exception&) {
      waiter_.post([this, job, w] {
        std::string err;
        try {
          w->wait();
        } catch (const std::exception& e) {
          err = describe_failure(*job, e.what());
        }
        finish(job, err);
      });
      return;
    }
    f->addCallback([this, job](c10::ivalue::Future& fut) {
      finish(job, fut.hasError() ? describe_failure(*job, fut.tryRetrieveErrorMessage()) : std::string());
    });
  }

  // Point-to-point jobs run whole (blocking) on their (peer, direction, tag) thread.
  c10::intrusive_ptr<c10d::Work> enqueue_p2p(Job&& j, int peer, bool recv, int tag) {
    auto job = std::make_shared<Job>(std::move(j));
    // A receive from any source reports its source rank after wait(): that wait is the host's.
    auto work = c10::make_intrusive<NeuronWork>(rank_, *job, job->type == OpType::RECVANYSOURCE, 0);
    // One thread per (peer, direction, tag): messages of one tag keep their order, and messages
    // are matched by tag as Gloo and NCCL match them (a receive waiting for tag 2 never holds
    // up tag 1's, a send blocked until its receive is posted never holds up another tag's).
    // Threads of tags gone quiet are joined once there are more than kIdleP2PThreads.
    SerialWorker* w;
    {
      std::lock_guard<std::mutex> g(peers_m_);
      TORCH_CHECK(!peers_stopped_, job->name, ": the process group has been destroyed");
      const PeerKey key{peer, recv, tag};
      if (peers_.size() >= kIdleP2PThreads && !peers_.count(key))
        for (auto it = peers_.begin(); it != peers_.end();)
          it = it->second->idle() ? peers_.erase(it) : std::next(it);  // (post() needs peers_m_)
      auto& slot = peers_[key];
      if (!slot) slot = std::make_unique<SerialWorker>();
      w = slot.get();
    }
    w->post([this, job] {
      std::string err;
      try {
        std::string broken = broken_message();
        TORCH_CHECK(broken.empty(), broken);
        if (job->producer) vnc_stream_wait_ticket(job->producer, job->ticket);
        job->start(*job);
      } catch (const CallError& e) {  // reported like any failure; the group stays usable
        err = e.what();
      } catch (const std::exception& e) {
        err = describe_failure(*job, e.what());
      }
      finish(job, err);
    });
    return work;
  }

  // Completes a job: post-processing and staged copies back, then the Work, its stream
  // waiters and (on the completion thread) its future; frees the communication thread.
  void finish(const JobPtr& job, std::string err) {
    if (err.empty()) {
      try {
        if (job->after) job->after();
        job->staging.copy_out();
      } catch (const std::exception& e) {
        err = describe_failure(*job, e.what());
      }
    }
    // Tensors are let go here, before the group may shut down (see shutdown()).
    release_unless_exiting(
        [&] {
          job->after = nullptr;
          job->start = nullptr;
          job->keep.clear();
          job->outputs.clear();
          job->staging = Staging();
        },
        [&] { new JobPtr(job); });  // Python is exiting: kept (see g_exit_m)
    if (auto fut = job->done->finish(err)) complete_future(job->done, fut);
    if (job->type == OpType::SEND || job->type == OpType::RECV || job->type == OpType::RECVANYSOURCE) return;
    {
      std::lock_guard<std::mutex> g(m_);
      busy_ = false;
    }
    cv_.notify_all();
  }

  // The message of a failed job; any failure after the job was queued leaves the ranks out of
  // step (this rank did not take part, or a transfer broke), so the group becomes unusable.
  std::string describe_failure(const Job& job, const std::string& what) {
    std::string msg = what;
    auto cut = msg.find("\nException raised from");
    if (cut != std::string::npos) msg.resize(cut);
    if (msg.rfind("neuron backend:", 0) == 0) {  // already ours
      mark_broken(msg);
      return msg;
    }
    std::string group = options_->group_name.empty() ? "" : " of group '" + options_->group_name + "'";
    std::string out = "neuron backend: " + std::string(job.name) + " (collective #" +
                      std::to_string(job.record[0]) + group + ", rank " + std::to_string(rank_) + " of " +
                      std::to_string(size_) + ") failed: " + msg;
    if (msg.find("imed out") != std::string::npos)
      out += " [a rank did not take part within the group's timeout of " +
             std::to_string(options_->timeout.count() / 1000) +
             " s: it may have exited, hung, or called a different collective]";
    mark_broken(out);
    return out;
  }

  // Futures asked for before completion complete on their own thread: then-callbacks may
  // enqueue device work, which must never wait behind a stream that waits for this group's
  // next collective (the communication thread would then wait for itself).
  void complete_future(std::shared_ptr<Completion> c, c10::intrusive_ptr<c10::ivalue::Future> fut) {
    completion_.post([c, fut] {
      release_unless_exiting(
          [&] {
            if (c->stream) vnc_set_current_stream(c->stream);  // the future's events go on the issuing stream
            c->complete(fut);  // may run Python callbacks
          },
          [&] { new std::pair<std::shared_ptr<Completion>, c10::intrusive_ptr<c10::ivalue::Future>>(c, fut); });
    });
  }

  std::string broken_message() {
    std::lock_guard<std::mutex> g(broken_m_);
    return broken_;
  }
  void mark_broken(const std::string& why) {
    std::lock_guard<std::mutex> g(broken_m_);
    if (broken_.empty())
      broken_ = "neuron backend: the process group is unusable after an earlier failure (destroy it with "
                "dist.destroy_process_group() and create a new one); first failure: " + why;
  }

  // ---- fingerprint exchange (comm thread only)

  static Signature signature(const Job& job) {
    Signature sig;
    std::copy(job.record.begin() + 1, job.record.end(), sig.begin());
    return sig;
  }
  // Whether the common history predicts this job's fingerprint (then all ranks skip the
  // exchange exactly when their calls agree). Only the job's issuer (busy_) reads or writes it.
  bool predicted(const Job& job) {
    if (!job.cacheable || !have_prev_) return false;
    auto it = next_.find(prev_);
    return it != next_.end() && it->second == signature(job);
  }
  void advance_history(const Job& job) {
    if (!job.cacheable) {
      have_prev_ = false;  // rank-dependent calls (all-to-all splits) break the common history
      return;
    }
    Signature sig = signature(job);
    if (next_.size() > 4096) next_.clear();  // at the same point of the history on every rank
    if (have_prev_) next_[prev_] = sig;
    prev_ = sig;
    have_prev_ = true;
  }

  void verify(Job& job) {
    bool skip = predicted(job);
    advance_history(job);
    if (skip) {
      skips_ += 1;
      return;
    }
    exchanges_ += 1;
    at::Tensor buf = at::empty({2 * kFields}, at::kLong);
    auto* p = buf.data_ptr<int64_t>();
    for (int i = 0; i < kFields; i++) {
      p[i] = job.record[i];
      p[kFields + i] = -job.record[i];
    }
    std::vector<at::Tensor> v{buf};
    c10d::AllreduceOptions o;
    o.reduceOp = c10d::ReduceOp::MAX;
    try {
      meta_->allreduce(v, o)->wait();
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "comparing the call with the other ranks' failed: ", e.what());
    }
    std::string diff;
    for (int i = 0; i < kFields; i++) {
      int64_t hi = p[i], lo = -p[kFields + i];
      if (hi != lo) {
        diff += diff.empty() ? "" : "; ";
        diff += std::string(kFieldNames[i]) + " differs";
        auto show = [i](int64_t v) {
          if (i == 1) return c10d::opTypeToString(static_cast<OpType>(v));
          if (i == 2) return dname(v);
          if (i == 5) return std::string(reduce_op_name(static_cast<c10d::ReduceOp::RedOpType>(v)));
          return std::to_string(v);
        };
        if (i != 6) diff += " (this rank: " + show(job.record[i]) + "; another rank: " +
                            show(lo != job.record[i] ? lo : hi) + ")";
      }
    }
    if (!diff.empty()) {
      std::string msg = "neuron backend: collective mismatch across ranks at collective #" +
                        std::to_string(job.record[0]) + ": this rank called " + job.name + " with " +
                        describe_call(job) + ", another rank called something else: " + diff +
                        ". Nothing was transferred. (TORCH_DISTRIBUTED_DEBUG=DETAIL reports every rank's call.)";
      mark_broken(msg);
      TORCH_CHECK(false, msg);
    }
    if (!job.counts.empty()) verify_counts(job);
  }

  // All-to-all: what each rank sends to a peer must be what the peer expects from it.
  void verify_counts(Job& job) {
    int64_t w = size_;
    at::Tensor mine = at::tensor(job.counts, at::kLong);
    at::Tensor all = at::empty({w * 2 * w}, at::kLong);
    c10d::AllgatherOptions o;
    try {
      meta_->_allgather_base(all, mine, o)->wait();
    } catch (const std::exception& e) {
      TORCH_CHECK(false, "comparing the split sizes with the other ranks' failed: ", e.what());
    }
    auto* a = all.data_ptr<int64_t>();
    for (int64_t s = 0; s < w; s++)
      for (int64_t d = 0; d < w; d++) {
        int64_t sent = a[s * 2 * w + d], expected = a[d * 2 * w + w + s];
        if (sent != expected) {
          std::string msg = "neuron backend: " + std::string(job.name) + " split sizes disagree: rank " +
                            std::to_string(s) + " sends " + std::to_string(sent) + " elements to rank " +
                            std::to_string(d) + ", which expects " + std::to_string(expected) +
                            ". Nothing was transferred.";
          mark_broken(msg);
          TORCH_CHECK(false, msg);
        }
      }
  }

  static std::string describe_call(const Job& job) {
    std::string s = "dtype " + dname(job.record[2]) + ", " +
                    std::to_string(job.record[3]) + " elements";
    if (job.type == OpType::REDUCE || job.type == OpType::BROADCAST || job.type == OpType::GATHER ||
        job.type == OpType::SCATTER)
      s += ", root " + std::to_string(job.record[4]);
    return s;
  }

  // ---- point to point

  static at::Tensor p2p_header(const at::Tensor& t) {
    at::Tensor h = at::empty({4}, at::kLong);
    auto* p = h.data_ptr<int64_t>();
    p[0] = 0x6e6575726f6e;  // "neuron"
    p[1] = static_cast<int64_t>(t.scalar_type());
    p[2] = t.numel();
    p[3] = t.numel() * static_cast<int64_t>(t.element_size());
    return h;
  }

  void receive_payload(const at::Tensor& t, const at::Tensor& header, int src, int tag) {
    auto* p = header.data_ptr<int64_t>();
    TORCH_CHECK(p[0] == 0x6e6575726f6e, "neuron backend: recv from rank ", src,
                " got a message that is not from a neuron send");
    if (p[1] != static_cast<int64_t>(t.scalar_type()) || p[2] != t.numel()) {
      // take the payload anyway (the sender's send completes, the ranks stay in step), then raise
      std::vector<at::Tensor> scratch{at::empty({p[3]}, at::kByte)};
      data_->recv(scratch, src, 2 * tag + 1)->wait();
      std::ostringstream msg;
      msg << "neuron backend: recv from rank " << src << " (tag " << tag << "): the sender sent " << p[2]
          << " elements of " << dname(p[1]) << ", this rank expects " << t.numel() << " of "
          << dname(t.scalar_type()) << ". The message was discarded (the tensor is unchanged); the group stays usable.";
      throw CallError(msg.str());
    }
    Staging st;
    st.staged_counter = &staged_;
    std::vector<at::Tensor> payload{st.add(t, kOut, true)};
    data_->recv(payload, src, 2 * tag + 1)->wait();
    p2p_ += 1;
    st.copy_out();
  }

  c10::intrusive_ptr<c10d::Backend> data_, meta_;
  c10::intrusive_ptr<Options> options_;
  std::atomic<uint64_t> seq_{0};
  std::atomic<int64_t> exchanges_{0}, skips_{0}, staged_{0}, p2p_{0};
  std::mutex broken_m_;
  std::string broken_;
  // Skip prediction (comm thread only): the signature that followed each signature last.
  std::map<Signature, Signature> next_;
  Signature prev_{};
  bool have_prev_ = false;
  // The communication thread's queue; busy_: a collective is being checked or is in flight.
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool busy_ = false, stopping_ = false;
  std::thread comm_thread_;
  SerialWorker completion_, waiter_;
  std::mutex peers_m_;
  bool peers_stopped_ = false;
  using PeerKey = std::tuple<int, bool, int>;  // (peer rank or -1 for any source, receive, tag)
  static constexpr size_t kIdleP2PThreads = 16;
  std::map<PeerKey, std::unique_ptr<SerialWorker>> peers_;
};

}  // namespace

// Adds torch_neuronx._C._NeuronBackend. Called by torch_neuronx.distributed after importing
// torch.distributed, which registers c10d::Backend's Python type (the base class).
void init_distributed(PyObject* module) {
  auto m = py::reinterpret_borrow<py::module_>(module);
  if (py::hasattr(m, "_NeuronBackend")) return;
  py::class_<NeuronBackend, c10d::Backend, c10::intrusive_ptr<NeuronBackend>>(m, "_NeuronBackend")
      .def(py::init<c10::intrusive_ptr<c10d::Backend>, c10::intrusive_ptr<c10d::Backend>, int, int, ms,
                    std::string>(),
           py::arg("data"), py::arg("meta"), py::arg("rank"), py::arg("size"), py::arg("timeout"),
           py::arg("group_name"))
      .def("_stats", &NeuronBackend::stats)
      .def("_timeout", [](NeuronBackend& b) { return b.getBackendOptions()->timeout; });
  // The atexit hook that closes the exit gate (see g_exit_m); idempotent.
  m.def("_distributed_python_exiting", [] {
    py::gil_scoped_release nogil;  // releases in progress may need the GIL to finish
    std::unique_lock<std::shared_mutex> g(g_exit_m);
    g_python_exiting = true;
  });
}

}  // namespace torch_neuronx
