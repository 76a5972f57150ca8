/* vnc/ctc.h — connectionist temporal classification loss (nn.CTCLoss) and its gradient, by
 * ATen's CPU algorithm (aten/src/ATen/native/LossCTC.cpp; Graves et al., ICML 2006): the
 * forward (alpha) recursion over the blank-extended target l' (blank, l1, blank, l2, ...,
 * blank) in log space, nll = -log(alpha[T-1][2S] + alpha[T-1][2S-1]); the backward (beta)
 * recursion, then d nll / d log_probs[t, c] = exp(lp) - exp(log(sum over s with l'(s) = c of
 * alpha beta) + nll - lp), times grad_out. Batch entries in parallel, arithmetic in float32
 * (expf/logf, as ATen's float kernel; float64 through float32, the device rule).
 *
 * log_probs [T, N, C] (floating, any strides); targets [N, S_max] padded or 1-D (the
 * sequences concatenated, entry n starting after the previous lengths), int32 or int64; the
 * lengths are host arrays of N entries (copied). log_alpha [N, T, 2 S_max + 1] holds the
 * forward's alphas for the backward. A target outside [0, C) fails the task (VNC_ERR_INDEX).
 */
#ifndef VNC_CTC_H
#define VNC_CTC_H

#include <stdint.h>
#include "stream.h"
#include "tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vnc_ctc_args {
  vnc_tensor log_probs, targets;
  const int64_t *input_lengths, *target_lengths; /* N each */
  int64_t blank;
} vnc_ctc_args;

/* nll [N] and log_alpha (log_probs' dtype). */
vnc_status vnc_ctc_loss(vnc_stream *s, const char *op, const vnc_ctc_args *a, const vnc_tensor *nll,
                        const vnc_tensor *log_alpha);
/* grad [T, N, C] (fully written; zero past each input length, and for the whole entry when
 * zero_infinity and its nll is infinite) from grad_out [N] and the forward's nll, log_alpha. */
vnc_status vnc_ctc_loss_backward(vnc_stream *s, const char *op, const vnc_ctc_args *a, const vnc_tensor *grad_out,
                                 const vnc_tensor *nll, const vnc_tensor *log_alpha, int zero_infinity,
                                 const vnc_tensor *grad);

#ifdef __cplusplus
}
#endif
#endif
