"""The conformance harness: PyTorch's OpInfo samples (op_db) on neuron against CPU PyTorch.

Used by tests/test_conformance.py (pytest) and tools/gen_op_compatibility.py (the reach table).
Terms:

- registered overload: an aten overload with a kernel for the neuron (PrivateUse1) key.
- reach: the registered overloads an OpInfo's samples call (the dtype gate's coverage record,
  nested calls of composites included) and the native kernels that ran (get_executed_ops()).
  An OpInfo is tested when its samples reach a registered overload that is not plumbing
  (creation, views, copies, fill): OpInfos are selected by the kernels they reach, not by
  their names.
- a sample check runs one call form (functional, in-place, out=, gradient) on CPU and on
  neuron and classifies it: `native` (values, dtype and shape equal CPU's within the dtype's
  tolerance, no CPU fallback ran, a native kernel ran), `fallback` (equal to CPU, but through
  the CPU fallback: reported with the ops that fell back, never counted as a pass), `raise`
  (CPU raised and neuron raised the same exception type), `composite` (equal to CPU, with only
  plumbing kernels run: views and copies), `xfail` (a listed difference, per sample, with its
  reason) — or a failure.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import math
import os
import pathlib
import warnings

import torch
from torch.testing._internal.common_methods_invocations import op_db

import torch_neuronx

ALL_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
              torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.bool]
# Overloads with a neuron kernel, less those registered to the CPU fallback (no native dtype).
REGISTERED = frozenset(r for r in torch._C._dispatch_get_registrations_for_dispatch_key("PrivateUse1")
                       if r.startswith("aten::")) - {r for r, d in torch_neuronx._C._native_dtypes().items() if not d}
REGISTERED_NAMES = frozenset(r.split(".", 1)[0] for r in REGISTERED)
# Creation, views, copies and fills: every op reaches them; they do not make an OpInfo native.
PLUMBING = frozenset({"aten::empty", "aten::empty_strided", "aten::as_strided", "aten::view", "aten::_reshape_alias",
                      "aten::_copy_from", "aten::_copy_from_and_resize", "aten::copy_", "aten::resize_", "aten::set_",
                      "aten::_local_scalar_dense", "aten::fill_", "aten::zero_", "aten::unfold",
                      "aten::view_as_real", "aten::view_as_complex", "aten::_has_compatible_shallow_copy_type"})
# Ops whose outputs are random or depend on allocation: dtype, shape and raising are compared,
# values are not (tests/test_rng.py checks their distributions). The first five are skipped as
# "output is non-deterministic" by PyTorch's own device-vs-CPU test (their OpInfos'
# test_compare_cpu decorators): random samples or random projections.
NONDETERMINISTIC = {"nn.functional.fractional_max_pool2d", "nn.functional.fractional_max_pool3d",
                    "nn.functional.rrelu", "svd_lowrank", "pca_lowrank",
                    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted",
                    "bernoulli", "normal", "rand_like", "randn_like", "randint_like", "uniform", "multinomial",
                    "nn.functional.dropout", "nn.functional.alpha_dropout", "nn.functional.feature_alpha_dropout",
                    "nn.functional.dropout2d", "nn.functional.dropout3d", "cauchy", "exponential",
                    "geometric", "log_normal", "randint", "randn", "rand"}
# Positional index of dropout_p for OpInfos that take it positionally (with training=True).
DROPOUT_ARG = {"nn.functional.multi_head_attention_forward": 9}


def is_random(op, sample) -> bool:
    """The sample's outputs are random draws (or uninitialised memory): compare dtype, shape
    and raising only. Dropout is checked statistically in tests/test_rng.py and
    tests/test_attention.py."""
    if op.name in NONDETERMINISTIC or sample.kwargs.get("dropout_p", 0) > 0:
        return True
    pos = DROPOUT_ARG.get(op.name)
    return (pos is not None and len(sample.args) > pos and sample.args[pos] > 0
            and sample.kwargs.get("training", True))


# Ops whose statistics outputs (all but the first) are in the computation dtype on devices other
# than CPU: torch._refs.native_layer_norm (the meta function) keeps float32 for 16-bit inputs
# except on CPU, and CUDA returns float32; neuron follows the meta function, which torch.compile
# traces with. The statistics are checked to be float32 and compared with CPU's after rounding
# to its dtype.
STATS_IN_OPMATH = {"native_layer_norm"}
# Index results defined only up to the order of equal values (CPU's unstable sort and topk
# pick an order of their own; any order is correct): value outputs must match, index outputs
# must select the same values, once each. Value: the position of `dim` among the positional args.
TIE_ORDERED = {"sort": 0, "argsort": 0, "topk": 1, "median": 0, "nanmedian": 0, "mode": 0, "kthvalue": 1}
# CPU kernels that fail an internal layout assertion on some non-contiguous samples (a CPU bug:
# native_group_norm asserts X.is_contiguous(memory_format) after making it so): expected values
# come from the same sample made contiguous.
CPU_LAYOUT_ASSERT = {"native_group_norm"}
# Tolerances looser than torch.testing's defaults, each with its reason.
LOOSER = {
    # The device rule: float64 is computed through float32, so float32's tolerances apply.
    torch.float64: dict(rtol=1.3e-6, atol=1e-5),
    torch.complex128: dict(rtol=1.3e-6, atol=1e-5),
}
# Looser tolerances than torch.testing's defaults, per OpInfo and dtype: (reason, {dtype: tol},
# OpInfo idents). Each reason says why neuron and CPU legitimately differ by that much.
_F16, _BF16 = torch.float16, torch.bfloat16
TOLERANCE_GROUPS = [
    ("float32 dot products summed by OpenBLAS sgemm's blocked order, CPU's kernel in its own: "
     "roundings of K terms (observed 2.1e-5 absolute at magnitude 5; 4.0e-5 at magnitude 1.8 in a 3-D "
     "transposed convolution's input gradient; complex64 convolutions are three real ones)",
     {torch.float32: dict(rtol=1e-5, atol=3e-5), torch.complex64: dict(rtol=1e-5, atol=3e-5)},
     ["matmul", "__rmatmul__", "mm", "bmm", "addmm", "addmm.decomposed", "addmv", "baddbmm", "nn.functional.linear",
      "nn.functional.bilinear", "einsum", "inner", "tensordot", "linalg.multi_dot", "chain_matmul", "mv", "addbmm",
      "nn.functional.multi_head_attention_forward", "nn.functional.conv1d", "nn.functional.conv2d",
      "nn.functional.conv3d", "nn.functional.conv_transpose1d", "nn.functional.conv_transpose2d",
      "nn.functional.conv_transpose3d"]),
    ("float64 and complex128 compute through float32 (the device's float64 rule: inputs rounded to "
     "float32), then K-term sums: float32's accumulated rounding (observed 6e-5 at magnitude 28)",
     {torch.float64: dict(rtol=1e-5, atol=1e-4), torch.complex128: dict(rtol=1e-5, atol=1e-4)},
     ["matmul", "__rmatmul__", "mm", "bmm", "addmm", "addmv", "baddbmm", "nn.functional.linear",
      "nn.functional.conv1d", "nn.functional.conv2d", "nn.functional.conv_transpose1d",
      "nn.functional.conv_transpose2d", "einsum", "inner", "tensordot", "mv", "addbmm",
      "nn.functional.multi_head_attention_forward", "nn.functional.conv3d", "nn.functional.conv_transpose3d"]),
    ("float64 computes through float32 (inputs rounded to float32); pow and tan amplify that "
     "rounding (relative condition numbers |y log x| and |2x / sin 2x|; observed 1.4e-6 and 1.8e-5 "
     "relative)",
     {torch.float64: dict(rtol=5e-5, atol=1e-5)}, ["pow", "float_power", "tan"]),
    ("the fused kernel sums products in BLAS sgemm's order, CPU's flash kernel in its own blocks "
     "(observed 1.5e-5 relative); float64 is computed through float32; CPU's reduced-precision "
     "kernel rounds the probabilities to the dtype before multiplying by V, neuron keeps float32 "
     "until the output (observed 1.5e-3 float16, 7.8e-3 bfloat16)",
     {torch.float32: dict(rtol=3e-5, atol=3e-5), torch.float64: dict(rtol=3e-5, atol=5e-5),
      _F16: dict(rtol=1e-3, atol=3e-3), _BF16: dict(rtol=1.6e-2, atol=1.5e-2)},
     ["nn.functional.scaled_dot_product_attention"]),
    ("CPU adds alpha * b rounded to the dtype (two roundings); neuron rounds a + alpha * b once: "
     "up to 2 float16 ulps apart",
     {_F16: dict(rtol=2e-3, atol=1e-5)}, ["add", "sub"]),
    ("CPU rounds beta * self and alpha * outer(v1, v2) to the dtype before adding; near cancellation "
     "the results differ by half an ulp of the terms (observed 0.0625 in bfloat16 at magnitude 16)",
     {_F16: dict(rtol=1e-3, atol=1.6e-2), _BF16: dict(rtol=1.6e-2, atol=1e-1)}, ["addr"]),
    ("CPU's reduced-precision kernels round intermediates (the max-shifted input, the folded "
     "scale and shift of batch norm, x - mean of layer norm, the chunked logits) to the dtype; neuron "
     "keeps float32 until the output: values that cancel to about 0 differ by one ulp at magnitude 1 "
     "(observed 4e-3 bfloat16, 8e-3 float16 for the chunked losses, 0.05/0.016 for batch norm)",
     {_F16: dict(rtol=1e-3, atol=1.6e-2), _BF16: dict(rtol=1.6e-2, atol=6e-2)},
     ["log_softmax", "log_softmax.with_dtype", "masked.log_softmax", "masked.logsumexp", "native_layer_norm", "nn.functional.layer_norm",
      "native_batch_norm", "_native_batch_norm_legit", "nn.functional.batch_norm", "nn.functional.batch_norm.without_cudnn",
      "nn.functional.instance_norm", "nn.functional.linear_cross_entropy",
      "nn.functional.linear_cross_entropy.chunked", "nn.functional.linear_cross_entropy.chunked_none"]),
    ("CPU's 16-bit area pooling sums each window in the dtype (every addition rounded), its linear, "
     "bicubic and trilinear kernels keep the interpolation weights in the dtype; neuron sums and weighs "
     "in float32 until the output (observed 3.9e-3 float16; 2.3e-2 area and 4.7e-2 trilinear in bfloat16)",
     {_F16: dict(rtol=1e-3, atol=8e-3), _BF16: dict(rtol=1.6e-2, atol=1e-1)},
     ["nn.functional.adaptive_avg_pool3d", "nn.functional.interpolate.area", "nn.functional.interpolate.linear",
      "nn.functional.interpolate.bicubic", "nn.functional.interpolate.trilinear"]),
    ("CPU's 16-bit grid samplers compute the coordinates, weights and sums in the dtype (every "
     "operation rounded: a bfloat16 coordinate near 20 is a multiple of 1/8 pixel), so its nearest "
     "sampling picks other pixels and its interpolation weighs other points; neuron computes in "
     "float32 and rounds the output once (CPU's float32 result rounded to the dtype, which "
     "tests/test_vision.py checks): up to the samples' value range (observed 3.5 float16, 3.9 "
     "bfloat16)",
     {_F16: dict(rtol=1e-3, atol=4.0), _BF16: dict(rtol=1.6e-2, atol=4.0)},
     ["grid_sampler_2d", "nn.functional.grid_sample"]),
    ("CPU's 16-bit 3-D grid sampler computes the coordinates and weights in the dtype (every "
     "operation rounded); neuron in float32 until the output (observed 0.08 float16, 0.68 bfloat16 "
     "at magnitude 1)",
     {_F16: dict(rtol=1e-3, atol=1e-1), _BF16: dict(rtol=1.6e-2, atol=1.0)}, ["grid_sampler_3d"]),
    ("CPU's 16-bit transposed convolution rounds its column buffer (each product sum) to the dtype "
     "before the col2im additions; neuron keeps float32 until the output: a few ulps at the magnitude of "
     "the partial sums, up to about 100 in these samples (observed 6.3e-2 float16, 0.375 bfloat16)",
     {_F16: dict(rtol=1e-3, atol=1.25e-1), _BF16: dict(rtol=1.6e-2, atol=7.5e-1)},
     ["nn.functional.conv_transpose1d", "nn.functional.conv_transpose2d", "nn.functional.conv_transpose3d"]),
    ("CPU's pocketfft computes float32 transforms in float32, its rounding growing with each pass "
     "and dimension; neuron's kernel computes in double and rounds once (observed 3.4e-5 absolute at "
     "magnitude 3.5, fft.hfft2)",
     {torch.float32: dict(rtol=1e-5, atol=5e-5), torch.complex64: dict(rtol=1e-5, atol=5e-5)},
     sorted({o.name + ("." + o.variant_test_name if o.variant_test_name else "") for o in op_db
             if o.name.startswith("fft.")})),
    ("histogram's weighted and density bins sum float32 weights, in another order on neuron than on "
     "CPU (observed 1.4e-5 absolute at magnitude 2.3)",
     {torch.float32: dict(rtol=1e-5, atol=3e-5)}, ["histogram"]),
    ("CPU sums the reduced-precision loss terms with roundings to the dtype; neuron sums in float32 "
     "(observed 3.2e-2 relative in bfloat16, 4.2e-3 in float16)",
     {_F16: dict(rtol=6e-3, atol=1e-3), _BF16: dict(rtol=5e-2, atol=1e-2)},
     ["nn.functional.nll_loss", "nn.functional.multilabel_soft_margin_loss", "nn.functional.huber_loss"]),
]
OP_TOLERANCE = {(name, dtype): tol for _, tols, names in TOLERANCE_GROUPS for dtype, tol in tols.items()
                for name in names}
# Gradients: (reason, tol, OpInfo idents), float32.
GRAD_TOLERANCE_GROUPS = [
    ("the weight and bias gradients of layer norm are sums over every row, in different orders on "
     "CPU and neuron (observed 4.9e-5 absolute)",
     dict(rtol=1.3e-6, atol=1e-4), ["native_layer_norm", "nn.functional.layer_norm"]),
    ("the loss weights torch.linspace(0.5, 1.5, n) of the largest 3-D grid samples (n = 554,400) "
     "differ in the last bit between neuron's and CPU's linspace kernels in about 1 element in 8; "
     "the grid gradient sums 8 taps x 21 channels of them (observed 3.1e-5 absolute at magnitude 1; "
     "with CPU's weights on both devices the gradients are equal)",
     dict(rtol=1.3e-6, atol=1e-4), ["grid_sampler_3d"]),
]
GRAD_TOLERANCE = {name: tol for _, tol, names in GRAD_TOLERANCE_GROUPS for name in names}


def ident(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def dtype_name(dtype) -> str:
    return str(dtype).replace("torch.", "")


# ---------------------------------------------------------------- moving samples


def to_device(x, device):
    """x with every tensor copied (always a new storage) to `device` with the same storage
    contents, offset and strides (as_strided and view checks depend on them), requires_grad kept."""
    if isinstance(x, torch.Tensor):
        storage = x.detach().untyped_storage()
        storage = storage.clone() if storage.device == torch.device(device) else storage.to(device=device)
        t = torch.empty(0, dtype=x.dtype, device=device).set_(storage, x.storage_offset(), x.size(), x.stride())
        return t.requires_grad_(x.requires_grad)
    if isinstance(x, (list, tuple)):
        return type(x)(to_device(v, device) for v in x)
    if isinstance(x, dict):
        return {k: to_device(v, device) for k, v in x.items()}
    return x


def sample_on(sample, device):
    """A fresh copy of the sample on `device`; factories get device=neuron."""
    moved = sample.transform(lambda t: to_device(t, device))
    if device != "cpu" and ("device" in moved.kwargs or not tensors_of(sample)):
        moved.kwargs["device"] = device
    return moved


def tensors_of(sample):
    """Every tensor of a sample: input, positional and keyword arguments, lists included."""
    out = []
    for v in [sample.input, *sample.args, *sample.kwargs.values()]:
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (list, tuple)):
            out.extend(t for t in v if isinstance(t, torch.Tensor))
    return out


# ---------------------------------------------------------------- observing a call


@dataclasses.dataclass
class Observed:
    result: object = None
    error: BaseException | None = None
    reached: set = dataclasses.field(default_factory=set)  # registered overloads called
    ran: set = dataclasses.field(default_factory=set)      # native kernels that ran (op names)
    fallbacks: list = dataclasses.field(default_factory=list)


# The dtype gate notes every registered overload called (csrc/gate.h), nested calls included,
# without changing dispatch (a TorchDispatchMode would: it alters some composite out= ops).
torch_neuronx._C._set_coverage(True)


def observe(fn) -> Observed:
    """Runs fn() on neuron with op tracking and the coverage record; waits for the device."""
    obs = Observed()
    torch_neuronx.clear_op_tracking()
    torch_neuronx._C._take_reached()
    try:
        obs.result = fn()
        torch.neuron.synchronize()
    except Exception as e:  # noqa: BLE001 - compared with CPU's behaviour by the caller
        obs.error = e
        with contextlib.suppress(Exception):
            torch.neuron.synchronize()
    obs.reached = set(torch_neuronx._C._take_reached())
    obs.ran = set(torch_neuronx.get_executed_ops())
    obs.fallbacks = sorted(set(torch_neuronx.get_fallback_ops()))
    return obs


def native_targets(obs: Observed) -> set:
    """Registered, non-plumbing kernels the call reached or ran."""
    reached = {r for r in obs.reached if r.split(".", 1)[0] not in PLUMBING}
    ran = {n for n in obs.ran if n in REGISTERED_NAMES and n not in PLUMBING}
    return reached | ran


# ---------------------------------------------------------------- comparing


def tolerance(dtype, op=None, grad=False):
    """assert_close keyword arguments: the op's own entry, else the dtype's, else torch's defaults."""
    if op is not None and grad and ident(op) in GRAD_TOLERANCE and dtype == torch.float32:
        return GRAD_TOLERANCE[ident(op)]
    if op is not None and (ident(op), dtype) in OP_TOLERANCE:
        return OP_TOLERANCE[(ident(op), dtype)]
    return LOOSER.get(dtype, {})


