"""The visible CPU fallback: tracking, warnings, out= and in-place semantics, devices,
strict mode, float64 rule; and that no view op can reach it."""
import contextlib

import pytest
import torch

import torch_neuronx
from conftest import SCRIPT_CPU_ONLY, run_py

scale = torch.ops.neuron_test.scale


def test_fallback_is_recorded_per_invocation(neuron):
    x = torch.arange(6.0, device=neuron)
    torch_neuronx.clear_op_tracking()
    y = scale(x, 2.0)
    z = scale(y, 3.0)
    assert torch_neuronx.get_fallback_ops() == ["neuron_test::scale", "neuron_test::scale"]
    assert torch_neuronx.get_fallback_op_count() == 2
    assert z.cpu().tolist() == [0.0, 6.0, 12.0, 18.0, 24.0, 30.0]
    assert z.device == neuron


def test_executed_ops_counts_native_kernels(neuron):
    torch_neuronx.clear_op_tracking()
    x = torch.zeros(3, device=neuron)
    x.fill_(1.0)
    x.fill_(2.0)
    x.cpu()
    counts = torch_neuronx.get_executed_op_counts()
    assert counts["aten::fill_"] == 3  # zeros = empty + zero_ (a fill), then two fills
    ops = torch_neuronx.get_executed_ops()  # one entry per invocation, as get_fallback_ops()
    assert ops.count("aten::fill_") == 3 and "aten::copy_" in ops and len(ops) == sum(counts.values())
    torch_neuronx.clear_op_tracking()
    assert torch_neuronx.get_executed_ops() == [] and torch_neuronx.get_fallback_ops() == []


def test_warning_once_per_op():
    out = run_py(SCRIPT_CPU_ONLY + """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as w:
    x = torch.ones(3, device="neuron")
    for _ in range(3):
        torch.ops.neuron_test.scale(x, 2.0)
    torch.ops.neuron_test.shift(x)
print([str(m.message) for m in w if "fallback" in str(m.message)])
""").stdout.strip()
    assert out == ("[\"Operator 'neuron_test::scale' executed via CPU fallback\", "
                   "\"Operator 'neuron_test::shift' executed via CPU fallback\"]")


def test_fallback_list_is_bounded():
    out = run_py(SCRIPT_CPU_ONLY + """
import torch_neuronx
x = torch.ones(1, device="neuron")
for _ in range(60):
    torch.ops.neuron_test.shift(x)
print(len(torch_neuronx.get_fallback_ops()), torch_neuronx.get_fallback_op_count())
""", env={"TORCH_NEURONX_FALLBACK_LIST_CAP": "50"}).stdout.split()
    assert out == ["50", "60"]


def test_inplace_and_out_variants_write_the_device_tensor(neuron):
    x = torch.arange(4.0, device=neuron)
    ptr = x.data_ptr()
    torch_neuronx.clear_op_tracking()
    torch.ops.neuron_test.scale_(x, 3.0)
    assert x.data_ptr() == ptr and x.cpu().tolist() == [0.0, 3.0, 6.0, 9.0]
    out = torch.empty(0, device=neuron)
    r = torch.ops.neuron_test.scale.out(x, 2.0, out=out)
    assert r is out and out.shape == (4,) and out.cpu().tolist() == [0.0, 6.0, 12.0, 18.0]
    assert torch_neuronx.get_fallback_ops() == ["neuron_test::scale_", "neuron_test::scale"]
    vals = torch.empty(0, device=neuron)
    idx = torch.empty(0, dtype=torch.int64, device=neuron)
    torch.max(torch.tensor([[1.0, 5.0], [7.0, 2.0]], device=neuron), 1, out=(vals, idx))
    assert vals.cpu().tolist() == [5.0, 7.0] and idx.cpu().tolist() == [1, 0]
    # in-place op on a non-contiguous view writes through to the base
    base = torch.ones(3, 4, device=neuron)
    torch.ops.neuron_test.scale_(base.t()[1:], 5.0)
    assert base.cpu()[:, 1:].sum().item() == 45.0 and base.cpu()[:, 0].sum().item() == 3.0


