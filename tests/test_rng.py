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
