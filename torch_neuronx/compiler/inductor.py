"""What Inductor (torch.compile's default backend) gets for the ``neuron`` device: a clear
refusal instead of an internal KeyError.

Inductor asks the PrivateUse1 device module (``torch.neuron``) for ``Scheduling`` and wrapper
code generator classes; ``torch.neuron`` answers with :class:`Refusal`, whose construction
raises. Graphs without neuron tensors never construct them, so CPU models still compile with
Inductor.
"""
from __future__ import annotations

MESSAGE = ('torch.compile\'s default backend (inductor) cannot generate code for the neuron device. '
           'Use torch.compile(model, backend="neuron"), or call torch.compiler.set_default_backend("neuron") '
           'once to make it the default.')


class _Refusing(type):
    def __getattr__(cls, name):  # any class-level query (supports_caching, ...) refuses too
        if name.startswith("__"):
            raise AttributeError(name)
        raise RuntimeError(MESSAGE)


class Refusal(metaclass=_Refusing):
    """Stands in for Inductor's per-device scheduling and wrapper classes; refuses on use."""

    def __init__(self, *args, **kwargs):
        raise RuntimeError(MESSAGE)

    @classmethod
    def create(cls, *args, **kwargs):
        raise RuntimeError(MESSAGE)


def refusal() -> type:
    """The class handed to Inductor; also gives Inductor device op overrides for ``neuron`` so
    that it reaches the refusal instead of failing on a missing table entry."""
    from torch._inductor.codegen import common

    try:
        common.get_device_op_overrides("neuron")
    except KeyError:
        from torch._inductor.codegen.cpu_device_op_overrides import CpuDeviceOpOverrides

        common.register_device_op_overrides("neuron", CpuDeviceOpOverrides())
    return Refusal
