"""Out= and in-place forms writing a tensor whose elements share memory (an expanded, stride-0
view) behave as on CPU PyTorch: where CPU refuses with ATen's "unsupported operation: more than
one element of the written-to tensor refers to a single memory location" (at::assert_no_internal_
overlap), neuron refuses the same way and writes nothing; where CPU writes (fill_, masked_fill_,
index_put_, tril/triu, addmv), neuron writes too.

Two sweeps, each comparing the outcome on neuron with CPU's (where CPU's own kernel writes past
the expanded tensor's memory, CPU_UNSAFE, neuron must refuse):
- TABLE: hand-written calls of the out= and in-place overloads with a native neuron kernel
  (docs/op_compatibility.md), their composites and the forms that reach the CPU fallback, with
  the target expanded along different dims;
- every OpInfo with an out= or in-place variant (its first float32 samples that CPU runs), the
  result's first dim of size > 1 expanded: fallback ops included, whose written arguments reach
  CPU's kernel expanded the same way.
"""
from __future__ import annotations

import itertools
import warnings

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import torch_neuronx
from conformance import NONDETERMINISTIC, to_device

MSG = "more than one element of the written-to tensor refers to a single memory location"
F32, I64 = torch.float32, torch.int64
aten = torch.ops.aten


def X(*shape, dtype=F32, seed=0, low=-2.0, high=2.0):
    """Deterministic CPU values of `shape` (distinct enough that order statistics have no ties)."""
    g = torch.Generator().manual_seed(seed + 31 * len(shape) + sum(shape))
    if dtype.is_floating_point or dtype.is_complex:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    return torch.randint(int(low), int(high) + 1, shape, generator=g).to(dtype)


def E(*shape, dim=0, dtype=F32, seed=7, low=0.5, high=2.0):
    """A CPU tensor of `shape` whose `dim` is expanded (stride 0) from one slice of values."""
    one = list(shape)
    one[dim] = 1
    return X(*one, dtype=dtype, seed=seed, low=low, high=high).expand(shape)


def mask(*shape):
    return X(*shape, dtype=torch.bool, seed=3)


def idx(*values):
    return torch.tensor(values, dtype=I64)


def _c(x):
    return x.to(torch.complex64)


# name -> (function of the arguments, the arguments on CPU). The arguments move to the device
# with their strides (conformance.to_device: expanded stays expanded); the function returns
# what is compared: the written tensors.
def _out(f, *args, outs, names=None, **kwargs):
    """f(*args, **kwargs, out=outs), or with the out tensors passed by their `names` (an aten
    overload's out arguments): the out tensors are compared."""
    def call(a, kw, o):
        if names:
            f(*a, **kw, **dict(zip(names, o if isinstance(o, tuple) else (o,))))
        else:
            f(*a, **kw, out=o)
        return o
    return (call, args, kwargs, outs)


def _inplace(f, target, *args, **kwargs):
    """f(target, *args, **kwargs) writing its first argument, which is compared."""
    def call(a, kw, o):
        f(*a, **kw)
        return a[0]
    return (call, (target,) + args, kwargs, None)


UNARY = ["abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "erf", "erfc", "erfinv",
         "exp", "exp2", "expm1", "floor", "frac", "log", "log10", "log1p", "log2", "neg", "reciprocal", "round",
         "rsqrt", "sigmoid", "sign", "sgn", "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "nan_to_num", "relu",
         "logit", "i0", "digamma", "lgamma", "signbit", "sinc", "angle", "deg2rad", "rad2deg", "square", "logical_not",
         "bitwise_not", "positive", "fix"]
BINARY = ["add", "sub", "mul", "div", "atan2", "copysign", "floor_divide", "fmod", "remainder", "hypot", "maximum",
          "minimum", "fmax", "fmin", "pow", "eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
          "logical_xor", "xlogy", "logaddexp", "heaviside", "nextafter", "bitwise_and", "bitwise_or", "bitwise_xor"]


GI, OI = ("grad_input",), ("out", "indices")


