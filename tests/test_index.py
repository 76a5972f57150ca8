"""Indexing kernels (advanced indexing, index_put_, gather/scatter, index_add/copy/fill,
nonzero and mask ops) against CPU PyTorch: the fault kinds device backends hit most —
duplicate indices, negative indices, strided operands, out-of-range indices."""
import re

import pytest
import torch
import torch.nn.functional as F

import torch_neuronx
from conftest import run_py


def _n(x):
    return x.to("neuron")


@pytest.fixture(autouse=True)
def _no_fallback():
    torch_neuronx.clear_op_tracking()
    yield
    assert torch_neuronx.get_fallback_ops() == []


def test_index_put_accumulate_sums_every_duplicate():
    base = torch.zeros(4, 3)
    idx = torch.tensor([1, 1, 1, 3, 1, 0, 3])
    vals = torch.arange(21, dtype=torch.float32).reshape(7, 3)
    expected = base.clone().index_put_((idx,), vals, accumulate=True)
    actual = _n(base).index_put_((_n(idx),), _n(vals), accumulate=True)
    torch.testing.assert_close(actual.cpu(), expected)
    # integer dtype: exact
    expected_i = torch.zeros(5, dtype=torch.int64).index_put_((idx,), torch.ones(7, dtype=torch.int64), accumulate=True)
    actual_i = _n(torch.zeros(5, dtype=torch.int64)).index_put_((_n(idx),), _n(torch.ones(7, dtype=torch.int64)),
                                                                 accumulate=True)
    assert torch.equal(actual_i.cpu(), expected_i)


def test_scatter_add_and_index_add_sum_duplicates():
    idx = torch.tensor([[0, 0, 2, 0], [1, 1, 1, 1]])
    src = torch.arange(8, dtype=torch.float32).reshape(2, 4)
    expected = torch.zeros(2, 4).scatter_add(1, idx, src)
    assert torch.equal(_n(torch.zeros(2, 4)).scatter_add(1, _n(idx), _n(src)).cpu(), expected)
    rows = torch.tensor([2, 2, 0, 2])
    expected = torch.ones(3, 5).index_add(0, rows, torch.ones(4, 5), alpha=3)
    assert torch.equal(_n(torch.ones(3, 5)).index_add(0, _n(rows), _n(torch.ones(4, 5)), alpha=3).cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_accumulating_row_writes_in_index_order(native, dtype):
    """index_add_ and index_put_(accumulate=True) of rows with many duplicate indices run in
    slices of columns, each row's contributions in index order whatever the thread count:
    index_add_ gives CPU's bits (its kernel adds in that order too), index_put_ the same bits as
    index_add_ (CPU's index_put_ kernel orders its float additions otherwise: close values)."""
    g = torch.Generator().manual_seed(1)
    idx = torch.randint(0, 50, (3000,), generator=g)
    src = (torch.randn(3000, 300, generator=g) * 100).to(dtype)
    base = torch.randn(50, 300, generator=g).to(dtype)
    want = base.clone().index_add_(0, idx, src)
    prev = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            got_add = base.to(native).index_add_(0, idx.to(native), src.to(native)).cpu()
            got_put = base.to(native).index_put_((idx.to(native),), src.to(native), accumulate=True).cpu()
            assert torch.equal(got_add, want), threads
            assert torch.equal(got_put, want), threads
    finally:
        torch.set_num_threads(prev)
    torch.testing.assert_close(base.clone().index_put_((idx,), src, accumulate=True), want, rtol=1e-5, atol=1e-2)


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_with_duplicates_and_nan(reduce, include_self):
    torch.manual_seed(0)
    src = torch.randn(6, 5)
    src[2, 1] = float("nan")
    idx = torch.randint(0, 3, (6, 5))
    self = torch.randn(3, 5)
    expected = self.scatter_reduce(0, idx, src, reduce, include_self=include_self)
    actual = _n(self).scatter_reduce(0, _n(idx), _n(src), reduce, include_self=include_self)
    torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)


