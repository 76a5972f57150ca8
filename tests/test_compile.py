"""torch.compile(backend="neuron"): registration, compiled vs eager (bitwise where the
computation is the same), training steps of real models, recompiles, graph breaks, failures and
fallback execution, RNG reproducibility, the on-disk cache across processes, and random
pointwise/reduction graphs (hypothesis). Every test asserts from the metrics that the graph was
compiled (fused kernels, no eager fallback), so a backend that silently ran eagerly would fail.

The compile cache is a fresh temporary directory (conftest sets TORCH_NEURONX_CACHE_DIR)."""
import os
import re
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import torch_neuronx
from torch_neuronx.compiler import get_dynamo_metrics, reset_dynamo_metrics
from torch_neuronx.examples.gpt import TinyGPT

from conftest import CPU_ONLY, assert_bitwise_equal, run_py  # noqa: F401


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    reset_dynamo_metrics()
    torch_neuronx.clear_op_tracking()
    yield
    torch.neuron.synchronize()


def compiled_records():
    recs = get_dynamo_metrics()
    assert recs, "no graph reached the neuron compiler"
    return recs


def assert_compiled(min_fused=1, allow_eager=()):
    """Every graph was compiled (not run eagerly), with fused kernels, and ran no eager op
    outside `allow_eager`."""
    recs = [r for r in compiled_records() if r["reason"] != "no neuron tensors"]  # CPU-only graphs
    for r in recs:
        assert not r["fallback"], r
        assert set(r["eager_ops"]) <= set(allow_eager), r["eager_ops"]
    assert sum(r["fused_kernel_count"] for r in recs) >= min_fused, recs
    return recs


# ---------------------------------------------------------------- registration


def test_backend_registered_and_stable():
    from importlib.metadata import entry_points

    from torch._dynamo.backends.registry import lookup_backend

    assert "neuron" in torch._dynamo.list_backends()
    names = [ep.name for ep in entry_points(group="torch_dynamo_backends")]
    assert "neuron" in names
    assert lookup_backend("neuron") is lookup_backend("neuron") is torch_neuronx.compiler.neuron_backend
    from torch._dynamo.device_interface import get_interface_for_device

    iface = get_interface_for_device("neuron")
    assert iface.device_count() == torch.neuron.device_count()
    assert iface.current_device() == torch.neuron.current_device()


def test_same_function_compiled_once(neuron):
    def f(x):
        return torch.sigmoid(x) * 3 - 1

    cf = torch.compile(f, backend="neuron")
    x = torch.randn(32, 16, device=neuron)
    for _ in range(3):
        assert_bitwise_equal(cf(x), f(x))
    assert len(compiled_records()) == 1
    assert_compiled()
    assert torch_neuronx.get_fallback_ops() == []


def test_inductor_on_neuron_says_what_to_do(neuron):
    f = torch.compile(lambda x: x.sin() + 1)
    with pytest.raises(Exception, match='backend="neuron"'):
        f(torch.randn(4, device=neuron))
    # Inductor still compiles CPU graphs in the same process
    g = torch.compile(lambda x: x.cos() * 2)
    x = torch.randn(8)
    torch.testing.assert_close(g(x), x.cos() * 2)


def test_set_default_backend(neuron):
    prev = torch.compiler.get_default_backend()
    torch.compiler.set_default_backend("neuron")
    try:
        f = torch.compile(lambda x: torch.tanh(x) + x)
        x = torch.randn(64, device=neuron)
        assert_bitwise_equal(f(x), torch.tanh(x) + x)
        assert_compiled()
    finally:
        torch.compiler.set_default_backend(prev)


# ---------------------------------------------------------------- numerics


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.int32])
def test_elementwise_chain_bitwise(neuron, dtype):
    def f(x, y):
        if dtype.is_floating_point:
            a = torch.nn.functional.gelu(x * 0.5 + y) - torch.sigmoid(y) / (x.abs() + 1)
            return a, torch.where(x > y, a, y).exp2(), (x - y).relu().sum(dim=-1)
        a = (x * 3 + y) // 2 - y.abs()
        return a, torch.maximum(a, x), (x ^ y).sum(dim=0)

    g = torch.Generator().manual_seed(0)
    if dtype.is_floating_point:
        xs = [torch.randn(37, 53, generator=g).to(dtype) for _ in range(2)]
    else:
        xs = [torch.randint(-100, 100, (37, 53), generator=g, dtype=dtype) for _ in range(2)]
    x, y = (t.to(neuron) for t in xs)
    cf = torch.compile(f, backend="neuron")
    for got, want in zip(cf(x, y), f(x, y)):
        assert_bitwise_equal(got, want)
    assert_compiled()
    assert torch_neuronx.get_fallback_ops() == []


def test_views_broadcast_and_strided_inputs(neuron):
    def f(x, b):
        y = x.transpose(0, 1)[::2] * b  # strided view, broadcast row
        z = y.reshape(-1, 4).permute(1, 0) + 1
        return z, y.amax(dim=1, keepdim=True), x[:, 1:5].mean()

    x = torch.randn(12, 8, device=neuron)[:, ::1].t().contiguous().t()  # column-major input
    b = torch.randn(12, device=neuron)
    cf = torch.compile(f, backend="neuron")
    for got, want in zip(cf(x, b), f(x, b)):
        assert_bitwise_equal(got, want)
    assert_compiled()


def test_clamp_and_pow_scalar_arguments_compile_as_eager_and_cpu(neuron):
    """Lowered clamp / hardtanh / pow read their number arguments as eager and CPU do: bounds in
    the tensor's dtype (uint8 -3 is 253), min(max(x, lo), hi) for lo > hi, NaN when a bound is
    NaN; the float16 / bfloat16 exponent rounded, ATen's sqrt shortcut for float32 / bfloat16 but
    powf for float16 and for tensor exponents; hardswish's gradient at +-3."""
    nan, inf = float("nan"), float("inf")

    def f(i, u, x, h, b, e):
        return (torch.clamp(i, 5, -3), torch.clamp(u, -3, 5), torch.clamp(u, max=-1), torch.clamp_min(u, -3),
                torch.clamp(x, nan, 2.0), torch.ops.aten.hardtanh(x, 0.0, nan), torch.clamp(x, 5.0, -3.0),
                torch.pow(h, 2.1), torch.pow(b, 2.1), torch.pow(x, 0.5), torch.pow(h, 0.5), torch.pow(b, -0.5),
                torch.pow(h, -0.5), torch.pow(x, e), torch.pow(-0.0, e), torch.pow(300, u),
                torch.ops.aten.hardswish_backward(torch.ones_like(x), x))

    i = torch.tensor([-7, 0, 3, 9, 100, -100])
    u = torch.tensor([0, 1, 7, 200, 255, 3], dtype=torch.uint8)
    x = torch.tensor([-inf, -3.0, -0.0, 3.0, 4.0, nan])
    h, b, e = x.half() * 100, x.bfloat16() * 100, torch.tensor([0.5, -0.5, -0.5, 2.0, 1.5, -0.5])
    args = [t.to(neuron) for t in (i, u, x, h, b, e)]
    cf = torch.compile(f, backend="neuron")
    got, eager, want = cf(*args), f(*args), f(i, u, x, h, b, e)
    for g, ea, w in zip(got, eager, want, strict=True):
        assert_bitwise_equal(g, ea)
        assert_bitwise_equal(g, w)
    assert_compiled()
    assert torch_neuronx.get_fallback_ops() == []


@pytest.mark.parametrize("case", ["uint8 bound 300", "int8 bound 200", "float16 bound 1e5", "uint8 ** 300",
                                  "float16 ** 1e10"])
def test_out_of_range_number_arguments_raise_cpus_error_when_compiled(neuron, case):
    """A bound or exponent outside the tensor's dtype is not lowered: the op runs as an eager
    step, which raises CPU's RuntimeError."""
    fn, dtype = {"uint8 bound 300": (lambda t: torch.clamp(t, 300) + 1, torch.uint8),
                 "int8 bound 200": (lambda t: torch.clamp(t, max=200) + 1, torch.int8),
                 "float16 bound 1e5": (lambda t: torch.clamp(t, 1e5) + 1, torch.float16),
                 "uint8 ** 300": (lambda t: torch.pow(t, 300) + 1, torch.uint8),
                 "float16 ** 1e10": (lambda t: torch.pow(t, 1e10) + 1, torch.float16)}[case]
    x = torch.tensor([1, 2], dtype=dtype)
    with pytest.raises(RuntimeError) as cpu_error:
        fn(x)
    with pytest.raises(RuntimeError, match="value cannot be converted to type .* without overflow") as error:
        torch.compile(fn, backend="neuron")(x.to(neuron))
    assert str(error.value).splitlines()[0] == str(cpu_error.value).splitlines()[0]