def _table():
    t = {}
    x, y = X(3, 4, low=0.1, high=0.9), X(3, 4, seed=1, low=0.1, high=0.9)
    ints = X(3, 4, dtype=I64, low=0, high=6)
    for name in UNARY:
        src = ints if name == "bitwise_not" else x
        if name not in ("positive", "relu"):  # they have no out= form
            dt = torch.bool if name in ("signbit", "logical_not") else src.dtype
            t[f"{name}.out"] = _out(getattr(torch, name), src, outs=E(3, 4, dtype=dt))
        if hasattr(torch.Tensor, name + "_"):
            t[f"{name}_"] = _inplace(getattr(torch.Tensor, name + "_"), E(3, 4, dim=1, dtype=src.dtype, low=0.1,
                                                                           high=0.9))
    for name in BINARY:
        bits = name.startswith("bitwise")
        a, b = (ints, ints.flip(0)) if bits else (x, y)
        cmp = name in ("eq", "ne", "lt", "le", "gt", "ge") or name.startswith("logical")
        t[f"{name}.out"] = _out(getattr(torch, name), a, b, outs=E(3, 4, dtype=torch.bool if cmp else a.dtype))
        if hasattr(torch.Tensor, name + "_"):
            t[f"{name}_"] = _inplace(getattr(torch.Tensor, name + "_"), E(3, 4, dim=1, dtype=a.dtype), b)
    t.update({
        "lerp.Scalar_out": _out(torch.lerp, x, y, 0.5, outs=E(3, 4)),
        "lerp_.Scalar": _inplace(torch.Tensor.lerp_, E(3, 4), y, 0.5),
        "add.out (broadcast other)": _out(torch.add, x, y[:1], outs=E(3, 4)),
        "add_.Scalar": _inplace(torch.Tensor.add_, E(3, 4), 2.0),
        "mul_.Scalar": _inplace(torch.Tensor.mul_, E(3, 4), 2.0),
        "eq_.Scalar": _inplace(torch.Tensor.eq_, E(3, 4), 0.25),
        "pow_.Scalar": _inplace(torch.Tensor.pow_, E(3, 4), 2.0),
        "pow.Tensor_Scalar_out": _out(torch.pow, x, 2.0, outs=E(3, 4)),
        "clamp.out": _out(torch.clamp, x, 0.2, 0.6, outs=E(3, 4)),
        "clamp_": _inplace(torch.Tensor.clamp_, E(3, 4), 0.8, 1.2),
        "clamp_.Tensor": _inplace(torch.Tensor.clamp_, E(3, 4), x, y + 1),
        "clamp_min_": _inplace(torch.Tensor.clamp_min_, E(3, 4), 1.0),
        "clamp_max.out": _out(torch.clamp_max, x, 0.5, outs=E(3, 4)),
        "where.self_out": _out(torch.where, mask(3, 4), x, y, outs=E(3, 4)),
        "addcmul.out": _out(torch.addcmul, x, x, y, outs=E(3, 4)),
        "addcdiv_": _inplace(torch.Tensor.addcdiv_, E(3, 4), x, y),
        "threshold_": _inplace(torch.nn.functional.threshold_, E(3, 4), 1.0, 0.0),
        "threshold.out": _out(aten.threshold.out, x, 0.5, 0.0, outs=E(3, 4)),
        "hardtanh_": _inplace(torch.nn.functional.hardtanh_, E(3, 4), 0.6, 1.0),
        "leaky_relu_": _inplace(torch.nn.functional.leaky_relu_, E(3, 4), 0.1),
        "elu_": _inplace(torch.nn.functional.elu_, E(3, 4)),
        "gelu.out": _out(aten.gelu.out, x, outs=E(3, 4)),
        "silu.out": _out(aten.silu.out, x, outs=E(3, 4)),
        "softplus.out": _out(aten.softplus.out, x, 1.0, 20.0, outs=E(3, 4)),
        "sigmoid_backward.grad_input": _out(aten.sigmoid_backward.grad_input, y, x, outs=E(3, 4), names=GI),
        "tanh_backward.grad_input": _out(aten.tanh_backward.grad_input, y, x, outs=E(3, 4), names=GI),
        "threshold_backward.grad_input": _out(aten.threshold_backward.grad_input, y, x, 0.5, outs=E(3, 4), names=GI),
        "conj_physical.out": _out(torch.conj_physical, _c(x), outs=E(3, 4, dtype=torch.complex64)),
        "isposinf.out": _out(torch.isposinf, x, outs=E(3, 4, dtype=torch.bool)),
        "fill_.Scalar": _inplace(torch.Tensor.fill_, E(3, 4), 2.5),
        "fill_.Tensor": _inplace(torch.Tensor.fill_, E(3, 4), torch.tensor(2.5)),
        "zero_": _inplace(torch.Tensor.zero_, E(3, 4)),
        "copy_ (same device)": _inplace(torch.Tensor.copy_, E(3, 4), x),
        # scans
        "cumsum.out": _out(torch.cumsum, x, 1, outs=E(3, 4)),
        "cumsum.out (dim 1 expanded)": _out(torch.cumsum, x, 1, outs=E(3, 4, dim=1)),
        "cumsum_": _inplace(torch.Tensor.cumsum_, E(3, 4), 0),
        "cumprod.out": _out(torch.cumprod, x, 0, outs=E(3, 4)),
        "cumprod_": _inplace(torch.Tensor.cumprod_, E(3, 4), 0),
        "cumprod_ (dim 1 expanded)": _inplace(torch.Tensor.cumprod_, E(3, 4, dim=1), 1),
        "logcumsumexp.out": _out(torch.logcumsumexp, x, 1, outs=E(3, 4)),
        "_logcumsumexp.out": _out(aten._logcumsumexp.out, x, 0, outs=E(3, 4)),
        "cummax.out": _out(torch.cummax, x, 1, outs=(E(3, 4), E(3, 4, dtype=I64))),
        "cummin.out": _out(torch.cummin, x, 0, outs=(E(3, 4), E(3, 4, dtype=I64))),
        # sort, order statistics, search
        "sort.values_stable": _out(torch.sort, x, stable=True, dim=1, outs=(E(3, 4), E(3, 4, dtype=I64))),
        "topk.values": _out(torch.topk, x, 2, 1, outs=(E(3, 2), E(3, 2, dtype=I64))),
        "topk.values (indices expanded)": _out(torch.topk, x, 2, 1, outs=(X(3, 2), E(3, 2, dtype=I64))),
        "kthvalue.values": _out(torch.kthvalue, x, 2, 1, outs=(E(3), E(3, dtype=I64))),
        "median.dim_values": _out(torch.median, x, 1, outs=(E(3), E(3, dtype=I64))),
        "nanmedian.dim_values": _out(torch.nanmedian, x, 1, outs=(E(3), E(3, dtype=I64))),
        "searchsorted.Tensor_out": _out(torch.searchsorted, idx(0, 2, 4, 6), ints, outs=E(3, 4, dtype=I64)),
        "bucketize.Tensor_out": _out(torch.bucketize, ints, idx(0, 2, 4, 6), outs=E(3, 4, dtype=I64)),
        "isin.Tensor_Tensor_out": _out(torch.isin, ints, idx(1, 3), outs=E(3, 4, dtype=torch.bool)),
        "isin.Tensor_Scalar_out": _out(torch.isin, ints, 2, outs=E(3, 4, dtype=torch.bool)),
        # reductions
        "sum.IntList_out": _out(torch.sum, x, 1, outs=E(3)),
        "mean.out": _out(torch.mean, x, 0, outs=E(4)),
        "prod.int_out": _out(torch.prod, x, 1, outs=E(3)),
        "amax.out": _out(torch.amax, x, 1, outs=E(3)),
        "amin.out": _out(torch.amin, x, 0, outs=E(4)),
        "argmax.out": _out(torch.argmax, x, 1, outs=E(3, dtype=I64)),
        "argmin.out": _out(torch.argmin, x, 0, outs=E(4, dtype=I64)),
        "max.dim_max": _out(torch.max, x, 1, outs=(E(3), E(3, dtype=I64))),
        "max.dim_max (indices expanded)": _out(torch.max, x, 1, outs=(X(3), E(3, dtype=I64))),
        "min.dim_min": _out(torch.min, x, 0, outs=(E(4), E(4, dtype=I64))),
        "any.out": _out(torch.any, mask(3, 4), 1, outs=E(3, dtype=torch.bool)),
        "all.out": _out(torch.all, mask(3, 4), 0, outs=E(4, dtype=torch.bool)),
        "var.correction_out": _out(torch.var, x, 1, outs=E(3)),
        "std.correction_out": _out(torch.std, x, 0, outs=E(4)),
        "var_mean.correction_out": _out(aten.var_mean.correction_out, x, [1], outs=(E(3), E(3)),
                                        names=("out0", "out1")),
        "logsumexp.out": _out(torch.logsumexp, x, 1, outs=E(3)),
        "norm.out": _out(torch.norm, x, 2, 1, outs=E(3)),
        "linalg_vector_norm.out": _out(torch.linalg.vector_norm, x, 2, 1, outs=E(3)),
        "nansum.out": _out(torch.nansum, x, 1, outs=E(3)),
        "histc.out": _out(torch.histc, x, 4, 0, 1, outs=E(4)),
        # matrix products
        "mm.out": _out(torch.mm, x, y.t(), outs=E(3, 3)),
        "mm.out (dim 1 expanded)": _out(torch.mm, x, y.t(), outs=E(3, 3, dim=1)),
        "bmm.out": _out(torch.bmm, X(2, 3, 4), X(2, 4, 5), outs=E(2, 3, 5, dim=1)),
        "addmm.out": _out(torch.addmm, X(3, 5), x, X(4, 5), outs=E(3, 5)),
        "addmm.out (beta 0)": _out(torch.addmm, X(3, 5), x, X(4, 5), beta=0, outs=E(3, 5)),
        "addmm_": _inplace(torch.Tensor.addmm_, E(3, 5), x, X(4, 5)),
        "_addmm_activation.out": _out(aten._addmm_activation.out, X(5), x, X(4, 5), outs=E(3, 5)),
        "baddbmm.out": _out(torch.baddbmm, X(2, 3, 5), X(2, 3, 4), X(2, 4, 5), outs=E(2, 3, 5)),
        "baddbmm_": _inplace(torch.Tensor.baddbmm_, E(2, 3, 5, dim=2), X(2, 3, 4), X(2, 4, 5)),
        "addmv.out": _out(torch.addmv, X(3), x, X(4), outs=E(3)),
        "addmv.out (beta 0)": _out(torch.addmv, X(3), x, X(4), beta=0, outs=E(3)),
        "addmv_": _inplace(torch.Tensor.addmv_, E(3), x, X(4)),
        "addr.out": _out(torch.addr, X(3, 4), X(3), X(4), outs=E(3, 4)),
        "addr_": _inplace(torch.Tensor.addr_, E(3, 4), X(3), X(4)),
        "matmul.out": _out(torch.matmul, x, y.t(), outs=E(3, 3)),
        "addbmm.out": _out(torch.addbmm, X(3, 5), X(2, 3, 4), X(2, 4, 5), outs=E(3, 5)),
        "linalg_cross.out": _out(torch.linalg.cross, X(4, 3), X(4, 3, seed=1), outs=E(4, 3)),
        # indexing
        "gather.out": _out(torch.gather, x, 1, idx(0, 2, 1, 3).expand(3, 4).clone(), outs=E(3, 4)),
        "scatter.src_out": _out(torch.scatter, x, 1, idx(3, 2, 1, 0).repeat(3, 1), y, outs=E(3, 4)),
        "scatter_.src": _inplace(torch.Tensor.scatter_, E(3, 4), 1, idx(3, 2, 1, 0).repeat(3, 1), y),
        "scatter_.value": _inplace(torch.Tensor.scatter_, E(3, 4), 1, idx(3, 2, 1, 0).repeat(3, 1), 1.5),
        "scatter_.reduce": _inplace(torch.Tensor.scatter_, E(3, 4), 1, idx(3, 2, 1, 0).repeat(3, 1), y,
                                    reduce="add"),
        "scatter_add_": _inplace(torch.Tensor.scatter_add_, E(3, 4), 1, idx(3, 2, 1, 0).repeat(3, 1), y),
        "scatter_add.out": _out(torch.scatter_add, x, 0, idx(2, 1, 0, 2).repeat(3, 1), y, outs=E(3, 4)),
        "scatter_reduce_.two": _inplace(torch.Tensor.scatter_reduce_, E(3, 4), 1, idx(3, 2, 1, 0).repeat(3, 1), y,
                                        "amax"),
        "scatter_reduce.two_out": _out(torch.scatter_reduce, x, 1, idx(3, 2, 1, 0).repeat(3, 1), y, "sum",
                                       outs=E(3, 4)),
        "index_add_": _inplace(torch.Tensor.index_add_, E(3, 4), 0, idx(2, 0), X(2, 4)),
        "index_add.out": _out(torch.index_add, x, 1, idx(3, 1), X(3, 2), outs=E(3, 4)),
        "index_copy_": _inplace(torch.Tensor.index_copy_, E(3, 4), 1, idx(3, 1), X(3, 2)),
        "index_copy.out": _out(torch.index_copy, x, 0, idx(2, 0), X(2, 4), outs=E(3, 4)),
        "index_fill_.int_Scalar": _inplace(torch.Tensor.index_fill_, E(3, 4), 1, idx(0, 2), 9.0),
        "index_fill_.int_Tensor": _inplace(torch.Tensor.index_fill_, E(3, 4), 1, idx(0, 2), torch.tensor(9.0)),
        "index_put_": _inplace(torch.Tensor.index_put_, E(3, 4), (idx(0, 2),), X(2, 4)),
        "index_put_ (accumulate)": _inplace(torch.Tensor.index_put_, E(3, 4), (idx(0, 2),), X(2, 4), True),
        "masked_fill_.Scalar": _inplace(torch.Tensor.masked_fill_, E(3, 4), mask(3, 4), 9.0),
        "masked_fill_.Tensor": _inplace(torch.Tensor.masked_fill_, E(3, 4), mask(3, 4), torch.tensor(9.0)),
        "masked_scatter_": _inplace(torch.Tensor.masked_scatter_, E(3, 4), mask(3, 4), X(12)),
        "put_": _inplace(torch.Tensor.put_, E(3, 4), idx(0, 5), X(2)),
        "index_select.out": _out(torch.index_select, x, 1, idx(3, 0), outs=E(3, 2)),
        "masked_select.out": _out(torch.masked_select, x, torch.ones(3, 4, dtype=torch.bool), outs=E(2, 6)),
        "take.out": _out(torch.take, x, idx(0, 5, 11, 3).view(2, 2), outs=E(2, 2)),
        "index.Tensor_out": _out(aten.index.Tensor_out, x, [idx(2, 0, 2)], outs=E(3, 4)),
        "nonzero.out": _out(torch.nonzero, torch.ones(3, 2, dtype=torch.bool), outs=E(6, 2, dtype=I64)),
        # neural network ops
        "_softmax.out": _out(aten._softmax.out, x, 1, False, outs=E(3, 4)),
        "_log_softmax.out": _out(aten._log_softmax.out, x, 0, False, outs=E(3, 4, dim=1)),
        "_softmax_backward_data.out": _out(aten._softmax_backward_data.out, y, x.softmax(1), 1, F32, outs=E(3, 4),
                                           names=GI),
        "glu.out": _out(aten.glu.out, x, 1, outs=E(3, 2)),
        "mse_loss.out": _out(aten.mse_loss.out, x, y, 0, outs=E(3, 4)),
        "smooth_l1_loss.out": _out(aten.smooth_l1_loss.out, x, y, 0, 1.0, outs=E(3, 4)),
        "huber_loss.out": _out(aten.huber_loss.out, x, y, 0, 1.0, outs=E(3, 4)),
        "nll_loss_forward.output": _out(aten.nll_loss_forward.output, x.log_softmax(1), idx(0, 3, 1), None, 0, -100,
                                        outs=(E(3), X()), names=("output", "total_weight")),
        "nll_loss_backward.grad_input": _out(aten.nll_loss_backward.grad_input, X(3), x.log_softmax(1),
                                             idx(0, 3, 1), None, 0, -100, torch.tensor(3.0), outs=E(3, 4), names=GI),
        "log_sigmoid_forward.output": _out(aten.log_sigmoid_forward.output, x, outs=(E(3, 4), X(0)),
                                           names=("output", "buffer")),
        "mse_loss_backward.grad_input": _out(aten.mse_loss_backward.grad_input, X(3, 4), x, y, 0, outs=E(3, 4),
                                             names=GI),
        "smooth_l1_loss_backward.grad_input": _out(aten.smooth_l1_loss_backward.grad_input, X(3, 4), x, y, 0, 1.0,
                                                   outs=E(3, 4), names=GI),
        "huber_loss_backward.out": _out(aten.huber_loss_backward.out, X(3, 4), x, y, 0, 1.0, outs=E(3, 4),
                                        names=GI),
        "elu_backward.grad_input": _out(aten.elu_backward.grad_input, y, 1.0, 1.0, 1.0, False, x, outs=E(3, 4),
                                        names=GI),
        "gelu_backward.grad_input": _out(aten.gelu_backward.grad_input, y, x, outs=E(3, 4), names=GI),
        "hardtanh_backward.grad_input": _out(aten.hardtanh_backward.grad_input, y, x, 0.2, 0.6, outs=E(3, 4),
                                             names=GI),
        "leaky_relu_backward.grad_input": _out(aten.leaky_relu_backward.grad_input, y, x, 0.1, False,
                                               outs=E(3, 4), names=GI),
        "silu_backward.grad_input": _out(aten.silu_backward.grad_input, y, x, outs=E(3, 4), names=GI),
        "softplus_backward.grad_input": _out(aten.softplus_backward.grad_input, y, x, 1.0, 20.0, outs=E(3, 4),
                                             names=GI),
        "log_sigmoid_backward.grad_input": _out(aten.log_sigmoid_backward.grad_input, y, x, X(0), outs=E(3, 4),
                                                names=GI),
        "glu_backward.grad_input": _out(aten.glu_backward.grad_input, X(3, 1), X(3, 2), 1, outs=E(3, 2, dim=1),
                                        names=GI),
        "multi_margin_loss.out": _out(aten.multi_margin_loss.out, x, idx(0, 3, 1), 1, 1.0, None, 0, outs=E(3)),
        "multi_margin_loss_backward.grad_input": _out(aten.multi_margin_loss_backward.grad_input, X(3), x,
                                                      idx(0, 3, 1), 1, 1.0, None, 0, outs=E(3, 4), names=GI),
        "multilabel_margin_loss_forward.output": _out(aten.multilabel_margin_loss_forward.output, x,
                                                      idx(0, 3, -1, 0).repeat(3, 1), 0,
                                                      outs=(E(3), X(3, 4)), names=("output", "is_target")),
        "avg_pool2d_backward.grad_input": _out(aten.avg_pool2d_backward.grad_input, X(1, 2, 2, 2), X(1, 2, 4, 4),
                                               [2, 2], [2, 2], [0, 0], False, True, None,
                                               outs=E(1, 2, 4, 4, dim=2), names=GI),
        "upsample_nearest2d_backward.grad_input": _out(aten.upsample_nearest2d_backward.grad_input, X(1, 2, 4, 4),
                                                       [4, 4], [1, 2, 2, 2], outs=E(1, 2, 2, 2, dim=1), names=GI),
        "replication_pad2d.out": _out(aten.replication_pad2d.out, X(1, 2, 3, 3), [1, 1, 1, 1],
                                      outs=E(1, 2, 5, 5, dim=1)),
        "histogram.bin_ct_out": _out(aten.histogram.bin_ct_out, X(12), 4, outs=(E(4), X(5)),
                                     names=("hist", "bin_edges")),
        "max_pool2d_with_indices.out": _out(aten.max_pool2d_with_indices.out, X(1, 2, 4, 4), [2, 2], [2, 2],
                                            outs=(E(1, 2, 2, 2, dim=1), E(1, 2, 2, 2, dim=1, dtype=I64)), names=OI),
        "avg_pool2d.out": _out(aten.avg_pool2d.out, X(1, 2, 4, 4), [2, 2], outs=E(1, 2, 2, 2, dim=3)),
        "adaptive_max_pool2d.out": _out(aten.adaptive_max_pool2d.out, X(1, 2, 4, 4), [2, 2],
                                        outs=(E(1, 2, 2, 2, dim=1), E(1, 2, 2, 2, dim=1, dtype=I64)), names=OI),
        "upsample_nearest2d.out": _out(aten.upsample_nearest2d.out, X(1, 2, 2, 2), [4, 4],
                                       outs=E(1, 2, 4, 4, dim=2)),
        "upsample_bilinear2d.out": _out(aten.upsample_bilinear2d.out, X(1, 2, 2, 2), [4, 4], False,
                                        outs=E(1, 2, 4, 4, dim=1)),
        "reflection_pad2d.out": _out(aten.reflection_pad2d.out, X(1, 2, 3, 3), [1, 1, 1, 1],
                                     outs=E(1, 2, 5, 5, dim=2)),
        "replication_pad1d.out": _out(aten.replication_pad1d.out, X(1, 2, 3), [1, 1], outs=E(1, 2, 5, dim=1)),
        "cat.out": _out(torch.cat, [x, y], 0, outs=E(6, 4, dim=1)),
        "tril.out": _out(torch.tril, x, outs=E(3, 4)),
        "tril.out (dim 1 expanded)": _out(torch.tril, x, outs=E(3, 4, dim=1)),
        "tril_": _inplace(torch.Tensor.tril_, E(3, 4)),
        "triu.out": _out(torch.triu, x, outs=E(3, 4)),
        "triu_": _inplace(torch.Tensor.triu_, E(3, 4, dim=1)),
        "_fft_r2c.out": _out(torch.fft.rfft, x, outs=E(3, 3, dtype=torch.complex64)),
        "_fft_c2c.out": _out(torch.fft.fft, _c(x), outs=E(3, 4, dtype=torch.complex64)),
        # creation
        "arange.start_out": _out(torch.arange, 0, 4, outs=E(4)),
        "linspace.out": _out(torch.linspace, 0, 1, 4, outs=E(4)),
        "linspace.out (int64)": _out(torch.linspace, 0, 9, 4, outs=E(4, dtype=I64)),
        "eye.out": _out(torch.eye, 3, outs=E(3, 3)),
        "zeros.out": _out(torch.zeros, (3, 4), outs=E(3, 4)),
        "full.out": _out(torch.full, (3, 4), 2.0, outs=E(3, 4)),
        # random draws (values not compared)
        "normal_": _inplace(torch.Tensor.normal_, E(3, 4)),
        "uniform_": _inplace(torch.Tensor.uniform_, E(3, 4, dim=1)),
        "bernoulli_.float": _inplace(torch.Tensor.bernoulli_, E(3, 4), 0.5),
        "bernoulli_.Tensor": _inplace(torch.Tensor.bernoulli_, E(3, 4), X(3, 4, low=0, high=1)),
        "exponential_": _inplace(torch.Tensor.exponential_, E(3, 4)),
        "cauchy_": _inplace(torch.Tensor.cauchy_, E(3, 4)),
        "log_normal_": _inplace(torch.Tensor.log_normal_, E(3, 4)),
        "geometric_": _inplace(torch.Tensor.geometric_, E(3, 4), 0.5),
        "random_": _inplace(torch.Tensor.random_, E(3, 4)),
        "random_.from": _inplace(torch.Tensor.random_, E(3, 4), 2, 9),
        "random_.to": _inplace(torch.Tensor.random_, E(3, 4), 9),
        "normal.Tensor_float_out": _out(torch.normal, x, 1.0, outs=E(3, 4)),
        "bernoulli.out": _out(torch.bernoulli, X(3, 4, low=0, high=1), outs=E(3, 4)),
        "multinomial.out": _out(torch.multinomial, X(3, 4, low=0.1, high=1), 2, outs=E(3, 2, dtype=I64)),
        "randperm.generator_out": _out(torch.randperm, 4, outs=E(4, dtype=I64)),
    })
    return t


