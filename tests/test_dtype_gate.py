"""The dtype gate (csrc/gate.h): a native kernel that does not implement an input CPU accepts
hands the call to the visible CPU fallback instead of raising; where CPU refuses an input,
neuron refuses it too; result dtypes follow ATen; random ops on complex tensors stay on the
neuron generator. The sweep over every registered kernel and dtype is tests/test_conformance.py;
these are the cases the issue named, kept as plain regression tests."""
import warnings

import pytest
import torch

import torch_neuronx
from conftest import run_py


def test_complex_matmul_takes_the_visible_fallback(neuron):
    a = torch.randn(5, 5, dtype=torch.complex64)
    got = (a.to(neuron) @ a.to(neuron)).cpu()
    torch.testing.assert_close(got, a @ a)
    assert "aten::mm" in torch_neuronx.get_fallback_ops()


def test_the_fallback_warns_once_and_strict_mode_names_the_refusal():
    proc = run_py("""
        import warnings, torch, torch_neuronx
        a = torch.randn(3, 3, dtype=torch.complex64, device="neuron")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            a @ a
            a @ a
        msgs = [str(x.message) for x in w if "CPU fallback" in str(x.message)]
        assert msgs == ["Operator 'aten::mm' executed via CPU fallback"], msgs
        assert torch_neuronx.get_fallback_ops() == ["aten::mm", "aten::mm"]
    """)
    assert proc.returncode == 0
    proc = run_py("""
        import torch, torch_neuronx
        a = torch.randn(3, 3, dtype=torch.complex64, device="neuron")
        try:
            a @ a
        except NotImplementedError as e:
            print(e)
    """, env={"TORCH_NEURONX_STRICT": "1"})
    assert "Operator 'aten::mm' has no native neuron kernel for these inputs" in proc.stdout, proc.stdout
    assert "ComplexFloat" in proc.stdout and "TORCH_NEURONX_STRICT=1" in proc.stdout, proc.stdout


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128])
def test_complex_normal_is_native_and_seeded(neuron, dtype):
    torch.manual_seed(3)
    a = torch.randn(200_000, dtype=dtype, device=neuron)
    torch.manual_seed(3)
    b = torch.randn(200_000, dtype=dtype, device=neuron)
    assert torch_neuronx.get_fallback_ops() == []
    assert "aten::normal_" in torch_neuronx.get_executed_ops()
    assert torch.equal(a.cpu(), b.cpu())
    # As ATen: real and imaginary parts independent N(0, 1/2), so E|z|^2 = 1. With 2e5 draws the
    # standard error of each variance is about 0.0016: 0.01 is over six of them.
    parts = torch.view_as_real(a.cpu()).double()
    assert abs(parts[:, 0].var().item() - 0.5) < 0.01 and abs(parts[:, 1].var().item() - 0.5) < 0.01
    assert abs(parts.mean().item()) < 0.01
    assert abs(torch.corrcoef(parts.T)[0, 1].item()) < 0.01


def test_complex_normal_with_mean_and_std(neuron):
    torch.manual_seed(0)
    z = torch.empty(100_000, dtype=torch.complex64, device=neuron).normal_(2.0, 3.0).cpu()
    parts = torch.view_as_real(z).double()
    # mean 2 on each part, variance 9 / 2 on each part (std 3 / sqrt 2); standard errors ~0.007 and ~0.02
    assert abs(parts.mean(0) - 2.0).max().item() < 0.05
    assert abs(parts.var(0) - 4.5).max().item() < 0.1
    assert torch_neuronx.get_fallback_ops() == []


def test_complex_uniform_is_native(neuron):
    torch.manual_seed(0)
    z = torch.empty(100_000, dtype=torch.complex64, device=neuron).uniform_(-1.0, 3.0).cpu()
    parts = torch.view_as_real(z)
    assert parts.min().item() >= -1.0 and parts.max().item() < 3.0
    assert abs(parts.double().mean(0) - 1.0).max().item() < 0.02  # standard error ~0.004
    assert torch_neuronx.get_fallback_ops() == []


@pytest.mark.parametrize("op", ["cumsum_", "cumprod_"])
def test_inplace_scan_of_bool_raises_like_cpu(neuron, op):
    cpu = torch.ones(4, dtype=torch.bool)
    with pytest.raises(NotImplementedError) as want:
        getattr(cpu, op)(0)
    dev = torch.ones(4, dtype=torch.bool, device=neuron)
    with pytest.raises(NotImplementedError) as got:
        getattr(dev, op)(0)
    assert "not implemented for 'Bool'" in str(got.value) and "not implemented for 'Bool'" in str(want.value)
    assert torch.equal(dev.cpu(), cpu)  # untouched


@pytest.mark.parametrize("weights_dtype", [None, torch.float32, torch.float64, torch.float16, torch.bfloat16,
                                           torch.int32, torch.uint8])
def test_bincount_result_dtype_follows_aten(neuron, weights_dtype):
    x = torch.tensor([0, 3, 1, 1, 3, 3])
    w = None if weights_dtype is None else torch.arange(6).to(weights_dtype)
    want = torch.bincount(x, weights=w, minlength=5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # float64 results: the device's one float64 warning
        got = torch.bincount(x.to(neuron), weights=None if w is None else w.to(neuron), minlength=5)
    assert got.dtype == want.dtype
    torch.testing.assert_close(got.cpu(), want)
    assert torch_neuronx.get_fallback_ops() == []


def test_complex_product_of_a_real_input_takes_the_visible_fallback(neuron):
    """prod with a complex dtype= or out= (a real input): CPU's result through the fallback,
    refused before the native path launched anything."""
    t = torch.tensor([1, 2, 3])
    out = torch.empty(0, dtype=torch.complex64, device=neuron)
    torch.prod(t.to(neuron), 0, out=out)
    for got, want in ((torch.prod(t.to(neuron), dtype=torch.complex64), torch.prod(t, dtype=torch.complex64)),
                      (torch.prod(t.to(neuron), 0, dtype=torch.complex64), torch.prod(t, 0, dtype=torch.complex64)),
                      (out, torch.prod(t, 0, dtype=torch.complex64))):
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    assert set(torch_neuronx.get_fallback_ops()) == {"aten::prod"}
