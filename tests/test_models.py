"""Whole-model checks: training steps of an MLP and a small GPT run natively on neuron (no
CPU fallback) and match CPU PyTorch in losses and gradients."""
import copy
import os
import sys

import pytest
import torch

import torch_neuronx
from conftest import run_py

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))
from tiny_gpt import TinyGPT  # noqa: E402


def train_steps(model, make_batch, steps, device, opt_cls=torch.optim.AdamW):
    model = copy.deepcopy(model).to(device)
    opt = opt_cls(model.parameters(), lr=1e-2)
    losses, grads = [], None
    for i in range(steps):
        x, y = make_batch(i)
        loss = model(x.to(device), y.to(device)) if isinstance(model, TinyGPT) else \
            torch.nn.functional.cross_entropy(model(x.to(device)), y.to(device))
        opt.zero_grad()
        loss.backward()
        if grads is None:
            grads = [p.grad.detach().cpu().clone() for p in model.parameters()]
        opt.step()
        losses.append(loss.item())
    return losses, grads, [p.detach().cpu() for p in model.parameters()]


def check_against_cpu(model, make_batch, steps=3, rtol=1e-4, atol=1e-5, opt_cls=torch.optim.AdamW):
    cpu = train_steps(model, make_batch, steps, "cpu", opt_cls)
    torch_neuronx.clear_op_tracking()
    dev = train_steps(model, make_batch, steps, "neuron", opt_cls)
    assert torch_neuronx.get_fallback_ops() == []
    torch.testing.assert_close(torch.tensor(dev[0]), torch.tensor(cpu[0]), rtol=rtol, atol=atol)
    for g_dev, g_cpu in zip(dev[1], cpu[1]):
        torch.testing.assert_close(g_dev, g_cpu, rtol=1e-3, atol=1e-5)
    # AdamW's normalised step (lr * m / sqrt(v)) magnifies last-bit gradient differences where
    # gradients are near zero, up to a fraction of lr = 1e-2: parameters get that bound.
    for p_dev, p_cpu in zip(dev[2], cpu[2]):
        torch.testing.assert_close(p_dev, p_cpu, rtol=1e-3, atol=2e-3)
    return dev[0]


def test_mlp_training_is_native_and_matches_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.GELU(), torch.nn.Linear(64, 64), torch.nn.ReLU(),
                                torch.nn.LayerNorm(64), torch.nn.Linear(64, 5))
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(32, 20, generator=g), torch.randint(0, 5, (32,), generator=g)) for _ in range(3)]
    losses = check_against_cpu(model, lambda i: data[0])  # one batch, so the loss must fall
    assert losses[-1] < losses[0]


def test_gpt_training_is_native_and_matches_cpu():
    torch.manual_seed(0)
    model = TinyGPT(vocab=50, d=32, layers=2, heads=4, block=16)
    g = torch.Generator().manual_seed(2)
    tokens = [torch.randint(0, 50, (4, 17), generator=g) for _ in range(3)]
    losses = check_against_cpu(model, lambda i: (tokens[i][:, :-1], tokens[i][:, 1:]), rtol=1e-4, atol=1e-4)
    assert all(torch.isfinite(torch.tensor(losses)))


def test_cnn_training_is_native_and_matches_cpu():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(8, 16, 3, stride=2, groups=2), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d((1, 1)), torch.nn.Flatten(), torch.nn.Linear(16, 10))
    g = torch.Generator().manual_seed(4)
    batch = (torch.randn(4, 3, 16, 16, generator=g), torch.randint(0, 10, (4,), generator=g))
    # SGD: the conv biases before batch norm get ~0 gradients, whose noise Adam would amplify.
    losses = check_against_cpu(model, lambda i: batch, opt_cls=torch.optim.SGD)
    assert losses[-1] < losses[0]


