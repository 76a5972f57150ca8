"""Bad arguments, as PyTorch's own device tests check them, against CPU PyTorch.

- Every OpInfo's error inputs (op.error_inputs(device): the inputs PyTorch's test_ops.py
  `test_errors` runs on a device, each with the exception type and message regex it must
  raise) built on neuron: each must raise its type with a matching message wherever the same
  input built on CPU does (an expectation CPU itself misses is not held against neuron).
- The out= contract of kernels that compute their result apart and copy it into out= (losses,
  addr, log_sigmoid, round(decimals), conj_physical): an out of a dtype the result cannot be
  cast to, or on another device, raises as CPU's TensorIterator kernels do (they used to
  truncate or write across devices); out= sharing memory with the input of kthvalue, nanmedian
  and nonzero raises as on CPU.
"""
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch.testing._internal.common_methods_invocations import op_db

import conformance as C

OPS = [op for op in op_db if op.error_inputs_func is not None]
# OpInfo error inputs that cannot be built on neuron, with the reason.
NOT_BUILT = {
    # 65-dim tensors (CPU's "only tensors with up to 64 dims"): a neuron kernel takes at most 25
    # dims, as CUDA's, so the input itself cannot be made (README: Using it).
    "amax", "amin", "aminmax",
}


def _outcome(op, ei):
    """'ok' (the expected type and message), or what happened instead."""
    s = ei.sample_input
    try:
        op(s.input, *s.args, **s.kwargs)
    except Exception as e:  # noqa: BLE001 - the exception is what is compared
        if not isinstance(e, ei.error_type):
            return f"{type(e).__name__}: {str(e)[:200]}"
        if not re.search(ei.error_regex, str(e)):
            return f"message {str(e)[:200]!r} does not match {ei.error_regex!r}"
        return "ok"
    return "no exception"


@pytest.mark.parametrize("op", OPS, ids=C.ident)
def test_opinfo_error_inputs_raise_as_on_cpu(op, neuron):
    with C.quiet():
        torch.manual_seed(0)
        cpu = [_outcome(op, ei) for ei in op.error_inputs("cpu")]
        torch.manual_seed(0)
        try:
            inputs = list(op.error_inputs(str(neuron)))  # a device string, as test_ops passes
        except RuntimeError as e:
            assert C.ident(op) in NOT_BUILT and "at most 25 dims" in str(e), e
            return
        dev = [_outcome(op, ei) for ei in inputs]
    # Inputs for devices other than CPU (device-mismatch checks) make the lists differ: then
    # every input is held to its own expectation.
    cpu_misses = cpu if len(cpu) == len(dev) else ["ok"] * len(dev)
    missed = [(i, str(ei.sample_input.input)[:60], dev[i]) for i, ei in enumerate(inputs)
              if dev[i] != "ok" and cpu_misses[i] == "ok"]
    assert not missed, "\n".join(f"error input {i} ({x}): {what}" for i, x, what in missed)


_X = torch.tensor([-2.5, 0.3, 4.0])
_Y = torch.tensor([1.0, 1.5, 2.0])
_M = torch.full((3, 3), 0.5)
OUT_CASES = {
    "addr": (lambda d, o: torch.addr(_M.to(d), _X.to(d), _Y.to(d), out=o), (3, 3), torch.float32),
    "log_sigmoid": (lambda d, o: torch._C._nn.log_sigmoid(_X.to(d), out=o), (3,), torch.float32),
    "mse_loss": (lambda d, o: torch._C._nn.mse_loss(_X.to(d), _Y.to(d), 0, out=o), (3,), torch.float32),
    "smooth_l1_loss": (lambda d, o: torch._C._nn.smooth_l1_loss(_X.to(d), _Y.to(d), 0, out=o), (3,), torch.float32),
    "huber_loss": (lambda d, o: torch._C._nn.huber_loss(_X.to(d), _Y.to(d), 0, out=o), (3,), torch.float32),
    "round_decimals": (lambda d, o: torch.round(_X.to(d), decimals=1, out=o), (3,), torch.float32),
    "conj_physical": (lambda d, o: torch.conj_physical(torch.tensor([1 + 2j, 3 - 1j]).to(d), out=o), (2,),
                      torch.complex64),
}


def _raises(f):
    try:
        f()
    except RuntimeError as e:
        return str(e)
    return None


