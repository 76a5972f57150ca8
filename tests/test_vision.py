"""Native image ops against CPU PyTorch: avg_pool2d, GroupNorm / InstanceNorm (native_group_norm,
var_mean, std_mean), nearest and bilinear interpolation, reflection and replication padding,
forward and gradients.

Expected values always come from CPU PyTorch. Every test ends by asserting that nothing took
the CPU fallback (torch_neuronx.get_fallback_ops() == []).
"""
import pytest
import torch
import torch.nn.functional as F

import torch_neuronx
from conftest import assert_bitwise_equal, run_py

TOL = dict(rtol=1e-5, atol=1e-5)
GRAD_TOL = dict(rtol=1e-4, atol=1e-4)
HALF_TOL = dict(rtol=1.6e-2, atol=1e-3)


def _pair(x):
    """A CPU leaf and its neuron copy (same values and strides), both requiring grad."""
    storage = x.detach().untyped_storage().to(device="neuron")
    d = torch.empty(0, dtype=x.dtype, device="neuron").set_(storage, x.storage_offset(), x.size(), x.stride())
    return x.detach().clone().requires_grad_(x.is_floating_point()), d.requires_grad_(x.is_floating_point())


def _check_fn(fn, x, tol=TOL, grad=True):
    """fn on CPU and on neuron: same values; for float32 the same input gradient."""
    xc, xd = _pair(x)
    yc, yd = fn(xc), fn(xd)
    assert yd.device.type == "neuron"
    torch.testing.assert_close(yd.cpu(), yc.detach(), **tol)
    if grad and x.dtype == torch.float32:
        w = torch.linspace(0.5, 1.5, yc.numel()).reshape(yc.shape)
        (yc * w).sum().backward()
        (yd * w.to("neuron")).sum().backward()
        torch.testing.assert_close(xd.grad.cpu(), xc.grad, **GRAD_TOL)
    return yc, yd


def _image(shape=(2, 3, 9, 11), dtype=torch.float32, seed=0):
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# ---------------------------------------------------------------- avg_pool2d

AVG_CASES = [
    dict(kernel_size=2),
    dict(kernel_size=3, stride=2, padding=1),
    dict(kernel_size=(3, 2), stride=(2, 1), padding=(1, 0), ceil_mode=True),
    dict(kernel_size=3, stride=2, padding=1, ceil_mode=True, count_include_pad=False),
    dict(kernel_size=(2, 4), stride=3, padding=(1, 2), count_include_pad=False),
    dict(kernel_size=3, stride=1, padding=1, divisor_override=5),
    dict(kernel_size=4, stride=3, padding=2, ceil_mode=True, divisor_override=-3),
]


@pytest.mark.parametrize("kw", AVG_CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
def test_avg_pool2d_matches_cpu(native, kw):
    _check_fn(lambda t: F.avg_pool2d(t, **kw), _image())


@pytest.mark.parametrize("layout", ["channels_last", "transposed", "sliced", "3d"])
def test_avg_pool2d_layouts(native, layout):
    x = _image((2, 4, 10, 12))
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "transposed":
        x = x.transpose(2, 3)
    elif layout == "sliced":
        x = x[:, ::2, 1:, ::2]
    else:
        x = x[0]
    yc, yd = _check_fn(lambda t: F.avg_pool2d(t, 3, 2, 1, ceil_mode=True), x)
    if layout == "channels_last":  # the output keeps the input's memory format, as on CPU
        assert yd.stride() == yc.stride()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int64])
def test_avg_pool2d_dtypes(native, dtype):
    x = _image(dtype=torch.float32) * 10
    _check_fn(lambda t: F.avg_pool2d(t, 3, 2, 1), x.to(dtype), tol=HALF_TOL if dtype.is_floating_point else {})


def test_avg_pool2d_out(native):
    x = _image()
    out = torch.empty(0, device="neuron")
    torch._C._nn.avg_pool2d(x.to("neuron"), [3, 3], [2, 2], [1, 1], out=out)
    torch.testing.assert_close(out.cpu(), F.avg_pool2d(x, 3, 2, 1), **TOL)


def test_avg_pool2d_refuses_like_cpu(native):
    x = _image()
    for kw in (dict(kernel_size=2, padding=2), dict(kernel_size=2, divisor_override=0), dict(kernel_size=20)):
        with pytest.raises(RuntimeError) as cpu:
            F.avg_pool2d(x, **kw)
        with pytest.raises(RuntimeError) as dev:
            F.avg_pool2d(x.to("neuron"), **kw)
        assert str(dev.value).split("\n")[0] == str(cpu.value).split("\n")[0]


def test_avg_pool2d_hands_int32_to_cpu_which_refuses(neuron):
    # No native int32 kernel: the dtype gate hands the call to the CPU fallback, whose kernel
    # raises CPU's own error (the fallback is recorded: it ran, and refused).
    x = _image().to(torch.int32)
    with pytest.raises(NotImplementedError) as cpu:
        F.avg_pool2d(x, 2)
    with pytest.raises(NotImplementedError) as dev:
        F.avg_pool2d(x.to("neuron"), 2)
    assert str(dev.value).split("\n")[0] == str(cpu.value).split("\n")[0]
    assert torch_neuronx.get_fallback_ops() == ["aten::avg_pool2d"]