TABLE = _table()
# Draws: the outcome, dtype and shape are compared, not the values.
RANDOM = {name for name in TABLE if name.split(".")[0].rstrip("_") in
          {"normal", "uniform", "bernoulli", "exponential", "cauchy", "log_normal", "geometric", "random",
           "multinomial", "randperm"}}
# CPU writes these expanded targets without refusing them, and what each shared element ends up
# holding depends on how its kernel writes: the last of its writes in the kernel's order (for
# nll_loss's rows, written by several threads, it varies from run to run), the sum of all
# increments (histc, histogram), every row's target element (nll_loss_backward), BLAS's
# accumulation with a zero increment (addmv). Neuron must write too, but need not agree on them.
KERNEL_DEFINED = {
    "tril.out", "tril.out (dim 1 expanded)", "tril_", "triu.out", "triu_", "addmv_", "addmv.out (beta 0)",
    "baddbmm_", "histc.out", "histogram.bin_ct_out", "glu_backward.grad_input", "nll_loss_forward.output",
    "nll_loss_backward.grad_input", "index_put_", "index_put_ (accumulate)", "index_fill_.int_Scalar",
    "index_fill_.int_Tensor",
}

# CPU's kernels write past these expanded out= tensors' memory (a crash or heap corruption of
# the process: PyTorch's own bug), so CPU is not run: neuron must refuse them.
CPU_UNSAFE = {"_softmax.out", "_log_softmax.out", "_softmax_backward_data.out", "reflection_pad2d.out",
              "replication_pad2d.out"}


