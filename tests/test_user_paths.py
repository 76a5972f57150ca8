"""Ops that common user paths reach (issue 11): isin (Hugging Face generate), kthvalue,
nanmedian, cummax/cummin, histc/histogram, embedding_bag, copysign and integer linspace run
natively and match CPU PyTorch, forward and backward.

Expected values come from CPU PyTorch. Every test proves the op ran natively: op tracking
shows it executed on the device and nothing took the CPU fallback.
"""
import re
import warnings

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx

TOL = dict(rtol=1e-5, atol=1e-5)


def _ran(op):
    assert op in torch_neuronx.get_executed_ops(), f"{op} did not run natively"


def _x(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# ---------------------------------------------------------------- isin

@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.float32, torch.uint8])
@pytest.mark.parametrize("n_test", [1, 3, 500])   # broadcast compare and sorted search
def test_isin_matches_cpu(native, dtype, n_test):
    g = torch.Generator().manual_seed(n_test)
    elements = torch.randint(0, 50, (7, 11), generator=g).to(dtype)
    test = torch.randint(0, 50, (n_test,), generator=g).to(dtype)
    for invert in (False, True):
        expected = torch.isin(elements, test, invert=invert)
        actual = torch.isin(elements.to("neuron"), test.to("neuron"), invert=invert)
        assert actual.dtype == torch.bool and torch.equal(actual.cpu(), expected)
    _ran("aten::isin")


def test_isin_special_values_and_overloads(native):
    e = torch.tensor([float("nan"), -0.0, 0.0, 1.0, float("inf"), 2.5])
    t = torch.tensor([0.0, float("nan"), float("inf"), 7.0] * 40)   # sorted-search path
    for tt in (t, t[:3]):
        assert torch.equal(torch.isin(e.to("neuron"), tt.to("neuron")).cpu(), torch.isin(e, tt))
    # mixed dtypes promote; scalar overloads; out=
    ints = torch.arange(6)
    assert torch.equal(torch.isin(ints.to("neuron"), torch.tensor([2.0, 4.5], device="neuron")).cpu(),
                       torch.isin(ints, torch.tensor([2.0, 4.5])))
    assert torch.equal(torch.isin(ints.to("neuron"), 3).cpu(), torch.isin(ints, 3))
    assert torch.equal(torch.isin(3, ints.to("neuron"), invert=True).cpu(), torch.isin(3, ints, invert=True))
    out = torch.empty(0, dtype=torch.bool, device="neuron")
    torch.isin(ints.to("neuron"), torch.tensor([1, 5], device="neuron"), out=out)
    assert torch.equal(out.cpu(), torch.isin(ints, torch.tensor([1, 5])))
    assert torch.isin(torch.empty(0, device="neuron"), torch.ones(3, device="neuron")).shape == (0,)


def test_isin_refuses_like_cpu(native):
    with pytest.raises(RuntimeError, match="Unsupported input type encountered for isin"):
        torch.isin(torch.ones(3, dtype=torch.complex64, device="neuron"), torch.ones(2, device="neuron"))


# ---------------------------------------------------------------- kthvalue / nanmedian

@pytest.mark.parametrize("keepdim", [False, True])
def test_kthvalue_matches_cpu(native, keepdim):
    x = _x(6, 9)
    x[2, 3] = float("nan")
    for dim, k in ((1, 1), (1, 5), (1, 9), (0, 3), (-1, 8)):
        ev, ei = x.kthvalue(k, dim, keepdim)
        av, ai = x.to("neuron").kthvalue(k, dim, keepdim)
        torch.testing.assert_close(av.cpu(), ev, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(ai.cpu(), ei)   # distinct values: the index is unique
    xs = x.to("neuron").t()   # strided input
    torch.testing.assert_close(xs.kthvalue(2, 1).values.cpu(), x.t().kthvalue(2, 1).values, equal_nan=True)
    assert torch.equal(torch.tensor(5.0, device="neuron").kthvalue(1).values.cpu(), torch.tensor(5.0))
    _ran("aten::kthvalue")


def test_kthvalue_gradient_and_errors(native):
    x = _x(4, 6)
    xc, xd = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    xc.kthvalue(3, 1).values.sum().backward()
    xd.kthvalue(3, 1).values.sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)
    with pytest.raises(RuntimeError, match="selected number k out of range for dimension 1"):
        x.to("neuron").kthvalue(7, 1)
    with pytest.raises(IndexError, match="Expected reduction dim 1 to have non-zero size"):
        torch.empty(3, 0, device="neuron").kthvalue(1, 1)


def test_nanmedian_matches_cpu(native):
    x = _x(5, 8)
    x[0, ::2] = float("nan")
    x[3] = float("nan")   # an all-NaN line
    ev, ei = x.nanmedian(1)
    av, ai = x.to("neuron").nanmedian(1)
    torch.testing.assert_close(av.cpu(), ev, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(ai.cpu()[[0, 1, 2, 4]], ei[[0, 1, 2, 4]])
    assert torch.isnan(x[3, ai[3].item()])                    # all NaN: a NaN's index
    torch.testing.assert_close(x.to("neuron").nanmedian().cpu(), x.nanmedian(), equal_nan=True)
    assert torch.isnan(torch.empty(0, device="neuron").nanmedian().cpu())
    ints = torch.tensor([[4, 1, 7, 3]])
    assert torch.equal(ints.to("neuron").nanmedian(1, keepdim=True).values.cpu(), ints.nanmedian(1, keepdim=True).values)
    _ran("aten::nanmedian")


# ---------------------------------------------------------------- cummax / cummin

@pytest.mark.parametrize("fn", [torch.cummax, torch.cummin])
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16, torch.bool])
def test_cummax_cummin_match_cpu(native, fn, dtype):
    g = torch.Generator().manual_seed(1)
    x = torch.randint(-3, 4, (5, 13), generator=g).to(dtype)   # many ties: the later index wins
    if dtype == torch.float32:
        x[1, 4] = float("nan")
        x[2, 0] = float("nan")
        x[1, 7] = x[1, 9] = float("nan")  # a later NaN takes over from an earlier one (its index)
        x[3] = float("nan")
    for dim in (1, 0):
        ev, ei = fn(x, dim)
        av, ai = fn(x.to("neuron"), dim)
        torch.testing.assert_close(av.cpu(), ev, equal_nan=True, rtol=0, atol=0)
        assert torch.equal(ai.cpu(), ei)
    ev, ei = fn(x.t(), 1)     # strided
    av, ai = fn(x.to("neuron").t(), 1)
    torch.testing.assert_close(av.cpu(), ev, equal_nan=True, rtol=0, atol=0)
    assert torch.equal(ai.cpu(), ei)
    _ran("aten::_cummax_helper" if fn is torch.cummax else "aten::_cummin_helper")


