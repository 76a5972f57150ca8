"""Quickstart: a plain PyTorch script on the `neuron` device (no torch_neuronx import needed).

Trains a small MLP classifier on a fixed two-moons-style problem built from torch ops, checks
that the loss falls, compares a matmul with CPU, and prints what ran natively and what went
through the visible CPU fallback. (`make demo` trains a GPT instead: examples/train_gpt.py.)
"""
import math
import time

import torch


def make_data(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Two interleaved half circles with noise (float32 features (n, 2), int64 labels (n,))."""
    t = torch.rand(n, generator=generator) * math.pi
    label = torch.randint(0, 2, (n,), generator=generator)
    x = torch.stack([torch.cos(t) + label * 1.0, torch.sin(t) * (1 - 2 * label) + label * 0.5], 1)
    return x + 0.1 * torch.randn(n, 2, generator=generator), label


def main() -> None:
    device = torch.device("neuron")
    print(f"torch {torch.__version__}; accelerator: {torch.accelerator.current_accelerator()}; "
          f"{torch.neuron.device_count()} virtual NeuronCores; "
          f"capacity {torch.neuron.get_device_properties(0).total_memory / 2**30:.1f} GiB each")

    a, b = torch.randn(64, 32), torch.randn(32, 16)
    err = (a.to(device) @ b.to(device)).cpu().sub(a @ b).abs().max().item()
    print(f"matmul on neuron vs CPU: max abs difference {err:.2e}")

    g = torch.Generator().manual_seed(0)
    x, y = make_data(2048, g)
    x, y = x.to(device), y.to(device)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 64), torch.nn.ReLU(), torch.nn.Linear(64, 2)).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    t0 = time.perf_counter()
    for step in range(60):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 20 == 0 or step == 59:
            print(f"step {step:3d}  loss {loss.item():.4f}")
    acc = (model(x).argmax(1) == y).float().mean().item()
    print(f"accuracy {acc:.3f} after 60 steps in {time.perf_counter() - t0:.2f} s")

    import torch_neuronx

    fallback = torch_neuronx.get_fallback_ops()
    counts = torch_neuronx.get_executed_op_counts()
    print(f"native neuron kernels: {sum(counts.values())} launches of {len(counts)} ops "
          f"({', '.join(sorted(counts, key=counts.get, reverse=True)[:6])}, ...)")
    print(f"CPU fallback: {len(fallback)} invocations" + (f" of {sorted(set(fallback))}" if fallback else ""))
    print(f"peak device memory: {torch.neuron.max_memory_allocated() / 2**10:.0f} KiB; "
          f"kernel plan cache: {torch_neuronx.get_plan_cache_stats()}")


if __name__ == "__main__":
    import warnings

    warnings.filterwarnings("ignore", message="Operator .* executed via CPU fallback")
    main()
