"""The BLAS behind neuron's float32 products: PyTorch's own MKL when its CPU library exports
one, else OpenBLAS (``TORCH_NEURONX_BLAS``). Each provider's products (several tiles, both
transposes, batches, a linear layer's backward) against CPU PyTorch, natively."""
import ctypes
import os
import subprocess
import sys

import pytest
import torch

import torch_neuronx

PRODUCTS = r"""
import torch, torch_neuronx
torch.manual_seed(0)
torch_neuronx._C._clear_op_tracking()
worst = 0.0
def close(got, want):
    global worst
    got = got.cpu()
    worst = max(worst, ((got - want).abs() / (want.abs() + 1)).max().item())
a, b = torch.randn(300, 70), torch.randn(70, 200)
close(torch.mm(a.to("neuron"), b.to("neuron")), a @ b)
close(torch.mm(a.t().contiguous().to("neuron").t(), b.t().contiguous().to("neuron").t()), a @ b)
c = torch.randn(300, 200)
close(torch.addmm(c.to("neuron"), a.to("neuron"), b.to("neuron"), beta=0.5, alpha=1.5), torch.addmm(c, a, b, beta=0.5, alpha=1.5))
x, y = torch.randn(3, 130, 40), torch.randn(3, 40, 150)
close(torch.bmm(x.to("neuron"), y.to("neuron")), torch.bmm(x, y))
lin = torch.nn.Linear(128, 384)
inp = torch.randn(1024, 128, requires_grad=True)
lin(inp).square().sum().backward()
ln = torch.nn.Linear(128, 384).to("neuron")
ln.load_state_dict(lin.state_dict())
inp_n = inp.detach().to("neuron").requires_grad_()
ln(inp_n).square().sum().backward()
close(inp_n.grad, inp.grad)
close(ln.weight.grad, lin.weight.grad)
print(torch_neuronx.get_gemm_provider(), worst, torch_neuronx.get_fallback_ops())
"""


def run(env_extra: dict, code: str = PRODUCTS) -> subprocess.CompletedProcess:
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def torch_exports_mkl() -> bool:
    lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
    return all(hasattr(lib, name) for name in ("sgemm_", "MKL_Set_Num_Threads_Local"))


def test_default_provider_is_pytorchs_mkl_where_exported():
    assert torch_neuronx.get_gemm_provider() == ("mkl" if torch_exports_mkl() else "openblas")


@pytest.mark.parametrize("provider", ["mkl", "openblas"])
def test_products_equal_cpu(provider):
    if provider == "mkl" and not torch_exports_mkl():
        pytest.skip("this PyTorch build carries no MKL")
    r = run({"TORCH_NEURONX_BLAS": provider})
    assert r.returncode == 0, r.stderr
    name, worst, fallbacks = r.stdout.split(maxsplit=2)
    assert name == provider
    # float32 sums of up to 1024 products, relative to |value| + 1: 3.5e-5 observed (the
    # weight gradient, 1024 terms with cancellation) with either library
    assert float(worst) < 1e-4, worst
    assert fallbacks.strip() == "[]"


def test_cpu_products_keep_their_threads_after_neuron_products():
    """A neuron product may run on the caller's thread (NEURON_LAUNCH_BLOCKING=1 runs each op
    there); MKL's per-thread count it sets there for its tiles is given back, so CPU PyTorch's
    products on that thread keep their threads."""
    if not torch_exports_mkl():
        pytest.skip("this PyTorch build carries no MKL")
    code = r"""
import ctypes, os, torch, torch_neuronx
mkl = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cpu.so"))
before = mkl.MKL_Get_Max_Threads()
for n in (8, 300):
    a = torch.randn(n, n, device="neuron")
    (a @ a).sum().item()
torch.neuron.synchronize()
print(before, mkl.MKL_Get_Max_Threads())
"""
    r = run({"OMP_NUM_THREADS": "2", "TORCH_NEURONX_BLAS": "mkl", "NEURON_LAUNCH_BLOCKING": "1"}, code)
    assert r.returncode == 0, r.stderr
    before, after = map(int, r.stdout.split())
    assert before == 2 and after == before, r.stdout


@pytest.mark.parametrize("bmnk", [(2, 3, 3, 4), (1, 1, 1, 1), (2, 8, 8, 8), (3, 20, 30, 10)])
@pytest.mark.parametrize("beta", [1.0, 0.0])
def test_baddbmm_with_alpha_0_treats_nan_and_inf_as_cpu(bmnk, beta):
    """CPU's baddbmm multiplies small products (< 400 multiply-adds per matrix) by alpha even
    when it is 0, so NaN/inf in the batches reach the result; larger ones (BLAS) skip the
    product, as addmm/addbmm/addmv do at every size."""
    b, m, n, k = bmnk
    b1 = torch.full((b, m, k), float("nan"))
    b1[..., 1:] = float("inf")
    b2 = torch.ones(b, k, n)
    self = torch.arange(float(b * m * n)).view(b, m, n)
    torch_neuronx.clear_op_tracking()
    for inplace in (False, True):
        expected = self.clone().baddbmm_(b1, b2, alpha=0, beta=beta) if inplace else \
            torch.baddbmm(self, b1, b2, alpha=0, beta=beta)
        d = [t.to("neuron") for t in (self, b1, b2)]
        actual = d[0].baddbmm_(d[1], d[2], alpha=0, beta=beta) if inplace else \
            torch.baddbmm(*d, alpha=0, beta=beta)
        torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)
    assert "aten::baddbmm" in torch_neuronx.get_executed_ops()
    assert torch_neuronx.get_fallback_ops() == []
