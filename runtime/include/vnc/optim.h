/* vnc/optim.h — fused optimizer steps: one launch updates every parameter of a list
 * (torch.optim's fused=True path: _fused_adam_, _fused_adamw_, _fused_sgd_, _fused_adagrad_).
 *
 * The per-element arithmetic is the sequence of torch.optim's foreach implementation, in
 * float32 with the same roundings (scalars derived in double, then rounded to float32 as
 * the elementwise kernels round Python scalars), so fused and foreach steps agree bit for
 * bit on float32 parameters. Other floating dtypes compute in float32.
 *
 * Adam / AdamW (step t read from the float32 step tensor when the task runs):
 *   g = grad / grad_scale (written back to grad when grad_scale is given); g = -g if maximize
 *   AdamW: p = p * (1 - lr*wd)        Adam: g = g + wd * p
 *   m = lerp(m, g, 1 - beta1);  v = v * beta2;  v = v + (1 - beta2) * g * g
 *   amsgrad: vmax = max(vmax, v), d = sqrt(vmax); else d = sqrt(v)
 *   d = d / sqrt(1 - beta2^t) + eps;  p = p + (-lr / (1 - beta1^t)) * (m / d)
 * SGD (momentum buffer in m):
 *   g = grad / grad_scale; g = -g if maximize; g = g + wd * p
 *   momentum: m = g on the first step, else m = m * momentum + (1 - dampening) * g;
 *             g = nesterov ? g + momentum * m : m
 *   p = p + (-lr) * g
 * Adagrad (state_sum in m; step t read as for Adam; ATen's CPU kernel's sequence):
 *   g = grad / grad_scale; g = -g if maximize; g = g + wd * p
 *   m = m + g * g;  clr = lr / (1 + (t - 1) * lr_decay);  p = p - clr * g / (sqrt(m) + eps)
 *   (scalars in float32 for every dtype: ATen's vectorised 16-bit path rounds eps to the
 *   parameter dtype, where 1e-10 becomes 0 and a zero gradient gives 0/0 = NaN; not copied)
 * When *found_inf != 0 (GradScaler found an inf/NaN) nothing is updated.
 */
#ifndef VNC_OPTIM_H
#define VNC_OPTIM_H

#include <stdint.h>
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum vnc_optim_kind {
  VNC_OPTIM_ADAM = 0,
  VNC_OPTIM_ADAMW = 1,
  VNC_OPTIM_SGD = 2,
  VNC_OPTIM_ADAGRAD = 3,
  VNC_OPTIM_KINDS
} vnc_optim_kind;

typedef struct vnc_optim_config {
  int32_t kind;                       /* vnc_optim_kind */
  int32_t param_dtype, grad_dtype;    /* floating dtypes; state tensors have param_dtype */
  double lr, beta1, beta2, weight_decay, eps;  /* Adam */
  double momentum, dampening;                  /* SGD */
  double lr_decay;                             /* Adagrad (with lr, weight_decay, eps) */
  int amsgrad, maximize, nesterov, first_step;
  const float *lr_tensor;             /* when set, lr is read from here at run time */
  const float *grad_scale, *found_inf; /* may be NULL */
} vnc_optim_config;

/* One parameter: contiguous tensors of `numel` elements. m/v/vmax may be NULL where the
 * configuration does not use them (v, vmax for SGD and Adagrad; m for SGD without momentum).
 * m is Adam's exp_avg, SGD's momentum buffer, Adagrad's state_sum. */
typedef struct vnc_optim_param {
  void *param, *grad, *m, *v, *vmax;
  const float *step; /* Adam, Adagrad: the step count (already incremented), float32 */
  int64_t numel;
} vnc_optim_param;

vnc_status vnc_fused_optim(vnc_stream *s, const char *op, const vnc_optim_config *cfg, int64_t n,
                           const vnc_optim_param *params);

#ifdef __cplusplus
}
#endif
#endif