def test_cross_entropy_options_match_cpu():
    torch.manual_seed(3)
    logits = torch.randn(10, 7, requires_grad=True)
    target = torch.randint(0, 7, (10,))
    target[2] = 3
    weight = torch.rand(7)
    for kwargs in ({}, {"ignore_index": 3}, {"reduction": "sum"}, {"reduction": "none"}, {"weight": weight}):
        x = logits.detach().to("neuron").requires_grad_()
        kw = {k: (v.to("neuron") if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        out = torch.nn.functional.cross_entropy(x, target.to("neuron"), **kw)
        ref = torch.nn.functional.cross_entropy(logits, target, **kwargs)
        torch.testing.assert_close(out.cpu(), ref.detach(), rtol=1e-5, atol=1e-6)
        out.sum().backward()
        (g,) = torch.autograd.grad(ref.sum(), logits)
        torch.testing.assert_close(x.grad.cpu(), g, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["index_select", "embedding", "nll_loss"])
def test_index_out_of_range_raises_naming_the_op(op):
    w = torch.randn(5, 3, device="neuron")
    idx = torch.tensor([1, 7], device="neuron")
    with pytest.raises(IndexError, match=f"aten::{op if op != 'embedding' else 'index_select'}.*7"):
        if op == "index_select":
            torch.index_select(w, 0, idx).cpu()
        elif op == "embedding":
            torch.nn.functional.embedding(idx, w).cpu()
        else:
            torch.nn.functional.nll_loss(w.log_softmax(1)[:2], idx).cpu()
    assert torch.index_select(w, 0, torch.tensor([0, 4], device="neuron")).shape == (2, 3)  # usable after


def test_op_compatibility_table_is_current():
    import subprocess
    root = os.path.join(os.path.dirname(__file__), "..")
    proc = subprocess.run([sys.executable, os.path.join(root, "tools", "gen_op_compatibility.py"), "--check"],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("norm_first", [False, True])
def test_transformer_encoder_layer_eval_fast_path_is_native(norm_first):
    torch.manual_seed(5)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, batch_first=True, norm_first=norm_first).eval()
    x = torch.randn(2, 5, 32)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    with torch.no_grad():
        expected = layer(x, src_key_padding_mask=pad)
        dev = layer.to("neuron")
        torch_neuronx.clear_op_tracking()
        actual = dev(x.to("neuron"), src_key_padding_mask=pad.to("neuron"))
        assert torch_neuronx.get_fallback_ops() == []
        assert "aten::_transformer_encoder_layer_fwd" in torch_neuronx.get_executed_ops()
    torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-5)


def test_autocast_policies():
    m = torch.nn.Linear(4, 4).to("neuron")
    x = torch.randn(2, 4, device="neuron")
    with torch.autocast("neuron", dtype=torch.bfloat16):
        y = m(x)
        s = torch.softmax(y, -1)
        z = x + 1
    assert y.dtype == torch.bfloat16 and s.dtype == torch.float32 and z.dtype == torch.float32
    with torch.autocast("neuron", dtype=torch.float16):
        assert (x @ x.t()).dtype == torch.float16


def test_grad_scaler_skips_inf_steps_and_backs_off():
    torch.manual_seed(6)
    cpu_model = torch.nn.Linear(4, 3)
    results = {}
    for device in ("cpu", "neuron"):
        m = copy.deepcopy(cpu_model).to(device)
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 8, growth_interval=1)
        x = torch.randn(5, 4, generator=torch.Generator().manual_seed(7)).to(device)
        torch_neuronx.clear_op_tracking()
        scaler.scale(m(x).sum()).backward()
        m.weight.grad[0, 0] = float("inf")
        before = m.weight.detach().cpu().clone()
        scaler.step(opt)
        scaler.update()
        skipped = torch.equal(before, m.weight.detach().cpu())
        scale_after_inf = scaler.get_scale()
        opt.zero_grad()
        scaler.scale(m(x).sum()).backward()
        scaler.step(opt)
        scaler.update()
        if device == "neuron":
            assert torch_neuronx.get_fallback_ops() == []
        results[device] = (skipped, scale_after_inf, scaler.get_scale(), m.weight.detach().cpu())
    assert results["neuron"][:3] == results["cpu"][:3] == (True, 128.0, 256.0)
    torch.testing.assert_close(results["neuron"][3], results["cpu"][3])


def test_plan_cache_reuses_plans_and_is_cleared_by_empty_cache():
    a = torch.randn(33, 17, device="neuron")
    b = torch.randn(33, 17, device="neuron")
    torch.neuron.empty_cache()
    assert torch_neuronx.get_plan_cache_stats()["entries"] == 0
    (a * b).cpu()
    first = torch_neuronx.get_plan_cache_stats()
    for scale in (1.0, 2.0, 3.0):  # scalar values are not part of the key
        torch.add(a, b, alpha=scale).cpu()
    after = torch_neuronx.get_plan_cache_stats()
    assert after["misses"] == first["misses"] + 1 and after["hits"] >= first["hits"] + 2
    torch.neuron.empty_cache()
    assert torch_neuronx.get_plan_cache_stats()["entries"] == 0


def test_plan_cache_is_bounded():
    out = run_py("""
        import torch, torch_neuronx
        for n in range(1, 40):
            (torch.ones(n, device="neuron") + 1).cpu()
        s = torch_neuronx.get_plan_cache_stats()
        print(s["entries"], s["capacity"], s["evictions"] > 0)
    """, env={"TORCH_NEURONX_PLAN_CACHE_SIZE": "8"}).stdout.split()
    assert out == ["8", "8", "True"]


@pytest.mark.parametrize("call", [
    lambda d: torch.mm(torch.ones(2, 3, device=d), torch.ones(3, 2)),
    lambda d: torch.nn.functional.cross_entropy(torch.randn(4, 5, device=d), torch.tensor([0, 1, 2, 3])),
    lambda d: torch.nn.functional.layer_norm(torch.randn(2, 4, device=d), (4,), torch.ones(4)),
    lambda d: torch.nn.functional.conv2d(torch.randn(1, 2, 5, 5, device=d), torch.randn(3, 2, 3, 3)),
    lambda d: torch.cat([torch.ones(2, device=d), torch.ones(2)]),
], ids=["mm", "cross_entropy", "layer_norm", "conv2d", "cat"])
def test_native_kernels_refuse_host_tensors(call):
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        call("neuron")
    assert torch.ones(3, device="neuron").sum().item() == 3.0
