"""Benchmark harness: times a workload on `neuron` and on CPU PyTorch in the same process and
reports the ratio. Each measurement is the best (shortest) of `repeat` runs after `warmup`
runs: on a shared machine the best run is the one least disturbed by other processes. Device
runs end with a synchronize, so queued work is counted."""
from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from torch_neuronx.verify import cpu_model  # one place for the host CPU model


@dataclass
class Result:
    name: str
    unit: str            # unit of `neuron` and `cpu`
    neuron: float
    cpu: float
    ratio: float         # neuron relative to CPU, oriented so that > 1 means neuron is better
    target: str = ""     # the target, if any, e.g. ">= 0.9"


def best_seconds(fn: Callable[[], None], sync: Callable[[], None], repeat: int = 7, warmup: int = 2) -> float:
    """Shortest wall time of fn() followed by sync(), in seconds."""
    for _ in range(warmup):
        fn()
        sync()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return min(times)


median_seconds = best_seconds  # the name earlier benchmarks used


# Pause before each side of a pair. After a parallel region OpenMP's workers (CPU PyTorch's
# intra-op threads) spin before they sleep (libgomp: GOMP_SPINCOUNT, 300,000 polls when
# OMP_WAIT_POLICY is unset; ~10 ms measured here), holding the cores the next run needs; the
# runtime's pool polls 30 us.
SETTLE_S = 0.02


def best_round_robin(runs: list[tuple[Callable[[], None], Callable[[], None]]], repeat: int = 7,
                     warmup: int = 2) -> list[float]:
    """Shortest wall time in seconds of each (fn, sync) of `runs`, the runs timed in turn so that
    all see the same load and the same drift in speed of a shared machine. Each waits SETTLE_S
    (the others' threads are asleep), runs once untimed (its own threads are awake, as in a
    loop) and then once timed, followed by its sync."""
    for _ in range(warmup):
        for fn, sync in runs:
            fn()
            sync()
    times = [[] for _ in runs]
    for _ in range(repeat):
        for k, (fn, sync) in enumerate(runs):
            time.sleep(SETTLE_S)
            fn()
            sync()
            t0 = time.perf_counter()
            fn()
            sync()
            times[k].append(time.perf_counter() - t0)
    return [min(t) for t in times]


def best_pair(fn_cpu: Callable[[], None], fn_dev: Callable[[], None], repeat: int = 7,
              warmup: int = 2) -> tuple[float, float]:
    """Shortest wall times (CPU, neuron) in seconds, timed alternately (best_round_robin)."""
    t_cpu, t_dev = best_round_robin([(fn_cpu, cpu_sync), (fn_dev, neuron_sync)], repeat, warmup)
    return t_cpu, t_dev


def neuron_sync() -> None:
    torch.neuron.synchronize()


def cpu_sync() -> None:
    pass


def header() -> str:
    """One line per fact a figure depends on: CPU, the tiers in use on both sides, threads."""
    import torch_neuronx

    aten = torch.backends.cpu.get_cpu_capability()
    return (f"host: {cpu_model()}, {os.cpu_count()} CPUs; torch {torch.__version__}\n"
            f"CPU tier: neuron {torch_neuronx.get_cpu_isa()} (TORCH_NEURONX_ISA={os.environ.get('TORCH_NEURONX_ISA', '')!r}), "
            f"PyTorch CPU {aten} (ATEN_CPU_CAPABILITY={os.environ.get('ATEN_CPU_CAPABILITY', '')!r})\n"
            f"threads: PyTorch CPU {torch.get_num_threads()}, neuron runtime {torch_neuronx.get_num_threads()}; "
            f"neuron GEMM: {torch_neuronx.get_gemm_provider()} (MKL_ENABLE_INSTRUCTIONS="
            f"{os.environ.get('MKL_ENABLE_INSTRUCTIONS', '')!r}, OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '')!r}, "
            f"ONEDNN_MAX_CPU_ISA={os.environ.get('ONEDNN_MAX_CPU_ISA', '')!r})")


def print_results(title: str, results: list[Result], as_json: bool = False) -> None:
    if as_json:
        json.dump([asdict(r) for r in results], sys.stdout, indent=2)
        print()
        return
    print(f"\n{title}\n{header()}")
    print(f"{'benchmark':<50} {'neuron':>10} {'cpu':>10} {'unit':<8} {'ratio':>7}  target")
    for r in results:
        print(f"{r.name:<50} {r.neuron:>10.4g} {r.cpu:>10.4g} {r.unit:<8} {r.ratio:>7.3f}  {r.target}")
    print("ratio > 1: neuron better than CPU PyTorch (throughput ratio, or CPU time / neuron time); "
          "times are the best of several runs")
