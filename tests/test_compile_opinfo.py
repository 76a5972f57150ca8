"""Every op the neuron compiler lowers, compiled alone on its OpInfo samples, against the same
op in eager mode on neuron: same dtype, shape and bits. `make test` runs a deterministic slice
(the first sample of each op in float32, and every op in one more dtype); `make conformance`
(NEURON_CONFORMANCE=full) runs the first six samples of each op in float32, int64, bfloat16 and
bool.

Known differences, each with its reason, are compared with tolerance instead of bitwise:
Dynamo itself rewrites addcdiv/addcmul with a `value` into div/mul/add (so bfloat16 rounds the
intermediate products, unlike the fused eager kernel).
"""
import os

import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

import torch_neuronx
from torch_neuronx.compiler import get_dynamo_metrics, reset_dynamo_metrics
from torch_neuronx.compiler.externs import LOWERINGS
from torch_neuronx.compiler.pointwise import RULES

FULL = os.environ.get("NEURON_CONFORMANCE") == "full"
LOWERED = {op._schema.name.split("::")[1] for op in list(RULES) + list(LOWERINGS)}
# Uninitialised results (any value is correct).
SKIP = {"empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided"}
DYNAMO_REWRITES = {"addcdiv", "addcmul"}


def _cases():
    dtypes = (torch.float32, torch.int64, torch.bfloat16, torch.bool)
    out = []
    for k, info in enumerate(op_db):
        if info.name in SKIP or (info.name not in LOWERED and (info.aten_name or "") not in LOWERED):
            continue
        have = [d for d in dtypes if d in info.supported_dtypes("cpu")]
        if not have:
            continue
        if FULL:
            picks = [(d, n) for d in have for n in range(6)]
        else:  # the first sample in the first dtype, and one more (dtype, sample) chosen by position
            picks = [(have[0], 0), (have[k % len(have)], 1)]
        for dtype, n in picks:
            out.append(pytest.param(info, dtype, n, id=f"{info.name}-{info.variant_test_name}-{str(dtype)[6:]}-{n}"))
    return out


@pytest.mark.parametrize("info,dtype,n", _cases())
def test_compiled_op_equals_eager(info, dtype, n):
    samples = list(info.sample_inputs("cpu", dtype))
    assert samples, f"{info.name} has no {dtype} samples"
    s = samples[min(n, len(samples) - 1)]
    mv = lambda t: t.to("neuron") if isinstance(t, torch.Tensor) else t  # noqa: E731
    args = [mv(a) for a in [s.input, *s.args]]
    kwargs = {k: mv(v) for k, v in s.kwargs.items()}

    def fn(*a, **k):
        return info.op(*a, **k)

    try:
        want = fn(*args, **kwargs)
    except Exception as e:  # eager refuses the sample: compiled must refuse too
        torch._dynamo.reset()
        with pytest.raises(Exception):
            torch.compile(fn, backend="neuron", dynamic=False)(*args, **kwargs)
        return
    torch._dynamo.reset()
    reset_dynamo_metrics()
    got = torch.compile(fn, backend="neuron", dynamic=False)(*args, **kwargs)
    wants = want if isinstance(want, (tuple, list)) else [want]
    gots = got if isinstance(got, (tuple, list)) else [got]
    assert len(wants) == len(gots)
    for w, g in zip(wants, gots):
        if not isinstance(w, torch.Tensor):
            assert w == g
            continue
        w, g = w.cpu(), g.cpu()
        assert (w.dtype, w.shape) == (g.dtype, g.shape)
        if info.name in DYNAMO_REWRITES and w.dtype in (torch.bfloat16, torch.float16):
            torch.testing.assert_close(g, w)
        else:
            torch.testing.assert_close(g, w, rtol=0, atol=0, equal_nan=True)
    recs = get_dynamo_metrics()
    assert recs and not any(r["fallback"] and r["reason"] != "no neuron tensors" for r in recs), recs
