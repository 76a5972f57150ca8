"""Conformance against PyTorch's own OpInfo database (op_db): the sweep of every registered
neuron kernel by dtype. The harness is tests/conformance.py, which describes a check and the
classification of results (native, fallback, raise, xfail, composite).

Every OpInfo whose samples reach a registered neuron kernel (found by running them, not by
name) runs its samples on neuron and on CPU in every call form it has (functional, in-place,
out=, a non-contiguous copy; gradients of every tensor input for float32). A check passes when
neuron returns CPU's values (torch.testing's tolerance for the dtype, looser only per op where
conformance.TOLERANCE_GROUPS says why), dtype and shape, or raises the exception type CPU
raises. A check counts as native only when no CPU fallback ran and a native kernel did; one
that fell back is reported as a fallback with the ops that fell back. Known differences are
listed per sample, with reasons, in tests/conformance_xfail.txt; a listed sample that passes
fails the test. Registered overloads no OpInfo reaches have hand-written samples
(tests/conformance_extra.py).

`make test` runs a bounded slice: the OpInfos that together reach every kernel of the full
selection at least twice (conformance.slice_ops), in float32 and int64, with up to 3 samples
each chosen to cover distinct ranks, empty inputs, layouts and keyword arguments (SAMPLES);
and the dtype sweep of the same OpInfos in the other 10 dtypes of ALL_DTYPES (SWEEP_DTYPES), one
sample each in the functional form: result dtype, values, and raising where CPU raises.
`make conformance` (NEURON_CONFORMANCE=full) runs every selected OpInfo in every dtype of
ALL_DTYPES, including the dtypes CPU refuses (neuron must refuse them too), prints the counts
per dtype, the fallbacks and the registered overloads no sample reached. Both check that every
registered overload is reached by an OpInfo sample or a hand-written one (or exempt, with its
reason); NEURON_CONFORMANCE_LOG=path appends one JSON line per (op, dtype) as it goes.
"""
import pathlib

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import conformance as C
from conformance_extra import CASES as EXTRA_CASES, EXEMPT

FULL = C.FULL
DTYPES = C.ALL_DTYPES if FULL else [torch.float32, torch.int64]
# The slice's dtype sweep: every other dtype, those CPU refuses included (neuron must refuse
# them too), one sample per (op, dtype), functional form only (bounded: about 2,000 checks).
SWEEP_DTYPES = [] if FULL else [d for d in C.ALL_DTYPES if d not in DTYPES]
SWEEP_SAMPLES = dict(limit=1)
# Samples per (op, dtype): the slice takes the first of each distinct signature, up to 3; the
# full run every signature and then further samples, up to 96 (max_pool2d alone has 1,440
# parameter combinations); dtypes CPU refuses need only a few samples to show neuron refuses.
SAMPLES = dict(limit=96, fill=True) if FULL else dict(limit=3)
GRAD_SAMPLES = dict(limit=32, fill=True) if FULL else dict(limit=2)
UNSUPPORTED_SAMPLES = dict(limit=4)
REACH, REACH_FROM_FILE = C.reach_table()
OPS = [op for op in op_db if REACH.get(C.ident(op))]
# The slice: OpInfos that together reach every kernel the full selection reaches, twice.
SLICE = C.slice_ops(REACH, per_kernel=2)
XFAIL = C.load_xfails(pathlib.Path(__file__).with_name("conformance_xfail.txt"))


def _xfail_reason(op, dtype, index, form):
    name, dt = C.ident(op), C.dtype_name(dtype)
    for d in (dt, "all"):
        for key in (f"{index}/{form}", index, f"all/{form}", "all"):
            if (name, d, key) in XFAIL:
                return XFAIL[(name, d, key)]
    return None


def _cases():
    for op in OPS:
        if not FULL and C.ident(op) not in SLICE:
            continue
        supported = op.supported_dtypes("cpu")
        for dtype in DTYPES:
            if FULL or dtype in supported:
                yield pytest.param(op, dtype, id=f"{C.ident(op)}-{C.dtype_name(dtype)}")
        for dtype in SWEEP_DTYPES:
            yield pytest.param(op, dtype, id=f"{C.ident(op)}-{C.dtype_name(dtype)}")


class _Checks:
    """Runs and books the checks of one (op, dtype); a listed difference must still differ."""

    def __init__(self, op, dtype):
        self.op, self.dtype, self.failures = op, dtype, []

    def run(self, index, form, what, check):
        reason = _xfail_reason(self.op, self.dtype, index, form)
        try:
            kind, fallbacks = check()
        except AssertionError as e:
            if reason is not None:
                C.REPORT.add(self.dtype, "xfail")
            else:
                self.failures.append(str(e))
                C.REPORT.add(self.dtype, "failed")
            return
        if reason is not None:
            self.failures.append(f"{what}: passes, but conformance_xfail.txt lists it ({reason}): remove the entry")
            C.REPORT.add(self.dtype, "failed")
        elif kind is not None:
            C.REPORT.add(self.dtype, kind, C.ident(self.op), fallbacks)


