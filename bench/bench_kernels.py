"""Kernel benchmarks (issues: native C kernels; kernel speed on every CPU tier), each against
CPU PyTorch in the same run with the same thread count: sgemm 1024^3; the elementwise ops and
activations (and backward ops) on 16M float32; softmax / log_softmax (+ backward) over rows of
4096; layer norm (+ backward); sums; scaled dot-product attention forward + backward at the
main job's shapes; exp, log, sigmoid, tanh, gelu and add also with out= (a preallocated output on both
sides, so the caching allocator's share of the fresh-output figures is reported apart from the
kernel's); the main job's GPT training step, alone and beside a busy-looping process
pinned to one CPU (contention); the per-op overhead of `add` on 1-element tensors.

The CPU tier of both sides is chosen by the environment: TORCH_NEURONX_ISA caps the neuron
runtime's, ATEN_CPU_CAPABILITY PyTorch's (`bench/run_tiers.py` runs this once per tier the
host supports with both set alike). The header names the CPU, both tiers and thread counts.

Run: `make bench` (or `python bench/bench_kernels.py [--json] [--quick]`)."""
import argparse
import contextlib
import functools
import os
import subprocess
import sys

import torch
import torch.nn.functional as F

import torch_neuronx  # noqa: F401
from harness import Result, best_pair, print_results

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))

N16 = 16 << 20
REPEAT = 5


def throughput(name, make, fn, work, unit, target="", repeat=None):
    """work: units of `unit` per call (e.g. GB). Ratio = neuron throughput / CPU's."""
    repeat = repeat or REPEAT
    args_cpu = make("cpu")
    args_dev = make("neuron")
    t_cpu, t_dev = best_pair(lambda: fn(*args_cpu), lambda: fn(*args_dev), repeat=repeat)
    return Result(name, unit, work / t_dev, work / t_cpu, t_cpu / t_dev, target)


def timed(name, make, fn, target="", repeat=None, calls=1):
    """Time per call in ms; ratio = CPU time / neuron time. With `calls`, each timed run makes
    that many calls back to back (as a loop does: one synchronisation, no launch latency per
    call) and the time per call is reported."""
    repeat = repeat or REPEAT
    args_cpu = make("cpu")
    args_dev = make("neuron")

    def run(a):
        for _ in range(calls):
            fn(*a)

    t_cpu, t_dev = best_pair(lambda: run(args_cpu), lambda: run(args_dev), repeat=repeat)
    return Result(name, "ms", t_dev * 1e3 / calls, t_cpu * 1e3 / calls, t_cpu / t_dev, target)


def randn(*shape, seed=0):
    """A maker of one seeded standard-normal tensor on a device."""
    return lambda device: torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(device)


def args(*makers):
    """A maker of the argument tuple (one tensor per maker)."""
    return lambda device: tuple(m(device) for m in makers)


