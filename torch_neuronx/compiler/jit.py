"""Compiling generated C: where the runtime's headers are, where the cache lives, which flags.

The work itself (cache key, compiler run, atomic store, dlopen) is the runtime's
``vnc_jit_compile`` (``runtime/src/jit/jit.c``); this module only supplies its inputs.
"""
from __future__ import annotations

import os
import pathlib

import torch

from .. import _C

_PKG = pathlib.Path(__file__).resolve().parent.parent


def include_dirs() -> list[str]:
    """Directories holding ``vnc/*.h`` and ``dtype.h``: the installed copy next to the package
    (wheels), else the source tree of an editable checkout."""
    installed = _PKG / "include"
    if (installed / "vnc" / "jit_graph.h").is_file():
        return [str(installed)]
    src = _PKG.parent / "runtime"
    if (src / "include" / "vnc" / "jit_graph.h").is_file():
        return [str(src / "include"), str(src / "src" / "kernels")]
    raise RuntimeError(
        "torch_neuronx: the runtime headers for the compiler were not found (looked in "
        f"{installed} and {src / 'include'}); reinstall the package")


def cache_dir() -> str:
    """``TORCH_NEURONX_CACHE_DIR``, else ``$XDG_CACHE_HOME/torch_neuronx/jit`` (default
    ``~/.cache/torch_neuronx/jit``): the content-addressed store of compiled graphs."""
    d = os.environ.get("TORCH_NEURONX_CACHE_DIR")
    if d:
        return d
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "torch_neuronx", "jit")


# The instruction sets of the runtime's tiers (x86-64-v4 / -v3 include FMA, which vnc_fmaf
# uses: the same bits as its emulation on baseline). With FMA enabled GCC 12 turns a
# vectorised complex product into vfmaddsub even under -ffp-contract=off, so loops with
# complex members stay scalar (codegen._attrs), as the runtime's complex kernels do.
_TIER_FLAGS = {
    "avx512": "-mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx2 -mfma -mf16c",
    "avx2": "-mavx2 -mfma -mf16c",
    "baseline": "",
}


def isa_tier() -> str:
    """The instruction-set tier the runtime's kernels use (and generated code is built for):
    the runtime's own choice when it reports one, else PyTorch's CPU capability."""
    tier = getattr(_C, "_isa", None)
    if tier is not None:
        return tier()
    cap = torch.backends.cpu.get_cpu_capability().lower()
    return "avx512" if cap.startswith("avx512") else "avx2" if cap.startswith("avx2") else "baseline"


def cflags() -> str:
    """Flags beyond the fixed ones (-std=c11 -O3 -ffp-contract=off -fwrapv -fno-math-errno
    -fno-trapping-math, which change no value):
    the tier's instruction sets (never -march=native, so a cache shared by machines of
    different CPUs keys each tier apart). ``TORCH_NEURONX_CFLAGS`` appends."""
    import platform

    flags = _TIER_FLAGS.get(isa_tier(), "") if platform.machine() in ("x86_64", "AMD64") else ""
    extra = os.environ.get("TORCH_NEURONX_CFLAGS", "")
    return " ".join(f for f in (flags, extra) if f)


class Module:
    """A loaded shared object of generated code; unloaded when the last user releases it."""

    def __init__(self, source: str, name: str):
        self._release = _C._jit_release  # held: at interpreter exit the module's _C may be None first
        self.handle, self.cache_hit = _C._jit_compile(source, name, include_dirs(), cflags(), cache_dir(), None)
        self.path = _C._jit_path(self.handle)

    def symbol(self, name: str) -> int:
        addr = _C._jit_symbol(self.handle, name)
        if not addr:
            raise RuntimeError(f"generated code {self.path} has no symbol {name}")
        return addr

    def __del__(self):
        h = getattr(self, "handle", None)
        if h:
            self._release(h)
            self.handle = None


def stats() -> dict:
    """Process-wide JIT counters: ``compiles`` (C compiler runs), ``disk_hits``,
    ``memory_hits``, ``loaded`` (modules loaded now), ``compile_seconds``."""
    return dict(_C._jit_stats())