def test_add_alpha_as_cpu(neuron):
    """alpha is converted to the computation's dtype as CPU's kernels do (out of range raises);
    a complex alpha keeps its imaginary part (through the visible fallback)."""
    cases = [(torch.tensor([1, 2, 0], dtype=torch.int8), 300), (torch.tensor([1, 2, 0], dtype=torch.int32), 2 ** 40),
             (torch.tensor([1.0, 2.0], dtype=torch.float16), 1e10)]
    for x, alpha in cases:
        for fn in (torch.add, torch.sub):
            with pytest.raises(RuntimeError) as want:
                fn(x, x, alpha=alpha)
            with pytest.raises(RuntimeError) as got:
                fn(x.to("neuron"), x.to("neuron"), alpha=alpha)
            assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]
    x = torch.tensor([1, 2, 0], dtype=torch.complex64)
    for fn in (lambda a, b: torch.add(a, b, alpha=1j), lambda a, b: torch.sub(a, 1, alpha=1j),
               lambda a, b: a.clone().add_(b, alpha=2 - 1j), lambda a, b: torch.add(a, b, alpha=2.0)):
        torch.testing.assert_close(fn(x.to("neuron"), x.to("neuron")).cpu(), fn(x, x))
    assert set(torch_neuronx.get_fallback_ops()) == {"aten::add", "aten::sub", "aten::add_"}  # complex alpha only
    torch_neuronx.clear_op_tracking()
    torch.testing.assert_close(torch.add(x.to("neuron"), x.to("neuron"), alpha=2.0).cpu(), x * 3)
    assert torch_neuronx.get_fallback_ops() == []


def test_mean_out_of_integer_dtype_refused_as_cpu(native):
    x = torch.tensor([1.5, 2.5, 4.0])
    for dtype in (torch.int64, torch.bool):
        with pytest.raises(RuntimeError) as want:
            torch.mean(x, 0, out=torch.empty(0, dtype=dtype))
        with pytest.raises(RuntimeError) as got:
            torch.mean(x.to("neuron"), 0, out=torch.empty(0, dtype=dtype, device="neuron"))
        assert str(got.value) == str(want.value)


def test_cummax_gradient(native):
    x = _x(3, 10)
    xc, xd = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    (torch.cummax(xc, 1).values * torch.arange(10.0)).sum().backward()
    (torch.cummax(xd, 1).values * torch.arange(10.0, device="neuron")).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad)
    assert torch.equal(torch.cummin(torch.tensor(2.0, device="neuron"), 0).indices.cpu(), torch.tensor(0))


# ---------------------------------------------------------------- histc / histogram

@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_histc_matches_cpu(native, dtype):
    x = (_x(1000) * 3).to(dtype)
    for bins, lo, hi in ((10, 0, 0), (7, -2, 2), (1, -1, 1), (50, -5, 0.5)):
        torch.testing.assert_close(torch.histc(x.to("neuron"), bins, lo, hi).cpu(), torch.histc(x, bins, lo, hi))
    const = torch.full((5,), 2.0, dtype=dtype)   # min == max: the range widens by 1 each side
    torch.testing.assert_close(torch.histc(const.to("neuron"), 4).cpu(), torch.histc(const, 4))
    _ran("aten::histc")


def test_histogram_matches_cpu(native):
    x = _x(4, 250) * 2
    w = _x(4, 250, seed=3).abs()
    for kwargs in (dict(bins=12), dict(bins=5, range=(-1.0, 1.5)), dict(bins=9, weight=w, density=True)):
        eh, ee = torch.histogram(x, **kwargs)
        dk = {k: (v.to("neuron") if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
        ah, ae = torch.histogram(x.to("neuron"), **dk)
        torch.testing.assert_close(ae.cpu(), ee)
        torch.testing.assert_close(ah.cpu(), eh, rtol=1e-5, atol=1e-5)
    edges = torch.tensor([-3.0, -1.0, 0.0, 0.5, 4.0])
    eh, _ = torch.histogram(x, edges)
    ah, _ = torch.histogram(x.to("neuron"), edges.to("neuron"))
    torch.testing.assert_close(ah.cpu(), eh)
    _ran("aten::histogram")


def test_histograms_refuse_like_cpu(native):
    x = _x(10)
    for args in ((x, -1), (x, 5, 3.0, 1.0)):
        with pytest.raises(RuntimeError):
            torch.histc(*args)
        with pytest.raises(RuntimeError):
            torch.histc(args[0].to("neuron"), *args[1:])
    with pytest.raises(NotImplementedError):
        torch.histc(torch.arange(4, device="neuron"), 3)
    # integers: CPU makes the edges in the input's dtype before refusing the dtype
    ints = torch.arange(4)
    for args in ((4, 0, 3), (4, 0.5, 1e40), (4,)):
        try:
            torch.histc(ints, *args)
        except (RuntimeError, NotImplementedError) as e:
            want = (type(e), str(e).split("\n")[0])
        with pytest.raises(want[0], match=re.escape(want[1])):
            torch.histc(ints.to("neuron"), *args)
    with pytest.raises(RuntimeError, match="not finite"):
        torch.histogram(torch.tensor([1.0, float("inf")], device="neuron"), 3)


# ---------------------------------------------------------------- embedding_bag

BAG_CASES = [
    dict(mode="sum"), dict(mode="mean"), dict(mode="max"),
    dict(mode="sum", per_sample_weights=True), dict(mode="mean", padding_idx=2),
    dict(mode="sum", include_last_offset=True), dict(mode="mean", scale_grad_by_freq=True),
    dict(mode="max", padding_idx=0),
]


@pytest.mark.parametrize("kw", BAG_CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_embedding_bag_matches_cpu(native, kw):
    kw = dict(kw)
    g = torch.Generator().manual_seed(0)
    weight = torch.randn(10, 6, generator=g)
    indices = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9, 0, 2, 2])
    offsets = torch.tensor([0, 4, 4, 7, 11] if kw.get("include_last_offset") else [0, 4, 4, 7])
    psw = torch.rand(indices.numel(), generator=g) if kw.pop("per_sample_weights", False) else None
    wc = weight.clone().requires_grad_()
    wd = weight.to("neuron").requires_grad_()
    pc = psw.clone().requires_grad_() if psw is not None else None
    pd = psw.to("neuron").requires_grad_() if psw is not None else None
    expected = F.embedding_bag(indices, wc, offsets, per_sample_weights=pc, **kw)
    actual = F.embedding_bag(indices.to("neuron"), wd, offsets.to("neuron"), per_sample_weights=pd, **kw)
    torch.testing.assert_close(actual.detach().cpu(), expected.detach(), **TOL)
    scale = torch.linspace(0.5, 1.5, expected.numel()).reshape(expected.shape)
    (expected * scale).sum().backward()
    (actual * scale.to("neuron")).sum().backward()
    expected_grad = wc.grad
    if kw.get("scale_grad_by_freq"):
        # CPU's dense kernel divides by the count of another row (counts[indices[i]] with i the
        # i-th distinct row, aten/src/ATen/native/EmbeddingBag.cpp). The documented gradient:
        # each row's unscaled gradient divided by how often the row occurs.
        kw.pop("scale_grad_by_freq")
        wc = weight.clone().requires_grad_()
        (F.embedding_bag(indices, wc, offsets, per_sample_weights=pc, **kw) * scale).sum().backward()
        expected_grad = wc.grad / torch.bincount(indices, minlength=10).clamp_min(1).unsqueeze(1)
    torch.testing.assert_close(wd.grad.cpu(), expected_grad, **TOL)
    if psw is not None:
        torch.testing.assert_close(pd.grad.cpu(), pc.grad, **TOL)
    _ran("aten::_embedding_bag")


def test_embedding_bag_module_2d_input_and_no_grad(native):
    torch.manual_seed(0)
    cpu = torch.nn.EmbeddingBag(20, 5, mode="mean")
    dev = torch.nn.EmbeddingBag(20, 5, mode="mean").to("neuron")
    dev.load_state_dict(cpu.state_dict())
    x = torch.randint(0, 20, (4, 3))
    torch.testing.assert_close(dev(x.to("neuron")).detach().cpu(), cpu(x).detach(), **TOL)
    w = cpu.weight.detach()   # no gradient wanted: _embedding_bag_forward_only
    torch.testing.assert_close(F.embedding_bag(x.to("neuron"), w.to("neuron"), mode="max").cpu(),
                               F.embedding_bag(x, w, mode="max"), **TOL)
    _ran("aten::_embedding_bag_forward_only")


def test_embedding_bag_bad_index_is_reported(native):
    """A bad index fails the kernel with RuntimeError (as CPU PyTorch), reported at the next sync."""
    w = torch.randn(5, 3, device="neuron")
    out = F.embedding_bag(torch.tensor([1, 7], device="neuron"), w, torch.tensor([0], device="neuron"))
    with pytest.raises(RuntimeError, match="index 7 of entry 1 is out of range for a weight of 5 rows"):
        out.cpu()
    torch.neuron.synchronize()   # the device stays usable
    assert torch.equal((w + 1).cpu(), w.cpu() + 1)


# ---------------------------------------------------------------- copysign / integer linspace

def test_copysign_matches_cpu(native):
    a = torch.tensor([1.5, -2.0, 0.0, -0.0, float("inf"), float("nan"), 3.0])
    b = torch.tensor([-1.0, 2.0, -0.0, -3.0, -1.0, -1.0, float("nan")])
    for x, y in ((a, b), (a, -1.0), (torch.arange(-3, 4), b), (a, torch.arange(-3, 4))):
        yd = y.to("neuron") if isinstance(y, torch.Tensor) else y
        expected, actual = torch.copysign(x, y), torch.copysign(x.to("neuron"), yd)
        assert actual.dtype == expected.dtype
        assert torch.equal(torch.signbit(actual.cpu()), torch.signbit(expected))   # -0.0 and NaN signs too
        torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, rtol=0, atol=0)
    xc, xd = a[:5].clone().requires_grad_(), a[:5].to("neuron").requires_grad_()
    torch.copysign(xc, b[:5]).sum().backward()
    torch.copysign(xd, b[:5].to("neuron")).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, equal_nan=True)   # inf / inf: NaN on CPU too
    _ran("aten::copysign")


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8, torch.int8])
def test_integer_linspace_matches_cpu(native, dtype):
    for start, end, steps in ((0, 10, 4), (0, 3, 31), (-7, 5, 13), (10, 0, 7), (2.7, 9.9, 6), (0, 100, 1), (5, 5, 3),
                              (0, 255, 256)):
        try:
            expected = torch.linspace(start, end, steps, dtype=dtype)
        except RuntimeError as e:   # a bound the dtype cannot hold: refused alike
            with pytest.raises(RuntimeError, match=str(e)):
                torch.linspace(start, end, steps, dtype=dtype, device="neuron")
            continue
        actual = torch.linspace(start, end, steps, dtype=dtype, device="neuron")
        assert torch.equal(actual.cpu(), expected), (start, end, steps)
    out = torch.empty(20, dtype=torch.int64, device="neuron")[::2]   # strided out=
    torch.linspace(0, 9, 10, out=out)
    assert torch.equal(out.cpu(), torch.linspace(0, 9, 10, dtype=torch.int64))
    _ran("aten::linspace")


