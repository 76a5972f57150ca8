"""Lowerings of non-pointwise ops to calls of the runtime's kernels (vnc/*.h), mirroring what
the eager glue (csrc/) passes for the same op, so compiled results equal eager's: reductions
(with the geometry of eager's reduction TensorIterator, hence eager's summation order), GEMMs.

``LOWERINGS[op](lw, node) -> bool``: True when the node was lowered (it then set
``lw.values[node]``); False leaves it to an eager step.
"""
from __future__ import annotations

import torch

from .ir import Extern, Reduce, TRef, c_double, dtype_num

aten = torch.ops.aten
LOWERINGS = {}

FLOATS = (torch.float32, torch.float16, torch.bfloat16)


def meta_of(ref: TRef) -> torch.Tensor:
    return torch.empty_strided(ref.size, ref.stride, dtype=ref.dtype, device="meta")


def broadcast_strides(ref: TRef, shape) -> tuple:
    """Element strides of `ref` expanded to `shape` (0 along broadcast dims)."""
    lead = len(shape) - len(ref.size)
    out = []
    for d in range(len(shape)):
        k = d - lead
        out.append(0 if k < 0 or (ref.size[k] == 1 and shape[d] != 1) else ref.stride[k])
    return tuple(out)


def c_tensor(var: str, addr: str, size, stride, dtype) -> str:
    """C declaration of a vnc_tensor named `var`."""
    sizes = ", ".join(str(int(s)) for s in size) or "0"
    strides = ", ".join(str(int(s)) for s in stride) or "0"
    return (f"vnc_tensor {var} = {{.data = (void *)({addr}), .sizes = {{{sizes}}}, .strides = {{{strides}}}, "
            f".ndim = {len(size)}, .dtype = {dtype_num(dtype)}}};")


# ---------------------------------------------------------------- reductions


def _reduction(vnc_op: str, sum_like: bool, name: str):
    def lower(lw, node) -> bool:
        from .. import _C

        x = node.args[0]
        out = node.meta["val"]
        if not isinstance(out, torch.Tensor) or out.dtype.is_complex or x.meta["val"].dtype.is_complex:
            return False
        if node.target in (aten.sum.default, aten.mean.default):
            dims, keepdim = [], False
        else:
            dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
            keepdim = node.args[2] if len(node.args) > 2 else node.kwargs.get("keepdim", False)
            dims = [] if dims is None else ([dims] if isinstance(dims, int) else list(dims))
        inp = lw.ref(x)
        if out.numel() == 0 or inp.numel == 0:
            return False
        out_ref = lw.fresh_ref(out)
        geo = _C._reduction_geometry(sum_like, meta_of(inp), meta_of(out_ref), dims, bool(keepdim))
        if geo is None:
            return False
        shape, strides, dtypes = geo
        lw.prog.steps.append(Reduce(vnc_op, name, out_ref, inp, shape, strides, dtypes))
        lw.values[node] = out_ref
        return True

    return lower


for _op, _kind, _sum, _name in (
        (aten.sum.dim_IntList, "SUM", True, "aten::sum"), (aten.sum.default, "SUM", True, "aten::sum"),
        (aten.mean.dim, "MEAN", True, "aten::mean"), (aten.mean.default, "MEAN", True, "aten::mean"),
        (aten.amax.default, "AMAX", False, "aten::amax"), (aten.amin.default, "AMIN", False, "aten::amin")):
    LOWERINGS[_op] = _reduction(_kind, _sum, _name)


# ---------------------------------------------------------------- matrix products


def _matrix(addr: str, ref: TRef, dims: int) -> str:
    """vnc_matrix initialiser as linalg.cpp's matrix(): 3-D batches, 2-D, 1-D as a column."""
    st = ref.stride
    batch = st[0] if dims == 3 else 0
    row = st[0] if dims == 1 else st[dims - 2]
    col = 1 if dims == 1 else st[dims - 1]
    return f"{{(void *)({addr}), {batch}, {row}, {col}, {dtype_num(ref.dtype)}}}"


def _gemm(name: str, has_self: bool):
    def lower(lw, node) -> bool:
        out = node.meta["val"]
        if out.dtype not in FLOATS and out.dtype not in (torch.int64, torch.int32):
            return False
        if has_self:
            self_, a, b = node.args[:3]
            beta = node.kwargs.get("beta", node.args[3] if len(node.args) > 3 else 1)
            alpha = node.kwargs.get("alpha", node.args[4] if len(node.args) > 4 else 1)
        else:
            (a, b), self_, beta, alpha = node.args[:2], None, 0, 1
        if any(isinstance(v, complex) for v in (beta, alpha)):
            return False
        ra, rb = lw.ref(a), lw.ref(b)
        rs = lw.ref(self_) if self_ is not None and float(beta) != 0.0 else None
        if any(r.dtype != out.dtype for r in (ra, rb)) or (rs is not None and rs.dtype != out.dtype):
            return False
        ro = lw.fresh_ref(out)
        nd = len(out.shape)
        batch = out.shape[0] if nd == 3 else 1
        M = out.shape[1 if nd == 3 else 0]
        N = 1 if nd == 1 else out.shape[-1]
        K = ra.size[0] if len(ra.size) == 1 else ra.size[-1]

        def emit(addr):
            code = []
            if rs is not None:  # eager: out.copy_(self.expand(out.sizes())) before the product
                code.append(c_tensor("dst", addr(ro), ro.size, ro.stride, ro.dtype))
                code.append(c_tensor("src", addr(rs), ro.size, broadcast_strides(rs, ro.size), rs.dtype))
                code.append(f'VNC_JIT_TRY(vnc_rt->copy(s, "aten::copy_", &dst, &src));')
            C = _matrix(addr(ro), ro, nd)
            if nd == 1:  # matrix @ vector: C is a column
                C = f"{{(void *)({addr(ro)}), 0, {ro.stride[0]}, 1, {dtype_num(ro.dtype)}}}"
            code.append(f"vnc_matrix A = {_matrix(addr(ra), ra, len(ra.size))}, B_ = {_matrix(addr(rb), rb, len(rb.size))}, "
                        f"C = {C};")
            code.append(f'VNC_JIT_TRY(vnc_rt->gemm(s, "{name}", {batch}, {M}, {N}, {K}, {c_double(alpha)}, &A, &B_, '
                        f'{c_double(beta) if rs is not None else "0.0"}, &C));')
            return code

        lw.prog.steps.append(Extern(name, emit, [r for r in (ra, rb, rs) if r is not None], [ro]))
        lw.values[node] = ro
        return True

    return lower


LOWERINGS[aten.mm.default] = _gemm("aten::mm", False)
LOWERINGS[aten.bmm.default] = _gemm("aten::bmm", False)
LOWERINGS[aten.addmm.default] = _gemm("aten::addmm", True)
LOWERINGS[aten.baddbmm.default] = _gemm("aten::baddbmm", True)
