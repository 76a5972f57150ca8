"""Native image ops against CPU PyTorch: avg_pool2d, GroupNorm / InstanceNorm (native_group_norm,
var_mean, std_mean), nearest and bilinear interpolation, reflection and replication padding,
grid sampling (F.grid_sample), forward and gradients.

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


def _laid_out(x, layout):
    """The (N, C, H, W) image `x` channels_last, with H and W transposed, or sliced (strided, offset);
    unchanged for any other layout name."""
    if layout == "channels_last":
        return x.contiguous(memory_format=torch.channels_last)
    if layout == "transposed":
        return x.transpose(2, 3)
    if layout == "sliced":
        return x[:, 1:, ::2, 1::3]
    return x


@pytest.mark.parametrize("layout", ["channels_last", "transposed", "sliced", "expanded"])
@pytest.mark.parametrize("mode", ["nearest", "bilinear"])
def test_interpolate_layouts(native, mode, layout):
    x = _image((2, 4, 8, 10))
    x = x[:1, :1].expand(3, 2, 8, 10) if layout == "expanded" else _laid_out(x, layout)
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


# ---------------------------------------------------------------- grid_sample

GS_MODES = ["bilinear", "nearest", "bicubic"]
GS_PADDINGS = ["zeros", "border", "reflection"]


def _grid(shape=(2, 5, 6, 2), lo=-1.3, hi=1.3, seed=1, dtype=torch.float32):
    """A grid of points in [lo, hi) (beyond [-1, 1]: outside the image)."""
    g = torch.rand(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return (g * (hi - lo) + lo).to(dtype)


def _check_grid_sample(x, grid, tol=TOL, grad_tol=GRAD_TOL, equal_nan=False, grad=True, **kw):
    """F.grid_sample on CPU and on neuron (same values and strides): output, then the input's and
    the grid's gradients of a weighted sum."""
    xc, xd = _pair(x)
    gc, gd = _pair(grid)
    yc, yd = F.grid_sample(xc, gc, **kw), F.grid_sample(xd, gd, **kw)
    assert yd.device.type == "neuron" and yd.stride() == yc.stride()
    torch.testing.assert_close(yd.cpu(), yc.detach(), equal_nan=equal_nan, **tol)
    if grad:
        w = torch.linspace(0.5, 1.5, yc.numel()).reshape(yc.shape).to(x.dtype)
        (yc * w).sum().backward()
        (yd * w.to("neuron")).sum().backward()
        torch.testing.assert_close(xd.grad.cpu(), xc.grad, equal_nan=equal_nan, **grad_tol)
        torch.testing.assert_close(gd.grad.cpu(), gc.grad, equal_nan=equal_nan, **grad_tol)
    return yc, yd


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", GS_PADDINGS)
@pytest.mark.parametrize("mode", GS_MODES)
def test_grid_sample_matches_cpu(native, mode, padding_mode, align_corners):
    _check_grid_sample(_image((2, 3, 7, 9)), _grid(), mode=mode, padding_mode=padding_mode,
                       align_corners=align_corners)


@pytest.mark.parametrize("mode", GS_MODES)
def test_grid_sample_far_outside_and_tiny_images(native, mode):
    """Reflection over many periods, clipping far outside, and 1-pixel dims (an empty reflection span)."""
    for shape in [(1, 2, 1, 1), (1, 2, 1, 5), (2, 1, 4, 1)]:
        for padding_mode in GS_PADDINGS:
            for align_corners in (False, True):
                _check_grid_sample(_image(shape), _grid((shape[0], 3, 4, 2), -7.0, 9.0), mode=mode,
                                   padding_mode=padding_mode, align_corners=align_corners)


@pytest.mark.parametrize("layout", ["channels_last", "transposed", "sliced", "grid_planar", "grid_sliced"])
def test_grid_sample_layouts(native, layout):
    x, grid = _laid_out(_image((2, 4, 8, 10)), layout), _grid((2, 6, 5, 2))
    if layout == "grid_planar":  # a grid from a conv net's (N, 2, H, W) output
        grid = _grid((2, 2, 6, 5)).permute(0, 2, 3, 1)
    elif layout == "grid_sliced":
        grid = _grid((2, 7, 12, 3))[:, 1:, ::2, 1:]
    for mode in GS_MODES:
        _check_grid_sample(x, grid, mode=mode, padding_mode="reflection", align_corners=False)


@pytest.mark.parametrize("mode", GS_MODES)
@pytest.mark.parametrize("padding_mode", GS_PADDINGS)
def test_grid_sample_nan_and_inf_points(native, mode, padding_mode):
    """Non-finite grid points as CPU's kernel: zeros padding reads 0 with a NaN weight (NaN in
    bilinear and bicubic modes, 0 in nearest mode); border and reflection clip NaN to 0."""
    grid = _grid((2, 4, 5, 2))
    grid[0, 1, 2, 0] = float("nan")
    grid[0, 2, 3, 1] = float("nan")
    grid[1, 0, 0] = float("nan")
    grid[1, 3, 1, 0] = float("inf")
    grid[1, 3, 4, 1] = -float("inf")
    # CPU's backward of a NaN point clipped by border/reflection padding reads unchecked memory:
    # gradients are compared with zeros padding only
    _check_grid_sample(_image((2, 3, 6, 7)), grid, equal_nan=True, grad=padding_mode == "zeros", mode=mode,
                       padding_mode=padding_mode, align_corners=False)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("mode", GS_MODES)
