"""The ``neuron`` backend of ``torch.distributed``: collectives on neuron tensors over Gloo/TCP.

Registered during the autoload, so a plain script can call::

    dist.init_process_group("neuron")          # or init_process_group() under torchrun
    dist.init_process_group("cpu:gloo,neuron:neuron")   # CPU tensors to Gloo, neuron tensors here

Each process group gets a ``c10d::Backend`` for the ``neuron`` device type
(``torch_neuronx._C._NeuronBackend``, C++) that drives two ``ProcessGroupGloo`` instances created
here over the group's store: one carries the data, the other a fixed-size fingerprint of each
collective (so ranks whose calls differ get an error instead of Gloo aborting the process or
mixing up data). See ``docs/distributed.md``.

Environment: ``LOCAL_RANK`` selects the rank's device (``neuron:LOCAL_RANK % device_count``;
``NEURON_RT_VISIBLE_CORES`` is left as it is); ``OMP_NUM_THREADS`` / ``torch.set_num_threads``
size the runtime's kernel thread pool; ``GLOO_SOCKET_IFNAME`` picks the network interface on
multi-host runs (Gloo's own variable).
"""
from __future__ import annotations

import atexit
import datetime
import os

import torch

from . import _C

__all__ = ["BACKEND_NAME", "is_registered"]

BACKEND_NAME = "neuron"
_registered = False


def is_registered() -> bool:
    """True once ``"neuron"`` is a registered ``torch.distributed`` backend in this process."""
    return _registered


def _register_backend() -> None:
    """Register ``"neuron"`` with ``torch.distributed`` (idempotent; no-op without distributed)."""
    global _registered
    if _registered or not torch.distributed.is_available():
        return
    import torch.distributed as dist

    _C._init_distributed()
    # Before the interpreter shuts down: collectives still in flight at exit (a script that ends
    # by an exception mid-step) then keep their tensors instead of releasing them from a
    # non-Python thread, which Python would end (see g_exit_m in csrc/distributed.cpp).
    atexit.register(_C._distributed_python_exiting)

    class _Options(torch._C._distributed_c10d.Backend.Options):
        """The backend's options as ``dist.split_group`` copies them (``copy.deepcopy``)."""

        def __deepcopy__(self, memo):
            return _Options(self.backend, self._timeout)

    _C._NeuronBackend.options = property(lambda self: _Options(BACKEND_NAME, self._timeout()))
    # new_group / new_subgroups with a bound device_id call this on every rank outside the new
    # group (ncclCommSplit needs all of the parent's ranks); Gloo groups connect only their
    # members, so there is nothing to do.
    _C._NeuronBackend.perform_nocolor_split = lambda self, device: None
    _fill_gloo_ranks_before_split(dist)
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, _create_backend, extended_api=True, devices=["neuron"])
    _registered = True


def _fill_gloo_ranks_before_split(dist) -> None:
    """Make ``ProcessGroup.split_group`` (``dist.split_group``, DeviceMesh) fill in a CPU Gloo
    backend's ``options.global_ranks_in_group`` first, where it is empty.

    ``init_process_group`` leaves that list empty for the default group, and PyTorch's
    ``ProcessGroupGloo::groupRanks`` reads an empty list as "every rank" only in the process's
    first Gloo instance; its ``split`` indexes the list, so a later instance crashes the process
    (a segmentation fault). This backend's transports are Gloo instances, so the CPU half of
    ``"neuron:neuron,cpu:gloo"`` is not the first one (as any Gloo group created after
    ``destroy_process_group`` is not).
    """
    from torch.distributed import ProcessGroupGloo

    pg_class = torch._C._distributed_c10d.ProcessGroup
    split = pg_class.split_group
    if getattr(split, "_neuron_fills_gloo_ranks", False):
        return

    def split_group(self, *args, **kwargs):
        try:
            cpu = self._get_backend(torch.device("cpu"))
        except RuntimeError:  # no CPU backend in this group
            cpu = None
        if isinstance(cpu, ProcessGroupGloo) and not cpu.options.global_ranks_in_group:
            cpu.options.global_ranks_in_group = dist.get_process_group_ranks(self)
        return split(self, *args, **kwargs)

    split_group._neuron_fills_gloo_ranks = True
    split_group.__doc__ = split.__doc__
    pg_class.split_group = split_group


