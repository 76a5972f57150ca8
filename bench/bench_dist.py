"""Collective benchmarks of the `neuron` torch.distributed backend (issue: distributed core):
2 ranks on this host, one process group "cpu:gloo,neuron:neuron", so PyTorch's own Gloo on plain
CPU tensors and the neuron backend on neuron tensors run in the same processes, interleaved.

- all_reduce of 64 MiB float32: bus bandwidth (NCCL's convention: size x 2(W-1)/W / time),
  neuron vs Gloo on CPU tensors (target >= 0.8x);
- all_gather into a 64 MiB float32 output: bus bandwidth (size x (W-1)/W / time), likewise;
- all_reduce of one float32 (4 bytes): latency, the time until the result is usable (Gloo: the
  call returns; neuron: the call plus torch.neuron.synchronize()) (target <= 1.5x Gloo's time).

Each figure is the best of 15 (transfers) or 9 (latency) repeats (other load on the machine only adds time), Gloo and
neuron alternating; rank 0 reports. Each rank gets one thread (OMP_NUM_THREADS=1, as torchrun
sets for several ranks per host). An extra row shows back-to-back 4-byte all-reduces (neuron:
queued on the stream, one synchronize at the end; Gloo: async_op=True, then every wait).

Run: `make bench` (or `python bench/bench_dist.py [--json] [--quick]`)."""
from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import Result, print_results  # noqa: E402

MiB = 1 << 20


def _batch_timed(fn, end, iters: int) -> float:
    """Seconds per call of `iters` calls of fn, then end(), after a barrier."""
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    end()
    return (time.perf_counter() - t0) / iters


def _timed(fn, sync, iters: int) -> float:
    """Seconds per call of fn followed by sync()."""
    return _batch_timed(lambda: (fn(), sync()), lambda: None, iters)


def _pair(name, unit, cpu_fn, neuron_fn, iters, repeat, target, higher_is_better, scale, timer=None):
    """Best per-iteration time of each side over `repeat` alternating runs; a Result in `unit`.
    `timer` (default: each call followed by its side's synchronisation) is (cpu, neuron) timers."""
    cpu_timer, dev_timer = timer or ((lambda n: _timed(cpu_fn, lambda: None, n)),
                                     (lambda n: _timed(neuron_fn, torch.neuron.synchronize, n)))
    cpu_t, dev_t = [], []
    cpu_timer(1)
    dev_timer(1)
    for _ in range(repeat):
        cpu_t.append(cpu_timer(iters))
        dev_t.append(dev_timer(iters))
    c, d = min(cpu_t), min(dev_t)
    if higher_is_better:  # bandwidth: scale / time
        return Result(name, unit, scale / d, scale / c, c / d, target)
    return Result(name, unit, d * scale, c * scale, c / d, target)


def _worker(rank: int, world: int, port: int, quick: bool, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    dist.init_process_group("cpu:gloo,neuron:neuron", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    repeat = 3 if quick else 9
    bw_repeat = 3 if quick else 15  # large transfers: cheap to repeat, and the noisiest
    results = []
    n = 64 * MiB // 4
    gib = 64 / 1024
    a_cpu, a_dev = torch.ones(n), torch.ones(n, device="neuron")
    results.append(_pair("all_reduce 64 MiB float32, bus bandwidth", "GiB/s",
                         lambda: dist.all_reduce(a_cpu), lambda: dist.all_reduce(a_dev),
                         1, bw_repeat, ">= 0.8", True, gib * 2 * (world - 1) / world))
    del a_cpu, a_dev
    out_cpu, out_dev = torch.empty(n), torch.empty(n, device="neuron")
    in_cpu, in_dev = torch.ones(n // world), torch.ones(n // world, device="neuron")
    results.append(_pair("all_gather 64 MiB float32 output, bus bandwidth", "GiB/s",
                         lambda: dist.all_gather_into_tensor(out_cpu, in_cpu),
                         lambda: dist.all_gather_into_tensor(out_dev, in_dev),
                         1, bw_repeat, ">= 0.8", True, gib * (world - 1) / world))
    del out_cpu, out_dev, in_cpu, in_dev
    s_cpu, s_dev = torch.ones(1), torch.ones(1, device="neuron")
    iters = 100 if quick else 300
    r = _pair("all_reduce 4 bytes, latency", "us",
              lambda: dist.all_reduce(s_cpu), lambda: dist.all_reduce(s_dev),
              iters, repeat, "<= 1.5x Gloo's time (ratio >= 0.67)", False, 1e6)
    results.append(r)
    works = []
    results.append(_pair("all_reduce 4 bytes, back to back (per op)", "us", None, None, iters, repeat, "", False, 1e6,
                         timer=(lambda n: _batch_timed(lambda: works.append(dist.all_reduce(s_cpu, async_op=True)),
                                                       lambda: [w.wait() for w in works] and works.clear(), n),
                                lambda n: _batch_timed(lambda: dist.all_reduce(s_dev), torch.neuron.synchronize, n))))
    if rank == 0:
        queue.put([r.__dict__ for r in results])
    dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--quick", action="store_true", help="fewer repeats")
    args = ap.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_worker, args=(2, _free_port(), args.quick, queue), nprocs=2, start_method="spawn")
    results = [Result(**r) for r in queue.get()]
    if args.json:
        json.dump([r.__dict__ for r in results], sys.stdout, indent=2)
        print()
    else:
        print_results("torch.distributed, 2 ranks on this host: neuron backend vs Gloo on CPU tensors", results)
        print(f"(cpu column: Gloo on CPU tensors; ratio: Gloo's time / neuron's time; best of repeats; "
              f"1 thread per rank; host CPU: {_cpu_model()})")


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip() + f", {os.cpu_count()} logical CPUs"
    except OSError:
        pass
    return "unknown"


if __name__ == "__main__":
    main()
