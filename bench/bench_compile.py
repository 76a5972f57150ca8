"""torch.compile(backend="neuron") on the main job's GPT training step (TinyGPT: 4 layers,
d_model 128, 4 heads, batch 16 x 64, AdamW), in one run:

- steady-state step time: compiled neuron vs eager neuron, and vs eager CPU PyTorch; with the
  model compiled, and with ``optimizer.step`` compiled too (its foreach ops fused into one pass);
- cold start: a fresh process with an empty compile cache, first step (Dynamo, AOTAutograd,
  lowering, C compilation, the step itself) and the C compiler's share;
- warm start: a second process on the same cache (the C compiler must run zero times);
- torch.compile's default backend (Inductor) on CPU tensors: steady step and cold first step;
- warm start against the first step of ``backend="aot_eager"`` (the same graphs run eagerly);
- peak device memory of a compiled training step against eager's (``max_memory_allocated``);
- AdamW's step alone: ``torch.compile(opt.step)`` against eager, step counts on host and device;
- MiniLM inference (all-MiniLM-L6-v2, the model of ``examples/embed.py``): compiled vs eager
  ``neuron`` and vs Inductor on CPU.

Every timed step reads its result (the loss is accumulated and read after the timing), so
nothing a benchmark measures can be optimised away.

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
from harness import Result, best_round_robin, cpu_sync, neuron_sync, print_results

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

    def make(device, backend=None, compile_opt=False):
        """(model or its compiled form, the optimizer, its step or compiled step, batch)."""
        torch.manual_seed(0)
        model = TinyGPT(96, 128, 4, 4, 64).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        fn = torch.compile(model, backend=backend) if backend else model
        opt_step = torch.compile(opt.step, backend=backend) if compile_opt else opt.step
        idx = torch.randint(0, 96, (16, 65)).to(device)
        return fn, opt, opt_step, idx

    total = {}

    def step(fn, opt, opt_step, idx):
        loss = fn(idx[:, :-1], idx[:, 1:])
        loss.backward()
        opt_step()
        opt.zero_grad()
        total[idx.device.type] = total.get(idx.device.type, 0) + loss.detach()  # read below

    def peak(*run):
        """Peak bytes allocated on the device during one step, above what was held before."""
        step(*run)
        neuron_sync()
        torch.neuron.reset_peak_memory_stats()
        before = torch.neuron.memory_allocated()
        step(*run)
        neuron_sync()
        return torch.neuron.max_memory_allocated() - before

    eager, comp = make("neuron"), make("neuron", "neuron")
    full = make("neuron", "neuron", compile_opt=True)  # the optimizer's step compiled too
    p_eager, p_comp, p_full = peak(*eager), peak(*comp), peak(*full)
    runs = [eager, comp, full, make("cpu"), make("cpu", "inductor"), make("cpu", "inductor", compile_opt=True)]
    # timed in turn: the machine's drift in speed during the benchmark is shared by all
    t_eager, t_comp, t_full, t_cpu, t_ind, t_ind_full = best_round_robin(
        [((lambda r=r: step(*r)), neuron_sync if r[3].device.type == "neuron" else cpu_sync) for r in runs],
        repeat=15, warmup=3)
    assert all(torch.isfinite(v).item() for v in total.values()), total  # every timed loss is read
    return [
        Result("GPT step: compiled vs eager neuron", "ms", t_comp * 1e3, t_eager * 1e3, t_eager / t_comp,
               "compiled <= 0.7x eager (issue 12)"),
        Result("GPT step, optimizer.step compiled too: vs eager neuron", "ms", t_full * 1e3, t_eager * 1e3,
               t_eager / t_full, "compiled <= 0.7x eager (issue 12)"),
        Result("GPT step: compiled neuron vs eager CPU", "ms", t_comp * 1e3, t_cpu * 1e3, t_cpu / t_comp),
        Result("GPT step: compiled neuron vs inductor on CPU", "ms", t_comp * 1e3, t_ind * 1e3, t_ind / t_comp,
               "<= 1.0x inductor (issue 12)"),
        Result("GPT step, optimizer.step compiled too: neuron vs inductor", "ms", t_full * 1e3, t_ind_full * 1e3,
               t_ind_full / t_full, "<= 1.0x inductor (issue 12)"),
        Result("GPT step peak memory: compiled vs eager ('cpu' column = eager)", "MiB", p_comp / 2**20,
               p_eager / 2**20, p_eager / p_comp, "<= eager's (issue 12)"),
        Result("GPT step peak memory, optimizer.step compiled too ('cpu' column = eager)", "MiB", p_full / 2**20,
               p_eager / 2**20, p_eager / p_full, "<= eager's (issue 12)"),
    ]


def optimizer_steps() -> list[Result]:
    """AdamW's step alone over the GPT's 54 parameters (gradients from one backward): eager vs
    ``torch.compile(opt.step)``, with the step counts on the host (the compiled step created
    the state) and on the device (an eager step created it; Dynamo then moves them)."""
    from torch_neuronx.examples.gpt import TinyGPT

    def make(eager_first):
        torch.manual_seed(0)
        model = TinyGPT(96, 128, 4, 4, 64).to("neuron")
        idx = torch.randint(0, 96, (16, 65)).to("neuron")
        model(idx[:, :-1], idx[:, 1:]).backward()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        if eager_first:
            opt.step()
        return opt

    eager, host, device = make(False), make(False), make(True)
    t_eager, t_host, t_dev = best_round_robin([(eager.step, neuron_sync),
                                               (torch.compile(host.step, backend="neuron"), neuron_sync),
                                               (torch.compile(device.step, backend="neuron"), neuron_sync)],
                                              repeat=15, warmup=3)
    for opt in (eager, host, device):  # every timed update is read
        assert all(torch.isfinite(p).all().item() for g in opt.param_groups for p in g["params"])
    return [
        Result("AdamW step: compiled (step counts on host) vs eager", "ms", t_host * 1e3, t_eager * 1e3,
               t_eager / t_host),
        Result("AdamW step: compiled (step counts on device) vs eager", "ms", t_dev * 1e3, t_eager * 1e3,
               t_eager / t_dev),
    ]


def minilm() -> list[Result]:
    """all-MiniLM-L6-v2 forward passes over the sentences of examples/embed.py (batch 25,
    padded): compiled neuron vs eager neuron and vs Inductor on CPU."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from transformers import AutoModel, AutoTokenizer

    from torch_neuronx.examples.embed import QUERIES, SENTENCES, model_path

    path = model_path()
    tok = AutoTokenizer.from_pretrained(path)
    batch = dict(tok(SENTENCES + QUERIES, padding=True, return_tensors="pt"))
    read = []

    def runner(device, backend):
        model = AutoModel.from_pretrained(path).eval().to(device)
        fn = torch.compile(model, backend=backend) if backend else model
        inputs = {k: v.to(device) for k, v in batch.items()}

        def run():
            with torch.no_grad():
                read.append(fn(**inputs).last_hidden_state.sum())
        return run

    t_eager, t_comp, t_ind = best_round_robin([(runner("neuron", None), neuron_sync),
                                               (runner("neuron", "neuron"), neuron_sync),
                                               (runner("cpu", "inductor"), cpu_sync)], repeat=9, warmup=3)
    assert all(torch.isfinite(v).item() for v in read)
    return [
        Result("MiniLM inference: compiled vs eager neuron", "ms", t_comp * 1e3, t_eager * 1e3, t_eager / t_comp),
        Result("MiniLM inference: compiled neuron vs inductor on CPU", "ms", t_comp * 1e3, t_ind * 1e3, t_ind / t_comp),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = gpt_steps() + optimizer_steps() + minilm()
    with tempfile.TemporaryDirectory(prefix="neuron_bench_cache_") as cache:
        cold = first_step(cache)
        warm = first_step(cache)
        ind_cold = first_step(cache, "cpu", "inductor")
        aot = first_step(cache, "neuron", "aot_eager")
    results.append(Result("GPT first step: warm start vs cold (s; 'cpu' column = cold)", "s",
                          warm["first_step_s"], cold["first_step_s"], cold["first_step_s"] / warm["first_step_s"]))
    results.append(Result("GPT first step: cold neuron vs cold inductor (s)", "s", cold["first_step_s"],
                          ind_cold["first_step_s"], ind_cold["first_step_s"] / cold["first_step_s"],
                          "<= 0.5x inductor's (issue 12)"))
    results.append(Result("GPT first step: warm start vs aot_eager's first step (s)", "s", warm["first_step_s"],
                          aot["first_step_s"], aot["first_step_s"] / warm["first_step_s"],
                          "<= 1.2x aot_eager's (issue 12)"))
    print_results("torch.compile(backend='neuron') benchmarks (the 'cpu' column is the baseline of each row)",
                  results, args.json)
    if not args.json:
        print(f"cold start: {cold['first_step_s']:.2f} s for the first step, of which the C compiler "
              f"{cold['compiler_s']:.2f} s ({cold['compiler_runs']} runs, {cold['graphs']} graphs); "
              f"warm start: {warm['first_step_s']:.2f} s, C compiler runs: {warm['compiler_runs']}")


if __name__ == "__main__":
    main()
