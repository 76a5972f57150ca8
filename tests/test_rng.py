"""Per-device Philox generator: seeding, determinism, state round-trips, independence from
strides and thread count, distributions."""
import math

import pytest
import torch

from conftest import run_py


def test_manual_seed_repeats(neuron):
    torch.manual_seed(123)
    a = torch.rand(1000, device=neuron)
    b = torch.randn(7, 9, device=neuron)
    torch.manual_seed(123)
    assert torch.equal(a.cpu(), torch.rand(1000, device=neuron).cpu())
    assert torch.equal(b.cpu(), torch.randn(7, 9, device=neuron).cpu())
    torch.manual_seed(124)
    assert not torch.equal(a.cpu(), torch.rand(1000, device=neuron).cpu())


def test_same_numbers_run_after_run():
    code = "import torch; torch.manual_seed(7); print(torch.randn(5, device='neuron').cpu().tolist())"
    assert run_py(code).stdout == run_py(code).stdout


def test_independent_of_thread_count():
    code = "import torch; torch.manual_seed(7); x = torch.rand(300000, device='neuron'); print(float(x.sum()), float(x[123456]))"
    one = run_py(code, env={"TORCH_NEURONX_NUM_THREADS": "1"}).stdout
    four = run_py(code, env={"TORCH_NEURONX_NUM_THREADS": "4"}).stdout
    assert one == four


def test_rng_state_layout_and_round_trip(neuron):
    torch.manual_seed(99)
    state = torch.neuron.get_rng_state()
    assert state.dtype == torch.uint8 and state.numel() == 16
    assert state[:8].view(torch.int64).item() == 99 and state[8:].view(torch.int64).item() == 0
    x = torch.rand(10, device=neuron)
    after = torch.neuron.get_rng_state()
    assert after[8:].view(torch.int64).item() == 12  # offset advances by numel rounded up to 4
    torch.neuron.set_rng_state(state)
    assert torch.equal(torch.rand(10, device=neuron).cpu(), x.cpu())
    assert torch.neuron.initial_seed() == 99
    with pytest.raises(RuntimeError, match="16 bytes"):
        torch.neuron.set_rng_state(torch.zeros(3, dtype=torch.uint8))


def test_generator_object(neuron):
    g = torch.Generator(device="neuron")
    assert g.device.type == "neuron"
    g.manual_seed(5)
    s = g.get_state()
    a = torch.rand(6, device=neuron, generator=g)
    g.set_state(s)
    assert torch.equal(torch.rand(6, device=neuron, generator=g).cpu(), a.cpu())
    assert g.initial_seed() == 5
    torch.manual_seed(0)
    before = torch.neuron.get_rng_state()
    torch.rand(6, device=neuron, generator=g)
    assert torch.equal(torch.neuron.get_rng_state(), before)  # default generator untouched


def test_fork_rng(neuron):
    torch.manual_seed(3)
    with torch.random.fork_rng(devices=[0], device_type="neuron"):
        torch.rand(4, device=neuron)
    assert torch.neuron.get_rng_state()[8:].view(torch.int64).item() == 0


def test_views_get_values_by_logical_index(neuron):
    torch.manual_seed(11)
    contiguous = torch.empty(20, 30, device=neuron).normal_()
    torch.manual_seed(11)
    base = torch.empty(30, 20, device=neuron)
    transposed = base.t()
    transposed.normal_()
    assert torch.equal(transposed.cpu(), contiguous.cpu())
    # a strided view is filled in place, its gaps untouched
    z = torch.zeros(10, 10, device=neuron)
    z[:, ::2].uniform_(1.0, 2.0)
    zc = z.cpu()
    assert (zc[:, 1::2] == 0).all() and ((zc[:, ::2] >= 1) & (zc[:, ::2] < 2)).all()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_distributions(dtype, neuron):
    torch.manual_seed(0)
    n = 200000
    u = torch.empty(n, dtype=dtype, device=neuron).uniform_(-1.0, 3.0).float().cpu()
    assert u.min() >= -1.0 and u.max() < 3.0 and abs(u.mean().item() - 1.0) < 0.02
    x = torch.randn(n, dtype=dtype, device=neuron).float().cpu()
    assert abs(x.mean().item()) < 0.02 and abs(x.std().item() - 1.0) < 0.02
    b = torch.empty(n, dtype=dtype, device=neuron).bernoulli_(0.25).float().cpu()
    assert set(b.unique().tolist()) <= {0.0, 1.0} and abs(b.mean().item() - 0.25) < 0.01
    e = torch.empty(n, dtype=dtype, device=neuron).exponential_(2.0).float().cpu()
    assert e.min() >= 0 and abs(e.mean().item() - 0.5) < 0.02


