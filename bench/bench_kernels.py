"""Kernel benchmarks (issue: native C kernels), each against CPU PyTorch in the same run with
the same thread count: sgemm 1024^3, add and GELU on 16M float32, softmax and layer_norm on
(4096, 1024), sum over a dim of (4096, 4096), one training step of a small GPT, and the
per-op overhead of `add` on 1-element tensors.

Run: `make bench` (or `python bench/bench_kernels.py [--json]`)."""
import argparse
import os
import sys

import torch

import torch_neuronx  # noqa: F401
from harness import Result, cpu_sync, median_seconds, neuron_sync, print_results

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "examples"))


def throughput(name, make, fn, work, unit, target="", repeat=5):
    """work: units of `unit` per call (e.g. GFLOP, GB). Ratio = neuron throughput / CPU."""
    args_cpu = make("cpu")
    args_dev = make("neuron")
    t_cpu = median_seconds(lambda: fn(*args_cpu), cpu_sync, repeat=repeat)
    t_dev = median_seconds(lambda: fn(*args_dev), neuron_sync, repeat=repeat)
    return Result(name, unit, work / t_dev, work / t_cpu, t_cpu / t_dev, target)


def gpt_step() -> Result:
    from tiny_gpt import TinyGPT  # noqa: E402

    def make(device):
        torch.manual_seed(0)
        model = TinyGPT(vocab=96, d=128, layers=2, heads=4, block=64).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        idx = torch.randint(0, 96, (8, 64)).to(device)
        return model, opt, idx

    def step(model, opt, idx):
        loss = model(idx[:, :-1], idx[:, 1:])
        opt.zero_grad()
        loss.backward()
        opt.step()

    cpu, dev = make("cpu"), make("neuron")
    t_cpu = median_seconds(lambda: step(*cpu), cpu_sync, repeat=5)
    t_dev = median_seconds(lambda: step(*dev), neuron_sync, repeat=5)
    return Result("GPT training step (2 layers, d=128, 8x63 tokens)", "ms", t_dev * 1e3, t_cpu * 1e3, t_cpu / t_dev,
                  "neuron time <= 1.2x CPU (ratio >= 0.83)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    n16 = 16 << 20
    results = [
        throughput("sgemm 1024x1024x1024", lambda d: (torch.randn(1024, 1024, device=d), torch.randn(1024, 1024, device=d)),
                   torch.mm, 2 * 1024 ** 3 / 1e9, "GFLOP/s", ">= 0.9"),
        throughput("add, 16M float32", lambda d: (torch.randn(n16, device=d), torch.randn(n16, device=d)),
                   torch.add, 3 * 4 * n16 / 1e9, "GB/s", ">= 0.9"),
        throughput("GELU, 16M float32", lambda d: (torch.randn(n16, device=d),), torch.nn.functional.gelu,
                   2 * 4 * n16 / 1e9, "GB/s", ">= 0.9"),
        throughput("softmax (4096, 1024)", lambda d: (torch.randn(4096, 1024, device=d),), lambda x: torch.softmax(x, -1),
                   2 * 4 * 4096 * 1024 / 1e9, "GB/s", ">= 0.8"),
        throughput("layer_norm (4096, 1024)",
                   lambda d: (torch.randn(4096, 1024, device=d), torch.ones(1024, device=d), torch.zeros(1024, device=d)),
                   lambda x, w, b: torch.nn.functional.layer_norm(x, (1024,), w, b), 2 * 4 * 4096 * 1024 / 1e9, "GB/s", ">= 0.8"),
        throughput("sum over dim 1 of (4096, 4096)", lambda d: (torch.randn(4096, 4096, device=d),), lambda x: x.sum(1),
                   4 * 4096 * 4096 / 1e9, "GB/s"),
        gpt_step(),
    ]
    import bench_device  # per-op overhead, shared with the device benchmarks

    results.append(bench_device.add_overhead())
    print_results("neuron kernel benchmarks", results, args.json)


if __name__ == "__main__":
    main()
