"""torch.fft on neuron: _fft_r2c, _fft_c2r and _fft_c2c (the ops every torch.fft function
reaches) for any length — powers of two, mixed radix and primes (Bluestein) — over one or
several dims, every normalization, forward and backward, against CPU PyTorch; results laid out
as CPU's (MKL) kernels lay them out.
"""
import pytest
import torch

import torch_neuronx

TOL = dict(rtol=2e-5, atol=2e-5)


def _r(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    if dtype.is_complex:
        return torch.complex(torch.randn(*shape, generator=g), torch.randn(*shape, generator=g)).to(dtype)
    return torch.randn(*shape, generator=g).to(dtype)


def _close(actual, expected, scale=1.0):
    # errors grow with the magnitude of the transform: compare relative to its largest entry
    ref = expected.abs().max().item() if expected.numel() else 1.0
    torch.testing.assert_close(actual.cpu(), expected, rtol=TOL["rtol"], atol=TOL["atol"] * max(ref, 1.0) * scale)


LENGTHS = [1, 2, 5, 8, 12, 17, 30, 64, 97, 100, 128, 210, 257, 1000, 1031]


@pytest.mark.parametrize("n", LENGTHS)
def test_fft_ifft_any_length(native, n):
    z = _r(3, n, dtype=torch.complex64)
    for fn in (torch.fft.fft, torch.fft.ifft):
        for norm in (None, "ortho", "forward"):
            _close(fn(z.to("neuron"), norm=norm), fn(z, norm=norm))
    assert "aten::_fft_c2c" in torch_neuronx.get_executed_ops()


@pytest.mark.parametrize("n", LENGTHS)
def test_rfft_irfft_any_length(native, n):
    x = _r(2, n)
    _close(torch.fft.rfft(x.to("neuron")), torch.fft.rfft(x))
    spec = torch.fft.rfft(x)
    _close(torch.fft.irfft(spec.to("neuron"), n=n), torch.fft.irfft(spec, n=n))
    _close(torch.fft.hfft(spec.to("neuron"), n=n), torch.fft.hfft(spec, n=n))
    _close(torch.fft.ihfft(x.to("neuron")), torch.fft.ihfft(x))
    assert {"aten::_fft_r2c", "aten::_fft_c2r"} <= set(torch_neuronx.get_executed_ops())


def test_multi_dim_transforms(native):
    x, z = _r(4, 6, 10), _r(5, 7, 9, dtype=torch.complex64)
    cases = [
        (torch.fft.fft2, z, {}), (torch.fft.ifftn, z, dict(dim=(0, 2))), (torch.fft.fftn, z, dict(s=(4, 12), norm="ortho")),
        (torch.fft.rfft2, x, {}), (torch.fft.rfftn, x, dict(dim=(0, 2), norm="forward")),
        (torch.fft.irfft2, torch.fft.rfft2(x), dict(s=(6, 10))), (torch.fft.irfftn, torch.fft.rfftn(x), {}),
        (torch.fft.fft, x, {}),   # real input to a complex transform
    ]
    for fn, t, kw in cases:
        _close(fn(t.to("neuron"), **kw), fn(t, **kw))


def test_strided_inputs_and_non_last_dims(native):
    z = _r(8, 6, dtype=torch.complex64).t()   # (6, 8) transposed
    _close(torch.fft.fft(z.to("neuron"), dim=0), torch.fft.fft(z, dim=0))
    x = _r(12, 5)[::2]
    _close(torch.fft.rfft(x.to("neuron"), dim=0), torch.fft.rfft(x, dim=0))
    _close(torch.fft.fftshift(torch.fft.fft(z.to("neuron"))), torch.fft.fftshift(torch.fft.fft(z)))


def test_fft_gradients(native):
    x = _r(3, 20)
    xc, xd = x.clone().requires_grad_(), x.to("neuron").requires_grad_()
    for out_c, out_d in ((torch.fft.rfft(xc), torch.fft.rfft(xd)), (torch.fft.fft(xc, norm="ortho"), torch.fft.fft(xd, norm="ortho"))):
        w = _r(*out_c.shape, seed=4, dtype=torch.complex64)
        (out_c * w).real.sum().backward()
        (out_d * w.to("neuron")).real.sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-4)
    spec = torch.fft.rfft(x)
    sc, sd = spec.clone().requires_grad_(), spec.to("neuron").requires_grad_()
    torch.fft.irfft(sc, n=20).pow(2).sum().backward()
    torch.fft.irfft(sd, n=20).pow(2).sum().backward()
    torch.testing.assert_close(sd.grad.cpu(), sc.grad, rtol=1e-4, atol=1e-4)


def test_spectral_convolution_matches_direct(native):
    # the common use: circular convolution by FFT on the device
    a, b = _r(64), _r(64, seed=2)
    ad, bd = a.to("neuron"), b.to("neuron")
    conv = torch.fft.irfft(torch.fft.rfft(ad) * torch.fft.rfft(bd), n=64)
    direct = torch.stack([(a * b.flip(0).roll(k + 1)).sum() for k in range(64)])   # sum_j a[j] b[k - j]
    torch.testing.assert_close(conv.cpu(), direct, rtol=1e-4, atol=1e-4)


def test_half_precision_is_refused_like_cpu(native):
    with pytest.raises(RuntimeError):
        torch.fft.fft(torch.ones(8, dtype=torch.float16))
    with pytest.raises(RuntimeError):
        torch.fft.fft(torch.ones(8, dtype=torch.float16, device="neuron"))