@pytest.mark.parametrize("case", sorted(OUT_CASES))
def test_out_of_a_narrower_dtype_or_another_device_raises_as_cpu(case, native):
    fn, shape, dtype = OUT_CASES[case]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the right out: CPU's values
        want = fn("cpu", torch.zeros(shape, dtype=dtype))
        got = fn(native, torch.zeros(shape, dtype=dtype, device=native))
        torch.testing.assert_close(got.cpu(), want)
        if dtype != torch.complex64:  # a result that cannot be cast: CPU raises, neuron too
            assert _raises(lambda: fn("cpu", torch.zeros(shape, dtype=torch.long))) is not None
            msg = _raises(lambda: fn(native, torch.zeros(shape, dtype=torch.long, device=native)))
            assert msg is not None and ("can't be cast" in msg or "expected scalar type" in msg), msg
        for ins, out in ((native, "cpu"), ("cpu", native)):  # out on the other device
            msg = _raises(lambda: fn(ins, torch.zeros(shape, dtype=dtype, device=out)))
            assert msg is not None and "same device" in msg, (ins, out, msg)


OVERLAP_CASES = {
    "kthvalue": lambda d: (lambda t: torch.kthvalue(t, 5, out=(t, torch.empty(0, dtype=torch.long, device=d))))(
        torch.arange(10.0, device=d)),
    "nanmedian": lambda d: (lambda x: torch.nanmedian(x, 0, out=(x[:1].squeeze(0),
                                                                 torch.empty(0, dtype=torch.long, device=d))))(
        torch.arange(6.0, device=d)),
    "nonzero": lambda d: (lambda x: torch.nonzero(x, out=x))(torch.tensor([[1, 0], [2, 3]], device=d)),
}


@pytest.mark.parametrize("case", sorted(OVERLAP_CASES))
def test_out_sharing_memory_with_the_input_raises_as_cpu(case, neuron):
    for d in ("cpu", neuron):
        with pytest.raises(RuntimeError, match="refer to a single memory location"):
            OVERLAP_CASES[case](d)


def test_argument_checks_of_native_kernels_as_cpu(native):
    """gelu's approximation name, multi_margin_loss's target dtype and shape, roll of a 0-dim
    tensor, logcumsumexp's dim on an empty tensor: CPU's exception type and message."""
    cases = [
        lambda d: F.gelu(torch.tensor([1.0, -1.0], device=d), approximate="asdf"),
        lambda d: torch.ops.aten.gelu_backward(torch.ones(2, device=d), torch.ones(2, device=d), approximate="x"),
        lambda d: F.multi_margin_loss(torch.ones(3, 4, device=d), torch.tensor([0.0, 1.0, 2.0], device=d)),
        lambda d: F.multi_margin_loss(torch.ones(5, 4, device=d), torch.zeros(5, 4, dtype=torch.long, device=d)),
        lambda d: torch.roll(torch.tensor(3.0, device=d), 1, 0),
        lambda d: torch.logcumsumexp(torch.randn(0, 2, device=d), 3),
    ]
    for f in cases:
        with pytest.raises(Exception) as cpu_error:
            f("cpu")
        with pytest.raises(cpu_error.type, match=re.escape(str(cpu_error.value).split("\n")[0][:60])):
            f(native)


def test_index_put_without_indices_is_a_runtime_error_as_cpu(native):
    """CPU refuses an empty index list with a RuntimeError (PyTorch's test_index_put_accumulate_empty)."""
    for accumulate in (True, False):
        for device in ("cpu", native):
            with pytest.raises(RuntimeError):
                torch.rand([], device=device).index_put([], torch.tensor([1.0], device=device), accumulate)


def test_bernoulli_out_draws_from_the_neuron_generator(native):
    """torch.bernoulli(p, out=o) draws what torch.bernoulli(p) draws under the same seed (it ran
    through the CPU fallback on CPU's generator)."""
    p = torch.full((1000,), 0.5, device=native)
    torch.manual_seed(0)
    a = torch.bernoulli(p)
    torch.manual_seed(0)
    o = torch.empty(7, device=native)
    torch.bernoulli(p, out=o)
    assert o.shape == p.shape and torch.equal(a, o)
    torch.neuron.manual_seed(3)
    first = torch.bernoulli(p, out=torch.empty(1000, device=native)).clone()
    torch.neuron.manual_seed(3)
    assert torch.equal(torch.bernoulli(p, out=torch.empty(1000, device=native)), first)