def _outcome(call, args, kwargs, outs, device):
    """('raise', None) for ATen's internal-overlap refusal, ('ok', written tensors on the host),
    or ('error', exception type and message) for any other exception."""
    a, kw, o = to_device(args, device), to_device(kwargs, device), to_device(outs, device)
    if "device" in kw:  # a factory's own device argument
        kw["device"] = device
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = call(a, kw, o)
            r = [t.cpu() for t in (r if isinstance(r, (tuple, list)) else (r,))]
    except RuntimeError as e:
        if MSG in str(e):
            return "raise", None
        return "error", f"{type(e).__name__}: {str(e).splitlines()[0]}"
    except Exception as e:  # noqa: BLE001 - compared with CPU's
        return "error", f"{type(e).__name__}: {str(e).splitlines()[0]}"
    return "ok", r


def _assert_same_outcome(expected, e, got, g, compare_values, **tolerance):
    """Neuron refuses where CPU refuses (the overlap error, or another error for the same call:
    an exception of the same type), else writes what CPU writes (or only the same dtypes and
    shapes, without `compare_values`)."""
    if expected == "error":
        assert got in ("error", "raise") and (g or "RuntimeError").split(":")[0] == e.split(":")[0], \
            f"CPU: {e}; neuron: {got} {g or ''}"
        return
    assert got == expected, f"CPU: {expected}, neuron: {got} {g or ''}"
    if got == "ok":
        for a, b in zip(g, e):
            assert (a.dtype, a.shape) == (b.dtype, b.shape)
            if compare_values:
                torch.testing.assert_close(a, b, equal_nan=True, **tolerance)