def _layouts(*shape, dtype=torch.float32):
    """The same values in several layouts: contiguous, transposed, permuted, sliced with a step,
    and with size-1 dims whose strides are not the canonical ones."""
    x = _r(*shape, dtype=dtype)
    nd = len(shape)
    perm = list(range(nd))[::-1]
    yield "contiguous", x
    yield "transposed", x.transpose(0, nd - 1).contiguous().transpose(0, nd - 1)
    yield "permuted", x.permute(perm).contiguous().permute(perm)
    yield "sliced", _r(*[2 * s for s in shape], dtype=dtype)[tuple(slice(None, None, 2) for _ in shape)]
    y = x.unsqueeze(1).unsqueeze(0)
    strides = list(y.stride())
    strides[0], strides[2] = 1, 1000
    yield "size-1 dims", y.as_strided(y.shape, strides)


def _same(actual, expected, what):
    assert actual.shape == expected.shape and actual.stride() == expected.stride(), \
        f"{what}: neuron {tuple(actual.shape)} {actual.stride()}, CPU {tuple(expected.shape)} {expected.stride()}"
    _close(actual, expected)


def test_result_strides_match_cpu(native):
    # CPU's (MKL) _exec_fft lays a result out with the untransformed dims outermost, ordered by
    # the input's strides, and the transformed ones innermost; code that views the result
    # (y.transpose(1, 2).view(...)) depends on it.
    funcs = [
        (torch.fft.fft, False, dict(dim=1, n=10)), (torch.fft.ifft, True, dict(dim=0)),
        (torch.fft.fft, True, dict(dim=-1, norm="ortho")),
        (torch.fft.rfft, False, dict(dim=0)), (torch.fft.rfft, False, dict(dim=-1)),
        (torch.fft.irfft, True, dict(dim=1)), (torch.fft.irfft, True, dict(dim=0, n=7)),
        (torch.fft.hfft, True, dict(dim=1)), (torch.fft.ihfft, False, dict(dim=0)),
        (torch.fft.fft2, True, {}), (torch.fft.fft2, True, dict(dim=(0, 2))),
        (torch.fft.ifftn, True, dict(dim=(2, 0))), (torch.fft.fftn, False, {}),
        (torch.fft.rfft2, False, {}), (torch.fft.rfftn, False, dict(dim=(2, 0))),
        (torch.fft.irfft2, True, {}), (torch.fft.irfftn, True, dict(dim=(0, 1))),
        (torch.fft.hfft2, True, {}), (torch.fft.ihfftn, False, dict(dim=(1, 2))),
    ]
    for fn, complex_in, kw in funcs:
        for name, x in _layouts(4, 5, 6, dtype=torch.complex64 if complex_in else torch.float32):
            if "dim" in kw and name == "size-1 dims":
                continue  # (dims would name the inserted ones)
            _same(fn(x.to("neuron"), **kw), fn(x, **kw), f"{fn.__name__}{kw} on a {name} input {x.stride()}")
    # the raw ops, both one-sided forms, over size-1 dims with arbitrary strides
    base = _r(3, 1, 4, 1, 5)
    for p in ([0, 1, 2, 3, 4], [4, 1, 3, 0, 2], [2, 3, 0, 4, 1]):
        x = base.permute(p)
        z = x.to(torch.complex64)
        for dims in ([0], [4], [1, 3], [3, 0, 2], [0, 1, 2, 3, 4]):
            for onesided in (True, False):
                _same(torch.ops.aten._fft_r2c(x.to("neuron"), dims, 0, onesided),
                      torch.ops.aten._fft_r2c(x, dims, 0, onesided), f"_fft_r2c {x.stride()} {dims} {onesided}")
            _same(torch.ops.aten._fft_c2c(z.to("neuron"), dims, 1, True), torch.ops.aten._fft_c2c(z, dims, 1, True),
                  f"_fft_c2c {z.stride()} {dims}")
            n = 2 * (z.shape[dims[-1]] - 1) or 1
            _same(torch.ops.aten._fft_c2r(z.to("neuron"), dims, 2, n), torch.ops.aten._fft_c2r(z, dims, 2, n),
                  f"_fft_c2r {z.stride()} {dims}")
    # no dims: a copy in the input's layout
    z = _r(4, 6, dtype=torch.complex64).t()
    _same(torch.ops.aten._fft_c2c(z.to("neuron"), [], 0, True), torch.ops.aten._fft_c2c(z, [], 0, True), "no dims")
    # the view that needs the layout
    y = torch.fft.fft(_r(5, 6, 7).to("neuron"), n=10, dim=1)
    assert y.transpose(1, 2).view(5, 70).shape == (5, 70)


def test_stft_strides_match_cpu(native):
    w = torch.hann_window(16)
    for name, x in _layouts(3, 100):
        if name == "size-1 dims":
            continue
        for onesided in (True, False):
            kw = dict(n_fft=16, hop_length=4, window=w, return_complex=True, onesided=onesided)
            expected = torch.stft(x, **kw)
            _same(torch.stft(x.to("neuron"), **{**kw, "window": w.to("neuron")}), expected, f"stft {name} {onesided}")


def test_out_on_another_device_is_refused_like_cpu(native):
    x, z = _r(4, 6), _r(4, 6, dtype=torch.complex64)
    for fn, t, out in ((torch.fft.fft, z, torch.empty(0, dtype=torch.complex64, device="neuron")),
                       (torch.fft.rfft, x, torch.empty(0, dtype=torch.complex64, device="neuron")),
                       (torch.fft.irfft, z, torch.empty(0, device="neuron"))):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            fn(t, out=out)
    # out= on the device keeps working, at the out tensor's own strides when its shape fits
    o = torch.empty(6, 4, dtype=torch.complex64, device="neuron").t()
    torch.fft.fft(z.to("neuron"), out=o)
    assert o.stride() == (1, 4)
    _close(o, torch.fft.fft(z))