def compare(actual, expected, what, tol=None, op=None, grad=False):
    """Raises AssertionError when actual (neuron) differs from expected (CPU)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{what}: got {type(actual).__name__}, expected a tensor"
        assert actual.device.type == "neuron", f"{what}: result on {actual.device}"
        assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype}, CPU gives {expected.dtype}"
        assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)}, CPU gives {tuple(expected.shape)}"
        torch.testing.assert_close(actual.detach().cpu(), expected.detach(), equal_nan=True,
                                   **(tol if tol is not None else tolerance(expected.dtype, op, grad)),
                                   msg=lambda m: f"{what}: {m}")
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), f"{what}: {actual!r} vs {expected!r}"
        for i, (a, e) in enumerate(zip(actual, expected)):
            compare(a, e, f"{what}[{i}]", tol, op, grad)
    elif isinstance(expected, float) and math.isnan(expected):
        assert isinstance(actual, float) and math.isnan(actual), f"{what}: {actual!r} != nan"
    else:
        assert actual == expected, f"{what}: {actual!r} != {expected!r}"


def compare_meta(actual, expected, what):
    """dtype, shape and device only (random outputs)."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor) and actual.device.type == "neuron", what
        assert (actual.dtype, actual.shape) == (expected.dtype, expected.shape), \
            f"{what}: {actual.dtype} {tuple(actual.shape)}, CPU gives {expected.dtype} {tuple(expected.shape)}"
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), what
        for i, (a, e) in enumerate(zip(actual, expected)):
            compare_meta(a, e, f"{what}[{i}]")