def test_complex_randn_is_native(native):
    torch.manual_seed(0)
    z = torch.randn(100_000, dtype=torch.complex64, device="neuron")
    # each part N(0, 1/2): total variance 1, as on CPU
    assert abs(z.real.var().item() - 0.5) < 0.02 and abs(z.imag.var().item() - 0.5) < 0.02


# ---------------------------------------------------------------- CTC loss

@pytest.mark.parametrize("targets_layout", ["padded", "concatenated"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_ctc_loss_matches_cpu(native, targets_layout, reduction):
    g = torch.Generator().manual_seed(0)
    T, N, C = 20, 3, 6
    logits = torch.randn(T, N, C, generator=g)
    in_len, tg_len = torch.tensor([20, 15, 9]), torch.tensor([7, 0, 4])
    padded = torch.randint(1, C, (N, 7), generator=g)
    targets = padded if targets_layout == "padded" else torch.cat([padded[i, :l] for i, l in enumerate(tg_len.tolist())])
    lc = logits.clone().requires_grad_()
    ld = logits.to("neuron").requires_grad_()
    expected = F.ctc_loss(lc.log_softmax(2), targets, in_len, tg_len, reduction=reduction)
    actual = F.ctc_loss(ld.log_softmax(2), targets.to("neuron"), in_len.to("neuron"), tg_len.to("neuron"),
                        reduction=reduction)
    torch.testing.assert_close(actual.detach().cpu(), expected.detach(), **TOL)
    expected.sum().backward()
    actual.sum().backward()
    torch.testing.assert_close(ld.grad.cpu(), lc.grad, rtol=1e-4, atol=1e-5)
    _ran("aten::_ctc_loss")
    _ran("aten::_ctc_loss_backward")


def test_ctc_loss_impossible_alignment_and_zero_infinity(native):
    # a target longer than the input cannot be aligned: infinite loss, or 0 with zero_infinity
    logits = torch.randn(3, 1, 4, generator=torch.Generator().manual_seed(1))
    args = (torch.tensor([[1, 2, 1, 2]]), [3], [4])
    for zero_infinity in (False, True):
        lc, ld = logits.clone().requires_grad_(), logits.to("neuron").requires_grad_()
        e = F.ctc_loss(lc.log_softmax(2), *args, zero_infinity=zero_infinity, reduction="sum")
        a = F.ctc_loss(ld.log_softmax(2), args[0].to("neuron"), *args[1:], zero_infinity=zero_infinity, reduction="sum")
        torch.testing.assert_close(a.detach().cpu(), e.detach())
        e.backward()
        a.backward()
        torch.testing.assert_close(ld.grad.cpu(), lc.grad, equal_nan=True)
    with pytest.raises(RuntimeError, match="blank must be in label range"):
        F.ctc_loss(logits.to("neuron").log_softmax(2), args[0].to("neuron"), [3], [4], blank=9)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_var_std_over_a_dim_near_the_float_max(native, dtype):
    """Values near the largest float: the mean's float32 sum overflows; CPU PyTorch (Welford)
    gives var 0 for equal values, and inf/NaN rows stay inf/NaN."""
    x = torch.full((4, 7), 3e38).to(dtype)
    x[1] = float("inf")
    x[2, 3] = float("nan")
    x[3] = -3e38
    for fn in (lambda t: t.var(-1), lambda t: t.std(-1), lambda t: t.var(-1, unbiased=False)):
        torch.testing.assert_close(fn(x.to("neuron")).cpu(), fn(x), equal_nan=True, rtol=0, atol=0)
    _ran("aten::var")
    # spread values: the variance overflows float32 (inf, as on CPU) but its square root does not
    y = torch.tensor([[3e38, -3e38, 1e38, 2e38], [1.0, 2.0, 3.0, 4.0]]).to(dtype)
    for fn in (lambda t: t.std(-1), lambda t: t.std(-1, unbiased=False), lambda t: t.std(), lambda t: t.var(-1),
               lambda t: torch.std_mean(t, -1)[0]):
        torch.testing.assert_close(fn(y.to("neuron")).cpu(), fn(y), rtol=1e-6, atol=0)


# ---------------------------------------------------------------- parity found by QA (eager)

def _on_both(fn, *tensors):
    """fn applied to CPU tensors and to their neuron copies: (CPU result, neuron result on the CPU)."""
    return fn(*tensors), fn(*(t.to("neuron") for t in tensors))


def test_fill_and_masked_fill_of_expanded_tensors(native):
    """CPU PyTorch fills expanded (stride 0) tensors; masked_fill_ warns and fills an element
    shared by several positions when any of them is masked. fill_ with a tensor value refuses."""
    m = torch.tensor([[True, False, False], [False, False, False], [False, True, False], [False, False, False]])
    for fn in (lambda x, m: x.fill_(2.5), lambda x, m: x.zero_(), lambda x, m: x.masked_fill_(m, 7.0),
               lambda x, m: x.masked_fill_(m[0], -1.0), lambda x, m: x.masked_fill_(m, torch.tensor(4.0, device=x.device))):
        want = fn(torch.arange(3.0).reshape(1, 3).expand(4, 3), m)
        got = fn(torch.arange(3.0).reshape(1, 3).to("neuron").expand(4, 3), m.to("neuron"))
        assert torch.equal(got.cpu(), want)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        torch.zeros(1, 3, device="neuron").expand(4, 3).fill_(torch.tensor(1.0, device="neuron"))
    _ran("aten::fill_")


def test_where_condition_and_out_dtype_as_cpu(native):
    cond = torch.tensor([1, 0, 2], dtype=torch.uint8)
    a, b = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([-1, -2, -3], dtype=torch.int32)
    with pytest.warns(UserWarning, match="uint8 condition"):
        want, got = _on_both(torch.where, cond, a, b)
    assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    with pytest.raises(RuntimeError, match="Expected out type to be Float but got Double"):
        torch.where(cond.bool().to("neuron"), a.to("neuron"), b.to("neuron"),
                    out=torch.empty(3, dtype=torch.float64, device="neuron"))
    out = torch.empty(3, device="neuron")
    torch.where(cond.bool().to("neuron"), a.to("neuron"), b.to("neuron"), out=out)
    assert torch.equal(out.cpu(), torch.where(cond.bool(), a, b))
    # a CPU 0-dim tensor as self or other rides along (the output on the device), in each dtype path
    for dtype in (torch.float32, torch.float64, torch.complex128):
        x, s = torch.tensor([1.0, -2.0, 3.0], dtype=dtype), torch.tensor(9.5, dtype=dtype)
        for args in ((x.real > 0, x, s), (x.real > 0, s, x), (x.real > 0, s, s), (torch.tensor(True), s, x)):
            want = torch.where(*args)
            got = torch.where(*(t.to("neuron") if t.dim() else t for t in args))
            assert got.device.type == "neuron" and got.dtype == want.dtype and torch.equal(got.cpu(), want)
    _ran("aten::where")


def test_bernoulli_refuses_probabilities_outside_0_1(native):
    with pytest.raises(RuntimeError, match="Expected p_in >= 0 && p_in <= 1"):
        torch.bernoulli(torch.tensor([0.5, 1.5, 0.0], device="neuron")).cpu()
    with pytest.raises(RuntimeError, match="Expected p_in >= 0 && p_in <= 1"):
        torch.empty(2, device="neuron").bernoulli_(torch.tensor([float("nan"), 0.5], device="neuron")).cpu()
    assert torch.equal(torch.bernoulli(torch.tensor([1.0, 0.0, 1.0], device="neuron")).cpu(), torch.tensor([1.0, 0.0, 1.0]))


@pytest.mark.parametrize("op", ["conv2d", "conv_transpose2d", "conv3d", "batch_norm", "adaptive_avg_pool2d"])
@pytest.mark.parametrize("layout", ["input", "weight"])
def test_channels_last_results_as_cpu(native, op, layout):
    """Results are channels_last where CPU PyTorch's are (a channels_last input, or weight)."""
    three_d = op == "conv3d"
    x = _x(2, 3, 4, 5, 4) if three_d else _x(2, 3, 6, 5)
    w = {"conv2d": _x(4, 3, 2, 2, seed=1), "conv_transpose2d": _x(3, 4, 2, 2, seed=1),
         "conv3d": _x(4, 3, 2, 2, 2, seed=1)}.get(op, _x(3, seed=1))
    fmt = torch.channels_last_3d if three_d else torch.channels_last
    if layout == "input":
        x = x.contiguous(memory_format=fmt)
    elif w.dim() > 1:
        w = w.contiguous(memory_format=fmt)
    fn = {"batch_norm": lambda x, w: F.batch_norm(x, None, None, w, None, training=True),
          "adaptive_avg_pool2d": lambda x, w: F.adaptive_avg_pool2d(x, (2, 2)) * w.view(3, 1, 1)}.get(
        op, lambda x, w: getattr(F, op)(x, w))
    want, got = _on_both(fn, x, w)
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-5)


_CL, _CL3 = torch.channels_last, torch.channels_last_3d
_LAYOUT_CASES = {  # name: (fn, inputs); gradients are taken for every input
    "conv2d_input_cl": (F.conv2d, [_x(2, 3, 6, 6).contiguous(memory_format=_CL), _x(4, 3, 3, 3, seed=1)]),
    "conv2d_weight_cl": (F.conv2d, [_x(2, 3, 6, 6), _x(4, 3, 3, 3, seed=1).contiguous(memory_format=_CL)]),
    "conv_transpose2d_input_cl": (F.conv_transpose2d, [_x(2, 3, 6, 6).contiguous(memory_format=_CL), _x(3, 4, 3, 3, seed=1)]),
    "batch_norm": (lambda x, w: F.batch_norm(x, None, None, w, None, training=True),
                   [_x(2, 3, 6, 6).contiguous(memory_format=_CL), _x(3, seed=1)]),
    "pad_replicate_2d": (lambda x: F.pad(x, (1, 2, 1, 0), mode="replicate"), [_x(2, 4, 6, 5).contiguous(memory_format=_CL)]),
    "pad_replicate_3d": (lambda x: F.pad(x, (1, 2, 1, 0, 1, 1), mode="replicate"),
                         [_x(2, 3, 4, 4, 4).contiguous(memory_format=_CL3)]),
    "pad_reflect_3d": (lambda x: F.pad(x, (1, 2, 1, 0, 1, 1), mode="reflect"),
                       [_x(2, 3, 4, 4, 4).contiguous(memory_format=_CL3)]),
    "max_pool3d": (lambda x: F.max_pool3d(x, 2), [_x(2, 3, 4, 4, 4).contiguous(memory_format=_CL3)]),
    "adaptive_avg_pool2d": (lambda x: F.adaptive_avg_pool2d(x, (3, 4)), [_x(2, 4, 9, 11).contiguous(memory_format=_CL)]),
    "pixel_shuffle": (lambda x: F.pixel_shuffle(x, 2), [_x(2, 4, 6, 5).contiguous(memory_format=_CL)]),
    "pixel_unshuffle": (lambda x: F.pixel_unshuffle(x, 2), [_x(2, 3, 6, 4).contiguous(memory_format=_CL)]),
    # roll is CPU's cat of two pieces: channels_last kept, contiguous when there is no shift
    "roll_shifted": (lambda x: torch.roll(x, 1, 2), [_x(2, 4, 3, 3).contiguous(memory_format=_CL)]),
    "roll_no_shift": (lambda x: torch.roll(x, 3, 2), [_x(2, 4, 3, 3).contiguous(memory_format=_CL)]),
}


@pytest.mark.parametrize("case", sorted(_LAYOUT_CASES))
def test_channels_last_results_and_gradients_as_cpu(native, case):
    """Results and input gradients have CPU PyTorch's strides (channels_last kept where CPU's
    kernels keep it) and its values."""
    fn, inputs = _LAYOUT_CASES[case]
    results = {}
    for device in ("cpu", "neuron"):
        xs = [t.to(device).requires_grad_() for t in inputs]
        out = fn(*xs)
        grads = torch.autograd.grad(out, xs, torch.ones_like(out))
        results[device] = [out, *grads]
    for got, want in zip(results["neuron"], results["cpu"]):
        assert got.stride() == want.stride(), case
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
    assert torch_neuronx.get_fallback_ops() == []


def _mha_fast_path(t):
    """nn.MultiheadAttention's fast path (eval, no grad, batch_first, self-attention) with a key
    padding mask one column short."""
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval().to(t(0.0).device)
    q = t(_x(2, 5, 8))
    with torch.no_grad():
        return m(q, q, q, key_padding_mask=t(torch.zeros(2, 4, dtype=torch.bool)), need_weights=False)


def _error_of(call):
    try:
        out = call()
        torch.neuron.synchronize()  # errors found by a running kernel surface at the next synchronisation
        return None, out
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return e, None


@pytest.mark.parametrize("case", ["conv_transpose_output_padding", "conv_dilation_0", "bag_decreasing_offsets",
                                  "bag_first_offset", "bag_offset_past_end", "bag_index_range", "bag_last_offset_empty",
                                  "ctc_negative_input_length", "ctc_negative_target_length", "ctc_targets_too_long",
                                  "adaptive_avg_pool2d_empty_grad", "conv2d_weight_bf16", "conv2d_input_bf16",
                                  "conv1d_weight_f16", "conv3d_weight_f64", "conv_transpose2d_weight_bf16",
                                  "conv2d_module_bf16_no_bias", "layer_norm_weight_short", "layer_norm_weight_long",
                                  "layer_norm_bias_short", "layer_norm_weight_2d", "layer_norm_empty_shape",
                                  "multi_margin_weight_short", "multi_margin_weight_long", "mha_key_padding_mask"])
def test_nn_argument_errors_as_cpu(native, case):
    """Bad arguments raise CPU PyTorch's error type (and where ours is CPU's, its message), and
    the device stays usable."""
    def t(v, dtype=None):
        return (v if isinstance(v, torch.Tensor) else torch.tensor(v, dtype=dtype)).to(device)

    def bag(idx, off, **kw):
        return F.embedding_bag(t(idx), t(_x(10, 3)), t(off, torch.long), **kw)

    lp = _x(5, 1, 4).log_softmax(-1)
    calls = {
        "conv_transpose_output_padding": lambda: F.conv_transpose2d(t(_x(1, 1, 3, 3)), t(_x(1, 1, 3, 3)), stride=2,
                                                                    output_padding=2),
        "conv_dilation_0": lambda: F.conv2d(t(_x(1, 1, 3, 3)), t(_x(1, 1, 2, 2)), dilation=0),
        "bag_decreasing_offsets": lambda: bag([1, 2, 3, 4], [0, 3, 1]),
        "bag_first_offset": lambda: bag([1, 2, 3, 4], [1, 3]),
        "bag_offset_past_end": lambda: bag([1, 2, 3, 4], [0, 6]),
        "bag_index_range": lambda: bag([1, 2, 30, 4], [0, 2]),
        "bag_last_offset_empty": lambda: bag([1, 2], [], include_last_offset=True),
        "ctc_negative_input_length": lambda: F.ctc_loss(t(lp), t([[1, 2]]), t([-1]), t([2])),
        "ctc_negative_target_length": lambda: F.ctc_loss(t(lp), t([[1, 2]]), t([5]), t([-1])),
        "ctc_targets_too_long": lambda: F.ctc_loss(t(lp), t([1, 2, 3]), t([5]), t([2])),
        "adaptive_avg_pool2d_empty_grad": lambda: torch.ops.aten._adaptive_avg_pool2d_backward(t(torch.ones(1, 2, 0, 2)),
                                                                                               t(_x(1, 2, 4, 4))),
        # input and weight of different dtypes (no bias to catch it): an error, not the weight's
        # bytes read as the input's type
        "conv2d_weight_bf16": lambda: F.conv2d(t(_x(1, 2, 5, 5)), t(_x(3, 2, 3, 3).bfloat16())),
        "conv2d_input_bf16": lambda: F.conv2d(t(_x(1, 2, 5, 5).bfloat16()), t(_x(3, 2, 3, 3))),
        "conv1d_weight_f16": lambda: F.conv1d(t(_x(1, 2, 5)), t(_x(3, 2, 3).half())),
        "conv3d_weight_f64": lambda: F.conv3d(t(_x(1, 2, 4, 4, 4)), t(_x(3, 2, 2, 2, 2).double())),
        "conv_transpose2d_weight_bf16": lambda: F.conv_transpose2d(t(_x(1, 2, 5, 5)), t(_x(2, 3, 3, 3).bfloat16())),
        "conv2d_module_bf16_no_bias": lambda: torch.nn.Conv2d(2, 3, 3, bias=False).to(device).bfloat16()(
            t(_x(1, 2, 5, 5))),
        # parameters of the wrong shape: an error, not reads past their end
        "layer_norm_weight_short": lambda: F.layer_norm(t(_x(2, 3)), (3,), weight=t(_x(2))),
        "layer_norm_weight_long": lambda: F.layer_norm(t(_x(2, 3)), (3,), weight=t(_x(4))),
        "layer_norm_bias_short": lambda: F.layer_norm(t(_x(2, 3)), (3,), bias=t(_x(1))),
        "layer_norm_weight_2d": lambda: F.layer_norm(t(_x(2, 3)), (3,), weight=t(_x(1, 3))),
        "layer_norm_empty_shape": lambda: torch.native_layer_norm(t(_x(2, 3)), [], None, None, 1e-5),
        "multi_margin_weight_short": lambda: F.multi_margin_loss(t(_x(2, 3)), t([0, 1]), weight=t(_x(2))),
        "multi_margin_weight_long": lambda: F.multi_margin_loss(t(_x(2, 3)), t([0, 2]), weight=t(_x(5))),
        "mha_key_padding_mask": lambda: _mha_fast_path(t),
    }
    device = "cpu"
    want, _ = _error_of(calls[case])
    assert want is not None, case
    device = "neuron"
    got, _ = _error_of(calls[case])
    assert type(got) is type(want), (got, want)
    if case.startswith(("conv_dilation", "ctc", "adaptive", "bag_last", "layer_norm", "multi_margin", "mha")):
        assert str(got).splitlines()[0] == str(want).splitlines()[0]
    assert torch.equal((torch.ones(3, device="neuron") * 2).cpu(), torch.full((3,), 2.0))


@pytest.mark.parametrize("case", ["eye_uint16", "eye_m_uint32", "uint8_mask_setitem", "uint8_mask_index_put_one",
                                  "mm_dtypes", "matmul_dtypes", "bmm_dtypes", "baddbmm_dtypes", "var_mean_int",
                                  "std_mean_int"])
def test_dtype_errors_as_cpu(neuron, case):
    """Calls CPU refuses for their dtypes raise CPU's exception type and message on neuron
    (factories through the dtype gate, a uint8 mask with a one-element value as CPU's
    masked_fill_ path, the GEMM kernels' and var_mean's own checks)."""
    def calls(dev):
        f, i = torch.ones(3, 3, device=dev), torch.ones(3, 3, dtype=torch.int32, device=dev)
        x, m = torch.arange(5.0, device=dev), torch.tensor([1, 0, 1, 0, 0], dtype=torch.uint8, device=dev)
        return {
            "eye_uint16": lambda: torch.eye(2, 3, dtype=torch.uint16, device=dev),
            "eye_m_uint32": lambda: torch.eye(2, dtype=torch.uint32, device=dev),
            "uint8_mask_setitem": lambda: x.__setitem__(m, 7.0),
            "uint8_mask_index_put_one": lambda: x.index_put_((m,), torch.tensor([7.0], device=dev)),
            "mm_dtypes": lambda: torch.mm(f, i),
            "matmul_dtypes": lambda: i @ f,
            "bmm_dtypes": lambda: torch.bmm(f[None], i[None]),
            "baddbmm_dtypes": lambda: torch.baddbmm(f[None], f[None], i[None]),
            "var_mean_int": lambda: torch.var_mean(i),
            "std_mean_int": lambda: torch.std_mean(i, dim=0),
        }[case]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want, _ = _error_of(calls("cpu"))
        got, _ = _error_of(calls(neuron))
    assert want is not None and type(got) is type(want), (got, want)
    assert str(want).splitlines()[0] in str(got).splitlines()[0]


def test_is_set_to_compares_device_tensors(native):
    """Tensor.is_set_to compares storage, offset, sizes and strides (a metadata op: the CPU
    fallback's host copies would never be set to each other)."""
    x = torch.arange(6.0, device="neuron")
    y = torch.empty(0, device="neuron").set_(x)
    assert x.is_set_to(x) and x.is_set_to(x.view(6)) and y.is_set_to(x)
    assert not x.is_set_to(x[1:]) and not x.is_set_to(x.view(2, 3)) and not x.is_set_to(x.clone())


def test_max_min_dim_out_with_different_strides(native):
    """max/min over a dim into a non-contiguous values out= tensor beside a contiguous indices
    one: CPU's kernel takes any strides, so does neuron's (through temporaries)."""
    x = torch.randn(4, 6)
    for fn in (torch.max, torch.min):
        for keepdim in (True, False):
            shape = (4, 1) if keepdim else (4,)
            want_v, want_i = fn(x, 1, keepdim=keepdim)
            vals = torch.zeros(4, 2, device="neuron")[:, :1].reshape(shape) if keepdim else torch.zeros(4, 2, device="neuron")[:, 0]
            idx = torch.empty(0, dtype=torch.long, device="neuron")
            fn(x.to("neuron"), 1, keepdim=keepdim, out=(vals, idx))
            assert torch.equal(vals.cpu(), want_v) and torch.equal(idx.cpu(), want_i)


def test_multihead_attention_fast_path_weights_none_as_cpu(native):
    """need_weights=False: no attention weights (None), as CPU's fast path returns."""
    torch.manual_seed(0)
    m = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    q = _x(2, 5, 8)
    with torch.no_grad():
        out_cpu, w_cpu = m(q, q, q, need_weights=False)
        qn = q.to("neuron")  # one tensor as query, key and value: the self-attention fast path
        out, w = m.to("neuron")(qn, qn, qn, need_weights=False)
    assert w is None and w_cpu is None
    torch.testing.assert_close(out.cpu(), out_cpu, rtol=1e-4, atol=1e-5)
    _ran("aten::_native_multi_head_attention")


def test_nan_to_num_of_float64_stays_finite(native):
    """float64 computes in float32 on neuron: infinities become float32's largest finite values
    (CPU's float64 ones would overflow it), so the result is finite as the op promises."""
    x = torch.tensor([float("inf"), -float("inf"), float("nan"), 1.5], dtype=torch.float64)
    big = torch.finfo(torch.float32).max
    for kw in ({}, {"posinf": 1e300, "neginf": -1e300}):
        got = torch.nan_to_num(x.to("neuron"), **kw).cpu()
        assert got.dtype == torch.float64 and got.tolist() == [big, -big, 0.0, 1.5]
    _ran("aten::nan_to_num")


def test_relu_keeps_negative_zero_and_nan(native):
    """CPU PyTorch's relu leaves -0.0 and NaN as they are (only values below zero become 0)."""
    x = torch.tensor([-0.0, 0.0, -1.0, float("nan"), 2.0, -float("inf")])
    for fn in (torch.relu, F.relu6, lambda t: F.hardtanh(t, 0.0, 6.0)):
        want, got = _on_both(fn, x)
        assert torch.equal(torch.signbit(got.cpu()), torch.signbit(want)) and torch.equal(got.cpu().nan_to_num(), want.nan_to_num())


def test_nonzero_is_column_major_as_cpu(native):
    for x in (torch.tensor([[1, 0], [0, 3]]), torch.tensor([0, 1, 1]), torch.tensor(1), torch.tensor(0),
              torch.zeros(3, 0), torch.ones(2, 3, 4)):
        want, got = _on_both(torch.nonzero, x)
        assert got.stride() == want.stride() and torch.equal(got.cpu(), want)
        assert [t.stride() for t in torch.nonzero(x.to("neuron"), as_tuple=True)] == \
            [t.stride() for t in torch.nonzero(x, as_tuple=True)]
    _ran("aten::nonzero")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_trains_natively(native, dtype, dim):
    """nn.utils.parametrizations.weight_norm: its fused interface and backward run natively
    (they went to the CPU fallback), eager and compiled, with CPU's gradients."""
    import copy

    from torch.nn.utils.parametrizations import weight_norm

    torch.manual_seed(0)
    cpu = weight_norm(torch.nn.Linear(8, 4), dim=dim).to(dtype)
    x = _x(3, 8, dtype=dtype)
    cpu(x).pow(2).sum().backward()
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-5, atol=1e-6)
    for compiled in (False, True):
        m = copy.deepcopy(cpu).to("neuron")
        m.zero_grad()
        (torch.compile(m, backend="neuron") if compiled else m)(x.to("neuron")).pow(2).sum().backward()
        for (name, p), q in zip(m.named_parameters(), cpu.parameters()):
            torch.testing.assert_close(p.grad.cpu(), q.grad, **tol, msg=f"{name} compiled={compiled}")
    if dim is not None:
        _ran("aten::_weight_norm_interface")
        _ran("aten::_weight_norm_interface_backward")


