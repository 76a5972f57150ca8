"""Native convolution against CPU PyTorch: 1-D, 2-D and 3-D, plain and transposed
(strides, padding, output_padding, dilation, groups, bias), forward and the gradients of
input, weight and bias; a conv-transpose decoder trains with no CPU fallback. Depthwise
convolutions (the runtime's direct kernel) and pointwise ones in every layout (channels_last
runs in its layout, with CPU's result strides and no copy), float32 and half precision.

Expected values come from CPU PyTorch; every test asserts that nothing took the CPU fallback
and that the convolution ran on the device.
"""
import pytest
import torch
import torch.nn.functional as F

import torch_neuronx

TOL = dict(rtol=1e-4, atol=1e-4)


@pytest.fixture
def native(native):
    """conftest's `native`, and the convolution ran on the device."""
    yield native
    assert "aten::convolution_overrideable" in torch_neuronx.get_executed_ops()


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _check(fn, x, w, b, dtype=torch.float32, tol=TOL, strides=False):
    """fn(x, w, b) on CPU (float32 reference) and on neuron in `dtype`: outputs and all grads
    (with `strides`, also their strides: CPU's memory formats)."""
    leaves_c = [t.clone().requires_grad_() if t is not None else None for t in (x, w, b)]
    leaves_d = [t.to("neuron", dtype).requires_grad_() if t is not None else None for t in (x, w, b)]
    yc = fn(*leaves_c)
    yd = fn(*leaves_d)
    assert yd.device.type == "neuron" and yd.dtype == dtype and yd.shape == yc.shape
    assert not strides or yd.stride() == yc.stride()
    torch.testing.assert_close(yd.detach().cpu().float(), yc.detach(), **tol)
    g = torch.linspace(-1, 1, yc.numel()).reshape(yc.shape)
    (yc * g).sum().backward()
    (yd * g.to("neuron", dtype)).sum().backward()
    for c, d in zip(leaves_c, leaves_d):
        if c is not None:
            assert not strides or d.grad.stride() == c.grad.stride()
            torch.testing.assert_close(d.grad.cpu().float(), c.grad, **tol)


CONV_T_CASES = [
    dict(),
    dict(stride=2),
    dict(stride=2, padding=1, output_padding=1),
    dict(stride=3, padding=2, dilation=2, output_padding=2),
    dict(groups=2),
    dict(stride=2, groups=2, bias=False),
]


def _ids(kw):
    return ",".join(f"{k}={v}" for k, v in kw.items()) or "default"


@pytest.mark.parametrize("kw", CONV_T_CASES, ids=_ids)
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_transpose_matches_cpu(native, nd, kw):
    kw = dict(kw)
    bias = kw.pop("bias", True)
    groups = kw.get("groups", 1)
    spatial = {1: (9,), 2: (6, 7), 3: (4, 5, 3)}[nd]
    k = {1: (3,), 2: (3, 2), 3: (2, 3, 2)}[nd]
    x, w = _r(2, 4, *spatial), _r(4, 6 // groups, *k, seed=1)
    b = _r(6, seed=2) if bias else None
    fn = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[nd]
    _check(lambda x, w, b: fn(x, w, b, **kw), x, w, b)


CONV3D_CASES = [dict(), dict(stride=2, padding=1), dict(dilation=(1, 2, 1), padding=(0, 2, 1)), dict(groups=3),
                dict(stride=(1, 2, 3), padding="valid"), dict(padding="same")]


@pytest.mark.parametrize("kw", CONV3D_CASES, ids=_ids)
def test_conv3d_matches_cpu(native, kw):
    groups = kw.get("groups", 1)
    x, w, b = _r(2, 6, 5, 7, 6), _r(9, 6 // groups, 3, 2, 3, seed=1), _r(9, seed=2)
    _check(lambda x, w, b: F.conv3d(x, w, b, **kw), x, w, b)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_conv_transpose_half_precision(native, dtype):
    x, w, b = _r(2, 4, 5, 5), _r(4, 3, 3, 3, seed=1), _r(3, seed=2)
    _check(lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2), x, w, b, dtype=dtype, tol=dict(rtol=3e-2, atol=3e-2))


def test_conv_layouts_and_unbatched(native):
    x = _r(3, 8, 10).permute(1, 0, 2)          # (8, 3, 10): non-contiguous batch
    w = _r(3, 5, 4, seed=1)
    _check(lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2), x, w, None)
    _check(lambda x, w, b: F.conv_transpose2d(x, w, b), _r(4, 5, 5), _r(4, 2, 2, 2, seed=1), None)   # unbatched
    _check(lambda x, w, b: F.conv3d(x, w, b), _r(2, 3, 4, 4, 4).to(memory_format=torch.channels_last_3d),
           _r(5, 3, 2, 2, 2, seed=1), _r(5, seed=2))


# Depthwise (groups == channels, weight [C * mult, 1, k...]): the runtime's direct kernel.
DW_CASES = [dict(), dict(padding=1), dict(mult=2, padding=1), dict(stride=2, padding=1), dict(dilation=2, padding=2),
            dict(mult=2, stride=2, dilation=2, padding=3, bias=False), dict(stride=3, padding=4)]
_DW_SHAPES = {1: ((2, 4, 13), (3,)), 2: ((2, 4, 9, 11), (3, 2)), 3: ((2, 4, 5, 7, 6), (2, 3, 3))}
_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}