def _tie_ordered(op, sample) -> bool:
    """Index outputs that may order equal values differently (see TIE_ORDERED)."""
    if op.name not in TIE_ORDERED or sample.kwargs.get("stable") or not isinstance(sample.input, torch.Tensor):
        return False
    reduces_all = op.name in ("median", "nanmedian") and not sample.args and "dim" not in sample.kwargs
    return sample.input.dim() > 0 and not reduces_all


def compare_tie_ordered(op, sample, actual, expected, what):
    """Values equal; indices select the same values (any order of equal values is correct)."""
    pos = TIE_ORDERED[op.name]
    dim = sample.args[pos] if len(sample.args) > pos else sample.kwargs.get("dim", -1)
    if op.name == "argsort":
        got, want = actual, expected
    else:
        compare(actual[0], expected[0], f"{what}[0]")
        got, want = actual[1], expected[1]
    assert got.device.type == "neuron" and got.dtype == want.dtype and got.shape == want.shape, what
    got = got.cpu()
    x = sample.input
    if got.dim() < x.dim():  # one index per line, the reduced dim gone (keepdim=False)
        got, want = got.unsqueeze(dim), want.unsqueeze(dim)
    torch.testing.assert_close(x.gather(dim, got), x.gather(dim, want), equal_nan=True, rtol=0, atol=0,
                               msg=lambda m: f"{what} (indices select other values): {m}")
    if op.name in ("sort", "argsort", "topk") and got.numel():
        assert (got.sort(dim).values.diff(dim=dim) != 0).all(), f"{what}: an index repeats"


