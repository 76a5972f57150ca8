"""Benchmark harness: times a workload on `neuron` and on CPU PyTorch in the same process and
reports the ratio. Each measurement is the median of `repeat` runs after `warmup` runs; device
runs end with a synchronize, so queued work is counted."""
from __future__ import annotations

import json
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch


@dataclass
class Result:
    name: str
    unit: str            # unit of `neuron` and `cpu`
    neuron: float
    cpu: float
    ratio: float         # neuron relative to CPU, oriented so that > 1 means neuron is better
    target: str = ""     # the target, if any, e.g. ">= 0.9"


def median_seconds(fn: Callable[[], None], sync: Callable[[], None], repeat: int = 7, warmup: int = 2) -> float:
    """Median wall time of fn() followed by sync(), in seconds."""
    for _ in range(warmup):
        fn()
        sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def neuron_sync() -> None:
    torch.neuron.synchronize()


def cpu_sync() -> None:
    pass


def print_results(title: str, results: list[Result], as_json: bool = False) -> None:
    if as_json:
        json.dump([asdict(r) for r in results], sys.stdout, indent=2)
        print()
        return
    print(f"\n{title}  (torch {torch.__version__}, {torch.get_num_threads()} CPU threads, "
          f"neuron runtime threads: {torch_neuronx_threads()})")
    print(f"{'benchmark':<44} {'neuron':>12} {'cpu':>12} {'unit':<8} {'ratio':>7}  target")
    for r in results:
        print(f"{r.name:<44} {r.neuron:>12.4g} {r.cpu:>12.4g} {r.unit:<8} {r.ratio:>7.3f}  {r.target}")
    print("ratio > 1: neuron better than CPU PyTorch (throughput ratio, or CPU time / neuron time)")


def torch_neuronx_threads() -> int:
    import torch_neuronx

    return torch_neuronx._C._num_threads()