def test_advanced_indexing_forms_match_cpu():
    torch.manual_seed(0)
    x = torch.randn(4, 5, 6)
    i = torch.tensor([0, -1, 2, 2])
    j = torch.tensor([[1], [3]])
    mask = x[:, :, 0] > 0
    cases = [
        lambda t, d: t[d(i)],
        lambda t, d: t[:, d(i)],
        lambda t, d: t[d(i), :, d(i)],             # non-adjacent indices: result dims move to the front
        lambda t, d: t[d(j), d(i)],                # broadcast index tensors
        lambda t, d: t[d(mask)],                   # bool mask (nonzero)
        lambda t, d: t[..., d(i)[:2]],
        lambda t, d: t.transpose(0, 2)[d(i)],      # strided self
        lambda t, d: t[i],                         # CPU index tensor on a neuron tensor (as CUDA allows)
    ]
    for k, case in enumerate(cases):
        expected = case(x, lambda v: v)
        actual = case(_n(x), _n)
        assert torch.equal(actual.cpu(), expected), k


def test_setitem_forms_match_cpu():
    x = torch.randn(4, 6)
    for key, value in [((torch.tensor([0, 2]),), 1.5), ((x > 0,), 0.0), ((slice(None), torch.tensor([1, -1])), -2.0),
                       ((torch.tensor([3, 1]),), torch.arange(12.0).reshape(2, 6))]:
        expected = x.clone()
        expected[key] = value
        actual = _n(x.clone())
        dkey = tuple(_n(k) if isinstance(k, torch.Tensor) else k for k in key)
        actual[dkey] = _n(value) if isinstance(value, torch.Tensor) else value
        assert torch.equal(actual.cpu(), expected)


def test_gather_scatter_on_non_contiguous_operands():
    torch.manual_seed(0)
    x = torch.randn(7, 5).t()                      # (5, 7), transposed
    idx = torch.randint(0, 7, (7, 5)).t()[:, :4]   # (5, 4), strided
    assert torch.equal(torch.gather(_n(x), 1, _n(idx)).cpu(), torch.gather(x, 1, idx))
    out = torch.zeros(7, 5).t()
    dout = _n(torch.zeros(7, 5)).t()
    src = torch.randn(5, 4)
    perm = torch.stack([torch.randperm(7)[:4] for _ in range(5)])   # unique per row: deterministic
    out.scatter_(1, perm, src)
    dout.scatter_(1, _n(perm), _n(src))
    assert torch.equal(dout.cpu(), out)


def test_int_tensor_value_promotion_in_index_fill_and_scatter():
    x = torch.arange(12).reshape(3, 4)
    assert torch.equal(_n(x).index_fill(1, _n(torch.tensor([0, -1])), 7).cpu(), x.index_fill(1, torch.tensor([0, -1]), 7))
    assert torch.equal(_n(x).scatter(0, _n(torch.tensor([[2, 0, 1, 1]])), 5).cpu(),
                       x.scatter(0, torch.tensor([[2, 0, 1, 1]]), 5))


def test_nonzero_masked_select_masked_scatter():
    torch.manual_seed(0)
    x = torch.randn(3, 1, 5)
    mask = torch.randn(4, 5) > 0
    for value in (x, x.transpose(0, 2)):
        assert torch.equal(torch.nonzero(_n(value) > 0).cpu(), torch.nonzero(value > 0))
    assert torch.equal(torch.nonzero(_n(torch.tensor([0.0, -0.0, float("nan"), 1.0]))).cpu(), torch.tensor([[2], [3]]))
    assert torch.equal(torch.masked_select(_n(x), _n(mask)).cpu(), torch.masked_select(x, mask))   # broadcast
    src = torch.arange(40.0)
    y = torch.zeros(4, 5)
    assert torch.equal(_n(y).masked_scatter_(_n(mask), _n(src)).cpu(), y.masked_scatter_(mask, src))
    with pytest.raises(RuntimeError, match="masked_scatter_"):
        _n(torch.zeros(4, 5)).masked_scatter_(_n(torch.ones(4, 5, dtype=torch.bool)), _n(torch.zeros(3)))