# ---------------------------------------------------------------- one check


def _run_cpu(op, fn, sample):
    try:
        return fn(sample, "cpu")
    except RuntimeError as e:  # CPU's own layout assertion: expected values from a contiguous copy
        if op.name not in CPU_LAYOUT_ASSERT or "is_contiguous" not in str(e):
            raise
        return fn(sample.transform(lambda t: t.contiguous()), "cpu")


def _is_tensors(r) -> bool:
    return isinstance(r, torch.Tensor) or (isinstance(r, (list, tuple)) and len(r) > 0
                                           and all(isinstance(t, torch.Tensor) for t in r))


def forms(op, sample):
    """The call forms of an op for a sample: name -> fn(sample on a device, device) returning
    what is compared. In-place: (result, mutated input). out=: (out tensors, returned value),
    the out tensors empty (resized by the op) with the dtypes of CPU's functional result."""
    functional = lambda s, d: op(s.input, *s.args, **s.kwargs)  # noqa: E731
    out = {"functional": functional}
    if op.inplace_variant is not None and isinstance(sample.input, torch.Tensor):
        out["inplace"] = lambda s, d: (op.inplace_variant(s.input, *s.args, **s.kwargs), s.input)
    if op.supports_out:
        def with_out(s, d):
            like = functional(sample_on(sample, "cpu"), "cpu")
            if not _is_tensors(like):
                return like
            o = (torch.empty(0, dtype=like.dtype, device=d) if isinstance(like, torch.Tensor)
                 else tuple(torch.empty(0, dtype=t.dtype, device=d) for t in like))
            return o, op(s.input, *s.args, **s.kwargs, out=o)
        out["out"] = with_out
    return out