def _ks_statistic(sample, cdf):
    """Kolmogorov-Smirnov distance between a sample's empirical CDF and `cdf` (float64)."""
    x = sample.double().sort().values
    n = x.numel()
    f = cdf(x)
    i = torch.arange(1, n + 1, dtype=torch.float64)
    return torch.maximum(i / n - f, f - (i - 1) / n).max().item()


@pytest.mark.parametrize("dist", ["uniform", "normal", "log_normal", "exponential"])
def test_distributions_fit_their_cdf(dist, native):
    """The whole shape of each continuous distribution, not only its moments: the
    Kolmogorov-Smirnov distance of 200,000 float32 draws from the exact CDF stays below the
    0.1 % critical value 1.95 / sqrt(n) (the asymptotic Kolmogorov distribution)."""
    torch.manual_seed(1)
    n = 200000
    t = torch.empty(n, device=native)
    normal_cdf = lambda x: 0.5 * (1 + torch.erf(x / math.sqrt(2)))
    sample, cdf = {
        "uniform": (lambda: t.uniform_(-1.0, 3.0), lambda x: ((x + 1) / 4).clamp(0, 1)),
        "normal": (lambda: t.normal_(0.5, 2.0), lambda x: normal_cdf((x - 0.5) / 2.0)),
        "log_normal": (lambda: t.log_normal_(0.25, 0.5), lambda x: normal_cdf((x.log() - 0.25) / 0.5)),
        "exponential": (lambda: t.exponential_(2.0), lambda x: 1 - torch.exp(-2.0 * x)),
    }[dist]
    assert _ks_statistic(sample().cpu(), cdf) < 1.95 / math.sqrt(n)


def test_random_integers(neuron):
    torch.manual_seed(1)
    r = torch.randint(3, 10, (10000,), device=neuron).cpu()
    assert r.dtype == torch.int64 and r.min() == 3 and r.max() == 9
    k = torch.empty(5000, dtype=torch.int8, device=neuron).random_().cpu()
    assert k.min() >= 0 and k.max() <= 127 and k.max() > 100
    f = torch.empty(5000, device=neuron).random_(5).cpu()
    assert set(f.unique().tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0}
    bools = torch.empty(1000, dtype=torch.bool, device=neuron).random_().cpu()
    assert set(bools.unique().tolist()) == {False, True}
    with pytest.raises(RuntimeError, match="from.*less than.*to"):
        torch.empty(3, device=neuron).random_(5, 2)


def test_bernoulli_with_probability_tensor(neuron):
    torch.manual_seed(2)
    p = torch.tensor([0.0, 1.0, 0.5], device=neuron).expand(4000, 3)
    out = torch.empty(4000, 3, device=neuron).bernoulli_(p).cpu()
    assert (out[:, 0] == 0).all() and (out[:, 1] == 1).all()
    assert abs(out[:, 2].mean().item() - 0.5) < 0.05


def test_bad_arguments(neuron):
    x = torch.empty(3, device=neuron)
    with pytest.raises(RuntimeError, match="std >= 0"):
        x.normal_(0.0, -1.0)
    with pytest.raises(RuntimeError, match="p to be in"):
        x.bernoulli_(1.5)
    with pytest.raises(RuntimeError, match="lambda > 0"):
        x.exponential_(0.0)
    assert torch.isfinite(x.uniform_().cpu()).all()


def test_dropout_style_masks_differ_per_call(neuron):
    torch.manual_seed(4)
    m1 = torch.empty(1000, device=neuron).bernoulli_(0.5)
    m2 = torch.empty(1000, device=neuron).bernoulli_(0.5)
    assert not torch.equal(m1.cpu(), m2.cpu())
    assert math.isclose(torch.neuron.get_rng_state()[8:].view(torch.int64).item(), 2000)


