"""Dynamo's view of the neuron device (``torch._dynamo.device_interface``): streams, events,
synchronisation, current device and memory, through ``torch.neuron``."""
from __future__ import annotations

import torch
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device


class NeuronInterface(DeviceInterface):
    """DeviceInterface of ``neuron`` (what Dynamo asks when it traces device and stream calls)."""

    class device:  # noqa: N801 - Dynamo's name
        def __new__(cls, device):
            return torch.neuron.device(device)

    class Event:
        def __new__(cls, *args, **kwargs):
            return torch.neuron.Event(*args, **kwargs)

    class Stream:
        def __new__(cls, *args, **kwargs):
            return torch.neuron.Stream(*args, **kwargs)

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            torch.neuron.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.neuron.current_device()

        @staticmethod
        def get_device_properties(device=None):
            return torch.neuron.get_device_properties(device)

    current_device = staticmethod(lambda: torch.neuron.current_device())
    set_device = staticmethod(lambda device: torch.neuron.set_device(device))
    device_count = staticmethod(lambda: torch.neuron.device_count())
    is_available = staticmethod(lambda: torch.neuron.is_available())
    stream = staticmethod(lambda stream: torch.neuron.stream(stream))
    current_stream = staticmethod(lambda device=None: torch.neuron.current_stream(device))
    set_stream = staticmethod(lambda stream: torch.neuron.set_stream(stream))
    synchronize = staticmethod(lambda device=None: torch.neuron.synchronize(device))
    memory_allocated = staticmethod(lambda device=None: torch.neuron.memory_allocated(device))
    is_bf16_supported = staticmethod(lambda including_emulation=False: True)
    get_compute_capability = staticmethod(lambda device=None: "vnc")
    is_triton_capable = staticmethod(lambda device=None: False)

    @staticmethod
    def maybe_exchange_device(device: int) -> int:
        prev = torch.neuron.current_device()
        if device != prev:
            torch.neuron.set_device(device)
        return prev

    exchange_device = maybe_exchange_device

    @staticmethod
    def get_raw_stream(device_idx: int) -> int:
        return torch.neuron.current_stream(device_idx).stream_id

    @classmethod
    def get_device_properties(cls, device=None):
        return torch.neuron.get_device_properties(device)


def register() -> None:
    register_interface_for_device("neuron", NeuronInterface)