def test_legacy_norm_overloads(native):
    x = _x(4, 8)
    cases = [lambda t: torch.ops.aten.norm.ScalarOpt_dim(t, 2, [1], True), lambda t: torch.ops.aten.norm.ScalarOpt_dim(t, None, [0]),
             lambda t: torch.ops.aten.norm.ScalarOpt_dim_dtype(t, 1, [1], False, dtype=torch.float64),
             lambda t: torch.ops.aten.norm.ScalarOpt_dim(t, float("inf"), [1]), lambda t: torch.norm_except_dim(t, 2, 1),
             lambda t: torch.ops.aten.norm.out(t, 3, [0], out=torch.empty(8, device=t.device))]
    for fn in cases:
        want, got = _on_both(fn, x)
        assert got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want)
    for t in (torch.ones(3, dtype=torch.long), torch.ones(3, dtype=torch.long).to("neuron")):
        with pytest.raises(RuntimeError, match="norm\\(\\): input dtype should be either floating point or complex"):
            torch.ops.aten.norm.ScalarOpt_dim(t, 2, [0])


def test_scalar_conversions_of_fill_where_masked_fill_as_cpu(native):
    """Out-of-range values: fill_ raises, except CPU's one-element path, which rounds 16-bit
    floats to inf (so where() with such a Python scalar gives inf); masked_fill_ raises."""
    calls = [lambda d: torch.empty(2, dtype=torch.half, device=d).fill_(1e10),
             lambda d: torch.empty(1, dtype=torch.half, device=d).fill_(1e10),
             lambda d: torch.empty(2, dtype=torch.bfloat16, device=d).fill_(-1e40),
             lambda d: torch.empty((), dtype=torch.bfloat16, device=d).fill_(-1e40),
             lambda d: torch.where(torch.tensor([True, False], device=d), torch.ones(2, dtype=torch.half, device=d), 1e10),
             lambda d: torch.ones(2, dtype=torch.half, device=d).masked_fill(torch.tensor([True, False], device=d), 7e4),
             lambda d: torch.ones(2, dtype=torch.int8, device=d).masked_fill(torch.tensor([True, False], device=d), 300),
             lambda d: torch.empty(2, dtype=torch.int8, device=d).fill_(300),
             lambda d: torch.empty(2, dtype=torch.float32, device=d).fill_(1e300)]
    for call in calls:
        try:
            want = call("cpu")
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match="without overflow"):
                call("neuron")
            assert "without overflow" in str(e)
        else:
            got = call("neuron")
            assert got.dtype == want.dtype and torch.equal(got.cpu(), want)


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128])
def test_float64_selections_and_fills_are_exact(native, dtype):
    """where, masked_fill and fill_ move float64 (and complex128) values without rounding them
    to float32 (selections and copies are exact; arithmetic runs as float32)."""
    x = torch.tensor([1e300, 1 + 1e-12, -2.5], dtype=torch.float64)
    big = 1e250
    if dtype == torch.complex128:
        x, big = torch.complex(x, x.flip(0)), complex(1e-12, 1e250)
    m = torch.tensor([True, False, True])
    calls = [lambda t, k: torch.where(k, t, t[0]), lambda t, k: torch.where(k, t, big),
             lambda t, k: t.masked_fill(k, big), lambda t, k: torch.where(k[:, None], t, t[:, None]),
             lambda t, k: torch.where(k[0], t, t.flip(0)), lambda t, k: torch.where(k, t.T, t[1:2]),
             lambda t, k: torch.full((2,), big, dtype=dtype, device=t.device),
             lambda t, k: torch.where(k, t.flip(0), t, out=torch.empty(3, dtype=dtype, device=t.device))]
    for call in calls:
        want, got = call(x, m), call(x.to("neuron"), m.to("neuron"))
        assert got.dtype == want.dtype and got.stride() == want.stride() and torch.equal(got.cpu(), want)


