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


@pytest.mark.parametrize("make", [lambda ps: torch.optim.AdamW(ps, lr=0.1, fused=True),
                                  lambda ps: torch.optim.Adagrad(ps, lr=0.1, fused=True)], ids=["adamw", "adagrad"])
def test_fused_optimizer_with_grad_scaler_skips_inf_steps(native, make):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).to("neuron")
    opt = make(model.parameters())
    scaler = torch.amp.GradScaler("neuron", init_scale=256.0)
    before = [p.detach().cpu().clone() for p in model.parameters()]
    x = torch.randn(3, 4, device="neuron")
    scaler.scale(model(x).sum() * float("inf")).backward()
    scaler.step(opt)
    scaler.update()
    assert scaler.get_scale() == 128.0
    for p, b in zip(model.parameters(), before):
        assert torch.equal(p.detach().cpu(), b)
    assert all(s["step"].item() == 0 for s in opt.state.values())
    opt.zero_grad()
    scaler.scale(model(x).sum()).backward()
    scaler.step(opt)
    scaler.update()
    assert not torch.equal(model.weight.detach().cpu(), before[0])
    assert torch_neuronx.get_fallback_ops() == []


@pytest.mark.parametrize("cls,kwargs", [(torch.optim.Adam, dict(lr=1e-2)), (torch.optim.AdamW, dict(lr=1e-2)),
                                        (torch.optim.SGD, dict(lr=0.1, momentum=0.9)),
                                        (torch.optim.Adagrad, dict(lr=0.1, weight_decay=0.01))], ids=lambda v: getattr(v, "__name__", str(v)))
def test_fused_paths_with_non_contiguous_params_and_grads(cls, kwargs):
    """channels_last parameters, and parameters whose gradient has another layout: the fused
    kernel works on contiguous copies, each held until the update is queued."""
    def train(device, impl):
        torch.manual_seed(0)
        conv = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3))
        conv = conv.to(device).to(memory_format=torch.channels_last)
        a = torch.nn.Parameter(torch.randn(6, 5).to(device))  # row-major, its gradient column-major
        b = torch.nn.Parameter(torch.randn(5, 6).to(device).t())  # column-major, gradient row-major
        params = [*conv.parameters(), a, b]
        opt = cls(params, **kwargs, **impl)
        x = torch.randn(2, 3, 8, 8).to(device)
        for _ in range(3):
            opt.zero_grad()
            conv(x).square().mean().backward()
            a.grad = (torch.randn(5, 6) * 0.1).to(device).t().contiguous().t().t()
            b.grad = (torch.randn(6, 5) * 0.1).to(device)
            opt.step()
        return [p.detach().cpu() for p in params]

    expected = train("cpu", dict(foreach=False))
    torch_neuronx.clear_op_tracking()
    got = train("neuron", dict(fused=True))
    assert any(k.startswith("aten::_fused_") for k in torch_neuronx.get_executed_op_counts())
    assert torch_neuronx.get_fallback_ops() == []
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


ADAGRAD = [
    dict(lr=0.1),
    dict(lr=0.05, lr_decay=0.1, weight_decay=0.1, initial_accumulator_value=0.2),
    dict(lr=0.1, maximize=True, eps=1e-3),
]


@pytest.mark.parametrize("kwargs", ADAGRAD)
@pytest.mark.parametrize("lr_kind", ["float", "cpu tensor", "device tensor"])
def test_fused_adagrad_matches_cpu_fused(native, kwargs, lr_kind):
    """Adagrad(fused=True): the native _fused_adagrad_ (one launch per dtype group) against
    CPU's fused kernel, lr as a float or a tensor (on the host or the device)."""
    def lr_for(device):
        if lr_kind == "float":
            return kwargs["lr"]
        return torch.tensor(kwargs["lr"], device=device if lr_kind == "device tensor" else "cpu")

    rest = {k: v for k, v in kwargs.items() if k != "lr"}
    expected = _train("cpu", torch.optim.Adagrad, dict(rest, lr=lr_for("cpu")), dict(fused=True))
    torch_neuronx.clear_op_tracking()
    got = _train("neuron", torch.optim.Adagrad, dict(rest, lr=lr_for("neuron")), dict(fused=True))
    assert "aten::_fused_adagrad_" in torch_neuronx.get_executed_ops()
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)
    # the foreach path (its own roundings) agrees within tolerance
    for g, e in zip(got, _train("cpu", torch.optim.Adagrad, dict(rest, lr=kwargs["lr"]), dict(foreach=False))):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_fused_adagrad_op_with_grad_scale_and_found_inf(native, dtype):
    """aten::_fused_adagrad_ called directly: grad_scale divides (and is written back to) the
    gradients, found_inf != 0 skips the step; steps read on the device; non-contiguous lists."""
    def run(device, found):
        gen = torch.Generator().manual_seed(0)
        mk = lambda *s: (torch.rand(*s, generator=gen) + 0.5).to(device, dtype)  # noqa: E731 (no zero grads:
        # CPU's vectorised 16-bit path rounds eps to 0 and gives 0/0 there)
        params = [mk(5, 7), mk(6, 4).t(), mk(3000)]
        grads = [mk(5, 7), mk(4, 6).t().contiguous().t(), mk(3000)]
        sums = [mk(5, 7) * 0, mk(6, 4).t() * 0 + 0.1, mk(3000) * 0]
        steps = [torch.tensor(float(k + 1), device=device) for k in range(3)]
        scale = torch.tensor(4.0, device=device)
        found_inf = torch.tensor(found, device=device)
        torch.ops.aten._fused_adagrad_(params, grads, sums, steps, lr=0.1, lr_decay=0.05, weight_decay=0.01,
                                       eps=1e-10, maximize=False, grad_scale=scale, found_inf=found_inf)
        return [t.cpu() for t in params + grads + sums]

    tol = dict(rtol=1e-5, atol=1e-6) if dtype in (torch.float32, torch.float64) else dict(rtol=1e-2, atol=1e-2)
    for found in (0.0, 1.0):
        for got, want in zip(run("neuron", found), run("cpu", found)):
            torch.testing.assert_close(got, want, **tol)


