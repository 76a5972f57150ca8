"""Ops that models commonly call run natively (no CPU fallback) and match CPU PyTorch,
forward and backward."""
import pytest
import torch

import torch_neuronx

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
