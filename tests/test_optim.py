"""Optimizer paths (for-loop, foreach, fused) and the regression losses on neuron, against
CPU PyTorch, with no CPU fallback."""
import pytest
import torch

import torch_neuronx

F = torch.nn.functional

OPTIMIZERS = [
    (torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
    (torch.optim.Adam, dict(lr=1e-2, weight_decay=0.1, amsgrad=True)),
    (torch.optim.Adam, dict(lr=1e-2, maximize=True)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=0.01)),
    (torch.optim.SGD, dict(lr=0.1, momentum=0.5, dampening=0.1)),
    (torch.optim.SGD, dict(lr=0.1)),
]


def _train(device, cls, kwargs, impl, steps=4):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 4)).to(device)
    opt = cls(model.parameters(), **kwargs, **impl)
    x, y = torch.randn(32, 8).to(device), torch.randn(32, 4).to(device)
    for _ in range(steps):
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    return [p.detach().cpu() for p in model.parameters()]


@pytest.mark.parametrize("cls,kwargs", OPTIMIZERS, ids=lambda v: getattr(v, "__name__", str(v)))
def test_for_loop_foreach_and_fused_paths_agree(cls, kwargs):
    torch_neuronx.clear_op_tracking()
    expected = _train("cpu", cls, kwargs, dict(foreach=False))
    paths = {name: _train("neuron", cls, kwargs, impl)
             for name, impl in [("for-loop", dict(foreach=False)), ("foreach", dict(foreach=True)),
                                ("fused", dict(fused=True))]}
    assert torch_neuronx.get_fallback_ops() == []
    counts = torch_neuronx.get_executed_op_counts()
    assert any(k.startswith("aten::_fused_") for k in counts), counts
    for name, params in paths.items():
        for p, e in zip(params, expected):
            torch.testing.assert_close(p, e, rtol=1e-5, atol=1e-6, msg=name)
    # The fused kernel follows the foreach sequence's roundings: identical parameters.
    for a, b in zip(paths["fused"], paths["foreach"]):
        assert torch.equal(a, b)


def test_fused_adamw_with_grad_scaler_skips_inf_steps():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).to("neuron")
    opt = torch.optim.AdamW(model.parameters(), lr=0.1, fused=True)
    scaler = torch.amp.GradScaler("neuron", init_scale=256.0)
    before = [p.detach().cpu().clone() for p in model.parameters()]
    x = torch.randn(3, 4, device="neuron")
    scaler.scale(model(x).sum() * float("inf")).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 128.0
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.detach().cpu(), b)
    opt.zero_grad()
    scaler.scale(model(x).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(model.weight.detach().cpu(), before[0])
    assert torch_neuronx.get_fallback_ops() == []


@pytest.mark.parametrize("loss", ["mse_loss", "smooth_l1_loss", "huber_loss", "l1_loss",
                                  "binary_cross_entropy_with_logits", "binary_cross_entropy"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_losses_and_gradients_match_cpu(loss, reduction):
    torch.manual_seed(0)
    x = torch.randn(6, 5) * 2
    t = torch.rand(6, 5) if loss.startswith("binary_cross_entropy") else torch.randn(6, 5)
    fn = getattr(torch.nn.functional, loss)
    extra = {"beta": 0.5} if loss == "smooth_l1_loss" else {"delta": 0.7} if loss == "huber_loss" else {}
    torch_neuronx.clear_op_tracking()
    if loss == "binary_cross_entropy":  # probabilities
        x = x.sigmoid()
    xc, xn = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    expected, actual = fn(xc, t, reduction=reduction, **extra), fn(xn, t.to("neuron"), reduction=reduction, **extra)
    torch.testing.assert_close(actual.cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
    expected.sum().backward()
    actual.sum().backward()
    torch.testing.assert_close(xn.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)
    assert torch_neuronx.get_fallback_ops() == []


def test_clamp_with_tensor_bounds_propagates_nan_like_cpu():
    x = torch.tensor([-2.0, 0.5, float("nan"), 3.0, 1.0])
    lo = torch.tensor([-1.0, 1.0, 0.0, float("nan"), 0.0])
    hi = torch.tensor([0.0, 2.0, 1.0, 4.0, 0.5])
    torch_neuronx.clear_op_tracking()
    for args in [(lo, hi), (lo, None), (None, hi)]:
        expected = torch.clamp(x, *args)
        actual = torch.clamp(x.to("neuron"), *[a.to("neuron") if a is not None else None for a in args])
        torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)
    xi = torch.arange(-3, 4)
    assert torch.equal(torch.clamp(xi.to("neuron"), xi.flip(0).to("neuron") * 0 - 1, xi.to("neuron").abs()).cpu(),
                       torch.clamp(xi, xi.flip(0) * 0 - 1, xi.abs()))
    assert torch_neuronx.get_fallback_ops() == []


def test_binary_cross_entropy_refuses_inputs_outside_0_1():
    with pytest.raises(RuntimeError, match="between 0 and 1"):
        F.binary_cross_entropy(torch.tensor([1.5], device="neuron"), torch.tensor([1.0], device="neuron"))


@pytest.mark.parametrize("shape", [(4, 5, 7), (2, 5, 3, 4)], ids=["sequence", "image"])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_over_spatial_dims_matches_cpu(shape, reduction):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    t = torch.randint(0, shape[1], (shape[0], *shape[2:]))
    t[0, 0] = -100   # ignore_index
    torch_neuronx.clear_op_tracking()
    xc, xn = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    expected = F.cross_entropy(xc, t, reduction=reduction, label_smoothing=0.1)
    actual = F.cross_entropy(xn, t.to("neuron"), reduction=reduction, label_smoothing=0.1)
    torch.testing.assert_close(actual.cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
    expected.sum().backward()
    actual.sum().backward()
    torch.testing.assert_close(xn.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)
    assert torch_neuronx.get_fallback_ops() == []
