"""trace, F.unfold / F.fold (aten::im2col / col2im), torch.cdist (_cdist_forward /
_cdist_backward), torch.arange's sizing, reductions with a dtype=, the clamp-like activations'
special values and SyncBatchNorm's ops (batch_norm_stats & co., against their float64
definitions) run natively and match CPU PyTorch: values, gradients (torch.autograd, which
reaches each op's backward: trace_backward's composition, col2im for im2col and the reverse,
_cdist_backward for both operands), non-contiguous, empty and batched inputs, and CPU's
exceptions for bad arguments."""
import pytest
import torch

import torch_neuronx
from conftest import run_py

F = torch.nn.functional
TOL = dict(rtol=1e-5, atol=1e-5)


def _r(*shape, seed=0, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def _check(fn, *inputs, tol=TOL, grad=True):
    """fn on CPU copies and on neuron copies of `inputs` (same dtype): result, and the
    gradients of every floating input for a fixed weighting of the result."""
    leaves_c = [x.clone().requires_grad_(grad and x.is_floating_point()) for x in inputs]
    leaves_d = [x.to("neuron").requires_grad_(grad and x.is_floating_point()) for x in inputs]
    yc, yd = fn(*leaves_c), fn(*leaves_d)
    assert yd.device.type == "neuron" and yd.dtype == yc.dtype and yd.shape == yc.shape
    torch.testing.assert_close(yd.detach().cpu(), yc.detach(), equal_nan=True, **tol)
    if not grad or not yc.requires_grad:
        return yc, yd
    w = torch.linspace(-1, 1, yc.numel()).reshape(yc.shape).to(yc.dtype)
    (yc * w).sum().backward()
    (yd * w.to("neuron")).sum().backward()
    for c, d in zip(leaves_c, leaves_d):
        if c.requires_grad:
            torch.testing.assert_close(d.grad.cpu(), c.grad, equal_nan=True, **tol)
    return yc, yd


def _same_error(fn, *inputs):
    """fn raises on CPU and on neuron the same exception type and first message line."""
    with pytest.raises(Exception) as cpu_err:
        fn(*inputs)
    with pytest.raises(type(cpu_err.value)) as err:
        fn(*[x.to("neuron") for x in inputs])
        torch.neuron.synchronize()
    assert str(err.value).splitlines()[0] == str(cpu_err.value).splitlines()[0]


def _executed(op):
    return op in torch_neuronx.get_executed_ops()


# ------------------------------------------------------------------------------ trace

@pytest.mark.parametrize("make", [
    lambda: _r(5, 5), lambda: _r(3, 7), lambda: _r(7, 3),
    lambda: _r(6, 8)[::2, 1::3],                 # strided view
    lambda: _r(4, 6).t(),                        # transposed
    lambda: _r(0, 3), lambda: _r(3, 0), lambda: _r(1, 1),
], ids=["square", "wide", "tall", "strided", "transposed", "empty-rows", "empty-cols", "one"])
def test_trace_and_gradient_match_cpu(native, make):
    _check(torch.trace, make())


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int8,
                                   torch.uint8, torch.int64])
def test_trace_dtypes_match_cpu(native, dtype):
    x = (_r(6, 5) * 10).to(dtype)
    tol = {} if dtype.is_floating_point else dict(rtol=0, atol=0)
    yc, yd = _check(torch.trace, x, grad=False, tol=tol)
    assert yd.dtype == yc.dtype  # integers sum to int64, as on CPU


def test_trace_complex_matches_cpu(native):
    _check(torch.trace, torch.complex(_r(4, 4), _r(4, 4, seed=1)))


def test_trace_refuses_what_cpu_refuses():
    for x in (_r(3), _r(2, 2, 2), torch.ones(3, 3, dtype=torch.bool)):
        _same_error(torch.trace, x)


def test_trace_is_native(native):
    torch_neuronx.clear_op_tracking()
    torch.trace(_r(3, 3).to("neuron")).item()
    assert _executed("aten::sum.dim_IntList") or _executed("aten::sum")


# ------------------------------------------------------------------------------ unfold / fold

UNFOLD_CASES = [  # input shape, kernel_size, dilation, padding, stride
    ((2, 3, 7, 6), (3, 2), 1, 0, 1),
    ((2, 3, 7, 6), (3, 3), (2, 1), (1, 2), (2, 3)),
    ((3, 9, 8), 2, 1, 1, 2),                     # unbatched
    ((1, 1, 5, 5), 5, 1, 0, 1),                  # one block
    ((0, 2, 5, 5), 3, 1, 0, 1),                  # empty batch
    ((2, 4, 4, 9), (1, 4), (1, 2), 0, (1, 1)),
]


@pytest.mark.parametrize("shape,k,d,p,s", UNFOLD_CASES)
def test_unfold_and_gradient_match_cpu(native, shape, k, d, p, s):
    torch_neuronx.clear_op_tracking()
    _check(lambda x: F.unfold(x, k, dilation=d, padding=p, stride=s), _r(*shape))
    assert _executed("aten::im2col") and (shape[0] == 0 or _executed("aten::col2im"))


@pytest.mark.parametrize("shape,k,d,p,s", UNFOLD_CASES)
def test_fold_and_gradient_match_cpu(native, shape, k, d, p, s):
    """fold(unfold(x)) shapes: overlapping blocks sum, gradient is unfold."""
    cols = F.unfold(_r(*shape), k, dilation=d, padding=p, stride=s)
    torch_neuronx.clear_op_tracking()
    _check(lambda c: F.fold(c, shape[-2:], k, dilation=d, padding=p, stride=s), _r(*cols.shape, seed=3))
    assert _executed("aten::col2im") and (shape[0] == 0 or _executed("aten::im2col"))


