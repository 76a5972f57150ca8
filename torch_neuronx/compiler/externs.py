"""Lowerings of non-pointwise ops to calls of the runtime's kernels (vnc/*.h), mirroring what
the eager glue (csrc/) passes for the same op, so compiled results equal eager's: reductions
(with the geometry of eager's reduction TensorIterator, hence eager's summation order), GEMMs.

``LOWERINGS[op](lw, node) -> bool``: True when the node was lowered (it then set
``lw.values[node]``); False leaves it to an eager step.
"""
from __future__ import annotations

import operator

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


def call(kernel: str, args: str, *hooks) -> list:
    """C statements calling runtime kernel `kernel` (``vnc_rt->kernel(s, args)``), or its
    ``_fused`` variant with `hooks`, the names of generated row functions (codegen's
    loop_function(rows=True); None: none) in the variant's order: (epilogue,) for a GEMM
    (vnc/gemm.h), (prologue, epilogue) for softmax and layer norm (vnc/nn_fused.h)."""
    if all(h is None for h in hooks):
        return [f"VNC_JIT_TRY(vnc_rt->{kernel}(s, {args}));"]
    names = ", ".join(h or "NULL" for h in hooks)
    return ["vnc_jit_loop_ctx c = {B, 0};", f"VNC_JIT_TRY(vnc_rt->{kernel}_fused(s, {args}, {names}, &c));"]


def c_tensor(var: str, addr: str, size, stride, dtype) -> str:
    """C declaration of a vnc_tensor named `var`."""
    sizes = ", ".join(f"${int(s)}" for s in size) or "0"
    strides = ", ".join(f"${int(s)}" for s in stride) or "0"
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
        if out.numel() == 0 or x.meta["val"].numel() == 0:
            return False
        if _fuse_reduction(lw, node, x, out, vnc_op, sum_like, name, dims, bool(keepdim)):
            return True
        inp = lw.ref(x)
        out_ref = lw.fresh_ref(out)
        geo = _C._reduction_geometry(sum_like, meta_of(inp), meta_of(out_ref), dims, bool(keepdim))
        if geo is None:
            return False
        shape, strides, dtypes = geo
        lw.prog.steps.append(Reduce(vnc_op, name, out_ref, inp, shape, strides, dtypes))
        lw.values[node] = out_ref
        return True

    return lower