def test_resized_out_takes_the_layout_cpu_gives_it(neuron):
    # CPU's kernel resizes an out= tensor to its result's layout (a transposed input's digamma
    # is transposed, a channels_last one channels_last); the write-back keeps those strides.
    # torch.complex / torch.polar reach complex.out / polar.out through an empty out= tensor.
    x = torch.randn(5, 4).t()
    c = torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last)
    sliced = torch.randn(6, 8)[::2, ::2]
    torch_neuronx.clear_op_tracking()
    for name, fn in [
        ("digamma", lambda t: torch.digamma(t, out=torch.empty(0, device=t.device))),
        ("digamma wrong shape", lambda t: torch.digamma(t, out=torch.empty(3, device=t.device))),
        ("complex", lambda t: torch.complex(t, t)),
        ("polar", lambda t: torch.polar(t.abs(), t)),
    ]:
        for t in (x, c, sliced):
            with pytest.warns(UserWarning, match="resized") if name == "digamma wrong shape" else contextlib.nullcontext():
                expected, actual = fn(t), fn(t.to(neuron))
            assert actual.stride() == expected.stride(), (name, t.stride())
            torch.testing.assert_close(actual.cpu(), expected, equal_nan=True)
    assert {"aten::digamma", "aten::complex", "aten::polar"} <= set(torch_neuronx.get_fallback_ops())
    # an out= of the right shape keeps its own strides
    o = torch.empty(5, 4, device=neuron).t()
    torch.digamma(x.contiguous().to(neuron), out=o)
    assert o.stride() == (1, 4)
    torch.testing.assert_close(o.cpu(), torch.digamma(x))


def test_fallback_arguments_and_results_keep_strided_layouts(neuron):
    """A block of a bigger matrix reaches CPU's kernel in its own strides, and a strided result
    comes back in CPU's strides: det/slogdet/logdet's backward reads the LU factors by the
    input's layout (CPU factorises A^H for a contiguous input: a contiguous copy gave the
    transposed gradient), lstsq's solution is a column-major view of CPU's buffer."""
    torch.manual_seed(0)
    big = torch.randn(2, 5, 5)
    for f in (torch.linalg.det, lambda a: torch.linalg.slogdet(a).logabsdet, torch.logdet):
        grads = []
        for dev in ("cpu", neuron):
            m = (big @ big.transpose(-1, -2) + torch.eye(5)).to(dev).requires_grad_()
            a = m[..., :3, 1:4]
            grads.append(torch.autograd.grad(f(a).sum(), m)[0].cpu())
        torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-4)
    a, b = torch.randn(6, 3), torch.randn(6, 2)
    want = torch.linalg.lstsq(a, b).solution
    got = torch.linalg.lstsq(a.to(neuron), b.to(neuron)).solution
    assert got.stride() == want.stride()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-4)
    # a sparse view, expanded strides: dense copies, values as CPU's
    x = torch.randn(40, 40)
    for t in (x[::7, ::9], torch.randn(3, 1).expand(3, 4)):
        torch.testing.assert_close(torch.special.i1(t.to(neuron)).cpu(), torch.special.i1(t))

def test_composite_kernels_that_refuse_other_devices_take_the_fallback(neuron):
    """ATen's mode.values accepts CPU/CUDA/XPU tensors only, kaiser_window calls a stub with CPU
    and CUDA kernels only; on neuron both run through the visible fallback: values, indices,
    resize, keepdim and CPU's errors as on CPU."""
    for args in ((6,), (6, False), (7, True, 3.0)):
        torch_neuronx.clear_op_tracking()
        w = torch.kaiser_window(*args, device=neuron)
        assert w.device == neuron and torch.equal(w.cpu(), torch.kaiser_window(*args))
        assert torch_neuronx.get_fallback_ops() == ["aten::kaiser_window"]
    x = torch.tensor([[1.0, 2.0, 2.0, 3.0], [5.0, 5.0, 4.0, 4.0], [0.0, 1.0, 0.0, 1.0]])
    for keepdim in (False, True):
        ev, ei = torch.empty(0), torch.empty(0, dtype=torch.int64)
        torch.mode(x, 1, keepdim, out=(ev, ei))
        vals = torch.empty(0, device=neuron)
        idx = torch.empty(0, dtype=torch.int64, device=neuron)
        torch_neuronx.clear_op_tracking()
        r = torch.mode(x.to(neuron), 1, keepdim, out=(vals, idx))
        assert r[0] is vals and r[1] is idx
        assert vals.shape == ev.shape and torch.equal(vals.cpu(), ev) and torch.equal(idx.cpu(), ei)
        assert "aten::mode" in torch_neuronx.get_fallback_ops()
    for bad, match in (((torch.empty(0, dtype=torch.int32, device=neuron), torch.empty(0, dtype=torch.int64, device=neuron)),
                        "scalar type .Float. but got .Int."),
                       ((torch.empty(0, device=neuron), torch.empty(0, dtype=torch.int32, device=neuron)), "int64|Long"),
                       ((torch.empty(0, device=neuron), torch.empty(0, dtype=torch.int64)), "device")):
        with pytest.raises(RuntimeError, match=match):
            torch.mode(x.to(neuron), 1, out=bad)


def test_mixing_devices_is_an_error(neuron):
    x = torch.ones(3, device=neuron)
    for f in (lambda a, b: a + b, lambda a, b: torch.ops.neuron_test.scale(a, 1.0) + b):
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            f(x, torch.ones(3))
        with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
            f(torch.ones(3, device="neuron:1"), x)
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        torch.ops.aten.lerp.Tensor(x, torch.ones(3), x)
    assert (x + torch.tensor(2.0)).cpu().tolist() == [3.0, 3.0, 3.0]  # 0-dim CPU scalar is fine
    assert x.sum().item() == 3.0