@pytest.mark.parametrize("name", sorted(TABLE))
def test_expanded_target(name, neuron):
    call, args, kwargs, outs = TABLE[name]
    expected, e = ("raise", None) if name in CPU_UNSAFE else _outcome(call, args, kwargs, outs, "cpu")
    got, g = _outcome(call, args, kwargs, outs, neuron)
    _assert_same_outcome(expected, e, got, g, name not in RANDOM and name not in KERNEL_DEFINED)


def test_refused_write_leaves_memory(neuron):
    """A refused call writes nothing: the expanded tensor's memory keeps its values."""
    base = torch.tensor([[1.0, 2.0, 3.0, 4.0]], device=neuron)
    x, a, b = X(3, 4).to(neuron), X(3, 2).to(neuron), X(2, 4).to(neuron)
    writes = [lambda t: t.cumprod_(0),
              lambda t: t.normal_(),
              lambda t: torch.cumsum(x, 1, out=t),
              lambda t: torch.mm(a, b, out=t),
              lambda t: t.put_(idx(0, 5).to(neuron), X(2).to(neuron))]  # the CPU fallback
    for f in writes:
        with pytest.raises(RuntimeError, match=MSG):
            f(base.expand(3, 4))
        torch.neuron.synchronize()
        assert base.cpu().tolist() == [[1.0, 2.0, 3.0, 4.0]]