def test_dropout_is_native_seeded_and_scaled(neuron):
    import torch_neuronx
    x = torch.ones(20000, device=neuron, requires_grad=True)
    torch.manual_seed(9)
    torch_neuronx.clear_op_tracking()
    y = torch.nn.functional.dropout(x, p=0.25, training=True)
    y.sum().backward()
    assert torch_neuronx.get_fallback_ops() == []
    yc = y.detach().cpu()
    kept = yc != 0
    assert abs(kept.float().mean().item() - 0.75) < 0.02
    assert torch.allclose(yc[kept], torch.full_like(yc[kept], 1 / 0.75))
    assert torch.equal(x.grad.cpu(), yc)  # d(sum)/dx = mask * scale
    torch.manual_seed(9)
    again = torch.nn.functional.dropout(x.detach(), p=0.25, training=True).cpu()
    assert torch.equal(again, yc)
    assert torch.equal(torch.nn.functional.dropout(x.detach(), p=0.25, training=False).cpu(), x.detach().cpu())


def test_seed_and_state_arguments_as_cpu(neuron):
    """torch.neuron.manual_seed takes CPU's seed range (-2**63 to 2**64 - 1, negatives counting
    from 2**64; ValueError outside, never a silent wrap); set_rng_state takes a uint8 tensor only
    (TypeError as torch.set_rng_state)."""
    for seed in (2**64, -2**63 - 1):
        with pytest.raises(ValueError) as cpu_error:
            torch.manual_seed(seed)
        with pytest.raises(type(cpu_error.value), match="Overflow"):
            torch.neuron.manual_seed(seed)
        with pytest.raises(ValueError, match="Overflow"):
            torch.neuron.manual_seed_all(seed)
    torch.neuron.manual_seed(-1)
    assert torch.neuron.initial_seed() == 2**64 - 1 == torch.manual_seed(-1).initial_seed()
    state = torch.neuron.get_rng_state()
    for bad, cpu_bad in ((torch.full((16,), 3.7), torch.full((5056,), 3.7)), ([1] * 16, [1] * 5056)):
        with pytest.raises(TypeError) as cpu_error:
            torch.set_rng_state(cpu_bad)
        with pytest.raises(TypeError) as neuron_error:
            torch.neuron.set_rng_state(bad)
        assert str(neuron_error.value) == str(cpu_error.value)
    assert torch.equal(torch.neuron.get_rng_state(), state)  # unchanged by the refused calls


def test_neuron_generator_on_cpu_tensors_raises_cpu_pytorchs_error(neuron):
    """A CPU op given a neuron generator dispatches to neuron by the generator's key; it raises
    ATen's generator device error (as a CUDA generator does on CPU tensors), naming both."""
    g = torch.Generator(device=neuron)
    calls = [lambda: torch.randn(3, generator=g), lambda: torch.empty(3).uniform_(generator=g),
             lambda: torch.randperm(5, generator=g), lambda: torch.multinomial(torch.ones(3), 2, generator=g),
             lambda: torch.bernoulli(torch.full((3,), 0.5), generator=g), lambda: torch.randint(0, 5, (3,), generator=g)]
    for call in calls:
        with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'neuron'"):
            call()
    assert torch.randn(3, generator=g, device=neuron).isfinite().all().item()  # still usable


# ---------------------------------------------------------------- cauchy_, log_normal_, geometric_, poisson
# Native on the neuron Philox generator, as the other distributions: seeded by torch.neuron /
# a neuron Generator, one Philox counter per element, argument errors as CPU.

def _draw(name, t, generator=None):
    """Fills/samples `t` by distribution `name` with fixed parameters; returns the result."""
    if name == "cauchy":
        return t.cauchy_(1.5, 0.5, generator=generator)
    if name == "log_normal":
        return t.log_normal_(0.25, 0.5, generator=generator)
    if name == "geometric":
        return t.geometric_(0.2, generator=generator)
    return torch.poisson(t.fill_(4.0), generator=generator)


NEW_DISTS = ["cauchy", "log_normal", "geometric", "poisson"]


