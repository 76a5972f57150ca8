"""Ops that models commonly call run natively (no CPU fallback) and match CPU PyTorch,
forward and backward."""
import pytest
import torch

import torch_neuronx

from conftest import assert_bitwise_equal

F = torch.nn.functional


def _x(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


CASES = {
    "kl_div (xlogy)": (lambda x: F.kl_div(x.log_softmax(-1), x.softmax(-1).detach(), reduction="batchmean"), (4, 6)),
    "mish": (lambda x: F.mish(x), (3, 5)),
    "hypot": (lambda x: torch.hypot(x, x.flip(0)), (4, 3)),
    "nan_to_num": (lambda x: torch.nan_to_num(x / (x > 0), posinf=7.0), (5, 4)),
    "logsigmoid": (lambda x: F.logsigmoid(x * 30), (3, 4)),
    "clamp tensor bounds": (lambda x: torch.clamp(x, -x.abs().detach() * 0.5, x.abs().detach() * 0.3), (4, 4)),
    "l1_loss": (lambda x: F.l1_loss(x, torch.ones_like(x)), (3, 3)),
    "gather": (lambda x: x.gather(1, torch.tensor([[0, 2], [1, 1], [2, 0]], device=x.device)), (3, 3)),
    "advanced index": (lambda x: x[torch.tensor([2, 0, 2], device=x.device)], (3, 4)),
    "cumsum": (lambda x: x.cumsum(1), (3, 7)),
    "logsumexp": (lambda x: x.logsumexp(-1), (3, 7)),
    "sort values": (lambda x: x.sort(-1).values, (3, 7)),
    "erfinv": (lambda x: torch.erfinv(x.tanh() * 0.99), (4, 5)),
    "grid_sample": (lambda x: F.grid_sample(x, (_x(2, 4, 5, 2, seed=3).tanh() * 1.2).to(x.device), align_corners=False),
                    (2, 3, 6, 7)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_common_ops_are_native_and_match_cpu(name):
    fn, shape = CASES[name]
    x = _x(*shape)
    xc, xn = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    torch_neuronx.clear_op_tracking()
    expected, actual = fn(xc), fn(xn)
    torch.testing.assert_close(actual.cpu(), expected.detach(), rtol=1e-5, atol=1e-6, equal_nan=True)
    expected.sum().backward()
    actual.sum().backward()
    torch.testing.assert_close(xn.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6, equal_nan=True)
    assert torch_neuronx.get_fallback_ops() == []


def test_creation_and_complex_reductions_are_native():
    torch_neuronx.clear_op_tracking()
    assert torch.equal(torch.eye(3, 5, device="neuron").cpu(), torch.eye(3, 5))
    for dtype in (torch.float32, torch.bfloat16):
        torch.testing.assert_close(torch.linspace(-2, 3, 17, dtype=dtype, device="neuron").cpu(),
                                   torch.linspace(-2, 3, 17, dtype=dtype), rtol=0, atol=0)
    z = torch.complex(_x(4, 3), _x(4, 3, seed=1))
    zn = z.to("neuron")
    torch.testing.assert_close(zn.abs().cpu(), z.abs())
    torch.testing.assert_close(zn.sum(0).cpu(), z.sum(0))
    torch.testing.assert_close(zn.mean().cpu(), z.mean())
    assert torch_neuronx.get_fallback_ops() == []


def test_unique_and_normal_with_tensor_arguments_are_native():
    torch_neuronx.clear_op_tracking()
    x = torch.tensor([[3, 1, 2], [3, 1, 7]])
    for kwargs in ({}, {"return_inverse": True, "return_counts": True}):
        expected, actual = torch.unique(x, **kwargs), torch.unique(x.to("neuron"), **kwargs)
        for a, e in zip(actual if kwargs else [actual], expected if kwargs else [expected]):
            assert torch.equal(a.cpu(), e)
    torch.manual_seed(0)
    mean = torch.full((200_000,), 3.0, device="neuron")
    std = torch.full((200_000,), 2.0, device="neuron")
    for draws in (torch.normal(mean, 2.0), torch.normal(3.0, std), torch.normal(mean, std)):
        # mean within 5 standard errors of 3, std within 1% of 2
        assert abs(draws.mean().item() - 3.0) < 5 * 2.0 / 200_000 ** 0.5
        assert abs(draws.std().item() - 2.0) < 0.02
    assert torch_neuronx.get_fallback_ops() == []


def test_scalar_base_pow_and_bincount_are_native():
    torch_neuronx.clear_op_tracking()
    t = torch.linspace(-3, 3, 13)
    torch.testing.assert_close((2.5 ** t.to("neuron")).cpu(), 2.5 ** t)
    x = torch.tensor([0, 1, 1, 3, 5, 1])
    w = torch.tensor([0.5, 1.0, 1.0, 2.0, 1.0, 1.0])
    assert torch.equal(torch.bincount(x.to("neuron")).cpu(), torch.bincount(x))
    torch.testing.assert_close(torch.bincount(x.to("neuron"), w.to("neuron"), minlength=8).cpu(),
                               torch.bincount(x, w, minlength=8))
    assert torch_neuronx.get_fallback_ops() == []


def test_median_is_native_and_propagates_nan():
    torch_neuronx.clear_op_tracking()
    x = torch.tensor([[2.0, 1.0, 2.0, 3.0], [1.0, float("nan"), 1.0, 0.0]])
    torch.testing.assert_close(torch.median(x.to("neuron")).cpu(), torch.median(x), equal_nan=True)
    torch.testing.assert_close(torch.median(x[0].to("neuron")).cpu(), torch.median(x[0]))
    values, indices = torch.median(x.to("neuron"), 1)
    expected = torch.median(x, 1)
    torch.testing.assert_close(values.cpu(), expected.values, equal_nan=True)
    assert torch.equal(indices.cpu(), expected.indices)
    assert torch_neuronx.get_fallback_ops() == []


# ---------------------------------------------------------------- clamp, hardswish, pow parity

NAN, INF = float("nan"), float("inf")


def _outcome(fn, device):
    """fn(device)'s tensors on the host, or the RuntimeError it raised."""
    try:
        r = fn(device)
    except RuntimeError as e:
        return e
    return tuple(t.cpu() for t in r) if isinstance(r, (tuple, list)) else (r.cpu(),)


def assert_like_cpu(fn, bitwise=True):
    """fn("neuron") gives CPU PyTorch's values (bit for bit, signed zeros included), or raises
    CPU's RuntimeError with CPU's message."""
    want, got = _outcome(fn, "cpu"), _outcome(fn, "neuron")
    if isinstance(want, RuntimeError):
        assert isinstance(got, RuntimeError), (want, got)
        assert str(got).splitlines()[0] == str(want).splitlines()[0]
        return
    assert not isinstance(got, RuntimeError), got
    for g, w in zip(got, want, strict=True):
        if bitwise:
            assert_bitwise_equal(g, w)
        else:
            torch.testing.assert_close(g, w, equal_nan=True)


CLAMP_DTYPES = [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.float32, torch.float16,
                torch.bfloat16]
# (min, max): min > max (every element is max), negative bounds for unsigned types (read as
# the wrapped value), bounds out of the type's range (RuntimeError), NaN bounds (all NaN when
# both are given), infinities.
CLAMP_BOUNDS = [(5, -3), (-3, 5), (None, -1), (-3, None), (300, None), (None, 200), (-256, None), (NAN, 2.0),
                (0.0, NAN), (NAN, None), (None, NAN), (1e5, None), (None, -1e39), (-INF, INF), (2.5, None)]


@pytest.mark.parametrize("dtype", CLAMP_DTYPES, ids=str)
def test_clamp_scalar_bounds_match_cpu(native, dtype):
    """clamp / clamp_ / clamp(out=) / clamp_min / clamp_max / hardtanh read a Python-number bound
    in the tensor's dtype as CPU does (c10's checked conversion) and compute min(max(x, lo), hi)."""
    base = torch.tensor([-7, 0, 3, 9, 100], dtype=torch.int64).to(dtype) if dtype != torch.uint8 else \
        torch.tensor([0, 1, 7, 200, 255], dtype=dtype)
    x = lambda d: base.to(d, copy=True)  # noqa: E731 (clamp_ writes it)
    for lo, hi in CLAMP_BOUNDS:
        assert_like_cpu(lambda d: torch.clamp(x(d), lo, hi))
        rt = torch.result_type(base, lo if lo is not None else hi)
        if rt == dtype:  # in-place and out= keep the dtype
            assert_like_cpu(lambda d: x(d).clamp_(lo, hi))
            assert_like_cpu(lambda d: torch.clamp(x(d), lo, hi, out=torch.empty(5, dtype=dtype, device=d)))
        if hi is None:
            assert_like_cpu(lambda d: torch.clamp_min(x(d), lo))
        if lo is None:
            assert_like_cpu(lambda d: torch.clamp_max(x(d), hi))
        if lo is not None and hi is not None and not (dtype == torch.uint8 and min(lo, hi) < 0):
            # aten's hardtanh: F.hardtanh refuses lo > hi in Python
            assert_like_cpu(lambda d: torch.ops.aten.hardtanh(x(d), lo, hi))
    assert "aten::clamp" in torch_neuronx.get_executed_ops()


@pytest.mark.parametrize("dtype", [torch.int64, torch.uint8, torch.float32, torch.bfloat16], ids=str)
def test_clamp_tensor_bounds_match_cpu(native, dtype):
    """clamp with tensor bounds: min > max gives max, a NaN bound gives NaN (float)."""
    x = torch.tensor([0, 1, 7, 200], dtype=dtype)
    lo, hi = torch.tensor([5, 0, 9, 0], dtype=dtype), torch.tensor([3, 0, 8, 250], dtype=dtype)
    assert_like_cpu(lambda d: torch.clamp(x.to(d), lo.to(d), hi.to(d)))
    assert_like_cpu(lambda d: torch.clamp(x.to(d), lo.to(d)))
    assert_like_cpu(lambda d: torch.clamp(x.to(d), max=hi.to(d)))
    if dtype.is_floating_point:
        nan_lo = torch.tensor([NAN, 0, 0, 0], dtype=dtype)
        assert_like_cpu(lambda d: torch.clamp(x.to(d), nan_lo.to(d), hi.to(d)))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_hardswish_backward_at_the_kinks_matches_cpu(native, dtype):
    """ATen's hardswish gradient: x <= -3 gives 0, x >= 3 the incoming gradient itself."""
    x = torch.tensor([-4.0, -3.0, -2.9, 0.0, 2.9, 3.0, 4.0], dtype=dtype)
    g = torch.linspace(0.5, 2.0, 7).to(dtype)
    assert_like_cpu(lambda d: torch.ops.aten.hardswish_backward(g.to(d), x.to(d)), bitwise=False)

    def autograd(d):
        xd = x.to(d, copy=True).requires_grad_()
        F.hardswish(xd).backward(g.to(d))
        return xd.grad
    assert_like_cpu(autograd, bitwise=False)


def test_pow_scalar_exponent_and_base_conversions_match_cpu(native):
    """pow(tensor, number) reads the exponent in the tensor's dtype, checked (uint8 ** 300 and
    float16 ** 1e10 raise; float16 / bfloat16 round it); pow(number, tensor) converts the base
    unchecked, as a wrapped number (300 ** uint8 is 44 ** x, 1e10 ** float16 is inf ** x)."""
    u = torch.tensor([1, 2, 3], dtype=torch.uint8)
    i8 = torch.tensor([1, 2], dtype=torch.int8)
    h = torch.tensor([1.0, 2.0, 3.0, 100.0], dtype=torch.float16)
    b = torch.tensor([1.0, 2.0, 3.0, 100.0], dtype=torch.bfloat16)
    for t, e in ((u, 300), (u, 255), (u, -1), (i8, 1000), (i8, 127), (h, 1e10), (h, 65520), (h, 2.1),
                 (b, 1e39), (b, 2.1), (h, 0), (u, 1)):
        assert_like_cpu(lambda d: torch.pow(t.to(d), e))
        assert_like_cpu(lambda d: t.to(d, copy=True).pow_(e))
        assert_like_cpu(lambda d: torch.pow(t.to(d), e, out=torch.empty(0, dtype=t.dtype, device=d)))
        assert_like_cpu(lambda d: torch.pow(e, t.to(d)))
    assert_like_cpu(lambda d: torch.pow(1e5, torch.tensor([0.5, 2.0], dtype=torch.float16, device=d)))
    assert "aten::pow" in torch_neuronx.get_executed_ops()


SPECIAL_BASES = [-INF, -2.0, -1.0, -0.0, 0.0, 0.25, 1.0, 4.0, INF, NAN]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_pow_ieee_special_values_match_cpu(native, dtype):
    """pow of tensors is C's pow (pow(-inf, 0.5) = inf, pow(-0, -0.5) = inf); pow by a number
    takes ATen's shortcuts for float32 / bfloat16 (0.5 is sqrt: nan, -0) but not for float16."""
    x = torch.tensor(SPECIAL_BASES, dtype=dtype)
    exps = [0.5, -0.5, 2.0, 3.0, -1.0, -2.0, 1.5, -1.5]
    for e in exps:
        assert_like_cpu(lambda d: torch.pow(x.to(d), e))
    xs = x.repeat_interleave(len(exps))
    es = torch.tensor(exps, dtype=dtype).repeat(len(SPECIAL_BASES))
    assert_like_cpu(lambda d: torch.pow(xs.to(d), es.to(d)))
    assert_like_cpu(lambda d: torch.pow(-0.0, es.to(d)))  # a number base: the tensor kernel


def test_pow_with_complex_exponent_takes_the_cpu_fallback(neuron):
    """A complex exponent makes the result complex: refused before any device work, so the call
    takes the visible CPU fallback (recorded) and gives CPU's result."""
    torch_neuronx.clear_op_tracking()
    x = torch.tensor([1.0, 2.0, -3.0])
    got = torch.pow(x.to(neuron), 2 + 0j)  # (its warning comes once per process: an earlier test may have had it)
    assert_bitwise_equal(got, torch.pow(x, 2 + 0j))
    assert "aten::pow" in torch_neuronx.get_fallback_ops()


# ---------------------------------------------------------------- ZeroTensor (forward-mode AD)

def test_efficientzerotensor_is_a_zerotensor_as_on_cpu(native):
    z, zc = torch._efficientzerotensor((2, 3), device="neuron"), torch._efficientzerotensor((2, 3))
    assert z._is_zerotensor() and zc._is_zerotensor()
    assert z.device.type == "neuron" and z.shape == zc.shape and z.dtype == zc.dtype
    for mutate in (lambda t: t.add_(1), lambda t: t.zero_(), lambda t: t.copy_(torch.ones(2, 3))):
        with pytest.raises(RuntimeError, match="ZeroTensors are immutable") as on_cpu:
            mutate(zc)
        with pytest.raises(RuntimeError, match=on_cpu.value.args[0][:60]):
            mutate(z)
    y = _x(2, 3)
    assert_bitwise_equal(z + y.to("neuron"), zc + y)
    assert_bitwise_equal(z * y.to("neuron"), zc * y)
    assert_bitwise_equal(z.cpu(), torch.zeros(2, 3))
    half = torch._efficientzerotensor((4,), dtype=torch.float16, device="neuron:0")
    assert half.dtype == torch.float16 and half._is_zerotensor() and torch.equal(half.cpu(), torch.zeros(4, dtype=torch.float16))


def _mlp():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3), torch.nn.GELU())


def test_forward_ad_of_an_mlp_matches_cpu_and_is_native(native):
    import torch.autograd.forward_ad as fwAD
    from torch.func import functional_call, jvp
    model = _mlp()
    dev_model = _mlp().to("neuron")
    x, t = _x(5, 4), _x(5, 4, seed=1)
    params = dict(model.named_parameters())
    dev_params = dict(dev_model.named_parameters())
    out_c, tan_c = jvp(lambda a: functional_call(model, params, (a,)), (x,), (t,))
    out_d, tan_d = jvp(lambda a: functional_call(dev_model, dev_params, (a,)), (x.to("neuron"),), (t.to("neuron"),))
    torch.testing.assert_close(out_d.cpu(), out_c)
    torch.testing.assert_close(tan_d.cpu(), tan_c)
    with fwAD.dual_level():
        d = fwAD.make_dual(x.to("neuron"), t.to("neuron"))
        p = fwAD.unpack_dual(dev_model(d) * 2)
        dc = fwAD.make_dual(x, t)
        pc = fwAD.unpack_dual(model(dc) * 2)
    torch.testing.assert_close(p.primal.cpu(), pc.primal)
    torch.testing.assert_close(p.tangent.cpu(), pc.tangent)
    assert "aten::_efficientzerotensor" in torch_neuronx.get_executed_ops()
