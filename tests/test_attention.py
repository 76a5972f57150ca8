"""scaled_dot_product_attention on neuron: the fused kernel (the PrivateUse1 "overrideable"
backend) against CPU PyTorch, forward and backward, and the math path where it does not apply."""
import pytest
import torch

import torch_neuronx

F = torch.nn.functional
B, H, L, S, E, EV = 2, 3, 7, 9, 8, 8


def _run(device, q, k, v, mask_grad=True, direct=False, **kw):
    """Output and gradients of SDPA (a float attn_mask requires grad when mask_grad); with
    `direct`, neuron calls the fused op itself (which PyTorch's SDPA picks for fewer inputs than
    the kernel serves, e.g. only one head dim for query and value, as CPU's choice)."""
    q, k, v = [t.detach().to(device).requires_grad_() for t in (q, k, v)]
    kw = {n: (a.detach().to(device) if isinstance(a, torch.Tensor) else a) for n, a in kw.items()}
    if isinstance(kw.get("attn_mask"), torch.Tensor) and kw["attn_mask"].is_floating_point():
        kw["attn_mask"].requires_grad_(mask_grad)
    if device == "cpu":  # PyTorch's math path: the reference that also differentiates a float mask
        from torch.nn.attention import SDPBackend, sdpa_kernel
        with sdpa_kernel(SDPBackend.MATH):
            out = F.scaled_dot_product_attention(q, k, v, **kw)
    elif direct:
        out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(
            q, k, v, kw.get("attn_mask"), is_causal=kw.get("is_causal", False), scale=kw.get("scale"))[0]
    else:
        out = F.scaled_dot_product_attention(q, k, v, **kw)
    weights = torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape).sin().to(device)
    (out * weights).sum().backward()
    grads = [q.grad, k.grad, v.grad]
    if isinstance(kw.get("attn_mask"), torch.Tensor) and kw["attn_mask"].requires_grad:
        grads.append(kw["attn_mask"].grad)
    return [t.detach().cpu() for t in [out, *grads]]


CASES = {
    "plain": {},
    "causal": dict(is_causal=True),
    "scale": dict(scale=0.3),
    "bool mask": dict(attn_mask=torch.rand(L, S, generator=torch.Generator().manual_seed(1)) > 0.3),
    "float mask with gradient": dict(attn_mask=torch.randn(B, 1, L, S, generator=torch.Generator().manual_seed(2))),
    "fully masked row": dict(attn_mask=torch.cat([torch.zeros(1, S, dtype=torch.bool), torch.ones(L - 1, S, dtype=torch.bool)])),
    "row masked by a huge finite bias with gradient": dict(
        attn_mask=torch.zeros(L, S).index_fill_(0, torch.tensor([1, 4]), -1e30)),
}
# An attn_mask that requires grad (a learned bias) takes ATen's math path, as CPU's backend
# choice does (_run makes every float mask require grad).
MATH_CASES = {"float mask with gradient", "row masked by a huge finite bias with gradient"}


@pytest.mark.parametrize("name", list(CASES))
def test_fused_attention_matches_cpu(name):
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(B, H, L, E, generator=g), torch.randn(B, H, S, E, generator=g), torch.randn(B, H, S, EV, generator=g)
    torch_neuronx.clear_op_tracking()
    expected, actual = _run("cpu", q, k, v, **CASES[name]), _run("neuron", q, k, v, **CASES[name])
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=2e-6, equal_nan=True)
    ops = torch_neuronx.get_executed_op_counts()
    fused = name not in MATH_CASES
    assert ("aten::_scaled_dot_product_fused_attention_overrideable" in ops) == fused
    assert ("aten::_scaled_dot_product_fused_attention_overrideable_backward" in ops) == fused
    assert ("aten::bmm" in ops) != fused   # the math path's products
    assert torch_neuronx.get_fallback_ops() == []


VMAP_CASES = {n: CASES[n] for n in ("plain", "causal", "scale", "bool mask", "fully masked row")}