def test_copy_into_expanded_across_devices(neuron):
    """copy_ into an expanded tensor is refused whichever device each side is on, as CPU's copy_
    (and CUDA's) refuse it."""
    x = X(3, 4)
    for dst, src in ((E(3, 4), x), (to_device(E(3, 4), neuron), x), (E(3, 4), x.to(neuron)),
                     (to_device(E(3, 4), neuron), x.to(neuron))):
        with pytest.raises(RuntimeError, match=MSG):
            dst.copy_(src)


# CPU-only ops, so that the CPU fallback's handling of written arguments stays testable whatever
# native kernels exist: one whose CPU kernel writes an expanded tensor (fill_ allows it), one
# whose kernel refuses it (mul_).
_LIB = torch.library.Library("neuron_overlap_test", "DEF")
_LIB.define("fill_(Tensor(a!) x, float v) -> Tensor(a!)")
_LIB.define("scale.out(Tensor x, float s, *, Tensor(a!) out) -> Tensor(a!)")
_LIB.impl("fill_", lambda x, v: x.fill_(v), "CPU")
_LIB.impl("scale.out", lambda x, s, out: torch.mul(x, s, out=out), "CPU")


def test_fallback_gives_cpu_the_expanded_target(neuron):
    """A written argument reaches CPU's kernel expanded as it is on neuron: the kernel refuses it
    where CPU refuses one, or writes it, and the shared elements are copied back."""
    for device in ("cpu", neuron):
        base = torch.zeros(1, 4, device=device)
        torch.ops.neuron_overlap_test.fill_(base.expand(3, 4), 2.5)
        assert base.cpu().tolist() == [[2.5] * 4]
        base = torch.zeros(1, 4, device=device)
        with pytest.raises(RuntimeError, match=MSG):
            torch.ops.neuron_overlap_test.scale.out(X(3, 4).to(device), 2.0, out=base.expand(3, 4))
        assert base.cpu().tolist() == [[0.0] * 4]
    assert {"neuron_overlap_test::fill_", "neuron_overlap_test::scale"} <= set(torch_neuronx.get_fallback_ops())