def test_advanced_indexing_gradients_match_cpu():
    torch.manual_seed(0)
    x = torch.randn(5, 4, requires_grad=True)
    i = torch.tensor([0, 3, 3, 1])
    (x[i] * torch.arange(16.0).reshape(4, 4)).sum().backward()
    xd = _n(x.detach()).requires_grad_()
    (xd[_n(i)] * _n(torch.arange(16.0).reshape(4, 4))).sum().backward()
    torch.testing.assert_close(xd.grad.cpu(), x.grad)


@pytest.mark.parametrize("op", ["index", "index_put_", "gather", "scatter", "scatter_add", "index_add"])
def test_out_of_range_index_raises_cpu_error_naming_the_op_and_index(op):
    """CPU PyTorch's exception type (IndexError for indexing and index_put_, RuntimeError for
    gather, scatter and index_add) and message, prefixed with the op."""
    def calls(dev):
        x, bad = torch.zeros(4, 3, device=dev), torch.tensor([[1, 9, 2]], device=dev)
        return x, {
            "index": lambda: x[bad[0]],
            "index_put_": lambda: x.index_put_((bad[0],), torch.ones(3, device=dev)),
            "gather": lambda: torch.gather(x, 0, bad),
            "scatter": lambda: x.scatter_(0, bad, 1.0),
            "scatter_add": lambda: x.scatter_add_(0, bad, torch.ones(1, 3, device=dev)),
            "index_add": lambda: x.index_add_(0, bad[0], torch.ones(3, 3, device=dev)),
        }[op]

    with pytest.raises(Exception) as cpu_error:
        calls("cpu")[1]()
    x, call = calls("neuron")
    with pytest.raises(type(cpu_error.value), match=rf"aten::{op}.*index 9 is out of bounds for dimension 0 with size 4"):
        call()
        torch.neuron.synchronize()
    assert torch.equal(x.cpu(), torch.zeros(4, 3))   # nothing written, process usable
    assert x[_n(torch.tensor([3]))].shape == (1, 3)


@pytest.mark.parametrize("shape,dim", [((4, 3), 0), ((4, 3), 1), ((2, 4, 3), 1), ((2, 3, 4), 2), ((4,), 0),
                                       ((4, 3), "embedding")])
def test_index_select_out_of_range_raises_cpus_error(shape, dim):
    """ATen's CPU index_select raises RuntimeError ("INDICES element is out of DATA bounds")
    along dim 1 and IndexError ("index out of range in self") along the others, F.embedding's
    lookup too: the same type, CPU's message in ours."""
    def call(dev):
        x, idx = torch.zeros(shape, device=dev), torch.tensor([1, 9], device=dev)
        return x, (lambda: F.embedding(idx, x)) if dim == "embedding" else (lambda: torch.index_select(x, dim, idx))

    with pytest.raises(Exception) as cpu_error:
        call("cpu")[1]()
    x, f = call("neuron")
    with pytest.raises(type(cpu_error.value), match=re.escape(str(cpu_error.value))):
        f()
        torch.neuron.synchronize()
    assert torch.index_select(x, 0, _n(torch.tensor([0]))).abs().sum().item() == 0  # process usable


def test_out_of_range_index_raises_at_the_call_with_launch_blocking():
    out = run_py("""
        import torch, torch_neuronx
        x = torch.zeros(4, 3, device="neuron")
        try:
            torch.gather(x, 0, torch.tensor([[5, 0, 0]], device="neuron"))
        except RuntimeError as e:  # CPU PyTorch's type for gather
            print("raised at call:", e)
    """, env={"NEURON_LAUNCH_BLOCKING": "1"})
    assert "raised at call: aten::gather: index 5 is out of bounds for dimension 0 with size 4" in out.stdout