def test_pow_scalar_base_and_foreach_pow(neuron):
    """pow with a number base (2.5 ** t, and 1 ** t = 1 even for NaN) and the _foreach_pow
    overloads (list ** number, list ** list, number ** list) lower into fused loops, with
    eager's bits; broadcast 0-dim operands are read once per run of the loop."""
    def f(t, u, s):
        a, b = torch._foreach_pow([t, u], 3.0), torch._foreach_pow([t, u], [u, t])
        c = torch._foreach_pow(0.9, [s, t])
        return 2.5 ** t, torch.pow(1, t), *a, *b, *c, t * c[0] + 0.5 ** s

    g = torch.Generator().manual_seed(0)
    t = (torch.rand(64, 33, generator=g) * 8 - 4).to(neuron)
    t[0, :3] = torch.tensor([float("nan"), float("inf"), -float("inf")])
    u = torch.rand(64, 33, generator=g).to(neuron)
    s = torch.tensor(7.0).to(neuron)
    cf = torch.compile(f, backend="neuron")
    got, want = cf(t, u, s), f(t, u, s)
    for x, y in zip(got, want):
        assert_bitwise_equal(x, y)
    assert_compiled()
    assert torch_neuronx.get_fallback_ops() == []


def test_host_scalars_feeding_device_ops(neuron):
    """Ops on 0-dim CPU tensors whose values only feed device pointwise ops run in the device's
    loops; one whose value the graph returns stays a host op with a CPU result."""
    def f(x, s):
        return s * 2, x * (s + 1).sqrt(), torch._foreach_div([x, x + 1], torch._foreach_pow(0.9, [s, s + 1]))

    x = torch.randn(8, 5).to(neuron)
    s = torch.tensor(3.0)
    reset_dynamo_metrics()
    got, want = torch.compile(f, backend="neuron")(x, s), f(x, s)
    assert got[0].device.type == "cpu"
    assert_bitwise_equal(got[0], want[0])
    for a, b in zip([got[1], *got[2]], [want[1], *want[2]]):
        torch.testing.assert_close(a, b, rtol=2e-7, atol=0)  # (CPU's scalar pow and sqrt vs the device's)
    (rec,) = assert_compiled()
    assert rec["host_ops"] == ["aten::mul.Tensor"], rec["host_ops"]
    # float64 host scalars stay on the host (the device would compute them in float32)
    d = torch.tensor(3.0, dtype=torch.float64)
    reset_dynamo_metrics()
    assert_bitwise_equal(torch.compile(lambda x, d: x * (d + 1).sqrt(), backend="neuron")(x, d), x * (d + 1).sqrt())
    (rec,) = assert_compiled()
    assert rec["host_ops"] == ["aten::add.Tensor", "aten::sqrt"], rec["host_ops"]


def test_fast_forms(neuron, tmp_path, monkeypatch):
    """Loops with a member of VNC_EW_FAST_TABLE (exp, sigmoid, SiLU, their backward ops,
    GELU's backward, log) check each chunk's inputs and run the fast forms when all are in
    their domain: bitwise equal to eager (the runtime's own fast kernels) and to CPU within
    tolerance, on chunks that pass and chunks holding out-of-domain values (inf, NaN, far
    tails), also when the check recomputes cheap members and when the loop is in place."""
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    g = torch.Generator().manual_seed(11)
    inside, gy = torch.randn(20000, generator=g), torch.randn(20000, generator=g)
    outside = inside * 4
    outside[17000:17008] = torch.tensor([100.0, -100.0, float("inf"), -float("inf"), float("nan"), 20.0, -88.5, 1e-40])

    def fns(gd):
        return {"exp": torch.exp, "sigmoid": torch.sigmoid, "silu": F.silu, "log": lambda t: torch.log(t.abs()),
                "gelu_backward": lambda t: torch.ops.aten.gelu_backward(gd, t),
                "silu_backward": lambda t: torch.ops.aten.silu_backward(gd, t),
                "exp of a scaled sum": lambda t: torch.exp(t * 0.5 + 1.0),
                "in place": lambda t: t.clone().mul_(2).exp_()}

    for x in (inside, outside):
        for name, f in fns(gy.to(neuron)).items():
            got, want = torch.compile(f, backend="neuron")(x.to(neuron)), f(x.to(neuron))
            assert_bitwise_equal(got, want)
            ref = fns(gy)[name](x)
            torch.testing.assert_close(got.cpu(), ref, rtol=2e-5, atol=1e-6, equal_nan=True, msg=name)
    sources = " ".join(p.read_text() for p in tmp_path.iterdir() if p.suffix == ".c")
    for op in ("exp", "sigmoid", "silu", "log", "gelu_backward", "silu_backward"):
        assert f"vnc_ew_{op}_F32_ok(" in sources and f"vnc_ew_{op}_F32_fast(" in sources, op
    assert torch_neuronx.get_fallback_ops() == []


def test_gemm_epilogues(neuron):
    """Pointwise consumers of a product run on its finished row tiles (vnc_gemm_fused): a
    bias + GELU, a residual add over a 3-D view, a batched product's scaling; products big
    enough for several tiles; bitwise equal to eager. A consumer reading the product across
    rows (its transpose) and one that needs a reduction of the product stay separate loops."""
    def fused(x, w, b, r, p, q):
        h = F.gelu(torch.addmm(b, x, w))                                  # bias, activation
        y = r + (h @ w.t()).view(3, 100, 48) * 0.5                         # residual add on a view
        z = torch.bmm(p, q).sigmoid() + 1                                 # batched product
        return h, y, z

    def separate(x, w):
        m = x @ w
        t = m.t() * 2                                                      # reads across rows
        return t, m / m.sum(1, keepdim=True)                              # reads a later reduction

    g = torch.Generator().manual_seed(5)
    x, w, b = torch.randn(300, 48, generator=g), torch.randn(48, 160, generator=g), torch.randn(160, generator=g)
    r, p, q = torch.randn(3, 100, 48, generator=g), torch.randn(4, 70, 30, generator=g), torch.randn(4, 30, 90, generator=g)
    args = [t.to(neuron) for t in (x, w, b, r, p, q)]
    for got, want in zip(torch.compile(fused, backend="neuron")(*args), fused(*args)):
        assert_bitwise_equal(got, want)
    assert [r["gemm_epilogue_count"] for r in compiled_records()] == [3]
    reset_dynamo_metrics()
    wr = torch.randn(48, 48, generator=g).to(neuron)
    for got, want in zip(torch.compile(separate, backend="neuron")(args[0], wr), separate(args[0], wr)):
        assert_bitwise_equal(got, want)
    assert [r["gemm_epilogue_count"] for r in compiled_records()] == [0]
    assert torch_neuronx.get_fallback_ops() == []


def test_gemm_epilogue_overwrites_the_product_in_place(neuron):
    """When nothing else reads the product, the GEMM writes it into the epilogue's output and the
    epilogue overwrites it in place: the call allocates its output only (eager: the product and
    the output)."""
    f = lambda x, w, b: F.gelu(torch.addmm(b, x, w))  # noqa: E731
    g = torch.Generator().manual_seed(6)
    x, w, b = (t.to(neuron) for t in (torch.randn(512, 64, generator=g), torch.randn(64, 1024, generator=g) / 8,
                                       torch.randn(1024, generator=g)))
    cf = torch.compile(f, backend="neuron")
    assert_bitwise_equal(cf(x, w, b), f(x, w, b))
    peaks = []
    for fn in (f, cf):
        torch.neuron.synchronize()
        torch.neuron.reset_peak_memory_stats()
        before = torch.neuron.memory_allocated()
        y = fn(x, w, b)
        torch.neuron.synchronize()
        peaks.append(torch.neuron.max_memory_allocated() - before)
        del y
    out_bytes = 512 * 1024 * 4
    assert peaks[0] >= 2 * out_bytes and peaks[1] == out_bytes, peaks
    assert [r["gemm_epilogue_count"] for r in compiled_records()] == [1]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_epilogues(neuron, dtype):
    """Pointwise consumers of softmax, log_softmax, layer norm (forward) and of their
    backward ops run inside the row kernels on finished rows, and their pointwise producers
    on each block of rows just before the kernel reads it (vnc/nn_fused.h): values and
    gradients bitwise equal to eager, each kind counted in row_epilogue_ops and
    row_prologue_ops."""
    def f(x1, x2, x3, r, w, b):
        p = torch.softmax(x1 * 0.5, dim=-1) * 3 + r           # backward: softmax grad * 0.5
        q = torch.log_softmax(x2 * 2, dim=-1) * r             # backward: log_softmax grad * 2
        h = F.layer_norm(x3 * 2, (x3.shape[-1],), w, b).relu()  # backward: dx * 2
        return p, q, h

    g = torch.Generator().manual_seed(8)
    shape = (3, 50, 70)  # 150 rows of 70
    xs = [torch.randn(shape, generator=g).to(dtype) for _ in range(4)] + \
        [torch.randn(70, generator=g).to(dtype) for _ in range(2)]
    grads = [torch.randn(shape, generator=g).to(dtype).to(neuron) for _ in range(3)]

    def run(fn):
        ts = [t.to(neuron).requires_grad_() for t in xs]
        outs = fn(*ts)
        torch.autograd.backward(outs, grads)
        return list(outs) + [t.grad for t in ts]

    want = run(f)
    for got, w in zip(run(torch.compile(f, backend="neuron")), want):
        assert_bitwise_equal(got, w)
    ops = {r["graph_type"]: sorted(r["row_epilogue_ops"]) for r in assert_compiled()}
    assert ops == {"forward": ["aten::_log_softmax", "aten::_softmax", "aten::native_layer_norm"],
                   "backward": ["aten::_log_softmax_backward_data", "aten::_softmax_backward_data",
                                "aten::native_layer_norm_backward"]}, ops
    assert all(r["row_epilogue_count"] == 3 and r["gemm_epilogue_count"] == 0 for r in compiled_records())
    # producers: the scalings of x1, x2, x3 (forward); in the backward, the gradients of the
    # outputs scaled on their way into the softmax backward ops, relu's mask before dx
    ops = {r["graph_type"]: sorted(r["row_prologue_ops"]) for r in compiled_records()}
    assert ops == {"forward": ["aten::_log_softmax", "aten::_softmax", "aten::native_layer_norm"],
                   "backward": ["aten::_log_softmax_backward_data", "aten::_softmax_backward_data",
                                "aten::native_layer_norm_backward"]}, ops
    assert torch_neuronx.get_fallback_ops() == []