def run_both(cpu_fn, neuron_fn):
    """(CPU result, CPU exception, neuron Observed); the neuron call's dispatches count for coverage."""
    try:
        expected, cpu_error = cpu_fn(), None
    except Exception as e:  # noqa: BLE001 - the device must raise the same type
        expected, cpu_error = None, e
    obs = observe(neuron_fn)
    REPORT.reached |= obs.reached
    return expected, cpu_error, obs


def judge(what, expected, cpu_error, obs, compare_values):
    """Where CPU raised, neuron must raise the same exception type ('raise'); else neuron must
    not raise and compare_values(actual, expected) must hold. Returns (kind, fallback ops):
    'fallback' when the CPU fallback ran, else 'native' when a native kernel ran, else
    'composite' (plumbing only)."""
    if cpu_error is not None:
        assert obs.error is not None, f"{what}: CPU raises {type(cpu_error).__name__}({cpu_error}), neuron does not"
        assert isinstance(obs.error, type(cpu_error)), \
            f"{what}: CPU raises {type(cpu_error).__name__}({cpu_error}), neuron {type(obs.error).__name__}({obs.error})"
        return "raise", obs.fallbacks
    if obs.error is not None:
        raise AssertionError(f"{what}: neuron raises {type(obs.error).__name__}: {obs.error} (CPU does not)")
    compare_values(obs.result, expected)
    if obs.fallbacks:
        return "fallback", obs.fallbacks
    return ("native" if native_targets(obs) else "composite"), []