def elementwise() -> list[Result]:
    """Unary ops: read 4 bytes and write 4 per element; binary backward ops read 8."""
    gb1, gb2, gb3 = 2 * 4 * N16 / 1e9, 3 * 4 * N16 / 1e9, 3 * 4 * N16 / 1e9
    one = lambda d: (torch.randn(N16, generator=torch.Generator().manual_seed(0)).to(d),)  # noqa: E731
    pos = lambda d: (torch.rand(N16, generator=torch.Generator().manual_seed(0)).add_(0.01).to(d),)  # noqa: E731
    two = lambda d: (torch.randn(N16, generator=torch.Generator().manual_seed(0)).to(d),  # noqa: E731
                     torch.randn(N16, generator=torch.Generator().manual_seed(1)).to(d))
    t = ">= 0.9"
    unary = [
        ("relu", one, torch.relu), ("exp", one, torch.exp), ("expm1", one, torch.expm1),
        ("log", pos, torch.log), ("log1p", pos, torch.log1p), ("sigmoid", one, torch.sigmoid),
        ("silu", one, F.silu), ("tanh", one, torch.tanh), ("erf", one, torch.erf),
        ("gelu (erf)", one, F.gelu), ("gelu (tanh)", one, lambda x: F.gelu(x, approximate="tanh")),
        ("softplus", one, F.softplus), ("mish", one, F.mish),
        ("pow(x, 2)", one, lambda x: torch.pow(x, 2)), ("pow(x, 0.5)", pos, lambda x: torch.pow(x, 0.5)),
        ("pow(x, -1)", pos, lambda x: torch.pow(x, -1)),
    ]
    binary = [
        ("add", two, torch.add),
        ("gelu_backward (erf)", two, lambda g, x: torch.ops.aten.gelu_backward(g, x)),
        ("gelu_backward (tanh)", two, lambda g, x: torch.ops.aten.gelu_backward(g, x, approximate="tanh")),
        ("silu_backward", two, torch.ops.aten.silu_backward),
        ("tanh_backward", two, torch.ops.aten.tanh_backward),
        ("sigmoid_backward", two, torch.ops.aten.sigmoid_backward),
    ]
    res = [throughput(f"{n}, 16M float32", m, f, gb1, "GB/s", t) for n, m, f in unary]
    res += [throughput(f"{n}, 16M float32", m, f, gb2 if n == "add" else gb3, "GB/s", t) for n, m, f in binary]
    # The same kernels writing into a preallocated output (out=) on both sides: the rows above
    # include allocating a fresh 64 MiB output per call, where neuron's caching allocator reuses
    # memory and CPU's allocator may not; these rows compare the kernels alone.
    def with_out(make):
        return lambda d: (*make(d), torch.empty(N16, device=d))
    out_rows = [("exp", one, lambda x, o: torch.exp(x, out=o)), ("log", pos, lambda x, o: torch.log(x, out=o)),
                ("sigmoid", one, lambda x, o: torch.sigmoid(x, out=o)), ("tanh", one, lambda x, o: torch.tanh(x, out=o)),
                ("gelu (erf)", one, lambda x, o: torch.ops.aten.gelu.out(x, out=o)),
                ("add", two, lambda a, b, o: torch.add(a, b, out=o))]
    res += [throughput(f"{n} out=, 16M float32", with_out(m), f, gb2 if n == "add" else gb1, "GB/s", t)
            for n, m, f in out_rows]
    return res


def rows_and_norms() -> list[Result]:
    gb = 2 * 4 * N16 / 1e9
    t = ">= 0.9"

    def sm_bwd(log):
        def make(d):
            x = randn(4096, 4096)(d)
            y = torch.log_softmax(x, -1) if log else torch.softmax(x, -1)
            return randn(4096, 4096, seed=1)(d), y
        fn = torch.ops.aten._log_softmax_backward_data if log else torch.ops.aten._softmax_backward_data
        return make, lambda g, y: fn(g, y, -1, torch.float32)

    def ln_bwd_make(d):
        x, w, b = randn(4096, 1024)(d), torch.ones(1024, device=d), torch.zeros(1024, device=d)
        _, mean, rstd = torch.ops.aten.native_layer_norm(x, (1024,), w, b, 1e-5)
        return randn(4096, 1024, seed=1)(d), x, mean, rstd, w, b

    def ln_bwd(g, x, mean, rstd, w, b):
        return torch.ops.aten.native_layer_norm_backward(g, x, (1024,), mean, rstd, w, b, [True, True, True])

    smb, smb_fn = sm_bwd(False)
    lsmb, lsmb_fn = sm_bwd(True)
    return [
        throughput("softmax, rows of 4096 (4096 rows)", args(randn(4096, 4096)), lambda x: torch.softmax(x, -1), gb, "GB/s", t),
        throughput("log_softmax, rows of 4096", args(randn(4096, 4096)), lambda x: torch.log_softmax(x, -1), gb, "GB/s", t),
        throughput("softmax backward, rows of 4096", smb, smb_fn, 1.5 * gb, "GB/s", t),
        throughput("log_softmax backward, rows of 4096", lsmb, lsmb_fn, 1.5 * gb, "GB/s", t),
        throughput("softmax (4096, 1024)", args(randn(4096, 1024)), lambda x: torch.softmax(x, -1), gb / 4, "GB/s", t),
        throughput("layer_norm (4096, 1024)",
                   lambda d: (randn(4096, 1024)(d), torch.ones(1024, device=d), torch.zeros(1024, device=d)),
                   lambda x, w, b: F.layer_norm(x, (1024,), w, b), gb / 4, "GB/s", t),
        throughput("layer_norm backward (4096, 1024)", ln_bwd_make, ln_bwd, 1.5 * gb / 4, "GB/s", t),
        throughput("sum of all, 16M float32", args(randn(N16)), torch.sum, gb / 2, "GB/s", t),
        throughput("mean over dim 1 of (4096, 4096)", args(randn(4096, 4096)), lambda x: x.mean(1), gb / 2, "GB/s", t),
        throughput("sum over dim 0 of (4096, 4096)", args(randn(4096, 4096)), lambda x: x.sum(0), gb / 2, "GB/s", t),
    ]