def test_row_epilogues_need_finished_rows(neuron):
    """A consumer that reads a softmax or layer norm output transposed, or another row of it
    (row 0 broadcast over every row), could read rows not yet computed: it stays a separate
    loop; so does a producer whose value a fused consumer reads at another row. Still equal
    to eager."""
    def f(x, z, w, v):
        s = torch.softmax(x, dim=-1)  # square: the transpose has the rows' shape
        y = F.layer_norm(z, (z.shape[-1],), w)
        h = v * 2                     # not a prologue: the epilogue reads its row 0 everywhere
        return s.t() * 2, y - y[0], torch.softmax(h, dim=-1) + h[0]

    g = torch.Generator().manual_seed(9)
    x, z, w, v = (torch.randn(shape, generator=g).to(neuron) for shape in ((128, 128), (300, 64), (64,), (300, 64)))
    for got, want in zip(torch.compile(f, backend="neuron")(x, z, w, v), f(x, z, w, v)):
        assert_bitwise_equal(got, want)
    recs = assert_compiled()
    assert [(r["row_epilogue_ops"], r["row_prologue_ops"]) for r in recs] == [(["aten::_softmax"], [])], recs


def test_gpt_graphs_fuse_gemm_epilogues(tmp_path, monkeypatch):
    """The main job's GPT: per block, the attention projection's and the MLP output's residual
    adds and the MLP's GELU run as GEMM epilogues (forward), and GELU backward (backward); in
    the backward, the residual gradient add after both layer norms' dx runs in the layer norm
    kernel (and, forward, the embedding add before the first layer norm), and the attention
    kernel writes dq, dk and dv straight into the QKV gradient (the cat copies nothing)."""
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    torch.manual_seed(0)
    model = TinyGPT(96, 64, 2, 4, 32).to("neuron")
    idx = torch.randint(0, 96, (4, 33)).to("neuron")
    torch.compile(model, backend="neuron")(idx[:, :-1], idx[:, 1:]).backward()
    recs = assert_compiled()
    counts = {r["graph_type"]: r["gemm_epilogue_count"] for r in recs}
    assert counts == {"forward": 3 * 2, "backward": 1 * 2}, counts
    norms = {r["graph_type"]: r["row_epilogue_ops"].count("aten::native_layer_norm_backward") for r in recs}
    assert norms == {"forward": 0, "backward": 2 * 2}, norms
    # the token + position embedding add is computed row by row inside the first layer norm
    assert {r["graph_type"]: r["row_prologue_ops"] for r in recs} == {"forward": ["aten::native_layer_norm"],
                                                                     "backward": []}
    (backward,) = tmp_path.glob("*backward*.c")
    src = backward.read_text()
    assert src.count("vnc_rt->attention_backward(") == 2 and "vnc_rt->copy(" not in src


def test_lazy_bit_views(neuron):
    """aten._conj and aten._neg_view are views that change what readers see: compiled, they
    compute the conjugate / negation (not a stride-only view), equal to eager."""
    def f(a, x):
        return a.conj() * 2 + 1, a.conj().imag * 3, torch._neg_view(x) * 2

    g = torch.Generator().manual_seed(7)
    a = torch.randn(33, dtype=torch.complex64, generator=g).to(neuron)
    x = torch.randn(33, generator=g).to(neuron)
    for got, want in zip(torch.compile(f, backend="neuron")(a, x), f(a, x)):
        assert_bitwise_equal(got, want)
    assert_compiled(allow_eager=("aten::conj_physical", "aten::neg", "aten::view_as_real"))
    assert torch_neuronx.get_fallback_ops() == []


def _train(model, steps, data, compile_model):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    fn = torch.compile(model, backend="neuron") if compile_model else model
    losses = []
    for x, y in data[:steps]:
        loss = fn(x, y) if isinstance(model, TinyGPT) else F.cross_entropy(fn(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach())
    return torch.stack(losses).cpu(), [p.detach().cpu() for p in model.parameters()]


def _compare_training(make, data, steps=10, allow_eager=(), exact=True):
    torch.manual_seed(0)
    eager_model = make()
    compiled_model = make()
    compiled_model.load_state_dict(eager_model.state_dict())
    le, pe = _train(eager_model.to("neuron"), steps, data, False)
    lc, pc = _train(compiled_model.to("neuron"), steps, data, True)
    recs = assert_compiled(allow_eager=allow_eager)
    assert {r["graph_type"] for r in recs} >= {"forward", "backward"}
    if exact:
        assert torch.equal(le, lc), (le, lc)
        for a, b in zip(pe, pc):
            assert_bitwise_equal(b, a)
    else:
        torch.testing.assert_close(lc, le, rtol=1e-5, atol=1e-6)
        for a, b in zip(pe, pc):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert torch_neuronx.get_fallback_ops() == []


def test_mlp_training_matches_eager():
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(32, 20, generator=g).to("neuron"), torch.randint(0, 5, (32,), generator=g).to("neuron"))
            for _ in range(10)]
    make = lambda: torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.GELU(), torch.nn.Linear(64, 64),  # noqa: E731
                                       torch.nn.SiLU(), torch.nn.Linear(64, 5))
    _compare_training(make, data)


def test_gpt_training_matches_eager():
    g = torch.Generator().manual_seed(2)
    data = []
    for _ in range(10):
        idx = torch.randint(0, 96, (8, 33), generator=g).to("neuron")
        data.append((idx[:, :-1], idx[:, 1:]))
    _compare_training(lambda: TinyGPT(96, 64, 2, 4, 32), data)


def test_cnn_training_matches_eager():
    g = torch.Generator().manual_seed(3)
    data = [(torch.randn(8, 3, 16, 16, generator=g).to("neuron"), torch.randint(0, 4, (8,), generator=g).to("neuron"))
            for _ in range(10)]

    def make():
        return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU(),
                                   torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 8, 3), torch.nn.ReLU(),
                                   torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(8, 4))

    torch.manual_seed(0)
    a, b = make(), make()
    b.load_state_dict(a.state_dict())
    le, pe = _train(a.to("neuron"), 10, data, False)
    lc, pc = _train(b.to("neuron"), 10, data, True)
    assert_compiled(allow_eager={"aten::convolution", "aten::convolution_backward",
                                 "aten::_native_batch_norm_legit_functional", "aten::native_batch_norm_backward",
                                 "aten::max_pool2d_with_indices", "aten::max_pool2d_with_indices_backward",
                                 "aten::_adaptive_avg_pool2d", "aten::_adaptive_avg_pool2d_backward"})
    assert torch.equal(le, lc)
    for x, y in zip(pe, pc):
        assert_bitwise_equal(y, x)
    # BatchNorm running statistics (buffers mutated inside the graph) were written back
    assert_bitwise_equal(b[1].running_mean, a[1].running_mean)
    assert_bitwise_equal(b[1].running_var, a[1].running_var)
    assert int(b[1].num_batches_tracked) == 10
    assert torch_neuronx.get_fallback_ops() == []


@pytest.mark.parametrize("opt_cls,kw", [(torch.optim.AdamW, dict(lr=1e-2, weight_decay=0.1)),
                                        (torch.optim.SGD, dict(lr=1e-2, momentum=0.9))])