def test_grid_sample_dtypes(native, mode, dtype):
    """Reduced and double precision compute in float32: against CPU's float32 result of the same
    values (and, for float64, CPU's float64 result)."""
    x, grid = _image((2, 3, 7, 9)).to(dtype), _grid(dtype=dtype)
    kw = dict(mode=mode, padding_mode="border", align_corners=False)
    xd, gd = x.to("neuron").requires_grad_(), grid.to("neuron").requires_grad_()
    xc, gc = x.float().requires_grad_(), grid.float().requires_grad_()
    yd, yc = F.grid_sample(xd, gd, **kw), F.grid_sample(xc, gc, **kw)
    assert yd.dtype == dtype
    tol = TOL if dtype == torch.float64 else HALF_TOL
    torch.testing.assert_close(yd.cpu(), yc.detach().to(dtype), **tol)
    w = torch.linspace(0.5, 1.5, yc.numel()).reshape(yc.shape)
    (yd * w.to("neuron", dtype)).sum().backward()
    (yc * w.to(dtype).float()).sum().backward()
    gtol = GRAD_TOL if dtype == torch.float64 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad.to(dtype), **gtol)
    torch.testing.assert_close(gd.grad.cpu(), gc.grad.to(dtype), **gtol)
    if dtype == torch.float64:
        torch.testing.assert_close(yd.cpu(), F.grid_sample(x, grid, **kw), **TOL)


def test_grid_sample_backward_output_mask(native):
    """grad_input only when asked for (output_mask[0]); grad_grid always; empty grids."""
    x, grid = _image((2, 3, 5, 6)), _grid((2, 4, 3, 2))
    go = _image((2, 3, 4, 3), seed=4)
    op = torch.ops.aten.grid_sampler_2d_backward
    for mask in ([False, True], [True, True]):
        gi_c, gg_c = op(go, x, grid, 0, 2, False, mask)
        gi_d, gg_d = op(go.to("neuron"), x.to("neuron"), grid.to("neuron"), 0, 2, False, mask)
        assert (gi_d is None) == (gi_c is None)
        if gi_c is not None:
            torch.testing.assert_close(gi_d.cpu(), gi_c, **GRAD_TOL)
        torch.testing.assert_close(gg_d.cpu(), gg_c, **GRAD_TOL)
    for gshape in [(2, 0, 3, 2), (2, 4, 0, 2)]:
        g = _grid(gshape)
        _check_grid_sample(x, g, mode="bicubic", align_corners=True)
    _check_grid_sample(_image((2, 0, 5, 6)), grid, mode="bilinear", align_corners=False)


def test_grid_sample_backward_is_deterministic(native):
    x, grid = _image((1, 2, 6, 6)), _grid((1, 40, 40, 2), -0.2, 0.2)  # many points on few pixels
    grads = []
    for _ in range(2):
        xd, gd = x.to("neuron").requires_grad_(), grid.to("neuron").requires_grad_()
        F.grid_sample(xd, gd, mode="bicubic", align_corners=False).pow(2).sum().backward()
        grads.append((xd.grad.cpu(), gd.grad.cpu()))
    assert_bitwise_equal(grads[0][0], grads[1][0])
    assert_bitwise_equal(grads[0][1], grads[1][1])


def test_grid_sample_refuses_like_cpu(native):
    x, grid = _image((2, 3, 5, 6)), _grid((2, 4, 3, 2))
    bad = [
        (x[0], _grid((3, 4, 1)), "expected 4D input and grid with same number of dimensions"),
        (x, grid[:1], "expected grid and input to have same batch size"),
        (x, _grid((2, 4, 3, 3)), "expected grid to have size 2 in last dimension"),
        (x[:, :, :0], grid, "expected input to have non-empty spatial dimensions"),
    ]
    for xi, gi, msg in bad:
        with pytest.raises(RuntimeError, match=msg):
            torch.grid_sampler_2d(xi, gi, 0, 0, False)
        with pytest.raises(RuntimeError, match=msg):
            torch.grid_sampler_2d(xi.to("neuron"), gi.to("neuron"), 0, 0, False)
    xd, gd = x.to("neuron"), grid.to("neuron")
    with pytest.raises(RuntimeError, match="interpolation_mode"):
        torch.grid_sampler_2d(xd, gd, 3, 0, False)
    with pytest.raises(RuntimeError, match="padding_mode"):
        torch.grid_sampler_2d(xd, gd, 0, -1, False)
    with pytest.raises(RuntimeError, match="same device"):
        torch.grid_sampler_2d(xd, grid, 0, 0, False)


