#include "internal.h"

size_t vnc_dtype_size(int32_t dtype) {
  switch (dtype) {
    case VNC_UINT8: case VNC_INT8: case VNC_BOOL: return 1;
    case VNC_INT16: case VNC_FLOAT16: case VNC_BFLOAT16: return 2;
    case VNC_INT32: case VNC_FLOAT32: case VNC_COMPLEX32: return 4;
    case VNC_INT64: case VNC_FLOAT64: case VNC_COMPLEX64: return 8;
    case VNC_COMPLEX128: return 16;
    default: return 0;
  }
}

const char *vnc_dtype_name(int32_t dtype) {
  switch (dtype) {
    case VNC_UINT8: return "uint8";
    case VNC_INT8: return "int8";
    case VNC_INT16: return "int16";
    case VNC_INT32: return "int32";
    case VNC_INT64: return "int64";
    case VNC_FLOAT16: return "float16";
    case VNC_FLOAT32: return "float32";
    case VNC_FLOAT64: return "float64";
    case VNC_COMPLEX32: return "complex32";
    case VNC_COMPLEX64: return "complex64";
    case VNC_COMPLEX128: return "complex128";
    case VNC_BOOL: return "bool";
    case VNC_BFLOAT16: return "bfloat16";
    default: return "unknown";
  }
}

int64_t vnc_tensor_numel(const vnc_tensor *t) {
  int64_t n = 1;
  for (int d = 0; d < t->ndim; d++) n *= t->sizes[d];
  return n;
}

vnc_tensor vnc_tensor_contiguous(void *data, int32_t dtype, int32_t ndim, const int64_t *sizes) {
  vnc_tensor t;
  t.data = data;
  t.dtype = dtype;
  t.ndim = ndim;
  int64_t stride = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    t.sizes[d] = sizes[d];
    t.strides[d] = stride;
    stride *= sizes[d] > 1 ? sizes[d] : 1;
  }
  return t;
}
