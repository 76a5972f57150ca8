"""The sweep of tests/test_stored_dtypes.py, run in its own interpreter (a crash must not take
pytest down): data-movement ops and a few computing ones on neuron tensors of every dtype the
device only stores (float8, float4, uint16 to uint64, bits) and of complex32, each compared
with CPU PyTorch on the same inputs: the same values (bytes), or the same exception type where
CPU raises.

Prints one line per case as it starts ("start <case> <dtype>", flushed, so a crash names it) and
one JSON line per outcome ("result {...}"): case, dtype, cpu (outcome), neuron (outcome), match,
fallback (ops that took the CPU fallback), native_expected (the case must not fall back: NATIVE).
Exit status 0 when every case matched (and ran natively where expected), 1 otherwise.

    python tests/stored_dtype_sweep.py [dtype ...]
"""
import json
import sys

import torch
import torch.nn.functional as F

import torch_neuronx

FLOAT8 = [torch.float8_e5m2, torch.float8_e4m3fn, torch.float8_e5m2fnuz, torch.float8_e4m3fnuz,
          torch.float8_e8m0fnu]
UNSIGNED = [torch.uint16, torch.uint32, torch.uint64]
BITS = [torch.bits1x8, torch.bits2x4, torch.bits4x2, torch.bits8, torch.bits16, torch.float4_e2m1fn_x2]
DTYPES = FLOAT8 + UNSIGNED + BITS + [torch.complex32]