def test_unfold_fold_non_contiguous_and_channels_last(native):
    x = _r(2, 3, 9, 10)[:, :, ::2, 1:]
    _check(lambda t: F.unfold(t, 2, padding=1), x)
    _check(lambda t: F.unfold(t, 3), _r(2, 3, 6, 6).to(memory_format=torch.channels_last))
    c = _r(2, 12, 30).transpose(1, 2).contiguous().transpose(1, 2)  # column-major blocks
    _check(lambda t: F.fold(t, (6, 7), 2), c)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16])
def test_unfold_fold_16_bit_and_float64(native, dtype):
    """unfold copies (exact); fold's sums run in float32, rounded once (CPU adds in the 16-bit
    type, one rounding per term: a few units in the last place apart)."""
    x = _r(2, 3, 6, 5, dtype=dtype)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype in (torch.float16, torch.bfloat16) else TOL
    assert torch.equal(F.unfold(x.to("neuron"), 3, padding=1).cpu(), F.unfold(x, 3, padding=1))
    _check(lambda t: F.unfold(t, 3, padding=1), x, tol=tol)
    c = _r(2, 12, 42, dtype=dtype)
    _check(lambda t: F.fold(t, (5, 6), 2, padding=1, stride=1), c, tol=tol)


def test_unfold_fold_out_variants(native):
    x = _r(2, 3, 6, 5)
    aten = torch.ops.aten
    for out_shape in [(0,), (2, 12, 20), (5, 5)]:
        oc, od = torch.empty(out_shape), torch.empty(out_shape, device="neuron")
        aten.im2col.out(x, [2, 2], [1, 1], [0, 0], [1, 1], out=oc)
        aten.im2col.out(x.to("neuron"), [2, 2], [1, 1], [0, 0], [1, 1], out=od)
        torch.testing.assert_close(od.cpu(), oc)
    c = _r(2, 12, 20)
    strided = torch.empty(2, 3, 6, 10, device="neuron")[..., ::2]  # right shape, other strides
    aten.col2im.out(c.to("neuron"), [6, 5], [2, 2], [1, 1], [0, 0], [1, 1], out=strided)
    torch.testing.assert_close(strided.cpu(), aten.col2im(c, [6, 5], [2, 2], [1, 1], [0, 0], [1, 1]))


def test_unfold_fold_bool_native(native):
    """bool: unfold copies, fold's overlapping blocks combine as ATen's bool += (a logical or)."""
    x = torch.rand(2, 2, 5, 4, generator=torch.Generator().manual_seed(0)) > 0.5
    assert torch.equal(F.unfold(x.to("neuron"), 2, padding=1).cpu(), F.unfold(x, 2, padding=1))
    c = torch.rand(2, 8, 12, generator=torch.Generator().manual_seed(1)) > 0.7
    assert torch.equal(F.fold(c.to("neuron"), (4, 5), 2).cpu(), F.fold(c, (4, 5), 2))


def test_unfold_fold_complex_take_the_visible_fallback():
    torch_neuronx.clear_op_tracking()
    x = torch.complex(_r(1, 2, 4, 4), _r(1, 2, 4, 4, seed=1))
    assert torch.equal(F.unfold(x.to("neuron"), 2).cpu(), F.unfold(x, 2))
    assert "aten::im2col" in torch_neuronx.get_fallback_ops()


@pytest.mark.parametrize("call,shape", [
    (lambda x: F.unfold(x, 0), (1, 2, 4, 4)),
    (lambda x: F.unfold(x, 2, stride=0), (1, 2, 4, 4)),
    (lambda x: F.unfold(x, 2, dilation=0), (1, 2, 4, 4)),
    (lambda x: F.unfold(x, 2, padding=-1), (1, 2, 4, 4)),
    (lambda x: F.unfold(x, 5), (1, 2, 4, 4)),
    (lambda x: torch.ops.aten.im2col(x, [2], [1, 1], [0, 0], [1, 1]), (1, 2, 4, 4)),
    (lambda x: torch.ops.aten.im2col(x, [2, 2], [1, 1], [0, 0], [1, 1]), (2, 4, 4)[:2]),
    (lambda x: torch.ops.aten.im2col(x, [2, 2], [1, 1], [0, 0], [1, 1]), (1, 0, 4, 4)),
    (lambda x: torch.ops.aten.im2col(x.long(), [2, 2], [1, 1], [0, 0], [1, 1]), (1, 2, 4, 4)),
    (lambda x: F.unfold(x.int(), 5), (1, 2, 4, 4)),                  # the shape check comes first
    (lambda x: F.fold(x.to(torch.uint8), (4, 4), 2), (1, 8, 9)),
    (lambda x: F.fold(x, (4, 4), 2), (1, 7, 9)),
    (lambda x: F.fold(x, (4, 4), 2), (1, 8, 8)),
    (lambda x: F.fold(x, (4, 4), 0), (1, 8, 9)),
    (lambda x: F.fold(x, (4, 4), 2, stride=0), (1, 8, 9)),
    (lambda x: F.fold(x, (1, 1), 2), (1, 8, 9)),
    (lambda x: torch.ops.aten.col2im(x, [4], [2, 2], [1, 1], [0, 0], [1, 1]), (1, 8, 9)),
    (lambda x: torch.ops.aten.col2im(x, [4, 4], [2, 2], [1, 1], [0, 0], [1, 1]), (8,)),
], ids=lambda v: str(v) if isinstance(v, tuple) else "")
def test_unfold_fold_refuse_what_cpu_refuses(call, shape):
    torch_neuronx.clear_op_tracking()
    _same_error(call, _r(*shape))
    assert torch_neuronx.get_fallback_ops() == []  # refused natively, as CPU refuses


