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


def _conv_layout_as_eager() -> None:
    """Fake tensors (Dynamo's tracing) give a convolution the layout of the backend ATen would
    pick for the device, for PrivateUse1 contiguous; the neuron kernels return CPU's layout
    (channels_last where the input or the weight is). The layout rule fake_impls.conv asks for is
    answered with the kernels' own for neuron tensors, so a traced graph's strides (and a
    `.view` after a channels_last convolution) are eager's."""
    import torch
    from torch._prims_common import suggest_memory_format

    determine = torch._C._conv_determine_backend_memory_format
    if getattr(determine, "_neuron", False):
        return

    def neuron_rule(input, weight, backend):
        if input.device.type != "neuron" or input.dim() not in (4, 5):
            return determine(input, weight, backend)
        cl = torch.channels_last if input.dim() == 4 else torch.channels_last_3d
        return cl if cl in (suggest_memory_format(input), suggest_memory_format(weight)) else torch.contiguous_format

    neuron_rule._neuron = True
    torch._C._conv_determine_backend_memory_format = neuron_rule


_conv_layout_as_eager()

__all__ = ["neuron_backend", "get_dynamo_metrics", "reset_dynamo_metrics", "cache_dir", "jit_stats"]
