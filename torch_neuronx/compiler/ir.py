"""The kernel IR between an FX graph and C: buffers, strided views of them, pointwise
expressions, and the steps a compiled graph runs.

A graph lowers to a list of steps. ``Loop`` (a fusion group: pointwise expressions over one
iteration shape, storing only what leaves the group), ``Reduce``, ``Extern`` (a call into a
runtime kernel) are generated C and run inside one stream task per run of consecutive C steps
(a *segment*); ``Eager`` runs one ATen op through the dispatcher (a native eager kernel)
between segments.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

# dtype -> (dtype.h name, c10 ScalarType number, type class, C type of the class)
DTYPES = {
    torch.uint8: ("UINT8", 0, "U8"),
    torch.int8: ("INT8", 1, "I8"),
    torch.int16: ("INT16", 2, "I16"),
    torch.int32: ("INT32", 3, "I32"),
    torch.int64: ("INT64", 4, "I64"),
    torch.float16: ("FLOAT16", 5, "F32"),
    torch.float32: ("FLOAT32", 6, "F32"),
    torch.float64: ("FLOAT64", 7, "F32"),
    torch.complex32: ("COMPLEX32", 8, "C64"),
    torch.complex64: ("COMPLEX64", 9, "C64"),
    torch.complex128: ("COMPLEX128", 10, "C64"),
    torch.bool: ("BOOL", 11, "B"),
    torch.bfloat16: ("BFLOAT16", 15, "F32"),
}
CLASS_CTYPE = {"F32": "float", "I64": "int64_t", "I32": "int32_t", "I16": "int16_t", "I8": "int8_t",
               "U8": "uint8_t", "B": "_Bool", "C64": "float _Complex"}
# The dtype number each class computes in (for the runtime's support table).
CLASS_DTYPE = {"F32": 6, "I64": 4, "I32": 3, "I16": 2, "I8": 1, "U8": 0, "B": 11, "C64": 9}


def dtype_name(dt: torch.dtype) -> str:
    return DTYPES[dt][0]


def dtype_num(dt: torch.dtype) -> int:
    return DTYPES[dt][1]


def type_class(dt: torch.dtype) -> str:
    return DTYPES[dt][2]


def c_double(x: float) -> str:
    """An exact C literal of a double."""
    x = float(x)
    if math.isnan(x):
        return "NAN"
    if math.isinf(x):
        return "INFINITY" if x > 0 else "(-INFINITY)"
    return x.hex()


def c_literal(value, kind: torch.dtype) -> str:
    """A Python number as the C value eager hands a kernel for a constant read as `kind`: a
    double (floating kinds: Python ints are converted to double first, as c10::Scalar does),
    an int64, a bool or a double complex."""
    if kind.is_complex:
        z = complex(value)
        return f"CMPLX({c_double(z.real)}, {c_double(z.imag)})"
    if kind == torch.bool:
        return "1" if value else "0"
    if kind.is_floating_point:
        return c_double(float(value))
    v = int(value)
    return f"INT64_C({v})" if -2**63 <= v < 2**63 else c_double(float(value))


def storage_numel(size, stride) -> int:
    """Elements a strided layout spans (c10's computeStorageNbytes / itemsize)."""
    if any(s == 0 for s in size):
        return 0
    return 1 + sum((n - 1) * st for n, st in zip(size, stride))


@dataclass(eq=False)
class Buffer:
    """Memory a graph reads or writes. kind: ``input`` (graph argument ``input_index``),
    ``alloc`` (allocated by the executor with ``size``/``stride``), ``eager`` (the result of an
    eager step), ``const`` (a tensor the graph holds)."""

    id: int
    kind: str
    dtype: torch.dtype
    size: tuple = ()
    stride: tuple = ()
    input_index: int = -1

    @property
    def numel(self) -> int:
        return storage_numel(self.size, self.stride)


@dataclass(frozen=True, eq=False)
class TRef:
    """A strided view of a buffer: element strides and offset relative to the buffer's base."""

    buf: Buffer
    dtype: torch.dtype
    size: tuple
    stride: tuple
    offset: int = 0

    @property
    def numel(self) -> int:
        return math.prod(self.size)

    def is_contiguous(self) -> bool:
        expected = 1
        for n, st in reversed(list(zip(self.size, self.stride))):
            if n != 1 and st != expected:
                return False
            expected *= n
        return True


# ---------------------------------------------------------------- pointwise expressions

@dataclass(eq=False)
class Load:
    """A loop input: ``ref`` broadcast to the loop's shape."""

    ref: TRef
    dtype: torch.dtype = None

    def __post_init__(self):
        self.dtype = self.ref.dtype


@dataclass(eq=False)
class Const:
    """A scalar operand, as eager passes a Python number: ``value`` held as ``kind`` (double,
    int64, bool, complex) and, when ``via`` is set, first rounded to that dtype (a 0-dim tensor
    of that dtype)."""

    value: Any
    dtype: torch.dtype  # the dtype the constant is read as (float64, int64, bool, complex128 or via)
    via: torch.dtype | None = None


@dataclass(eq=False)
class PW:
    """One pointwise op: ``op`` is a row of vnc/ew_table.h (or ``"cast"``), computed in the type
    class of ``compute`` and rounded to ``dtype`` as eager stores it. ``params``: vnc_ew_params
    fields (f, i, flags)."""

    op: str
    inputs: list
    dtype: torch.dtype
    compute: torch.dtype
    params: dict = field(default_factory=dict)
    size: tuple = ()
    name: str = ""  # the FX node, for comments


# ---------------------------------------------------------------- steps

@dataclass(eq=False)
class Loop:
    """A fusion group: ``members`` in evaluation order over ``shape``; ``stores`` the member
    values written to memory."""

    shape: tuple
    members: list = field(default_factory=list)
    stores: list = field(default_factory=list)  # (PW, TRef)
    closed: bool = False
    write_backs: list = field(default_factory=list)  # (PW, input TRef): copy_ into a graph input

    def refs(self):
        seen = []
        for m in self.members:
            for x in m.inputs:
                if isinstance(x, Load):
                    seen.append(x.ref)
        return seen + [r for _, r in self.stores]


@dataclass(eq=False)
class Reduce:
    """A reduction through vnc_reduce with the geometry eager's TensorIterator builds."""

    op: str  # VNC_RED_* suffix
    name: str  # aten op name for errors
    out: TRef
    inp: TRef
    shape: list  # innermost first
    strides: list  # per operand (out, in), bytes
    dtypes: list

    def refs(self):
        return [self.out, self.inp]


@dataclass(eq=False)
class FusedReduce:
    """A reduction whose input is computed on the fly (vnc_reduce_fused): `members` (PW, in
    evaluation order) compute `value` from `loads`; the geometry (dims innermost first) is the
    order eager's TensorIterator would give the stored value, uncoalesced: strides[0] is the
    output's, strides[1 + k] those of loads[k] (bytes); `inner` the loads' strides along the
    innermost reduced dim (elements)."""

    op: str
    name: str
    out: TRef
    value: "PW"
    members: list
    loads: list
    shape: list
    strides: list
    inner: list

    def refs(self):
        return [self.out] + [x.ref for x in self.loads]


@dataclass(eq=False)
class Extern:
    """A call of runtime kernels: ``emit(names)`` returns C statements, where ``names(ref)`` is
    the C expression of a TRef's element [0, ..., 0] address (char *).

    A row kernel (GEMM, softmax and log_softmax and their backward, layer norm and its backward)
    sets ``rows`` = (rows of its output ``writes[0]`` counted across the batch, columns);
    ``epilogue`` is then a fusion group run on each finished block of whole rows
    (lowering.fuse_row_epilogues), and ``emit(names, epilogue=<C function name>)`` calls the
    kernel's ``_fused`` variant with it (externs.call). ``row_reads``: the reads the kernel
    reads row by row with its output's rows (softmax's x, layer norm backward's dy and x...);
    ``prologue`` a fusion group computing some of them, run on each block of rows just before
    the kernel reads it (lowering.fuse_row_prologues; ``emit(names, prologue=...)``)."""

    name: str
    emit: Callable
    reads: list
    writes: list
    rows: tuple | None = None
    epilogue: "Loop | None" = None
    row_reads: tuple = ()
    prologue: "Loop | None" = None

    @property
    def hooks(self) -> dict:
        """The fusion groups run inside the kernel: {"prologue": Loop, "epilogue": Loop}."""
        return {k: lp for k, lp in (("prologue", self.prologue), ("epilogue", self.epilogue)) if lp is not None}

    def refs(self):
        extra = [r for lp in self.hooks.values() for r in lp.refs()]
        return list(self.reads) + list(self.writes) + extra


@dataclass(eq=False)
class Eager:
    """One op through the dispatcher: ``fn(*args, **kwargs)`` where TRefs in args/kwargs become
    tensors; results (matched to ``outs``, a pytree of TRef / None) become buffers."""

    name: str
    fn: Callable
    args: tuple
    kwargs: dict
    outs: Any
    node: Any = None

    def refs(self):
        from torch.utils._pytree import tree_leaves

        return [x for x in tree_leaves((self.args, self.kwargs)) if isinstance(x, TRef)]


C_STEPS = (Loop, Reduce, FusedReduce, Extern)


def written_refs(step) -> list:
    """The TRefs a C step writes."""
    if isinstance(step, Loop):
        return [r for _, r in step.stores]
    if isinstance(step, (Reduce, FusedReduce)):
        return [step.out]
    return list(step.writes) + [r for lp in step.hooks.values() for r in written_refs(lp)]