def _laid_out(x, layout):
    """x as the test hands it over: `contiguous`; `channels_last` (channels_last or
    channels_last_3d, a 1-D input as a transposed (N, L, C) tensor); `sliced` (twice as wide:
    the convolution's function takes every other element of the last dim, see _sliced)."""
    if layout == "channels_last":
        if x.dim() == 3:
            return x.transpose(1, 2).contiguous().transpose(1, 2)
        return x.contiguous(memory_format=torch.channels_last if x.dim() == 4 else torch.channels_last_3d)
    if layout == "sliced":
        return torch.cat([x, x.flip(-1)], -1)
    return x


def _sliced(layout):
    return (lambda x: x[..., ::2]) if layout == "sliced" else (lambda x: x)


def _depthwise(nd, kw, layout, dtype=torch.float32, tol=TOL):
    kw = dict(kw)
    mult, bias = kw.pop("mult", 1), kw.pop("bias", True)
    shape, k = _DW_SHAPES[nd]
    C = shape[1]
    x, w = _laid_out(_r(*shape), layout), _r(C * mult, 1, *k, seed=1)
    b = _r(C * mult, seed=2) if bias else None
    cut = _sliced(layout)
    _check(lambda x, w, b: _CONV[nd](cut(x), w, b, groups=C, **kw), x, w, b, dtype=dtype, tol=tol, strides=True)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "sliced"])
@pytest.mark.parametrize("kw", DW_CASES, ids=_ids)
@pytest.mark.parametrize("nd", [1, 2, 3])
def test_depthwise_matches_cpu(native, nd, kw, layout):
    _depthwise(nd, kw, layout)


@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
@pytest.mark.parametrize("kw", [dict(padding=1), dict(mult=2, stride=2, padding=1)], ids=_ids)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_depthwise_half_precision(native, dtype, kw, layout):
    _depthwise(2, kw, layout, dtype=dtype, tol=dict(rtol=3e-2, atol=3e-2))


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("nd", [2, 3])
def test_pointwise_channels_last_matches_cpu(native, nd, bias):
    """A 1x1 convolution of a channels_last input: one GEMM in that layout, CPU's strides."""
    x = _laid_out(_r(2, 6, *(5, 7, 4)[:nd]), "channels_last")
    w, b = _r(5, 6, *(1,) * nd, seed=1), _r(5, seed=2) if bias else None
    _check(lambda x, w, b: _CONV[nd](x, w, b), x, w, b, strides=True)
    _check(lambda x, w, b: _CONV[nd](x, w, b), x, w, b, dtype=torch.bfloat16, tol=dict(rtol=3e-2, atol=3e-2),
           strides=True)


@pytest.mark.parametrize("case", ["depthwise", "pointwise"])
def test_channels_last_runs_in_its_layout(native, case):
    """Depthwise and pointwise convolutions of a channels_last input copy nothing to NCHW and
    back (a 3x3 convolution over channels still does: the generic kernel is NCHW)."""
    x = _laid_out(_r(2, 8, 6, 5), "channels_last").to("neuron").requires_grad_()
    w = (_r(16, 1, 3, 3) if case == "depthwise" else _r(4, 8, 1, 1)).to("neuron").requires_grad_()
    groups, padding = (8, 1) if case == "depthwise" else (1, 0)
    torch.neuron.synchronize()
    torch_neuronx.clear_op_tracking()
    y = F.conv2d(x, w, groups=groups, padding=padding)
    assert y.is_contiguous(memory_format=torch.channels_last)
    y.backward(torch.ones_like(y))
    torch.neuron.synchronize()
    assert "aten::copy_" not in torch_neuronx.get_executed_ops()
    torch_neuronx.clear_op_tracking()
    F.conv2d(x, _r(3, 8, 3, 3).to("neuron"), padding=1)
    assert "aten::copy_" in torch_neuronx.get_executed_ops()


def test_conv_transpose_decoder_trains_without_fallback(native):
    torch.manual_seed(0)

    def decoder():
        return torch.nn.Sequential(
            torch.nn.ConvTranspose2d(16, 8, 4, 2, 1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(8, 4, 4, 2, 1), torch.nn.ReLU(),
            torch.nn.ConvTranspose2d(4, 3, 3, 1, 1), torch.nn.Sigmoid())

    cpu, dev = decoder(), decoder()
    dev.load_state_dict(cpu.state_dict())
    dev.to("neuron")
    opt_c = torch.optim.SGD(cpu.parameters(), lr=0.1, momentum=0.9)
    opt_d = torch.optim.SGD(dev.parameters(), lr=0.1, momentum=0.9)
    z, target = _r(4, 16, 4, 4), torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(3))
    for _ in range(3):
        for model, opt, dv in ((cpu, opt_c, "cpu"), (dev, opt_d, "neuron")):
            opt.zero_grad()
            loss = F.mse_loss(model(z.to(dv)), target.to(dv))
            loss.backward()
            opt.step()
    for p, q in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-3, atol=1e-4)


def test_integer_convolution_takes_the_visible_fallback():
    torch_neuronx.clear_op_tracking()
    x, w = torch.arange(6).reshape(1, 1, 6), torch.tensor([[[1, -2]]])
    assert torch.equal(F.conv1d(x.to("neuron"), w.to("neuron")).cpu(), F.conv1d(x, w))
    assert "aten::convolution" in torch_neuronx.get_fallback_ops()