def _outcome(fn):
    """What `fn()` gives: ("ok", tensor on CPU) or ("raise", exception type, message)."""
    try:
        r = fn()
        if isinstance(r, torch.Tensor) and r.device.type == "neuron":
            torch.neuron.synchronize()
        return ("ok", r.cpu() if isinstance(r, torch.Tensor) else r)
    except Exception as e:  # noqa: BLE001 -- the type is what is compared
        return ("raise", type(e), str(e))


def _assert_same_outcome(make, check_message=True):
    """`make(device)` on CPU and on neuron: equal results, or the same exception type with CPU's
    message (neuron prefixes kernel errors with the op name)."""
    cpu, dev = _outcome(lambda: make("cpu")), _outcome(lambda: make("neuron"))
    assert cpu[0] == dev[0], (cpu, dev)
    if cpu[0] == "ok":
        assert dev[1].dtype == cpu[1].dtype and torch.equal(dev[1], cpu[1]), (cpu, dev)
    else:
        assert dev[1] is cpu[1], (cpu, dev)
        if check_message:
            assert dev[2].endswith(cpu[2]), (cpu, dev)


def _scatter_cases(dt):
    """Reductions over 1000 duplicates of 0.1 (1.01 for products): a 16-bit accumulator stalls
    (bfloat16 stops at 32), a float32 one reaches 100."""
    def idx(d, *shape):
        return torch.zeros(*shape, dtype=torch.long, device=d)

    def full(d, v, *shape):
        return torch.full(shape, v, dtype=dt, device=d)

    cases = {
        "scatter_add": lambda d: full(d, 0.0, 2, 3).scatter_add(0, idx(d, 1000, 3), full(d, 0.1, 1000, 3)),
        "scatter_add_": lambda d: full(d, 0.0, 4).scatter_add_(0, idx(d, 1000), full(d, 0.1, 1000)),
        "scatter_add strided": lambda d: full(d, 0.0, 3, 2).t().scatter_add(
            1, idx(d, 2, 1000), full(d, 0.1, 1000, 2).t()),
        "scatter reduce=add": lambda d: full(d, 0.0, 2).scatter(0, idx(d, 1000), full(d, 0.1, 1000), reduce="add"),
        "scatter value reduce=add": lambda d: full(d, 0.0, 2).scatter(0, idx(d, 1000), 0.1, reduce="add"),
        "scatter reduce=multiply": lambda d: full(d, 1.0, 2).scatter(
            0, idx(d, 1000), full(d, 1.01, 1000), reduce="multiply"),
        # as on CPU, index_add_ and index_put_(accumulate=True) accumulate in the tensor's dtype
        "index_add": lambda d: full(d, 0.0, 2).index_add(0, idx(d, 1000), full(d, 0.1, 1000)),
        "index_put_ accumulate": lambda d: full(d, 0.0, 2).index_put_((idx(d, 1000),), full(d, 0.1, 1000),
                                                                       accumulate=True),
    }
    for reduce in ("sum", "mean", "prod"):
        for include_self in (True, False):
            v = 1.01 if reduce == "prod" else 0.1
            cases[f"scatter_reduce {reduce} include_self={include_self}"] = (
                lambda d, r=reduce, i=include_self, v=v: full(d, 1.0, 2, 3).scatter_reduce(
                    0, idx(d, 1000, 3), full(d, v, 1000, 3), r, include_self=i))
    return cases


@pytest.mark.parametrize("dt", [torch.bfloat16, torch.float16])
def test_scatter_reductions_of_16_bit_floats_accumulate_as_cpu(dt):
    """CPU's scatter kernels sum, multiply and average float16/bfloat16 in float32 (rounded once);
    index_add_/index_put_ accumulate in the tensor's dtype. Results are bitwise CPU's."""
    for name, make in _scatter_cases(dt).items():
        expected, actual = make("cpu"), make("neuron").cpu()
        assert actual.dtype == dt and torch.equal(actual, expected), (name, actual, expected)
    executed = torch_neuronx.get_executed_ops()
    for op in ("aten::scatter", "aten::scatter_add", "aten::scatter_reduce", "aten::index_add",
               "aten::_index_put_impl_"):
        assert op in executed
    # the float32 accumulation is visible: bfloat16 would stall at 32 (float16 drifts to 105.19)
    d = torch.zeros(2, dtype=dt, device="neuron").scatter_add(
        0, torch.zeros(1000, dtype=torch.long, device="neuron"), torch.full((1000,), 0.1, dtype=dt, device="neuron"))
    assert d[0].item() == 100.0


