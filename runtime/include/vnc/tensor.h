/* vnc/tensor.h — dtypes and the strided tensor view every kernel takes.
 *
 * A vnc_tensor describes memory the runtime does not own: a base pointer (storage offset
 * already applied), sizes and strides in elements (any value, 0 and negative included),
 * and a dtype. The dtype numbering equals c10::ScalarType so the glue converts by cast.
 *
 *     vnc_tensor t = vnc_tensor_contiguous(ptr, VNC_FLOAT32, 2, (int64_t[]){4, 8});
 */
#ifndef VNC_TENSOR_H
#define VNC_TENSOR_H

#include <stdint.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VNC_MAX_DIMS 25 /* PyTorch tensors may have more; such tensors are rejected */

typedef enum vnc_dtype {
  VNC_UINT8 = 0,
  VNC_INT8 = 1,
  VNC_INT16 = 2,
  VNC_INT32 = 3,
  VNC_INT64 = 4,
  VNC_FLOAT16 = 5,
  VNC_FLOAT32 = 6,
  VNC_FLOAT64 = 7,
  VNC_COMPLEX32 = 8, /* two float16 */
  VNC_COMPLEX64 = 9,
  VNC_COMPLEX128 = 10,
  VNC_BOOL = 11,
  VNC_BFLOAT16 = 15,
  VNC_DTYPE_END = 16, /* the dtypes above are computed with; those below are stored only */
  VNC_BITS1X8 = 18,
  VNC_BITS2X4 = 19,
  VNC_BITS4X2 = 20,
  VNC_BITS8 = 21,
  VNC_BITS16 = 22,
  VNC_FLOAT8_E5M2 = 23,
  VNC_FLOAT8_E4M3FN = 24,
  VNC_FLOAT8_E5M2FNUZ = 25,
  VNC_FLOAT8_E4M3FNUZ = 26,
  VNC_UINT16 = 27,
  VNC_UINT32 = 28,
  VNC_UINT64 = 29,
  VNC_FLOAT8_E8M0FNU = 44,
  VNC_FLOAT4_E2M1FN_X2 = 45
} vnc_dtype;

typedef struct vnc_tensor {
  void *data;                      /* address of element [0,...,0] */
  int64_t sizes[VNC_MAX_DIMS];
  int64_t strides[VNC_MAX_DIMS];   /* in elements */
  int32_t ndim;                    /* 0 for a scalar */
  int32_t dtype;                   /* a vnc_dtype */
} vnc_tensor;

/* Bytes per element of a computed dtype (below VNC_DTYPE_END), or 0 for others: kernels
 * refuse a dtype of size 0. */
size_t vnc_dtype_size(int32_t dtype);
/* Bytes per element of any dtype the runtime stores, stored-only ones included (vnc_copy
 * between equal dtypes and vnc_fill move their bytes), or 0 for an unknown code. */
size_t vnc_dtype_storage_size(int32_t dtype);
/* Name such as "float32"; "unknown" for others. */
const char *vnc_dtype_name(int32_t dtype);
/* Number of elements (product of sizes; 1 for ndim == 0). */
int64_t vnc_tensor_numel(const vnc_tensor *t);
/* A contiguous row-major view of `ndim` sizes over `data`. */
vnc_tensor vnc_tensor_contiguous(void *data, int32_t dtype, int32_t ndim, const int64_t *sizes);

#ifdef __cplusplus
}
#endif
#endif