# ------------------------------------------------------------------------------ cdist

P_VALUES = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf")]


def _with_ties(*shape, seed=0):
    """Rows with repeated coordinates, so zero differences and zero distances occur."""
    return torch.randint(-2, 3, shape, generator=torch.Generator().manual_seed(seed)).float()


@pytest.mark.parametrize("p", P_VALUES)
@pytest.mark.parametrize("mode", [None, "use_mm_for_euclid_dist", "donot_use_mm_for_euclid_dist"])
def test_cdist_and_gradients_match_cpu(native, p, mode):
    kw = {} if mode is None else dict(compute_mode=mode)
    _check(lambda a, b: torch.cdist(a, b, p, **kw), _r(5, 4), _r(7, 4, seed=1), tol=dict(rtol=1e-4, atol=1e-4))


@pytest.mark.parametrize("p", P_VALUES)
def test_cdist_gemm_threshold_and_batches(native, p):
    """More than 25 rows: p = 2 takes the GEMM form (as CPU's use_mm_for_euclid_dist rule);
    batch dims broadcast."""
    tol = dict(rtol=1e-4, atol=1e-4)
    _check(lambda a, b: torch.cdist(a, b, p), _r(30, 3), _r(4, 3, seed=1), tol=tol)
    _check(lambda a, b: torch.cdist(a, b, p), _r(2, 1, 6, 5), _r(3, 4, 5, seed=1), tol=tol)


@pytest.mark.parametrize("p", P_VALUES)
def test_cdist_zero_distances_and_ties(native, p):
    a, b = _with_ties(6, 3), _with_ties(5, 3, seed=1)
    b[0] = a[0]  # a zero distance
    _check(lambda x, y: torch.cdist(x, y, p, compute_mode="donot_use_mm_for_euclid_dist"), a, b,
           tol=dict(rtol=1e-4, atol=1e-4))


def test_cdist_odd_inputs(native):
    tol = dict(rtol=1e-4, atol=1e-4)
    for p in (1.0, 2.0, 3.0):
        _check(lambda a, b: torch.cdist(a, b, p), _r(8, 5)[::2, 1:], _r(4, 3).t(), tol=tol)   # non-contiguous
        _check(lambda a, b: torch.cdist(a, b, p), _r(0, 3), _r(4, 3), tol=tol)                 # empty
        _check(lambda a, b: torch.cdist(a, b, p), _r(3, 0), _r(4, 0), tol=tol)                 # no coordinates
        _check(lambda a, b: torch.cdist(a, b, p), _r(0, 3, 4), _r(1, 2, 4), tol=tol)           # empty batch
    _check(lambda a, b: torch.cdist(a, b, 1.0), _r(3, 4, dtype=torch.float64), _r(2, 4, dtype=torch.float64))