@pytest.mark.parametrize("state_from_eager", [False, True])
def test_compiled_optimizer_step(opt_cls, kw, state_from_eager):
    """torch.compile(optimizer.step): the foreach ops fuse into one loop per parameter, which
    writes the new values straight into the parameters and state (input mutations) and stores
    nothing else. PyTorch's optimizers take other code paths when compiled (lerp as addcmul,
    ...), so the comparison with eager allows float32 rounding. Adam's step counts stay on
    the host when the compiled step creates the state (their updates: one host copy for all
    parameters), and Dynamo moves them to the device when an eager step created it
    (``pow(beta, step)`` then runs in the loop)."""
    def make():
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.LayerNorm(32), torch.nn.Linear(32, 4)).to("neuron")
        return m, opt_cls(m.parameters(), **kw)

    (m1, o1), (m2, o2) = make(), make()
    params2 = list(m2.parameters())
    step2 = torch.compile(o2.step, backend="neuron")
    g = torch.Generator().manual_seed(1)
    peaks = {}
    for it in range(5):
        x = torch.randn(8, 16, generator=g).to("neuron")
        for m, o, st in ((m1, o1, o1.step), (m2, o2, o2.step if state_from_eager and it == 0 else step2)):
            m(x).square().sum().backward()
            torch.neuron.synchronize()
            torch.neuron.reset_peak_memory_stats()
            before = torch.neuron.memory_allocated()
            st()
            torch.neuron.synchronize()
            peaks.setdefault(st is step2, []).append(torch.neuron.max_memory_allocated() - before)
            o.zero_grad()
    # no intermediate of the update is stored: the compiled step needs no more memory than eager's
    assert max(peaks[True][-2:]) <= max(peaks[False][-2:]), peaks
    assert all(a is b for a, b in zip(params2, m2.parameters()))  # updated in place
    for a, b in zip(m1.parameters(), m2.parameters()):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    for sa, sb in zip(o1.state.values(), o2.state.values()):
        for k in sa:
            # (moments of tiny magnitude: compared relative to the tensor's scale; Inductor's
            # compiled step differs from eager by as much on CPU)
            a, b = torch.as_tensor(sa[k]).float().cpu(), torch.as_tensor(sb[k]).float().cpu()
            torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-5 * max(a.abs().max().item(), 1e-12))
    recs = assert_compiled()
    assert all(r["segment_count"] == 1 for r in recs)
    # on the host: the step counts' increment and their write-back, one op each (the bias
    # corrections computed from them run in the device's loop)
    for r in recs:
        assert sorted(set(r["host_ops"])) == sorted(r["host_ops"]), r["host_ops"]
        assert set(r["host_ops"]) <= {"aten::_foreach_add.Scalar", "aten::_foreach_copy_"}, r["host_ops"]
    assert torch_neuronx.get_fallback_ops() == []


def _hf_models():
    from transformers import (BertConfig, BertForSequenceClassification, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                              LlamaForCausalLM)

    ids = lambda: torch.randint(0, 100, (2, 16))  # noqa: E731
    return {
        "gpt2": (lambda: GPT2LMHeadModel(GPT2Config(n_layer=2, n_head=2, n_embd=64, vocab_size=100, n_positions=64,
                                                    bos_token_id=0, eos_token_id=0)),
                 lambda: dict(input_ids=ids(), labels=ids())),
        "bert": (lambda: BertForSequenceClassification(BertConfig(num_hidden_layers=2, num_attention_heads=2,
                                                                  hidden_size=64, intermediate_size=128, vocab_size=100,
                                                                  num_labels=3)),
                 lambda: dict(input_ids=ids(), attention_mask=torch.ones(2, 16, dtype=torch.long),
                              labels=torch.randint(0, 3, (2,)))),
        "llama": (lambda: LlamaForCausalLM(LlamaConfig(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                                       hidden_size=64, intermediate_size=128, vocab_size=100)),
                  lambda: dict(input_ids=ids(), labels=ids())),
    }


@pytest.mark.parametrize("name", ["gpt2", "bert", "llama"])
def test_hugging_face_models_train_like_eager(name):
    """Tiny Hugging Face models built from configs (no download): compiled loss and gradients
    equal eager's bit for bit, with no CPU fallback."""
    make, batch = _hf_models()[name]
    torch.manual_seed(0)
    model = make().to("neuron").train()
    for mod in model.modules():
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    inputs = {k: v.to("neuron") for k, v in batch().items()}
    params = [p for p in model.parameters() if p.requires_grad]
    want = model(**inputs).loss
    gw = torch.autograd.grad(want, params, allow_unused=True)
    got = torch.compile(model, backend="neuron")(**inputs).loss
    gg = torch.autograd.grad(got, params, allow_unused=True)
    assert_bitwise_equal(got, want)
    for a, b in zip(gw, gg):
        assert (a is None) == (b is None)
        if a is not None:
            assert_bitwise_equal(b, a)
    assert_compiled(allow_eager={"aten::constant_pad_nd", "aten::_safe_softmax", "aten::tril", "aten::gather",
                                 "aten::index.Tensor", "aten::_scaled_dot_product_fused_attention_overrideable",
                                 "aten::_scaled_dot_product_fused_attention_overrideable_backward"})
    assert torch_neuronx.get_fallback_ops() == []


def test_transformer_encoder_layer(neuron):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True).to(neuron)
    x = torch.randn(4, 10, 32, device=neuron, requires_grad=True)
    cl = torch.compile(layer, backend="neuron")
    want = layer(x)
    got = cl(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    gw = torch.autograd.grad(want.square().sum(), [x] + list(layer.parameters()))
    gc = torch.autograd.grad(got.square().sum(), [x] + list(layer.parameters()))
    for a, b in zip(gw, gc):
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
    assert_compiled()


# ---------------------------------------------------------------- behaviour users rely on


def test_new_shape_recompiles(neuron):
    f = torch.compile(lambda x: (x * 2).softmax(-1), backend="neuron", dynamic=False)
    for n in (8, 16, 8):
        x = torch.randn(4, n, device=neuron)
        assert_bitwise_equal(f(x), (x * 2).softmax(-1))
    assert len(compiled_records()) == 2
    assert_compiled()


def _specialisations(recs):
    return [r for r in recs if re.search(r"_s\d+$", r["graph_name"])]


def test_dynamic_shapes_compile_the_c_once(neuron):
    """Symbolic sizes (dynamic=True from the start; dynamic=None after a shape change): each
    new size is lowered again, but the generated C is shape-generic (sizes, strides and
    scalars such as x.shape[0] read at run time), so every size shares one shared object
    and the C compiler runs at most once per graph."""
    def f(x, w):
        return torch.nn.functional.gelu(x @ w).sum(-1) * x.shape[0] + x.mean()

    w = torch.randn(16, 8, device=neuron)
    for dynamic in (True, None):
        torch._dynamo.reset()
        reset_dynamo_metrics()
        runs0 = torch_neuronx.compiler.jit_stats()["compiles"]
        cf = torch.compile(f, backend="neuron", dynamic=dynamic)
        for n in (4, 6, 9, 6, 13, 100, 7):
            x = torch.randn(n, 16, device=neuron)
            assert_bitwise_equal(cf(x, w), f(x, w))
        recs = get_dynamo_metrics()
        assert any("symbolic" in r["reason"] for r in recs), recs
        spec = _specialisations(recs)
        assert len(spec) == (6 if dynamic else 5), [r["graph_name"] for r in spec]  # one per new size
        assert all(r["fused_kernel_count"] >= 1 and not r["fallback"] and r["specialise_us"] > 0 for r in spec)
        assert len({r["artifact"] for r in spec}) == 1, [r["artifact"] for r in spec]
        assert torch_neuronx.compiler.jit_stats()["compiles"] - runs0 <= 1 + (dynamic is None)
    assert torch_neuronx.get_fallback_ops() == []


@pytest.mark.parametrize("path", ["evaluated", "repropagated"])
def test_new_shape_specialisation_paths(neuron, monkeypatch, path):
    """A new size of a symbolic graph is specialised by evaluating the graph's symbolic sizes
    and strides with the inputs' (PyTorch's FakeTensorProp does not run), or, where the inputs
    leave a symbol unbound, by re-propagating fake tensors: both equal eager, forward and
    backward."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    from torch_neuronx.compiler import backend

    if path == "evaluated":
        def no_propagation(*args, **kwargs):
            raise AssertionError("FakeTensorProp ran for a new shape")
        monkeypatch.setattr(FakeTensorProp, "propagate", no_propagation)
    else:
        monkeypatch.setattr(backend, "_concrete_copy", lambda *args: None)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 12), torch.nn.LayerNorm(12), torch.nn.GELU(), torch.nn.Softmax(-1))
    ref = torch.nn.Sequential(*[m for m in model]).to(neuron)
    ref_state = {k: v.clone() for k, v in ref.state_dict().items()}
    torch._dynamo.reset()
    reset_dynamo_metrics()
    cf = torch.compile(model.to(neuron), backend="neuron", dynamic=True)
    for n in (3, 5, 11, 5, 2):
        x = torch.randn(n, 4, 8).transpose(0, 1).to(neuron)
        out = cf(x)
        out.square().sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        ref.load_state_dict(ref_state)
        want = ref(x)
        want.square().sum().backward()
        torch.testing.assert_close(out, want)
        for g, p in zip(grads, ref.parameters()):
            torch.testing.assert_close(g, p.grad)
        ref.zero_grad()
    spec = _specialisations(get_dynamo_metrics())
    assert len(spec) >= 6 and all(r["specialise_us"] > 0 and not r["fallback"] for r in spec), spec
    assert torch_neuronx.get_fallback_ops() == []


def test_scalar_parameters_are_read_at_run_time(neuron):
    """Op parameters (clamp bounds, add's alpha, leaky_relu's slope) that come from a size or a
    Python number: one shared object serves every value."""
    cases = [(lambda x: x.clamp_min(x.shape[0] / 10), True, [(torch.randn(n),) for n in range(3, 9)]),
             (lambda x, k: x.add(x * 3, alpha=k), None, [(torch.randn(5), k) for k in range(2, 7)]),
             (lambda x, s: torch.nn.functional.leaky_relu(x, s) * 2, None, [(torch.randn(40), s) for s in (0.1, 0.2, 0.3)])]
    for fn, dynamic, calls in cases:
        torch._dynamo.reset()
        runs0 = torch_neuronx.compiler.jit_stats()["compiles"]
        cf = torch.compile(fn, backend="neuron", dynamic=dynamic)
        for args in calls:
            args = tuple(a.to(neuron) if isinstance(a, torch.Tensor) else a for a in args)
            assert_bitwise_equal(cf(*args), fn(*args))
        assert torch_neuronx.compiler.jit_stats()["compiles"] - runs0 <= 2, fn  # static, then symbolic
    assert torch_neuronx.get_fallback_ops() == []


def test_attention_strides_agree_with_eager(neuron):
    """The fused attention's output has the layout the op's meta function gives compiled code
    (the query's dim order), so a view that works eagerly also compiles."""
    f = lambda q: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True)  # noqa: E731
    g = lambda q: f(q).transpose(1, 2).view(2, 5, 16)  # noqa: E731
    for q in (torch.randn(2, 2, 5, 8), torch.randn(2, 5, 2, 8).transpose(1, 2)):
        q = q.to(neuron) if q.is_contiguous() else q.transpose(1, 2).to(neuron).transpose(1, 2)
        torch._dynamo.reset()
        for dynamic in (False, True):
            assert torch.compile(f, backend="neuron", dynamic=dynamic)(q).stride() == f(q).stride()
        try:
            want = g(q)
        except RuntimeError:  # a contiguous query: the view is invalid eagerly and compiled
            with pytest.raises(Exception, match="view"):
                torch.compile(g, backend="neuron")(q)
        else:
            assert_bitwise_equal(torch.compile(g, backend="neuron")(q), want)
    assert torch_neuronx.get_fallback_ops() == []


def test_mark_dynamic_batch(neuron):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32)).to(neuron)
    cm = torch.compile(m, backend="neuron")
    for b in (3, 5, 8, 2):
        x = torch.randn(b, 16, device=neuron)
        torch._dynamo.mark_dynamic(x, 0)
        assert_bitwise_equal(cm(x), m(x))
    spec = _specialisations(get_dynamo_metrics())
    assert len(spec) == 4 and len({r["artifact"] for r in spec}) == 1, [r["artifact"] for r in spec]
    assert torch_neuronx.get_fallback_ops() == []


