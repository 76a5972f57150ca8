"""The ``torch.neuron`` device module: CUDA-style device, stream, RNG and memory functions.

Everything here forwards to the C runtime of the virtual NeuronCore (``torch_neuronx._C``) or to
PyTorch's generic ``torch.Stream`` / ``torch.Event`` / ``torch.accelerator`` machinery, which
reaches the runtime through the registered device guard and allocator. Nothing initialises the
runtime at import or in ``device_count()``; the first allocation, stream or kernel does.

Device indices accept ``int``, ``"neuron:N"``, ``torch.device`` or ``None`` (current device).
"""
from __future__ import annotations

import collections
import contextlib
from dataclasses import dataclass
from typing import Any

import torch

from . import _C

__all__ = [
    "is_available", "is_initialized", "device_count", "current_device", "set_device", "device",
    "synchronize", "get_device_name", "get_device_properties", "Stream", "Event",
    "current_stream", "default_stream", "set_stream", "stream", "manual_seed",
    "manual_seed_all", "seed", "seed_all", "initial_seed", "get_rng_state", "set_rng_state",
    "get_rng_state_all", "set_rng_state_all", "memory_allocated", "max_memory_allocated",
    "memory_reserved", "max_memory_reserved", "memory_stats", "memory_summary",
    "reset_peak_memory_stats", "reset_accumulated_memory_stats", "empty_cache", "mem_get_info",
    "get_amp_supported_dtype", "is_bf16_supported", "init",
]

_FORK_MESSAGE = (
    "Cannot re-initialize neuron in forked subprocess. To use neuron with multiprocessing, "
    "you must use the 'spawn' start method"
)


def _is_in_bad_fork() -> bool:
    """True in a child of ``fork()`` whose parent had initialised the neuron runtime."""
    return _C._in_bad_fork()


def _index(device: Any = None, optional: bool = True) -> int:
    """Device index of ``device`` (``None``/``-1``: the current device).

    Raises ``ValueError`` for a device of another type, ``RuntimeError`` (naming the valid
    range ``0 to N-1``) for an index that does not exist.
    """
    if device is None:
        return _C._get_device()
    if isinstance(device, str):
        device = torch.device(device)
    if isinstance(device, torch.device):
        if device.type != "neuron":
            raise ValueError(f"Expected a neuron device, but got: {device}")
        idx = device.index if device.index is not None else _C._get_device()
    elif isinstance(device, int):
        idx = device if device != -1 or not optional else _C._get_device()  # other negatives: refused below
    else:
        raise TypeError(f"device must be an int, str or torch.device, got {type(device).__name__}")
    _C._check_device(idx)
    return idx


def init() -> None:
    """Initialise the runtime now (worker threads, per-core allocators). Idempotent.

    Raises ``RuntimeError`` in a forked child of an initialised parent (use ``spawn``).
    """
    if _is_in_bad_fork():
        raise RuntimeError(_FORK_MESSAGE)
    _C._init()


def is_available() -> bool:
    """True when at least one virtual NeuronCore is visible (never initialises the runtime)."""
    return _C._device_count() > 0


def is_initialized() -> bool:
    """True once the runtime has started in this process."""
    return _C._is_initialized()


def __getattr__(name: str):
    # torch.utils.checkpoint saves and restores a device's RNG state only when its device
    # module has a true `_initialized` (the flag torch.cuda keeps).
    if name == "_initialized":
        return is_initialized()
    # Inductor asks a PrivateUse1 device module for its code generators: it gets a refusal
    # that tells the user to compile with backend="neuron" (torch_neuronx/compiler/inductor.py).
    if name in ("Scheduling", "PythonWrapperCodegen", "CppWrapperCodegen", "WrapperFxCodegen"):
        from .compiler.inductor import refusal

        return refusal()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def device_count() -> int:
    """Number of visible cores: ``NEURON_RT_VISIBLE_CORES`` ("0-3", "1,3") or
    ``NEURON_RT_NUM_CORES``, default 2. Does not initialise the runtime."""
    return _C._device_count()


def current_device() -> int:
    """Index of the calling thread's current neuron device."""
    return _C._get_device()


