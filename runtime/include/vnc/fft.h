/* vnc/fft.h — discrete Fourier transforms along one dim of strided tensors (torch.fft).
 *
 * Each 1-D slice ("line", see vnc/sort.h) along `dim` is transformed independently, lines in
 * parallel. Any length: mixed-radix Cooley-Tukey (decimation in time) over the factors of n
 * up to 13, Bluestein's chirp-z algorithm (a power-of-two convolution of length >= 2n - 1)
 * when n has a larger prime factor. Arithmetic is in double with twiddles from exact integer
 * angles, results rounded once to the output dtype; float64 / complex128 operands go
 * through float32 (the device rule). Sizes of x and out agree except along `dim`.
 *
 *   X[k] = scale * sum_j x[j] exp(sign 2 pi i j k / n),  sign = -1 forward, +1 inverse.
 *
 *     vnc_fft_c2c(stream, "aten::_fft_c2c", &x, &out, -1, -1, 1.0);
 */
#ifndef VNC_FFT_H
#define VNC_FFT_H

#include <stdint.h>
#include "stream.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Complex to complex: x, out complex64/complex128 with one length n along dim. sign -1 or +1. */
vnc_status vnc_fft_c2c(vnc_stream *s, const char *op, const vnc_tensor *x, const vnc_tensor *out, int dim, int sign,
                       double scale);
/* Real to complex, forward (sign -1): x real (float32/float64) of length n along dim; out
 * complex of length n / 2 + 1 (the non-redundant half) or n (the full, Hermitian spectrum). */
vnc_status vnc_fft_r2c(vnc_stream *s, const char *op, const vnc_tensor *x, const vnc_tensor *out, int dim,
                       double scale);
/* Complex to real, inverse (sign +1): out real of length n along dim; x complex holding at
 * least n / 2 + 1 entries, the first half of a Hermitian spectrum (the rest is implied:
 * X[n - k] = conj(X[k]); the imaginary parts of X[0] and, for even n, X[n / 2] are ignored,
 * as pocketfft's c2r). */
vnc_status vnc_fft_c2r(vnc_stream *s, const char *op, const vnc_tensor *x, const vnc_tensor *out, int dim,
                       double scale);

#ifdef __cplusplus
}
#endif
#endif
