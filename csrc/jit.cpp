// torch_neuronx._C entry points of the JIT (runtime/include/vnc/jit.h): compile generated C,
// look up symbols, launch a compiled graph on the current stream. CPython API and the C
// runtime only (no PyTorch headers), so this unit builds in a second.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <string>
#include <vector>

extern "C" {
#include "vnc/vnc.h"
#include "vnc/jit.h"
}

namespace {

PyObject* raise_runtime(vnc_status st) {
  PyErr_SetString(st == VNC_ERR_OUT_OF_MEMORY ? PyExc_MemoryError : PyExc_RuntimeError, vnc_last_error());
  return nullptr;
}

vnc_jit_module* module_arg(PyObject* o) {
  void* p = PyLong_AsVoidPtr(o);
  if (!p && !PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "null JIT module handle");
  return static_cast<vnc_jit_module*>(p);
}

// _jit_compile(source, name, include_dirs, cflags, cache_dir, keep_dir) -> (handle, cache_hit)
PyObject* py_jit_compile(PyObject*, PyObject* args) {
  const char *source, *name, *cflags, *cache_dir, *keep_dir = nullptr;
  PyObject* dirs;
  if (!PyArg_ParseTuple(args, "ssOssz", &source, &name, &dirs, &cflags, &cache_dir, &keep_dir)) return nullptr;
  PyObject* seq = PySequence_Fast(dirs, "include_dirs must be a sequence of str");
  if (!seq) return nullptr;
  std::vector<const char*> inc;
  for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq); i++) {
    const char* d = PyUnicode_AsUTF8(PySequence_Fast_GET_ITEM(seq, i));
    if (!d) {
      Py_DECREF(seq);
      return nullptr;
    }
    inc.push_back(d);
  }
  vnc_jit_options o{};
  o.cache_dir = cache_dir;
  o.include_dirs = inc.data();
  o.n_include_dirs = static_cast<int>(inc.size());
  o.cflags = cflags;
  o.name = name;
  o.keep_dir = keep_dir;
  vnc_jit_module* m = nullptr;
  int hit = 0;
  vnc_status st;
  Py_BEGIN_ALLOW_THREADS st = vnc_jit_compile(source, &o, &m, &hit);
  Py_END_ALLOW_THREADS Py_DECREF(seq);
  if (st != VNC_OK) return raise_runtime(st);
  return Py_BuildValue("(NO)", PyLong_FromVoidPtr(m), hit ? Py_True : Py_False);
}

// _jit_symbol(handle, name) -> address (0 when missing)
PyObject* py_jit_symbol(PyObject*, PyObject* args) {
  PyObject* h;
  const char* name;
  if (!PyArg_ParseTuple(args, "Os", &h, &name)) return nullptr;
  vnc_jit_module* m = module_arg(h);
  if (!m) return nullptr;
  return PyLong_FromVoidPtr(vnc_jit_symbol(m, name));
}

PyObject* py_jit_release(PyObject*, PyObject* h) {
  vnc_jit_module* m = module_arg(h);
  if (!m) return nullptr;
  vnc_jit_module_release(m);
  Py_RETURN_NONE;
}

PyObject* py_jit_path(PyObject*, PyObject* h) {
  vnc_jit_module* m = module_arg(h);
  if (!m) return nullptr;
  return PyUnicode_FromString(vnc_jit_path(m));
}

// _jit_launch(handle, fn_address, device, op_name, addresses) on the current stream of device.
PyObject* py_jit_launch(PyObject*, PyObject* args) {
  PyObject *h, *fn, *addrs;
  int device;
  const char* op;
  if (!PyArg_ParseTuple(args, "OOisO", &h, &fn, &device, &op, &addrs)) return nullptr;
  vnc_jit_module* m = module_arg(h);
  if (!m) return nullptr;
  void* f = PyLong_AsVoidPtr(fn);
  if (!f) {
    if (!PyErr_Occurred()) PyErr_SetString(PyExc_ValueError, "null graph function");
    return nullptr;
  }
  PyObject* seq = PySequence_Fast(addrs, "addresses must be a sequence of int");
  if (!seq) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  std::vector<char*> bufs(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; i++) {
    bufs[static_cast<size_t>(i)] = static_cast<char*>(PyLong_AsVoidPtr(PySequence_Fast_GET_ITEM(seq, i)));
    if (PyErr_Occurred()) {
      Py_DECREF(seq);
      return nullptr;
    }
  }
  Py_DECREF(seq);
  vnc_stream* s = nullptr;
  vnc_status st = vnc_current_stream(device, &s);
  if (st == VNC_OK)
    st = vnc_jit_launch(s, op, m, reinterpret_cast<vnc_jit_graph_fn>(f), bufs.data(), static_cast<int64_t>(n));
  if (st != VNC_OK) return raise_runtime(st);
  Py_RETURN_NONE;
}

PyObject* py_jit_stats(PyObject*, PyObject*) {
  vnc_jit_stats s;
  vnc_jit_get_stats(&s);
  return Py_BuildValue("{s:L,s:L,s:L,s:L,s:d}", "compiles", static_cast<long long>(s.compiles), "disk_hits",
                       static_cast<long long>(s.disk_hits), "memory_hits", static_cast<long long>(s.memory_hits),
                       "loaded", static_cast<long long>(s.loaded), "compile_seconds", s.compile_seconds);
}

PyObject* py_jit_compiler(PyObject*, PyObject*) { return PyUnicode_FromString(vnc_jit_compiler()); }

// _ew_table() -> [(name, arity, {class dtype: supported})]: the elementwise instruction set,
// for the compiler's lowering (which ops exist, for which compute dtypes).
PyObject* py_ew_table(PyObject*, PyObject*) {
  static const int32_t dtypes[] = {VNC_FLOAT32, VNC_INT64, VNC_INT32, VNC_INT16, VNC_INT8, VNC_UINT8, VNC_BOOL, VNC_COMPLEX64};
  PyObject* l = PyList_New(VNC_EW_COUNT);
  if (!l) return nullptr;
  for (int op = 0; op < VNC_EW_COUNT; op++) {
    PyObject* sup = PyDict_New();
    for (int32_t dt : dtypes) {
      PyObject* k = PyLong_FromLong(dt);
      PyDict_SetItem(sup, k, vnc_elementwise_supports(static_cast<vnc_ew_op>(op), dt) ? Py_True : Py_False);
      Py_DECREF(k);
    }
    PyList_SET_ITEM(l, op, Py_BuildValue("(siN)", vnc_elementwise_name(static_cast<vnc_ew_op>(op)),
                                         vnc_elementwise_arity(static_cast<vnc_ew_op>(op)), sup));
  }
  return l;
}

PyMethodDef jit_methods[] = {
    {"_jit_compile", py_jit_compile, METH_VARARGS, nullptr},
    {"_jit_symbol", py_jit_symbol, METH_VARARGS, nullptr},
    {"_jit_release", py_jit_release, METH_O, nullptr},
    {"_jit_path", py_jit_path, METH_O, nullptr},
    {"_jit_launch", py_jit_launch, METH_VARARGS, nullptr},
    {"_jit_stats", py_jit_stats, METH_NOARGS, nullptr},
    {"_jit_compiler", py_jit_compiler, METH_NOARGS, nullptr},
    {"_ew_table", py_ew_table, METH_NOARGS, nullptr},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

namespace torch_neuronx {
// Adds the JIT functions to torch_neuronx._C (called from PyInit__C).
int add_jit_methods(PyObject* module) { return PyModule_AddFunctions(module, jit_methods); }
}  // namespace torch_neuronx