@pytest.mark.parametrize("reduce", ["max", "min"])
@pytest.mark.parametrize("include_self", [True, False])
def test_scatter_reduce_accepts_max_min_aliases_as_cpu(reduce, include_self):
    _assert_same_outcome(lambda d: torch.zeros(3, device=d).scatter_reduce(
        0, torch.tensor([0, 0, 1], device=d), torch.tensor([1.0, 2.0, -3.0], device=d), reduce,
        include_self=include_self))
    assert "aten::scatter_reduce" in torch_neuronx.get_executed_ops()
    for bad in ("add", "multiply", "foo"):   # scatter(reduce=)'s names are not scatter_reduce's
        _assert_same_outcome(lambda d: torch.zeros(3, device=d).scatter_reduce(
            0, torch.tensor([0], device=d), torch.ones(1, device=d), bad))


def test_index_select_of_a_0_dim_tensor_takes_exactly_one_index():
    for ix in ([0], [0, 0], [], [1], [-1], 0):
        _assert_same_outcome(lambda d: torch.index_select(torch.tensor(5.0, device=d), 0,
                                                          torch.tensor(ix, dtype=torch.long, device=d)),
                             check_message=False)
    with pytest.raises(RuntimeError, match=r"index_select\(\): Index to scalar can have only 1 value, got 2 value"):
        torch.index_select(torch.tensor(5.0, device="neuron"), 0, torch.tensor([0, 0], device="neuron"))


def test_index_ops_refuse_operands_and_outputs_on_another_device():
    """ATen's device rules: index_select (as CUDA's kernel) and take need index and out on self's
    device; advanced indexing takes CPU indices of a device tensor but not the reverse."""
    x = torch.arange(4.0, device="neuron")
    with pytest.raises(RuntimeError, match=r"same device.*neuron:0 and cpu.*aten::index_select"):
        torch.index_select(x, 0, torch.tensor([1]))
    with pytest.raises(RuntimeError, match=r"take\(\): self, index and out expected to be in the same device"):
        torch.take(x, torch.tensor([1]))
    i = torch.tensor([1], device="neuron")
    for call in (lambda out: torch.index_select(x, 0, i, out=out), lambda out: torch.take(x, i, out=out),
                 lambda out: torch.masked_select(x, x > 1, out=out)):
        out = torch.zeros(2)
        with pytest.raises(RuntimeError, match=r"(Expected out tensor to have device neuron:0, but got cpu)|"
                                               r"(expected to be in the same device)"):
            call(out)
        assert torch.equal(out, torch.zeros(2))      # nothing written to the CPU tensor
    assert torch.equal(x[torch.tensor([1, 3])].cpu(), torch.tensor([1.0, 3.0]))   # CPU index: allowed
    with pytest.raises(RuntimeError, match=r"indices should be either on cpu or on the same device as the indexed "
                                           r"tensor \(cpu\)"):
        torch.arange(3.0)[torch.tensor([1], device="neuron")]
    with pytest.raises(RuntimeError, match=r"indices should be either on cpu"):
        torch.zeros(3).index_put_((torch.tensor([1], device="neuron"),), torch.tensor(1.0))


@pytest.mark.parametrize("op", ["index_select", "index_select out=index", "index_select expanded out",
                                "masked_select", "take", "gather"])