# ---------------------------------------------------------------- the OpInfo sweep

# OpInfos left out: factories (no input to place), sparse ops, ops whose CPU kernel writes past
# an expanded out= tensor's memory (heap corruption of the test process; PyTorch's own bug).
SWEEP_SKIP = {"arange", "full", "ones", "zeros", "randn", "rand", "empty", "linspace", "logspace", "eye",
              "nn.functional.avg_pool3d", "narrow_copy"}
SWEEP_KERNEL_DEFINED = {"tril", "triu", "addmv"}


def _expanded(t):
    """t's values with its first dim of size > 1 expanded from the first slice (None when there
    is none)."""
    if not isinstance(t, torch.Tensor):
        return None
    for d, s in enumerate(t.shape):
        if s > 1:
            return t.narrow(d, 0, 1).clone().expand(t.shape)
    return None


def _sweep_ops():
    ops = []
    for op in op_db:
        if op.name in SWEEP_SKIP or op.name.startswith("sparse."):
            continue
        if op.supports_out:
            ops.append(pytest.param(op, "out", id=f"{op.name}.{op.variant_test_name}.out".replace("..", ".")))
        if op.inplace_variant is not None:
            ops.append(pytest.param(op, "inplace", id=f"{op.name}.{op.variant_test_name}_".replace("._", "_")))
    return ops


def _cpu_runs(op, dtype, n):
    """(sample, CPU result) for those of the first `n` samples of `op` in `dtype` that CPU runs."""
    try:
        samples = list(itertools.islice(op.sample_inputs("cpu", dtype), n))
    except Exception:  # noqa: BLE001 - an OpInfo without samples in that dtype
        return
    for s in samples:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                r = op(s.input, *s.args, **s.kwargs)
        except Exception:  # noqa: BLE001
            continue
        yield s, r


def _sweep_case(op, form):
    """(call, args, kwargs, outs) for the first sample (float32, or int64 or bool for ops without
    float32) that CPU runs and whose result can be expanded, or None."""
    dtypes = op.supported_dtypes("cpu")
    dtype = next((d for d in (F32, I64, torch.bool) if d in dtypes), None)
    if dtype is None:  # a complex-only variant
        return None
    for s, r in _cpu_runs(op, dtype, 64):
        if form == "out":
            if isinstance(r, torch.Tensor):
                outs = _expanded(r)
            elif isinstance(r, (tuple, list)) and r and all(isinstance(v, torch.Tensor) for v in r):
                expanded = [_expanded(v) for v in r]
                outs = (tuple(v.clone() if x is None else x for v, x in zip(r, expanded))
                        if any(x is not None for x in expanded) else None)
            else:
                outs = None
            if outs is not None:
                return _out(op, s.input, *s.args, outs=outs, **s.kwargs)
        else:
            target = _expanded(s.input)
            if target is not None and isinstance(r, torch.Tensor) and r.shape == s.input.shape:
                return _inplace(op.inplace_variant, target, *s.args, **s.kwargs)
    return None


@pytest.mark.parametrize("op,form", _sweep_ops())
def test_opinfo_expanded_target(op, form, neuron):
    case = _sweep_case(op, form)
    if case is None:
        pytest.skip("no sample that CPU runs with an expandable result (0-dim or one-element results, "
                    "in-place views and metadata ops, complex-only variants)")
    expected, e = _outcome(*case, "cpu")
    got, g = _outcome(*case, neuron)
    _assert_same_outcome(expected, e, got, g, op.name not in NONDETERMINISTIC and op.name not in SWEEP_KERNEL_DEFINED,
                         atol=1e-4, rtol=1e-4)



# ---------------------------------------------------------------- partial overlap with an input

PARTIAL_MSG = "some elements of the input tensor and the written-to tensor refer to a single memory location"


