"""F.interpolate in every mode (nearest, nearest-exact, linear, bilinear, bicubic, trilinear,
area) for 1-D, 2-D and 3-D inputs, and reflection/replication padding of 1 to 3 dims, run
natively and match CPU PyTorch, forward and input gradients.

Expected values come from CPU PyTorch; every test asserts the op ran natively (op tracking)
and that nothing took the CPU fallback.
"""
import pytest
import torch
import torch.nn.functional as F

import torch_neuronx

TOL = dict(rtol=1e-5, atol=1e-5)
GRAD_TOL = dict(rtol=1e-4, atol=1e-4)


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _check(fn, x, kernel, tol=TOL, grad=True):
    xc, xd = x.clone().requires_grad_(grad), x.to("neuron").requires_grad_(grad)
    yc, yd = fn(xc), fn(xd)
    assert yd.device.type == "neuron" and yd.dtype == yc.dtype and yd.shape == yc.shape
    torch.testing.assert_close(yd.detach().cpu(), yc.detach(), **tol)
    if grad:
        g = torch.linspace(-1, 1, yc.numel()).reshape(yc.shape)
        (yc * g).sum().backward()
        (yd * g.to("neuron")).sum().backward()
        torch.testing.assert_close(xd.grad.cpu(), xc.grad, **GRAD_TOL)
    assert kernel in torch_neuronx.get_executed_ops(), f"{kernel} did not run natively"


SHAPES = {1: (2, 3, 11), 2: (2, 3, 7, 9), 3: (2, 2, 4, 5, 6)}
SIZES = {1: [(5,), (23,), (11,)], 2: [(4, 5), (15, 19), (7, 20)], 3: [(3, 2, 4), (7, 9, 13), (4, 10, 3)]}
MODES = {1: ["nearest", "nearest-exact", "linear", "area"], 2: ["nearest", "nearest-exact", "bilinear", "bicubic", "area"],
         3: ["nearest", "nearest-exact", "trilinear", "area"]}
KERNEL = {"nearest": "aten::upsample_nearest{n}d", "nearest-exact": "aten::_upsample_nearest_exact{n}d",
          "linear": "aten::upsample_linear1d", "bilinear": "aten::upsample_bilinear2d",
          "bicubic": "aten::upsample_bicubic2d", "trilinear": "aten::upsample_trilinear3d",
          "area": "aten::_adaptive_avg_pool{n}d"}


@pytest.mark.parametrize("n,mode", [(n, m) for n in (1, 2, 3) for m in MODES[n]])
@pytest.mark.parametrize("size_i", [0, 1, 2])   # downsample, upsample, mixed
def test_interpolate_sizes_match_cpu(native, n, mode, size_i):
    size = SIZES[n][size_i]
    kernel = KERNEL[mode].format(n=2 if (mode == "area" and n == 1) else n)
    _check(lambda t: F.interpolate(t, size=size, mode=mode), _r(*SHAPES[n]), kernel)


@pytest.mark.parametrize("mode", ["linear", "bilinear", "bicubic", "trilinear"])
@pytest.mark.parametrize("align_corners", [False, True])
def test_interpolate_scale_factor_and_align_corners(native, mode, align_corners):
    n = {"linear": 1, "bilinear": 2, "bicubic": 2, "trilinear": 3}[mode]
    for sf, recompute in ((1.7, False), (0.6, True), (2.0, False)):
        _check(lambda t: F.interpolate(t, scale_factor=sf, mode=mode, align_corners=align_corners,
                                       recompute_scale_factor=recompute), _r(*SHAPES[n]), KERNEL[mode])


@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_scale_factors_and_uint8(native, mode):
    for n in (1, 2, 3):
        _check(lambda t: F.interpolate(t, scale_factor=1.5, mode=mode), _r(*SHAPES[n]), KERNEL[mode].format(n=n))
    img = torch.randint(0, 255, (1, 3, 5, 7), dtype=torch.uint8)   # copies of any dtype CPU accepts
    _check(lambda t: F.interpolate(t, size=(9, 4), mode=mode), img, KERNEL[mode].format(n=2), grad=False)


def test_interpolate_layouts(native):
    x = _r(2, 3, 6, 8).contiguous(memory_format=torch.channels_last)
    _check(lambda t: F.interpolate(t, size=(9, 5), mode="bicubic"), x, "aten::upsample_bicubic2d")
    x3 = _r(2, 3, 4, 6, 5).permute(0, 1, 4, 3, 2)   # strided volume
    _check(lambda t: F.interpolate(t, size=(3, 7, 6), mode="trilinear"), x3, "aten::upsample_trilinear3d")
    _check(lambda t: F.interpolate(t, size=13, mode="linear"), _r(4, 11, 2).transpose(1, 2), "aten::upsample_linear1d")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_interpolate_half_precision(native, dtype):
    x = _r(1, 2, 6, 6).to(dtype)
    for mode in ("bilinear", "bicubic", "nearest-exact"):
        _check(lambda t: F.interpolate(t, size=(9, 4), mode=mode), x, KERNEL[mode].format(n=2),
               tol=dict(rtol=1.6e-2, atol=2e-2), grad=False)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("pad", [(2, 3), (1, 2, 0, 3), (1, 1, 2, 0, 1, 2), (-1, 2), (2, -1, 1, 1, 0, -1)])
def test_padding_1d_to_3d_matches_cpu(native, mode, pad):
    n = len(pad) // 2
    x = _r(2, 3, *[(4, 5, 6)[i] for i in range(n)])
    kernel = f"aten::{'reflection' if mode == 'reflect' else 'replication'}_pad{n}d"
    _check(lambda t: F.pad(t, pad, mode=mode), x, kernel)
    _check(lambda t: F.pad(t, pad, mode=mode), x[0], kernel)   # unbatched


def test_padding_refuses_like_cpu(native):
    x = _r(1, 2, 3)
    with pytest.raises(RuntimeError) as cpu:
        F.pad(x, (3, 0), mode="reflect")
    with pytest.raises(RuntimeError) as dev:
        F.pad(x.to("neuron"), (3, 0), mode="reflect")
    assert str(dev.value).split("\n")[0] == str(cpu.value).split("\n")[0]
    ints = torch.arange(12).reshape(1, 2, 6)
    assert torch.equal(F.pad(ints.to("neuron"), (2, 1), mode="replicate").cpu(), F.pad(ints, (2, 1), mode="replicate"))


def test_upsample_modules(native):
    torch.manual_seed(0)
    for mod, x, kernel in (
            (torch.nn.Upsample(scale_factor=2, mode="trilinear"), _r(1, 2, 3, 4, 5), "aten::upsample_trilinear3d"),
            (torch.nn.Upsample(size=(8, 8), mode="bicubic", align_corners=True), _r(1, 3, 5, 5), "aten::upsample_bicubic2d"),
            (torch.nn.ReflectionPad3d(1), _r(1, 2, 3, 4, 5), "aten::reflection_pad3d"),
            (torch.nn.ReplicationPad1d((3, 1)), _r(2, 4, 5), "aten::replication_pad1d"),
            (torch.nn.AdaptiveAvgPool3d((2, 3, 1)), _r(2, 3, 5, 7, 4), "aten::_adaptive_avg_pool3d")):
        _check(mod, x, kernel)