def check(op, sample, form, form_fn, what, nondeterministic):
    """Runs one form on CPU and neuron. Returns (kind, fallback ops); raises AssertionError
    with the difference when neuron does not behave as CPU."""
    dev_sample = sample_on(sample, "neuron")
    expected, cpu_error, obs = run_both(lambda: _run_cpu(op, form_fn, sample_on(sample, "cpu")),
                                        lambda: form_fn(dev_sample, "neuron"))

    def values(actual, expected):
        if form == "functional":
            # As PyTorch's device-vs-CPU test: the OpInfo's canonical form of results that are not
            # unique (the signs of singular vectors, for instance).
            actual, expected = sample.output_process_fn_grad(actual), sample.output_process_fn_grad(expected)
            if op.name in STATS_IN_OPMATH:  # PyTorch's rule for every device but CPU (meta, CUDA)
                for a, e in zip(actual[1:], expected[1:]):
                    assert a.dtype == torch.promote_types(e.dtype, torch.float32), (what, a.dtype, e.dtype)
                actual = (actual[0], *(a.to(e.dtype) for a, e in zip(actual[1:], expected[1:])))
        if nondeterministic:
            compare_meta(actual, expected, what)
        elif form in ("functional", "out") and _tie_ordered(op, sample):
            if form == "out":  # (out tensors, returned value): the returned value is the out tensors
                compare_tie_ordered(op, sample, actual[0], expected[0], what)
            else:
                compare_tie_ordered(op, sample, actual, expected, what)
        else:
            compare(actual, expected, what, op=op)

    return judge(what, expected, cpu_error, obs, values)


def check_grads(op, dtype, sample, what, random=False):
    """Gradients of every tensor input (keyword and list inputs included) against CPU's."""
    dev_sample = sample_on(sample, "neuron")
    expected, cpu_error, obs = run_both(lambda: grads(op, sample_on(sample, "cpu")), lambda: grads(op, dev_sample))

    def values(actual, expected):
        if expected is None:
            assert actual is None, f"{what}: neuron computes gradients where CPU has none"
            return
        for k, (a, e) in enumerate(zip(actual, expected)):
            if e is None:
                assert a is None, f"{what}: gradient {k} is defined on neuron, not on CPU"
            elif random:
                compare_meta(a, e, f"{what} of input {k}")
            else:
                compare(a, e, f"{what} of input {k}", op=op, grad=True)

    kind, fallbacks = judge(what, expected, cpu_error, obs, values)
    return (None, []) if expected is None and cpu_error is None else (kind, fallbacks)


def check_call(what, fn, random=False):
    """A hand-written sample: fn(device) on CPU and on neuron, judged as check() does."""
    expected, cpu_error, obs = run_both(lambda: fn("cpu"), lambda: fn("neuron"))
    return judge(what, expected, cpu_error, obs,
                 lambda a, e: compare_meta(a, e, what) if random else compare(a, e, what)), obs


def grads(op, sample):
    """Gradients of sum(out * w) over every floating output (w fixed, 0.5..1.5) with respect to
    every tensor input that requires grad (input, positional, keyword and list arguments)."""
    inputs = [t for t in tensors_of(sample) if t.requires_grad]
    result = op(sample.input, *sample.args, **sample.kwargs)
    outs = [result] if isinstance(result, torch.Tensor) else \
        [r for r in result if isinstance(r, torch.Tensor)] if isinstance(result, (list, tuple)) else []
    outs = [o for o in outs if o.requires_grad and o.is_floating_point()]
    if not inputs or not outs:
        return None
    loss = sum((o * torch.linspace(0.5, 1.5, o.numel(), device=o.device, dtype=o.dtype).reshape(o.shape)).sum()
               for o in outs)
    return torch.autograd.grad(loss, inputs, allow_unused=True)


# ---------------------------------------------------------------- sample selection


def _until_error(it):
    """The items of `it` until it raises (op_db's generators for a dtype the op does not support)."""
    while True:
        try:
            yield next(it)
        except StopIteration:
            return
        except Exception:  # noqa: BLE001
            return