@pytest.mark.parametrize("name", NEW_DISTS)
def test_new_distributions_native_seeded_and_reproducible(name, neuron):
    import torch_neuronx
    torch_neuronx.clear_op_tracking()
    torch.neuron.manual_seed(3)
    a = _draw(name, torch.empty(1000, device=neuron)).cpu()
    torch.neuron.manual_seed(3)
    b = _draw(name, torch.empty(1000, device=neuron)).cpu()
    torch.neuron.manual_seed(4)
    c = _draw(name, torch.empty(1000, device=neuron)).cpu()
    assert torch.equal(a, b) and not torch.equal(a, c)
    # the CPU seed is not what seeds them: same neuron seed, different CPU seed, same numbers
    torch.neuron.manual_seed(3)
    torch.random.default_generator.manual_seed(77)
    assert torch.equal(_draw(name, torch.empty(1000, device=neuron)).cpu(), a)
    # the offset advances like the other ops: numel rounded up to 4
    torch.neuron.manual_seed(3)
    _draw(name, torch.empty(10, device=neuron))
    assert torch.neuron.get_rng_state()[8:].view(torch.int64).item() == 12
    # a neuron Generator: its own seed, the default generator untouched
    g = torch.Generator(device="neuron").manual_seed(1)
    before = torch.neuron.get_rng_state()
    x = _draw(name, torch.empty(1000, device=neuron), generator=g).cpu()
    assert torch.equal(torch.neuron.get_rng_state(), before)
    g.manual_seed(1)
    assert torch.equal(_draw(name, torch.empty(1000, device=neuron), generator=g).cpu(), x)
    g.manual_seed(2)
    assert not torch.equal(_draw(name, torch.empty(1000, device=neuron), generator=g).cpu(), x)
    assert torch_neuronx.get_fallback_ops() == []
    op = "aten::poisson" if name == "poisson" else f"aten::{name}_"
    assert op in torch_neuronx.get_executed_ops()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_new_distributions_statistics(dtype, neuron):
    """Sample statistics of 20000 draws against the distributions' own (generous bounds)."""
    import torch_neuronx
    torch_neuronx.clear_op_tracking()
    torch.neuron.manual_seed(0)
    n = 20000
    c = torch.empty(n, dtype=dtype, device=neuron).cauchy_(1.5, 0.5).double().cpu()
    assert torch.isfinite(c).all()
    # quantile q of Cauchy(m, s) is m + s tan(pi (q - 1/2)): quartiles at m -/+ s
    q = torch.quantile(c, torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64))
    assert torch.allclose(q, torch.tensor([1.0, 1.5, 2.0], dtype=torch.float64), atol=0.05)
    ln = torch.empty(n, dtype=dtype, device=neuron).log_normal_(0.25, 0.5).double().cpu()
    assert (ln > 0).all()
    assert abs(ln.log().mean().item() - 0.25) < 0.03 and abs(ln.log().std().item() - 0.5) < 0.03
    g = torch.empty(n, dtype=dtype, device=neuron).geometric_(0.2).double().cpu()
    assert g.min() >= 1 and torch.equal(g, g.round())
    assert abs(g.mean().item() - 5.0) < 0.25  # mean 1/p
    assert abs((g == 1).double().mean().item() - 0.2) < 0.02  # P(1) = p
    rates = torch.tensor([0.0, 0.5, 4.0, 30.0, 1000.0], dtype=dtype).repeat(n // 5)
    pz = torch.poisson(rates.to(neuron)).double().cpu().view(-1, 5)
    assert pz.dtype == torch.float64 and torch.equal(pz, pz.round()) and pz.min() >= 0
    assert (pz[:, 0] == 0).all()
    r = rates[:5].double()
    assert torch.allclose(pz[:, 1:].mean(0), r[1:], rtol=0.05)  # mean = variance = rate
    assert torch.allclose(pz[:, 1:].var(0), r[1:], rtol=0.15)
    assert torch_neuronx.get_fallback_ops() == []


def test_geometric_integer_dtypes_as_cpu(neuron):
    """geometric_ draws every real dtype CPU draws (integers too); bool and complex go to CPU,
    whose error the user sees."""
    import torch_neuronx
    torch_neuronx.clear_op_tracking()
    torch.neuron.manual_seed(5)
    for dtype in (torch.int64, torch.int32, torch.int16, torch.uint8):
        g = torch.empty(5000, dtype=dtype, device=neuron).geometric_(0.5).cpu()
        assert g.dtype == dtype and g.min() >= 1 and abs(g.double().mean().item() - 2.0) < 0.1
    assert torch_neuronx.get_fallback_ops() == []
    for dtype in (torch.bool, torch.complex64):
        with pytest.raises(NotImplementedError) as cpu_error:
            torch.empty(3, dtype=dtype).geometric_(0.5)
        with pytest.raises(NotImplementedError) as neuron_error:
            torch.empty(3, dtype=dtype, device=neuron).geometric_(0.5)
        assert str(neuron_error.value) == str(cpu_error.value)


def test_new_distributions_on_views_by_logical_index(neuron):
    """A transposed view gets the values of a contiguous tensor (element k draws counter k);
    a strided view is filled in place with its gaps untouched."""
    for name in NEW_DISTS:
        torch.neuron.manual_seed(11)
        contiguous = _draw(name, torch.empty(20, 30, device=neuron)).cpu()
        torch.neuron.manual_seed(11)
        if name == "poisson":  # the rates are the view; the result is a fresh tensor
            out = _draw(name, torch.empty(30, 20, device=neuron).t()).cpu()
        else:
            base = torch.empty(30, 20, device=neuron)
            _draw(name, base.t())
            out = base.t().cpu()
        assert torch.equal(out, contiguous), name
    z = torch.zeros(10, 10, device=neuron)
    z[:, ::2].log_normal_()
    zc = z.cpu()
    assert (zc[:, 1::2] == 0).all() and (zc[:, ::2] > 0).all()
    rates = torch.full((6, 8), 3.0, device=neuron)[:, ::2]
    assert torch.poisson(rates).shape == (6, 4)


def test_new_distributions_argument_errors_as_cpu(neuron):
    """Same exception type and message as CPU PyTorch; the tensor stays usable."""
    calls = [lambda t: t.cauchy_(0.0, 0.0), lambda t: t.cauchy_(0.0, -1.0),
             lambda t: t.log_normal_(1.0, 0.0), lambda t: t.log_normal_(1.0, -2.0),
             lambda t: t.geometric_(0.0), lambda t: t.geometric_(1.0), lambda t: t.geometric_(-0.5),
             lambda t: t.long().cauchy_(), lambda t: t.long().log_normal_(),
             lambda t: torch.poisson(t.long())]
    for call in calls:
        with pytest.raises(Exception) as cpu_error:
            call(torch.ones(3))
        with pytest.raises(type(cpu_error.value)) as neuron_error:
            call(torch.ones(3, device=neuron))
        assert str(neuron_error.value) == str(cpu_error.value)
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(RuntimeError, match="invalid Poisson rate, expected rate to be non-negative"):
            torch.poisson(torch.tensor([1.0, bad], device=neuron)).cpu()
    t = torch.empty(4, device=neuron).cauchy_()
    assert torch.isfinite(t.cpu()).all()


def test_new_distributions_cpu_tensors_with_neuron_generator_raise_cpu_pytorchs_error(neuron):
    g = torch.Generator(device=neuron).manual_seed(1)
    for name in NEW_DISTS:
        with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'neuron'"):
            _draw(name, torch.empty(5), generator=g)
        assert torch.isfinite(_draw(name, torch.empty(5, device=neuron), generator=g).cpu()).all()


def test_poisson_gradient_is_zero(neuron):
    rates = torch.tensor([0.5, 20.0, 3.0], device=neuron, requires_grad=True)
    torch.poisson(rates).sum().backward()
    assert torch.equal(rates.grad.cpu(), torch.zeros(3))


def test_new_distributions_float64_warns_and_draws():
    code = """
    import warnings, torch
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        x = torch.empty(1000, dtype=torch.float64, device="neuron").cauchy_()
    assert x.dtype == torch.float64 and torch.isfinite(x.cpu()).all()
    assert any("float64 is not natively supported on neuron: aten::cauchy_" in str(m.message) for m in w), [str(m.message) for m in w]
    print("ok")
    """
    assert run_py(code).stdout.strip() == "ok"