def test_fused_backward_without_an_output_gradient_gives_none(native):
    """A graph that sends no gradient into the attention output (an autograd.Function dropping
    it; gradcheck's undefined output gradients) leaves q, k, v without gradients, as on CPU
    (raised "tensor does not have a device")."""
    class DropFirst(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            return a + b

        @staticmethod
        def backward(ctx, g):
            return None, g

    for dev in ("cpu", native):
        q, k, v, w = (torch.randn(1, 2, 3, 4, device=dev, requires_grad=True) for _ in range(4))
        DropFirst.apply(F.scaled_dot_product_attention(q, k, v), w).sum().backward()
        assert q.grad is None and k.grad is None and v.grad is None and torch.equal(w.grad.cpu(), torch.ones(1, 2, 3, 4))

@pytest.mark.parametrize("name", list(VMAP_CASES))
def test_fused_attention_under_vmap_matches_cpu(native, name):
    """torch.func transforms that batch the fused op (vmap, vmap of grad: per-sample gradients,
    jacrev) give CPU's values: the FuncTorchBatched kernels compose it from batchable ops."""
    from torch.func import grad, jacrev, vmap
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(4, B, H, L, E, generator=g), torch.randn(4, B, H, S, E, generator=g),
               torch.randn(4, B, H, S, EV, generator=g))
    kw = VMAP_CASES[name]
    weights = torch.arange(B * H * L * EV).reshape(B, H, L, EV).sin()

    def run(device):
        qd, kd, vd, wd = (t.to(device) for t in (q, k, v, weights))
        kwd = {n: a.to(device) if isinstance(a, torch.Tensor) else a for n, a in kw.items()}
        sdpa = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, **kwd)  # noqa: E731
        loss = lambda q, k, v: (sdpa(q, k, v) * wd).sum()  # noqa: E731
        out = vmap(sdpa)(qd, kd, vd)
        grads = vmap(grad(loss, argnums=(0, 1, 2)))(qd, kd, vd)
        jac = jacrev(lambda q: sdpa(q, kd[0], vd[0])[0, 0, 0])(qd[0])
        return [t.cpu() for t in (out, *grads, jac)]

    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        expected = run("cpu")
    torch_neuronx.clear_op_tracking()
    actual = run(native)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=2e-6, equal_nan=True)
    ops = torch_neuronx.get_executed_op_counts()
    assert "aten::bmm" in ops and "aten::logsumexp" in ops  # the composition ran on the device


def test_fused_op_called_directly_differentiates_its_float_mask(native):
    """F.scaled_dot_product_attention sends a mask that requires grad to the math path; the
    fused op itself still returns the mask's gradient (grad_input_mask[3]) as the math path does."""
    g = torch.Generator().manual_seed(5)
    q, k, v = torch.randn(B, H, L, E, generator=g), torch.randn(B, H, S, E, generator=g), torch.randn(B, H, S, EV, generator=g)
    mask = torch.randn(B, 1, L, S, generator=g)
    expected = _run("cpu", q, k, v, attn_mask=mask)
    qn, kn, vn, mn = [t.to(native).requires_grad_() for t in (q, k, v, mask)]
    out = torch.ops.aten._scaled_dot_product_fused_attention_overrideable(qn, kn, vn, mn)[0]
    weights = torch.arange(out.numel(), dtype=out.dtype).reshape(out.shape).sin().to(native)
    (out * weights).sum().backward()
    for a, e in zip([out, qn.grad, kn.grad, vn.grad, mn.grad], expected):
        torch.testing.assert_close(a.detach().cpu(), e, rtol=1e-5, atol=2e-6)
    assert "aten::_scaled_dot_product_fused_attention_overrideable_backward" in torch_neuronx.get_executed_op_counts()


def test_dropout_takes_the_native_math_path():
    q = torch.randn(1, 4, 5, 8, device="neuron")
    torch_neuronx.clear_op_tracking()
    F.scaled_dot_product_attention(q, q, q, dropout_p=0.5).cpu()
    ops = torch_neuronx.get_executed_op_counts()
    assert "aten::_scaled_dot_product_fused_attention_overrideable" not in ops
    assert torch_neuronx.get_fallback_ops() == []


GQA_MASKS = {
    "none": {},
    "causal": dict(is_causal=True),
    "bool mask": dict(attn_mask=torch.rand(L, S, generator=torch.Generator().manual_seed(4)) > 0.3),
    # a padding row masked with finfo.min (not requiring grad): CPU's flash kernel, which CPU runs
    # for grouped queries, rebuilds that row's probabilities from its logsumexp, as ours does
    "finfo.min row": dict(attn_mask=torch.zeros(1, 1, L, S).index_fill_(2, torch.tensor([0, 3]),
                                                                        torch.finfo(torch.float32).min)),
}


@pytest.mark.parametrize("name", list(GQA_MASKS))
def test_grouped_query_attention_runs_the_fused_kernel_as_cpu(native, name):
    """enable_gqa=True with fewer key/value heads: the fused kernel (query head h reads key/value
    head h / G; dk and dv summed over each group), CPU's values and gradients (CPU's default
    backend choice), and the key/value head count checked."""
    g = torch.Generator().manual_seed(6)
    q, k, v = torch.randn(B, 6, L, E, generator=g), torch.randn(B, 2, S, E, generator=g), torch.randn(B, 2, S, EV, generator=g)
    weights = torch.arange(B * 6 * L * EV).reshape(B, 6, L, EV).sin()

    def run(device):
        qd, kd, vd = (t.detach().to(device).requires_grad_() for t in (q, k, v))
        kw = {n: a.to(device) if isinstance(a, torch.Tensor) else a for n, a in GQA_MASKS[name].items()}
        out = F.scaled_dot_product_attention(qd, kd, vd, enable_gqa=True, **kw)
        (out * weights.to(device)).sum().backward()
        return [t.detach().cpu() for t in (out, qd.grad, kd.grad, vd.grad)]

    expected = run("cpu")
    torch_neuronx.clear_op_tracking()
    for a, e in zip(run(native), expected):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=1e-5)
    ops = torch_neuronx.get_executed_op_counts()
    assert "aten::_scaled_dot_product_fused_attention_overrideable" in ops
    assert "aten::_scaled_dot_product_fused_attention_overrideable_backward" in ops
    with pytest.raises(ValueError, match="must divide the query's"):
        torch.ops.aten._scaled_dot_product_fused_attention_overrideable(q.to(native), k[:, :1].expand(B, 4, S, E).to(native),
                                                                        v.to(native))


