"""Conformance against PyTorch's own OpInfo database (op_db).

For every OpInfo whose ATen op has a kernel registered for the neuron dispatch key, its
sample inputs (and their non-contiguous variants) run on neuron and on CPU and the results
are compared (values, dtypes, shapes; exceptions must match in type). For float32 the
gradients of the samples are compared too. Known differences are listed, each with a reason,
in tests/conformance_xfail.txt.

`make test` runs a bounded slice (float32 and int64, first samples of each op);
`make conformance` (NEURON_CONFORMANCE=full) runs every sample for more dtypes.
"""
import os
import pathlib

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import torch_neuronx  # noqa: F401

FULL = os.environ.get("NEURON_CONFORMANCE") == "full"
DTYPES = ([torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.uint8, torch.bool]
          if FULL else [torch.float32, torch.int64])
MAX_SAMPLES = None if FULL else 4
GRAD_SAMPLES = None if FULL else 2
# Ops whose outputs are random or depend on allocation, so not comparable sample by sample.
NONDETERMINISTIC = {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "bernoulli",
                    "normal", "rand_like", "randn_like", "randint_like", "uniform", "multinomial",
                    "nn.functional.dropout", "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout",
                    "nn.functional.dropout2d", "nn.functional.dropout3d", "cauchy", "exponential",
                    "geometric", "log_normal", "randint"}


# OpInfos whose ATen op is a composite (no neuron kernel of its own) over native kernels.
COMPOSITE_OF_NATIVE = {"argsort", "msort", "logcumsumexp", "fliplr", "flipud", "rot90", "take_along_dim",
                       "nn.functional.l1_loss", "binary_cross_entropy_with_logits",
                       "nn.functional.instance_norm"}
# Ops whose index results are defined only up to the order of equal values (CPU's unstable
# sort and its topk pick an order of their own; any order is correct): value outputs must
# match, index outputs must select the same values, once each. Stable sorts compare exactly.
# Value: the position of `dim` among the positional arguments.
TIE_ORDERED = {"sort": 0, "argsort": 0, "topk": 1, "median": 0, "nanmedian": 0, "kthvalue": 1}
# Of those, the ops that pick one index per line: the position of `keepdim` among the positional arguments.
ONE_PER_LINE = {"median": 1, "nanmedian": 1, "kthvalue": 2}
# CPU kernels that fail an internal layout assertion on some non-contiguous samples (a CPU bug,
# not a refusal of the input: native_group_norm asserts X.is_contiguous(memory_format) after
# making it so): their expected values come from the same sample made contiguous.
CPU_LAYOUT_ASSERT = {"native_group_norm"}


def _native_names() -> set[str]:
    regs = torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
    return {r.split("::", 1)[1].split(".", 1)[0] for r in regs if r.startswith("aten::")} | COMPOSITE_OF_NATIVE


def _xfails() -> dict[tuple[str, str], str]:
    path = pathlib.Path(__file__).with_name("conformance_xfail.txt")
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, dtype, reason = line.split(None, 2)
            out[(name, dtype)] = reason
    return out


NATIVE = _native_names()
XFAIL = _xfails()
# OpInfos whose ATen kernel has another name than the OpInfo: the op the Python entry point reaches.
KERNEL_OF = {"__getitem__": "index", "index_put": "_index_put_impl_", "log_sigmoid": "log_sigmoid_forward",
             "unique": "_unique2", "nn.functional.binary_cross_entropy": "binary_cross_entropy", "__rpow__": "pow",
             "nn.functional.mse_loss": "mse_loss", "nn.functional.smooth_l1_loss": "smooth_l1_loss",
             "nn.functional.huber_loss": "huber_loss", "group_norm": "native_group_norm",
             "nn.functional.scaled_dot_product_attention": "_scaled_dot_product_fused_attention_overrideable",
             # keyed by OpInfo name.variant: a kernel the variant reaches
             "nn.functional.interpolate.nearest": "upsample_nearest2d",
             "nn.functional.interpolate.nearest-exact": "_upsample_nearest_exact2d",
             "nn.functional.interpolate.linear": "upsample_linear1d",
             "nn.functional.interpolate.bilinear": "upsample_bilinear2d",
             "nn.functional.interpolate.bicubic": "upsample_bicubic2d",
             "nn.functional.interpolate.trilinear": "upsample_trilinear3d",
             "nn.functional.interpolate.area": "_adaptive_avg_pool3d",
             "nn.functional.adaptive_avg_pool3d": "_adaptive_avg_pool3d",
             "nn.functional.upsample_nearest": "upsample_nearest2d",
             "nn.functional.upsample_bilinear": "upsample_bilinear2d",
             "nn.functional.pad.reflect": "reflection_pad2d", "nn.functional.pad.replicate": "replication_pad2d",
             "nn.functional.pad.replicate_negative": "replication_pad2d",
             **{op.name: "_fft_c2c" for op in op_db if op.name.startswith("fft.")},
             "nn.functional.adaptive_max_pool1d": "adaptive_max_pool2d", "nn.functional.adaptive_max_pool2d": "adaptive_max_pool2d",
             "nn.functional.adaptive_max_pool3d": "adaptive_max_pool3d", "nn.functional.max_pool3d": "max_pool3d_with_indices",
             "nn.functional.multi_margin_loss": "multi_margin_loss",
             "nn.functional.multilabel_margin_loss": "multilabel_margin_loss_forward",
             "nn.functional.prelu": "_prelu_kernel", "nn.functional.threshold": "threshold",
             "cummax": "_cummax_helper", "cummin": "_cummin_helper", "nn.functional.embedding_bag": "_embedding_bag",
             **{f"nn.functional.conv{t}{n}d": "convolution_overrideable" for t in ("", "_transpose") for n in (1, 2, 3)}}