def test_outputs_overlapping_inputs_are_refused_as_cpu(op):
    def make(d):
        b, i = torch.arange(10.0, device=d), torch.tensor([0, 1], device=d)
        return {
            "index_select": lambda: torch.index_select(b, 0, i, out=b[2:4]),
            "index_select out=index": lambda: torch.index_select(torch.arange(5, device=d), 0, i, out=i),
            "index_select expanded out": lambda: torch.index_select(b, 0, i, out=torch.zeros(1, device=d).expand(2)),
            "masked_select": lambda: torch.masked_select(b, b > 4, out=b[:5]),
            "take": lambda: torch.take(b, i, out=b[2:4]),
            "gather": lambda: torch.gather(b, 0, i, out=b[2:4]),
        }[op]()
    _assert_same_outcome(make)


def _error_cases():
    cases = {
        "index_fill_ int32 index": lambda d: torch.zeros(3, 4, device=d).index_fill_(
            1, torch.tensor([0], dtype=torch.int32, device=d), 1.0),
        "take int32 index": lambda d: torch.take(torch.zeros(4, device=d), torch.tensor([1], dtype=torch.int32, device=d)),
        "take from empty": lambda d: torch.take(torch.zeros(0, device=d), torch.tensor([0], device=d)),
        "gather from empty": lambda d: torch.gather(torch.zeros(0, device=d), 0, torch.tensor([0], device=d)),
        "gather from empty 2-D": lambda d: torch.gather(torch.zeros(0, 3, device=d), 0, torch.tensor([[0]], device=d)),
        "scatter into empty": lambda d: torch.zeros(0, device=d).scatter_(0, torch.tensor([0], device=d),
                                                                          torch.ones(1, device=d)),
        "scatter_add into empty": lambda d: torch.zeros(0, device=d).scatter_add_(0, torch.tensor([0], device=d),
                                                                                  torch.ones(1, device=d)),
        "index_add into empty 2-D": lambda d: torch.zeros(0, 3, device=d).index_add_(
            0, torch.tensor([0], device=d), torch.ones(1, 3, device=d)),
        "bool scatter_reduce mean": lambda d: torch.zeros(3, dtype=torch.bool, device=d).scatter_reduce(
            0, torch.tensor([0], device=d), torch.ones(1, dtype=torch.bool, device=d), "mean"),
    }
    for r in ("amax", "amin", "max"):
        cases[f"complex scatter_reduce {r}"] = lambda d, r=r: torch.zeros(3, dtype=torch.complex64, device=d) \
            .scatter_reduce(0, torch.tensor([0], device=d), torch.ones(1, dtype=torch.complex64, device=d), r)
    for it in (torch.int64, torch.int32):
        for v in (9, -1, -9):
            for shape in ((4, 3), (4,), ()):   # 0-dim self: one index, 0-dim source
                src, ix = ((2,) + shape[1:], [1, v]) if shape else ((), [v])
                cases[f"index_add {shape} {it} {v}"] = (
                    lambda d, it=it, ix=ix, shape=shape, src=src: torch.zeros(shape, device=d).index_add_(
                        0, torch.tensor(ix, dtype=it, device=d), torch.ones(src, device=d)))
            cases[f"index_fill {it} {v}"] = lambda d, it=it, v=v: torch.zeros(3, 4, device=d).index_fill_(
                1, torch.tensor([v], dtype=it, device=d), 1.0)
            cases[f"take {it} {v}"] = lambda d, it=it, v=v: torch.take(
                torch.arange(4.0, device=d), torch.tensor([1, v], dtype=it, device=d))
            for op in ("gather", "scatter", "scatter_reduce"):
                cases[f"{op} {it} {v}"] = lambda d, it=it, v=v, op=op: {
                    "gather": lambda x, i: torch.gather(x, 0, i),
                    "scatter": lambda x, i: x.scatter_(0, i, 1.0),
                    "scatter_reduce": lambda x, i: x.scatter_reduce_(0, i, torch.ones(1, 3, device=d), "amax"),
                }[op](torch.zeros(4, 3, device=d), torch.tensor([[1, v, 0]], dtype=it, device=d))
    return cases