def test_grid_sample_mixed_dtypes_raise_as_cpu(neuron):
    """A grid of another dtype than the input goes to CPU's kernel, which refuses it."""
    x, grid = _image((1, 2, 4, 4)), _grid((1, 3, 3, 2), dtype=torch.float64)
    with pytest.raises(RuntimeError, match="expected scalar type"):
        torch.grid_sampler_2d(x, grid, 0, 0, False)
    with pytest.raises(RuntimeError, match="expected scalar type"):
        torch.grid_sampler_2d(x.to("neuron"), grid.to("neuron"), 0, 0, False)


# 3-D grids (grid_sampler_3d): CPU's scalar kernel, bilinear (trilinear) and nearest


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("padding_mode", GS_PADDINGS)
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d_matches_cpu(native, mode, padding_mode, align_corners):
    kw = dict(mode=mode, padding_mode=padding_mode, align_corners=align_corners)
    _check_grid_sample(_image((2, 3, 4, 5, 6)), _grid((2, 3, 4, 5, 3)), **kw)
    # non-contiguous input and grid, points far outside, 1-pixel dims
    x = _image((2, 6, 3, 5, 4)).transpose(1, 4)
    grid = _grid((2, 4, 3, 6, 5), -5.0, 6.0)[:, :, :, ::2, 1:4]
    _check_grid_sample(x, grid, **kw)
    _check_grid_sample(_image((1, 2, 1, 3, 1)), _grid((1, 2, 3, 2, 3), -3.0, 3.0), **kw)


@pytest.mark.parametrize("padding_mode", GS_PADDINGS)
@pytest.mark.parametrize("mode", ["bilinear", "nearest"])
def test_grid_sample_3d_nan_and_inf_points(native, mode, padding_mode):
    """CPU's scalar kernel: NaN coordinates clip to size - 1 under border/reflection padding
    (forward), and sample (and receive) nothing otherwise."""
    grid = _grid((2, 2, 3, 4, 3))
    grid[0, 1, 2, 0, 0] = float("nan")
    grid[0, 0, 1, 3, 2] = float("nan")
    grid[1, 1, 0, 1] = float("nan")
    grid[1, 0, 2, 2, 1] = float("inf")
    grid[1, 1, 2, 3, 0] = -float("inf")
    _check_grid_sample(_image((2, 3, 3, 4, 5)), grid, equal_nan=True, mode=mode, padding_mode=padding_mode,
                       align_corners=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_grid_sample_3d_dtypes(native, dtype):
    x, grid = _image((1, 2, 3, 4, 5)).to(dtype), _grid((1, 2, 3, 4, 3), dtype=dtype)
    kw = dict(mode="bilinear", padding_mode="zeros", align_corners=False)
    xd, gd = x.to("neuron").requires_grad_(), grid.to("neuron").requires_grad_()
    xc, gc = x.float().requires_grad_(), grid.float().requires_grad_()
    yd, yc = F.grid_sample(xd, gd, **kw), F.grid_sample(xc, gc, **kw)
    assert yd.dtype == dtype
    torch.testing.assert_close(yd.cpu(), yc.detach().to(dtype), **(TOL if dtype == torch.float64 else HALF_TOL))
    yd.sum().backward()
    yc.sum().backward()
    gtol = GRAD_TOL if dtype == torch.float64 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(xd.grad.cpu(), xc.grad.to(dtype), **gtol)
    torch.testing.assert_close(gd.grad.cpu(), gc.grad.to(dtype), **gtol)


def test_grid_sample_3d_refuses_like_cpu(native):
    x, grid = _image((1, 2, 3, 4, 5)), _grid((1, 2, 2, 2, 3))
    bad = [
        (x, grid, 2, "bicubic interpolation only supports 4D input"),
        (x, grid[..., :2], 0, "expected grid to have size 3 in last dimension"),
        (x, _grid((1, 2, 2, 3)), 0, "expected 5D input and grid with same number of dimensions"),
    ]
    for xi, gi, mode, msg in bad:
        with pytest.raises(RuntimeError, match=msg):
            torch.grid_sampler_3d(xi, gi, mode, 0, False)
        with pytest.raises(RuntimeError, match=msg):
            torch.grid_sampler_3d(xi.to("neuron"), gi.to("neuron"), mode, 0, False)


def test_grid_sample_out_of_another_dtype_as_cpu(neuron):
    """out= of another dtype than the input: CPU's result or error (through the CPU fallback)."""
    x, grid = _image((1, 2, 4, 4)), _grid((1, 3, 3, 2))
    for dev in ("cpu", "neuron"):
        out = torch.empty(0, dtype=torch.float64, device=dev)
        with pytest.raises(RuntimeError, match="dtype"):
            torch.ops.aten.grid_sampler_2d.out(x.to(dev), grid.to(dev), 0, 0, False, out=out)