def test_cdist_ops_directly(native):
    """_cdist_forward with each compute mode, and _cdist_backward, as autograd calls them."""
    aten = torch.ops.aten
    a, b = _r(2, 5, 3), _r(2, 4, 3, seed=1)
    for p in P_VALUES:
        for mode in (None, 0, 1, 2):
            dc = aten._cdist_forward(a, b, p, mode)
            dd = aten._cdist_forward(a.to("neuron"), b.to("neuron"), p, mode)
            torch.testing.assert_close(dd.cpu(), dc, rtol=1e-4, atol=1e-4)
        g = _r(2, 5, 4, seed=2).transpose(1, 2).contiguous().transpose(1, 2)  # non-contiguous grad
        dc = aten._cdist_forward(a, b, p, 2)
        expected = aten._cdist_backward(g, a, b, p, dc)
        actual = aten._cdist_backward(g.to("neuron"), a.to("neuron"), b.to("neuron"), p, dc.to("neuron"))
        torch.testing.assert_close(actual.cpu(), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cdist_16_bit_as_cpu(dtype):
    """CPU computes 16-bit cdist only through the GEMM form (p = 2); the direct kernel raises."""
    a, b = _r(30, 4, dtype=dtype), _r(6, 4, seed=1, dtype=dtype)
    torch_neuronx.clear_op_tracking()
    torch.testing.assert_close(torch.cdist(a.to("neuron"), b.to("neuron")).cpu(), torch.cdist(a, b),
                               rtol=2e-2, atol=2e-2)
    assert torch_neuronx.get_fallback_ops() == []
    _same_error(lambda x, y: torch.cdist(x, y, 1.0), a, b)
    _same_error(lambda x, y: torch.cdist(x, y, 2.0, compute_mode="donot_use_mm_for_euclid_dist"), a, b)


@pytest.mark.parametrize("call,shapes", [
    (lambda a, b: torch.cdist(a, b, -1.0), ((3, 4), (5, 4))),
    (lambda a, b: torch.cdist(a, b), ((3, 4), (5, 3))),
    (lambda a, b: torch.ops.aten._cdist_forward(a, b, 1.0, 3), ((3, 4), (5, 4))),
    (lambda a, b: torch.ops.aten._cdist_forward(a, b, 1.0, None), ((4,), (5, 4))),
    (lambda a, b: torch.ops.aten._cdist_forward(a.int(), b.int(), 1.0, None), ((3, 4), (5, 4))),
    (lambda a, b: torch.ops.aten._cdist_forward(a.double(), b, 1.0, None), ((3, 4), (5, 4))),
    (lambda a, b: torch.cdist(a, b), ((2, 3, 4), (3, 5, 4))),
    (lambda a, b: torch.cdist(a.int(), b.int()), ((3, 4), (5, 4))),
    (lambda a, b: torch.cdist(a.to(torch.complex64), b.to(torch.complex64)), ((3, 4), (5, 4))),
    (lambda a, b: torch.cdist(a.bool(), b.bool(), 1.0), ((3, 4), (5, 4))),
    (lambda a, b: torch.ops.aten._cdist_backward(a[:, :2].half(), a.half(), b[:2].half(), 1.0, a[:, :2].half()),
     ((3, 4), (5, 4))),
    (lambda a, b: torch.ops.aten._cdist_backward(a[:, :2].long(), a.long(), b[:2].long(), 1.0, a[:, :2].long()),
     ((3, 4), (5, 4))),
])
def test_cdist_refuses_what_cpu_refuses(call, shapes):
    torch_neuronx.clear_op_tracking()
    _same_error(call, *[_r(*s) for s in shapes])
    assert torch_neuronx.get_fallback_ops() == []  # refused natively, as CPU refuses


# ------------------------------------------------------------------------------ arange

@pytest.mark.parametrize("args,dtype", [
    ((0, 2**60 + 1, 2**59), torch.int64),               # int64 bounds past 2**53: sized exactly
    ((2**62, 2**62 + 2**53 + 1, 2**53), torch.int64),
    ((-7, 2**55, 2**52 + 3), torch.int64),
    ((5, -2**54, -(2**51) - 1), torch.int64),
    ((0, 10, 3), torch.int32),
    ((0.5, 2.0, 0.25), torch.float32),
    ((1.0, 0.0, -0.3), torch.float32),
    ((3, 3, 1), torch.int64),
])
def test_arange_length_and_values_match_cpu(native, args, dtype):
    expected = torch.arange(*args, dtype=dtype)
    got = torch.arange(*args, dtype=dtype, device=native).cpu()
    assert got.dtype == expected.dtype and torch.equal(got, expected)


@pytest.mark.parametrize("args,dtype", [
    ((0, 1, 0.1), torch.int64),                         # the step truncates to 0: ValueError
    ((0, 10, -1), torch.int64),                         # the bounds disagree with the step's sign
    ((0.0, 1.0, 0.0), torch.float32),
    ((0.0, float("inf"), 1.0), torch.float32),
    ((-2**62, 2**62, 2**61 + 1), torch.int64),          # the length overflows
])
def test_arange_refuses_what_cpu_refuses(args, dtype):
    torch_neuronx.clear_op_tracking()
    with pytest.raises(Exception) as cpu_err:
        torch.arange(*args, dtype=dtype)
    with pytest.raises(type(cpu_err.value)) as err:
        torch.arange(*args, dtype=dtype, device="neuron")
    assert str(err.value).splitlines()[0] == str(cpu_err.value).splitlines()[0]
    assert torch_neuronx.get_fallback_ops() == []


# ------------------------------------------------------------------------------ sum/mean/prod dtype=

@pytest.mark.parametrize("src,dst", [(torch.float32, torch.float16), (torch.float32, torch.bfloat16),
                                     (torch.bfloat16, torch.float16), (torch.float16, torch.float32),
                                     (torch.float32, torch.float64), (torch.float32, torch.int64),
                                     (torch.int32, torch.float16), (torch.int64, torch.int8)])
@pytest.mark.parametrize("op", [torch.sum, torch.mean, torch.prod])
def test_reduction_dtype_casts_the_input_first_as_cpu(native, op, src, dst):
    """ATen casts the input to `dtype` before reducing: a narrowing cast rounds each element
    (CPU's mean into float16/bfloat16 sums the input in float32 instead)."""
    if op is torch.mean and not dst.is_floating_point:
        return  # mean refuses integral dtypes (test_native_coverage covers its error)
    x = (_r(50, 60, seed=1) * (2 if src.is_floating_point else 40)).to(src)
    if op is torch.prod:
        x = x[:, :6] / (4 if src.is_floating_point else 20)
    expected = op(x, 1, dtype=dst)
    got = op(x.to(native), 1, dtype=dst).cpu()
    assert got.dtype == expected.dtype
    # CPU multiplies float16/bfloat16 products in the 16-bit type, rounding each of the 5 steps
    # (the device in float32): a few ulps
    tol = dict(rtol=0, atol=0) if not dst.is_floating_point else \
        dict(rtol=1e-6, atol=1e-6) if dst in (torch.float32, torch.float64) else \
        dict(rtol=4 * torch.finfo(dst).eps, atol=0) if op is torch.prod else dict(rtol=0, atol=0)
    torch.testing.assert_close(got, expected, **tol)


# ------------------------------------------------------------------------------ clamp-like activations

SPECIAL = [float("nan"), float("inf"), -float("inf"), -4.0, -3.0, -1.0, -0.0, 0.0, 0.5, 2.9999, 3.0, 6.0, 7.5]


@pytest.mark.parametrize("name,fn", [
    ("hardsigmoid", F.hardsigmoid), ("hardswish", F.hardswish), ("relu6", F.relu6), ("hardtanh", F.hardtanh),
    ("clamp", lambda t: t.clamp(-1.0, 2.0)), ("clamp_min", lambda t: t.clamp_min(0.25)),
    ("clamp_max", lambda t: t.clamp_max(0.25)), ("clamp NaN bound", lambda t: t.clamp(float("nan"), 1.0)),
    ("leaky_relu", lambda t: F.leaky_relu(t, 0.1)), ("threshold", lambda t: F.threshold(t, 0.5, -2.0)),
    ("nan_to_num", lambda t: torch.nan_to_num(t, 1.0, 2.0, -3.0)),
])
def test_clamp_like_activations_special_values_match_cpu(native, name, fn):
    """NaN, infinities, signed zeros and the boundaries, in a vector long enough for the
    vectorised loop and its tail: bit for bit as CPU (hardsigmoid(NaN) is NaN)."""
    x = torch.tensor(SPECIAL * 7)
    expected, got = fn(x), fn(x.to(native)).cpu()
    assert torch.equal(expected.isnan(), got.isnan())
    assert torch.equal(torch.nan_to_num(expected).view(torch.int32), torch.nan_to_num(got).view(torch.int32))


# ------------------------------------------------------------------------------ batch norm, channels_last eval

@pytest.mark.parametrize("dims", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_eval_channels_last_matches_cpu(native, dims, dtype, affine):
    """Evaluation of a channels_last input runs in its own layout (ATen's x * alpha + beta):
    CPU's values and strides."""
    import copy
    bn = (torch.nn.BatchNorm2d if dims == 2 else torch.nn.BatchNorm3d)(5, affine=affine).eval()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        bn.running_mean.copy_(torch.rand(5, generator=g) * 2 - 1)
        bn.running_var.copy_(torch.rand(5, generator=g) * 1.5 + 0.5)
        if affine:
            bn.weight.copy_(torch.rand(5, generator=g) * 4 - 2)
            bn.bias.copy_(torch.rand(5, generator=g) * 2 - 1)
    fmt = torch.channels_last if dims == 2 else torch.channels_last_3d
    x = _r(*((3, 5, 6, 7) if dims == 2 else (2, 5, 3, 4, 6)), seed=4).to(dtype).contiguous(memory_format=fmt)
    expected = copy.deepcopy(bn).to(dtype)(x)
    torch_neuronx.clear_op_tracking()
    got = copy.deepcopy(bn).to(dtype).to(native)(x.to(native))
    assert got.dtype == expected.dtype and got.stride() == expected.stride()
    eps = torch.finfo(torch.float32 if dtype == torch.float64 else dtype).eps
    torch.testing.assert_close(got.cpu(), expected, rtol=4 * eps, atol=4 * eps)
    assert "aten::addcmul" in torch_neuronx.get_executed_ops()  # the in-layout form, not the NCHW kernel


# ------------------------------------------------------------------------------ SyncBatchNorm's ops
# batch_norm_stats, batch_norm_gather_stats(_with_counts), batch_norm_elemt(.out),
# batch_norm_backward_reduce, batch_norm_backward_elemt: ATen has CUDA kernels only (no CPU
# kernel to compare with), so the expected values are their definitions in float64 (CUDA's
# semantics; tests/test_distributed.py runs nn.SyncBatchNorm itself on 2 ranks).

BN_SHAPES = {"NC": (6, 3), "NCL": (4, 3, 5), "NCHW": (3, 4, 5, 2), "NCDHW": (2, 3, 2, 3, 2)}
BN_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _bn_tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype in (torch.float32, torch.float64) else \
        dict(rtol=2 * torch.finfo(dtype).eps, atol=2 * torch.finfo(dtype).eps)


def _bn_dims(x):
    return [0, *range(2, x.dim())]


def _bn_chan(t, x):
    return t.reshape(1, -1, *([1] * (x.dim() - 2))).double()


def _bn_stats_ref(x, eps):
    var, mean = torch.var_mean(x.double(), _bn_dims(x), correction=0)
    return mean, (var + eps).rsqrt()


def _bn_input(shape, dtype, seed=0):
    return (_r(*shape, seed=seed) * 2 + 0.5).to(dtype)


def _stat_dtype(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


@pytest.mark.parametrize("dtype", BN_DTYPES)
@pytest.mark.parametrize("shape", list(BN_SHAPES.values()), ids=list(BN_SHAPES))
def test_batch_norm_stats_elemt_and_backward_match_their_definitions(native, shape, dtype):
    eps = 1e-5
    x, dy = _bn_input(shape, dtype), _r(*shape, seed=1).to(dtype)
    w, b = _r(shape[1], seed=2).to(dtype), _r(shape[1], seed=3).to(dtype)
    xd, dyd, wd, bd = (t.to(native) for t in (x, dy, w, b))
    sd = _stat_dtype(dtype)

    mean, invstd = torch.batch_norm_stats(xd, eps)
    em, ei = _bn_stats_ref(x, eps)
    assert mean.dtype == invstd.dtype == sd and mean.shape == invstd.shape == (shape[1],)
    torch.testing.assert_close(mean.cpu().double(), em, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(invstd.cpu().double(), ei, rtol=1e-5, atol=1e-5)
    mean_c, invstd_c = mean.cpu(), invstd.cpu()

    # elemt: ((x - mean) * invstd) * weight + bias in the input's dtype
    ex = (x.double() - _bn_chan(mean_c, x)) * _bn_chan(invstd_c, x)
    for args, expected in (((wd, bd), ex * _bn_chan(w, x) + _bn_chan(b, x)), ((None, None), ex),
                           ((wd, None), ex * _bn_chan(w, x))):
        y = torch.batch_norm_elemt(xd, *args, mean, invstd, eps)
        assert y.dtype == dtype and y.shape == x.shape
        torch.testing.assert_close(y.cpu().double(), expected, **_bn_tol(dtype))
    out = torch.empty(0, dtype=dtype, device=native)
    assert torch.batch_norm_elemt(xd, wd, bd, mean, invstd, eps, out=out) is out
    torch.testing.assert_close(out.cpu().double(), ex * _bn_chan(w, x) + _bn_chan(b, x), **_bn_tol(dtype))

    # backward_reduce: (sum dy, sum dy * (x - mean), grad_weight, grad_bias)
    dims = _bn_dims(x)
    e_sum_dy = dy.double().sum(dims)
    e_sum_dy_xmu = (dy.double() * (x.double() - _bn_chan(mean_c, x))).sum(dims)
    sum_dy, sum_dy_xmu, gw, gb = torch.batch_norm_backward_reduce(dyd, xd, mean, invstd, wd, True, True, True)
    assert sum_dy.dtype == sum_dy_xmu.dtype == sd and gw.dtype == gb.dtype == dtype
    stol = dict(rtol=1e-5, atol=1e-4)
    torch.testing.assert_close(sum_dy.cpu().double(), e_sum_dy, **stol)
    torch.testing.assert_close(sum_dy_xmu.cpu().double(), e_sum_dy_xmu, **stol)
    gtol = stol if dtype in (torch.float32, torch.float64) else _bn_tol(dtype)
    torch.testing.assert_close(gw.cpu().double(), (e_sum_dy_xmu * invstd_c.double()).to(dtype).double(), **gtol)
    torch.testing.assert_close(gb.cpu().double(), e_sum_dy.to(dtype).double(), **gtol)

    # backward_elemt: grad_input of batch norm from the reduced sums and the element count
    count = torch.tensor([x.numel() // shape[1]], dtype=torch.int32)
    n = float(count.sum())
    inv = _bn_chan(invstd_c, x)
    expected = (dy.double() - _bn_chan(sum_dy.cpu(), x) / n
                - (x.double() - _bn_chan(mean_c, x)) * inv ** 2 * _bn_chan(sum_dy_xmu.cpu(), x) / n) * inv * _bn_chan(w, x)
    gi = torch.batch_norm_backward_elemt(dyd, xd, mean, invstd, wd.to(sd), sum_dy, sum_dy_xmu, count.to(native))
    assert gi.dtype == dtype and gi.shape == x.shape
    torch.testing.assert_close(gi.cpu().double(), expected, **_bn_tol(dtype))
    if dtype == torch.float64:  # the gradient of batch norm itself, with the batch's own statistics
        xr = x.clone().requires_grad_()
        torch.nn.functional.batch_norm(xr, None, None, w, b, training=True, eps=eps).backward(dy)
        torch.testing.assert_close(gi.cpu(), xr.grad, rtol=1e-5, atol=1e-5)  # float64 runs as float32


def test_batch_norm_backward_reduce_flags_and_missing_weight(native):
    x, dy = _bn_input((4, 3, 5), torch.float32), _r(4, 3, 5, seed=1)
    xd, dyd = x.to(native), dy.to(native)
    mean, invstd = torch.batch_norm_stats(xd, 1e-5)
    sum_dy, sum_dy_xmu, gw, gb = torch.batch_norm_backward_reduce(dyd, xd, mean, invstd, None, True, False, False)
    assert sum_dy is not None and sum_dy_xmu is not None and gw is None and gb is None
    sum_dy2, sum_dy_xmu2, gw, gb = torch.batch_norm_backward_reduce(dyd, xd, mean, invstd, None, False, True, True)
    assert sum_dy2 is None and sum_dy_xmu2 is None and gw.dtype == gb.dtype == torch.float32
    torch.testing.assert_close(gb.cpu(), sum_dy.cpu())
    torch.testing.assert_close(gw.cpu(), (sum_dy_xmu * invstd).cpu())
    # grad_input without a weight (weight 1)
    count = torch.tensor([20], dtype=torch.int32, device=native)
    gi = torch.batch_norm_backward_elemt(dyd, xd, mean, invstd, None, sum_dy, sum_dy_xmu, count)
    xr = x.double().requires_grad_()
    torch.nn.functional.batch_norm(xr, None, None, training=True, eps=1e-5).backward(dy.double())
    torch.testing.assert_close(gi.cpu().double(), xr.grad, rtol=1e-5, atol=1e-5)


def test_batch_norm_stats_of_a_constant_channel(native):
    """CUDA's invstd: 1/sqrt(var + eps), and 0 (not inf) for a zero variance without eps."""
    x = torch.ones(4, 2, 3)
    x[:, 1] = _r(4, 3)
    mean, invstd = torch.batch_norm_stats(x.to(native), 0.0)
    em, ei = _bn_stats_ref(x, 0.0)
    ei[0] = 0
    torch.testing.assert_close(invstd.cpu().double(), ei, rtol=1e-5, atol=0)
    torch.testing.assert_close(torch.batch_norm_stats(x.to(native), 0.1)[1].cpu().double(), _bn_stats_ref(x, 0.1)[1],
                               rtol=1e-5, atol=0)


def test_batch_norm_channels_last_input_keeps_its_layout(native):
    x = _bn_input((3, 4, 5, 2), torch.float32).contiguous(memory_format=torch.channels_last)
    xd = x.to(native)
    assert xd.is_contiguous(memory_format=torch.channels_last)
    mean, invstd = torch.batch_norm_stats(xd, 1e-5)
    em, ei = _bn_stats_ref(x, 1e-5)
    torch.testing.assert_close(mean.cpu().double(), em, rtol=1e-5, atol=1e-5)
    y = torch.batch_norm_elemt(xd, None, None, mean, invstd, 1e-5)
    assert y.is_contiguous(memory_format=torch.channels_last)
    torch.testing.assert_close(y.cpu().double(), (x.double() - _bn_chan(em, x)) * _bn_chan(ei, x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.float64])
def test_batch_norm_gather_stats_with_counts_merges_ranks(native, dtype):
    """Per-rank (mean, invstd, count) merged into the global mean and invstd; the running
    stats move towards the global mean and the unbiased global variance by `momentum`."""
    eps, momentum = 1e-5, 0.2
    parts = [_bn_input((n, 3, 4), dtype, seed=10 + n) * (1 + n) for n in (2, 5, 3)]  # 3 ranks, uneven
    stats = [torch.batch_norm_stats(p.to(native), eps) for p in parts]
    mean_all = torch.stack([m for m, _ in stats])
    invstd_all = torch.stack([i for _, i in stats])
    counts = torch.tensor([p.numel() // 3 for p in parts], dtype=dtype, device=native)
    rm, rv = _r(3, seed=4).to(dtype), _r(3, seed=5).abs().to(dtype) + 1
    rmd, rvd = rm.to(native), rv.to(native)
    mean, invstd = torch.batch_norm_gather_stats_with_counts(parts[0].to(native), mean_all, invstd_all, rmd, rvd,
                                                             momentum, eps, counts)
    assert mean.dtype == invstd.dtype == _stat_dtype(dtype)
    whole = torch.cat(parts).double()
    var, em = torch.var_mean(whole, [0, 2], correction=0)
    torch.testing.assert_close(mean.cpu().double(), em, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(invstd.cpu().double(), (var + eps).rsqrt(), rtol=1e-4, atol=1e-5)
    tol = _bn_tol(dtype) if dtype == torch.float16 else dict(rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(rmd.cpu().double(), ((1 - momentum) * rm.double() + momentum * em).to(dtype).double(), **tol)
    unbiased = torch.var(whole, [0, 2], correction=1)
    torch.testing.assert_close(rvd.cpu().double(), ((1 - momentum) * rv.double() + momentum * unbiased).to(dtype).double(),
                               **(tol if dtype == torch.float16 else dict(rtol=1e-4, atol=1e-5)))
    # without running stats; and batch_norm_gather_stats (one count for every rank)
    m2, i2 = torch.batch_norm_gather_stats_with_counts(parts[0].to(native), mean_all, invstd_all, None, None,
                                                       momentum, eps, counts)
    torch.testing.assert_close(m2.cpu(), mean.cpu())
    even = [_bn_input((4, 3, 4), dtype, seed=s) for s in (1, 2)]
    st = [torch.batch_norm_stats(p.to(native), eps) for p in even]
    m3, i3 = torch.batch_norm_gather_stats(even[0].to(native), torch.stack([m for m, _ in st]),
                                           torch.stack([i for _, i in st]), None, None, momentum, eps, 16)
    var, em = torch.var_mean(torch.cat(even).double(), [0, 2], correction=0)
    torch.testing.assert_close(m3.cpu().double(), em, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(i3.cpu().double(), (var + eps).rsqrt(), rtol=1e-4, atol=1e-5)


def test_sync_batch_norm_ops_refuse_bad_arguments_clearly(neuron):
    x = _bn_input((4, 3, 5), torch.float32).to(neuron)
    mean, invstd = torch.batch_norm_stats(x, 1e-5)
    count = torch.tensor([20], dtype=torch.int32, device=neuron)
    cases = [
        (RuntimeError, ["batch_norm_stats", "at least 2 dims"], lambda: torch.batch_norm_stats(x[0, 0], 1e-5)),
        (RuntimeError, ["batch_norm_elemt", "mean", "[3]"],
         lambda: torch.batch_norm_elemt(x, None, None, mean[:2], invstd, 1e-5)),
        (RuntimeError, ["batch_norm_elemt", "weight", "[3]"],
         lambda: torch.batch_norm_elemt(x, torch.ones(4, device=neuron), None, mean, invstd, 1e-5)),
        (RuntimeError, ["batch_norm_gather_stats_with_counts", "counts"],
         lambda: torch.batch_norm_gather_stats_with_counts(x, mean[None], invstd[None], None, None, 0.1, 1e-5,
                                                           torch.ones(2, device=neuron))),
        (RuntimeError, ["batch_norm_gather_stats_with_counts", "running_var", "[3]"],
         lambda: torch.batch_norm_gather_stats_with_counts(x, mean[None], invstd[None], None,
                                                           torch.ones(2, device=neuron), 0.1, 1e-5,
                                                           torch.ones(1, device=neuron))),
        (RuntimeError, ["batch_norm_backward_reduce", "grad_out", "shape"],
         lambda: torch.batch_norm_backward_reduce(x[:2], x, mean, invstd, None, True, True, True)),
        (RuntimeError, ["batch_norm_backward_reduce", "same data types"],
         lambda: torch.batch_norm_backward_reduce(x, x, mean.double(), invstd, None, True, False, False)),
        (RuntimeError, ["batch_norm_backward_elemt", "count", "int32"],
         lambda: torch.batch_norm_backward_elemt(x, x, mean, invstd, None, mean, mean, count.float())),
        (RuntimeError, ["batch_norm_backward_elemt", "sum_dy_xmu", "[3]"],
         lambda: torch.batch_norm_backward_elemt(x, x, mean, invstd, None, mean, mean[:1], count)),
        (RuntimeError, ["batch_norm_elemt", "device"],
         lambda: torch.batch_norm_elemt(x, None, None, mean.cpu(), invstd, 1e-5)),
    ]
    for exc, words, fn in cases:
        with pytest.raises(exc) as err:
            fn()
        for w in words:
            assert w in str(err.value), (words, str(err.value))
    assert torch_neuronx.get_fallback_ops() == []
    # a non-floating input takes the visible fallback, where ATen has no kernel (as CUDA, refused)
    with pytest.raises(NotImplementedError, match="batch_norm_stats"):
        torch.batch_norm_stats(x.long(), 1e-5)


# ------------------------------------------------------------------------------ sums

def _relayout(x, perm):
    """x's values in the memory order of x.permute(perm) (same shape, other strides)."""
    inv = [perm.index(i) for i in range(len(perm))]
    return x.permute(perm).contiguous().permute(inv)


@pytest.mark.parametrize("shape, dims, perm", [
    ((32, 64, 7, 7), (2, 3), (0, 2, 3, 1)),    # global average pooling: short dense rows / columns
    ((8, 64, 30, 30), (0, 2, 3), (0, 2, 3, 1)),  # batch-norm statistics: H*W runs merged
    ((16, 128, 768), (0,), (2, 1, 0)),         # a short leading dim into many outputs (tiles)
    ((16, 128, 768), (2,), (2, 1, 0)),         # rows of six runs side by side
    ((37, 13), (1,), (1, 0)), ((5, 200), (1,), (1, 0)), ((300, 1000), (1,), (1, 0)),
    ((3, 5000), (0,), (1, 0)), ((4100, 3), (0,), (1, 0)),
])
def test_sums_are_the_same_bits_in_every_layout(native, shape, dims, perm):
    """sum/mean/amax take other paths for other strides (dense rows summed side by side, tiles
    of columns, runs gathered from strided dims) but one schedule per output (vnc/reduce.h): the
    same bits in either layout, and CPU's values within float32 rounding."""
    g = torch.Generator().manual_seed(sum(shape))
    x = torch.randn(shape, generator=g) * 3
    for op in (torch.sum, torch.mean, torch.amax):
        a = op(x.to(native), dims).cpu()
        b = op(_relayout(x, list(perm)).to(native), dims).cpu()
        assert torch.equal(a, b), (op.__name__, (a - b).abs().max())
        torch.testing.assert_close(a, op(x, dims), rtol=1e-5, atol=1e-4)


# ------------------------------------------------------------------------------ extremes

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(16, 40, 300), (3, 9000), (9000, 3), (70000, 2)])
def test_extreme_reductions_match_cpu_along_every_dim(native, dtype, shape):
    """amax/amin/argmax/argmin/max/min over each dim: rows (vectorised block extremes, then the
    first occurrence), columns (a tile of outputs per pass) and reductions longer than a chunk;
    many ties (first index), NaN (wins, first NaN's index) and zeros of both signs."""
    g = torch.Generator().manual_seed(len(shape) + shape[0])
    x = torch.randn(shape, generator=g).mul(3).round().to(dtype)
    flat = x.view(-1)
    flat[torch.randperm(flat.numel(), generator=g)[:3]] = float("nan")
    flat[::7] = -0.0
    xn = x.to(native)
    for dim in range(x.dim()):
        for op in (torch.amax, torch.amin):
            torch.testing.assert_close(op(xn, dim).cpu(), op(x, dim), rtol=0, atol=0, equal_nan=True)
        for op in (torch.argmax, torch.argmin):
            assert torch.equal(op(xn, dim).cpu(), op(x, dim))
        for op in (torch.max, torch.min):
            got, want = op(xn, dim), op(x, dim)
            torch.testing.assert_close(got.values.cpu(), want.values, rtol=0, atol=0, equal_nan=True)
            assert torch.equal(got.indices.cpu(), want.indices)


@pytest.mark.parametrize("case", ["uint8_amax", "bool_any", "float16_sum", "float32_max_dim", "int32_sum",
                                  "bfloat16_mean", "int64_prod", "float32_argmin"])
def test_reductions_with_many_outputs_match_cpu(native, case):
    """Reductions over a short leading dim with many outputs (each output one chunk, stored as it
    is computed, converted to the output dtype, values and indices for max.dim) equal CPU's."""
    g = torch.Generator().manual_seed(5)
    x = torch.randn(3, 70001, generator=g) * 50
    calls = {
        "uint8_amax": lambda t: t.abs().to(torch.uint8).amax(0), "bool_any": lambda t: (t > 60).any(0),
        "float16_sum": lambda t: t.half().sum(0), "float32_max_dim": lambda t: torch.max(t, 0),
        "int32_sum": lambda t: t.int().sum(0, dtype=torch.int32), "bfloat16_mean": lambda t: t.bfloat16().mean(0),
        "int64_prod": lambda t: (t / 25).long().prod(0), "float32_argmin": lambda t: t.argmin(0),
    }
    want, got = calls[case](x), calls[case](x.to("neuron"))
    for w, o in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
        assert o.dtype == w.dtype
        torch.testing.assert_close(o.cpu(), w, rtol=1e-3 if w.dtype == torch.bfloat16 else 0, atol=0)


def test_reduction_with_many_outputs_needs_no_host_memory_per_output():
    """A reduction with one chunk per output keeps no per-output partials (32 bytes each on the
    host, several times a uint8 input's size): the peak memory of amax over dim 0 of a
    (2, 3e7) uint8 tensor grows by about its output (30 MB), not by the ~1 GB of partials."""
    out = run_py("""
        import resource, torch, torch_neuronx
        x = torch.ones(2, 30_000_000, dtype=torch.uint8, device="neuron")
        torch.neuron.synchronize()
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        y = x.amax(0)
        assert y[-1].item() == 1
        print("grew_mib", (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024)
    """)
    grew = float(out.stdout.split("grew_mib")[1])
    assert grew < 300, out.stdout


def test_arange_out_of_the_wrong_size_warns_as_cpu(native):
    """arange into an out= tensor of another length: ATen's own warning text (none for an empty
    out), then the out is resized, as on CPU."""
    import warnings

    def run(dev, n0):
        out = torch.empty(n0, device=dev)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.arange(5, out=out)
        return out.cpu(), [str(w.message).split(" (Triggered internally")[0] for w in caught]  # C++ source location

    for n0 in (2, 0, 7):
        (want, want_w), (got, got_w) = run("cpu", n0), run("neuron", n0)
        assert torch.equal(got, want) and got_w == want_w, (n0, got_w, want_w)
