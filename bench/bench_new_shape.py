"""What a new input shape costs a symbolic graph (``torch.compile(..., dynamic=True)``) on the
main job's GPT training step (TinyGPT: 4 layers, d_model 128, batch 16, lengths 17..56): the
medians, over the new lengths after the first two, of the per-shape metrics records
(``specialise_us``: making the graph concrete; ``lowering_us``; ``codegen_us``; ``compile_us``:
the JIT lookup, the C compiler does not run), in ms, forward and backward; once with the
default path (the graph's symbolic sizes evaluated for the new shape) and once with PyTorch's
FakeTensorProp re-propagation (the fallback, forced here), in the same process.

Run: ``python bench/bench_new_shape.py``."""
import statistics

import torch

import torch_neuronx  # noqa: F401  (registers the device)
import torch_neuronx.compiler.metrics as metrics
from torch_neuronx.compiler import backend
from torch_neuronx.examples.gpt import TinyGPT

FIELDS = ("specialise_us", "lowering_us", "codegen_us", "compile_us")


def measure(repropagate: bool) -> dict:
    concrete = backend._concrete_copy
    if repropagate:
        backend._concrete_copy = lambda *args: None
    try:
        torch._dynamo.reset()
        metrics.reset_dynamo_metrics()
        torch.manual_seed(0)
        model = TinyGPT(96, 128, 4, 4, 64).to("neuron")
        step = torch.compile(model, backend="neuron", dynamic=True)
        for length in (17, 21, 24, 28, 33, 40, 48, 56):
            idx = torch.randint(0, 96, (16, length + 1)).to("neuron")
            step(idx[:, :-1], idx[:, 1:]).backward()
            torch.neuron.synchronize()
    finally:
        backend._concrete_copy = concrete
    records = [r for r in metrics.get_dynamo_metrics() if r["specialise_us"]][2:]
    return {kind: {f: statistics.median(r[f] for r in records if r["graph_type"] == kind) / 1e3 for f in FIELDS}
            for kind in ("forward", "backward")}


def main():
    for name, repropagate in (("evaluated sizes", False), ("FakeTensorProp", True)):
        for kind, ms in measure(repropagate).items():
            parts = ", ".join(f"{f[:-3]} {v:.1f}" for f, v in ms.items())
            print(f"{name:16s} {kind:8s} {sum(ms.values()):6.1f} ms per new shape ({parts})")


if __name__ == "__main__":
    main()
