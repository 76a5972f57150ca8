"""torch_neuronx: the ``neuron`` PyTorch device, backed by a virtual NeuronCore runtime in C.

Installing the package is enough: PyTorch's ``torch.backends`` entry point calls
:func:`_autoload` during ``import torch`` (``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` turns that off;
``import torch_neuronx`` then registers the device). Afterwards ``torch.device("neuron")``,
``tensor.to("neuron")``, ``torch.neuron.*`` and ``torch.accelerator`` work.

This module re-exports the ``torch.neuron`` functions and adds op tracking:
:func:`get_fallback_ops`, :func:`get_executed_ops`, :func:`get_executed_op_counts`,
:func:`clear_op_tracking`.
"""
from __future__ import annotations

__version__ = "0.1.0"

_registered = False


def _autoload() -> None:
    """Entry point of the ``torch.backends`` group (called by ``import torch``).

    Defined before ``import torch`` below: when a program imports ``torch_neuronx`` first (a
    console script, ``python -m torch_neuronx``), that import runs PyTorch's autoload while this
    module is still initialising; registration then happens at the end of this module instead.
    """
    register = globals().get("_register")
    if register is not None:
        register()


import torch  # noqa: E402


def _check_slot_free() -> None:
    """Raise if another package already owns PyTorch's PrivateUse1 device slot."""
    name = torch._C._get_privateuse1_backend_name()
    owner = getattr(getattr(torch, name, None), "__name__", None) if name != "privateuseone" else None
    if name == "privateuseone" or owner == "torch_neuronx.device":
        return
    raise RuntimeError(
        f"PyTorch's PrivateUse1 device slot is already claimed by '{name}'"
        + (f" (device module {owner})" if owner else "")
        + ": torch_neuronx cannot register the 'neuron' device in this process. Uninstall or "
        "disable the other backend (for AWS's torch-neuronx, use a separate environment), or set "
        "TORCH_DEVICE_BACKEND_AUTOLOAD=0 and do not import torch_neuronx."
    )


def _register() -> None:
    global _registered
    if _registered:
        return
    _check_slot_free()
    from . import _C  # loading the extension registers the ATen kernels and the fallback

    from . import _warnings

    _C._set_warning_function(_warnings.emit)
    _C._register()
    if torch._C._get_privateuse1_backend_name() != "neuron":
        torch.utils.rename_privateuse1_backend("neuron")
    from . import device as _device_module

    torch._register_device_module("neuron", _device_module)
    torch.utils.generate_methods_for_privateuse1_backend(
        for_tensor=True, for_module=True, for_storage=True, unsupported_dtype=None
    )
    _install_print_hook()
    _refuse_sharing_between_processes()
    _follow_torch_threads()
    import atexit

    atexit.register(_flush_autograd_threads)
    from . import distributed as _distributed  # the torch.distributed backend "neuron"

    _distributed._register_backend()
    _registered = True


def _refuse_sharing_between_processes() -> None:
    """Pickling a neuron tensor for another process (a torch.multiprocessing queue, spawn's
    arguments) raises a RuntimeError naming the remedy. A virtual NeuronCore's memory belongs to
    its process (there are no IPC handles, as CUDA has); PyTorch's own reducer would fail with
    its internal "_share_fd_: only available on CPU". Other tensors keep PyTorch's reducer."""
    from multiprocessing.reduction import ForkingPickler

    from torch.multiprocessing import reductions

    def reduce_tensor(t):
        if t.device.type == "neuron":
            raise RuntimeError(
                "a neuron tensor cannot be sent to another process: its memory belongs to this "
                "process's virtual NeuronCore. Send tensor.cpu() and move it to the device in the "
                "receiving process")
        return reductions.reduce_tensor(t)

    for cls in (*torch._tensor_classes, torch.Tensor, torch.nn.Parameter):
        ForkingPickler.register(cls, reduce_tensor)


def _flush_autograd_threads() -> None:
    """At exit, before the interpreter finalises: wait until PyTorch's autograd device threads
    for neuron have released the last backward's GraphTask (its Python objects are freed under
    the GIL while that is still possible). Without it a backward shortly before exit can abort
    the process in a device thread (csrc/device.cpp explains the race). No-op when no neuron
    tensor was created or in a forked child.

    Raises:
        RuntimeError: the runtime failed to run the flush (reported by atexit; exit status 0).
    """
    from . import _C

    _C._flush_autograd_threads()


def _follow_torch_threads() -> None:
    """Keep the runtime's kernel threads equal to PyTorch's intra-op threads.

    ``torch.get_num_threads()`` already reflects ``OMP_NUM_THREADS`` (torchrun sets 1 per rank);
    ``torch.set_num_threads`` is wrapped so later changes reach the runtime too.
    ``TORCH_NEURONX_NUM_THREADS``, when set, wins over both.
    """
    import os

    if not os.environ.get("TORCH_NEURONX_NUM_THREADS"):
        _C._set_num_threads(torch.get_num_threads())
    original = torch.set_num_threads
    if getattr(original, "_neuron_follows", False):
        return

    def set_num_threads(num: int) -> None:
        original(num)
        if not os.environ.get("TORCH_NEURONX_NUM_THREADS"):
            _C._set_num_threads(torch.get_num_threads())

    set_num_threads.__doc__ = original.__doc__
    set_num_threads.__name__ = "set_num_threads"
    set_num_threads._neuron_follows = True  # type: ignore[attr-defined]
    torch.set_num_threads = set_num_threads