def test_linspace_infers_complex_from_its_endpoints(neuron):
    """No dtype and a complex endpoint: complex64 as CPU (through the visible fallback)."""
    got, want = torch.linspace(0, 1 + 1j, 5, device="neuron"), torch.linspace(0, 1 + 1j, 5)
    assert got.dtype == want.dtype == torch.complex64 and torch.equal(got.cpu(), want)


def test_half_inputs_into_a_wider_out_round_as_cpu(native):
    """16-bit inputs into a wider out= tensor: computed in the 16-bit dtype, then cast (CPU)."""
    a = torch.tensor([1.0, 2.0, 3.0]).half()
    b = a.bfloat16()
    for fn, x, dtype in ((lambda t, out: torch.div(t, 3, out=out), a, torch.float32),
                         (lambda t, out: torch.exp(t, out=out), a, torch.float32),
                         (lambda t, out: torch.add(t, t / 3, out=out), a, torch.float64),
                         (lambda t, out: torch.mul(t, 1.1, out=out), b, torch.float32)):
        want = fn(x, torch.empty(0, dtype=dtype))
        got = fn(x.to("neuron"), torch.empty(0, dtype=dtype, device="neuron"))
        assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("pool", [lambda t: F.max_pool1d(t[0], 2, return_indices=True),
                                  lambda t: F.max_pool2d(t, 2, return_indices=True),
                                  lambda t: F.max_pool2d(t.contiguous(memory_format=torch.channels_last), 2, 1,
                                                         return_indices=True),
                                  lambda t: F.max_pool3d(t[None], (1, 2, 2), return_indices=True),
                                  lambda t: F.adaptive_max_pool2d(t, 1, return_indices=True)])
