"""Indexing kernels (advanced indexing, index_put_, gather/scatter, index_add/copy/fill,
nonzero and mask ops) against CPU PyTorch: the fault kinds device backends hit most —
duplicate indices, negative indices, strided operands, out-of-range indices."""
import pytest
import torch

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