def _select_device() -> None:
    """Under a launcher (``LOCAL_RANK`` set), make ``neuron:LOCAL_RANK % device_count`` current
    when the default group is created, as ``torch.cuda.set_device(local_rank)`` does by hand.
    A device the script made current itself (other than ``neuron:0``) is kept. The runtime
    then starts (as ``torch.cuda.set_device`` initialises CUDA): code that picks a device only
    while ``torch.neuron.is_initialized()`` is false keeps this choice (DeviceMesh would set
    ``neuron:LOCAL_RANK``, invalid when more ranks than cores share a host)."""
    import torch.distributed as dist

    local_rank = os.environ.get("LOCAL_RANK")
    if local_rank is None or dist.is_initialized():
        return
    count = torch.neuron.device_count()
    if count > 0 and _C._get_device() == 0:
        torch.neuron.set_device(int(local_rank) % count)
    if count > 0:
        torch.neuron.init()


def _apply_thread_budget() -> None:
    """Size the runtime's kernel thread pool to this rank's share of the CPU.

    The budget is ``torch.get_num_threads()``: ``OMP_NUM_THREADS`` (which ``torchrun`` sets to 1
    for several ranks per host) or ``torch.set_num_threads``. Without a runtime call to resize
    the pool, ``TORCH_NEURONX_NUM_THREADS`` is set for the runtime's start (a value the user set
    wins).
    """
    threads = torch.get_num_threads()
    setter = getattr(_C, "_set_num_threads", None)
    if setter is not None:
        setter(threads)
    elif not _C._is_initialized():
        os.environ.setdefault("TORCH_NEURONX_NUM_THREADS", str(threads))


def _create_backend(opts, backend_options=None):
    """``torch.distributed`` creator of the ``neuron`` backend (``extended_api=True``).

    ``opts`` is PyTorch's ``_DistributedBackendOptions`` (store, group rank and size, timeout,
    group id). Creates the two Gloo groups over prefixed keys of the group's store; raises
    PyTorch's store timeout error when a rank does not join within ``timeout``.
    """
    _apply_thread_budget()  # before _select_device starts the runtime
    _select_device()
    timeout = opts.timeout if isinstance(opts.timeout, datetime.timedelta) else datetime.timedelta(seconds=1800)
    return _make_backend(opts.store, opts.group_rank, opts.group_size, timeout, str(opts.group_id))


def _make_backend(store, rank: int, size: int, timeout: datetime.timedelta, group_name: str):
    """A ``_NeuronBackend`` for group rank ``rank`` of ``size`` over ``store`` (also called by
    the backend's C++ ``split`` for ``dist.split_group``)."""
    from torch.distributed import PrefixStore, ProcessGroupGloo

    # A group created again under the same name (init_process_group after
    # destroy_process_group, in the same processes and store) would find the previous Gloo
    # groups' addresses under the same keys and connect to closed ports. Each creation gets
    # its own keys: every rank adds 1 to a counter, and no rank finishes creation n (Gloo
    # connects to every peer) before all have counted it, so (count - 1) // size agrees.
    generation = (store.add("neuron_creations", 1) - 1) // size
    data = ProcessGroupGloo(PrefixStore(f"neuron_data/{generation}/", store), rank, size, timeout)
    meta = ProcessGroupGloo(PrefixStore(f"neuron_meta/{generation}/", store), rank, size, timeout)
    return _C._NeuronBackend(data, meta, rank, size, timeout, group_name)


def get_backend_stats(group=None) -> dict[str, int]:
    """Counters of a group's ``neuron`` backend (default group if ``None``).

    ``collectives`` issued, ``fingerprint_exchanges`` (cross-rank checks that ran) and
    ``fingerprint_skips`` (checks the common history predicted), ``staged_tensors`` (strided
    views copied through host buffers; contiguous tensors are aliased) and ``p2p_messages``.
    Raises ``RuntimeError`` if the group has no ``neuron`` backend.
    """
    import torch.distributed as dist

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("neuron"))
    if not hasattr(backend, "_stats"):
        wrapped = getattr(backend, "wrapped_pg", None)  # TORCH_DISTRIBUTED_DEBUG=DETAIL wrapper
        backend = wrapped if hasattr(wrapped, "_stats") else None
    if backend is None:
        raise RuntimeError("this process group has no neuron backend")
    return dict(backend._stats())
