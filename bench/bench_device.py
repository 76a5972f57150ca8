"""Device-level benchmarks (issue: the `neuron` device): host<->device copy bandwidth of
256 MiB, allocation+free latency of 4 KiB tensors, per-op overhead of `add` on 1-element
tensors; each against CPU PyTorch on the same machine, in one run.

Run: `make bench` (or `python bench/bench_device.py [--json]`)."""
import argparse

import torch

import torch_neuronx  # noqa: F401
from harness import Result, best_pair, cpu_sync, median_seconds, neuron_sync, print_results

MiB = 1 << 20


def copy_bandwidth() -> list[Result]:
    n = 256 * MiB // 4
    host = torch.rand(n)
    host_dst = torch.empty(n)
    dev = torch.empty(n, device="neuron")
    dev.copy_(host)  # touch device pages once
    gib = 256 / 1024
    cpu_t = median_seconds(lambda: host_dst.copy_(host), cpu_sync, repeat=5)
    h2d_t = median_seconds(lambda: dev.copy_(host), neuron_sync, repeat=5)
    d2h_t = median_seconds(lambda: host_dst.copy_(dev), neuron_sync, repeat=5)
    cpu_bw = gib / cpu_t
    return [
        Result("copy CPU->neuron 256 MiB", "GiB/s", gib / h2d_t, cpu_bw, (gib / h2d_t) / cpu_bw),
        Result("copy neuron->CPU 256 MiB", "GiB/s", gib / d2h_t, cpu_bw, (gib / d2h_t) / cpu_bw),
    ]


def alloc_latency(iters: int = 20000) -> Result:
    def run(device):
        def body():
            for _ in range(iters):
                t = torch.empty(1024, device=device)  # 4 KiB
                del t
        return body
    dev_t = median_seconds(run("neuron"), neuron_sync) / iters
    cpu_t = median_seconds(run("cpu"), cpu_sync) / iters
    return Result("alloc+free 4 KiB tensor", "us", dev_t * 1e6, cpu_t * 1e6, cpu_t / dev_t)


def add_overhead(iters: int = 5000) -> Result:
    def run(device):
        a = torch.ones(1, device=device)
        b = torch.ones(1, device=device)

        def body():
            for _ in range(iters):
                a + b
        return body
    cpu_t, dev_t = best_pair(run("cpu"), run("neuron"), repeat=7)
    cpu_t, dev_t = cpu_t / iters, dev_t / iters
    return Result("add, 1-element tensors (per op)", "us", dev_t * 1e6, cpu_t * 1e6, cpu_t / dev_t,
                  "<= 2x CPU time (ratio >= 0.5)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true", help="print results as JSON")
    args = parser.parse_args()
    results = copy_bandwidth() + [alloc_latency(), add_overhead()]
    print_results("neuron device benchmarks", results, args.json)


if __name__ == "__main__":
    main()