@pytest.mark.parametrize("name", sorted(_error_cases()))
def test_bad_arguments_raise_cpu_exception_type(name):
    """Each case's exception type is CPU's (IndexError vs RuntimeError vs NotImplementedError
    differs between ops, index dtypes and ranks in ATen's CPU kernels); valid cases equal CPU."""
    _assert_same_outcome(_error_cases()[name], check_message=False)
    torch.zeros(2, device="neuron").add_(1).cpu()     # the process stays usable


def test_gather_from_empty_tensor_says_which_index_is_out_of_bounds():
    with pytest.raises(RuntimeError, match=r"aten::gather: index 0 is out of bounds for dimension 0 with size 0"):
        torch.gather(torch.zeros(0, device="neuron"), 0, torch.tensor([0], device="neuron"))
        torch.neuron.synchronize()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bool, torch.uint8, torch.int64,
                                   torch.complex64])
def test_nonzero_over_many_parallel_chunks_as_cpu(native, dtype):
    """nonzero counts and writes its chunks in parallel: rows in row-major order, whatever the
    layout, for every dtype; the column-major result and out= forms as CPU's."""
    g = torch.Generator().manual_seed(4)
    base = (torch.rand(300, 7, 911, generator=g) < 0.3).to(dtype)   # ~1.9M elements, 58 chunks
    for x in (base, base.transpose(0, 2), base[:, 3], base[::2, :, 5:700]):
        want = torch.nonzero(x)
        got = torch.nonzero(x.to(native))
        assert got.stride() == want.stride() and torch.equal(got.cpu(), want)
    x = base[:, 2]
    for out in (torch.empty(0, dtype=torch.long), torch.empty(5, 2, 3, dtype=torch.long)[..., 0]):
        o = out.to(native)
        torch.nonzero(x.to(native), out=o)
        want = torch.nonzero(x, out=out.clone())
        assert o.shape == want.shape and torch.equal(o.cpu(), want)
    for x in (torch.zeros(()), torch.ones(()), torch.zeros(3, 0)):
        want, got = torch.nonzero(x), torch.nonzero(x.to(native))
        assert got.shape == want.shape and got.stride() == want.stride()


def test_float32_index_reductions_as_cpu(native):
    """The inlined float32 sum (scatter_add_ of elements, index_put_ with accumulate and
    negative indices) and index_add_ of rows in per-thread column slices give CPU's values;
    a bad index among repeated columns is reported as CPU reports it."""
    g = torch.Generator().manual_seed(5)
    src = torch.randn(200_000, generator=g)
    idx = torch.randint(0, 5000, (200_000,), generator=g)
    base = torch.randn(5000, generator=g)
    torch.testing.assert_close(base.to(native).scatter_add_(0, idx.to(native), src.to(native)).cpu(),
                               base.clone().scatter_add_(0, idx, src))
    neg = idx - 5000
    torch.testing.assert_close(base.to(native).index_put_((neg.to(native),), src.to(native), accumulate=True).cpu(),
                               base.clone().index_put_((neg,), src, accumulate=True))
    rows = torch.randint(0, 700, (9000,), generator=g)
    srcr = torch.randn(9000, 96, generator=g)
    table = torch.randn(700, 96, generator=g)
    assert torch.equal(table.to(native).index_add_(0, rows.to(native), srcr.to(native)).cpu(),
                       table.clone().index_add_(0, rows, srcr))
    bad = rows.clone()
    bad[[4000, 7000]] = torch.tensor([700, 9999])
    with pytest.raises(type(_raised(lambda: table.clone().index_add_(0, bad, srcr))),
                       match="aten::index_add.*index 700 is out of bounds for dimension 0 with size 700"):
        table.to(native).index_add_(0, bad.to(native), srcr.to(native)).cpu()


def _raised(f):
    try:
        f()
    except Exception as e:  # noqa: BLE001 - the type CPU raises is what is compared
        return e
    raise AssertionError("CPU did not raise")