def test_training_over_varying_sequence_lengths(neuron):
    """The main job's GPT trained with dynamic=True over sequence lengths 16..64: losses and
    parameters bitwise equal to eager; the forward and backward graphs each compile their C
    once for every length."""
    def run(compiled):
        torch.manual_seed(0)
        model = TinyGPT(96, 64, 2, 2, 64).to(neuron)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        fn = torch.compile(model, backend="neuron", dynamic=True) if compiled else model
        g = torch.Generator().manual_seed(1)
        losses = []
        for t in (16, 40, 64, 24, 40):
            idx = torch.randint(0, 96, (4, t + 1), generator=g).to(neuron)
            loss = fn(idx[:, :-1], idx[:, 1:])
            loss.backward()
            opt.step()
            opt.zero_grad()
            losses.append(loss.detach())
        return torch.stack(losses), [p.detach() for p in model.parameters()]

    le, pe = run(False)
    torch._dynamo.utils.counters.clear()
    lc, pc = run(True)
    assert_bitwise_equal(lc, le)
    for a, b in zip(pc, pe):
        assert_bitwise_equal(a, b)
    # one Dynamo graph for every length (attention's backend choice must not specialise the sizes)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == 1
    spec = _specialisations(get_dynamo_metrics())
    for kind in ("forward", "backward"):
        arts = {r["artifact"] for r in spec if r["graph_type"] == kind}
        assert len(arts) == 1, (kind, arts)
    assert torch_neuronx.get_fallback_ops() == []


def test_graph_breaks(neuron):
    def f(x):
        y = torch.relu(x) * 2
        s = y.sum().item()  # graph break
        print("", end="")  # graph break
        return y / (s + 1)

    cf = torch.compile(f, backend="neuron")
    for _ in range(5):
        x = torch.randn(64, device=neuron)
        assert_bitwise_equal(cf(x), f(x))
    assert len(compiled_records()) >= 2
    assert_compiled()

    def g(x):
        y = x * 2
        torch._dynamo.graph_break()
        return y + 1

    with pytest.raises(Exception, match="graph_break|Graph break|graph break"):
        torch.compile(g, backend="neuron", fullgraph=True)(torch.randn(64, device=neuron))


# An op Dynamo can trace (it has a fake kernel) that eager would only run through the CPU
# fallback (it has a CPU kernel alone).
TRACEABLE_CPU_ONLY = torch.library.Library("neuron_ctest", "DEF")
TRACEABLE_CPU_ONLY.define("triple(Tensor x) -> Tensor")
TRACEABLE_CPU_ONLY.impl("triple", lambda x: x * 3, "CPU")
torch.library.register_fake("neuron_ctest::triple")(lambda x: torch.empty_like(x))


def test_unsupported_op_fails_by_default_and_falls_back_on_request(neuron):
    def f(x):
        return torch.ops.neuron_ctest.triple(x + 1) * 3

    x = torch.randn(16, device=neuron)
    with pytest.raises(Exception) as err:
        torch.compile(f, backend="neuron")(x)
    msg = str(err.value)
    assert "neuron_ctest::triple" in msg and "test_compile.py" in msg and "fallback_execution" in msg
    torch._dynamo.reset()
    cf = torch.compile(f, backend="neuron", options={"fallback_execution": True})
    with pytest.warns(UserWarning, match="neuron_ctest::triple"):
        got = cf(x)
    assert_bitwise_equal(got, f(x))
    assert any(r["fallback"] for r in get_dynamo_metrics())


@pytest.mark.parametrize("fn, op", [(lambda a: a.lgamma(), "aten::lgamma"), (lambda a: torch.digamma(a), "aten::digamma"),
                                     (lambda a: torch.special.i1(a), "aten::special_i1")])
def test_structured_op_whose_out_kernel_falls_back_is_not_native(neuron, fn, op):
    """A structured op's functional kernel (CompositeExplicitAutogradNonFunctional) runs its
    out= overload: where that one has no neuron kernel the op is a CPU fallback, refused by
    default as any other, not run as a native eager step."""
    torch._dynamo.reset()
    x = torch.randn(4, 5, device=neuron)
    with pytest.raises(Exception, match=op):
        torch.compile(fn, backend="neuron")(x)
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match=op):
        got = torch.compile(fn, backend="neuron", options={"fallback_execution": True})(x)
    torch.testing.assert_close(got.cpu(), fn(x.cpu()))
    assert any(r["fallback"] for r in get_dynamo_metrics())