def test_max_pools_take_the_last_nan_of_a_window(native, pool):
    """ATen's rule (val > max || isnan(val)): of several NaNs in a window the last one wins,
    so the index and the gradient go to it."""
    x = torch.tensor([[[[1.0, float("nan")], [float("nan"), 2.0]], [[float("nan"), 3.0], [4.0, float("nan")]]]])
    got, want = [], []
    for dev, res in (("cpu", want), ("neuron", got)):
        t = x.to(dev).detach().requires_grad_()
        y, i = pool(t)
        y.sum().backward()  # a NaN loss; the gradient of sum is ones
        res += [y.detach().cpu(), i.cpu(), t.grad.cpu()]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16bit_ops_read_python_numbers_as_cpu(native, dtype):
    """ATen's CPU kernels read a Python number (and add/sub's alpha) rounded to a 16-bit
    tensor's dtype, except mul and the divisions, which read it in float32: equal bits, eager
    and compiled."""
    def f(t, u):
        return (t + 1.3, t - 0.1, 0.7 - t, torch.add(t, u, alpha=1.3), torch.sub(t, u, alpha=0.1), t % 0.3,
                torch.fmod(t, 0.7), t < 0.1, t >= 0.1, t == 0.1, t * 1.3, t / 0.7, t // 0.3, torch.rsub(t, 0.7, alpha=1.3),
                torch.where(t > 0, t, 0.1), t.clamp(0.1, 0.7))
    g = torch.Generator().manual_seed(0)
    x, y = (torch.randn(2048, generator=g) * 3).to(dtype), (torch.randn(2048, generator=g) * 3).to(dtype)
    x[:4] = torch.tensor([0.1, 1.3, 0.7, 0.3]).to(dtype)
    want = f(x, y)
    eager = f(x.to("neuron"), y.to("neuron"))
    compiled = torch.compile(f, backend="neuron")(x.to("neuron"), y.to("neuron"))
    for w, e, c in zip(want, eager, compiled):
        assert torch.equal(e.cpu(), w) and torch.equal(c.cpu(), w)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.int64, torch.uint8, torch.bool])