def test_sdpa_dropout_drops_at_the_rate_scales_and_is_seeded():
    # Equal scores give each of the S keys probability 1/S; with one-hot values the output holds
    # each kept probability scaled by 1 / (1 - p): every entry is 0 or 1 / (S (1 - p)).
    B, H, L, S, p = 4, 4, 64, 32, 0.25
    q = torch.zeros(B, H, L, 8, device="neuron")
    k = torch.zeros(B, H, S, 8, device="neuron")
    v = torch.eye(S, device="neuron").expand(B, H, S, S)
    torch.manual_seed(11)
    torch_neuronx.clear_op_tracking()
    out = F.scaled_dot_product_attention(q, k, v, dropout_p=p).cpu()
    assert torch_neuronx.get_fallback_ops() == []
    kept = out != 0
    torch.testing.assert_close(out[kept], torch.full_like(out[kept], 1 / (S * (1 - p))))
    # 131072 Bernoulli(0.75) draws: standard error 0.0012, so 0.006 is five of them.
    assert abs(kept.float().mean().item() - (1 - p)) < 0.006
    torch.manual_seed(11)
    assert torch.equal(F.scaled_dot_product_attention(q, k, v, dropout_p=p).cpu(), out)
    torch.manual_seed(12)
    assert not torch.equal(F.scaled_dot_product_attention(q, k, v, dropout_p=p).cpu(), out)


def test_sdpa_kernel_context_selects_the_math_path():
    from torch.nn.attention import SDPBackend, sdpa_kernel
    q = torch.randn(1, 2, 4, 8, device="neuron")
    torch_neuronx.clear_op_tracking()
    with sdpa_kernel(SDPBackend.MATH):
        F.scaled_dot_product_attention(q, q, q).cpu()
    assert "aten::_scaled_dot_product_fused_attention_overrideable" not in torch_neuronx.get_executed_op_counts()


def test_backend_choice_is_cpus():
    """SDPA runs the fused kernel exactly where CPU runs its fused (flash) kernel and the math
    path where CPU runs math, so each input gets CPU's values, also in rows masked with finfo.min
    (where the fused kernels' gradients differ from math's)."""
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 6, 8), torch.randn(2, 4, 6, 8)
    cases = [((q, k, v, None), {}), ((q, k, torch.randn(2, 4, 6, 5), None), {}),
             ((q, k, v, torch.randn(5, 6)), {}), ((q, k, v, torch.randn(4, 5, 6)), {}),
             ((q, k, v, torch.randn(2, 1, 5, 6)), {}), ((q, k, v, torch.randn(1, 4, 1, 6)), {}),
             ((q, k, v, torch.randn(2, 1, 5, 6).requires_grad_()), {}),
             ((q, k[:, :2], v[:, :2], None), dict(enable_gqa=True)), ((q, k[:, :3], v[:, :3], None), dict(enable_gqa=True)),
             ((q.transpose(-1, -2).contiguous().transpose(-1, -2), k, v, None), {}),
             ((q[:, :, :0], k, v, None), {}), ((q, k, v, None), dict(dropout_p=0.5))]
    for args, kw in cases:
        on_cpu = torch._fused_sdp_choice(*args, **kw)
        on_neuron = torch._fused_sdp_choice(*(a.detach().to("neuron").requires_grad_(a.requires_grad)
                                              if a is not None else None for a in args), **kw)
        assert (on_cpu == 0) == (on_neuron == 0), ([a.shape for a in args if a is not None], kw, on_cpu, on_neuron)


@pytest.mark.parametrize("L,S,E,EV,causal", [(40, 20, 17, 33, True), (5, 33, 1, 16, False), (33, 70, 32, 3, True),
                                             (130, 140, 8, 8, True), (16, 16, 16, 16, False)])
def test_fused_attention_shapes(L, S, E, EV, causal):
    # Sizes around the kernel's 16-column blocks and 4-row tiles, L < S and L > S, causal or not,
    # with an additive float mask broadcast over heads (not a learned one: the fused kernel runs).
    g = torch.Generator().manual_seed(L * S)
    q, k, v = torch.randn(2, 3, L, E, generator=g), torch.randn(2, 3, S, E, generator=g), torch.randn(2, 3, S, EV, generator=g)
    kw = dict(is_causal=True) if causal else dict(attn_mask=torch.randn(2, 1, L, S, generator=g), mask_grad=False)
    kw["direct"] = E != EV
    torch_neuronx.clear_op_tracking()
    expected, actual = _run("cpu", q, k, v, **kw), _run("neuron", q, k, v, **kw)
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=1e-5, atol=5e-6, equal_nan=True)
    assert "aten::_scaled_dot_product_fused_attention_overrideable_backward" in torch_neuronx.get_executed_op_counts()
    assert torch_neuronx.get_fallback_ops() == []