def _fuse_reduction(lw, node, x, out, vnc_op, sum_like, name, dims, keepdim) -> bool:
    """The reduction of a pending pointwise value, computed on the fly by its chain (no store):
    when eager's TensorIterator order of the stored value can be reproduced (checked against
    eager's own geometry) and the chain has no integer division (whose zero check needs the
    kernel's fault path)."""
    from .. import _C
    from .ir import PW, FusedReduce, Load
    from .pointwise import INT_FAULT_ROWS

    v = lw.values.get(x)
    loop = lw.loop_of.get(v) if isinstance(v, PW) else None
    if loop is None or loop.closed or vnc_op not in ("SUM", "MEAN", "AMAX", "AMIN"):
        return False
    members, seen = [], set()

    def visit(p):
        if id(p) in seen or not isinstance(p, PW):
            return
        seen.add(id(p))
        for i in p.inputs:
            visit(i)
        members.append(p)

    visit(v)
    if any(m.op in INT_FAULT_ROWS and not m.compute.is_floating_point for m in members):
        return False
    meta_v = x.meta["val"]
    shape = tuple(meta_v.shape)
    ndim = len(shape)
    red = sorted({d % max(ndim, 1) for d in dims}) if dims else list(range(ndim))
    # the output seen keepdim with stride 0 along reduced dims, as make_reduction restrides it
    ost, k = [], 0
    for d in range(ndim):
        if d in red:
            ost.append(0)
            if keepdim:
                k += 1
        else:
            ost.append(out.stride()[k] * out.element_size())
            k += 1
    ist = [st * meta_v.element_size() for st in meta_v.stride()]
    as_meta = lambda t: torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device="meta")  # noqa: E731
    geo = _C._reduction_geometry(sum_like, as_meta(meta_v), as_meta(out), list(red), keepdim)
    perm = [d for d in _ti_permutation(shape, [ost, ist]) if shape[d] != 1]
    if geo is None or not perm or not any(d in red for d in perm) or \
            _coalesce([shape[d] for d in perm], [[ost[d] for d in perm], [ist[d] for d in perm]]) != \
            _coalesce(geo[0], geo[1]):
        return False
    loads = []
    for m in members:
        for i in m.inputs:
            if isinstance(i, Load) and not any(i.ref is l.ref for l in loads):
                loads.append(i)
    if not loads:  # values that read no tensor (ones_like(x).sum()): the reduction runs alone
        return False
    out_ref = lw.fresh_ref(out)
    lstrides = []
    for l in loads:
        bst = broadcast_strides(l.ref, shape)
        lstrides.append([bst[d] * l.ref.dtype.itemsize for d in perm])
    first_red = next(j for j, d in enumerate(perm) if d in red)
    inner = [st[first_red] // l.ref.dtype.itemsize for st, l in zip(lstrides, loads)]
    step = FusedReduce(vnc_op, name, out_ref, v, members, loads, [shape[d] for d in perm],
                       [[ost[d] for d in perm]] + lstrides, inner)
    lw.prog.steps.append(step)
    lw.absorbed[node] = loop  # the reduction takes the value from the group: not stored for it
    lw.values[node] = out_ref
    return True


def _ti_permutation(shape, strides):
    """The order of dims (innermost first) TensorIterator::reorder_dimensions gives a reduction
    whose operands have these byte strides (operand 0 the output, stride 0 along reduced
    dims): reduced dims first, then by stride, ties by size (ATen's insertion sort)."""
    n = len(shape)
    perm = list(reversed(range(n)))

    def should_swap(d0, d1):
        for k, st in enumerate(strides):
            s0, s1 = st[d0], st[d1]
            if k == 0 and (s0 == 0) != (s1 == 0):
                return 1 if s1 == 0 else -1
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    for i in range(1, n):
        dim1 = i
        for dim0 in range(i - 1, -1, -1):
            c = should_swap(perm[dim0], perm[dim1])
            if c > 0:
                perm[dim0], perm[dim1] = perm[dim1], perm[dim0]
                dim1 = dim0
            elif c < 0:
                break
    return perm


def _coalesce(shape, strides):
    """TensorIterator's coalesce_dimensions (dims innermost first): merge a dim into the
    previous one when every operand's strides chain; size-1 dims vanish."""
    shape, strides = list(shape), [list(s) for s in strides]
    if len(shape) <= 1:
        return shape, strides
    prev = 0
    for dim in range(1, len(shape)):
        def can(d0, d1):
            if shape[d0] == 1 or shape[d1] == 1:
                return True
            return all(st[d0] * shape[d0] == st[d1] for st in strides)

        if can(prev, dim):
            if shape[prev] == 1:
                for st in strides:
                    st[prev] = st[dim]
            shape[prev] *= shape[dim]
        else:
            prev += 1
            if prev != dim:
                for st in strides:
                    st[prev] = st[dim]
                shape[prev] = shape[dim]
    return shape[:prev + 1], [st[:prev + 1] for st in strides]


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
    return f"{{(void *)({addr}), ${batch}, ${row}, ${col}, {dtype_num(ref.dtype)}}}"


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

        def emit(addr, epilogue=None):
            ro = ext.writes[0]  # fuse_row_epilogues may place the product in its epilogue's output
            code = []
            if rs is not None:  # eager: out.copy_(self.expand(out.sizes())) before the product
                code.append(c_tensor("dst", addr(ro), ro.size, ro.stride, ro.dtype))
                code.append(c_tensor("src", addr(rs), ro.size, broadcast_strides(rs, ro.size), rs.dtype))
                code.append(f'VNC_JIT_TRY(vnc_rt->copy(s, "aten::copy_", &dst, &src));')
            C = _matrix(addr(ro), ro, nd)
            if nd == 1:  # matrix @ vector: C is a column
                C = f"{{(void *)({addr(ro)}), 0, ${ro.stride[0]}, 1, {dtype_num(ro.dtype)}}}"
            code.append(f"vnc_matrix A = {_matrix(addr(ra), ra, len(ra.size))}, B_ = {_matrix(addr(rb), rb, len(rb.size))}, "
                        f"C = {C};")
            args = (f'"{name}", ${batch}, ${M}, ${N}, ${K}, {c_double(alpha)}, &A, &B_, '
                    f'{c_double(beta) if rs is not None else "0.0"}, &C')
            return code + call("gemm", args, epilogue)  # an epilogue runs on each finished tile of rows

        rows = (batch * M, N) if nd >= 2 and ro.is_contiguous() else None
        ext = Extern(name, emit, [r for r in (ra, rb, rs) if r is not None], [ro], rows=rows)
        lw.prog.steps.append(ext)
        lw.values[node] = ro
        return True

    return lower


GEMMS = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")  # Extern names of the products
LOWERINGS[aten.mm.default] = _gemm("aten::mm", False)
LOWERINGS[aten.bmm.default] = _gemm("aten::bmm", False)
LOWERINGS[aten.addmm.default] = _gemm("aten::addmm", True)
LOWERINGS[aten.baddbmm.default] = _gemm("aten::baddbmm", True)


# ---------------------------------------------------------------- neural-network kernels
# Each lowering takes the case the eager glue runs without copies or casts (contiguous
# operands of one floating dtype) and passes the runtime what the glue passes; any other case
# is left to the eager kernel.


def _rows(addr: str, ref: TRef, dim: int) -> str:
    """vnc_rows initialiser of a contiguous tensor around `dim` (nn.cpp's rows_of)."""
    size = ref.size or (1,)
    outer = 1
    for s in size[:dim]:
        outer *= s
    n = size[dim] if ref.size else 1
    inner = 1
    for s in size[dim + 1:]:
        inner *= s
    return f"{{(void *)({addr}), {dtype_num(ref.dtype)}, ${outer}, ${n}, ${inner}, ${n * inner}, ${inner}, 1}}"


def _fresh(lw, meta):
    return lw.fresh_ref(meta) if isinstance(meta, torch.Tensor) else meta


def _last_dim_rows(ref: TRef, dim: int):
    """Extern.rows of a row kernel's contiguous output reduced along `dim`: (rows, columns)
    when `dim` is the last (each kernel row is then a memory row), else None."""
    if not ref.size or dim != len(ref.size) - 1 or not ref.is_contiguous():
        return None
    return ref.numel // ref.size[-1] if ref.size[-1] else 0, ref.size[-1]


def _softmax(log: bool, name: str):
    def lower(lw, node) -> bool:
        x, dim = node.args[:2]
        out = node.meta["val"]
        rx = lw.contiguous(lw.ref(x))
        if out.dtype not in FLOATS or rx.dtype != out.dtype or not out.is_contiguous():
            return False
        d = dim % max(len(rx.size), 1)

        def emit(a, epilogue=None, prologue=None):
            ro = ext.writes[0]  # fuse_row_epilogues may place it in its epilogue's output
            return [f"vnc_rows x = {_rows(a(rx), rx, d)}, o = {_rows(a(ro), ro, d)};"] + \
                call("softmax", f'"{name}", {int(log)}, &x, &o', prologue, epilogue)

        ro = lw.fresh_ref(out)
        ext = Extern(name, emit, [rx], [ro], rows=_last_dim_rows(ro, d), row_reads=(rx,))
        lw.prog.steps.append(ext)
        lw.values[node] = ro
        return True

    return lower


def _softmax_backward(log: bool, name: str):
    def lower(lw, node) -> bool:
        g, y, dim = node.args[:3]
        out = node.meta["val"]
        rg, ry = lw.contiguous(lw.ref(g)), lw.contiguous(lw.ref(y))
        if out.dtype not in FLOATS or {rg.dtype, ry.dtype} != {out.dtype} or not out.is_contiguous():
            return False
        d = dim % max(len(rg.size), 1)

        def emit(a, epilogue=None, prologue=None):
            ro = ext.writes[0]
            return [f"vnc_rows g = {_rows(a(rg), rg, d)}, y = {_rows(a(ry), ry, d)}, o = {_rows(a(ro), ro, d)};"] + \
                call("softmax_backward", f'"{name}", {int(log)}, &g, &y, &o', prologue, epilogue)

        ro = lw.fresh_ref(out)
        ext = Extern(name, emit, [rg, ry], [ro], rows=_last_dim_rows(ro, d), row_reads=(rg, ry))
        lw.prog.steps.append(ext)
        lw.values[node] = ro
        return True

    return lower


LOWERINGS[aten._softmax.default] = _softmax(False, "aten::_softmax")
LOWERINGS[aten._log_softmax.default] = _softmax(True, "aten::_log_softmax")
LOWERINGS[aten._softmax_backward_data.default] = _softmax_backward(False, "aten::_softmax_backward_data")
LOWERINGS[aten._log_softmax_backward_data.default] = _softmax_backward(True, "aten::_log_softmax_backward_data")


def _opt_ref(lw, x):
    return lw.contiguous(lw.ref(x)) if x is not None else None


def _ptr(addr, ref):
    return f"(void *)({addr(ref)})" if ref is not None else "NULL"


def _layer_norm(lw, node) -> bool:
    x, shape, w, b, eps = node.args[:5]
    y, mean, rstd = node.meta["val"]
    rx, rw, rb = _opt_ref(lw, x), _opt_ref(lw, w), _opt_ref(lw, b)
    dt = rx.dtype
    if dt not in FLOATS or any(r is not None and r.dtype != dt for r in (rw, rb)) \
            or not all(t.is_contiguous() for t in (y, mean, rstd)):
        return False
    N = 1
    for s in shape:
        N *= s
    M = rx.numel // N if N else 0
    ry, rm, rr = lw.fresh_ref(y), lw.fresh_ref(mean), lw.fresh_ref(rstd)
    name = "aten::native_layer_norm"
    # y is writes[0], wherever fuse_row_epilogues put it
    emit = lambda a, epilogue=None, prologue=None: call(  # noqa: E731
        "layer_norm", f'"{name}", ${M}, ${N}, {dtype_num(dt)}, {_ptr(a, rx)}, {_ptr(a, rw)}, {_ptr(a, rb)}, '
                      f'{c_double(eps)}, {_ptr(a, ext.writes[0])}, {_ptr(a, rm)}, {_ptr(a, rr)}, {dtype_num(rm.dtype)}',
        prologue, epilogue)
    ext = Extern(name, emit, [r for r in (rx, rw, rb) if r is not None], [ry, rm, rr], rows=(M, N), row_reads=(rx,))
    lw.prog.steps.append(ext)
    lw.values[node] = (ry, rm, rr)
    return True


def _layer_norm_backward(lw, node) -> bool:
    dy, x, shape, mean, rstd, w, b, mask = node.args[:8]
    outs = node.meta["val"]
    rdy, rx, rm, rr, rw = (_opt_ref(lw, t) for t in (dy, x, mean, rstd, w))
    dt = rx.dtype
    if dt not in FLOATS or any(r is not None and r.dtype != dt for r in (rdy, rw)) or rm.dtype != rr.dtype or \
            rm.dtype not in (dt, torch.float32) or \
            any(isinstance(t, torch.Tensor) and not t.is_contiguous() for t in outs):
        return False
    N = 1
    for s in shape:
        N *= s
    M = rx.numel // N if N else 0
    wanted = [mask[0], mask[1] and w is not None, mask[2] and b is not None]
    res = [lw.fresh_ref(t) if want and isinstance(t, torch.Tensor) else None for want, t in zip(wanted, outs)]
    name = "aten::native_layer_norm_backward"
    emit = lambda a, epilogue=None, prologue=None: call(  # noqa: E731  (dx, when wanted, is writes[0])
        "layer_norm_backward", f'"{name}", ${M}, ${N}, {dtype_num(dt)}, {_ptr(a, rdy)}, {_ptr(a, rx)}, {_ptr(a, rm)}, '
                               f'{_ptr(a, rr)}, {dtype_num(rm.dtype)}, {_ptr(a, rw)}, '
                               f'{_ptr(a, ext.writes[0] if res[0] is not None else None)}, {_ptr(a, res[1])}, '
                               f'{_ptr(a, res[2])}', prologue, epilogue)
    ext = Extern(name, emit, [r for r in (rdy, rx, rm, rr, rw) if r is not None], [r for r in res if r is not None],
                 rows=(M, N) if res[0] is not None else None, row_reads=(rdy, rx))
    lw.prog.steps.append(ext)
    lw.values[node] = tuple(res)
    return True


LOWERINGS[aten.native_layer_norm.default] = _layer_norm
LOWERINGS[aten.native_layer_norm_backward.default] = _layer_norm_backward


def _nll_args(node):
    a = list(node.args) + [None] * 8
    return a


def _nll_loss(lw, node) -> bool:
    x, t, w, reduction, ignore = _nll_args(node)[:5]
    out, tw = node.meta["val"]
    rx, rt = _opt_ref(lw, x), _opt_ref(lw, t)
    if w is not None or rx.dtype not in FLOATS or rt.dtype != torch.int64 or \
            len(rx.size) not in (1, 2) or not out.is_contiguous():
        return False
    N, C = (rx.size[0] if len(rx.size) == 2 else 1), rx.size[-1]
    ro, rtw = lw.fresh_ref(out), lw.fresh_ref(tw)
    name = "aten::nll_loss_forward"
    emit = lambda a: [f'VNC_JIT_TRY(vnc_rt->nll_loss(s, "{name}", ${N}, ${C}, {dtype_num(rx.dtype)}, {_ptr(a, rx)}, '  # noqa: E731
                      f'(const int64_t *){_ptr(a, rt)}, NULL, {int(reduction)}, INT64_C({int(ignore)}), '
                      f'{_ptr(a, ro)}, {_ptr(a, rtw)}));']
    lw.prog.steps.append(Extern(name, emit, [rx, rt], [ro, rtw]))
    lw.values[node] = (ro, rtw)
    return True


def _nll_loss_backward(lw, node) -> bool:
    go, x, t, w, reduction, ignore, tw = _nll_args(node)[:7]
    out = node.meta["val"]
    rgo, rx, rt, rtw = _opt_ref(lw, go), lw.ref(x), _opt_ref(lw, t), _opt_ref(lw, tw)
    if w is not None or out.dtype not in FLOATS or rt.dtype != torch.int64 or \
            len(rx.size) not in (1, 2) or not out.is_contiguous() or rgo.dtype != out.dtype:
        return False
    N, C = (rx.size[0] if len(rx.size) == 2 else 1), rx.size[-1]
    go_stride = rgo.stride[0] if rgo.size else 0
    ro = lw.fresh_ref(out)
    name = "aten::nll_loss_backward"
    emit = lambda a: [f'VNC_JIT_TRY(vnc_rt->nll_loss_backward(s, "{name}", ${N}, ${C}, {dtype_num(out.dtype)}, '  # noqa: E731
                      f'{_ptr(a, rgo)}, ${go_stride}, (const int64_t *){_ptr(a, rt)}, NULL, {int(reduction)}, '
                      f'INT64_C({int(ignore)}), {_ptr(a, rtw)}, {_ptr(a, ro)}));']
    lw.prog.steps.append(Extern(name, emit, [rgo, rt, rtw], [ro]))
    lw.values[node] = ro
    return True


LOWERINGS[aten.nll_loss_forward.default] = _nll_loss
LOWERINGS[aten.nll_loss_backward.default] = _nll_loss_backward


def _embedding(lw, node) -> bool:
    w, idx = node.args[:2]
    out = node.meta["val"]
    rw, ri = _opt_ref(lw, w), _opt_ref(lw, idx)
    if len(rw.size) != 2 or ri.dtype not in (torch.int64, torch.int32) or not out.is_contiguous():
        return False
    nidx, D = ri.numel, rw.size[1]
    ro = lw.fresh_ref(out)
    flat = TRef(ro.buf, ro.dtype, (nidx, D), (D, 1), 0)
    name = "aten::index_select"  # eager's embedding is index_select of weight rows (+ a view)
    emit = lambda a: [f"vnc_rows src = {_rows(a(rw), rw, 0)}, dst = {_rows(a(flat), flat, 0)};",  # noqa: E731
                      f'VNC_JIT_TRY(vnc_rt->index_select(s, "{name}", &src, {_ptr(a, ri)}, {dtype_num(ri.dtype)}, 1, '
                      f'${nidx}, 0, &dst));']
    lw.prog.steps.append(Extern(name, emit, [rw, ri], [ro]))
    lw.values[node] = ro
    return True


def _embedding_backward(lw, node) -> bool:
    g, idx, nw, padding_idx, by_freq = node.args[:5]
    out = node.meta["val"]
    rg, ri = _opt_ref(lw, g), _opt_ref(lw, idx)
    if ri.dtype not in (torch.int64, torch.int32) or not out.is_contiguous() or rg.dtype != out.dtype:
        return False
    D = rg.size[-1]
    nidx = ri.numel
    ro = lw.fresh_ref(out)
    flat = TRef(rg.buf, rg.dtype, (nidx, D), (D, 1), rg.offset)
    name = "aten::embedding_dense_backward"
    emit = lambda a: [f"vnc_rows dst = {_rows(a(ro), ro, 0)}, src = {_rows(a(flat), flat, 0)};",  # noqa: E731
                      f'VNC_JIT_TRY(vnc_rt->index_add_rows(s, "{name}", &dst, {_ptr(a, ri)}, {dtype_num(ri.dtype)}, '
                      f'${nidx}, &src, INT64_C({int(padding_idx)}), {int(bool(by_freq))}, 1));']
    lw.prog.steps.append(Extern(name, emit, [rg, ri], [ro]))
    lw.values[node] = ro
    return True


LOWERINGS[aten.embedding.default] = _embedding
LOWERINGS[aten.embedding_dense_backward.default] = _embedding_backward


def _arange(lw, node) -> bool:
    out = node.meta["val"]
    if node.target == aten.arange.default:
        start, end, step = 0, node.args[0], 1
    else:
        start, end = node.args[:2]
        step = node.args[2] if len(node.args) > 2 else node.kwargs.get("step", 1)
    if out.device.type != "neuron" or out.dtype.is_complex or out.dtype == torch.bool:
        return False
    ro = lw.fresh_ref(out)
    name = "aten::arange"
    emit = lambda a: [c_tensor("t", a(ro), ro.size, ro.stride, ro.dtype),  # noqa: E731
                      f'VNC_JIT_TRY(vnc_rt->arange(s, "{name}", &t, {c_double(start)}, {c_double(step)}, '
                      f'INT64_C({int(start)}), INT64_C({int(step)})));']
    lw.prog.steps.append(Extern(name, emit, [], [ro]))
    lw.values[node] = ro
    return True


LOWERINGS[aten.arange.default] = _arange
LOWERINGS[aten.arange.start] = _arange
LOWERINGS[aten.arange.start_step] = _arange


def _cat(lw, node) -> bool:
    tensors = node.args[0]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    out = node.meta["val"]
    if out.device.type != "neuron":
        return False
    refs = [lw.ref(t) for t in tensors]
    d = dim % len(out.shape)
    ro = lw.fresh_ref(out)
    pieces, off = [], 0
    for r in refs:
        if len(r.size) == 1 and r.size[0] == 0 and len(out.shape) != 1:
            continue  # legacy empty inputs
        n = r.size[d]
        if n:
            size = list(ro.size)
            size[d] = n
            pieces.append((TRef(ro.buf, ro.dtype, tuple(size), ro.stride, off * ro.stride[d]), r))
        off += n

    def emit(a):
        code = []
        for k, (dst, src) in enumerate(pieces):
            code.append("{")
            code.append("  " + c_tensor("dst", a(dst), dst.size, dst.stride, dst.dtype))
            code.append("  " + c_tensor("src", a(src), src.size, src.stride, src.dtype))
            code.append('  VNC_JIT_TRY(vnc_rt->copy(s, "aten::copy_", &dst, &src));')
            code.append("}")
        return code

    lw.prog.steps.append(Extern("aten::cat", emit, refs, [ro]))
    lw.values[node] = ro
    return True


LOWERINGS[aten.cat.default] = _cat


# ---------------------------------------------------------------- attention

def _rows_ok(size, stride) -> bool:
    """transformer.cpp's f32_rows: the kernel reads rows in place when they are contiguous."""
    return (stride[3] == 1 or size[3] == 1) and (size[2] == 1 or stride[2] >= size[3])


def _operand(addr: str, ref: TRef) -> str:
    row = ref.size[3] if ref.size[2] == 1 else ref.stride[2]
    return f"{{(float *)({addr}), ${ref.stride[0]}, ${ref.stride[1]}, ${row}}}"


def _attention_args(a, rq, rk, rv, causal, scale, rb=None) -> str:
    """vnc_attention as transformer.cpp's attention_args; a float32 additive bias is read at its
    strides expanded to (B, H, L, S) (bias_of's expand)."""
    B, H, L, E = rq.size
    S, Ev = rk.size[2], rv.size[3]
    sc = c_double(scale if scale is not None else 1.0 / (E ** 0.5))
    bias = ".bias = NULL"
    if rb is not None:
        bst = ", ".join(f"${v}" for v in broadcast_strides(rb, (B, H, L, S)))
        bias = f".bias = (const float *)({a(rb)}), .bias_strides = {{{bst}}}"
    return (f"vnc_attention at = {{.B = ${B}, .H = ${H}, .L = ${L}, .S = ${S}, .E = ${E}, .Ev = ${Ev}, .scale = {sc}, "
            f".causal = {int(bool(causal))}, .q = {_operand(a(rq), rq)}, .k = {_operand(a(rk), rk)}, "
            f".v = {_operand(a(rv), rv)}, {bias}}};")


def _bias_ref(lw, bias, q_size, k_size):
    """The attention bias as the fused kernel reads it, or None when there is none; False
    when it is not a float32 tensor broadcastable to (B, H, L, S) (then eager's kernel runs)."""
    if bias is None:
        return None
    rb = lw.ref(bias)
    full = (q_size[0], q_size[1], q_size[2], k_size[2])
    if rb.dtype != torch.float32 or len(rb.size) > 4 or any(
            n not in (1, f) for n, f in zip(rb.size[::-1], full[::-1])):
        return False
    return rb


def _sdpa_ok(rq, rk, *refs) -> bool:
    """float32 4-D operands whose rows the kernel reads in place, as many key as query heads
    (grouped-query attention runs eager's kernel, which sums the key/value gradient groups)."""
    return rk.size[1] == rq.size[1] and all(
        r.dtype == torch.float32 and len(r.size) == 4 and _rows_ok(r.size, r.stride) for r in (rq, rk, *refs))


def _sdpa(lw, node) -> bool:
    q, k, v = node.args[:3]
    a = list(node.args) + [None] * 8
    bias, dropout, causal = a[3], node.kwargs.get("dropout_p", a[4] or 0.0), node.kwargs.get("is_causal", a[5] or False)
    scale = node.kwargs.get("scale", a[7])
    metas = node.meta["val"]
    rq, rk, rv = lw.ref(q), lw.ref(k), lw.ref(v)
    out, lse = metas[0], metas[1]
    if dropout or not _sdpa_ok(rq, rk, rv) or out.dtype != torch.float32 or \
            not _rows_ok(tuple(out.shape), out.stride()) or not lse.is_contiguous():
        return False
    rb = _bias_ref(lw, bias, rq.size, rk.size)
    if rb is False:
        return False
    ro, rl = lw.fresh_ref(out), lw.fresh_ref(lse)
    rest = [_fresh(lw, m) for m in metas[2:]]
    name = "aten::_scaled_dot_product_fused_attention_overrideable"
    emit = lambda ad: [_attention_args(ad, rq, rk, rv, causal, scale, rb),  # noqa: E731
                       f"vnc_attn_operand o = {_operand(ad(ro), ro)};",
                       f'VNC_JIT_TRY(vnc_rt->attention_forward(s, "{name}", &at, &o, (float *){_ptr(ad, rl)}));']
    lw.prog.steps.append(Extern(name, emit, [rq, rk, rv] + ([rb] if rb else []), [ro, rl]))
    lw.values[node] = tuple([ro, rl] + rest)
    return True


def _cat_pieces(lw, node, n, ok):
    """Where the first `n` outputs of `node` (a kernel that writes strided outputs) can go: the
    slices of their cat's memory, allocated now, when each output's only use is that one cat,
    which takes them alone and in order (the QKV gradient, cat([dq, dk, dv], -1)), and
    `ok(size, stride)` accepts every slice; the cat then copies nothing (`Lowerer.placed`).
    None otherwise."""
    gets = {u.args[1]: u for u in node.users if u.op == "call_function" and u.target is operator.getitem}
    items = [gets.get(i) for i in range(n)]
    if any(g is None or len(g.users) != 1 for g in items):
        return None
    cat = next(iter(items[0].users))
    if cat.target is not aten.cat.default or list(cat.args[0]) != items:
        return None
    out = cat.meta["val"]
    dim = (cat.args[1] if len(cat.args) > 1 else cat.kwargs.get("dim", 0)) % out.dim()
    metas = [g.meta["val"] for g in items]
    if any(m.dtype != out.dtype or m.dim() != out.dim() for m in metas):
        return None
    sizes = [tuple(m.shape[dim] if d == dim else s for d, s in enumerate(out.shape)) for m in metas]
    if not all(ok(size, tuple(out.stride())) for size in sizes):
        return None
    rc = lw.fresh_ref(out)
    lw.placed[cat] = rc
    offsets = [sum(m.shape[dim] for m in metas[:i]) * rc.stride[dim] for i in range(n)]
    return [TRef(rc.buf, rc.dtype, size, rc.stride, off) for size, off in zip(sizes, offsets)]


def _sdpa_backward(lw, node) -> bool:
    go, q, k, v, bias, mask, out, lse = node.args[:8]
    a = list(node.args) + [None] * 20
    dropout, causal = a[12], a[13]
    scale = node.kwargs.get("scale", a[16])
    metas = node.meta["val"]
    rgo, rq, rk, rv, ro, rl = (lw.ref(x) for x in (go, q, k, v, out, lse))
    if dropout or not _sdpa_ok(rq, rk, rv, rgo, ro) or rl.dtype != torch.float32 or \
            not rl.is_contiguous() or any(not _rows_ok(tuple(m.shape), m.stride()) for m in metas[:3]):
        return False
    rb = _bias_ref(lw, bias, rq.size, rk.size)
    if rb is False or (rb is not None and mask[3]):  # the bias gradient: eager's kernel
        return False
    # the kernel writes rows at any strides: straight into the QKV gradient's cat when it can
    dq, dk, dv = _cat_pieces(lw, node, 3, _rows_ok) or (lw.fresh_ref(m) for m in metas[:3])
    name = "aten::_scaled_dot_product_fused_attention_overrideable_backward"
    emit = lambda ad: [_attention_args(ad, rq, rk, rv, causal, scale, rb),  # noqa: E731
                       f"vnc_attn_operand go = {_operand(ad(rgo), rgo)}, o = {_operand(ad(ro), ro)}, "
                       f"dq = {_operand(ad(dq), dq)}, dk = {_operand(ad(dk), dk)}, dv = {_operand(ad(dv), dv)};",
                       f'VNC_JIT_TRY(vnc_rt->attention_backward(s, "{name}", &at, &go, &o, (const float *){_ptr(ad, rl)}, '
                       f'&dq, &dk, &dv, NULL));']
    lw.prog.steps.append(Extern(name, emit, [rgo, rq, rk, rv, ro, rl] + ([rb] if rb else []), [dq, dk, dv]))
    lw.values[node] = (dq, dk, dv, None)
    return True


LOWERINGS[aten._scaled_dot_product_fused_attention_overrideable.default] = _sdpa
LOWERINGS[aten._scaled_dot_product_fused_attention_overrideable_backward.default] = _sdpa_backward


# ---------------------------------------------------------------- backward of views
# select_backward / slice_backward: zeros of the input's shape with the gradient written into
# the view the forward took (two loops: fill, then a copy into the view's strides).


def _view_backward(view):
    def lower(lw, node) -> bool:
        from .ir import Const, Load, Loop, PW

        grad = node.args[0]
        out = node.meta["val"]
        if out.device.type != "neuron" or out.dtype.is_complex:
            return False
        rg = lw.ref(grad)
        ro = lw.fresh_ref(out)
        m = view(torch.empty_strided(ro.size, ro.stride, dtype=ro.dtype, device="meta"), *node.args[2:])
        dst = TRef(ro.buf, ro.dtype, tuple(m.shape), tuple(m.stride()), m.storage_offset())
        zero = PW("fill", [Const(0, ro.dtype, via=ro.dtype)], ro.dtype, ro.dtype, size=ro.size)
        copy = PW("cast", [Load(rg)], ro.dtype, ro.dtype, size=dst.size)
        for pw, ref in ((zero, ro), (copy, dst)):
            lp = Loop(ref.size, [pw], [(pw, ref)], closed=True)
            lw.prog.steps.append(lp)
        lw.values[node] = ro
        return True

    return lower


LOWERINGS[aten.select_backward.default] = _view_backward(lambda t, dim, index: t.select(dim, index))
LOWERINGS[aten.slice_backward.default] = _view_backward(
    lambda t, dim, start, end, step: aten.slice.Tensor(t, dim, start, end, step))


# ---------------------------------------------------------------- collectives
# torch.distributed._functional_collectives in a graph (_c10d_functional.<op>, wait_tensor)
# are calls into the `neuron` process group (csrc/distributed.cpp), made at their place in the
# program like any op the compiler does not generate: the C segment before a collective is
# launched first, so the collective's producer ticket (the tasks enqueued on the stream when it
# is issued) covers the segments computing its inputs, as for an eager collective. Every rank
# issues the graph's collectives in program order; wait_tensor makes the stream wait for the
# collective (a runtime hold), so the segments after it read the result, and the computation
# placed between a collective and its wait overlaps with the communication.


def _collective(lw, node) -> bool:
    """An Eager step recorded in ``prog.collective_ops``; an in-place collective (all_reduce_,
    all_gather_into_tensor_out, ...) first flushes the open fusion groups that use the tensors
    it writes (they read the values from before the collective)."""
    from torch.utils._pytree import tree_leaves

    written = set()
    for i, arg in enumerate(node.target._schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            a = node.args[i] if i < len(node.args) else node.kwargs.get(arg.name)
            for x in tree_leaves(a):
                v = lw.values.get(x) if isinstance(x, torch.fx.Node) else None
                for r in (v if isinstance(v, (tuple, list)) else [v]):
                    if isinstance(r, TRef):
                        written.add(id(r.buf))
    for lp in list(lw.open):
        if any(id(r.buf) in written for r in lp.refs() + [r for _, r in lp.write_backs]):
            lw.close(lp)
    lw.eager(node, collective=True)
    return True


def _collective_ops():
    for full in torch._C._dispatch_get_all_op_names():
        ns, _, name = full.partition("::")
        if ns in ("_c10d_functional", "_c10d_functional_autograd"):
            packet = getattr(getattr(torch.ops, ns), name)
            yield from (getattr(packet, ov) for ov in packet.overloads())


COLLECTIVES = frozenset(_collective_ops())
for _op in COLLECTIVES:
    LOWERINGS[_op] = _collective
