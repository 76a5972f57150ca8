"""torch.compile(backend="neuron") on the main job's GPT training step (TinyGPT: 4 layers,
d_model 128, 4 heads, batch 16 x 64, AdamW), in one run:

- steady-state step time: compiled neuron vs eager neuron, and vs eager CPU PyTorch;
- cold start: a fresh process with an empty compile cache, first step (Dynamo, AOTAutograd,
  lowering, C compilation, the step itself) and the C compiler's share;
- warm start: a second process on the same cache (the C compiler must run zero times);
- torch.compile's default backend (Inductor) on CPU tensors: steady step and cold first step.

Run: `make bench` (or `python bench/bench_compile.py [--json]`)."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch

import torch_neuronx  # noqa: F401
from harness import Result, cpu_sync, median_seconds, neuron_sync, print_results

FIRST_STEP = r"""
import json, sys, time, torch, torch_neuronx
from torch_neuronx.compiler import jit_stats, get_dynamo_metrics
from torch_neuronx.examples.gpt import TinyGPT
device, backend = sys.argv[1], sys.argv[2]
torch.manual_seed(0)
model = TinyGPT(96, 128, 4, 4, 64).to(device)
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
f = torch.compile(model, backend=backend)
idx = torch.randint(0, 96, (16, 65)).to(device)
t0 = time.perf_counter()
loss = f(idx[:, :-1], idx[:, 1:]); loss.backward(); opt.step(); opt.zero_grad(); loss.item()
dt = time.perf_counter() - t0
s = jit_stats()
print(json.dumps({"first_step_s": dt, "compiler_runs": s["compiles"], "compiler_s": s["compile_seconds"],
                  "graphs": len(get_dynamo_metrics())}))
"""


def first_step(cache: str, device: str = "neuron", backend: str = "neuron") -> dict:
    """The first training step of a fresh process (compilation included), with `cache` as
    the neuron compile cache and Inductor's cache."""
    env = dict(os.environ, TORCH_NEURONX_CACHE_DIR=cache, TORCHINDUCTOR_CACHE_DIR=os.path.join(cache, "inductor"))
    out = subprocess.run([sys.executable, "-c", FIRST_STEP, device, backend], env=env, capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def gpt_steps() -> list[Result]:
    from torch_neuronx.examples.gpt import TinyGPT

    def make(device, compiled):
        torch.manual_seed(0)
        model = TinyGPT(96, 128, 4, 4, 64).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        fn = torch.compile(model, backend="neuron") if compiled else model
        idx = torch.randint(0, 96, (16, 65)).to(device)
        return fn, opt, idx

    def step(fn, opt, idx):
        loss = fn(idx[:, :-1], idx[:, 1:])
        loss.backward()
        opt.step()
        opt.zero_grad()

    eager = make("neuron", False)
    t_eager = median_seconds(lambda: step(*eager), neuron_sync, repeat=9, warmup=2)
    comp = make("neuron", True)
    t_comp = median_seconds(lambda: step(*comp), neuron_sync, repeat=9, warmup=3)
    cpu = make("cpu", False)
    t_cpu = median_seconds(lambda: step(*cpu), cpu_sync, repeat=9, warmup=2)
    torch.manual_seed(0)
    model = TinyGPT(96, 128, 4, 4, 64)
    ind = (torch.compile(model), torch.optim.AdamW(model.parameters(), lr=1e-3), torch.randint(0, 96, (16, 65)))
    t_ind = median_seconds(lambda: step(*ind), cpu_sync, repeat=9, warmup=3)
    return [
        Result("GPT step: compiled vs eager neuron", "ms", t_comp * 1e3, t_eager * 1e3, t_eager / t_comp,
               "compiled <= 0.7x eager (issue 12)"),
        Result("GPT step: compiled neuron vs eager CPU", "ms", t_comp * 1e3, t_cpu * 1e3, t_cpu / t_comp),
        Result("GPT step: compiled neuron vs inductor on CPU", "ms", t_comp * 1e3, t_ind * 1e3, t_ind / t_comp,
               "<= 1.0x inductor (issue 12)"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = gpt_steps()
    with tempfile.TemporaryDirectory(prefix="neuron_bench_cache_") as cache:
        cold = first_step(cache)
        warm = first_step(cache)
        ind_cold = first_step(cache, "cpu", "inductor")
    results.append(Result("GPT first step: warm start vs cold (s; 'cpu' column = cold)", "s",
                          warm["first_step_s"], cold["first_step_s"], cold["first_step_s"] / warm["first_step_s"]))
    results.append(Result("GPT first step: cold neuron vs cold inductor (s)", "s", cold["first_step_s"],
                          ind_cold["first_step_s"], ind_cold["first_step_s"] / cold["first_step_s"],
                          "<= 0.5x inductor's (issue 12)"))
    print_results("torch.compile(backend='neuron') benchmarks (the 'cpu' column is the baseline of each row)",
                  results, args.json)
    if not args.json:
        print(f"cold start: {cold['first_step_s']:.2f} s for the first step, of which the C compiler "
              f"{cold['compiler_s']:.2f} s ({cold['compiler_runs']} runs, {cold['graphs']} graphs); "
              f"warm start: {warm['first_step_s']:.2f} s, C compiler runs: {warm['compiler_runs']}")


if __name__ == "__main__":
    main()
