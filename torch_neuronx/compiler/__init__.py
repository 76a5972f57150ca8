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

__all__ = ["neuron_backend", "get_dynamo_metrics", "reset_dynamo_metrics", "cache_dir", "jit_stats"]