def get_num_threads() -> int:
    """Threads the neuron runtime's kernels use (the caller's thread included).

    Equals ``torch.get_num_threads()`` (so ``OMP_NUM_THREADS`` and ``torch.set_num_threads``
    apply) unless ``TORCH_NEURONX_NUM_THREADS`` is set. BLAS inside the runtime uses as many.
    """
    return _C._num_threads()


def get_cpu_isa() -> str:
    """The CPU tier of the runtime's kernels: ``"avx512"``, ``"avx2"`` or ``"baseline"``.

    Chosen when the runtime initialises (this call initialises it): the best tier of this CPU,
    capped by ``TORCH_NEURONX_ISA=avx512|avx2|baseline``. Every tier computes the same bits.

    Raises:
        RuntimeError: ``TORCH_NEURONX_ISA`` is set to another value.
    """
    _C._init()
    return _C._isa()


def get_gemm_provider() -> str:
    """The BLAS that computes the runtime's float32 products (``mm``, ``addmm``, ``bmm``,
    linear layers, convolution): ``"mkl"`` or ``"openblas"``.

    ``"mkl"`` is the Intel MKL that PyTorch's own CPU library carries (x86-64 wheels), used
    when that library exports it, so ``neuron`` products run on the BLAS CPU PyTorch uses;
    otherwise, or with ``TORCH_NEURONX_BLAS=openblas``, the runtime's OpenBLAS
    (scipy-openblas32). Either runs single-threaded per tile on the runtime's threads. Each
    library picks its own instruction set (``MKL_ENABLE_INSTRUCTIONS`` /
    ``OPENBLAS_CORETYPE`` cap them; ``TORCH_NEURONX_ISA`` does not).
    """
    return _C._gemm_provider()


def _install_print_hook() -> None:
    """Printing a neuron tensor is a host read: its internal ops are not tracked."""
    import torch._tensor_str as tensor_str

    original = tensor_str._str
    if getattr(original, "_neuron_hook", False):
        return
    from . import _C

    def _str(self, *, tensor_contents=None):
        if self.device.type != "neuron":
            return original(self, tensor_contents=tensor_contents)
        prev = _C._set_tracking_paused(True)
        try:
            return original(self, tensor_contents=tensor_contents)
        finally:
            _C._set_tracking_paused(prev)

    _str._neuron_hook = True
    tensor_str._str = _str


_register()

from .device import *  # noqa: E402,F401,F403
from .device import _is_in_bad_fork  # noqa: E402,F401
from . import _C  # noqa: E402


def get_fallback_ops() -> list[str]:
    """Ops that ran through the CPU fallback, one ``"aten::<name>"`` entry per invocation, in
    order. The list keeps the first 100,000 (``TORCH_NEURONX_FALLBACK_LIST_CAP``);
    :func:`get_fallback_op_count` counts all."""
    return _C._fallback_ops()


def get_fallback_op_count() -> int:
    """Number of CPU-fallback invocations since start or :func:`clear_op_tracking`."""
    return _C._fallback_total()


def get_executed_ops() -> list[str]:
    """Ops executed by native neuron kernels (``"aten::<name>"``), one entry per invocation as
    :func:`get_fallback_ops` (grouped by name, in name order: the runtime counts invocations
    rather than logging them; :func:`get_executed_op_counts` is the compact form)."""
    return [name for name, n in sorted(_C._executed_ops().items()) for _ in range(n)]


def get_executed_op_counts() -> dict[str, int]:
    """Native executions per op name since start or :func:`clear_op_tracking`."""
    return dict(sorted(_C._executed_ops().items()))


def clear_op_tracking() -> None:
    """Reset the fallback list and the native execution counters."""
    _C._clear_op_tracking()


def get_plan_cache_stats() -> dict[str, int]:
    """Kernel plan cache counters: ``hits``, ``misses``, ``entries``, ``evictions``, ``capacity``.

    Each native launch resolves a plan keyed by (op, dtypes, shapes, strides) — never by scalar
    values; the first launch of a key builds it, later ones reuse it. The cache is an LRU of
    ``TORCH_NEURONX_PLAN_CACHE_SIZE`` entries (default 4096), cleared by ``torch.neuron.empty_cache()``.
    """
    return dict(_C._plan_cache_stats())


def set_strict_fallback(enabled: bool) -> bool:
    """Turn strict mode on or off (env ``TORCH_NEURONX_STRICT=1`` sets it at start): each CPU
    fallback then raises ``NotImplementedError`` naming the op. Returns the previous mode.

    Raises ``TypeError`` unless ``enabled`` is a bool."""
    if not isinstance(enabled, bool):
        raise TypeError(f"set_strict_fallback: enabled must be a bool, got {type(enabled).__name__}")
    return _C._set_strict(enabled)


def get_dynamo_metrics() -> list[dict]:
    """One record per graph compiled by ``torch.compile(backend="neuron")``, in order: graph id
    and name (``{model}_{aot_id}_{graph_type}_{nth}``), node count, fused kernels, ops run
    through eager kernels, timings in µs, cache hit (see docs/compile.md)."""
    from .compiler import get_dynamo_metrics as get

    return get()


def reset_dynamo_metrics() -> None:
    """Forget the records of :func:`get_dynamo_metrics`."""
    from .compiler import reset_dynamo_metrics as reset

    reset()