def test_deterministic_fill_of_uninitialized_memory_as_cpu(native, dtype):
    """torch.use_deterministic_algorithms + torch.utils.deterministic.fill_uninitialized_memory:
    new memory from empty/empty_strided/empty_like and what resize_ adds holds CPU's values
    (NaN, an integer dtype's maximum, True)."""
    before = (torch.are_deterministic_algorithms_enabled(), torch.utils.deterministic.fill_uninitialized_memory)
    torch.use_deterministic_algorithms(True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        def made(device):
            grown = torch.zeros(3, dtype=dtype, device=device)
            grown.resize_(7)
            return [torch.empty(4, dtype=dtype, device=device), torch.empty_strided((2, 3), (1, 2), dtype=dtype, device=device),
                    torch.empty_like(grown), grown]
        for got, want in zip(made(native), made("cpu")):
            assert got.stride() == want.stride()
            torch.testing.assert_close(got.cpu(), want, equal_nan=True, rtol=0, atol=0)
    finally:
        torch.use_deterministic_algorithms(before[0])
        torch.utils.deterministic.fill_uninitialized_memory = before[1]


@pytest.mark.parametrize("target", [[2], 2], ids=["target_1d", "target_0d"])
def test_multi_margin_loss_per_sample_shape_as_cpu(native, target):
    """A 1-D input's unreduced loss has the target's shape: (1,) for a (1,) target, () for a 0-dim one."""
    x, t = _x(5), torch.tensor(target)
    want = F.multi_margin_loss(x.requires_grad_(), t, reduction="none")
    xn = x.detach().to("neuron").requires_grad_()
    got = F.multi_margin_loss(xn, t.to("neuron"), reduction="none")
    assert got.shape == want.shape
    torch.testing.assert_close(got.cpu(), want.detach())
    (g_want,) = torch.autograd.grad(want.sum(), x)
    (g_got,) = torch.autograd.grad(got.sum(), xn)
    torch.testing.assert_close(g_got.cpu(), g_want)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_one_element_operands_of_16bit_ops_cast_as_cpu(native, dtype):
    """A float32 (or int64) 0-dim tensor on the device beside a 16-bit tensor is cast to the
    16-bit common dtype first, as CPU's TensorIterator casts inputs (1.5001 is 1.5 in bfloat16:
    x == y holds where x is 1.5), except the second operand of mul and div, which CPU's kernels
    read unrounded. Bit-exact against CPU, both operand orders."""
    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4000, generator=g) * 3).to(dtype)
    x[:8] = 1.5
    ops = [torch.add, torch.sub, torch.mul, torch.div, torch.eq, torch.lt, torch.ge, torch.pow, torch.fmod]
    for y in (torch.tensor(1.5001), torch.tensor(-0.3337), torch.tensor(257)):
        for f in ops:
            for a, b in ((x, y), (y, x)):
                want = f(a, b)
                got = f(a.to("neuron"), b.to("neuron"))
                assert got.dtype == want.dtype
                torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_fused_multiply_add_forms_as_cpus_vectorised_kernels(native, dtype):
    """add/sub with alpha, addcmul, addcdiv and lerp give CPU's bits on the elements CPU's
    vectorised kernels compute (their fused multiply-adds: 20-30 % of float32 elements were
    1 ulp off with the rounded-twice forms). Lengths are multiples of 64 elements, which CPU
    computes without a scalar tail on its AVX2 and AVX-512 builds."""
    if torch.backends.cpu.get_cpu_capability() not in ("AVX2", "AVX512"):
        pytest.skip("CPU PyTorch runs its kernels without FMA at capability "
                    f"{torch.backends.cpu.get_cpu_capability()}: other bits by design")
    g = torch.Generator().manual_seed(2)
    a, b, c = (torch.randn(64 * 500, generator=g).to(dtype) for _ in range(3))
    w = torch.rand(64 * 500, generator=g).to(dtype)
    cases = [lambda a, b, c: torch.add(a, b, alpha=0.37), lambda a, b, c: torch.sub(a, b, alpha=1.7),
             lambda a, b, c: torch.addcmul(a, b, c, value=0.37), lambda a, b, c: torch.addcdiv(a, b, c, value=-0.61),
             lambda a, b, c: torch.lerp(a, b, 0.3), lambda a, b, c: torch.lerp(a, b, 0.8),
             lambda a, b, c: torch.lerp(a, b, w.to(a.device))]
    for k, f in enumerate(cases):
        want = f(a, b, c)
        got = f(a.to(native), b.to(native), c.to(native))
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0, msg=lambda m, k=k: f"case {k}: {m}")