def test_fused_adagrad_refuses_mismatched_lists():
    p = [torch.ones(3, device="neuron")]
    with pytest.raises(RuntimeError, match="state_sums"):
        torch.ops.aten._fused_adagrad_(p, [torch.ones(3, device="neuron")], [], [torch.ones((), device="neuron")],
                                       lr=0.1, lr_decay=0.0, weight_decay=0.0, eps=1e-10, maximize=False)
    with pytest.raises(RuntimeError, match="state_steps"):
        torch.ops.aten._fused_adagrad_(p, [torch.ones(3, device="neuron")], [torch.ones(3, device="neuron")], [],
                                       lr=0.1, lr_decay=0.0, weight_decay=0.0, eps=1e-10, maximize=False)


def test_grad_scaler_scale_stays_finite_as_on_cpu():
    """A scale whose growth would overflow float32 is kept (ATen's _amp_update_scale_)."""
    scales = {}
    for device in ("cpu", "neuron"):
        p = torch.nn.Parameter(torch.ones(2, device=device))
        opt = torch.optim.SGD([p], lr=0.0)
        scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 126, growth_interval=1)
        for _ in range(3):
            opt.zero_grad()
            scaler.scale((p * 1e-30).sum()).backward()
            scaler.step(opt)
            scaler.update()
        scales[device] = scaler.get_scale()
    assert scales["neuron"] == scales["cpu"] == 2.0 ** 127


def test_amp_unscale_multiplies_in_float32_and_checks_arguments():
    aten = torch.ops.aten
    results = {}
    for device in ("cpu", "neuron"):
        g = [torch.tensor([1000.0, 3.0, float("inf")], dtype=torch.float16, device=device),
             torch.tensor([2.0 ** 20], device=device)]
        found = torch.zeros((), device=device)
        aten._amp_foreach_non_finite_check_and_unscale_(g, found, torch.full((), 2.0 ** -30, device=device))
        results[device] = [t.cpu() for t in g] + [found.cpu()]
    for got, want in zip(results["neuron"], results["cpu"]):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    bad_calls = [
        lambda d: aten._amp_foreach_non_finite_check_and_unscale_(
            [torch.ones(2, device=d)], torch.zeros((), dtype=torch.float16, device=d), torch.ones((), device=d)),
        lambda d: aten._amp_foreach_non_finite_check_and_unscale_(
            [torch.ones(2, device=d)], torch.zeros((), device=d), torch.ones((), dtype=torch.float64, device=d)),
        lambda d: aten._amp_foreach_non_finite_check_and_unscale_(
            [torch.ones(2, dtype=torch.int32, device=d)], torch.zeros((), device=d), torch.ones((), device=d)),
        lambda d: aten._amp_update_scale_(torch.ones((), device=d), torch.zeros((), dtype=torch.int64, device=d),
                                          torch.zeros((), device=d), 2.0, 0.5, 2),
        lambda d: aten._amp_update_scale_(torch.ones((), dtype=torch.float16, device=d),
                                          torch.zeros((), dtype=torch.int32, device=d), torch.zeros((), device=d), 2.0, 0.5, 2),
        lambda d: aten._amp_update_scale_(torch.ones(2, device=d), torch.zeros((), dtype=torch.int32, device=d),
                                          torch.zeros((), device=d), 2.0, 0.5, 2),
    ]
    for call in bad_calls:
        with pytest.raises(Exception) as cpu_err:
            call("cpu")
        with pytest.raises(type(cpu_err.value)) as err:
            call("neuron")
        if not isinstance(cpu_err.value, NotImplementedError):
            assert str(err.value).splitlines()[0] == str(cpu_err.value).splitlines()[0]


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
