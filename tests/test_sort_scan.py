"""Native sort, topk, scans, searchsorted, sampling, flip and roll against CPU PyTorch.

Expected values come from CPU PyTorch. Every test also asserts that its ops ran natively
(none of them in torch_neuronx.get_fallback_ops()).
"""
import math
import warnings

import pytest
import torch

import torch_neuronx
from conftest import assert_bitwise_equal, run_py

ALL_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int8, torch.int16, torch.int32, torch.int64,
              torch.uint8, torch.bool]
# Around the insertion/radix switch (32), a radix digit (256) and the kernels' 4096-element units.
LENGTHS = [1, 2, 31, 32, 33, 255, 256, 257, 4095, 4096, 4097]


@pytest.fixture
def native(neuron):
    """The device; after the test, none of the listed ops may have taken the CPU fallback."""
    yield neuron
    torch.neuron.synchronize()
    fallbacks = set(torch_neuronx.get_fallback_ops())
    for op in ("sort", "topk", "cumsum", "cumprod", "_logcumsumexp", "logsumexp", "searchsorted", "multinomial",
               "randperm", "flip", "roll", "amin", "amax"):
        assert f"aten::{op}" not in fallbacks, fallbacks


def _few_values(n, dtype, seed=0):
    """n values with many duplicates (a handful of distinct ones)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, (n,), generator=g)
    if dtype == torch.bool:
        return x > 0
    if dtype == torch.uint8:
        return (x + 3).to(dtype)
    return x.to(dtype)


# ---------------------------------------------------------------- sort

@pytest.mark.parametrize("dtype", ALL_DTYPES)
@pytest.mark.parametrize("descending", [False, True])
def test_stable_sort_with_duplicates_matches_cpu(native, dtype, descending):
    for n in LENGTHS:
        x = _few_values(n, dtype, seed=n)
        want = torch.sort(x, stable=True, descending=descending)
        got = torch.sort(x.to(native), stable=True, descending=descending)
        assert_bitwise_equal(got.values, want.values)
        assert torch.equal(got.indices.cpu(), want.indices), (n, dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.int16])
def test_sort_very_long_line(native, dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-1000, 1000, (1 << 20,), generator=g).to(dtype)
    want = torch.sort(x, stable=True)
    got = torch.sort(x.to(native), stable=True)
    assert torch.equal(got.values.cpu(), want.values)
    assert torch.equal(got.indices.cpu(), want.indices)


def test_unstable_sort_gives_valid_indices(native):
    x = _few_values(5000, torch.float32)
    got = torch.sort(x.to(native), descending=True)
    want = torch.sort(x, descending=True)
    assert torch.equal(got.values.cpu(), want.values)
    idx = got.indices.cpu()
    assert torch.equal(idx.sort().values, torch.arange(5000))
    assert torch.equal(x[idx], want.values)


def test_sort_nan_inf_and_signed_zero_order(native):
    x = torch.tensor([float("nan"), 1.0, -0.0, -float("inf"), 0.0, float("nan"), float("inf"), -2.0, 0.0, -0.0])
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for descending in (False, True):
            want = torch.sort(x.to(dtype), stable=True, descending=descending)
            got = torch.sort(x.to(dtype).to(native), stable=True, descending=descending)
            assert_bitwise_equal(got.values, want.values)
            assert torch.equal(got.indices.cpu(), want.indices)


def test_sort_strided_dims_and_out(native):
    g = torch.Generator().manual_seed(2)
    base = torch.randint(0, 5, (6, 40, 9), generator=g).float()
    x = base.transpose(0, 2)[:, ::3]  # non-contiguous, stepped
    for dim in (-1, 0, 1, 2, -3):
        want = torch.sort(x, dim=dim, stable=True, descending=True)
        got = torch.sort(x.to(native), dim=dim, stable=True, descending=True)
        assert torch.equal(got.values.cpu(), want.values) and torch.equal(got.indices.cpu(), want.indices)
    # out= tensors that are themselves non-contiguous views
    vals = torch.empty(6, 14, 9, device=native).transpose(0, 2)
    idx = torch.empty(14, 9, 6, dtype=torch.long, device=native).transpose(0, 1)
    assert not vals.is_contiguous() and not idx.is_contiguous() and vals.shape == idx.shape == x.shape
    torch.sort(x.to(native), dim=1, stable=True, out=(vals, idx))
    want = torch.sort(x, dim=1, stable=True)
    assert torch.equal(vals.cpu(), want.values) and torch.equal(idx.cpu(), want.indices)
    # in place through out= aliasing the input
    y = x.clone().to(native)
    idx2 = torch.empty(0, dtype=torch.long, device=native)
    torch.sort(y, dim=0, stable=True, out=(y, idx2))
    assert torch.equal(y.cpu(), torch.sort(x, dim=0, stable=True).values)


def test_sort_edge_shapes(native):
    for x in (torch.tensor(3.0), torch.empty(0), torch.empty(3, 0, 2), torch.ones(1, 1), torch.randn(4, 1)):
        for dim in range(-max(x.dim(), 1), max(x.dim(), 1)):
            want = torch.sort(x, dim=dim)
            got = torch.sort(x.to(native), dim=dim)
            assert got.values.shape == want.values.shape and torch.equal(got.values.cpu(), want.values)
            assert torch.equal(got.indices.cpu(), want.indices)
    assert torch.equal(torch.argsort(torch.tensor([3, 1, 2], device=native)).cpu(), torch.tensor([1, 2, 0]))
    assert torch.equal(torch.msort(torch.tensor([[3, 1], [2, 0]], device=native)).cpu(), torch.tensor([[2, 0], [3, 1]]))


def test_sort_errors_match_cpu(native):
    with pytest.raises(IndexError):
        torch.sort(torch.ones(3, device=native), dim=2)
    with pytest.raises(RuntimeError, match="complex"):
        torch.sort(torch.ones(3, dtype=torch.complex64, device=native))


# ---------------------------------------------------------------- topk

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int8, torch.uint8])
@pytest.mark.parametrize("largest", [True, False])
def test_topk_ties(native, dtype, largest):
    x = _few_values(3 * 300, dtype).reshape(3, 300)
    for k in (1, 5, 300):
        want = torch.topk(x, k, largest=largest)
        got = torch.topk(x.to(native), k, largest=largest)
        assert torch.equal(got.values.cpu(), want.values)
        # ties come in their original order: the stable sort's prefix (CPU's order is unspecified)
        stable = torch.sort(x, stable=True, descending=largest).indices[:, :k]
        assert torch.equal(got.indices.cpu(), stable)


@pytest.mark.parametrize("largest", [True, False])
def test_topk_small_k_of_long_lines_selects_as_the_stable_sort(native, largest):
    """k up to 1/16 of the line runs a one-pass selection instead of sorting the line: the same
    values and positions as the stable sort's first k, with ties, NaN, -0.0, infinities, over a
    non-last dim and strided lines."""
    g = torch.Generator().manual_seed(7)
    x = torch.randn(4, 3000, generator=g).mul(4).round()
    x[0, ::50] = float("nan")
    x[1, ::37] = -0.0
    x[2, ::41] = float("inf")
    x[3, ::43] = -float("inf")
    for dim, t in ((1, x), (0, x.t().contiguous()), (1, x[:, ::3]), (1, x.to(torch.bfloat16))):
        n = t.size(dim)
        for k in (1, 8, n // 16):
            want = torch.topk(t, k, dim=dim, largest=largest)
            got = torch.topk(t.to(native), k, dim=dim, largest=largest)
            assert_bitwise_equal(got.values.cpu(), want.values)
            stable = torch.sort(t, dim=dim, stable=True, descending=largest).indices.narrow(dim, 0, k)
            assert torch.equal(got.indices.cpu(), stable)


def test_topk_nan_dims_and_errors(native):
    x = torch.tensor([[1.0, float("nan"), 3.0, -float("inf")], [0.0, 2.0, float("nan"), float("nan")]])
    for largest in (True, False):
        for dim in (0, 1, -1):
            want = torch.topk(x, 2, dim=dim, largest=largest)
            got = torch.topk(x.to(native), 2, dim=dim, largest=largest)
            assert torch.allclose(got.values.cpu(), want.values, equal_nan=True)
            assert torch.equal(x.gather(dim, got.indices.cpu()).isnan(), want.values.isnan())
    assert torch.topk(torch.tensor(2.0, device=native), 1).values.item() == 2.0
    with pytest.raises(RuntimeError, match="out of range"):
        torch.topk(torch.ones(3, device=native), 4)
    with pytest.raises(RuntimeError, match="bool"):
        torch.topk(torch.ones(3, dtype=torch.bool, device=native), 1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64, torch.uint8])
def test_topk_of_a_0dim_tensor_matches_cpu(native, dtype):
    """ATen: a 0-dim input is its own top element (values 0-dim, index 0) for k = 0 as for k = 1;
    k = 2 is out of range. Functional and out= forms."""
    x = torch.tensor(2.5).to(dtype)
    for k in (0, 1):
        for dim, largest in ((0, True), (-1, False)):
            want = torch.topk(x, k, dim=dim, largest=largest)
            got = torch.topk(x.to(native), k, dim=dim, largest=largest)
            assert_bitwise_equal(got.values, want.values)
            assert_bitwise_equal(got.indices, want.indices)
            v, i = torch.empty(0, dtype=dtype, device=native), torch.empty(0, dtype=torch.int64, device=native)
            torch.topk(x.to(native), k, dim=dim, largest=largest, out=(v, i))
            assert_bitwise_equal(v, want.values)
            assert_bitwise_equal(i, want.indices)
    with pytest.raises(RuntimeError, match="selected index k out of range"):
        torch.topk(torch.tensor(2.5, device=native), 2)
    assert "aten::topk" in torch_neuronx.get_executed_ops()


# ---------------------------------------------------------------- scans

def test_cumsum_int8_promotes_to_int64(native):
    x = torch.full((300,), 100, dtype=torch.int8)
    got = torch.cumsum(x.to(native), 0)
    assert got.dtype == torch.int64
    assert torch.equal(got.cpu(), torch.cumsum(x, 0))
    got = torch.cumprod(torch.tensor([2, 3, 4], dtype=torch.uint8, device=native), 0)
    assert got.dtype == torch.int64 and got.cpu().tolist() == [2, 6, 24]


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_cumsum_cumprod_dtypes_match_cpu(native, dtype):
    x = _few_values(6 * 70, dtype).reshape(6, 70)
    for f in (torch.cumsum, torch.cumprod):
        for dim in (0, 1, -1):
            want = f(x, dim)
            got = f(x.to(native), dim)
            assert got.dtype == want.dtype
            torch.testing.assert_close(got.cpu(), want, rtol=1.6e-2 if dtype in (torch.bfloat16, torch.float16) else 2e-5,
                                       atol=1e-3)



@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cumsum_is_cpus_bits(native, dtype):
    """cumsum follows ATen's CPU kernel (a double running sum for float32, float for 16-bit
    types, each output rounded from it): CPU's bits, for lines dense along the scanned dim, lines
    across it and transposed inputs, long lines and large magnitudes included."""
    g = torch.Generator().manual_seed(3)
    for shape, dim in (((64, 1024), 1), ((64, 1024), 0), ((3, 100000), 1), ((1000, 7), 1), ((5, 6, 7), 1)):
        x = (torch.randn(shape, generator=g) * 1e4).to(dtype)
        want = torch.cumsum(x, dim)
        assert torch.equal(torch.cumsum(x.to(native), dim).cpu(), want), (shape, dim)
        if x.dim() == 2:
            xt = x.t().contiguous().t()
            assert torch.equal(torch.cumsum(xt.to(native), dim).cpu(), want), (shape, dim, "transposed")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_scans_of_negative_zeros_keep_cpu_signs(native, dtype):
    """Sums start from +0 on CPU PyTorch: a line of -0.0 sums to +0.0, products keep the sign."""
    x = torch.tensor([[-0.0, -0.0, 1.0, -0.0], [-0.0, -0.0, -0.0, -0.0]], dtype=dtype)
    for f in (torch.cumsum, torch.cumprod, torch.logcumsumexp):
        for dim in (0, 1):
            want, got = f(x, dim), f(x.to(native), dim).cpu()
            torch.testing.assert_close(got, want)
            assert torch.equal(torch.signbit(got), torch.signbit(want)), (f, dim, got, want)

def test_cumsum_dtype_arg_out_and_strides(native):
    x = torch.randn(5, 130, 3).transpose(0, 1)[::2]
    for dim in range(-3, 3):
        torch.testing.assert_close(torch.cumsum(x.to(native), dim).cpu(), torch.cumsum(x, dim))
        torch.testing.assert_close(torch.cumsum(x.to(native), dim, dtype=torch.float16).cpu(),
                                   torch.cumsum(x, dim, dtype=torch.float16), rtol=1.6e-2, atol=1e-2)
    out = torch.empty(3, 65, 5, device=native).transpose(0, 2).transpose(0, 1)
    torch.cumprod(x.to(native), 1, out=out)
    torch.testing.assert_close(out.cpu(), torch.cumprod(x, 1))
    y = x.clone().to(native)
    y.cumsum_(0)
    torch.testing.assert_close(y.cpu(), torch.cumsum(x, 0))
    assert torch.cumsum(torch.tensor(3, device=native), 0).item() == 3
    assert torch.cumsum(torch.empty(0, 4, device=native), 1).shape == (0, 4)


def test_long_scan_is_accurate(native):
    x = torch.rand(1 << 20)
    got = torch.cumsum(x.to(native), 0).cpu()
    ref = torch.cumsum(x.double(), 0).float()
    torch.testing.assert_close(got, ref, rtol=1e-6, atol=0)


def test_scan_independent_of_thread_count():
    code = ("import torch; g = torch.Generator().manual_seed(3); x = torch.randn(64, 3000, generator=g);"
            "n = x.to('neuron'); print(torch.cumsum(n, 1).cpu().sum(1).tolist(), torch.logcumsumexp(n, 0).cpu().sum().item(),"
            "torch.sort(n, 1).indices.cpu().sum().item())")
    one = run_py(code, env={"TORCH_NEURONX_NUM_THREADS": "1"}).stdout
    four = run_py(code, env={"TORCH_NEURONX_NUM_THREADS": "4"}).stdout
    assert one == four


def test_logcumsumexp_and_logsumexp(native):
    x = torch.randn(7, 33, 5) * 30
    for dim in (0, 1, -1):
        torch.testing.assert_close(torch.logcumsumexp(x.to(native), dim).cpu(), torch.logcumsumexp(x, dim))
    for dims, keepdim in (((1,), False), ((0, 2), True), ((-1,), True), ((0, 1, 2), False)):
        torch.testing.assert_close(torch.logsumexp(x.to(native), dims, keepdim).cpu(), torch.logsumexp(x, dims, keepdim))
    special = torch.tensor([[-float("inf"), -float("inf")], [float("inf"), 1.0], [float("nan"), 1.0], [1e30, 1e30]])
    torch.testing.assert_close(torch.logsumexp(special.to(native), 1).cpu(), torch.logsumexp(special, 1), equal_nan=True)
    torch.testing.assert_close(torch.logcumsumexp(special.to(native), 1).cpu(), torch.logcumsumexp(special, 1), equal_nan=True)
    i = torch.arange(12).reshape(3, 4)
    got = torch.logsumexp(i.to(native), 1)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got.cpu(), torch.logsumexp(i, 1))
    b = x.to(torch.bfloat16)
    torch.testing.assert_close(torch.logsumexp(b.to(native), 1).cpu(), torch.logsumexp(b, 1), rtol=1.6e-2, atol=1e-2)
    with pytest.raises(NotImplementedError):
        torch.logcumsumexp(torch.ones(3, dtype=torch.int64, device=native), 0)


# ---------------------------------------------------------------- searchsorted

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64, torch.int8, torch.uint8])
def test_searchsorted_matches_cpu(native, dtype):
    g = torch.Generator().manual_seed(4)
    bd = torch.sort(torch.randint(0, 50, (3, 40), generator=g)).values.to(dtype)
    vals = torch.randint(-2, 53, (3, 17), generator=g).to(dtype)
    for right in (False, True):
        for b, v in ((bd, vals), (bd[1], vals), (bd[0], vals[0, 3])):
            want = torch.searchsorted(b, v, right=right)
            got = torch.searchsorted(b.to(native), v.to(native), right=right)
            assert torch.equal(got.cpu(), want)
        want = torch.searchsorted(bd, vals, side="right" if right else "left", out_int32=True)
        got = torch.searchsorted(bd.to(native), vals.to(native), side="right" if right else "left", out_int32=True)
        assert got.dtype == torch.int32 and torch.equal(got.cpu(), want)
    assert torch.equal(torch.searchsorted(bd[0].to(native), 7).cpu(), torch.searchsorted(bd[0], 7))


def _searchsorted_warnings(device):
    bd = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], device=device)[::2]
    vals = torch.tensor([[2.0, 3.0], [4.0, 5.0]], device=device).t()
    sorter = torch.tensor([0, 1, 2, 0, 1, 2], device=device)[::2]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = torch.searchsorted(bd, vals, sorter=sorter)
    return got.cpu(), sorted(str(w.message).split(" (Triggered")[0] for w in seen)


def test_searchsorted_warns_of_non_contiguous_operands_as_cpu(native):
    """CPU's kernel says once per program which operand is non-contiguous (it copies them);
    set_warn_always makes each call say it, so that earlier tests cannot have used the once."""
    before = torch.is_warn_always_enabled()
    torch.set_warn_always(True)
    try:
        want, want_warnings = _searchsorted_warnings("cpu")
        got, got_warnings = _searchsorted_warnings(native)
    finally:
        torch.set_warn_always(before)
    assert torch.equal(got, want)
    assert len(want_warnings) == 3 and got_warnings == want_warnings


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_searchsorted_with_nan_boundaries_as_cpu(native, dtype):
    """NaN boundaries (where torch.sort puts them, last): CPU's binary search moves right at a
    NaN, which we follow."""
    nan = float("nan")
    vals = torch.tensor([0.0, 1.0, 1.5, 2.0, 100.0, nan, -float("inf"), float("inf")], dtype=dtype)
    for seq in ([1.0, 2.0, nan], [1.0, 2.0, nan, nan], [nan], [1.0, 1.0, 2.0, 3.0, nan]):
        bd = torch.tensor(seq, dtype=dtype)
        for right in (False, True):
            want = torch.searchsorted(bd, vals, right=right)
            assert torch.equal(torch.searchsorted(bd.to(native), vals.to(native), right=right).cpu(), want), (seq, right)

def test_searchsorted_sorter_promotion_and_errors(native):
    g = torch.Generator().manual_seed(5)
    raw = torch.randn(4, 30, generator=g)
    sorter = torch.argsort(raw)
    vals = torch.randn(4, 9, generator=g).double()
    for right in (False, True):
        want = torch.searchsorted(raw, vals.float(), sorter=sorter, right=right)
        got = torch.searchsorted(raw.to(native), vals.float().to(native), sorter=sorter.to(native), right=right)
        assert torch.equal(got.cpu(), want)
    ints = torch.tensor([1, 3, 5, 7])
    assert torch.equal(torch.searchsorted(ints.to(native), torch.tensor([2.5, 5.0], device=native)).cpu(),
                       torch.searchsorted(ints, torch.tensor([2.5, 5.0])))
    nan_vals = torch.tensor([float("nan"), 0.0])
    assert torch.equal(torch.searchsorted(raw[0].sort().values.to(native), nan_vals.to(native)).cpu(),
                       torch.searchsorted(raw[0].sort().values, nan_vals))
    with pytest.raises(RuntimeError, match="sorter index out of range"):
        torch.searchsorted(raw.to(native), vals.float().to(native), sorter=(sorter + 1).to(native))
    with pytest.raises(RuntimeError, match="side"):
        torch.searchsorted(raw.to(native), vals.float().to(native), side="middle")
    with pytest.raises(RuntimeError, match="boundaries tensor should be 1 dimension"):
        torch.searchsorted(raw.to(native), torch.ones(3, 2, device=native))


# ---------------------------------------------------------------- multinomial / randperm

def test_multinomial_with_replacement_distribution(native):
    torch.manual_seed(0)
    p = torch.tensor([0.0, 1.0, 2.0, 0.0, 4.0, 0.5, 2.5])
    n = 200_000
    draws = torch.multinomial(p.to(native), n, replacement=True).cpu()
    assert draws.shape == (n,) and draws.dtype == torch.int64
    counts = torch.bincount(draws, minlength=p.numel()).double()
    assert counts[p == 0].sum() == 0  # zero-probability categories are never drawn
    q = (p / p.sum()).double()
    se = (n * q * (1 - q)).sqrt()  # binomial standard error per category
    assert ((counts - n * q).abs() <= 5 * se + 1e-9).all(), (counts, n * q)
    chi2 = ((counts - n * q)[q > 0] ** 2 / (n * q[q > 0])).sum().item()
    assert chi2 < 25.7  # chi-square, 4 degrees of freedom: p < 1e-4


def test_multinomial_rows_and_without_replacement(native):
    torch.manual_seed(1)
    p = torch.tensor([[1.0, 0.0, 3.0, 2.0, 0.0, 1.0], [0.0, 0.0, 1.0, 0.0, 5.0, 0.0]])
    for _ in range(50):
        d = torch.multinomial(p.to(native), 2).cpu()
        for r in range(2):
            assert d[r, 0] != d[r, 1] and (p[r, d[r]] > 0).all()
    d = torch.multinomial(p[0].to(native), 4).cpu()
    assert sorted(d.tolist()) == [0, 2, 3, 5]
    # first draw without replacement follows p; the second follows p with the first removed
    first = torch.multinomial(torch.tensor([1.0, 3.0]).expand(100_000, 2).contiguous().to(native), 2).cpu()
    frac = (first[:, 0] == 1).double().mean().item()
    assert abs(frac - 0.75) < 5 * math.sqrt(0.75 * 0.25 / 100_000)
    # seeded: the same draws again
    torch.manual_seed(9)
    a = torch.multinomial(p.to(native), 3, replacement=True).cpu()
    torch.manual_seed(9)
    assert torch.equal(a, torch.multinomial(p.to(native), 3, replacement=True).cpu())
    out = torch.empty(0, dtype=torch.long, device=native)
    torch.multinomial(p.to(native), 3, replacement=True, out=out)
    assert out.shape == (2, 3)


@pytest.mark.parametrize("replacement,k", [(True, 2), (True, 1), (False, 2)])
@pytest.mark.parametrize("bad", [[1.0, -1.0, 1.0], [1.0, float("inf"), 1.0], [1.0, float("nan"), 1.0], [0.0, 0.0, 0.0]])
def test_multinomial_invalid_probabilities_raise_like_cpu(native, bad, replacement, k):
    with pytest.raises(RuntimeError) as cpu:
        torch.multinomial(torch.tensor(bad), k, replacement)
    with pytest.raises(RuntimeError) as dev:
        torch.multinomial(torch.tensor(bad, device=native), k, replacement).cpu()
    assert str(cpu.value).splitlines()[0] in str(dev.value)


def test_multinomial_argument_errors(native):
    p = torch.ones(3, device=native)
    for args, msg in (((p, 4, False), "without replacement"), ((p, 0, True), "n_sample <= 0"),
                      ((torch.ones(1, 1, 3, device=native), 1), "1 or 2 dim"),
                      ((torch.ones(3, dtype=torch.long, device=native), 1), "floating")):
        with pytest.raises(RuntimeError, match=msg):
            torch.multinomial(*args)


@pytest.mark.parametrize("n", [0, 1, 2, 33, 1000, 100_000])
def test_randperm_is_a_permutation(native, n):
    for dtype in (torch.int64, torch.int32, torch.float32):
        p = torch.randperm(n, dtype=dtype, device=native).cpu()
        assert p.dtype == dtype and torch.equal(p.sort().values, torch.arange(n, dtype=dtype))
    torch.manual_seed(3)
    a = torch.randperm(n, device=native).cpu()
    torch.manual_seed(3)
    assert torch.equal(a, torch.randperm(n, device=native).cpu())
    if n >= 1000:
        assert not torch.equal(a, torch.arange(n))
        assert not torch.equal(a, torch.randperm(n, device=native).cpu())


def test_randperm_errors_like_cpu(native):
    with pytest.raises(RuntimeError):
        torch.randperm(300, dtype=torch.uint8, device=native)
    with pytest.raises(RuntimeError, match="2049"):
        torch.randperm(3000, dtype=torch.float16, device=native)
    with pytest.raises(NotImplementedError):
        torch.randperm(3, dtype=torch.bool, device=native)


# ---------------------------------------------------------------- flip / roll

def test_roll_result_layout_as_cpu(native):
    """roll's result is contiguous, or channels_last for a channels_last input, as CPU's."""
    xs = [torch.randn(5, 6).t(), torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
          torch.randn(4, 6)[:, ::2]]
    for x in xs:
        for shifts, dims in ((1, 0), ((1, 2), (0, 1)), (3, None)):
            want, got = torch.roll(x, shifts, dims), torch.roll(x.to(native), shifts, dims)
            assert got.stride() == want.stride() and torch.equal(got.cpu(), want)


@pytest.mark.parametrize("dtype", ALL_DTYPES)
def test_flip_and_roll_match_cpu(native, dtype):
    x = _few_values(4 * 5 * 6, dtype).reshape(4, 5, 6).transpose(0, 2)[:, ::2]
    for dims in ((0,), (1, 2), (-1, 0), (0, 1, 2)):
        assert_bitwise_equal(torch.flip(x.to(native), dims), torch.flip(x, dims))
    for shifts, dims in ((1, 0), ((2, -1), (0, 2)), (7, None), (-3, 1), (0, 2)):
        want = torch.roll(x, shifts, dims)
        assert_bitwise_equal(torch.roll(x.to(native), shifts, dims), want)
    assert_bitwise_equal(torch.rot90(x.to(native), 1, (0, 1)), torch.rot90(x, 1, (0, 1)))
    assert_bitwise_equal(torch.fliplr(x.to(native)), torch.fliplr(x))
    assert torch.flip(torch.tensor(2.0, device=native), (0,)).item() == 2.0
    assert torch.roll(torch.empty(0, 3, device=native), 1, 0).shape == (0, 3)
    with pytest.raises(RuntimeError, match="multiple times"):
        torch.flip(x.to(native), (0, 0))
    with pytest.raises(RuntimeError, match="align"):
        torch.roll(x.to(native), (1, 2), (0,))


def test_randperm_is_uniform(native):
    """Every permutation of 4 equally likely (chi-square over the 24, 23 degrees of freedom) and
    every value equally likely at every position of a longer permutation."""
    torch.manual_seed(11)
    draws = 4800
    counts = {}
    for _ in range(draws):
        p = tuple(torch.randperm(4, device=native).tolist())
        counts[p] = counts.get(p, 0) + 1
    assert len(counts) == 24
    expected = draws / 24
    chi2 = sum((c - expected) ** 2 / expected for c in counts.values())
    assert chi2 < 49.7  # chi-square, 23 degrees of freedom: p < 1e-3
    perms = torch.stack([torch.randperm(10, device=native) for _ in range(3000)]).cpu()
    where = torch.zeros(10, 10)
    for v in range(10):
        where[v] = (perms == v).double().sum(0)
    e = 300.0
    assert ((where - e).abs() <= 5 * math.sqrt(e * 0.9)).all(), where
