/* vnc/attention.h — scaled dot-product attention, forward and backward, for each
 * (batch, head) pair of float32 tensors:
 *   S = scale * Q K^T + bias;  causal: S[i][j] = -inf for j > i (top-left aligned, as
 *   PyTorch's math path);  P = softmax(S) by rows (a row with no finite score gives P = 0
 *   and lse = -inf, as PyTorch's safe softmax);  O = P V;  lse[i] = logsumexp(S[i]).
 * Q [B, H, L, E], K [B, H / G, S, E], V [B, H / G, S, Ev], O [B, H, L, Ev] are vnc_attn_operand
 * (grouped-query attention: query head h reads key/value head h / G, G = `group`, 0 or 1 for
 * as many key/value heads as query heads):
 * any batch, head and row strides, rows contiguous (so a (B, L, H, E) layout seen as
 * (B, H, L, E) needs no copy); lse [B, H, L] contiguous. bias (optional) is read at
 * bias + b*bias_strides[0] + h*[1] + i*[2] + j*[3] (element strides; 0 for broadcast dims).
 * Fused per pair (kernels/attention.c): products and softmax run in a per-thread workspace
 * with the CPU tier's vectorised loops, which compute the same bits on every tier; work is
 * split over (batch, head) pairs only, so results do not depend on the runtime's thread
 * count. The backward recomputes P from lse. Workspace: about (2 S + E + Ev) * L + 3 L * E
 * floats per thread (rounded up to 16 columns). */
#ifndef VNC_ATTENTION_H
#define VNC_ATTENTION_H

#include <stdint.h>
#include "stream.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct vnc_attn_operand {
  float *data;
  int64_t batch_stride, head_stride, row_stride; /* elements */
} vnc_attn_operand;

typedef struct vnc_attention {
  int64_t B, H, L, S, E, Ev;
  double scale;
  int causal;
  vnc_attn_operand q, k, v;
  const float *bias;        /* may be NULL */
  int64_t bias_strides[4];
  int64_t group;            /* query heads per key/value head; 0 or 1: one each */
} vnc_attention;

vnc_status vnc_attention_forward(vnc_stream *s, const char *op, const vnc_attention *a, const vnc_attn_operand *out,
                                 float *lse);
/* dout like out; out and lse from the forward. dq (shaped like q) and dk, dv ([B, H, S, E] and
 * [B, H, S, Ev]: one per query head, which the caller sums over each group when G > 1)
 * receive the gradients; dbias (may be NULL) receives dS as a contiguous [B, H, L, S] tensor. */
vnc_status vnc_attention_backward(vnc_stream *s, const char *op, const vnc_attention *a, const vnc_attn_operand *dout,
                                  const vnc_attn_operand *out, const float *lse, const vnc_attn_operand *dq,
                                  const vnc_attn_operand *dk, const vnc_attn_operand *dv, float *dbias);

#ifdef __cplusplus
}
#endif
#endif