def attention() -> Result:
    """SDPA forward + backward at the main job's shapes: batch 16, 4 heads, 64 x 32, causal."""
    def make(d):
        q, k, v = (randn(16, 4, 64, 32, seed=i)(d).requires_grad_() for i in range(3))
        return q, k, v, randn(16, 4, 64, 32, seed=3)(d)

    def step(q, k, v, g):
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        dq, dk, dv = torch.autograd.grad(y, (q, k, v), g)

    return timed("SDPA fwd+bwd (16, 4, 64, 32), causal", make, step, "neuron time <= 1.0x CPU (ratio >= 1.0)",
                 repeat=20)


def gpt_step_fn():
    from tiny_gpt import TinyGPT  # noqa: E402

    def make(device):
        torch.manual_seed(0)
        model = TinyGPT(vocab=96, d=128, layers=4, heads=4, block=64).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        g = torch.Generator().manual_seed(0)
        idx = torch.randint(0, 96, (16, 65), generator=g).to(device)
        return model, opt, idx

    def step(model, opt, idx):
        loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()

    return make, step


@contextlib.contextmanager
def busy_neighbour():
    """A busy-looping process pinned to the last CPU, for the duration."""
    cpu = (os.cpu_count() or 1) - 1
    p = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                         preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    try:
        yield
    finally:
        p.kill()
        p.wait()


def gpt_step(contention: bool) -> Result:
    make, step = gpt_step_fn()
    name = "GPT step (4 layers, d=128, 16x64)" + (", busy neighbour" if contention else "")
    ctx = busy_neighbour() if contention else contextlib.nullcontext()
    with ctx:
        return timed(name, make, step, "neuron time <= 1.0x CPU (ratio >= 1.0)")


def assorted() -> list[Result]:
    """Ops an op-by-op sweep against CPU found slow (their figures in the closing notes): topk at
    vocabulary sizes, extreme and leading-dim reductions, short-row and multi-dim means and sums,
    transposed copies, float16 conversions, clamp with tensor bounds, arange, depthwise and
    channels_last 1x1 convolution, 3x3 convolution, grouped-query attention, random fills, sin/cos/tan and
    the other transcendentals. Ten
    calls per timed run: sub-millisecond ops are timed as a loop runs them."""
    timed = functools.partial(globals()["timed"], calls=10)
    B = (16, 128, 768)
    half = lambda d: randn(*B)(d).half()  # noqa: E731
    cl = lambda *shape: lambda d: randn(*shape)(d).contiguous(memory_format=torch.channels_last)  # noqa: E731
    gqa = args(randn(4, 8, 512, 64), randn(4, 2, 512, 64, seed=1), randn(4, 2, 512, 64, seed=2))
    return [
        timed("topk k=50 of 8x50257", args(randn(8, 50257)), lambda x: torch.topk(x, 50)),
        timed("amax(-1) of 16x128x768", args(randn(*B)), lambda x: x.amax(-1)),
        timed("amax(0) of 16x128x768", args(randn(*B)), lambda x: x.amax(0)),
        timed("argmax(-1) of 16x128x768", args(randn(*B)), lambda x: x.argmax(-1)),
        timed("sum(0) of 16x128x768", args(randn(*B)), lambda x: x.sum(0)),
        timed("mean(-1) of 16x128x768", args(randn(*B)), lambda x: x.mean(-1)),
        timed("mean((2, 3)) of 32x512x7x7 (global average pool)", args(randn(32, 512, 7, 7)), lambda x: x.mean((2, 3))),
        timed("sum((0, 2, 3)) of 32x64x56x56", args(randn(32, 64, 56, 56)), lambda x: x.sum((0, 2, 3))),
        timed("t().contiguous() 1024x1024", args(randn(1024, 1024)), lambda x: x.t().contiguous()),
        timed("transpose(1, 2).contiguous() 16x128x768", args(randn(*B)), lambda x: x.transpose(1, 2).contiguous()),
        timed("NCHW -> NHWC 32x64x56x56", args(randn(32, 64, 56, 56)), lambda x: x.permute(0, 2, 3, 1).contiguous()),
        timed("bfloat16 t().contiguous() 1024x1024", args(lambda d: randn(1024, 1024)(d).bfloat16()),
              lambda x: x.t().contiguous()),
        timed("float32 -> float16 16x128x768", args(randn(*B)), lambda x: x.half()),
        timed("float16 -> float32 16x128x768", args(half), lambda x: x.float()),
        timed("float16 add 16x128x768", args(half, half), torch.add),
        timed("clamp(x, lo, hi) tensors 16x128x768", args(randn(*B), randn(*B, seed=1), randn(*B, seed=2)),
              lambda x, lo, hi: torch.clamp(x, lo, hi.abs())),
        timed("arange 1M float32", lambda d: (d,), lambda d: torch.arange(1 << 20, dtype=torch.float32, device=d)),
        timed("depthwise conv2d 3x3 8x64x56x56", args(randn(8, 64, 56, 56), randn(64, 1, 3, 3, seed=1)),
              lambda x, w: F.conv2d(x, w, padding=1, groups=64)),
        timed("depthwise conv2d 3x3 channels_last 8x64x56x56", args(cl(8, 64, 56, 56), randn(64, 1, 3, 3, seed=1)),
              lambda x, w: F.conv2d(x, w, padding=1, groups=64)),
        timed("conv2d 1x1 channels_last 8x64x56x56", args(cl(8, 64, 56, 56), randn(64, 64, 1, 1, seed=1)),
              F.conv2d),
        timed("conv2d 3x3 + bias 8x64x56x56", args(randn(8, 64, 56, 56), randn(64, 64, 3, 3, seed=1),
                                                   randn(64, seed=2)),
              lambda x, w, b: F.conv2d(x, w, b, padding=1)),
        timed("conv2d 3x3 stride 2 8x64x56x56 -> 128", args(randn(8, 64, 56, 56), randn(128, 64, 3, 3, seed=1)),
              lambda x, w: F.conv2d(x, w, stride=2, padding=1)),
        timed("SDPA GQA 4x8|2x512x64 causal", gqa,
              lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)),
    ] + random_and_trig()