def test_index_with_cpu_indices_is_allowed(neuron):
    x = torch.arange(10.0, device=neuron)
    assert x[torch.tensor([1, 3])].cpu().tolist() == [1.0, 3.0]


def test_factories_with_device_argument(neuron):
    a = torch.arange(5, device=neuron)
    e = torch.eye(3, device=neuron)
    l = torch.linspace(0, 1, 5, device=neuron)
    assert a.device == neuron and e.device == neuron and l.device == neuron
    assert a.cpu().tolist() == [0, 1, 2, 3, 4] and e.cpu().trace().item() == 3.0


def test_strict_mode_raises_naming_the_op(neuron):
    x = torch.ones(2, device=neuron)
    prev = torch_neuronx.set_strict_fallback(True)
    try:
        with pytest.raises(NotImplementedError, match="neuron_test::scale"):
            scale(x, 2.0)
        x.fill_(3.0)  # native ops still run
    finally:
        torch_neuronx.set_strict_fallback(prev)
    assert scale(x, 2.0).device == neuron


def test_strict_mode_env_var():
    proc = run_py(SCRIPT_CPU_ONLY + "torch.ops.neuron_test.shift(torch.ones(2, device='neuron'))",
                  env={"TORCH_NEURONX_STRICT": "1"}, check=False)
    assert proc.returncode != 0 and "neuron_test::shift" in proc.stderr and "TORCH_NEURONX_STRICT" in proc.stderr


def test_float64_keeps_bits_in_copies_and_computes_through_float32(neuron):
    vals = torch.tensor([0.1, 1.0 / 3.0, 2.0 ** 0.5, 1e-300, 123456789.123456789], dtype=torch.float64)
    d = vals.to(neuron)
    assert d.dtype == torch.float64
    assert torch.equal(d.cpu(), vals)  # a copy keeps every bit
    for op in (lambda t: t * 3.0, lambda t: scale(t, 3.0)):  # native and fallback alike
        s = op(d).cpu()
        expected = (vals.float() * 3.0).double()
        assert torch.equal(s, expected)
        assert not torch.equal(s, vals * 3.0)
    f = torch.full((2,), 0.1, dtype=torch.float64, device=neuron)  # a fill stores the value, as a copy
    assert torch.equal(f.cpu(), torch.full((2,), 0.1, dtype=torch.float64))


def test_float64_warns_once_per_process():
    out = run_py(SCRIPT_CPU_ONLY + """
if True:
        import warnings, torch
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as w:
            x = torch.ones(3, dtype=torch.float64, device="neuron")
            y = x * 2
            z = torch.ops.neuron_test.scale(y, 2.0)
            z.fill_(1.0)
        print(sum("executed as float32 on neuron" in str(m.message) for m in w))
    """).stdout.strip()
    assert out == "1"


def test_int64_is_native(neuron):
    x = torch.tensor([2 ** 62, -5], dtype=torch.int64, device=neuron)
    assert x.cpu().tolist() == [2 ** 62, -5]


def _view_ops_without_kernel():
    """aten ops whose schema returns an alias of an input (a view) and that have no
    composite or neuron kernel: those would reach the fallback."""
    missing = []
    for name in torch._C._dispatch_get_all_op_names():
        if not name.startswith("aten::"):
            continue
        packet = getattr(torch.ops.aten, name[len("aten::"):], None)
        if packet is None:
            continue
        for overload in packet.overloads():
            schema = getattr(packet, overload)._schema
            rets = schema.returns
            if not any(r.alias_info is not None and not r.alias_info.is_write for r in rets):
                continue
            full = schema.name + ("." + schema.overload_name if schema.overload_name else "")
            try:
                has = [torch._C._dispatch_has_kernel_for_dispatch_key(full, k) for k in
                       ("PrivateUse1", "CompositeImplicitAutograd", "CompositeExplicitAutograd",
                        "CompositeExplicitAutogradNonFunctional", "CPU")]
            except RuntimeError:  # a TorchScript builtin, not a dispatcher op
                continue
            if has[-1] and not any(has[:-1]):
                missing.append(full)
    return sorted(missing)


def test_no_view_op_reaches_the_fallback():
    assert _view_ops_without_kernel() == []


def test_view_ops_in_the_fallback_fail_loudly(neuron):
    # A view op with only a CPU kernel: the fallback refuses rather than return a copy.
    with pytest.raises(RuntimeError, match="returns a view"):
        torch.ops.neuron_test.alias_op(torch.ones(2, device=neuron))
    assert torch.ones(2, device=neuron).sum().item() == 2.0
