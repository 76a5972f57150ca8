"""Result layouts (strides) that CPU PyTorch fixes and code can depend on (a later .view() of
the result works on CPU only where the strides match): each case compares neuron's strides
and values with CPU's."""
import pytest
import torch

import torch_neuronx

F = torch.nn.functional


def _r(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _same(actual, expected, what, **tol):
    assert actual.stride() == expected.stride(), f"{what}: neuron {actual.stride()}, CPU {expected.stride()}"
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **tol)


EXPONENTS = {
    "transposed": _r(5, 4).t(),
    "channels_last": _r(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),
    "sliced": _r(6, 8)[::2, 1::3],
    "size-1 dims": _r(1, 2, 4).permute(1, 2, 0),
    "int64": torch.arange(12).reshape(3, 4).t(),
}


@pytest.mark.parametrize("layout", list(EXPONENTS))
def test_pow_with_a_scalar_base_is_contiguous_as_on_cpu(native, layout):
    # ATen's pow.Scalar meta allocates a contiguous result whatever the exponent's layout;
    # ldexp (self * 2 ** other) inherits it.
    e = EXPONENTS[layout]
    for base in (2, 1.0, 0.5, 3):
        _same(torch.pow(base, e.to("neuron")), torch.pow(base, e), f"{base} ** {layout}")
    if e.is_floating_point():
        _same(torch.ldexp(e.to("neuron"), e.to("neuron")), torch.ldexp(e, e), f"ldexp {layout}")
    (2 ** e.to("neuron")).view(-1)  # the view CPU's result allows