def _partial_case(op):
    """The first float32 sample CPU runs whose first result is float32 with elements: its input
    and first out= tensor are then placed in one buffer, the out starting halfway into the
    input (a partial overlap)."""
    if F32 not in op.supported_dtypes("cpu"):
        return None
    for s, r in _cpu_runs(op, F32, 32):
        if not isinstance(s.input, torch.Tensor) or s.input.numel() < 2:
            continue
        rs = r if isinstance(r, (tuple, list)) else (r,)
        if rs and all(isinstance(v, torch.Tensor) for v in rs) and rs[0].dtype == F32 and rs[0].numel() > 0:
            return s, rs
    return None


def _partial_outcome(op, s, rs, device):
    """('raise', None) for ATen's partial-overlap refusal, ('error', type) for another error, or
    ('ok', the first result's values read back from the shared buffer)."""
    n_in, n_out, shift = s.input.numel(), rs[0].numel(), max(1, s.input.numel() // 2)
    base = torch.zeros(shift + max(n_in, n_out), device=device)
    x = base[:n_in].view(s.input.shape)
    x.copy_(s.input.to(device))
    out = base[shift:shift + n_out].view(rs[0].shape)
    outs = (out,) + tuple(torch.empty_like(v, device=device) for v in rs[1:])
    args, kwargs = to_device(s.args, device), to_device(s.kwargs, device)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            op(x, *args, **kwargs, out=outs if len(rs) > 1 else out)
            return "ok", base[shift:shift + n_out].cpu()
    except Exception as e:  # noqa: BLE001 - compared with CPU's
        return ("raise", None) if PARTIAL_MSG in str(e) else ("error", type(e).__name__)


@pytest.mark.parametrize("op", [pytest.param(op, id=f"{op.name}.{op.variant_test_name}".rstrip("."))
                                for op in op_db if op.supports_out and op.name not in SWEEP_SKIP
                                and not op.name.startswith("sparse.")])
def test_opinfo_out_partially_overlapping_input(op, neuron):
    """An out= tensor that partially overlaps the input: neuron refuses it where CPU's kernel
    does (native kernels and the CPU fallback, whose separate host copies would hide the
    overlap from CPU's kernel), and otherwise writes the values of the call without overlap
    (or CPU's, for kernels that read back what they wrote) — never values from reading its own
    partial writes. CPU's kernels run on one thread here: a parallel kernel that reads what it
    wrote (native_batch_norm's, which the CPU fallback runs) gives a different mix each run."""
    case = _partial_case(op)
    if case is None:
        pytest.skip("no float32 sample with a float32 result that CPU runs")
    s, rs = case
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        expected, e = _partial_outcome(op, s, rs, "cpu")
        got, g = _partial_outcome(op, s, rs, neuron)
    finally:
        torch.set_num_threads(threads)
    assert got == expected or (expected, got) == ("error", "raise"), f"CPU: {expected} {'' if e is None else e}; neuron: {got} {'' if g is None else g}"
    if got == "ok" and op.name not in NONDETERMINISTIC:
        clean = rs[0].reshape(-1)
        near = dict(atol=1e-4, rtol=1e-4, equal_nan=True)
        assert torch.allclose(g.reshape(-1), clean, **near) or torch.allclose(g, e, **near), \
            f"neuron wrote {g.reshape(-1)[:8]}; without overlap {clean[:8]}, CPU {e.reshape(-1)[:8]}"


@pytest.mark.parametrize("name", ["add", "addcmul", "exp", "cumsum", "logcumsumexp", "softmax", "sort", "cummax",
                                  "round_decimals", "tril", "mm"])
def test_out_is_the_input(name, neuron):
    """out= the input itself (a full overlap, which CPU's kernels accept): the values of the
    call without overlap, for TensorIterator ops (written in place) and the kernels that write
    through a temporary: CPU's values, except for mm, whose CPU kernel reads what it wrote."""
    def call(dev):
        x = X(4, 4).to(dev)
        i = torch.empty(0, dtype=I64, device=dev)
        {"add": lambda: torch.add(x, 2.0, out=x), "addcmul": lambda: torch.addcmul(x, x, x, value=0.5, out=x),
         "exp": lambda: torch.exp(x, out=x), "cumsum": lambda: torch.cumsum(x, 1, out=x),
         "logcumsumexp": lambda: torch.logcumsumexp(x, 0, out=x), "softmax": lambda: torch.softmax(x, 1, out=x),
         "mm": lambda: torch.mm(x, x, out=x), "sort": lambda: torch.sort(x, 1, out=(x, i)),
         "cummax": lambda: torch.cummax(x, 0, out=(x, i)), "round_decimals": lambda: torch.round(x, decimals=1, out=x),
         "tril": lambda: torch.tril(x, out=x)}[name]()
        return x.cpu()

    torch.testing.assert_close(call(neuron), X(4, 4) @ X(4, 4) if name == "mm" else call("cpu"))


def test_fallback_gives_cpu_the_shared_memory(neuron):
    """Arguments of a CPU-fallback op that share memory with a written one reach CPU's kernel
    sharing it: put_ with a source overlapping self is refused as on CPU; linalg.inv into an
    out= partially overlapping its input computes as on CPU (LAPACK works on copies)."""
    for device in ("cpu", neuron):
        x = torch.arange(1.0, 11.0, device=device)
        with pytest.raises(RuntimeError, match=PARTIAL_MSG):
            x.put_(idx(1, 2, 3).to(device), x[0:3])
        assert x.cpu().tolist() == list(range(1, 11))
    results = []
    for device in ("cpu", neuron):
        base = torch.zeros(24, device=device)
        a = base[:16].view(4, 4)
        a.copy_(X(4, 4) + 4 * torch.eye(4))
        torch.linalg.inv(a, out=base[8:24].view(4, 4))
        results.append(base.cpu())
    torch.testing.assert_close(results[1], results[0])