def random_and_trig() -> list[Result]:
    """Random fills (neuron's Philox blocks vs CPU's mt19937) and sin/cos/tan into out= tensors,
    4M float32 elements (arguments in [-100, 100]), randperm of 1M."""
    timed = functools.partial(globals()["timed"], calls=10)
    n = 4 << 20
    empty = lambda d: torch.empty(n, device=d)  # noqa: E731
    angles = lambda d: (torch.rand(n, generator=torch.Generator().manual_seed(3)) * 200 - 100).to(d)  # noqa: E731
    rows = [
        timed("randn 4M", lambda d: (d,), lambda d: torch.randn(n, device=d)),
        timed("normal_ 4M", args(empty), lambda x: x.normal_()),
        timed("uniform_ 4M", args(empty), lambda x: x.uniform_()),
        timed("bernoulli_(0.3) 4M", args(empty), lambda x: x.bernoulli_(0.3)),
        timed("dropout(0.1) 4M", args(lambda d: torch.ones(n, device=d)), lambda x: F.dropout(x, 0.1)),
        timed("randint(0, 100) 4M", lambda d: (d,), lambda d: torch.randint(0, 100, (n,), device=d)),
        timed("randperm 1M", lambda d: (d,), lambda d: torch.randperm(1 << 20, device=d)),
    ]
    for name in ("sin", "cos", "tan"):
        rows.append(timed(f"{name} 4M, out=", args(angles, empty),
                          lambda x, o, f=getattr(torch, name): f(x, out=o)))
    return rows + transcendentals()