def test_fallback_env_variable():
    proc = run_py("""
        import os, torch, torch_neuronx
        from torch_neuronx.compiler import get_dynamo_metrics
        _lib = torch.library.Library("neuron_test2", "DEF")
        _lib.define("scale(Tensor x, float s) -> Tensor")
        _lib.impl("scale", lambda x, s: x * s, "CPU")
        torch.library.register_fake("neuron_test2::scale")(lambda x, s: torch.empty_like(x))
        f = torch.compile(lambda x: torch.ops.neuron_test2.scale(x, 2.0) + 1, backend="neuron")
        x = torch.randn(8, device="neuron")
        assert torch.equal(f(x).cpu(), x.cpu() * 2 + 1)
        assert get_dynamo_metrics()[0]["fallback"]
        print("OK")
    """, env={"TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION": "0"})
    assert "OK" in proc.stdout


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.bool])
def test_python_int_arguments_are_read_at_run_time(native, dtype):
    """A symbolic Python int that only scales or shifts tensor values (through integer arithmetic)
    becomes a 0-dim int64 input read at run time: one lowering for every value, CPU's values and
    dtypes (a 0-dim int64 or int32 tensor beside it included), gradients too."""
    fns = [(lambda x, n: (x * 2 + n).sum() + (x.shape[0] * n), True),
           (lambda x, n: x.add(n) + torch.mul(x, n // 2) - (-n % 3) * x, True),
           (lambda x, n: x / n + x // (n + 1) + x[0, 0].long() * n, True),
           # beside a 0-dim int32 tensor an int64 one would promote: n stays a Python int
           (lambda x, n: x[0, 0].int() * n + x, False)]
    x = (torch.arange(12) - 4).reshape(3, 4).to(dtype)
    for fn, at_run_time in fns:
        f = torch.compile(fn, backend="neuron")
        torch_neuronx.reset_dynamo_metrics()
        for n in [1, 2, 3, -4, 7, 2**40]:
            got = f(x.to(native), n)
            want = fn(x, n)
            assert got.dtype == want.dtype
            torch.testing.assert_close(got.cpu(), want)
        # the first value is a constant (Dynamo specialises it), the second makes it symbolic
        assert (len(torch_neuronx.get_dynamo_metrics()) == 2) == at_run_time
    if dtype is torch.float32:
        w = torch.randn(5, requires_grad=True)
        wn = w.detach().to(native).requires_grad_()
        f = torch.compile(lambda w, n: (w * n - n // 3).pow(2).sum(), backend="neuron")
        for n in range(1, 6):
            wn.grad = w.grad = None
            f(wn, n).backward()
            (w * n - n // 3).pow(2).sum().backward()
            torch.testing.assert_close(wn.grad.cpu(), w.grad)


def test_python_int_arithmetic_keeps_python_semantics(neuron):
    """Python ints are unbounded where int64 tensors wrap: a value (or a product of values) past
    int64 runs the captured code op by op with the ints as they are (eager's values and errors);
    `n // t` (a tensor divisor) and `2 ** n` past int64 compile and give eager's values."""
    x = torch.tensor([1.0, -2.0, 3.5])
    cases = [(lambda x, n: x * (n * n), [3, 5, 3_500_000_000, 7]),
             (lambda x, n: x + n * 1000000007 % 998244353, [3, 5, 2**40, 2**62 + 5]),
             (lambda x, n: n // (x.abs() + 1), [7, 9, -11]),
             (lambda x, n: x * (2 ** n), [3, 5, 62, 63])]
    for fn, values in cases:
        f = torch.compile(fn, backend="neuron", dynamic=True)
        for n in values:
            torch.testing.assert_close(f(x.to(neuron), n).cpu(), fn(x, n))
    f = torch.compile(lambda x, n: x * (2 ** n), backend="neuron", dynamic=True)
    f(x.to(neuron), 3)
    with pytest.raises(OverflowError):  # eager's error
        f(x.to(neuron), 64)
    assert torch.equal((torch.ones(2, device=neuron) * 3).cpu(), torch.full((2,), 3.0))


@pytest.mark.parametrize("fmt", ["channels_last", "channels_last_3d"])
def test_convolution_layout_as_eager(native, fmt):
    """A traced convolution of a channels_last input has eager's (CPU's) layout, so later views
    trace as in eager; values, gradients and their strides equal CPU's."""
    torch.manual_seed(0)
    three = fmt == "channels_last_3d"
    conv = F.conv3d if three else F.conv2d
    x = torch.randn((2, 3, 5, 6, 6) if three else (2, 3, 8, 8)).contiguous(memory_format=getattr(torch, fmt))
    w, b = torch.randn((4, 3, 3, 3, 3) if three else (4, 3, 3, 3)), torch.randn(4)
    fn = lambda x, w, b: torch.relu(conv(x, w, b, padding=1)).movedim(1, -1).reshape(-1, 4) * 2  # noqa: E731
    xs = [t.to(native).requires_grad_() for t in (x, w, b)]
    cs = [t.clone().requires_grad_() for t in (x, w, b)]
    out, want = torch.compile(fn, backend="neuron")(*xs), fn(*cs)
    torch.testing.assert_close(out.cpu(), want.detach(), rtol=1e-4, atol=1e-5)
    g = torch.randn_like(want)
    out.backward(g.to(native))
    want.backward(g)
    for a, c in zip(xs, cs):
        assert a.grad.stride() == c.grad.stride()
        torch.testing.assert_close(a.grad.cpu(), c.grad, rtol=1e-4, atol=1e-4)


def test_python_int_parameters_are_lowered_again_with_a_warning(neuron):
    """A symbolic Python int that is an op's int parameter (a shift, a dim, a size) is a constant
    of each lowering: each new value is lowered again (equal to eager) and a warning names the
    remedy; as a 0-dim tensor operand a value is read at run time."""
    import warnings
    f = torch.compile(lambda x, n: (x.roll(n) * torch.arange(10, device=x.device)).sum(), backend="neuron")
    x = torch.arange(10., device=neuron)
    torch_neuronx.reset_dynamo_metrics()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for n in range(8):
            assert f(x, n).item() == (torch.arange(10.).roll(n) * torch.arange(10)).sum().item()
    assert sum("for each new value of a Python int argument" in str(m.message) for m in w) == 1
    # the static first graph, the symbolic second one, and a lowering per later value
    assert len(torch_neuronx.get_dynamo_metrics()) == 2 + 7


def test_float64_graph_warns_as_eager():
    """A compiled graph computing float64 in C (no eager kernel in it) gives the device rule's
    warning once, and computes through float32 as eager does."""
    proc = run_py("""
        import warnings, torch, torch_neuronx
        warnings.simplefilter("always")
        # a Python float argument reaches the graph as a 0-dim float64 host tensor: no warning
        # (eager saw a Python number), the values of eager
        g = torch.compile(lambda x, temp: (x / temp).softmax(-1), backend="neuron")
        xs = torch.randn(4, 8)
        with warnings.catch_warnings(record=True) as w:
            for temp in (0.7, 0.8, 0.9):
                torch.testing.assert_close(g(xs.to("neuron"), temp).cpu(), (xs / temp).softmax(-1))
        assert not [m for m in w if "float64" in str(m.message)], [str(m.message) for m in w]
        x = torch.linspace(0, 1, 5, dtype=torch.float64)
        f = torch.compile(lambda t: (t * 3).exp().sum(), backend="neuron")
        with warnings.catch_warnings(record=True) as w:
            y = f(x.to("neuron"))
        msgs = [str(m.message) for m in w if "float64 is not natively supported" in str(m.message)]
        assert len(msgs) == 1 and "compiled graph" in msgs[0] and "executed as float32" in msgs[0], msgs
        assert y.dtype == torch.float64 and y.item() == (x.float() * 3).exp().sum().double().item()
        m = torch_neuronx.get_dynamo_metrics()[0]
        assert not m["fallback"] and m["c_step_count"] >= 1 and m["eager_op_count"] == 0, m
        print("OK")
    """)
    assert "OK" in proc.stdout


def test_mode_and_options(neuron):
    with pytest.warns(UserWarning, match="Neuron backend does not support mode='max-autotune'"):
        f = torch.compile(lambda x: x + 1, backend="neuron", mode="max-autotune")
        f(torch.ones(4, device=neuron))
    torch._dynamo.reset()
    g = torch.compile(lambda x: x * 5, backend="neuron", options={"model_name": "tiny"})
    g(torch.ones(4, device=neuron))
    assert get_dynamo_metrics()[-1]["graph_name"].startswith("tiny_")
    with pytest.raises(Exception, match="unknown option"):
        torch._dynamo.reset()
        torch.compile(lambda x: x - 1, backend="neuron", options={"no_such_option": 1})(torch.ones(4, device=neuron))
    with pytest.raises(Exception, match="fallback_execution must be True or False, got 'no'"):
        torch._dynamo.reset()
        torch.compile(lambda x: x - 2, backend="neuron", options={"fallback_execution": "no"})(torch.ones(4, device=neuron))


def test_dropout_reproducible_and_equal_to_eager(neuron):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Dropout(0.3),
                                torch.nn.Linear(32, 4)).to(neuron)
    x = torch.randn(8, 16, device=neuron)
    cm = torch.compile(model, backend="neuron")
    outs = []
    for fn in (model, cm, cm):
        torch.manual_seed(123)
        outs.append(fn(x).detach())
    assert_bitwise_equal(outs[1], outs[0])
    assert_bitwise_equal(outs[2], outs[0])
    torch.manual_seed(124)
    assert not torch.equal(cm(x).detach().cpu(), outs[0].cpu())
    assert_compiled(allow_eager={"aten::native_dropout"})


def test_autocast_region_compiles(neuron):
    lin = torch.nn.Linear(16, 16).to(neuron)

    def f(x):
        with torch.autocast("neuron", dtype=torch.bfloat16):
            return torch.relu(lin(x)) + 1

    x = torch.randn(8, 16, device=neuron)
    got = torch.compile(f, backend="neuron")(x)
    want = f(x)
    assert got.dtype == want.dtype == torch.bfloat16
    assert_bitwise_equal(got, want)
    assert_compiled()


def test_cpu_inputs(neuron):
    def f(x, s):
        return x * s

    x = torch.randn(8, device=neuron)
    s = torch.tensor(3.0)
    got = torch.compile(f, backend="neuron")(x, s)
    assert_bitwise_equal(got, f(x, s))
    proc = run_py("""
        import torch, torch_neuronx
        f = torch.compile(lambda x, s: x * s, backend="neuron")
        try:
            f(torch.randn(8, device="neuron"), torch.tensor(3.0))
        except Exception as e:
            print("ERR", e)
    """, env={"TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY": "1"})
    assert "Input tensor at index 1 is on cpu device" in proc.stdout


def test_cpu_model_runs_as_pytorch_would(neuron):
    """A CPU model compiled with backend="neuron" (forward and backward, with CPU-only ops such
    as SDPA's CPU flash-attention backward) runs on the CPU like eager, and says why."""
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True)
    x = torch.randn(2, 8, 32, requires_grad=True)
    mask = torch.nn.Transformer.generate_square_subsequent_mask(8)

    def f(x):
        q = k = v = x.view(2, 8, 4, 8).transpose(1, 2)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return layer(x + a.transpose(1, 2).reshape(2, 8, 32), src_mask=mask, is_causal=True).square().mean()

    want = f(x)
    (gx_want,) = torch.autograd.grad(want, x)
    got = torch.compile(f, backend="neuron")(x)
    (gx,) = torch.autograd.grad(got, x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(gx, gx_want)
    recs = compiled_records()
    assert [r["graph_type"] for r in recs] == ["dynamo"], recs
    assert all(r["fallback"] and r["reason"] == "no neuron tensors" for r in recs), recs


def test_cpu_attention_in_a_neuron_graph_keeps_its_gradient(neuron):
    """CPU SDPA inside a graph that also has neuron tensors: PyTorch's decomposition of the CPU
    flash-attention op (meant for export) feeds its backward the wrong tensor; not used."""
    torch.manual_seed(0)
    q = torch.randn(2, 4, 8, 8, requires_grad=True)
    w = torch.randn(2, 4, 8, 8)
    x = torch.randn(8, device=neuron, requires_grad=True)

    def f(x, q):
        a = F.scaled_dot_product_attention(q, q.flip(-1), q * 2, is_causal=True)
        return (a * w).sum() + (x * x).sum().cpu()

    want = f(x, q)
    gw = torch.autograd.grad(want, (x, q))
    got = torch.compile(f, backend="neuron", options={"fallback_execution": True})(x, q)
    g = torch.autograd.grad(got, (x, q))
    assert got.device == want.device  # a CPU result stays on the CPU
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(g[0], gw[0])
    torch.testing.assert_close(g[1], gw[1])


def test_cpu_constants_created_in_the_graph(neuron):
    """A CPU float constant made inside the compiled code (the scaled-attention idiom
    ``/ torch.sqrt(torch.tensor(d))``) is read by the generated code: forward and backward."""
    def f(q, k):
        s = q @ k.transpose(-1, -2) / torch.sqrt(torch.tensor(q.shape[-1], dtype=torch.float32))
        return (s.softmax(-1) * torch.tensor(3.0)).sum(-1)

    q = torch.randn(2, 5, 8, device=neuron, requires_grad=True)
    k = torch.randn(2, 5, 8, device=neuron, requires_grad=True)
    want = f(q, k)
    gw = torch.autograd.grad(want.sum(), (q, k))
    got = torch.compile(f, backend="neuron")(q, k)
    g = torch.autograd.grad(got.sum(), (q, k))
    assert_bitwise_equal(got, want)
    for a, b in zip(g, gw):
        torch.testing.assert_close(a, b)
    assert_compiled()


@pytest.mark.parametrize("case", ["nonzero", "masked_select", "bool_index_backward", "item_slice"])
def test_data_dependent_sizes_run_eagerly(neuron, case):
    """Sizes known only at run time (unbacked symbols, under Dynamo's opt-in capture flags):
    the graph runs eagerly on neuron, with one warning and a metrics record, never a crash."""
    fns = {
        "nonzero": lambda a: torch.nonzero(a > 0),
        "masked_select": lambda a: a.masked_select(a > 0) * 2,
        "bool_index_backward": lambda a: (a[a > 0] ** 2).sum(),
        "item_slice": lambda a: a[: (a > 0).sum().item()] + 1,
    }
    f = fns[case]
    x = torch.randn(6, 4, device=neuron, requires_grad=case == "bool_index_backward")
    want = f(x)
    with pytest.warns(UserWarning, match="unbacked symbols"), \
            torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True, capture_scalar_outputs=True):
        got = torch.compile(f, backend="neuron")(x)
    assert_bitwise_equal(got, want)
    if case == "bool_index_backward":
        (g,) = torch.autograd.grad(got, x)
        (gw,) = torch.autograd.grad(want, x)
        assert_bitwise_equal(g, gw)
    assert any(r["reason"].startswith("data-dependent sizes") for r in compiled_records())
    assert not torch_neuronx.get_fallback_ops()  # eager on neuron, not through the CPU fallback


def test_exit_after_compiled_training_is_quiet(neuron):
    """Generated code still loaded at interpreter exit unloads without an ignored exception."""
    proc = run_py("""
        import torch, torch.nn as nn, torch_neuronx
        m = nn.Sequential(nn.Linear(4, 8), nn.GELU(), nn.Linear(8, 3)).to("neuron")
        opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
        def step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = nn.functional.cross_entropy(m(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 0.5)
            opt.step()
            return loss.detach()
        cstep = torch.compile(step, backend="neuron")
        for i in range(3):
            cstep(torch.randn(6, 4, device="neuron"), torch.randint(0, 3, (6,), device="neuron"))
        print("done")
    """)
    assert "done" in proc.stdout
    assert "Exception ignored" not in proc.stderr, proc.stderr


def test_one_hot_and_assert_async(neuron):
    """F.one_hot traces a range check (aten::_assert_async.msg): checked on the host when the graph
    runs, with CPU PyTorch's error for an out-of-range class (eager neuron reports its scatter's
    IndexError asynchronously instead); the process stays usable."""
    def f(y, z):
        return -(F.one_hot(y, 5).float() * z.log_softmax(-1)).sum(-1).mean()

    z = torch.randn(4, 5, device=neuron)
    y = torch.tensor([0, 3, 4, 1], device=neuron)
    cf = torch.compile(f, backend="neuron")
    assert_bitwise_equal(cf(y, z), f(y, z))
    bad = torch.tensor([0, 3, 5, 1], device=neuron)
    with pytest.raises(RuntimeError) as cpu_error:
        f(bad.cpu(), z.cpu())
    with pytest.raises(RuntimeError) as compiled_error:
        cf(bad, z)
    assert str(cpu_error.value) in str(compiled_error.value), (compiled_error.value, cpu_error.value)
    assert_bitwise_equal(cf(y, z), f(y, z))
    assert torch_neuronx.get_fallback_ops() == []


def test_checkpoint_with_dropout(neuron):
    """torch.utils.checkpoint around random ops (dropout): the masks are saved rather than
    recomputed (PyTorch recomputes them only on cuda/cpu/hpu/xpu), so the backward uses the
    forward's masks; with one seed, output and gradients equal eager's bit for bit."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    lin = torch.nn.Linear(16, 16).to(neuron)

    def block(x):
        return F.dropout(F.gelu(lin(F.dropout(x, p=0.3, training=True))), p=0.2, training=True)

    def f(x):
        return checkpoint(block, x, use_reentrant=False).square().sum()

    x = torch.randn(8, 16, device=neuron, requires_grad=True)
    results = []
    for fn in (f, torch.compile(f, backend="neuron")):
        torch.neuron.manual_seed(123)
        out = fn(x)
        grads = torch.autograd.grad(out, (x, lin.weight))
        results.append((out, *grads))
    for got, want in zip(results[1], results[0]):
        assert_bitwise_equal(got, want)
    assert torch_neuronx.get_fallback_ops() == []


def test_graph_constants_and_rng_state_calls(neuron):
    def f(x):
        torch.neuron.manual_seed(7)  # host state: a graph break, run eagerly
        return x * torch.tensor([1.0, 2.0, 3.0], device="neuron") + torch.tensor([5, 6, 7]).to("neuron")

    x = torch.randn(3, device=neuron)
    assert_bitwise_equal(torch.compile(f, backend="neuron")(x), f(x))
    assert_compiled()


def test_stream_calls_inside_compiled_region(neuron):
    def f(x):
        y = x * 2
        torch.neuron.synchronize()
        return y + 1

    x = torch.randn(16, device=neuron)
    assert_bitwise_equal(torch.compile(f, backend="neuron")(x), f(x))


def test_event_and_stream_calls_in_the_graph(neuron):
    """Event.record / Event.synchronize / Stream.synchronize inside a compiled function: Dynamo
    puts them in the graph (control_deps around the streams ops); they run in order between the
    compiled steps, on the stream."""
    done = torch.neuron.Event(enable_timing=True)

    def f(x):
        y = torch.exp(x) * 2
        done.record()
        torch.accelerator.current_stream().synchronize()
        ev = torch.neuron.Event()
        ev.record()
        ev.synchronize()
        return y + 1

    x = torch.randn(1 << 16, device=neuron)
    start = torch.neuron.Event(enable_timing=True)
    start.record()
    got = torch.compile(f, backend="neuron")(x)
    torch.neuron.synchronize()
    assert done.query() and start.elapsed_time(done) >= 0
    assert_bitwise_equal(got, f(x))


def test_kernel_error_surfaces_at_sync_naming_the_graph(neuron):
    emb = torch.nn.Embedding(10, 4).to(neuron)
    f = torch.compile(lambda i: emb(i) * 2, backend="neuron")
    f(torch.tensor([1, 2], device=neuron))
    out = f(torch.tensor([1, 12], device=neuron))  # out of range: fails in the task
    with pytest.raises((IndexError, RuntimeError), match="index"):
        out.cpu()
    assert f(torch.tensor([3, 4], device=neuron)).shape == (2, 4)  # the process stays usable


def test_failed_c_compilation_reports_compiler_errors(neuron, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_CFLAGS", "--no-such-compiler-flag")
    with pytest.raises(Exception) as err:
        torch.compile(lambda x: x * 7 + 1, backend="neuron")(torch.randn(4, device=neuron))
    msg = str(err.value)
    assert "no-such-compiler-flag" in msg and "generated source kept at" in msg


def test_preserved_artifacts(neuron, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCH_NEURONX_DEBUG_DIR", str(tmp_path))
    monkeypatch.setenv("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "1")
    torch.compile(lambda x: x.exp() - 1, backend="neuron", options={"model_name": "keep"})(torch.randn(4, device=neuron))
    names = sorted(p.name for p in tmp_path.iterdir())
    assert any(n.endswith(".c") and n.startswith("keep_") for n in names), names
    assert any(n.endswith(".fx.txt") for n in names), names
    src = next(p for p in tmp_path.iterdir() if p.suffix == ".c").read_text()
    assert "vnc_ew_exp_F32" in src and "seg_0" in src


# ---------------------------------------------------------------- the on-disk cache

CACHE_SCRIPT = """
import json, torch, torch_neuronx
from torch_neuronx.compiler import jit_stats, get_dynamo_metrics
from torch_neuronx.examples.gpt import TinyGPT
torch.manual_seed(0)
m = TinyGPT(96, 32, 1, 2, 16).to("neuron")
f = torch.compile(m, backend="neuron")
idx = torch.randint(0, 96, (2, 17)).to("neuron")
loss = f(idx[:, :-1], idx[:, 1:])
loss.backward()
print(json.dumps({"loss": loss.item(), "compiles": jit_stats()["compiles"],
                  "hits": [r["cache_hit"] for r in get_dynamo_metrics()]}))
"""


def _run_cache_script(cache, n=1):
    env = dict(os.environ, TORCH_NEURONX_CACHE_DIR=str(cache))
    procs = [subprocess.Popen([sys.executable, "-c", CACHE_SCRIPT], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(n)]
    outs = []
    import json

    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(json.loads(out.strip().splitlines()[-1]))
    return outs


def test_two_processes_compile_at_once_then_a_third_hits_the_cache(tmp_path):
    first = _run_cache_script(tmp_path, n=2)  # concurrent cold compiles of the same graphs
    assert first[0]["loss"] == first[1]["loss"]
    # at least one compiled; the other compiled too, or found what the first had stored
    assert sum(r["compiles"] for r in first) >= 1
    again = _run_cache_script(tmp_path)[0]
    assert again["compiles"] == 0 and all(again["hits"]), again
    assert again["loss"] == first[0]["loss"]
    leftovers = [p.name for p in tmp_path.rglob("*") if ".tmp-" in p.name]
    assert leftovers == []


def test_damaged_cache_entries_are_rebuilt(tmp_path):
    """A cached object cut short (a full disk, a killed copy) or overwritten is compiled again,
    not a failure on every later run."""
    first = _run_cache_script(tmp_path)[0]
    objects = list(tmp_path.rglob("*.so"))
    assert objects and first["compiles"] == len(objects)
    objects[0].write_bytes(objects[0].read_bytes()[:100])  # truncated
    for o in objects[1:]:
        o.write_bytes(b"\0" * o.stat().st_size)  # garbage of the right size
    again = _run_cache_script(tmp_path)[0]
    assert again["loss"] == first["loss"] and again["compiles"] == len(objects), again
    third = _run_cache_script(tmp_path)[0]
    assert third["compiles"] == 0 and all(third["hits"]), third


# ---------------------------------------------------------------- random graphs

UNARY = [torch.exp, torch.tanh, torch.sigmoid, torch.abs, torch.neg, F.relu, F.silu, torch.sqrt, torch.floor]
BINARY = [torch.add, torch.sub, torch.mul, torch.maximum, torch.minimum, lambda a, b: a * 0.5 + b]
REDUCE = [lambda t: t.sum(dim=-1), lambda t: t.mean(dim=0), lambda t: t.amax(dim=-1, keepdim=True), lambda t: t.sum()]


@settings(max_examples=20, deadline=None, derandomize=True)
@given(ops=st.lists(st.tuples(st.integers(0, len(UNARY) - 1), st.integers(0, len(BINARY) - 1)), min_size=1, max_size=4),
       red=st.integers(0, len(REDUCE) - 1), rows=st.integers(1, 9), cols=st.integers(1, 70),
       transpose=st.booleans(), dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_random_pointwise_reduction_graphs(ops, red, rows, cols, transpose, dtype):
    torch._dynamo.reset()
    reset_dynamo_metrics()

    def f(x, y):
        t = x
        for u, b in ops:
            t = BINARY[b](UNARY[u](t), y)
        return t, REDUCE[red](t)

    g = torch.Generator().manual_seed(rows * 100 + cols)
    x = torch.randn(rows, cols, generator=g).to(dtype).to("neuron")
    y = torch.randn(cols, rows, generator=g).to(dtype).to("neuron").t() if transpose else \
        torch.randn(rows, cols, generator=g).to(dtype).to("neuron")
    got = torch.compile(f, backend="neuron", dynamic=False)(x, y)
    for a, b in zip(got, f(x, y)):
        assert_bitwise_equal(a, b)
    assert_compiled()


def test_reduction_of_values_reading_no_tensor(neuron):
    """sum/mean/amax of values that read no tensor (ones_like(x).sum(); the backward of floor of
    a broadcast input sums a zeros_like) runs as a plain reduction (the fused one has no
    producer inputs: it failed at run time)."""
    x = torch.randn(4, 3)
    for fn in (lambda x: torch.ones_like(x).sum(), lambda x: torch.full_like(x, 2.5).sum(1),
               lambda x: torch.zeros_like(x).mean(0) + x, lambda x: torch.ones_like(x).amax(0)):
        torch._dynamo.reset()
        torch.testing.assert_close(torch.compile(fn, backend="neuron")(x.to(neuron)).cpu(), fn(x))
    a, b = torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True)
    ad, bd = (t.detach().to(neuron).requires_grad_() for t in (a, b))
    (a + b).floor().sum().backward()
    torch._dynamo.reset()
    torch.compile(lambda a, b: (a + b).floor(), backend="neuron")(ad, bd).sum().backward()
    assert torch.equal(bd.grad.cpu(), b.grad) and torch.equal(ad.grad.cpu(), a.grad)


@pytest.mark.parametrize("case", ["int - bool", "float - bool", "int ** -2", "relu(bool)", "abs(bool)"])
def test_arguments_eager_refuses_raise_when_compiled(neuron, case):
    """Arguments CPU's kernels refuse at run time, which tracing with fake tensors does not
    check (a bool tensor subtracted, relu/abs of bool, integers to a negative power), are not
    lowered: the op runs eagerly and raises eager's exception."""
    b, i = torch.tensor([True, False]), torch.tensor([2, -3, 0])
    fn, x = {"int - bool": (lambda b: 3 - b, b), "float - bool": (lambda b: 1.5 - b, b),
             "int ** -2": (lambda i: torch.pow(i, -2), i), "relu(bool)": (torch.relu, b),
             "abs(bool)": (torch.abs, b)}[case]
    with pytest.raises(Exception) as cpu_error:
        fn(x)
    torch._dynamo.reset()
    with pytest.raises(type(cpu_error.value)) as error:
        torch.compile(fn, backend="neuron")(x.to(neuron)).cpu()
    assert str(cpu_error.value).splitlines()[0] in str(error.value)
    assert torch.compile(lambda t: t * 2, backend="neuron")(torch.ones(2, device=neuron)).cpu().tolist() == [2, 2]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_runtime_scalars_and_lerp_weights_of_16bit_ops_as_eager(neuron, dtype):
    """A scalar that changes between calls (a run-time value after the first) is cast to the
    16-bit dtype before adding, as eager casts it (2049 is 2048 in float16); lerp's scalar weight
    stays in float32 (eager's opmath): bit-exact against eager. (A compiled optimizer's
    _foreach_lerp_ reaches the backend as Dynamo's polyfill, sub then addcmul, for every
    backend: 16-bit moments then differ from eager's in the last bit.)"""
    x = torch.tensor([0.6, 1.0, -float("inf"), 3.3], dtype=dtype, device=neuron)
    torch._dynamo.reset()
    add = torch.compile(lambda x, s: x + s, backend="neuron")
    for s in (3.0, 2049.0, 70000.0, 0.1, 257, 1025):
        torch.testing.assert_close(add(x, s).cpu(), (x + s).cpu(), rtol=0, atol=0, equal_nan=True, msg=str(s))
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(4096, generator=g).to(dtype).to(neuron) for _ in range(2))
    lerp = torch.compile(lambda a, b: torch.lerp(a, b, 0.3), backend="neuron")
    assert torch.equal(lerp(a, b).cpu(), torch.lerp(a, b, 0.3).cpu())