def samples_in(op, dtype, requires_grad=False):
    """op's sample inputs in `dtype`. For a dtype CPU does not support for the op, op_db often
    builds none (its generators refuse the dtype): then the samples of a dtype it supports
    (float32 first), with every tensor of that dtype cast to `dtype`, so that CPU's refusal is
    still compared with neuron's."""
    supported = op.supported_dtypes("cpu")
    try:  # lazily: max_pool2d alone has 1,440 samples
        it = iter(op.sample_inputs("cpu", dtype, requires_grad=requires_grad))
        first = next(it, None)
        if dtype in supported:
            return itertools.chain([] if first is None else [first], it)
        if first is not None:  # op_db's generator may refuse the dtype after a few samples
            return itertools.chain([first], _until_error(it))
    except Exception:  # noqa: BLE001 - only where CPU does not support the dtype either
        if dtype in supported or not supported:
            raise
    base = torch.float32 if torch.float32 in supported else sorted(supported, key=str)[0]
    return (s.transform(lambda t: t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype == base else t)
            for s in op.sample_inputs("cpu", base, requires_grad=requires_grad))



def _signature(sample) -> tuple:
    """Rank, emptiness and layout of every tensor, and the keyword arguments given."""
    def describe(t):
        return (t.dim(), t.numel() == 0, t.is_contiguous(), t.dtype)
    return (tuple(describe(t) for t in tensors_of(sample)), tuple(sorted(sample.kwargs)))


def select(samples, limit, fill=False):
    """Deterministic (index, sample) pairs, consumed lazily: the first sample of each distinct
    signature (ranks, zero-size, layout, keyword arguments) in the order op_db yields them, up
    to `limit` (None: no limit); with fill, the remaining samples in order up to `limit` too.
    Samples with sparse tensors are left out: neuron tensors are dense by design."""
    seen, rest, chosen = set(), [], 0
    for i, s in enumerate(samples):
        if any(t.layout != torch.strided for t in tensors_of(s)):
            continue
        sig = _signature(s)
        if sig in seen:
            if fill and (limit is None or chosen + len(rest) < limit):
                rest.append((i, s))
            continue
        seen.add(sig)
        yield i, s
        chosen += 1
        if limit is not None and chosen == limit:
            return
    for pair in rest[:None if limit is None else limit - chosen]:
        yield pair


# ---------------------------------------------------------------- expected differences