def _is_native(op) -> bool:
    name = op.aten_name or op.name
    ident = op.name + ("." + op.variant_test_name if op.variant_test_name else "")
    # The in-place kernel (index_fill_, masked_scatter_) serves the functional form too.
    return (name in NATIVE or name + "_" in NATIVE or KERNEL_OF.get(name) in NATIVE
            or KERNEL_OF.get(ident) in NATIVE)


OPS = [op for op in op_db if _is_native(op) and op.name not in NONDETERMINISTIC]


def _ident(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def _to(x, device):
    if isinstance(x, torch.Tensor):
        # Same storage contents, offset and strides: as_strided and view checks depend on them.
        storage = x.detach().untyped_storage().to(device=device)
        t = torch.empty(0, dtype=x.dtype, device=device).set_(storage, x.storage_offset(), x.size(), x.stride())
        return t.requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(_to(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _to(v, device) for k, v in x.items()}
    return x


def _tolerances(dtype):
    if dtype in (torch.bfloat16, torch.float16):
        return dict(rtol=1.6e-2, atol=1e-3)
    if dtype.is_floating_point or dtype.is_complex:
        return dict(rtol=2e-5, atol=2e-5)
    return dict(rtol=0, atol=0)


def _compare(actual, expected, dtype, what, tol=None):
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), what
        assert actual.device.type == "neuron", f"{what}: result on {actual.device}"
        torch.testing.assert_close(actual.cpu(), expected, equal_nan=True, **(tol or _tolerances(expected.dtype)),
                                   msg=lambda m: f"{what}: {m}")
    elif isinstance(expected, (list, tuple)):
        assert len(actual) == len(expected), what
        for i, (a, e) in enumerate(zip(actual, expected)):
            _compare(a, e, dtype, f"{what}[{i}]", tol)
    else:
        assert actual == expected or (expected != expected and actual != actual), f"{what}: {actual} != {expected}"


def _run(op, sample):
    return op(sample.input, *sample.args, **sample.kwargs)


def _on_neuron(sample):
    """The sample with its tensors (same storage layout) and any device argument on neuron."""
    moved = sample.transform(lambda t: _to(t, "neuron"))
    has_tensor = isinstance(sample.input, torch.Tensor) or (
        isinstance(sample.input, (list, tuple)) and any(isinstance(t, torch.Tensor) for t in sample.input))
    if "device" in moved.kwargs or not has_tensor:  # factories
        moved.kwargs["device"] = "neuron"
    return moved


# Ops whose statistics outputs (all but the first) are in the computation dtype on devices
# other than CPU: torch._refs.native_layer_norm (the meta function) keeps float32 for 16-bit
# inputs except on CPU, and CUDA returns float32; neuron follows the meta function, which
# torch.compile traces with. The statistics are checked to be float32 and compared with CPU's
# after rounding to its dtype.
STATS_IN_OPMATH = {"native_layer_norm"}


def _check_sample(op, sample, dtype, what):
    if sample.kwargs.get("dropout_p", 0) > 0:  # random output (scaled_dot_product_attention's dropout)
        return
    try:
        try:
            expected = _run(op, sample)
        except RuntimeError as e:
            if op.name not in CPU_LAYOUT_ASSERT or "is_contiguous" not in str(e):
                raise
            expected = _run(op, sample.transform(lambda t: t.contiguous()))
    except Exception as e:  # the device must refuse the same input the same way
        with pytest.raises(type(e)):
            _run(op, _on_neuron(sample))
        return
    actual = _run(op, _on_neuron(sample))
    if op.name in STATS_IN_OPMATH:  # PyTorch's rule for every device but CPU (meta, CUDA)
        for a, e in zip(actual[1:], expected[1:]):
            assert a.dtype == torch.promote_types(e.dtype, torch.float32), (what, a.dtype, e.dtype)
        actual = (actual[0], *(a.to(e.dtype) for a, e in zip(actual[1:], expected[1:])))
    returns_indices = op.name not in ("median", "nanmedian") or sample.args or "dim" in sample.kwargs
    if op.name in TIE_ORDERED and not sample.kwargs.get("stable") and sample.input.dim() > 0 and returns_indices:
        _compare_tie_ordered(op, sample, actual, expected, dtype, what)
    else:
        _compare(actual, expected, dtype, what)


def _compare_tie_ordered(op, sample, actual, expected, dtype, what):
    pos = TIE_ORDERED[op.name]
    dim = sample.args[pos] if len(sample.args) > pos else sample.kwargs.get("dim", -1)
    if op.name == "argsort":
        got, want = actual, expected
    else:
        _compare(actual[0], expected[0], dtype, f"{what}[0]")
        got, want = actual[1], expected[1]
    assert got.device.type == "neuron" and got.dtype == want.dtype and got.shape == want.shape, what
    got = got.cpu()
    if op.name in ONE_PER_LINE:  # one index per line; the reduced dim is gone unless keepdim
        k = ONE_PER_LINE[op.name]
        keepdim = sample.args[k] if len(sample.args) > k else sample.kwargs.get("keepdim", False)
        if not keepdim:
            got, want = got.unsqueeze(dim), want.unsqueeze(dim)
        torch.testing.assert_close(sample.input.gather(dim, got), sample.input.gather(dim, want), equal_nan=True,
                                   rtol=0, atol=0, msg=lambda m: f"{what} (index selects another value): {m}")
        return
    torch.testing.assert_close(sample.input.gather(dim, got), sample.input.gather(dim, want), equal_nan=True,
                               rtol=0, atol=0, msg=lambda m: f"{what} (indices select other values): {m}")
    if got.numel():
        assert (got.sort(dim).values.diff(dim=dim) != 0).all(), f"{what}: an index repeats"


def _outputs(result):
    if isinstance(result, torch.Tensor):
        return [result]
    if isinstance(result, (list, tuple)):
        return [r for r in result if isinstance(r, torch.Tensor)]
    return []


def _grads(op, sample):
    inputs = [t for t in [sample.input, *sample.args] if isinstance(t, torch.Tensor) and t.requires_grad]
    outs = [o for o in _outputs(_run(op, sample)) if o.requires_grad and o.is_floating_point()]
    if not inputs or not outs:
        return None
    loss = sum((o * torch.linspace(0.5, 1.5, o.numel(), device=o.device).reshape(o.shape)).sum() for o in outs)
    return torch.autograd.grad(loss, inputs, allow_unused=True)


def _cases():
    for op in OPS:
        for dtype in DTYPES:
            if dtype in op.supported_dtypes("cpu"):
                marks = []
                reason = XFAIL.get((_ident(op), str(dtype).replace("torch.", ""))) or XFAIL.get((_ident(op), "all"))
                if reason:
                    marks.append(pytest.mark.xfail(reason=reason, strict=True))
                yield pytest.param(op, dtype, id=f"{_ident(op)}-{str(dtype).replace('torch.', '')}", marks=marks)


@pytest.mark.parametrize("op,dtype", list(_cases()))
def test_op_matches_cpu(op, dtype):
    torch.manual_seed(0)
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))[:MAX_SAMPLES]
    for i, sample in enumerate(samples):
        _check_sample(op, sample, dtype, f"{_ident(op)} sample {i}")
        _check_sample(op, sample.noncontiguous(), dtype, f"{_ident(op)} sample {i} (non-contiguous)")
    if dtype == torch.float32 and op.supports_autograd:
        for i, sample in enumerate(list(op.sample_inputs("cpu", dtype, requires_grad=True))[:GRAD_SAMPLES]):
            if sample.kwargs.get("dropout_p", 0) > 0:
                continue
            try:
                expected = _grads(op, sample)
            except Exception:
                continue
            if expected is None:
                continue
            actual = _grads(op, _on_neuron(sample))
            for k, (a, e) in enumerate(zip(actual, expected)):
                if e is not None:  # gradients accumulate more rounding: a looser absolute bound
                    _compare(a, e, dtype, f"{_ident(op)} grad {k} of sample {i}", dict(rtol=1e-4, atol=1e-4))


def test_harness_covers_the_native_elementwise_ops():
    names = {op.aten_name or op.name for op in OPS}
    for expected in ("add", "mul", "div", "exp", "gelu", "where", "clamp", "eq", "lerp", "addcmul"):
        assert expected in names