OPINFO_CASES = list(_cases())
_ran = set()
_hand_written_ran = set()


@pytest.mark.parametrize("op,dtype", OPINFO_CASES)
def test_op_matches_cpu(op, dtype):
    _ran.add((C.ident(op), dtype))
    supported = dtype in op.supported_dtypes("cpu")
    sweep = dtype in SWEEP_DTYPES
    torch.manual_seed(0)
    samples = list(C.select(C.samples_in(op, dtype),
                            **(SWEEP_SAMPLES if sweep else SAMPLES if supported else UNSUPPORTED_SAMPLES)))
    checks = _Checks(op, dtype)
    with C.quiet():
        for index, sample in samples:
            random = C.is_random(op, sample)
            for tag, s in ((str(index), sample), (f"{index}nc", sample.noncontiguous())):
                for form, fn in C.forms(op, s).items():
                    if tag.endswith("nc") and form not in (("functional", "inplace") if FULL else ("functional",)):
                        continue
                    if sweep and (tag.endswith("nc") or form != "functional"):
                        continue
                    what = f"{C.ident(op)} {C.dtype_name(dtype)} sample {tag} {form}"
                    checks.run(tag, form, what, lambda: C.check(op, s, form, fn, what, random))
        if dtype == torch.float32 and op.supports_autograd and not sweep:
            torch.manual_seed(0)
            for index, sample in C.select(op.sample_inputs("cpu", dtype, requires_grad=True), **GRAD_SAMPLES):
                what = f"{C.ident(op)} {C.dtype_name(dtype)} sample {index} gradient"
                checks.run(str(index), "grad", what,
                           lambda: C.check_grads(op, dtype, sample, what, C.is_random(op, sample)))
    C.REPORT.log(C.ident(op), dtype, checks.failures)
    assert not checks.failures, "\n".join(checks.failures)


@pytest.mark.parametrize("case", EXTRA_CASES, ids=lambda c: c.target[len("aten::"):])
def test_hand_written_sample(case):
    """Registered overloads no OpInfo sample reaches (tests/conformance_extra.py): CPU's result,
    computed natively, and the sample reaches the overload it was written for."""
    _hand_written_ran.add(id(case))
    what = f"hand-written sample of {case.target}"
    with C.quiet():
        (kind, fallbacks), obs = C.check_call(what, case.fn, case.random)
    C.REPORT.add("hand-written", kind, case.target, fallbacks)
    assert case.target in obs.reached, f"{what} reached {sorted(obs.reached)}, not {case.target}"
    assert kind == "native", f"{what}: {kind} ({fallbacks})"


def test_every_registered_overload_is_reached():
    """Each registered overload is reached by an OpInfo sample or a hand-written one, or listed
    in EXEMPT with its reason (runs after the OpInfo and hand-written tests, in file order): in
    the full run and in make test's slice alike, so a new kernel comes with a sample."""
    if len(_ran) < len(OPINFO_CASES) or len(_hand_written_ran) < len(EXTRA_CASES):
        pytest.skip(f"only {len(_ran)} of {len(OPINFO_CASES)} (op, dtype) cases and {len(_hand_written_ran)} of "
                    f"{len(EXTRA_CASES)} hand-written samples ran (a -k selection): the reach is incomplete")
    missing = sorted(r for r in C.REGISTERED - C.REPORT.reached - set(EXEMPT)
                     if r.split(".", 1)[0] not in C.PLUMBING)
    assert not missing, f"registered overloads no sample reaches: {missing}"


def test_reach_file_is_current():
    """tests/conformance_reach.json matches the registered kernels (else the slice computes the
    table itself, which costs half a minute): python tools/gen_op_compatibility.py rewrites it."""
    assert REACH_FROM_FILE, "tests/conformance_reach.json is stale: run python tools/gen_op_compatibility.py"


def test_selection_reaches_the_kernels_name_matching_missed():
    """OpInfos whose names differ from the kernels they reach are tested (issue: they were not)."""
    names = {C.ident(op) for op in OPS}
    for expected in ("softmax", "log_softmax", "nn.functional.conv2d", "nn.functional.silu", "nn.functional.elu",
                     "nn.functional.mish", "nn.functional.softplus", "nn.functional.hardsigmoid",
                     "nn.functional.nll_loss", "nn.functional.cross_entropy", "nn.functional.embedding",
                     "nn.functional.batch_norm", "nn.functional.layer_norm", "nn.functional.linear", "matmul",
                     "add", "mul", "where", "cumsum", "sort"):
        assert expected in names, expected