def load_xfails(path: pathlib.Path) -> dict:
    """{(op ident, dtype name, sample index or 'all'): reason} from lines
    `<ident> <dtype|all> <sample index|all> <reason>`; the form (functional, inplace, out,
    grad) may follow the index after a slash: `3/grad`."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, dtype, index, reason = line.split(None, 3)
            out[(name, dtype, index)] = reason
    return out


# ---------------------------------------------------------------- the report


class Report:
    """Counts of sample checks per dtype and kind; fallbacks per (op, dtype); coverage."""

    def __init__(self):
        self.counts = collections.defaultdict(collections.Counter)  # dtype -> kind -> n
        self.fallbacks = collections.defaultdict(set)                # (ident, dtype) -> ops
        self.reached = set()
        self.failures = []

    def add(self, dtype, kind, ident_=None, fallbacks=()):
        self.counts[dtype_name(dtype) if not isinstance(dtype, str) else dtype][kind] += 1
        if fallbacks:
            self.fallbacks[(ident_, dtype_name(dtype) if not isinstance(dtype, str) else dtype)].update(fallbacks)

    def log(self, op_ident, dtype, failures):
        """Appends a JSON line to $NEURON_CONFORMANCE_LOG (if set): the (op, dtype), its
        failures and the running counts, so that a long run can be read while it goes."""
        path = os.environ.get("NEURON_CONFORMANCE_LOG")
        if path:
            import json
            with open(path, "a") as f:
                f.write(json.dumps({"op": op_ident, "dtype": dtype_name(dtype), "failures": failures,
                                    "fallbacks": sorted(self.fallbacks.get((op_ident, dtype_name(dtype)), ()))}) + "\n")

    def fallback_table(self) -> list:
        """[{op, dtypes, opinfos}] per op that took the CPU fallback, sorted by op."""
        by_op = collections.defaultdict(lambda: (set(), set()))
        for (op_ident, dt), ops in self.fallbacks.items():
            for name in ops:
                by_op[name][0].add(dt)
                by_op[name][1].add(op_ident)
        order = {dtype_name(d): i for i, d in enumerate(ALL_DTYPES)}
        return [{"op": name, "dtypes": sorted(dts, key=lambda d: order.get(d, 99)), "opinfos": sorted(idents)}
                for name, (dts, idents) in sorted(by_op.items())]

    def write_fallbacks(self, path):
        """Writes fallback_table() as JSON (docs/conformance_fallbacks.json, rendered into
        docs/op_compatibility.md by tools/gen_op_compatibility.py)."""
        import json
        source = ("make conformance (tests/test_conformance.py, NEURON_CONFORMANCE=full: every selected OpInfo, "
                  "12 dtypes, up to 96 samples each)" if FULL else
                  "the make test slice (tests/test_conformance.py: the slice's OpInfos, up to 3 samples in "
                  "float32 and int64, 1 sample in each other dtype; make conformance runs them all)")
        kinds = ["native", "fallback", "raise", "xfail", "composite", "failed"]
        data = {"source": source, "torch": torch.__version__,
                "counts": {dt: {k: self.counts[dt][k] for k in kinds} for dt in sorted(self.counts)},
                "fallbacks": self.fallback_table()}
        pathlib.Path(path).write_text(json.dumps(data, indent=1) + "\n")

    def lines(self, show_unreached: bool):
        kinds = ["native", "fallback", "raise", "xfail", "composite", "failed"]
        out = ["conformance: sample checks per dtype (native = equal to CPU with no CPU fallback)",
               f"  {'dtype':<11}" + "".join(f"{k:>10}" for k in kinds)]
        for dt in sorted(self.counts):
            out.append(f"  {dt:<11}" + "".join(f"{self.counts[dt][k]:>10}" for k in kinds))
        if self.fallbacks:
            out.append("  samples that took the CPU fallback (op, dtype: fallback ops):")
            for (op, dt), ops in sorted(self.fallbacks.items()):
                out.append(f"    {op}, {dt}: {', '.join(sorted(ops))}")
        if show_unreached:
            from conformance_extra import EXEMPT
            missing = sorted(REGISTERED - self.reached - set(EXEMPT)
                             - {r for r in REGISTERED if r.split('.', 1)[0] in PLUMBING})
            out.append(f"  registered overloads no sample reached ({len(missing)}):")
            out.extend(f"    {m}" for m in missing)
            out.append("  not compared with CPU (tests/conformance_extra.py EXEMPT):")
            out.extend(f"    {name}: {reason}" for name, reason in sorted(EXEMPT.items()))
        return out


REPORT = Report()


@contextlib.contextmanager
def quiet():
    """Suppresses the one-time fallback and float64 warnings (and op_db's own) during checks."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


FULL = os.environ.get("NEURON_CONFORMANCE") == "full"


# ---------------------------------------------------------------- selecting OpInfos


def discover(samples_per_op: int = 3) -> dict:
    """{OpInfo ident: registered non-plumbing kernels its first samples reach} for every
    OpInfo of op_db (float32 samples, or the first dtype CPU supports), functional and
    in-place forms. OpInfos that reach none are composites of plumbing or CPU-only."""
    reach = {}
    with quiet():
        for op in op_db:
            dtypes = op.supported_dtypes("cpu")
            if not dtypes:
                continue
            dtype = torch.float32 if torch.float32 in dtypes else sorted(dtypes, key=str)[0]
            torch.manual_seed(0)
            targets = set()
            try:
                for k, sample in enumerate(op.sample_inputs("cpu", dtype)):
                    if k >= samples_per_op:
                        break
                    for form, fn in forms(op, sample).items():
                        if form == "out":
                            continue
                        dev = sample_on(sample, "neuron")
                        targets |= native_targets(observe(lambda: fn(dev, "neuron")))
            except Exception:  # noqa: BLE001 - an OpInfo whose samples cannot be built is not tested
                continue
            reach[ident(op)] = targets
    return reach


REACH_FILE = pathlib.Path(__file__).with_name("conformance_reach.json")


def fingerprint() -> str:
    """Identifies what discover() depends on: the registered overloads and torch's version."""
    import hashlib
    text = torch.__version__ + "\n" + "\n".join(sorted(REGISTERED))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def reach_table() -> tuple[dict, bool]:
    """discover()'s result from REACH_FILE when it was computed for the current registrations
    (tools/gen_op_compatibility.py writes it), else computed now. Returns (table, from file)."""
    import json
    if REACH_FILE.exists():
        data = json.loads(REACH_FILE.read_text())
        if data.get("fingerprint") == fingerprint():
            return {k: set(v) for k, v in data["reach"].items()}, True
    return discover(), False


def reach_json(reach: dict) -> str:
    import json
    return json.dumps({"fingerprint": fingerprint(), "reach": {k: sorted(v) for k, v in sorted(reach.items()) if v}},
                      indent=1) + "\n"


def slice_ops(reach: dict, per_kernel: int = 2) -> set:
    """A bounded set of OpInfo idents that still reaches every kernel in `reach`: greedily
    the OpInfo covering most kernels not yet reached `per_kernel` times (ties by name),
    until each is, so that each native kernel is exercised by at least that many OpInfos
    (or all that reach it)."""
    need = collections.Counter()
    for targets in reach.values():
        for t in targets:
            need[t] = min(need[t] + 1, per_kernel)
    chosen, covered = set(), collections.Counter()
    while any(covered[t] < n for t, n in need.items()):
        def gain(name):
            return sum(1 for t in reach[name] if covered[t] < need[t])
        best = min((n for n in reach if n not in chosen and reach[n]), key=lambda n: (-gain(n), n))
        if gain(best) == 0:
            break
        chosen.add(best)
        for t in reach[best]:
            covered[t] += 1
    return chosen
