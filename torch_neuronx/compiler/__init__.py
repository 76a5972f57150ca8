"""The ``torch.compile`` backend ``neuron``: FX graphs lowered to C, compiled by the system C
compiler, cached on disk and run on the virtual NeuronCore's streams (docs/compile.md).

``torch.compile(model, backend="neuron")`` finds :func:`neuron_backend` through the
``torch_dynamo_backends`` entry point; importing this package also registers Dynamo's
DeviceInterface for ``neuron``.
"""
from __future__ import annotations

from . import device_interface as _device_interface
from .backend import neuron_backend
from .metrics import get_dynamo_metrics, reset_dynamo_metrics
from .jit import cache_dir, stats as jit_stats

_device_interface.register()


def _graph_break_on_host_state_calls() -> None:
    """``torch.neuron`` functions that read or write host-side state (RNG seeds and states,
    device selection, synchronisation) run eagerly where Dynamo meets them (a clean graph
    break), as Dynamo treats ``torch.cuda``'s."""
    import sys

    import torch

    device = sys.modules["torch_neuronx.device"]  # the module (the package's `device` is the class)

    names = ("manual_seed", "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state",
             "set_rng_state", "get_rng_state_all", "set_rng_state_all", "set_device", "synchronize",
             "empty_cache", "reset_peak_memory_stats", "reset_accumulated_memory_stats")
    for name in names:
        fn = getattr(device, name)
        if not getattr(fn, "_neuron_graph_break", False):
            wrapped = torch._dynamo.disable(fn, reason=f"torch.neuron.{name} runs on the host")
            wrapped._neuron_graph_break = True
            setattr(device, name, wrapped)


_graph_break_on_host_state_calls()

__all__ = ["neuron_backend", "get_dynamo_metrics", "reset_dynamo_metrics", "cache_dir", "jit_stats"]