def make(dtype, *shape, seed=0):
    """A CPU tensor of `dtype` and `shape` with small distinct values (bytes for bits types)."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    if dtype in BITS:
        width = torch.int16 if dtype == torch.bits16 else torch.uint8
        return torch.randint(0, 100, shape, generator=g, dtype=width).view(dtype)
    if dtype in UNSIGNED:
        return torch.randint(0, 100, shape, generator=g).to(dtype)
    if dtype == torch.float8_e8m0fnu:  # powers of two only
        return torch.pow(2.0, torch.randint(-3, 4, shape, generator=g).float()).to(dtype)
    v = torch.randint(-8, 9, shape, generator=g).float() / 2
    if dtype == torch.complex32:
        return torch.complex(v, v.flip(-1) if v.dim() else v).to(dtype)
    return v.to(dtype)


def idx(*values):
    return torch.tensor(values, dtype=torch.long)


MASK = torch.tensor([[True, False, True, False], [False, True, True, False], [True, True, False, False]])


def shown(t):
    """repr(t) without the device, whitespace collapsed (the device suffix wraps lines)."""
    return " ".join(repr(t).split()).replace(" device='neuron:0',", "").replace(", device='neuron:0'", "")


def _setitem(t, i, v):
    t[i] = v
    return t


# (name, fn): fn(dtype, to) -> result; `to` moves a CPU tensor to the device under test, so that
# both runs get the same inputs.
CASES = [
    ("index_select", lambda dt, to: to(make(dt, 3, 4)).index_select(0, to(idx(2, 0, 2)))),
    ("index_select_dim1", lambda dt, to: to(make(dt, 3, 4)).index_select(1, to(idx(3, 1)))),
    ("index_select_out", lambda dt, to: torch.index_select(to(make(dt, 3, 4)), 0, to(idx(1, 0)),
                                                           out=to(make(dt, 2, 4, seed=1)))),
    ("embedding", lambda dt, to: F.embedding(to(idx(1, 0, 2)), to(make(dt, 3, 4)))),
    ("index", lambda dt, to: to(make(dt, 3, 4))[to(idx(2, 0))]),
    ("index_2d", lambda dt, to: to(make(dt, 3, 4))[to(idx(2, 0)), to(idx(1, 3))]),
    ("index_bool_mask", lambda dt, to: to(make(dt, 3, 4))[to(MASK)]),
    ("masked_select", lambda dt, to: torch.masked_select(to(make(dt, 3, 4)), to(MASK))),
    ("index_put", lambda dt, to: to(make(dt, 3, 4)).index_put_((to(idx(2, 0)),), to(make(dt, 2, 4, seed=1)))),
    ("index_put_accumulate", lambda dt, to: to(make(dt, 3, 4)).index_put_((to(idx(2, 0)),), to(make(dt, 2, 4, seed=1)),
                                                                          accumulate=True)),
    ("setitem_tensor", lambda dt, to: _setitem(to(make(dt, 3, 4)), to(idx(1)), to(make(dt, 1, 4, seed=1)))),
    ("setitem_mask", lambda dt, to: _setitem(to(make(dt, 3, 4)), to(MASK), to(make(dt, 6, seed=1)))),
    ("gather", lambda dt, to: torch.gather(to(make(dt, 3, 4)), 1, to(idx(0, 3, 1).view(3, 1)))),
    ("take", lambda dt, to: torch.take(to(make(dt, 3, 4)), to(idx(0, 11, 5)))),
    ("take_along_dim", lambda dt, to: torch.take_along_dim(to(make(dt, 3, 4)), to(idx(0, 3, 1).view(3, 1)), 1)),
    ("scatter_src", lambda dt, to: to(make(dt, 3, 4)).scatter(1, to(idx(0, 3, 1).view(3, 1)), to(make(dt, 3, 1, seed=1)))),
    ("scatter_value", lambda dt, to: to(make(dt, 3, 4)).scatter(1, to(idx(0, 3, 1).view(3, 1)), 1)),
    ("scatter_add", lambda dt, to: to(make(dt, 3, 4)).scatter_add(1, to(idx(0, 3, 1).view(3, 1)),
                                                                  to(make(dt, 3, 1, seed=1)))),
    ("scatter_reduce", lambda dt, to: to(make(dt, 3, 4)).scatter_reduce(1, to(idx(0, 3, 1).view(3, 1)),
                                                                        to(make(dt, 3, 1, seed=1)), "amax")),
    ("index_add", lambda dt, to: to(make(dt, 3, 4)).index_add(0, to(idx(2, 0)), to(make(dt, 2, 4, seed=1)))),
    ("index_copy", lambda dt, to: to(make(dt, 3, 4)).index_copy(0, to(idx(2, 0)), to(make(dt, 2, 4, seed=1)))),
    ("index_fill", lambda dt, to: to(make(dt, 3, 4)).index_fill_(0, to(idx(2)), 1)),
    ("masked_fill", lambda dt, to: to(make(dt, 3, 4)).masked_fill(to(MASK), 1)),
    ("masked_scatter", lambda dt, to: to(make(dt, 3, 4)).masked_scatter(to(MASK), to(make(dt, 3, 4, seed=1)))),
    ("where", lambda dt, to: torch.where(to(MASK), to(make(dt, 3, 4)), to(make(dt, 3, 4, seed=1)))),
    ("flip", lambda dt, to: to(make(dt, 3, 4)).flip(0, 1)),
    ("roll", lambda dt, to: to(make(dt, 3, 4)).roll(1, 1)),
    ("cat", lambda dt, to: torch.cat([to(make(dt, 3, 4)), to(make(dt, 2, 4, seed=1))])),
    ("cat_dim1", lambda dt, to: torch.cat([to(make(dt, 3, 4)), to(make(dt, 3, 2, seed=1))], 1)),
    ("stack", lambda dt, to: torch.stack([to(make(dt, 3, 4)), to(make(dt, 3, 4, seed=1))])),
    ("tril", lambda dt, to: to(make(dt, 3, 4)).tril()),
    ("triu", lambda dt, to: to(make(dt, 3, 4)).triu(1)),
    ("repeat", lambda dt, to: to(make(dt, 3, 4)).repeat(2, 1)),
    ("clone", lambda dt, to: to(make(dt, 3, 4)).clone()),
    ("contiguous_transposed", lambda dt, to: to(make(dt, 3, 4)).t().contiguous()),
    ("copy_transposed", lambda dt, to: to(make(dt, 4, 3)).copy_(to(make(dt, 3, 4, seed=1)).t())),
    ("copy_to_float32", lambda dt, to: to(torch.zeros(3, 4)).copy_(to(make(dt, 3, 4)))),
    ("copy_from_float32", lambda dt, to: to(make(dt, 3, 4)).copy_(to(make(torch.float8_e4m3fn, 3, 4).float()))),
    ("fill", lambda dt, to: to(make(dt, 3, 4)).fill_(2)),
    ("zero", lambda dt, to: to(make(dt, 3, 4)).zero_()),
    ("item", lambda dt, to: to(make(dt, 3, 4))[1, 2].item()),
    ("tolist", lambda dt, to: to(make(dt, 2, 3)).tolist()),
    ("repr", lambda dt, to: shown(to(make(dt, 3, 4)))),
    ("repr_large", lambda dt, to: shown(to(make(dt, 40, 40)))),
    ("str_transposed", lambda dt, to: shown(to(make(dt, 4, 3)).t())),
    ("eq", lambda dt, to: to(make(dt, 3, 4)) == to(make(dt, 3, 4, seed=1))),
    ("add", lambda dt, to: to(make(dt, 3, 4)) + to(make(dt, 3, 4, seed=1))),
    ("sub_alpha", lambda dt, to: torch.sub(to(make(dt, 3, 4)), to(make(dt, 3, 4, seed=1)), alpha=2)),
    ("mul", lambda dt, to: to(make(dt, 3, 4)) * to(make(dt, 3, 4, seed=1))),
    ("mean", lambda dt, to: to(make(dt, 3, 4)).mean()),
    ("neg", lambda dt, to: -to(make(dt, 3, 4))),
    ("sum", lambda dt, to: to(make(dt, 3, 4)).sum()),
    ("max_dim", lambda dt, to: to(make(dt, 3, 4)).max(1)),
    ("sort", lambda dt, to: to(make(dt, 3, 4)).sort(1)),
    ("nonzero", lambda dt, to: to(make(dt, 3, 4)).nonzero()),
    ("cumsum", lambda dt, to: to(make(dt, 3, 4)).cumsum(1)),
    ("mm", lambda dt, to: to(make(dt, 3, 4)) @ to(make(dt, 4, 2, seed=1))),
    ("softmax", lambda dt, to: to(make(dt, 3, 4)).softmax(1)),
    ("relu", lambda dt, to: to(make(dt, 3, 4)).relu()),
    ("pad", lambda dt, to: F.pad(to(make(dt, 3, 4)), (1, 1))),
    ("to_float32", lambda dt, to: to(make(dt, 3, 4)).float()),
    ("to_own_dtype", lambda dt, to: to(make(torch.float32, 3, 4) if dt == torch.complex32 else make(dt, 3, 4)).to(dt)),
]


_NAMES = {dt: str(dt).replace("torch.", "") for dt in DTYPES}
_F8, _UNSIGNED, _BITS = ({_NAMES[d] for d in g} for g in (FLOAT8, UNSIGNED, BITS[:-1]))
_MOVED = _F8 | _UNSIGNED | _BITS  # every stored-only dtype but float4
_STORED = _MOVED | {"float4_e2m1fn_x2"}
_PUT = _F8 - {"float8_e8m0fnu"}
# The cases that must run natively (no CPU fallback) for these dtypes: the data-movement kernels
# declare the stored-only dtypes CPU accepts for every input of the op (csrc/gate.h).
NATIVE = {
    "index_select": _F8, "index_select_dim1": _F8, "index_select_out": _F8, "embedding": _F8,
    "index": _F8 | _UNSIGNED, "index_2d": _F8 | _UNSIGNED, "index_bool_mask": _F8 | _UNSIGNED,
    "masked_select": _F8, "index_put": _PUT, "setitem_tensor": _PUT, "setitem_mask": _PUT,
    "where": _STORED, "cat": _MOVED, "cat_dim1": _MOVED, "stack": _MOVED, "roll": _MOVED,
    "clone": _STORED, "contiguous_transposed": _STORED, "copy_transposed": _STORED, "zero": _STORED,
    "fill": _F8 | _UNSIGNED, "item": _F8 | _UNSIGNED,
}


def outcome(fn, dt, device):
    """('ok', value on CPU) or ('raise', exception type name); queued work finished."""
    def to(t):
        return t.to(device)
    try:
        r = fn(dt, to)
        if device != "cpu":
            torch.neuron.synchronize()
        if isinstance(r, torch.Tensor):
            r = r.cpu()
        elif isinstance(r, tuple):
            r = tuple(x.cpu() for x in r)
        return "ok", r
    except Exception as e:  # noqa: BLE001 - the type is the outcome
        return "raise", type(e).__name__


def same(a, b):
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, torch.Tensor):
        if not isinstance(b, torch.Tensor) or a.dtype != b.dtype or a.shape != b.shape:
            return False
        a, b = a.contiguous().reshape(-1), b.contiguous().reshape(-1)
        if a.element_size() != 1:  # compare bytes: float8/bits have no equality on CPU
            a, b = a.view(torch.uint8), b.view(torch.uint8)
        elif a.dtype != torch.bool:
            a, b = a.view(torch.uint8), b.view(torch.uint8)
        return torch.equal(a, b)
    if isinstance(a, float) and isinstance(b, float) and a != a:
        return b != b
    return a == b


def describe(o):
    kind, v = o
    return v if kind == "raise" else "ok"


def main(names):
    dtypes = [getattr(torch, n) for n in names] if names else DTYPES
    failures = 0
    for dt in dtypes:
        for name, fn in CASES:
            print("start", name, str(dt).replace("torch.", ""), flush=True)
            torch_neuronx.clear_op_tracking()
            cpu = outcome(fn, dt, "cpu")
            dev = outcome(fn, dt, "neuron")
            fallback = sorted(set(torch_neuronx.get_fallback_ops()))
            if cpu[0] == "raise" or dev[0] == "raise":
                match = cpu[0] == dev[0] and cpu[1] == dev[1]
            else:
                match = same(cpu[1], dev[1])
            native = _NAMES.get(dt) in NATIVE.get(name, ())
            failures += not match or (native and bool(fallback))
            print("result", json.dumps({"case": name, "dtype": str(dt).replace("torch.", ""), "cpu": describe(cpu),
                                        "neuron": describe(dev), "match": match, "fallback": fallback,
                                        "native_expected": native}), flush=True)
    print(f"done: {failures} mismatches", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    import warnings
    warnings.simplefilter("ignore")
    sys.exit(main(sys.argv[1:]))
