// torch_neuronx._C: the Python entry points of the glue, written against the CPython API
// (no pybind11, to keep the build short). Every function is a thin call into the runtime
// or the registration code; Python-facing behaviour lives in torch_neuronx/.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <exception>

#include "neuron.h"
#include "gate.h"
#include "vnc/gemm.h"

#include <torch/csrc/Exceptions.h>
#include <torch/csrc/autograd/python_variable.h>

namespace torch_neuronx {
void set_strict_fallback(bool on);
bool strict_fallback();
bool reduction_geometry(bool sum_like, const at::Tensor& self, const at::Tensor& out, at::IntArrayRef dims,
                        bool keepdim, vnc_iter* it);
int add_jit_methods(PyObject* module);
void init_distributed(PyObject* module);  // distributed.cpp (pybind11: c10d bindings)
}  // namespace torch_neuronx

namespace {

using namespace torch_neuronx;

int device_arg(PyObject* arg) {
  long d = PyLong_AsLong(arg);
  if (d == -1 && PyErr_Occurred()) throw python_error();
  check(vnc_check_device(static_cast<int>(d)));
  return static_cast<int>(d);
}

// torch_neuronx._warnings.emit(msg, kind) -> bool, installed by _set_warning_function: it
// attributes the warning to the user's line and may decline a float64 warning of PyTorch's own.
PyObject* g_warning_function = nullptr;

// Raises `msg` as a Python UserWarning from whichever thread runs the op; a warning turned
// into an error by the filters propagates as that Python exception. Returns whether it was
// emitted.
bool python_warning(const std::string& msg, WarningKind kind) {
  PyGILState_STATE gil = PyGILState_Ensure();
  bool emitted = true;
  int failed;
  if (g_warning_function) {
    PyObject* r = PyObject_CallFunction(g_warning_function, "si", msg.c_str(), static_cast<int>(kind));
    failed = r == nullptr;
    if (r) emitted = PyObject_IsTrue(r) == 1;
    Py_XDECREF(r);
  } else {
    failed = PyErr_WarnEx(PyExc_UserWarning, msg.c_str(), 1) < 0;
  }
  if (failed) {
    python_error err;
    err.persist();
    PyGILState_Release(gil);
    throw err;
  }
  PyGILState_Release(gil);
  return emitted;
}

PyObject* py_set_warning_function(PyObject*, PyObject* fn) {
  Py_INCREF(fn);
  Py_XSETREF(g_warning_function, fn);
  Py_RETURN_NONE;
}

PyObject* py_register(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  set_warning_handler(&python_warning);
  register_backend();
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* py_device_count(PyObject*, PyObject*) { return PyLong_FromLong(vnc_device_count()); }
PyObject* py_is_initialized(PyObject*, PyObject*) { return PyBool_FromLong(vnc_is_initialized()); }
PyObject* py_in_bad_fork(PyObject*, PyObject*) { return PyBool_FromLong(vnc_in_bad_fork()); }
PyObject* py_launch_blocking(PyObject*, PyObject*) { return PyBool_FromLong(vnc_launch_blocking()); }
PyObject* py_num_threads(PyObject*, PyObject*) { return PyLong_FromLong(vnc_num_threads()); }
PyObject* py_cpu_isa(PyObject*, PyObject*) { return PyUnicode_FromString(vnc_cpu_isa()); }

PyObject* py_set_num_threads(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  long n = PyLong_AsLong(arg);
  if (n == -1 && PyErr_Occurred()) return nullptr;
  check(vnc_set_num_threads(static_cast<int>(std::max(-1L, std::min(n, 1L << 20)))));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

/* Float32 products go to the MKL that PyTorch's CPU library carries when it exports one
 * (x86-64 wheels do; 1.1-1.3x OpenBLAS's speed on the main job's shapes), else to the
 * runtime's OpenBLAS. TORCH_NEURONX_BLAS=openblas|mkl chooses; returns false with a Python
 * error set for another value, or for mkl where PyTorch carries none. */
bool choose_gemm_provider() {
  const char* want = std::getenv("TORCH_NEURONX_BLAS");
  // An unknown name: the device refuses every use, naming it (runtime/src/device.c, settings_ok)
  if (want && *want && std::strcmp(want, "mkl") != 0 && std::strcmp(want, "openblas") != 0) return true;
  if (want && std::strcmp(want, "openblas") == 0) return true;
  void* torch_cpu = dlopen("libtorch_cpu.so", RTLD_NOLOAD | RTLD_LAZY);
  auto sgemm = torch_cpu ? reinterpret_cast<vnc_sgemm_fn>(dlsym(torch_cpu, "sgemm_")) : nullptr;
  auto local = torch_cpu ? reinterpret_cast<int (*)(int)>(dlsym(torch_cpu, "MKL_Set_Num_Threads_Local")) : nullptr;
  if (sgemm && local) {
    vnc_gemm_set_provider("mkl", sgemm, local);
  } else if (want && *want) {
    PyErr_SetString(PyExc_RuntimeError,
                    "TORCH_NEURONX_BLAS=mkl, but this PyTorch's libtorch_cpu exports no MKL (sgemm_ and "
                    "MKL_Set_Num_Threads_Local); unset it to use OpenBLAS");
    return false;
  }
  return true;
}

PyObject* py_gemm_provider(PyObject*, PyObject*) { return PyUnicode_FromString(vnc_gemm_provider()); }

PyObject* py_cpu_isa_supported(PyObject*, PyObject* arg) {
  const char* name = PyUnicode_AsUTF8(arg);
  if (!name) return nullptr;
  return PyBool_FromLong(vnc_cpu_isa_supported(name));
}

PyObject* py_init(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  check(vnc_init());
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* py_get_device(PyObject*, PyObject*) { return PyLong_FromLong(vnc_get_device()); }

PyObject* py_set_device(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  long d = PyLong_AsLong(arg);
  if (d == -1 && PyErr_Occurred()) return nullptr;
  check(vnc_set_device(static_cast<int>(d)));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* py_check_device(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  device_arg(arg);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* py_synchronize(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  int d = device_arg(arg);
  vnc_status st;
  Py_BEGIN_ALLOW_THREADS st = vnc_device_synchronize(d);
  Py_END_ALLOW_THREADS check(st);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// The device threads may be waiting for the GIL to free an earlier GraphTask: release it.
PyObject* py_flush_autograd_threads(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  std::exception_ptr error;
  Py_BEGIN_ALLOW_THREADS try {
    flush_autograd_device_threads();
  } catch (...) {
    error = std::current_exception();
  }
  Py_END_ALLOW_THREADS if (error) std::rethrow_exception(error);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* py_physical_id(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  return PyLong_FromLong(vnc_device_physical_id(device_arg(arg)));
  END_HANDLE_TH_ERRORS
}

PyObject* py_capacity(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  return PyLong_FromUnsignedLongLong(vnc_device_capacity(device_arg(arg)));
  END_HANDLE_TH_ERRORS
}

// Flat CUDA-style keys: "allocated_bytes.all.current", "num_ooms", ...
PyObject* py_memory_stats(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  vnc_memory_stats s;
  check(vnc_memory_stats_get(device_arg(arg), &s));
  PyObject* d = PyDict_New();
  auto put = [&](const std::string& k, long long v) {
    PyObject* o = PyLong_FromLongLong(v);
    PyDict_SetItemString(d, k.c_str(), o);
    Py_DECREF(o);
  };
  const char* pools[VNC_STAT_KINDS] = {"all", "small_pool", "large_pool"};
  const char* fields[4] = {"current", "peak", "allocated", "freed"};
  auto put_arr = [&](const char* name, const vnc_stat* a) {
    for (int k = 0; k < VNC_STAT_KINDS; k++) {
      const int64_t vals[4] = {a[k].current, a[k].peak, a[k].allocated, a[k].freed};
      for (int f = 0; f < 4; f++) put(std::string(name) + "." + pools[k] + "." + fields[f], vals[f]);
    }
  };
  put_arr("allocation", s.allocation);
  put_arr("segment", s.segment);
  put_arr("active", s.active);
  put_arr("allocated_bytes", s.allocated_bytes);
  put_arr("reserved_bytes", s.reserved_bytes);
  put_arr("active_bytes", s.active_bytes);
  put_arr("requested_bytes", s.requested_bytes);
  vnc_stat zero[VNC_STAT_KINDS] = {};
  put_arr("inactive_split", zero);
  put_arr("inactive_split_bytes", zero);
  put("num_alloc_retries", s.num_alloc_retries);
  put("num_ooms", s.num_ooms);
  put("num_device_alloc", s.num_device_alloc);
  put("num_device_free", s.num_device_free);
  put("num_sync_all_streams", s.num_sync_all_streams);
  put("max_split_size", -1);
  put("capacity_bytes", static_cast<long long>(s.capacity));
  return d;
  END_HANDLE_TH_ERRORS
}

PyObject* py_empty_cache(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  for (int d = 0; d < vnc_device_count(); d++) check(vnc_empty_cache(d));
  vnc_plan_cache_clear();
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* py_plan_cache_stats(PyObject*, PyObject*) {
  vnc_plan_cache_stats s;
  vnc_plan_cache_get_stats(&s);
  return Py_BuildValue("{s:L,s:L,s:L,s:L,s:L}", "hits", (long long)s.hits, "misses", (long long)s.misses, "entries",
                       (long long)s.entries, "evictions", (long long)s.evictions, "capacity", (long long)s.capacity);
}

PyObject* py_reset_peak(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  check(vnc_memory_reset_peak(device_arg(arg)));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* py_reset_accumulated(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  check(vnc_memory_reset_accumulated(device_arg(arg)));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// RNG: the default generator of a device. The state is 16 bytes: seed, offset.
PyObject* py_manual_seed(PyObject*, PyObject* args) {
  HANDLE_TH_ERRORS
  PyObject* dev;
  unsigned long long seed;
  if (!PyArg_ParseTuple(args, "OK", &dev, &seed)) return nullptr;
  auto& g = default_generator(static_cast<c10::DeviceIndex>(device_arg(dev)));
  std::lock_guard<std::mutex> lock(g.mutex());
  g.set_current_seed(seed);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* py_seed(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  auto& g = default_generator(static_cast<c10::DeviceIndex>(device_arg(arg)));
  std::lock_guard<std::mutex> lock(g.mutex());
  return PyLong_FromUnsignedLongLong(g.seed());
  END_HANDLE_TH_ERRORS
}

PyObject* py_initial_seed(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  auto& g = default_generator(static_cast<c10::DeviceIndex>(device_arg(arg)));
  return PyLong_FromUnsignedLongLong(g.current_seed());
  END_HANDLE_TH_ERRORS
}

PyObject* py_get_rng_state(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  auto& g = default_generator(static_cast<c10::DeviceIndex>(device_arg(arg)));
  std::lock_guard<std::mutex> lock(g.mutex());
  uint64_t v[2] = {g.current_seed(), g.get_offset()};
  return PyBytes_FromStringAndSize(reinterpret_cast<const char*>(v), sizeof v);
  END_HANDLE_TH_ERRORS
}

PyObject* py_set_rng_state(PyObject*, PyObject* args) {
  HANDLE_TH_ERRORS
  PyObject* dev;
  const char* buf;
  Py_ssize_t len;
  if (!PyArg_ParseTuple(args, "Oy#", &dev, &buf, &len)) return nullptr;
  TORCH_CHECK(len == 16, "neuron RNG state must be 16 bytes (seed, offset), got ", len);
  auto& g = default_generator(static_cast<c10::DeviceIndex>(device_arg(dev)));
  std::lock_guard<std::mutex> lock(g.mutex());
  uint64_t v[2];
  std::memcpy(v, buf, sizeof v);
  g.set_current_seed(v[0]);
  g.set_offset(v[1]);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* py_executed_ops(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  auto counts = executed_op_counts();
  PyObject* d = PyDict_New();
  for (auto& [name, n] : counts) {
    PyObject* o = PyLong_FromLongLong(n);
    PyDict_SetItemString(d, name.c_str(), o);
    Py_DECREF(o);
  }
  return d;
  END_HANDLE_TH_ERRORS
}

PyObject* string_list(const std::vector<std::string>& items) {
  PyObject* l = PyList_New(static_cast<Py_ssize_t>(items.size()));
  if (!l) return nullptr;
  for (size_t i = 0; i < items.size(); i++)
    PyList_SET_ITEM(l, static_cast<Py_ssize_t>(i), PyUnicode_FromString(items[i].c_str()));
  return l;
}

PyObject* py_fallback_ops(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  return string_list(fallback_op_list());
  END_HANDLE_TH_ERRORS
}

PyObject* py_fallback_total(PyObject*, PyObject*) { return PyLong_FromLongLong(fallback_op_total()); }

// Coverage recording for the conformance harness: _set_coverage(on) turns it on or off;
// _take_reached() returns the registered overloads called since the last take ("aten::x.y").
PyObject* py_set_coverage(PyObject*, PyObject* on) {
  g_coverage_on.store(PyObject_IsTrue(on) == 1);
  Py_RETURN_NONE;
}

PyObject* py_take_reached(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  return string_list(take_reached());
  END_HANDLE_TH_ERRORS
}

// {"aten::<overload>": ["float32", ...]}: the dtypes kernels registered with a dtype set other
// than the default (every dtype the runtime computes with) run natively (for the first tensor
// argument; stored-only dtypes in any tensor argument); other dtypes take the CPU fallback.
PyObject* py_native_dtypes(PyObject*, PyObject*) {
  HANDLE_TH_ERRORS
  PyObject* d = PyDict_New();
  for (auto& [name, types] : native_dtype_table()) {
    PyObject* l = PyList_New(static_cast<Py_ssize_t>(types.size()));
    for (size_t i = 0; i < types.size(); i++) {
      std::string t(c10::getDtypeNames(types[i]).first);
      PyList_SET_ITEM(l, static_cast<Py_ssize_t>(i), PyUnicode_FromString(t.c_str()));
    }
    PyDict_SetItemString(d, name.c_str(), l);
    Py_DECREF(l);
  }
  return d;
  END_HANDLE_TH_ERRORS
}

PyObject* py_clear_op_tracking(PyObject*, PyObject*) {
  clear_op_tracking();
  Py_RETURN_NONE;
}

PyObject* py_set_tracking_paused(PyObject*, PyObject* arg) {
  bool prev = tracking_paused();
  set_tracking_paused(PyObject_IsTrue(arg));
  return PyBool_FromLong(prev);
}

// The float64 warning (once per process, shared with the eager kernels) for `arg`, a str naming
// what computes float64 as float32: a compiled graph's C steps, which no eager kernel warns for.
PyObject* py_warn_float64(PyObject*, PyObject* arg) {
  HANDLE_TH_ERRORS
  const char* what = PyUnicode_AsUTF8(arg);
  if (!what) return nullptr;
  warn_float64(what);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

PyObject* py_set_strict(PyObject*, PyObject* arg) {
  bool prev = strict_fallback();
  set_strict_fallback(PyObject_IsTrue(arg));
  return PyBool_FromLong(prev);
}

// Test hook: enqueues a task that fails with `message` on the current stream of `device`, to
// exercise sticky asynchronous errors before any kernel can fail on bad data.
vnc_status failing_task(void* payload) {
  return vnc_set_error(VNC_ERR_INVALID_ARGUMENT, "%s", static_cast<const char*>(payload));
}

PyObject* py_debug_enqueue_failure(PyObject*, PyObject* args) {
  HANDLE_TH_ERRORS
  PyObject* dev;
  const char* op;
  const char* message;
  if (!PyArg_ParseTuple(args, "Oss", &dev, &op, &message)) return nullptr;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s", message);
  vnc_stream* s = current_vnc_stream(static_cast<c10::DeviceIndex>(device_arg(dev)));
  check(vnc_launch(s, op, failing_task, buf, sizeof buf, nullptr));
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// Registers the c10d backend class (_NeuronBackend) once torch.distributed is imported.
PyObject* py_init_distributed(PyObject* module, PyObject*) {
  HANDLE_TH_ERRORS
  init_distributed(module);
  Py_RETURN_NONE;
  END_HANDLE_TH_ERRORS
}

// _reduction_geometry(sum_like, self, out, dims, keepdim) -> None (eager casts first) or
// (shape, strides, dtypes): the reduction TensorIterator's geometry (innermost dim first, byte
// strides per operand, operand 0 the output), for the compiler.
PyObject* py_reduction_geometry(PyObject*, PyObject* args) {
  HANDLE_TH_ERRORS
  int sum_like, keepdim;
  PyObject *self, *out, *dims;
  if (!PyArg_ParseTuple(args, "pOOOp", &sum_like, &self, &out, &dims, &keepdim)) return nullptr;
  std::vector<int64_t> dv;
  PyObject* seq = PySequence_Fast(dims, "dims must be a sequence of int");
  if (!seq) return nullptr;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) dv.push_back(PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i)));
  Py_DECREF(seq);
  if (PyErr_Occurred()) return nullptr;
  vnc_iter it{};
  if (!reduction_geometry(sum_like, THPVariable_Unpack(self), THPVariable_Unpack(out), dv, keepdim, &it)) Py_RETURN_NONE;
  PyObject* shape = PyList_New(it.ndim);
  PyObject* strides = PyList_New(it.nops);
  PyObject* dtypes = PyList_New(it.nops);
  for (int d = 0; d < it.ndim; d++) PyList_SET_ITEM(shape, d, PyLong_FromLongLong(it.shape[d]));
  for (int k = 0; k < it.nops; k++) {
    PyObject* st = PyList_New(it.ndim);
    for (int d = 0; d < it.ndim; d++) PyList_SET_ITEM(st, d, PyLong_FromLongLong(it.strides[k][d]));
    PyList_SET_ITEM(strides, k, st);
    PyList_SET_ITEM(dtypes, k, PyLong_FromLong(it.dtypes[k]));
  }
  return Py_BuildValue("(NNN)", shape, strides, dtypes);
  END_HANDLE_TH_ERRORS
}

PyMethodDef methods[] = {
    {"_reduction_geometry", py_reduction_geometry, METH_VARARGS, nullptr},
    {"_register", py_register, METH_NOARGS, "Register hooks, guard, allocator (once)."},
    {"_set_warning_function", py_set_warning_function, METH_O,
     "fn(message, kind) -> bool raises the backend's warnings (kind 0: CPU fallback, 1: float64)."},
    {"_device_count", py_device_count, METH_NOARGS, nullptr},
    {"_is_initialized", py_is_initialized, METH_NOARGS, nullptr},
    {"_in_bad_fork", py_in_bad_fork, METH_NOARGS, nullptr},
    {"_launch_blocking", py_launch_blocking, METH_NOARGS, nullptr},
    {"_num_threads", py_num_threads, METH_NOARGS, nullptr},
    {"_set_num_threads", py_set_num_threads, METH_O, nullptr},
    {"_isa", py_cpu_isa, METH_NOARGS, nullptr},
    {"_gemm_provider", py_gemm_provider, METH_NOARGS, nullptr},
    {"_cpu_isa_supported", py_cpu_isa_supported, METH_O, nullptr},
    {"_init", py_init, METH_NOARGS, nullptr},
    {"_get_device", py_get_device, METH_NOARGS, nullptr},
    {"_set_device", py_set_device, METH_O, nullptr},
    {"_check_device", py_check_device, METH_O, nullptr},
    {"_synchronize", py_synchronize, METH_O, nullptr},
    {"_flush_autograd_threads", py_flush_autograd_threads, METH_NOARGS, nullptr},
    {"_capacity", py_capacity, METH_O, nullptr},
    {"_physical_id", py_physical_id, METH_O, nullptr},
    {"_memory_stats", py_memory_stats, METH_O, nullptr},
    {"_empty_cache", py_empty_cache, METH_NOARGS, nullptr},
    {"_plan_cache_stats", py_plan_cache_stats, METH_NOARGS, nullptr},
    {"_reset_peak", py_reset_peak, METH_O, nullptr},
    {"_reset_accumulated", py_reset_accumulated, METH_O, nullptr},
    {"_manual_seed", py_manual_seed, METH_VARARGS, nullptr},
    {"_seed", py_seed, METH_O, nullptr},
    {"_initial_seed", py_initial_seed, METH_O, nullptr},
    {"_get_rng_state", py_get_rng_state, METH_O, nullptr},
    {"_set_rng_state", py_set_rng_state, METH_VARARGS, nullptr},
    {"_executed_ops", py_executed_ops, METH_NOARGS, nullptr},
    {"_native_dtypes", py_native_dtypes, METH_NOARGS, nullptr},
    {"_set_coverage", py_set_coverage, METH_O, nullptr},
    {"_take_reached", py_take_reached, METH_NOARGS, nullptr},
    {"_fallback_ops", py_fallback_ops, METH_NOARGS, nullptr},
    {"_fallback_total", py_fallback_total, METH_NOARGS, nullptr},
    {"_clear_op_tracking", py_clear_op_tracking, METH_NOARGS, nullptr},
    {"_set_tracking_paused", py_set_tracking_paused, METH_O, nullptr},
    {"_set_strict", py_set_strict, METH_O, nullptr},
    {"_warn_float64", py_warn_float64, METH_O, nullptr},
    {"_debug_enqueue_failure", py_debug_enqueue_failure, METH_VARARGS, nullptr},
    {"_init_distributed", py_init_distributed, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr}};

PyModuleDef module_def = {PyModuleDef_HEAD_INIT, "torch_neuronx._C", "torch_neuronx native glue", -1, methods};

}  // namespace

PyMODINIT_FUNC PyInit__C(void) {
  if (!choose_gemm_provider()) return nullptr;
  PyObject* m = PyModule_Create(&module_def);
  if (m && torch_neuronx::add_jit_methods(m) < 0) Py_CLEAR(m);
  return m;
}
