"""Every stock torch.nn module of PyTorch's own ModuleInfo database
(torch.testing._internal.common_modules.module_db) on neuron against CPU, in train and eval
mode: float32 forward outputs, the buffers the forward updates (running statistics), and the
gradients of the inputs and parameters; the same exception type where CPU refuses an input.
A module passes only if no op took the CPU fallback.

`make test` runs a bounded slice (the first input of each module and mode); `make conformance`
(NEURON_CONFORMANCE=full) runs every input. Known gaps are listed, each with its reason, in
tests/module_db_xfail.txt (strict: a listed module that passes fails the suite, so the list
stays true); the README's limitations summarise them.
"""
import copy
import os
import pathlib
import warnings

import pytest
import torch
from torch.testing._internal.common_modules import module_db

import torch_neuronx

FULL = os.environ.get("NEURON_CONFORMANCE") == "full"
MAX_INPUTS = None if FULL else 1
TOL = dict(rtol=1e-4, atol=1e-5)
GRAD_TOL = dict(rtol=1e-3, atol=1e-4)   # gradients accumulate more rounding


def _xfails() -> dict[tuple[str, str], str]:
    out = {}
    for line in pathlib.Path(__file__).with_name("module_db_xfail.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, mode, reason = line.split(None, 2)
            out[(name, mode)] = reason
    return out


XFAIL = _xfails()


def _to_neuron(x, memo=None):
    """x with its tensors on neuron: same storage contents, offset and strides, same requires_grad;
    a tensor passed twice (input and target of a loss) stays one tensor."""
    memo = {} if memo is None else memo
    if isinstance(x, torch.Tensor):
        if id(x) not in memo:
            storage = x.detach().untyped_storage().to(device="neuron")
            t = torch.empty(0, dtype=x.dtype, device="neuron").set_(storage, x.storage_offset(), x.size(), x.stride())
            memo[id(x)] = t.requires_grad_(x.requires_grad)
        return memo[id(x)]
    if isinstance(x, (list, tuple)):
        return type(x)(_to_neuron(v, memo) for v in x)
    if isinstance(x, dict):
        return {k: _to_neuron(v, memo) for k, v in x.items()}
    return x


def _tensors(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _tensors(v)]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _tensors(v)]
    return []


def _compare(actual, expected, what, tol):
    assert actual.device.type == "neuron", f"{what}: result on {actual.device}"
    assert actual.dtype == expected.dtype and actual.shape == expected.shape, \
        f"{what}: {actual.dtype}{tuple(actual.shape)} != {expected.dtype}{tuple(expected.shape)}"
    if expected.is_floating_point() or expected.is_complex():
        torch.testing.assert_close(actual.detach().cpu(), expected.detach(), equal_nan=True, **tol,
                                   msg=lambda m: f"{what}: {m}")
    else:
        assert torch.equal(actual.cpu(), expected), what


def _run_input(info, module_input, training, what):
    """One ModuleInput on CPU and on neuron; returns the fallback ops of the neuron run."""
    ctor = module_input.constructor_input
    fwd_args, fwd_kwargs = module_input.forward_input.args, module_input.forward_input.kwargs
    torch.manual_seed(0)
    cpu = info.module_cls(*ctor.args, **ctor.kwargs).train(training)
    if info.is_lazy:   # materialise the parameters on CPU, so both copies hold the same values
        cpu(*copy.deepcopy(fwd_args), **copy.deepcopy(fwd_kwargs))
    dev = copy.deepcopy(cpu).to("neuron")
    dev_args, dev_kwargs = _to_neuron((fwd_args, fwd_kwargs))
    try:
        expected = cpu(*fwd_args, **fwd_kwargs)
    except Exception as e:   # an input CPU refuses: neuron must refuse it alike
        with pytest.raises(type(e)):
            dev(*dev_args, **dev_kwargs)
            torch.neuron.synchronize()
        return []
    torch_neuronx.clear_op_tracking()
    actual = dev(*dev_args, **dev_kwargs)
    outs_c, outs_d = _tensors(expected), _tensors(actual)
    assert len(outs_c) == len(outs_d), what
    for k, (a, e) in enumerate(zip(outs_d, outs_c)):
        _compare(a, e, f"{what} output {k}", TOL)
    for (name, b), (_, bd) in zip(cpu.named_buffers(), dev.named_buffers()):
        _compare(bd, b, f"{what} buffer {name}", TOL)
    # gradients of a weighted sum of the floating outputs, for inputs and parameters
    leaves_c, leaves_d = list(cpu.parameters()), list(dev.parameters())
    for c, d in zip(_tensors((fwd_args, fwd_kwargs)), _tensors((dev_args, dev_kwargs))):
        if c.requires_grad and not any(c is seen for seen in leaves_c):
            leaves_c.append(c)
            leaves_d.append(d)
    pairs = [(c, d) for c, d in zip(outs_c, outs_d) if c.requires_grad and c.is_floating_point()]
    if pairs and leaves_c:
        loss_c = sum((c * torch.linspace(0.5, 1.5, c.numel()).reshape(c.shape)).sum() for c, _ in pairs)
        loss_d = sum((d * torch.linspace(0.5, 1.5, d.numel(), device="neuron").reshape(d.shape)).sum() for _, d in pairs)
        grads_c = torch.autograd.grad(loss_c, leaves_c, allow_unused=True)
        grads_d = torch.autograd.grad(loss_d, leaves_d, allow_unused=True)
        for k, (gd, gc) in enumerate(zip(grads_d, grads_c)):
            if gc is not None:
                assert gd is not None, f"{what}: gradient {k} missing on neuron"
                _compare(gd, gc, f"{what} gradient {k}", GRAD_TOL)
    torch.neuron.synchronize()
    return torch_neuronx.get_fallback_ops()


def _cases():
    for info in module_db:
        if torch.float32 not in info.supported_dtypes("cpu"):
            continue
        for mode in ("train", "eval"):
            reason = XFAIL.get((info.name, mode)) or XFAIL.get((info.name, "all"))
            marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
            yield pytest.param(info, mode == "train", id=f"{info.name}-{mode}", marks=marks)


@pytest.mark.parametrize("info,training", list(_cases()))
def test_module_matches_cpu_natively(info, training):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # deprecations of the modules themselves
        inputs = info.module_inputs_func(info, device="cpu", dtype=torch.float32, requires_grad=True,
                                         training=training)
        fallbacks = []
        for i, module_input in enumerate(inputs[:MAX_INPUTS]):
            if module_input.forward_input is None:
                continue
            fallbacks += _run_input(info, module_input, training, f"{info.name} input {i}")
    assert fallbacks == [], f"{info.name}: ops took the CPU fallback: {sorted(set(fallbacks))}"


def test_the_sweep_covers_module_db():
    names = {info.name for info in module_db}
    assert len(names) >= 100 and {"nn.Conv3d", "nn.ConvTranspose3d", "nn.TransformerEncoder", "nn.LSTM"} <= names
    listed = {name for name, _ in XFAIL}
    assert listed <= names, f"xfail entries for unknown modules: {sorted(listed - names)}"
