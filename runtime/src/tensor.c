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

size_t vnc_dtype_storage_size(int32_t dtype) {
  switch (dtype) {
    case VNC_BITS1X8: case VNC_BITS2X4: case VNC_BITS4X2: case VNC_BITS8:
    case VNC_FLOAT8_E5M2: case VNC_FLOAT8_E4M3FN: case VNC_FLOAT8_E5M2FNUZ: case VNC_FLOAT8_E4M3FNUZ:
    case VNC_FLOAT8_E8M0FNU: case VNC_FLOAT4_E2M1FN_X2: return 1;
    case VNC_BITS16: case VNC_UINT16: return 2;
    case VNC_UINT32: return 4;
    case VNC_UINT64: return 8;
    default: return vnc_dtype_size(dtype);
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
    case VNC_BITS1X8: return "bits1x8";
    case VNC_BITS2X4: return "bits2x4";
    case VNC_BITS4X2: return "bits4x2";
    case VNC_BITS8: return "bits8";
    case VNC_BITS16: return "bits16";
    case VNC_FLOAT8_E5M2: return "float8_e5m2";
    case VNC_FLOAT8_E4M3FN: return "float8_e4m3fn";
    case VNC_FLOAT8_E5M2FNUZ: return "float8_e5m2fnuz";
    case VNC_FLOAT8_E4M3FNUZ: return "float8_e4m3fnuz";
    case VNC_UINT16: return "uint16";
    case VNC_UINT32: return "uint32";
    case VNC_UINT64: return "uint64";
    case VNC_FLOAT8_E8M0FNU: return "float8_e8m0fnu";
    case VNC_FLOAT4_E2M1FN_X2: return "float4_e2m1fn_x2";
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
