"""Row hooks of compiled softmax / layer-norm graphs (docs/compile.md, "Row epilogues" and
"Row prologues"): each graph compiled twice in one process, with its pointwise neighbours fused
into the row kernel (the default) and with them left as loops of their own, timed alternately
(one run each in turn, so both see the same load; the best of 15 each). Graphs of 4096 rows of 1024 float32:

- softmax of a scaled input plus an additive mask, times 2 (a prologue and an epilogue);
- layer norm of a residual add, then ReLU (a prologue and an epilogue);
- layer norm backward of a scaled gradient, dx plus a residual gradient (both).

Run: ``python bench/bench_row_hooks.py [--json]``. The 'cpu' column is the unfused graph.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(__file__))
import torch_neuronx  # noqa: E402,F401
from harness import Result, best_seconds, neuron_sync, print_results  # noqa: E402
from torch_neuronx.compiler import externs, lowering  # noqa: E402
from torch_neuronx.compiler.backend import neuron_backend  # noqa: E402


@contextlib.contextmanager
def hooks_off():
    """Lowering without row prologues, and with epilogues for GEMMs only (as before row hooks)."""
    prologues, fits = lowering.fuse_row_prologues, lowering._epilogue_fits
    lowering.fuse_row_prologues = lambda prog: []
    lowering._epilogue_fits = lambda lp, g, *a: g.name in externs.GEMMS and fits(lp, g, *a)
    try:
        yield
    finally:
        lowering.fuse_row_prologues, lowering._epilogue_fits = prologues, fits


def unfused_backend(gm, example_inputs):
    with hooks_off():
        return neuron_backend(gm, example_inputs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    M, N = 4096, 1024
    x, r = (torch.randn(M, N, generator=g).to("neuron") for _ in range(2))
    mask = torch.where(torch.rand(M, N, generator=g) > 0.1, 0.0, -1e4).to("neuron")  # additive
    w = torch.randn(N, generator=g).to("neuron")
    mean, rstd = torch.zeros(M, 1, device="neuron"), torch.ones(M, 1, device="neuron")
    graphs = [
        ("softmax(x * s + mask) * 2", lambda x, m: torch.softmax(x * 0.125 + m, -1) * 2, (x, mask)),
        ("layer_norm(x + r).relu()", lambda x, r: F.layer_norm(x + r, (N,), w).relu(), (x, r)),
        ("layer_norm_backward(dy * 2).dx + r",
         lambda dy, x, r: torch.ops.aten.native_layer_norm_backward(dy * 2, x, [N], mean, rstd, w, None,
                                                                    [True, False, False])[0] + r, (r, x, r)),
    ]
    results, read = [], []
    with torch.no_grad():
        for name, fn, inputs in graphs:
            fused = torch.compile(fn, backend="neuron")
            unfused = torch.compile(fn, backend=unfused_backend)
            runs = [lambda: read.append(unfused(*inputs).sum()), lambda: read.append(fused(*inputs).sum())]
            times = [[best_seconds(run, neuron_sync, repeat=1, warmup=1) for run in runs] for _ in range(15)]
            t_unfused, t_fused = (min(t[k] for t in times) for k in (0, 1))
            results.append(Result(f"{name}: fused vs unfused", "ms", t_fused * 1e3, t_unfused * 1e3, t_unfused / t_fused))
    assert all(torch.isfinite(v).item() for v in read)  # every timed output is read
    hooks = [(m["row_prologue_count"], m["row_epilogue_count"]) for m in torch_neuronx.get_dynamo_metrics()]
    assert sorted(hooks) == [(0, 0)] * len(graphs) + [(1, 1)] * len(graphs), hooks  # (prologues, epilogues)
    print_results("row hooks of compiled softmax / layer norm ('cpu' column = unfused)", results, args.json)


if __name__ == "__main__":
    main()
