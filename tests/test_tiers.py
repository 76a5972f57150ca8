"""CPU tiers and threads of the runtime: the tier in use is reported and capped by
TORCH_NEURONX_ISA; results through the ATen path are the same bits on every tier the host
supports (the C test runtime/tests/test_tiers.c covers every elementwise table row; the probe
here adds reductions, softmax and layer norm (forward and backward) and attention); the kernel
threads follow torch.set_num_threads and OMP_NUM_THREADS."""
import os
import subprocess
import sys

import pytest
import torch

import torch_neuronx

TIERS = ("baseline", "avx2", "avx512")

# Runs ops natively on the tier of the environment and prints a digest of the result bytes.
PROBE = r"""
import hashlib, torch, torch.nn.functional as F, torch_neuronx
g = torch.Generator().manual_seed(0)
x = (torch.randn(10007, generator=g) * 4).to("neuron")
pos = x.abs() + 1e-3
h = hashlib.sha256()
torch_neuronx.clear_op_tracking()
outs = [x.exp(), x.expm1(), pos.log(), pos.log1p(), x.tanh(), x.sigmoid(), F.silu(x), F.gelu(x),
        F.gelu(x, approximate="tanh"), F.softplus(x), F.mish(x), x.erf(), x ** 2, pos ** 0.5, pos ** -1,
        torch.ops.aten.gelu_backward(x, x), torch.softmax(x.view(-1, 1), 0), torch.log_softmax(x, 0),
        x.sum(), x.view(1, -1).expand(3, -1).sum(0), x[:9996].view(204, 49).mean(1), x[:10000].view(10, 1000).sum(1),
        x[:10000].view(10, 1000).sum(0), x[:9000].view(9, 1000).t().contiguous(), x[:9000].view(1000, 9).amax(0),
        torch.cat([x, torch.tensor([float("nan"), float("inf"), -3e38], device=x.device)]).bfloat16(),
        (x.bfloat16() + 1).float(), F.layer_norm(x[:10000].view(10, 1000), (1000,))]
q, k, v = (x[i * 2240:(i + 1) * 2240].view(2, 2, 20, 28).requires_grad_() for i in range(3))
xm, dy = x[:10000].view(10, 1000), x[7:10007].view(10, 1000)
_, mean, rstd = torch.ops.aten.native_layer_norm(xm, (1000,), None, None, 1e-5)
outs += [*torch.ops.aten.native_layer_norm_backward(dy, xm, (1000,), mean, rstd, dy[0], dy[1], [True, True, True]),
         torch.ops.aten._softmax_backward_data(dy, torch.softmax(xm, 1), 1, torch.float32),
         torch.ops.aten._log_softmax_backward_data(dy, torch.log_softmax(xm, 1), 1, torch.float32)]
for causal in (False, True):  # attention: the tier's small products and softmax passes
    o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
    outs += [o.detach(), *torch.autograd.grad(o, (q, k, v), x[:o.numel()].view_as(o))]
for o in outs:
    o = o.detach().cpu()
    h.update((o.view(torch.int16) if o.dtype == torch.bfloat16 else o).numpy().tobytes())
assert torch_neuronx.get_fallback_ops() == [], torch_neuronx.get_fallback_ops()
print(torch_neuronx.get_cpu_isa(), h.hexdigest())
"""


def run_probe(env_extra, code=PROBE):
    env = dict(os.environ, **env_extra)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    return r


def supported():
    return [t for t in TIERS if torch_neuronx._C._cpu_isa_supported(t)]


def test_tier_reported_and_valid():
    isa = torch_neuronx.get_cpu_isa()
    assert isa in TIERS
    assert torch_neuronx._C._cpu_isa_supported(isa)
    assert "baseline" in supported()


def test_results_identical_on_every_tier():
    digests = {}
    for tier in supported():
        r = run_probe({"TORCH_NEURONX_ISA": tier})
        assert r.returncode == 0, r.stderr
        used, digest = r.stdout.split()[-2:]
        assert used == tier  # the cap is what the runtime reports
        digests[tier] = digest
    assert len(set(digests.values())) == 1, digests


def test_cap_above_cpu_falls_to_best_and_bad_value_raises():
    r = run_probe({"TORCH_NEURONX_ISA": "avx512"}, "import torch_neuronx; print(torch_neuronx.get_cpu_isa())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == supported()[-1]
    r = run_probe({"TORCH_NEURONX_ISA": "sse9"},
                  "import torch\ntry:\n    torch.ones(1, device='neuron')\nexcept RuntimeError as e:\n    print('ERR', e)")
    assert r.returncode == 0, r.stderr
    assert "TORCH_NEURONX_ISA='sse9' is not one of avx512, avx2, baseline" in r.stdout


def test_threads_follow_torch():
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        assert torch_neuronx.get_num_threads() == 1
        x = torch.randn(1 << 20)
        assert torch.equal(x.to("neuron").mul(2).cpu(), x * 2)  # kernels still run
        a, b = torch.randn(700, 300).to("neuron"), torch.randn(300, 520).to("neuron")
        one = [(a @ b).cpu(), (a.t() @ a).cpu(), x.to("neuron").sum().cpu()]
        torch.set_num_threads(3)
        assert torch_neuronx.get_num_threads() == 3
        three = [(a @ b).cpu(), (a.t() @ a).cpu(), x.to("neuron").sum().cpu()]
        assert all(torch.equal(p, q) for p, q in zip(one, three))  # GEMM tiles and sums fixed by the shape
    finally:
        torch.set_num_threads(before)
    assert torch_neuronx.get_num_threads() == before


@pytest.mark.parametrize("var", ["OMP_NUM_THREADS", "TORCH_NEURONX_NUM_THREADS"])
def test_threads_from_environment(var):
    env = {"OMP_NUM_THREADS": "1", "TORCH_NEURONX_NUM_THREADS": ""} if var == "OMP_NUM_THREADS" else \
          {"TORCH_NEURONX_NUM_THREADS": "3"}
    r = run_probe(env, "import torch, torch_neuronx; torch.ones(1, device='neuron'); "
                  "print(torch_neuronx.get_num_threads())")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[-1] == ("1" if var == "OMP_NUM_THREADS" else "3")