# ---------------------------------------------------------------- group norm

@pytest.mark.parametrize("channels_last", [False, True])
def test_group_norm_training_step(native, channels_last):
    torch.manual_seed(0)
    cpu = torch.nn.GroupNorm(4, 12)
    with torch.no_grad():
        cpu.weight.copy_(torch.rand(12) + 0.5)
        cpu.bias.copy_(torch.randn(12))
    dev = torch.nn.GroupNorm(4, 12)
    dev.load_state_dict(cpu.state_dict())
    dev.to("neuron")
    x = _image((3, 12, 7, 5)) * 3 + 1
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    xc, xd = _pair(x)
    w = torch.linspace(-1, 2, x.numel()).reshape(x.shape)
    for m, inp, ww in ((cpu, xc, w), (dev, xd, w.to("neuron"))):
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        (m(inp) * ww).sum().backward()
        opt.step()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **GRAD_TOL)
    torch.testing.assert_close(dev.weight.grad.cpu(), cpu.weight.grad, **GRAD_TOL)
    torch.testing.assert_close(dev.bias.grad.cpu(), cpu.bias.grad, **GRAD_TOL)
    torch.testing.assert_close(dev.weight.detach().cpu(), cpu.weight.detach(), **GRAD_TOL)
    torch.testing.assert_close(dev(xd).cpu(), cpu(xc).detach(), **TOL)


@pytest.mark.parametrize("shape,groups", [((2, 6), 3), ((2, 6, 10), 2), ((2, 8, 3, 4, 5), 8), ((1, 4, 33, 65), 1)])
def test_group_norm_shapes(native, shape, groups):
    x = _image(shape)
    _check_fn(lambda t: F.group_norm(t, groups, eps=1e-3), x)
    weight, bias = torch.rand(shape[1]) + 0.5, torch.randn(shape[1])
    yc, yd = _check_fn(lambda t: F.group_norm(t, groups, weight.to(t.device), bias.to(t.device)), x)


def test_native_group_norm_stats(native):
    x = _image((3, 6, 4, 4)) * 2 + 5
    xd = x.to("neuron")
    expected = torch.native_group_norm(x, None, None, 3, 6, 16, 3, 1e-5)
    actual = torch.native_group_norm(xd, None, None, 3, 6, 16, 3, 1e-5)
    for a, e in zip(actual, expected):
        assert a.shape == e.shape and a.dtype == e.dtype
        torch.testing.assert_close(a.cpu(), e, **TOL)


def test_group_norm_bfloat16_with_float_params(native):
    x = _image((2, 8, 6, 6)).to(torch.bfloat16)
    weight, bias = torch.rand(8) + 0.5, torch.randn(8)
    expected = torch.native_group_norm(x, weight, bias, 2, 8, 36, 4, 1e-5)
    actual = torch.native_group_norm(x.to("neuron"), weight.to("neuron"), bias.to("neuron"), 2, 8, 36, 4, 1e-5)
    for a, e in zip(actual, expected):
        assert a.dtype == e.dtype
        torch.testing.assert_close(a.cpu(), e, **HALF_TOL)


def test_group_norm_refuses_like_cpu(native):
    x = _image((2, 6, 4, 4))
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(x.to("neuron"), 4)
    with pytest.raises(RuntimeError, match="divisible by num_groups"):
        F.group_norm(x, 4)


def test_group_norm_deterministic_across_thread_counts():
    code = """
    import hashlib, torch, torch_neuronx, torch.nn.functional as F
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 64, 64, generator=g).to("neuron").requires_grad_()
    w = torch.rand(8, generator=g).to("neuron").requires_grad_()
    y = F.group_norm(x, 2, w)
    (y * y).sum().backward()
    u = torch.randn(2, 3, 17, 19, generator=g).to("neuron").requires_grad_()
    z = F.interpolate(u, size=(40, 31), mode="bilinear")
    (z * z).sum().backward()
    h = hashlib.sha256()
    for t in (y, x.grad, w.grad, z, u.grad):
        h.update(t.detach().cpu().numpy().tobytes())
    print(h.hexdigest())
    """
    outs = {run_py(code, env={"TORCH_NEURONX_NUM_THREADS": n}).stdout.strip() for n in ("1", "3")}
    assert len(outs) == 1, outs


@pytest.mark.parametrize("track", [False, True])
def test_instance_norm(native, track):
    torch.manual_seed(0)
    cpu = torch.nn.InstanceNorm2d(5, affine=True, track_running_stats=track)
    with torch.no_grad():
        cpu.weight.copy_(torch.rand(5) + 0.5)
        cpu.bias.copy_(torch.randn(5))
    dev = torch.nn.InstanceNorm2d(5, affine=True, track_running_stats=track)
    dev.load_state_dict(cpu.state_dict())
    dev.to("neuron")
    x = _image((3, 5, 6, 7))
    xc, xd = _pair(x)
    yc, yd = cpu(xc), dev(xd)
    torch.testing.assert_close(yd.cpu(), yc.detach(), **TOL)
    yc.pow(2).sum().backward()
    yd.pow(2).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **GRAD_TOL)
    torch.testing.assert_close(dev.weight.grad.cpu(), cpu.weight.grad, **GRAD_TOL)
    torch.testing.assert_close(dev.bias.grad.cpu(), cpu.bias.grad, **GRAD_TOL)
    if track:
        torch.testing.assert_close(dev.running_var.cpu(), cpu.running_var, **TOL)