def _bn_inputs():
    seq = _r(2, 4, 3).permute(0, 2, 1)  # an (N, L, C) sequence seen as (N, C, L)
    yield "ambiguous channels_last 4-D", seq[..., None]  # strides (12, 1, 3, 1): is_contiguous(channels_last)
    yield "ambiguous channels_last 5-D", seq[..., None, None]
    yield "channels_last", _r(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    yield "channels_last_3d", _r(2, 3, 2, 4, 5).contiguous(memory_format=torch.channels_last_3d)
    yield "channels_last, N=1 C=1", _r(1, 1, 4, 5).contiguous(memory_format=torch.channels_last)
    yield "contiguous", _r(2, 3, 4, 5)
    yield "sliced", _r(2, 6, 4, 5)[:, ::2]
    yield "transposed 3-D", _r(2, 5, 3).transpose(1, 2)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_result_layout_as_cpu(native, training):
    # CPU's batch_norm_cpu: with dense input and parameters, the format the input
    # is_contiguous in (not suggest_memory_format, which calls the ambiguous input contiguous);
    # else suggest_memory_format.
    for name, x in _bn_inputs():
        C = x.shape[1]
        w, b, rm, rv = _r(C, seed=1), _r(C, seed=2), _r(C, seed=3), _r(C, seed=4).abs() + 0.5
        for args in ((None, None), (w, b)):
            rmc, rvc, rmd, rvd = rm.clone(), rv.clone(), rm.to("neuron"), rv.to("neuron")
            expected = F.batch_norm(x, rmc, rvc, *args, training=training)
            dev = [a.to("neuron") if a is not None else None for a in args]
            actual = F.batch_norm(x.to("neuron"), rmd, rvd, *dev, training=training)
            _same(actual, expected, f"{name} training={training}", rtol=1e-4, atol=1e-5)
            torch.testing.assert_close(rmd.cpu(), rmc)
    # a non-contiguous weight takes CPU's other rule (suggest_memory_format)
    x = next(_bn_inputs())[1]
    wn = _r(6)[::2]
    _same(F.batch_norm(x.to("neuron"), None, None, _r(6).to("neuron")[::2], None, training=True),
          F.batch_norm(x, None, None, wn, None, training=True), "non-contiguous weight", rtol=1e-4, atol=1e-5)


def test_batch_norm_grad_input_layout_as_cpu(native):
    # grad_input's layout follows CPU's rule; its values are compared with a float64
    # reference: CPU's own backward is wrong for the ambiguous channels_last input (its
    # channels_last kernel reads the size-1 dims' strides), so it is not the reference there.
    for name, x in _bn_inputs():
        for training in (True, False):
            C = x.shape[1]
            rm, rv = _r(C, seed=3), _r(C, seed=4).abs() + 0.5
            g = _r(*x.shape, seed=5)
            leaf_c = x.clone().requires_grad_()
            F.batch_norm(leaf_c, rm.clone(), rv.clone(), training=training).backward(g)
            leaf_d = x.to("neuron").requires_grad_()
            F.batch_norm(leaf_d, rm.to("neuron"), rv.to("neuron"), training=training).backward(g.to("neuron"))
            assert leaf_d.grad.stride() == leaf_c.grad.stride(), (name, training, leaf_d.grad.stride(), leaf_c.grad.stride())
            ref = x.double().requires_grad_()
            dims = [0] + list(range(2, x.dim()))
            shape = [1, C] + [1] * (x.dim() - 2)
            if training:
                m, v = ref.mean(dims, keepdim=True), ref.var(dims, unbiased=False, keepdim=True)
            else:
                m, v = rm.double().view(shape), rv.double().view(shape)
            ((ref - m) / torch.sqrt(v + 1e-5) * g.double()).sum().backward()
            torch.testing.assert_close(leaf_d.grad.cpu(), ref.grad.float(), rtol=1e-4, atol=1e-4)


_W = torch.tensor([0.3])
ELEMENTWISE = {
    # CPU's TensorIterator kernels: contiguous for an input that is_contiguous (the strides of
    # its size-1 dims ignored), else the inputs' layout
    "relu": lambda a, b: torch.relu(a), "isnan": lambda a, b: torch.isnan(a),
    "round(decimals=2)": lambda a, b: torch.round(a, decimals=2),
    "mse_loss": lambda a, b: F.mse_loss(a, b, reduction="none"),
    "smooth_l1_loss": lambda a, b: F.smooth_l1_loss(a, b, reduction="none"),
    "smooth_l1_loss beta=0": lambda a, b: F.smooth_l1_loss(a, b, reduction="none", beta=0.0),
    # CPU's kernels into at::empty_like(input): the input's strides, size-1 dims' included
    "huber_loss": lambda a, b: F.huber_loss(a, b, reduction="none"),
    "prelu": lambda a, b: F.prelu(a, _W.to(a.device)),
    "binary_cross_entropy": lambda a, b: F.binary_cross_entropy(a.sigmoid(), b.sigmoid(), reduction="none"),
    "hardtanh": lambda a, b: F.hardtanh(a), "nan_to_num": lambda a, b: torch.nan_to_num(a),
    "threshold_backward": lambda a, b: torch.ops.aten.threshold_backward(b, a, 0.0),
}
OPERANDS = {
    "size-1 dim strided": (_r(1, 2, 4).permute(1, 2, 0), _r(2, 4, 1, seed=1)),   # (4, 1, 8)
    "mixed layouts": (_r(1, 2, 4).permute(1, 2, 0), _r(4, 2, 1, seed=1).transpose(0, 1)),
    "transposed": (_r(5, 4).t(), _r(5, 4, seed=1).t()),
    "channels_last": (_r(2, 3, 4, 5).contiguous(memory_format=torch.channels_last), _r(2, 3, 4, 5, seed=1)),
    "sliced": (_r(6, 8)[::2, ::3], _r(3, 3, seed=1)),
}


@pytest.mark.parametrize("layout", list(OPERANDS))
@pytest.mark.parametrize("op", list(ELEMENTWISE))
def test_elementwise_result_strides_as_cpu(native, op, layout):
    a, b = OPERANDS[layout]
    fn = ELEMENTWISE[op]
    _same(fn(a.to("neuron"), b.to("neuron")), fn(a, b), f"{op} on {layout} {a.stride()} {b.stride()}")