def set_device(device: Any) -> None:
    """Set the calling thread's current device. A negative index is a no-op (as in CUDA).

    Raises ``RuntimeError`` "invalid neuron device index N: valid range is 0 to M".
    """
    if isinstance(device, int) and device < 0:
        return
    _C._set_device(_index(device, optional=False))


class device:
    """Context manager that makes ``device`` current and restores the previous one."""

    def __init__(self, device: Any):
        # None or a negative index: a no-op, as torch.cuda.device
        self.idx = -1 if device is None or (isinstance(device, int) and device < 0) else _index(device, optional=False)
        self.prev_idx = -1

    def __enter__(self):
        self.prev_idx = _C._get_device()
        if self.idx >= 0:
            _C._set_device(self.idx)
        return self

    def __exit__(self, *exc):
        _C._set_device(self.prev_idx)
        return False


def synchronize(device: Any = None) -> None:
    """Wait for all work queued on every stream of ``device`` (default: the current device).

    Raises:
        ValueError: ``device`` is not a neuron device.
        RuntimeError: the index does not exist (the message gives the valid range ``0 to N-1``);
            a queued kernel failed (the message names the op; reported once, then cleared); the
            device was initialised before this process was forked.
        IndexError: a queued indexing kernel met an index out of range (the message names the
            op, the index and the size; reported once, then cleared).
    """
    idx = _index(device)
    if _is_in_bad_fork():
        raise RuntimeError(_FORK_MESSAGE)
    _C._synchronize(idx)


def get_device_name(device: Any = None) -> str:
    """``"neuron:N"``, as TorchNeuron names its logical cores."""
    return f"neuron:{_index(device)}"


@dataclass(frozen=True)
class _NeuronDeviceProperties:
    name: str
    total_memory: int  # bytes: the core's memory capacity
    physical_core: int  # core id the device maps to (NEURON_RT_VISIBLE_CORES)

    def __repr__(self) -> str:
        return (f"_NeuronDeviceProperties(name='{self.name}', total_memory={self.total_memory >> 20}MB, "
                f"physical_core={self.physical_core})")


def get_device_properties(device: Any = None) -> _NeuronDeviceProperties:
    """Name, memory capacity in bytes (``total_memory``) and physical core of a device."""
    idx = _index(device)
    return _NeuronDeviceProperties(f"neuron:{idx}", _C._capacity(idx), _C._physical_id(idx))


# ---------------------------------------------------------------- streams and events