def transcendentals() -> list[Result]:
    """Inverse trigonometric, hyperbolic, base-2/10 and two-operand functions into out= tensors,
    4M float32 elements, arguments spread over each function's usual domain."""
    timed = functools.partial(globals()["timed"], calls=10)
    n = 4 << 20

    def spread(lo, hi, seed=5):
        return lambda d: (torch.rand(n, generator=torch.Generator().manual_seed(seed)) * (hi - lo) + lo).to(d)

    empty = lambda d: torch.empty(n, device=d)  # noqa: E731
    unary = [("atan", -10, 10), ("asin", -1, 1), ("acos", -1, 1), ("sinh", -10, 10), ("cosh", -10, 10),
             ("exp2", -20, 20), ("log2", 0.01, 100), ("log10", 0.01, 100), ("asinh", -100, 100),
             ("acosh", 1, 100), ("atanh", -0.99, 0.99), ("erfinv", -0.99, 0.99), ("erfc", -3, 3)]
    rows = [timed(f"{name} 4M, out=", args(spread(lo, hi), empty), lambda x, o, f=getattr(torch, name): f(x, out=o))
            for name, lo, hi in unary]
    for name, (lo, hi), (lo2, hi2) in (("atan2", (-10, 10), (-10, 10)), ("hypot", (-10, 10), (-10, 10)),
                                       ("pow", (0.1, 10), (-3, 3))):
        rows.append(timed(f"{name} 4M, out=", args(spread(lo, hi), spread(lo2, hi2, 6), empty),
                          lambda x, y, o, f=getattr(torch, name): f(x, y, out=o)))
    return rows



def indexing() -> list[Result]:
    """Indexed copies and nonzero: nonzero and boolean-mask selection of 4M float32 elements
    (30 % true), gather/scatter_add_ of 4M elements at random positions, gather of 16 columns per
    row of a 4096 x 1024 matrix, index_select and index_add_ of 32768 rows of 128 in a 50000-row
    table (an embedding's forward and backward)."""
    timed = functools.partial(globals()["timed"], calls=10)
    n, g = 4 << 20, lambda s: torch.Generator().manual_seed(s)  # noqa: E731
    vec = lambda d: torch.randn(n, generator=g(0)).to(d)  # noqa: E731
    mask = lambda d: (torch.rand(n, generator=g(1)) < 0.3).to(d)  # noqa: E731
    pos = lambda d: torch.randint(0, n, (n,), generator=g(2)).to(d)  # noqa: E731
    rows = lambda d: torch.randint(0, 50000, (32768,), generator=g(3)).to(d)  # noqa: E731
    return [
        timed("nonzero 4M", args(mask), torch.nonzero),
        timed("x[mask] 4M", args(vec, mask), lambda x, m: x[m]),
        timed("gather 4M", args(vec, pos), lambda x, i: torch.gather(x, 0, i)),
        timed("scatter_add_ 4M", args(lambda d: torch.zeros(n, device=d), pos, vec),
              lambda o, i, x: o.scatter_add_(0, i, x)),
        timed("gather 4096x1024 -> 4096x16", args(lambda d: torch.randn(4096, 1024, generator=g(4)).to(d),
                                                  lambda d: torch.randint(0, 1024, (4096, 16), generator=g(5)).to(d)),
              lambda x, i: torch.gather(x, 1, i)),
        timed("index_select 32768 of 50000x128", args(lambda d: torch.randn(50000, 128, generator=g(6)).to(d), rows),
              lambda t, i: t.index_select(0, i)),
        timed("index_add_ 32768 rows into 50000x128", args(lambda d: torch.zeros(50000, 128, device=d), rows,
                                                           lambda d: torch.randn(32768, 128, generator=g(7)).to(d)),
              lambda t, i, s: t.index_add_(0, i, s)),
    ]

def main() -> None:
    global REPEAT
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help="3 runs per figure instead of 5")
    parser.add_argument("--only", default="", help="comma-separated groups: gemm,ew,rows,attn,gpt,overhead,assorted,indexing")
    opts = parser.parse_args()
    if opts.quick:
        REPEAT = 3
    groups = set(opts.only.split(",")) if opts.only else {"gemm", "ew", "rows", "attn", "gpt", "overhead", "assorted", "indexing"}
    results = []
    if "gemm" in groups:
        results.append(throughput("sgemm 1024x1024x1024",
                                  args(randn(1024, 1024), randn(1024, 1024, seed=1)),
                                  torch.mm, 2 * 1024 ** 3 / 1e9, "GFLOP/s", ">= 0.9"))
    if "ew" in groups:
        results += elementwise()
    if "rows" in groups:
        results += rows_and_norms()
    if "attn" in groups:
        results.append(attention())
    if "assorted" in groups:
        results += assorted()
    if "indexing" in groups:
        results += indexing()
    if "gpt" in groups:
        results += [gpt_step(False), gpt_step(True)]
    if "overhead" in groups:
        import bench_device  # per-op overhead, shared with the device benchmarks

        results.append(bench_device.add_overhead())
    print_results("neuron kernel benchmarks", results, opts.json)


if __name__ == "__main__":
    main()