@pytest.mark.parametrize("fn", [torch.var_mean, torch.std_mean])
@pytest.mark.parametrize("kw", [dict(), dict(dim=1), dict(dim=(0, 2), keepdim=True), dict(dim=-1, correction=0),
                                dict(dim=1, unbiased=False)])
def test_var_mean_std_mean(native, fn, kw):
    x = _image((4, 5, 6))
    xc, xd = _pair(x)
    ec, ed = fn(xc, **kw), fn(xd, **kw)
    for a, e in zip(ed, ec):
        torch.testing.assert_close(a.cpu(), e.detach(), **TOL)
    (ec[0] * 2 + ec[1]).sum().backward()
    (ed[0] * 2 + ed[1]).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, **GRAD_TOL)


# ---------------------------------------------------------------- interpolation

INTERP_CASES = [
    dict(scale_factor=2),
    dict(scale_factor=1.5),
    dict(scale_factor=(0.5, 3)),
    dict(scale_factor=0.7, recompute_scale_factor=True),
    dict(size=(13, 4)),
    dict(size=(9, 11)),
    dict(size=(1, 1)),
    dict(size=(18, 23)),
]


@pytest.mark.parametrize("kw", INTERP_CASES, ids=lambda kw: ",".join(f"{k}={v}" for k, v in kw.items()))
@pytest.mark.parametrize("mode", ["nearest", "bilinear-align", "bilinear"])
def test_interpolate_matches_cpu(native, mode, kw):
    args = dict(kw, mode="bilinear", align_corners=mode == "bilinear-align") if mode != "nearest" else dict(kw, mode=mode)
    _check_fn(lambda t: F.interpolate(t, **args), _image())


@pytest.mark.parametrize("layout", ["channels_last", "transposed", "sliced", "expanded"])
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_interpolate_layouts(native, mode, layout):
    x = _image((2, 4, 8, 10))
    if layout == "channels_last":
        x = x.contiguous(memory_format=torch.channels_last)
    elif layout == "transposed":
        x = x.transpose(2, 3)
    elif layout == "sliced":
        x = x[:, 1:, ::2, 1::3]
    else:
        x = x[:1, :1].expand(3, 2, 8, 10)
    kw = dict(size=(11, 7), mode=mode) if mode == "nearest" else dict(scale_factor=1.7, mode=mode, align_corners=False)
    yc, yd = _check_fn(lambda t: F.interpolate(t, **kw), x, grad=layout != "expanded")
    if layout == "channels_last":
        assert yd.is_contiguous(memory_format=torch.channels_last) == yc.is_contiguous(memory_format=torch.channels_last)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.uint8])
def test_interpolate_nearest_dtypes(native, dtype):
    x = (_image() * 20).clamp(0, 255).to(dtype)
    xd = x.to("neuron")
    assert_bitwise_equal(F.interpolate(xd, scale_factor=1.6), F.interpolate(x, scale_factor=1.6))


def test_upsample_modules(native):
    x = _image((1, 2, 5, 5))
    _check_fn(torch.nn.UpsamplingNearest2d(scale_factor=3), x)
    _check_fn(torch.nn.UpsamplingBilinear2d(size=(12, 7)), x)


# ---------------------------------------------------------------- padding

PADS = [(1, 1, 1, 1), (2, 0, 3, 1), (0, 3, 0, 2), (-1, 2, 1, -2)]


@pytest.mark.parametrize("pad", PADS)
@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_matches_cpu(native, mode, pad):
    x = _image((2, 3, 5, 6))
    _check_fn(lambda t: F.pad(t, pad, mode=mode), x)
    _check_fn(lambda t: F.pad(t, pad, mode=mode), x[0].transpose(1, 2))  # 3-D, non-contiguous
    _check_fn(lambda t: F.pad(t, pad, mode=mode), x.contiguous(memory_format=torch.channels_last))


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
def test_pad_integer_is_exact(native, mode):
    x = torch.randint(-1000, 1000, (2, 3, 4, 5), dtype=torch.int32)
    assert_bitwise_equal(F.pad(x.to("neuron"), (2, 1, 3, 0), mode=mode), F.pad(x, (2, 1, 3, 0), mode=mode))


def test_reflection_pad_refuses_like_cpu(native):
    x = _image((1, 2, 3, 3))
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        F.pad(x, (3, 0, 0, 0), mode="reflect")
    with pytest.raises(RuntimeError, match="Padding size should be less than"):
        F.pad(x.to("neuron"), (3, 0, 0, 0), mode="reflect")
