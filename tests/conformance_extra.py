"""Hand-written samples for the registered overloads that no OpInfo sample reaches (printed by
`make conformance`): out= and in-place forms OpInfo does not call, backward kernels called
directly, the fused optimizers, AMP's ops, and kernels that PyTorch reaches only from module
code paths. tests/test_conformance.py runs each on CPU and on neuron like an OpInfo sample and
also asserts that the sample reached the overload it was written for.

EXEMPT lists the registered overloads that cannot be compared with CPU this way, each with
its reason; tests/test_conformance.py fails when a registered overload is neither reached by an
OpInfo sample nor covered here or there.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from conformance import to_device

aten = torch.ops.aten
F32 = torch.float32

EXEMPT = {
    "aten::_fused_sdp_choice": "returns the attention backend the device picks (overrideable or math), not a value "
                               "CPU computes; tests/test_attention.py checks the choice and both backends",
    "aten::record_stream": "returns nothing: it tells the caching allocator a stream uses the block "
                           "(tests/test_streams.py checks that the block is not reused while that stream reads it)",
    "aten::_nested_view_from_buffer": "makes a nested tensor, which neuron supports only through ATen's nested "
                                      "kernels (tests/test_nested.py compares them with CPU and checks the error "
                                      "that names the remedy for other ops)",
    "aten::is_set_to": "compares two tensors' storage, offset, sizes and strides, which a CPU copy never shares "
                       "(tests/test_user_paths.py checks it on views, set_ and clones)",
}
# SyncBatchNorm's ops: ATen has CUDA kernels only, so there is no CPU result to compare with.
_SYNC_BN_REASON = ("SyncBatchNorm's op has no CPU kernel in ATen (CUDA only): tests/test_native_extras.py compares "
                   "it with its float64 definition and tests/test_distributed.py runs nn.SyncBatchNorm on 2 ranks "
                   "against BatchNorm on CPU")
EXEMPT.update({f"aten::{op}": _SYNC_BN_REASON for op in (
    "batch_norm_stats", "batch_norm_gather_stats", "batch_norm_gather_stats_with_counts", "batch_norm_elemt",
    "batch_norm_elemt.out", "batch_norm_backward_reduce", "batch_norm_backward_elemt")})


@dataclasses.dataclass
class Case:
    target: str                        # "aten::<name>[.<overload>]" the sample is written for
    fn: Callable[[str], object]        # device -> what is compared
    random: bool = False               # compare dtype and shape only


def _t(*shape, dtype=F32, low=-2.0, high=2.0, seed=0):
    g = torch.Generator().manual_seed(seed + sum(shape) * 7919)
    if dtype.is_floating_point:
        return (torch.rand(shape, generator=g, dtype=torch.float64) * (high - low) + low).to(dtype)
    return torch.randint(int(low), int(high) + 1, shape, generator=g).to(dtype)


def _op(target):
    base, _, overload = target[len("aten::"):].partition(".")
    return getattr(getattr(aten, base), overload or "default")


def call(target, *args, outs=(), inplace=False, cpu_target=None, random=False, **kwargs) -> Case:
    """A case calling `target` with args (moved to the device; fresh copies per call) and keyword
    arguments; `outs`: (name, dtype) of out= tensors, created empty so the op resizes them;
    compared: the out tensors and the returned value, or for an in-place op the returned value and
    the mutated first argument. `cpu_target`: the overload to call on CPU when CPU has no kernel
    for `target` (the device-specific convolution entry points)."""
    def fn(device):
        a, kw = to_device(args, device), to_device(kwargs, device)
        o = {name: torch.empty(0, dtype=dt, device=device) for name, dt in outs}
        op = _op(cpu_target if device == "cpu" and cpu_target else target)
        r = op(*a, **kw, **o)
        if outs:
            return tuple(o.values()), r
        if inplace:
            return r, a[0]
        return r
    return Case(target, fn, random)


def _with_out(fn, device, dtype=F32):
    """fn(out) with an empty out= tensor on device: (the out tensor, the returned value)."""
    o = torch.empty(0, dtype=dtype, device=device)
    return o, fn(o)


def _module_case(target, build, run) -> Case:
    """A module built on CPU under a fixed seed, copied to the device, run by run(module, device)."""
    def fn(device):
        torch.manual_seed(0)
        m = build()
        return run(m.to(device), device)
    return Case(target, fn)


def _optimizer_case(target, **kwargs) -> Case:
    """One fused optimizer step over two parameters: the updated parameters and states."""
    fused = _op(target)
    adam = "adam" in target

    def fn(device):
        params = [_t(4, 3, seed=1).to(device), _t(5, seed=2).to(device)]
        grads = [_t(4, 3, seed=3).to(device), _t(5, seed=4).to(device)]
        if adam:
            m = [_t(4, 3, seed=5).to(device) * 0.1, _t(5, seed=6).to(device) * 0.1]
            v = [_t(4, 3, seed=7, low=0, high=1).to(device), _t(5, seed=8, low=0, high=1).to(device)]
            steps = [torch.tensor(3.0, device=device), torch.tensor(3.0, device=device)]
            fused(params, grads, m, v, [], steps, **to_device(kwargs, device))
            return params, m, v, steps
        bufs = [_t(4, 3, seed=9).to(device), _t(5, seed=10).to(device)]
        if "adagrad" in target:  # bufs: state sums (non-negative)
            bufs = [b.abs() for b in bufs]
            steps = [torch.tensor(2.0, device=device), torch.tensor(5.0, device=device)]
            fused(params, grads, bufs, steps, **to_device(kwargs, device))
            return params, bufs, steps
        fused(params, grads, bufs, **to_device(kwargs, device))
        return params, bufs
    return Case(target, fn)


def _adam_kwargs(lr):
    return dict(lr=lr, beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-8, amsgrad=False, maximize=False)


def _adagrad_kwargs(lr):
    return dict(lr=lr, lr_decay=0.01, weight_decay=0.1, eps=1e-10, maximize=False)


def _sgd_kwargs(lr):
    return dict(weight_decay=0.01, momentum=0.9, lr=lr, dampening=0.0, nesterov=True, maximize=False,
                is_first_step=False)


def _cases() -> list[Case]:
    x, y = _t(3, 5), _t(3, 5, seed=1)
    g = _t(3, 5, seed=2)
    img, gimg = _t(2, 3, 6, 7), _t(2, 3, 6, 7, seed=3)
    sm = torch.softmax(x, 1)
    ints = _t(3, 5, dtype=torch.int64, low=-4, high=4)
    cases = []
    # out= and in-place forms of elementwise ops and their backward kernels
    for name in ("elu", "hardsigmoid", "hardswish", "mish", "silu", "leaky_relu"):
        cases.append(call(f"aten::{name}.out", x, outs=[("out", F32)]))
    cases += [
        call("aten::hardtanh.out", x, -0.5, 0.7, outs=[("out", F32)]),
        call("aten::hardtanh_", x, -0.5, 0.7, inplace=True),
        call("aten::hardswish_", x, inplace=True),
        call("aten::gelu_", x, approximate="tanh", inplace=True),
        call("aten::clamp.out", x, -0.5, 0.5, outs=[("out", F32)]),
        call("aten::clamp_max", x, 0.3),
        call("aten::clamp_max.out", ints, 2, outs=[("out", torch.int64)]),
        call("aten::clamp_max_", x, 0.3, inplace=True),
        call("aten::clamp_min.out", x, -0.3, outs=[("out", F32)]),
        call("aten::elu_backward.grad_input", g, 1.0, 1.0, 1.0, False, x, outs=[("grad_input", F32)]),
        call("aten::gelu_backward.grad_input", g, x, approximate="none", outs=[("grad_input", F32)]),
        call("aten::hardtanh_backward.grad_input", g, x, -0.5, 0.7, outs=[("grad_input", F32)]),
        call("aten::leaky_relu_backward.grad_input", g, x, 0.1, False, outs=[("grad_input", F32)]),
        call("aten::log_sigmoid_backward.grad_input", g, x, aten.log_sigmoid_forward(x)[1], outs=[("grad_input", F32)]),
        call("aten::sigmoid_backward.grad_input", g, torch.sigmoid(x), outs=[("grad_input", F32)]),
        call("aten::silu_backward.grad_input", g, x, outs=[("grad_input", F32)]),
        call("aten::softplus_backward.grad_input", g, x, 2.0, 10.0, outs=[("grad_input", F32)]),
        call("aten::tanh_backward.grad_input", g, torch.tanh(x), outs=[("grad_input", F32)]),
        call("aten::threshold_backward.grad_input", g, x, 0.1, outs=[("grad_input", F32)]),
    ]
    # comparisons with a Python scalar: out= and in-place
    for name in ("eq", "ne", "lt", "le", "gt", "ge"):
        cases.append(call(f"aten::{name}.Scalar_out", ints, 1, outs=[("out", torch.bool)]))
        cases.append(call(f"aten::{name}_.Scalar", x, 0.25, inplace=True))
    cases.append(call("aten::gt.Scalar", x, 0.25))
    # losses
    tgt = torch.tensor([1, 0, 4])
    cases += [
        call("aten::mse_loss.out", x, y, 1, outs=[("out", F32)]),
        call("aten::mse_loss_backward.grad_input", torch.tensor(0.5), x, y, 1, outs=[("grad_input", F32)]),
        call("aten::smooth_l1_loss.out", x, y, 1, 0.5, outs=[("out", F32)]),
        call("aten::smooth_l1_loss_backward.grad_input", torch.tensor(0.5), x, y, 1, 0.5, outs=[("grad_input", F32)]),
        call("aten::huber_loss.out", x, y, 2, 0.7, outs=[("out", F32)]),
        call("aten::huber_loss_backward.out", torch.tensor(0.5), x, y, 2, 0.7, outs=[("grad_input", F32)]),
        call("aten::nll_loss_forward.output", torch.log_softmax(x, 1), tgt, None, 1, -100,
             outs=[("output", F32), ("total_weight", F32)]),
        call("aten::nll_loss_backward.grad_input", torch.tensor(1.0), torch.log_softmax(x, 1), tgt, None, 1, -100,
             torch.tensor(3.0), outs=[("grad_input", F32)]),
    ]
    # softmax family
    cases += [
        call("aten::_softmax.out", x, 1, False, outs=[("out", F32)]),
        call("aten::_log_softmax.out", x, 1, False, outs=[("out", F32)]),
        call("aten::_softmax_backward_data.out", g, sm, 1, F32, outs=[("grad_input", F32)]),
        call("aten::_log_softmax_backward_data.out", g, torch.log(sm), 1, F32, outs=[("out", F32)]),
        call("aten::_logcumsumexp", x, 1),
        call("aten::_logcumsumexp.out", x, 0, outs=[("out", F32)]),
    ]
    # reductions with out=
    cases += [
        call("aten::sum.IntList_out", x, [1], True, outs=[("out", F32)]),
        call("aten::prod.int_out", x, 0, False, outs=[("out", F32)]),
        call("aten::var_mean.correction_out", x, [1], correction=0, keepdim=False,
             outs=[("out0", F32), ("out1", F32)]),
        call("aten::std_mean.correction_out", x, [0], correction=1, keepdim=True,
             outs=[("out0", F32), ("out1", F32)]),
    ]
    # matrix products
    m1, m2, bias = _t(4, 6), _t(6, 8, seed=1), _t(8, seed=2)
    cases += [
        call("aten::_addmm_activation", bias, m1, m2, use_gelu=True),
        call("aten::_addmm_activation", bias, m1, m2, beta=0.5, alpha=2.0, use_gelu=False),
        call("aten::_addmm_activation.out", bias, m1, m2, use_gelu=False, outs=[("out", F32)]),
    ]
    # indexing
    base5 = torch.zeros(5, 4)
    cases += [
        call("aten::_index_put_impl_", base5, [torch.tensor([0, 2, 2])], _t(3, 4), True, False, inplace=True),
        call("aten::_index_put_impl_", base5, [torch.tensor([4, 1])], _t(2, 4), False, False, inplace=True),
        call("aten::index.Tensor_out", _t(5, 4), [torch.tensor([3, 0, 3])], outs=[("out", F32)]),
    ]
    # pooling, padding and upsampling (2-D)
    pooled, idx = aten.max_pool2d_with_indices(img, [2, 2], [2, 2])
    cases += [
        call("aten::max_pool2d_with_indices.out", img, [3, 2], [2, 1], [1, 0], outs=[("out", F32), ("indices", torch.int64)]),
        call("aten::max_pool2d_with_indices_backward.grad_input", _t(*pooled.shape, seed=4), img, [2, 2], [2, 2], [0, 0],
             [1, 1], False, idx, outs=[("grad_input", F32)]),
        call("aten::avg_pool2d_backward.grad_input", _t(*aten.avg_pool2d(img, [2, 2], [2, 2], [0, 0], True).shape, seed=5),
             img, [2, 2], [2, 2], [0, 0], True, True, None, outs=[("grad_input", F32)]),
        call("aten::im2col.out", img, [2, 3], [1, 2], [1, 0], [2, 1], outs=[("out", F32)]),
        call("aten::col2im.out", _t(2, 12, 30, seed=12), [6, 7], [2, 2], [1, 1], [0, 0], [1, 1],
             outs=[("out", F32)]),
        call("aten::reflection_pad2d", img, [1, 2, 2, 1]),
        call("aten::reflection_pad2d.out", img, [0, 1, 3, 2], outs=[("out", F32)]),
        call("aten::reflection_pad2d_backward", _t(2, 3, 9, 10, seed=6), img, [1, 2, 2, 1]),
        call("aten::reflection_pad2d_backward.grad_input", _t(2, 3, 9, 10, seed=6), img, [1, 2, 2, 1],
             outs=[("grad_input", F32)]),
        call("aten::replication_pad2d.out", img, [2, 0, 1, 1], outs=[("out", F32)]),
        call("aten::replication_pad2d_backward.grad_input", _t(2, 3, 8, 9, seed=7), img, [2, 0, 1, 1],
             outs=[("grad_input", F32)]),
        call("aten::upsample_nearest2d", img, [9, 14]),
        call("aten::upsample_nearest2d.out", img, [4, 5], outs=[("out", F32)]),
        call("aten::upsample_nearest2d_backward", _t(2, 3, 9, 14, seed=8), [9, 14], [2, 3, 6, 7]),
        call("aten::upsample_nearest2d_backward.grad_input", _t(2, 3, 9, 14, seed=8), [9, 14], [2, 3, 6, 7],
             outs=[("grad_input", F32)]),
        call("aten::upsample_bilinear2d.out", img, [9, 14], True, outs=[("out", F32)]),
        call("aten::upsample_bilinear2d_backward.grad_input", _t(2, 3, 9, 14, seed=8), [9, 14], [2, 3, 6, 7], False,
             outs=[("grad_input", F32)]),
    ]
    # grid sampling: out= forms and the backward kernels called directly (modes, padding modes)
    grid2, grid3, vol = _t(2, 4, 5, 2, low=-1.2, high=1.2, seed=40), _t(2, 2, 3, 4, 3, low=-1.2, high=1.2, seed=41), \
        _t(2, 3, 3, 4, 5, seed=42)
    cases += [
        call("aten::grid_sampler_2d.out", img, grid2, 2, 2, False, outs=[("out", F32)]),
        call("aten::grid_sampler_2d_backward", _t(2, 3, 4, 5, seed=43), img, grid2, 0, 1, True, [True, True]),
        call("aten::grid_sampler_2d_backward", _t(2, 3, 4, 5, seed=43), img, grid2, 2, 0, False, [False, True]),
        call("aten::grid_sampler_2d_backward.out", _t(2, 3, 4, 5, seed=43), img, grid2, 1, 2, False, [True, True],
             outs=[("out0", F32), ("out1", F32)]),
        call("aten::grid_sampler_3d", vol, grid3, 0, 2, True),
        call("aten::grid_sampler_3d.out", vol, grid3, 1, 1, False, outs=[("out", F32)]),
        call("aten::grid_sampler_3d_backward", _t(2, 3, 2, 3, 4, seed=44), vol, grid3, 0, 0, False, [True, True]),
        call("aten::grid_sampler_3d_backward.out", _t(2, 3, 2, 3, 4, seed=44), vol, grid3, 0, 2, True, [True, True],
             outs=[("out0", F32), ("out1", F32)]),
    ]
    # convolution entry points of the device (CPU's counterparts: convolution and its backward)
    w, b = _t(4, 3, 3, 3, seed=9), _t(4, seed=10)
    conv_args = ([1, 2], [1, 0], [1, 1], False, [0, 0], 1)
    out_shape = aten.convolution(img, w, b, *conv_args).shape
    cases += [
        call("aten::convolution_overrideable", img, w, b, *conv_args, cpu_target="aten::convolution"),
        Case("aten::convolution_backward_overrideable", lambda d: _conv_backward(d, _t(*out_shape, seed=11), img, w,
                                                                                  conv_args)),
    ]
    # random draws: dtype, shape and no CPU fallback (values: tests/test_rng.py)
    cases += [
        call("aten::bernoulli_.Tensor", torch.zeros(6, 5), torch.full((6, 5), 0.3), inplace=True, random=True),
        call("aten::normal.float_Tensor", 0.5, torch.full((4, 3), 2.0), random=True),
        call("aten::random_", torch.zeros(6, dtype=torch.int32), inplace=True, random=True),
        call("aten::random_.from", torch.zeros(6), -3, 7, inplace=True, random=True),
        call("aten::random_.to", torch.zeros(6, dtype=torch.int64), 9, inplace=True, random=True),
        call("aten::randperm.generator_out", 7, generator=None, outs=[("out", torch.int64)], random=True),
        call("aten::cauchy_", torch.zeros(4, 5), 1.0, 2.0, inplace=True, random=True),
        call("aten::log_normal_", torch.zeros(4, 5), 0.5, 0.25, inplace=True, random=True),
        call("aten::geometric_", torch.zeros(6, dtype=torch.int64), 0.3, inplace=True, random=True),
        call("aten::poisson", torch.full((3, 4), 2.5), random=True),
    ]
    # AMP's GradScaler ops
    cases += [
        Case("aten::_amp_foreach_non_finite_check_and_unscale_", lambda d: _amp_unscale(d)),
        Case("aten::_amp_update_scale_", lambda d: _amp_update(d, found=0.0)),
        Case("aten::_amp_update_scale_", lambda d: _amp_update(d, found=1.0)),
    ]
    # fused optimizers (AdamW(fused=True) and friends), float and tensor learning rates
    cases += [
        _optimizer_case("aten::_fused_adam_", **_adam_kwargs(1e-2)),
        _optimizer_case("aten::_fused_adam_.tensor_lr", **_adam_kwargs(torch.tensor(1e-2))),
        _optimizer_case("aten::_fused_adamw_", **_adam_kwargs(1e-2)),
        _optimizer_case("aten::_fused_adamw_.tensor_lr", **_adam_kwargs(torch.tensor(1e-2))),
        _optimizer_case("aten::_fused_sgd_", **_sgd_kwargs(0.1)),
        _optimizer_case("aten::_fused_sgd_.tensor_lr", **_sgd_kwargs(torch.tensor(0.1))),
        _optimizer_case("aten::_fused_adagrad_", **_adagrad_kwargs(0.1)),
        _optimizer_case("aten::_fused_adagrad_.tensor_lr", **_adagrad_kwargs(torch.tensor(0.1))),
    ]
    # kernels that PyTorch reaches from module code: fused RNN cells (CPU runs the unfused cell)
    # and the transformer eval fast paths
    cases += [
        _module_case("aten::_thnn_fused_lstm_cell", lambda: torch.nn.LSTMCell(5, 4), _rnn_cell_run),
        _module_case("aten::_thnn_fused_lstm_cell_backward_impl", lambda: torch.nn.LSTMCell(5, 4), _rnn_cell_run),
        _module_case("aten::_thnn_fused_gru_cell", lambda: torch.nn.GRUCell(5, 4), _rnn_cell_run),
        _module_case("aten::_thnn_fused_gru_cell_backward", lambda: torch.nn.GRUCell(5, 4), _rnn_cell_run),
        _module_case("aten::_native_multi_head_attention",
                     lambda: torch.nn.MultiheadAttention(8, 2, batch_first=True).eval(), _mha_run),
        _module_case("aten::_transformer_encoder_layer_fwd",
                     lambda: torch.nn.TransformerEncoderLayer(8, 2, 16, batch_first=True).eval(), _encoder_run),
    ]
    # overloads the bounded slice of make test does not reach (the full run's OpInfos reach most
    # of them): out= forms, dims overloads, scalar and value variants, backward kernels
    bools = x > 0
    idx3 = torch.tensor([[0, 2, 1, 0, 2], [1, 0, 2, 2, 0]])
    nchw, tgt2 = _t(2, 4, 3, 5, seed=15), torch.tensor([[[0, 3, 1, 2, 0]] * 3, [[2, 1, 0, 3, 3]] * 3])
    for name in ("ceil", "exp", "log", "isneginf"):
        cases.append(call(f"aten::{name}.out", x.abs() if name == "log" else x,
                          outs=[("out", torch.bool if name == "isneginf" else F32)]))
    cases += [
        call("aten::ceil", x),
        call("aten::logical_not.out", ints, outs=[("out", torch.bool)]),
        call("aten::add.out", x, y, alpha=0.5, outs=[("out", F32)]),
        call("aten::sub.out", ints, ints.flip(0), alpha=2, outs=[("out", torch.int64)]),
        call("aten::maximum.out", x, y, outs=[("out", F32)]),
        call("aten::lerp.Tensor", x, y, _t(3, 5, seed=16, low=0, high=1)),
        call("aten::lerp.Tensor_out", x, y, _t(5, seed=17, low=0, high=1), outs=[("out", F32)]),
        call("aten::bmm.out", _t(2, 3, 4), _t(2, 4, 5, seed=1), outs=[("out", F32)]),
        call("aten::cat.out", [x, y, g[:1]], 0, outs=[("out", F32)]),
        call("aten::gather.out", x, 0, idx3, outs=[("out", F32)]),
        call("aten::masked_select.out", x, bools, outs=[("out", F32)]),
        call("aten::nonzero.out", ints, outs=[("out", torch.int64)]),
        call("aten::mean.out", x, [0], True, outs=[("out", F32)]),
        call("aten::linalg_vector_norm.out", x, 3.0, [1], outs=[("out", F32)]),
        call("aten::std.correction_out", x, [1], correction=1, outs=[("out", F32)]),
        call("aten::var.correction_out", x, [0], correction=0, keepdim=True, outs=[("out", F32)]),
        call("aten::all.out", bools, 1, outs=[("out", torch.bool)]),
        call("aten::all.all_out", ints, outs=[("out", torch.bool)]),
        call("aten::all.dims", bools, [0, 1]),
        call("aten::all.dims_out", ints, [0], True, outs=[("out", torch.bool)]),
        call("aten::any.dims", bools, [1]),
        call("aten::any.dims_out", ints, [0, 1], outs=[("out", torch.bool)]),
        Case("aten::eye.m", lambda d: aten.eye.m(3, 5, device=d)),
        # a ZeroTensor (no storage) read through ATen's ZeroTensor kernels: added to a dense tensor
        Case("aten::_efficientzerotensor",
             lambda d: aten._efficientzerotensor([3, 4], dtype=F32, device=d) + torch.ones(3, 4, device=d)),
        Case("aten::eye.m_out", lambda d: _with_out(lambda o: aten.eye.m_out(4, 2, out=o), d)),
        call("aten::scatter.value_out", x, 1, idx3, 0.5, outs=[("out", F32)]),
        call("aten::scatter.value_reduce", x, 1, idx3, 2.0, reduce="multiply"),
        call("aten::scatter.value_reduce_out", x, 0, idx3, 1.5, reduce="add", outs=[("out", F32)]),
        call("aten::scatter_.value_reduce", x, 1, idx3, 3.0, reduce="add", inplace=True),
        # bfloat16 reductions over many duplicates (CPU accumulates them in float32) and the
        # "max"/"min" aliases of scatter_reduce
        call("aten::scatter_add", torch.zeros(2, 3, dtype=torch.bfloat16), 0, torch.zeros(600, 3, dtype=torch.int64),
             torch.full((600, 3), 0.1, dtype=torch.bfloat16)),
        call("aten::scatter_reduce.two", torch.ones(2, 3, dtype=torch.float16), 0,
             torch.zeros(600, 3, dtype=torch.int64), torch.full((600, 3), 0.1, dtype=torch.float16), "mean"),
        call("aten::scatter_reduce.two", x, 1, idx3, _t(*idx3.shape, seed=18), "max", include_self=False),
        call("aten::take.out", x, torch.tensor([[0, -1], [7, 3]]), outs=[("out", F32)]),
        call("aten::index_select.out", x, 1, torch.tensor([4, 0, 4], dtype=torch.int32), outs=[("out", F32)]),
        call("aten::searchsorted.Scalar", torch.tensor([-1.0, 0.0, 0.5, 2.0]), 0.5, right=True),
        call("aten::searchsorted.Scalar_out", torch.tensor([-1.0, 0.0, 0.5, 2.0]), 0.7,
             outs=[("out", torch.int64)]),
        call("aten::sort.values_stable", ints, stable=True, dim=0, descending=True,
             outs=[("values", torch.int64), ("indices", torch.int64)]),
        call("aten::_log_softmax_backward_data", g, torch.log(sm), 1, F32),
        call("aten::nll_loss_backward", torch.tensor(1.0), torch.log_softmax(x, 1), tgt, _t(5, seed=18, low=0.5),
             1, -100, torch.tensor(3.0)),
        call("aten::nll_loss2d_backward", torch.tensor(0.25), torch.log_softmax(nchw, 1), tgt2, None, 1, 1,
             torch.tensor(24.0)),
        call("aten::_native_batch_norm_legit.no_stats", nchw, _t(4, seed=19), _t(4, seed=20), True, 0.1, 1e-5),
        call("aten::_native_batch_norm_legit_no_training", nchw, _t(4, seed=19), _t(4, seed=20), _t(4, seed=21),
             _t(4, seed=22, low=0.5, high=2.0), 0.1, 1e-5),
        Case("aten::normal.float_Tensor_out",
             lambda d: _with_out(lambda o: aten.normal.float_Tensor_out(0.5, torch.full((4, 3), 2.0, device=d), out=o), d),
             random=True),
    ]
    # the kernels of 1-D and 3-D resampling and padding, pooling, margin and CTC losses (issue
    # 11): the forms their OpInfos and modules do not call
    sig, vol = _t(2, 3, 7, seed=23), _t(1, 2, 4, 5, 6, seed=24)
    for name, x_, size, extra in (("_upsample_nearest_exact1d", sig, [10], ()), ("upsample_nearest1d", sig, [12], ()),
                                  ("upsample_linear1d", sig, [11], (True,)), ("upsample_bicubic2d", img, [8, 9], (False,)),
                                  ("_upsample_nearest_exact2d", img, [9, 5], ()),
                                  ("_upsample_nearest_exact3d", vol, [5, 7, 4], ()), ("upsample_nearest3d", vol, [6, 3, 8], ()),
                                  ("upsample_trilinear3d", vol, [5, 7, 9], (False,))):
        gout = _t(*x_.shape[:2], *size, seed=25)
        cases += [call(f"aten::{name}", x_, size, *extra),
                  call(f"aten::{name}.out", x_, size, *extra, outs=[("out", F32)]),
                  call(f"aten::{name}_backward", gout, size, list(x_.shape), *extra),
                  call(f"aten::{name}_backward.grad_input", gout, size, list(x_.shape), *extra,
                       outs=[("grad_input", F32)])]
    for name, x_, pad in (("reflection_pad1d", sig, [2, 3]), ("replication_pad1d", sig, [3, 1]),
                          ("reflection_pad3d", vol, [1, 2, 2, 1, 0, 3]), ("replication_pad3d", vol, [2, 0, 1, 1, 3, 2])):
        gout = _t(*getattr(aten, name)(x_, pad).shape, seed=26)
        cases += [call(f"aten::{name}", x_, pad),
                  call(f"aten::{name}.out", x_, pad, outs=[("out", F32)]),
                  call(f"aten::{name}_backward", gout, x_, pad),
                  call(f"aten::{name}_backward.grad_input", gout, x_, pad, outs=[("grad_input", F32)])]
    pooled2, idx2 = aten.adaptive_max_pool2d(img, [4, 3])
    pooled3, idx3d = aten.adaptive_max_pool3d(vol, [2, 3, 2])
    mp3, mp3_idx = aten.max_pool3d_with_indices(vol, [2, 2, 2], [2, 2, 2])
    cases += [
        call("aten::adaptive_max_pool2d.out", img, [4, 3], outs=[("out", F32), ("indices", torch.int64)]),
        call("aten::adaptive_max_pool2d_backward.grad_input", _t(*pooled2.shape, seed=27), img, idx2,
             outs=[("grad_input", F32)]),
        call("aten::adaptive_max_pool3d.out", vol, [2, 3, 2], outs=[("out", F32), ("indices", torch.int64)]),
        call("aten::adaptive_max_pool3d_backward.grad_input", _t(*pooled3.shape, seed=28), vol, idx3d,
             outs=[("grad_input", F32)]),
        call("aten::max_pool3d_with_indices.out", vol, [2, 3, 2], [1, 2, 2], [1, 1, 0],
             outs=[("out", F32), ("indices", torch.int64)]),
        call("aten::max_pool3d_with_indices_backward.grad_input", _t(*mp3.shape, seed=29), vol, [2, 2, 2], [2, 2, 2],
             [0, 0, 0], [1, 1, 1], False, mp3_idx, outs=[("grad_input", F32)]),
        call("aten::avg_pool3d_backward.grad_input", _t(*aten.avg_pool3d(vol, [2, 2, 2], [2, 2, 2]).shape, seed=30),
             vol, [2, 2, 2], [2, 2, 2], [0, 0, 0], False, True, None, outs=[("grad_input", F32)]),
    ]
    mtgt = torch.tensor([[3, 0, -1, 1, 2], [1, 4, 2, -1, 0], [0, -1, 3, 3, 3]])
    is_target = aten.multilabel_margin_loss_forward(x, mtgt, 1)[1]
    log_probs = torch.log_softmax(_t(6, 2, 4, seed=31), 2)
    ctc_tgt, ctc_il, ctc_tl = torch.tensor([[1, 2, 2], [3, 1, 0]]), torch.tensor([6, 5]), torch.tensor([3, 2])
    nll, alpha = aten._ctc_loss.Tensor(log_probs, ctc_tgt, ctc_il, ctc_tl)
    cases += [
        call("aten::multi_margin_loss.out", x, tgt, 2, 0.5, _t(5, seed=32, low=0.5), 1, outs=[("out", F32)]),
        call("aten::multi_margin_loss_backward.grad_input", torch.tensor(0.7), x, tgt, 1, 1.0, None, 1,
             outs=[("grad_input", F32)]),
        call("aten::multilabel_margin_loss_forward.output", x, mtgt, 1, outs=[("output", F32), ("is_target", F32)]),
        call("aten::multilabel_margin_loss_backward.grad_input", torch.tensor(0.7), x, mtgt, 1, is_target,
             outs=[("grad_input", F32)]),
        # the losses only: CPU leaves log_alpha uninitialised past each sample's lengths
        Case("aten::_ctc_loss.Tensor",
             lambda d: aten._ctc_loss.Tensor(*to_device((log_probs, ctc_tgt, ctc_il, ctc_tl), d), 0, True)[0]),
        call("aten::_ctc_loss_backward.Tensor", torch.tensor([0.5, 1.5]), log_probs, ctc_tgt, ctc_il, ctc_tl, nll, alpha, 0),
        call("aten::glu.out", _t(3, 6, seed=33), 1, outs=[("out", F32)]),
        call("aten::glu_backward.grad_input", g[:, :2], _t(3, 4, seed=34), 1, outs=[("grad_input", F32)]),
        call("aten::hardshrink_backward.grad_input", g, x, 0.5, outs=[("grad_input", F32)]),
        call("aten::softshrink_backward.grad_input", g, x, 0.7, outs=[("grad_input", F32)]),
        call("aten::threshold.out", x, 0.1, 2.0, outs=[("out", F32)]),
    ]
    # embeddings, FFT, isin, nanmedian, any
    weight = _t(6, 3, seed=35)
    bag_idx, bag_off = torch.tensor([0, 2, 5, 2, 1]), torch.tensor([0, 2])
    _, offset2bag, bag_size, max_idx = aten._embedding_bag(weight, bag_idx, bag_off, False, 1)
    nan_x = x.clone()
    nan_x[0, 1] = nan_x[2, 3] = float("nan")
    cases += [
        call("aten::embedding_dense_backward", _t(5, 3, seed=36), bag_idx, 6, -1, False),
        call("aten::_embedding_bag_dense_backward", _t(2, 3, seed=37), bag_idx, offset2bag, bag_size, max_idx, 6,
             False, 1, None),
        call("aten::_fft_r2c.out", _t(3, 8, seed=38), [1], 0, True, outs=[("out", torch.complex64)]),
        call("aten::isin.Scalar_Tensor", 2, ints),
        call("aten::isin.Scalar_Tensor_out", -1, ints, invert=True, outs=[("out", torch.bool)]),
        call("aten::isin.Tensor_Scalar", ints, 3),
        call("aten::isin.Tensor_Scalar_out", ints, 0, invert=True, outs=[("out", torch.bool)]),
        call("aten::nanmedian.dim_values", nan_x, 1, outs=[("values", F32), ("indices", torch.int64)]),
        call("aten::any.out", bools, 0, True, outs=[("out", torch.bool)]),
        call("aten::any.all_out", ints, outs=[("out", torch.bool)]),
    ]
    # nn.TransformerEncoder's nested fast path: the nested tensor compared as its padded form
    seq, keep = _t(2, 4, 3, seed=39), torch.tensor([[True, True, False, False], [True, True, True, False]])
    cases += [
        Case("aten::_nested_tensor_from_mask",
             lambda d: aten._nested_tensor_from_mask(*to_device((seq, keep), d)).to_padded_tensor(0.0)),
        call("aten::_nested_tensor_from_mask_left_aligned", seq, keep),
    ]
    # weight norm's fused interface (nn.utils.parametrizations.weight_norm) and the legacy norm forms
    v, gw = _t(4, 5, seed=11), _t(4, 5, seed=12)
    gain = _t(4, 1, seed=13, low=0.5, high=2.0)
    cases += [
        call("aten::_weight_norm_interface", v, gain, 0),
        call("aten::_weight_norm_interface_backward", gw, v, gain, v.norm(dim=1, keepdim=True), 0),
        call("aten::norm.ScalarOpt_dim_dtype", x, 2, [1], False, dtype=torch.float64),
        call("aten::norm.out", x, 3, [0], outs=[("out", F32)]),
        call("aten::norm.dtype_out", x, 1, [1], True, dtype=F32, outs=[("out", F32)]),
    ]
    return cases


def _conv_backward(device, grad, x, w, conv_args):
    """The device's convolution backward entry point; on CPU, aten::convolution_backward (which
    also takes the bias shape)."""
    grad, x, w = to_device((grad, x, w), device)
    if device == "cpu":
        return aten.convolution_backward(grad, x, w, [w.shape[0]], *conv_args, [True, True, True])
    return aten.convolution_backward_overrideable(grad, x, w, *conv_args, [True, True, True])


def _amp_unscale(device):
    grads = [_t(3, 4).to(device), torch.tensor([1.0, float("inf"), 2.0]).to(device)]
    found = torch.zeros(1, device=device)
    aten._amp_foreach_non_finite_check_and_unscale_(grads, found, torch.tensor([0.25], device=device))
    return grads, found


def _amp_update(device, found):
    scale = torch.tensor([1024.0], device=device)
    tracker = torch.tensor([1], dtype=torch.int32, device=device)
    r = aten._amp_update_scale_(scale, tracker, torch.tensor([found], device=device), 2.0, 0.5, 2)
    return r, scale, tracker


def _rnn_cell_run(cell, device):
    x = _t(3, 5, seed=12).to(device).requires_grad_()
    out = cell(x)
    h = out[0] if isinstance(out, tuple) else out
    loss = (h * torch.linspace(0.5, 1.5, h.numel(), device=device).reshape(h.shape)).sum()
    if isinstance(out, tuple):
        loss = loss + out[1].sum()
    grads = torch.autograd.grad(loss, [x, *cell.parameters()])
    return out, grads


def _mha_run(mha, device):
    q = _t(2, 5, 8, seed=13).to(device)
    with torch.no_grad():
        return mha(q, q, q, need_weights=False)[0]


def _encoder_run(layer, device):
    src = _t(2, 5, 8, seed=14).to(device)
    with torch.no_grad():
        return layer(src)


CASES = _cases()