class _NeuronKind(type):
    """isinstance(x, torch.neuron.Stream) holds for any neuron ``torch.Stream`` (and likewise
    for events): the factories below return PyTorch's own classes, which its C++ checks need."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, cls._base) and obj.device.type == "neuron"


class Stream(metaclass=_NeuronKind):
    """An in-order queue of a neuron device, run by its own worker thread.

    ``Stream(device=None, priority=0)`` returns a ``torch.Stream`` taken from the device's pool
    of streams (round robin, as CUDA's pool); ``priority`` is accepted and has no effect.
    """

    _base = torch.Stream

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs):
        if kwargs:  # (stream_id, device_index, device_type) form
            return torch.Stream(priority=priority, **kwargs)
        return torch.Stream(device=torch.device("neuron", _index(device)), priority=priority)


class Event(metaclass=_NeuronKind):
    """A marker in a stream (a ``torch.Event``): ``record``, ``wait``, ``query``,
    ``synchronize``, ``elapsed_time`` (milliseconds; needs ``enable_timing=True`` on both)."""

    _base = torch.Event

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        if interprocess:
            raise ValueError("neuron events do not support interprocess=True")
        return torch.Event(device="neuron", enable_timing=enable_timing, blocking=blocking)


def current_stream(device: Any = None) -> torch.Stream:
    """The calling thread's current stream of ``device`` (default stream unless set)."""
    init()
    return torch.accelerator.current_stream(_index(device))


def default_stream(device: Any = None) -> torch.Stream:
    """Stream 0 of ``device``: where work goes unless another stream is current."""
    init()
    idx = _index(device)
    device_type = torch.accelerator.current_stream(idx).device_type
    return torch.Stream(stream_id=0, device_index=idx, device_type=device_type)


def _check_stream(fn: str, stream: Any) -> None:
    """TypeError/ValueError naming ``fn`` unless ``stream`` is a neuron ``torch.Stream``."""
    if not isinstance(stream, torch.Stream):
        raise TypeError(f"torch.neuron.{fn}: expected a torch.Stream, got {type(stream).__name__}")
    if stream.device.type != "neuron":
        raise ValueError(f"torch.neuron.{fn}: expected a neuron stream, got a stream of device {stream.device}")


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` current for its device on the calling thread (``None``: no-op).

    Raises ``TypeError`` for a non-stream, ``ValueError`` for a stream of another device."""
    if stream is not None:
        _check_stream("set_stream", stream)
        torch.accelerator.set_stream(stream)


@contextlib.contextmanager
def stream(stream: torch.Stream | None):
    """Context manager selecting ``stream`` (``None``: no-op) and restoring the previous one.

    Raises ``TypeError`` for a non-stream, ``ValueError`` for a stream of another device."""
    if stream is None:
        yield
        return
    _check_stream("stream", stream)
    prev_device = _C._get_device()  # set_stream also makes the stream's device current
    prev = torch.accelerator.current_stream(stream.device_index)
    torch.accelerator.set_stream(stream)
    try:
        yield
    finally:
        torch.accelerator.set_stream(prev)
        _C._set_device(prev_device)


# ---------------------------------------------------------------- RNG (Philox: seed, offset)


def _seed_bits(seed: int) -> int:
    """``seed`` as the generator's uint64, as CPU PyTorch takes it: -2**63 to 2**64 - 1 (a
    negative seed counts from 2**64), ``ValueError`` outside."""
    seed = int(seed)
    if not -(1 << 63) <= seed < (1 << 64):
        raise ValueError(f"Overflow when unpacking long long: seed {seed} is outside -2**63 to 2**64 - 1")
    return seed & 0xFFFF_FFFF_FFFF_FFFF


def manual_seed(seed: int) -> None:
    """Seed the current device's default generator (offset reset to 0). Lazy-safe: does
    not initialise the runtime; a silent no-op in a bad fork, as PyTorch expects."""
    bits = _seed_bits(seed)
    if _is_in_bad_fork():
        return
    _C._manual_seed(_C._get_device(), bits)


def manual_seed_all(seed: int) -> None:
    """Seed every device's default generator (what ``torch.manual_seed`` calls)."""
    bits = _seed_bits(seed)
    if _is_in_bad_fork():
        return
    for i in range(device_count()):
        _C._manual_seed(i, bits)


def seed() -> None:
    """Seed the current device with a non-deterministic random number."""
    if not _is_in_bad_fork():
        _C._seed(_C._get_device())


def seed_all() -> None:
    """Seed every device with one non-deterministic random number."""
    if _is_in_bad_fork():
        return
    s = _C._seed(0)
    for i in range(1, device_count()):
        _C._manual_seed(i, s)


def initial_seed() -> int:
    """The current device's seed."""
    return _C._initial_seed(_C._get_device())


def get_rng_state(device: Any = "neuron") -> torch.Tensor:
    """Generator state of ``device``: a CPU ``uint8`` tensor of 16 bytes (seed, then offset,
    each little-endian uint64) — the Philox layout DTensor's RNG tracker expects."""
    return torch.frombuffer(bytearray(_C._get_rng_state(_index(device))), dtype=torch.uint8)


def set_rng_state(new_state: torch.Tensor, device: Any = "neuron") -> None:
    """Restore a state from :func:`get_rng_state` (a ``uint8`` tensor of 16 bytes: ``TypeError``
    for another type or dtype, as CPU's ``torch.set_rng_state``; ``RuntimeError`` for another size)."""
    if not isinstance(new_state, torch.Tensor):
        raise TypeError(f"expected a torch.ByteTensor, but got {type(new_state).__name__}")
    if new_state.dtype != torch.uint8:
        raise TypeError("RNG state must be a torch.ByteTensor")
    data = bytes(new_state.detach().to("cpu", torch.uint8).reshape(-1).tolist())
    _C._set_rng_state(_index(device), data)


def get_rng_state_all() -> list[torch.Tensor]:
    """States of all devices, in index order."""
    return [get_rng_state(i) for i in range(device_count())]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    """Restore the states of all devices (one per device, in index order)."""
    for i, s in enumerate(new_states):
        set_rng_state(s, i)


# ---------------------------------------------------------------- memory


def memory_stats(device: Any = None) -> dict[str, int]:
    """Caching-allocator statistics of ``device`` with CUDA's flat keys, sorted
    (``allocated_bytes.all.current``, ``reserved_bytes.all.peak``, ``num_ooms``, ...; bytes
    or counts). Call :func:`synchronize` first for figures that include queued work."""
    stats = _C._memory_stats(_index(device))
    return collections.OrderedDict(sorted(stats.items()))


def memory_allocated(device: Any = None) -> int:
    """Bytes held by live tensors on ``device`` (rounded to the allocator's size classes)."""
    return _C._memory_stats(_index(device))["allocated_bytes.all.current"]


def max_memory_allocated(device: Any = None) -> int:
    """Peak of :func:`memory_allocated` since start or the last peak reset."""
    return _C._memory_stats(_index(device))["allocated_bytes.all.peak"]


def memory_reserved(device: Any = None) -> int:
    """Bytes reserved by the caching allocator (live plus cached blocks)."""
    return _C._memory_stats(_index(device))["reserved_bytes.all.current"]


def max_memory_reserved(device: Any = None) -> int:
    """Peak of :func:`memory_reserved`."""
    return _C._memory_stats(_index(device))["reserved_bytes.all.peak"]


def reset_peak_memory_stats(device: Any = None) -> None:
    """Set every peak statistic of ``device`` to its current value."""
    _C._reset_peak(_index(device))


def reset_accumulated_memory_stats(device: Any = None) -> None:
    """Zero the allocated/freed totals and event counters of ``device``."""
    _C._reset_accumulated(_index(device))


def empty_cache() -> None:
    """Return every cached (free) block of every device to the host (live tensors stay) and
    clear the kernel plan cache."""
    _C._empty_cache()


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """``(free, total)`` bytes of ``device``: capacity minus reserved, and capacity."""
    stats = _C._memory_stats(_index(device))
    total = stats["capacity_bytes"]
    return max(total - stats["reserved_bytes.all.current"], 0), total


def _fmt(n: int) -> str:
    for unit in ("B ", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:7.0f} {unit}" if unit == "B " else f"{n:7.2f} {unit}"
        n /= 1024
    return str(n)


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """A human-readable table of :func:`memory_stats` for ``device``."""
    idx = _index(device)
    s = memory_stats(idx)
    rows = [("Allocated memory", "allocated_bytes", True), ("Active memory", "active_bytes", True),
            ("Requested memory", "requested_bytes", True), ("Reserved memory", "reserved_bytes", True),
            ("Allocations", "allocation", False), ("Segments", "segment", False)]
    pools = ("all",) if abbreviated else ("all", "large_pool", "small_pool")
    line = "=" * 79
    out = [line, f" neuron:{idx} memory summary (capacity {_fmt(s['capacity_bytes']).strip()}, "
                 f"OOMs {s['num_ooms']}, cache flushes {s['num_alloc_retries']})", line,
           f" {'Metric':<28}| {'Cur Usage':>11} | {'Peak Usage':>11} | {'Tot Alloc':>11} | {'Tot Freed':>11}",
           "-" * 79]
    for title, key, is_bytes in rows:
        for pool in pools:
            vals = [s[f"{key}.{pool}.{f}"] for f in ("current", "peak", "allocated", "freed")]
            cells = [_fmt(v) if is_bytes else f"{v:>11d}" for v in vals]
            label = title if pool == "all" else f"  from {pool.replace('_pool', '')} pool"
            out.append(f" {label:<28}| " + " | ".join(f"{c:>11}" for c in cells))
    out.append(line)
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- AMP


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Dtypes autocast may use on neuron: float32, float16, bfloat16."""
    return [torch.float32, torch.float16, torch.bfloat16]


def is_bf16_supported() -> bool:
    """bfloat16 is a native type of NeuronCores: always True."""
    return True