# ---------------------------------------------------------------- vectorised transcendentals

_SPECIAL = [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1.0, -1.0, 0.5, -0.5, 2.0, -2.0, 1e-45, -1e-45,
            1e-30, 3.4028234663852886e38, -3.4028234663852886e38, 1.0000001, -1.0000001, 0.99999994, 100.0, -100.0]


@pytest.mark.parametrize("op", ["atan", "asin", "acos", "sinh", "cosh", "exp2", "log2", "log10", "asinh", "acosh",
                                "atanh"])
def test_transcendentals_as_cpu(native, op):
    """The branch-free float32 forms (vnc/ew_scalar.h): special values (signed zeros,
    infinities, NaN, the domain's edges) exactly as CPU, other values within a few ulp."""
    f = getattr(torch, op)
    sp = torch.tensor(_SPECIAL)
    got, want = f(sp.to("neuron")).cpu(), f(sp)
    edge = ~torch.isfinite(sp) | (sp == 0) | (sp.abs() == 1) | ~torch.isfinite(want)
    torch.testing.assert_close(got[edge], want[edge], rtol=0, atol=0, equal_nan=True)
    num = ~want.isnan()  # a NaN's sign bit is not specified
    assert torch.equal(got[num].signbit(), want[num].signbit())
    torch.testing.assert_close(got, want, rtol=4e-7, atol=0, equal_nan=True)
    x = _x(100003) * 3
    x = x.tanh() * 0.999 if op in ("asin", "acos", "atanh") else (x.abs() + 1 if op == "acosh" else x)
    x = x.abs() + 1e-3 if op in ("log2", "log10") else x
    torch.testing.assert_close(f(x.to("neuron")).cpu(), f(x), rtol=4e-7, atol=1e-30, equal_nan=True)
    _ran(f"aten::{op}")


def test_erfinv_as_cpu(native):
    """erfinv (Giles' double-precision approximation, within 1.1 ulp of the exact value):
    +-1, beyond, NaN and zeros exactly as CPU, other values within a few ulp."""
    sp = torch.tensor([0.0, -0.0, 1.0, -1.0, 1.0000001, -2.0, float("inf"), float("nan"), 1e-45, -1e-45])
    got, want = torch.erfinv(sp.to("neuron")).cpu(), torch.erfinv(sp)
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(got[~want.isnan()].signbit(), want[~want.isnan()].signbit())
    x = _x(100003).tanh() * 0.9999
    torch.testing.assert_close(torch.erfinv(x.to("neuron")).cpu(), torch.erfinv(x), rtol=4e-7, atol=1e-30)
    _ran("aten::erfinv")


def test_atan2_and_hypot_as_cpu(native):
    """atan2 and hypot over every pair of special values (C's quadrant, signed-zero and
    infinity rules) exactly as CPU; random pairs within a few ulp."""
    sp = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1.0, -1.0, 3.0, -3e38, 1e-45])
    a, b = sp.repeat_interleave(len(sp)), sp.repeat(len(sp))
    for f in (torch.atan2, torch.hypot):
        got, want = f(a.to("neuron"), b.to("neuron")).cpu(), f(a, b)
        edge = (a == 0) | (b == 0) | ~torch.isfinite(a) | ~torch.isfinite(b)
        torch.testing.assert_close(got[edge], want[edge], rtol=0, atol=0, equal_nan=True)
        num = ~want.isnan()
        assert torch.equal(got[num].signbit(), want[num].signbit())
        torch.testing.assert_close(got, want, rtol=4e-7, atol=0, equal_nan=True)
        x, y = _x(100003, seed=1) * 10, _x(100003, seed=2) * 10
        torch.testing.assert_close(f(x.to("neuron"), y.to("neuron")).cpu(), f(x, y), rtol=4e-7, atol=1e-30)
    _ran("aten::atan2")
    _ran("aten::hypot")
