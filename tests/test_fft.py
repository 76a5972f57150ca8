"""torch.fft on neuron: _fft_r2c, _fft_c2r and _fft_c2c (the ops every torch.fft function
reaches) for any length — powers of two, mixed radix and primes (Bluestein) — over one or
several dims, every normalization, forward and backward, against CPU PyTorch (pocketfft).
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
