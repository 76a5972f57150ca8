"""Lowering: an ATen-IR FX graph (from AOTAutograd) to the kernel IR of ``ir.py``.

Walks the nodes in order. Pointwise ops become PW expressions that join the open fusion group
(``Loop``) of their shape; a group closes when something outside it needs one of its values
as memory (a reduction, a runtime kernel, a view, a read at another shape, a graph output),
and it stores exactly the values used outside it. Views fold into the strides and offset of
a ``TRef``. Reductions, GEMMs and the runtime's other kernels become C calls (``externs.py``);
any other op with a native eager kernel runs as an ``Eager`` step. An op that would only run
through the CPU fallback raises ``UnsupportedOp``.
"""
from __future__ import annotations

import math
import operator

import torch
import torch.fx
from torch.utils._pytree import tree_leaves, tree_map

from . import externs
from .externs import broadcast_strides, c_tensor
from .ir import C_STEPS, Buffer, Const, Eager, Extern, Load, Loop, PW, TRef, CLASS_DTYPE, type_class, written_refs
from .pointwise import RULES, scalar_kind

aten = torch.ops.aten


class UnsupportedOp(RuntimeError):
    """An op of the graph has no native neuron kernel, no lowering and no decomposition."""

    def __init__(self, node: torch.fx.Node, why: str):
        self.node = node
        self.op_name = _op_name(node.target)
        where = user_frame(node)
        super().__init__(f"torch.compile(backend='neuron'): {self.op_name} {why}"
                         + (f"\n  at {where}" if where else "")
                         + "\nPass options={'fallback_execution': True} to torch.compile (or set "
                           "TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION=0) to run such graphs eagerly.")


def user_frame(node: torch.fx.Node) -> str:
    """The innermost frame of the node's stack trace outside torch (the user's source line)."""
    trace = node.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in trace.splitlines()]
    frames = [(ln, lines[i + 1] if i + 1 < len(lines) else "") for i, ln in enumerate(lines) if ln.startswith("File ")]
    for head, code in reversed(frames):
        if "/torch/" not in head and "torch_neuronx/compiler" not in head:
            return f"{head}: {code}" if code else head
    return frames[-1][0] if frames else ""


def _op_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.name + (f".{target._overloadname}" if target._overloadname != "default" else "")
    return getattr(target, "__name__", str(target))


_EW_SUPPORT = None


def _ew_support():
    global _EW_SUPPORT
    if _EW_SUPPORT is None:
        from .. import _C

        _EW_SUPPORT = {name: sup for name, _, sup in _C._ew_table()}
    return _EW_SUPPORT


_NATIVE_KEYS = ("PrivateUse1", "CompositeExplicitAutograd", "CompositeImplicitAutograd")


def has_native_kernel(op) -> bool:
    """True when eager runs `op` on neuron without the CPU fallback: a PrivateUse1 kernel or a
    composite kernel (which calls other ops). A structured op's generated functional kernel
    (CompositeExplicitAutogradNonFunctional) runs its out= overload, so counts only when that
    overload runs natively (lgamma: no, its out= takes the fallback; view_copy ops: composites)."""
    if not isinstance(op, torch._ops.OpOverload):
        return True
    name = op.name()
    has = torch._C._dispatch_has_kernel_for_dispatch_key
    if any(has(name, k) for k in _NATIVE_KEYS):
        return True
    if not has(name, "CompositeExplicitAutogradNonFunctional"):
        return False
    outs = _out_overloads(op)
    return not outs or any(has(o.name(), k) for o in outs for k in _NATIVE_KEYS)


def _out_overloads(op) -> list:
    """The out= overloads of `op`'s functional form (lgamma_ and lgamma: lgamma.out;
    linalg_cholesky_ex: linalg_cholesky_ex.L): same non-out arguments, kwarg-only written outs."""
    packet = getattr(torch.ops.aten, op.overloadpacket.__name__.rstrip("_"), None)
    if packet is None:
        return []
    want = [(a.name, str(a.type)) for a in op._schema.arguments if not a.is_out]
    found = []
    for ov in packet.overloads():
        o = getattr(packet, ov)
        args = o._schema.arguments
        if any(a.is_out for a in args) and [(a.name, str(a.type)) for a in args if not a.is_out] == want:
            found.append(o)
    return found


# Views that set a lazy bit (conjugate, negative) change the values a reader sees: they are
# not strides to fold but the physical op, computed by its eager kernel.
_LAZY_BIT_VIEWS = {aten._conj.default: aten.conj_physical.default, aten._neg_view.default: aten.neg.default}


def _is_view(op) -> bool:
    if op in _LAZY_BIT_VIEWS:
        return False
    if op in (aten._unsafe_view.default,):
        return True
    if not isinstance(op, torch._ops.OpOverload):
        return False
    rets = op._schema.returns
    args = op._schema.arguments
    return bool(rets) and bool(args) and args[0].alias_info is not None and not args[0].alias_info.is_write and \
        all(r.alias_info is not None and not r.alias_info.is_write for r in rets)


# Runtime assertions Dynamo adds on symbolic sizes: checked when the graph was specialised.
_ASSERTS = {getattr(aten, n).default for n in ("_assert_scalar", "sym_constrain_range_for_size", "sym_constrain_range")
            if hasattr(aten, n)}


def _assert_async(cond, assert_msg="Expected Tensor with single nonzero value, but got zero"):
    """``aten::_assert_async`` (F.one_hot's range check, a user's torch._assert_async) as an
    eager step: the condition is read on the host when the step runs, and a false one raises
    eager's error there."""
    if not bool(cond.item()):
        raise RuntimeError(assert_msg)


_HOST_CHECKS = {aten._assert_async.default: _assert_async, aten._assert_async.msg: _assert_async}


class Program:
    """The lowered graph: ``steps`` in order, ``buffers``, ``inputs`` (placeholder buffers by
    argument position; None for non-tensor arguments), ``outputs`` (pytree of TRef / value)."""

    def __init__(self):
        self.steps = []
        self.buffers = []
        self.inputs = []
        self.outputs = None
        self.eager_ops = []  # neuron ops run through their eager kernels
        self.host_ops = []  # ops on CPU tensors inside the graph (after .item(), on CPU scalars)
        self.collective_ops = []  # c10d functional collectives and waits (externs._collective)
        self.consts = {}  # buffer id -> tensor held by the graph
        self.donated = set()  # input positions whose memory the graph may reuse (AOTAutograd's)
        # a backward graph: its inputs (saved activations) are let go of as it runs, so its C
        # steps are split into several segments (codegen.segments)
        self.releases_inputs = False
        self.row_epilogues = []  # names of the Externs that run a consumer group (fuse_row_epilogues)
        self.row_prologues = []  # ... that run a producer group (fuse_row_prologues)
        self.device = None

    @property
    def fused_kernels(self) -> int:
        return sum(1 for s in self.steps if isinstance(s, Loop)) + len(self.row_epilogues) + len(self.row_prologues)

    @property
    def gemm_epilogues(self) -> int:
        """Row epilogues run by GEMMs (the rest run in softmax / layer norm kernels)."""
        return sum(1 for n in self.row_epilogues if n in externs.GEMMS)

    @property
    def c_steps(self) -> int:
        return sum(1 for s in self.steps if isinstance(s, C_STEPS))


class Lowerer:
    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.prog = Program()
        self.values = {}
        self.open = []  # open fusion groups (Loop), oldest first
        self.placed = {}  # node -> TRef: a value its inputs' producer already wrote (externs._cat_pieces)
        self.loop_of = {}  # PW -> Loop
        self.nodes_of = {}  # id(PW) -> fx nodes whose value it is
        self.meta_of = {}  # id(PW) -> its fake tensor (layout of a stored value)
        self.written_back = {}  # copy_ node -> the group writing its value into the input
        self.absorbed = {}  # reduction node -> the group whose chain it recomputes (FusedReduce)
        self.promoted = {}  # node -> its host scalars are computed on the device (_to_device)
        self.host_write_backs = []  # (host input TRef, host value TRef) of copy_ nodes
        self.cur_shape = None

    # ---------------------------------------------------------------- buffers and refs

    def new_buffer(self, kind, dtype, size=(), stride=(), input_index=-1) -> Buffer:
        b = Buffer(len(self.prog.buffers), kind, dtype, tuple(size), tuple(stride), input_index)
        self.prog.buffers.append(b)
        return b

    def fresh_ref(self, meta: torch.Tensor, kind="alloc") -> TRef:
        b = self.new_buffer(kind, meta.dtype, meta.shape, meta.stride())
        return TRef(b, meta.dtype, tuple(meta.shape), tuple(meta.stride()), 0)

    def ref(self, x) -> TRef:
        """The memory of an FX node's value or of a value (materialising a pending pointwise
        value)."""
        v = self.values[x] if isinstance(x, torch.fx.Node) else x
        if isinstance(v, PW):
            loop = self.loop_of[v]
            if not loop.closed:
                self.close(loop)
            return self._stored(loop, v)
        if isinstance(v, TRef):
            return v
        raise TypeError(f"expected a tensor, got {type(v).__name__}")

    def contiguous(self, ref: TRef) -> TRef:
        """`ref`, or a contiguous copy of it (what the eager glue's .contiguous() does)."""
        if ref.is_contiguous():
            return ref
        pw = PW("cast", [Load(ref)], ref.dtype, ref.dtype, size=ref.size)
        loop = Loop(ref.size, [pw], closed=True)
        loop.stores.append((pw, self.fresh_ref(torch.empty(ref.size, dtype=ref.dtype, device="meta"))))
        self.prog.steps.append(loop)
        return loop.stores[0][1]

    @staticmethod
    def _stored(loop, v) -> TRef:
        for m, r in loop.stores:
            if m is v:
                return r
        raise AssertionError("value of a closed fusion group was not stored")

    # ---------------------------------------------------------------- pointwise operands

    def ew_supported(self, row: str, compute: torch.dtype) -> bool:
        if compute not in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.int64, torch.int32,
                           torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64):
            return False
        sup = _ew_support().get(row)
        return bool(sup and sup.get(CLASS_DTYPE[type_class(compute)]))

    def val(self, x, compute: torch.dtype):
        """An operand of a pointwise op being lowered at shape ``self.cur_shape``: an FX node,
        a value (an element of a list-valued node), or a Python number."""
        if isinstance(x, (Const, Load)):
            return x
        v = self.values[x] if isinstance(x, torch.fx.Node) else x
        if isinstance(v, PW) and v in self.loop_of:
            loop = self.loop_of[v]
            if not loop.closed and tuple(v.size) == self.cur_shape:
                return v
            return Load(self.ref(v))
        if isinstance(v, PW):  # built by the rule being lowered
            return v
        if isinstance(v, TRef):
            return Load(v)
        if isinstance(x, (bool, int, float, complex)):
            return Const(x, scalar_kind(compute))
        raise TypeError(f"unsupported pointwise operand {x!r}")

    def add_pointwise(self, root: PW, node: torch.fx.Node, meta=None):
        """Adds the PW expression `root` (the value of `node`, or of one element of a
        list-valued node: `meta` is then that element's fake tensor) to the open group of its
        shape: the group of the pending values it reads (groups it joins are merged), or a new
        group — independent chains are not fused side by side (a loop over many unrelated
        streams runs slower than separate loops)."""
        shape = tuple(root.size)
        new, seen = [], set()

        def visit(p):  # the rule's new PW nodes, operands first
            if p in self.loop_of or id(p) in seen:
                return
            seen.add(id(p))
            for i in p.inputs:
                if isinstance(i, PW):
                    visit(i)
            new.append(p)

        visit(root)
        for p in new:
            # an operand whose group closed while the rule ran was stored: read it from memory
            p.inputs = [Load(self._stored(self.loop_of[i], i)) if isinstance(i, PW) and i in self.loop_of and self.loop_of[i].closed else i
                        for i in p.inputs]
        joined = []
        for p in new:
            for i in p.inputs:
                lp = self.loop_of.get(i) if isinstance(i, PW) else None
                if lp is not None and not any(lp is j for j in joined):
                    joined.append(lp)
        if joined:
            loop = joined[0]
            for other in joined[1:]:  # independent so far: one group now
                for m in other.members:
                    self.loop_of[m] = loop
                loop.members += other.members
                loop.write_backs += other.write_backs
                for node in [n for n, lp in self.written_back.items() if lp is other]:
                    self.written_back[node] = loop
                self.open.remove(other)
        else:
            loop = Loop(shape)
            self.open.append(loop)
        for p in new:
            loop.members.append(p)
            self.loop_of[p] = loop
        self.nodes_of.setdefault(id(root), []).append(node)
        self.meta_of[id(root)] = node.meta["val"] if meta is None else meta
        if meta is None:
            self.values[node] = root

    def close(self, loop: Loop):
        """Emits the group as a step here; stores each value used outside it."""
        loop.closed = True
        if any(loop is lp for lp in self.open):
            self.open.remove(loop)
        members = set(map(id, loop.members))

        def inside(u):  # the user's value (or, for a list, one of its elements) is in the group
            if u in self.written_back:  # a copy_ into an input, done by this group's write-back
                return self.written_back[u] is loop
            if u in self.absorbed:  # a fused reduction recomputing the value from the group's chain
                return self.absorbed[u] is loop
            v = self.values.get(u)
            return any(id(e) in members for e in v) if isinstance(v, (tuple, list)) else id(v) in members

        def reads(u, m):  # (a getitem of a _foreach_ op's other element does not read m)
            return u.target is not operator.getitem or not isinstance(self.values.get(u), PW) or self.values[u] is m

        for m in loop.members:
            nodes = self.nodes_of.get(id(m), [])
            if any(not inside(u) for n in nodes for u in n.users if reads(u, m)):
                loop.stores.append((m, self.fresh_ref(self.meta_of[id(m)])))
        loop.stores += loop.write_backs
        if loop.stores:
            self.prog.steps.append(loop)

    def close_all(self):
        for loop in list(self.open):
            self.close(loop)

    # ---------------------------------------------------------------- the walk

    def run(self) -> Program:
        nplace = 0
        for node in self.gm.graph.nodes:
            if node.op == "placeholder":
                self.placeholder(node, nplace)
                nplace += 1
            elif node.op == "call_function":
                self.call(node)
            elif node.op == "output":
                self.output(node)
            elif node.op == "get_attr":
                self.constant(node)
            else:
                raise UnsupportedOp(node, f"(FX op {node.op}) is not supported by the neuron compiler")
        return self.prog

    def placeholder(self, node, index):
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            if any(not isinstance(s, int) for s in val.shape) or any(not isinstance(s, int) for s in val.stride()):
                raise DynamicShapes()
            b = self.new_buffer("input", val.dtype, val.shape, val.stride(), input_index=index)
            self.values[node] = TRef(b, val.dtype, tuple(val.shape), tuple(val.stride()), 0)
            self.prog.inputs.append(b)
            if val.device.type == "neuron" and self.prog.device is None:
                self.prog.device = val.device
        else:
            if isinstance(val, torch.SymInt):
                raise DynamicShapes()
            self.values[node] = val
            self.prog.inputs.append(None)

    def constant(self, node):
        """A tensor the graph holds (a constant lifted by tracing): a buffer of its own."""
        val = getattr(self.gm, node.target)
        if not isinstance(val, torch.Tensor):
            self.values[node] = val
            return
        b = self.new_buffer("const", val.dtype, val.shape, val.stride())
        self.prog.consts[b.id] = val
        self.values[node] = TRef(b, val.dtype, tuple(val.shape), tuple(val.stride()), 0)

    def call(self, node):
        target = node.target
        out = node.meta.get("val")
        # sizes and other Python numbers (a specialised symbolic graph): fold into the users
        node.args, node.kwargs = tree_map(self._number_of, (node.args, node.kwargs))
        if isinstance(out, (bool, int, float)) and not isinstance(out, torch.SymInt):
            self.values[node] = out
            return
        if target in _ASSERTS:
            return
        if node in self.placed:
            self.values[node] = self.placed.pop(node)
            return
        if target is operator.getitem:
            v = self.values[node] = self.values[node.args[0]][node.args[1]]
            if isinstance(v, PW):
                self.nodes_of[id(v)].append(node)
            return
        if isinstance(out, torch.Tensor) and self.prog.device is None and out.device.type == "neuron":
            self.prog.device = out.device
        if target in (aten.detach.default, aten.alias.default, aten.lift_fresh.default) and \
                isinstance(self.values.get(node.args[0]), (TRef, PW)):
            v = self.values[node] = self.values[node.args[0]]
            if isinstance(v, PW):
                self.nodes_of[id(v)].append(node)
            return
        if isinstance(target, torch._ops.OpOverload) and target.__name__.startswith("_foreach_") and \
                self.foreach(node):
            return
        if target is aten.copy_.default and self.copy_into_input(node):
            return
        rule = RULES.get(target)
        if rule is not None and isinstance(out, torch.Tensor) and (out.device.type == "neuron" or self._to_device(node)) \
                and _cpu_accepts(node):
            self.cur_shape = tuple(out.shape)
            pw = rule(self, node, out)
            self.cur_shape = None
            if pw is not None:
                self.add_pointwise(pw, node)
                return
        if _is_view(target) and self.view(node):
            return
        lower = externs.LOWERINGS.get(target)
        if lower is not None and not _host_only(node) and lower(self, node):
            return
        if target in _HOST_CHECKS:
            self.eager(node, fn=_HOST_CHECKS[target], name=_op_name(target))
            return
        physical = _LAZY_BIT_VIEWS.get(target)
        self.eager(node, fn=physical, name=_op_name(physical) if physical else None)

    def foreach(self, node) -> bool:
        """``_foreach_<op>`` as the single-tensor op's rule per element: the elements join the
        fusion groups of their shapes (an optimizer step becomes one loop per parameter shape)."""
        single = foreach_single(node.target)
        outs = node.meta.get("val")
        if single is None or not isinstance(outs, (list, tuple)) or \
                any(not isinstance(o, torch.Tensor) for o in outs) or \
                (any(o.device.type != "neuron" for o in outs) and not self._to_device(node)):
            return False
        rule = RULES[single[0]]
        n = len(outs)
        def as_list(a):  # a Tensor[] argument: a list of nodes, or a node whose value is a list
            if isinstance(a, torch.fx.Node) and isinstance(self.values.get(a), (list, tuple)):
                return list(self.values[a])
            if isinstance(a, (list, tuple)) and len(a) == n and all(isinstance(e, torch.fx.Node) for e in a):
                return a
            return None

        lists = [as_list(a) for a in node.args]
        pws = []
        for i in range(n):
            args = [lst[i] if lst is not None else a for a, lst in zip(node.args, lists)]
            args, extra = single[1](args, i)
            stub = _Stub(args, {**node.kwargs, **extra}, outs[i])
            self.cur_shape = tuple(outs[i].shape)
            pw = rule(self, stub, outs[i])
            self.cur_shape = None
            if pw is None:
                return False  # nothing was added yet: the whole op runs eagerly
            pws.append(pw)
        for pw, meta in zip(pws, outs):
            self.add_pointwise(pw, node, meta)
        self.values[node] = tuple(pws)
        return True

    def _to_device(self, node) -> bool:
        """Whether `node`, a pointwise op on host scalars (0-dim CPU float32/16 tensors, or a foreach
        op's list of them: Adam's bias corrections from its CPU step counts), runs in the
        device's loops instead of as a host op: when every use of its value (through getitem)
        is a pointwise op with a device result or another such node. Its value then never
        reaches the host, so where it is computed is not observable; the host scalars it reads
        are copied to the device as any host input that generated code reads."""
        if node in self.promoted:
            return self.promoted[node]
        self.promoted[node] = False  # (while its users are checked)
        val = node.meta.get("val")
        vals = val if isinstance(val, (list, tuple)) else [val]
        target = node.target
        ok = bool(vals) and all(isinstance(v, torch.Tensor) and v.device.type == "cpu" and v.dim() == 0 and
                                v.dtype in _DEVICE_SCALAR_DTYPES for v in vals) and _pointwise(target)

        def device_use(u) -> bool:
            if u.op != "call_function":
                return False
            if u.target is operator.getitem:
                return all(device_use(w) for w in u.users)
            out = u.meta.get("val")
            outs = out if isinstance(out, (list, tuple)) else [out]
            on_device = bool(outs) and all(isinstance(o, torch.Tensor) and o.device.type == "neuron" for o in outs)
            return (_pointwise(u.target) and on_device) or self._to_device(u)

        self.promoted[node] = ok and all(device_use(u) for u in node.users)
        return self.promoted[node]

    def copy_into_input(self, node) -> bool:
        """``copy_(input, value)`` (an input mutation kept in an inference graph): the value's
        group writes it straight into the input's memory, else a runtime copy does."""
        dst_node, src = node.args[:2]
        dst = self.values.get(dst_node)
        if not isinstance(dst, TRef) or dst.buf.kind != "input":
            return False
        v = self.values[src] if isinstance(src, torch.fx.Node) else src
        on_host = dst_node.meta["val"].device.type != "neuron"
        if on_host and not (isinstance(v, TRef) and src.meta["val"].device.type == "cpu"):
            return False  # (a device value into a host input: an eager step)
        self.values[node] = dst
        if on_host:  # (an optimizer's CPU step counts): one host copy after every C step, see output()
            self.host_write_backs.append((dst, v))
            return True
        for lp in list(self.open):  # earlier readers of the input go first
            if lp is not self.loop_of.get(v) and any(r.buf is dst.buf for r in lp.refs()):
                self.close(lp)
        loop = self.loop_of.get(v) if isinstance(v, PW) else None
        same_layout = loop is not None and all(r.buf is not dst.buf or (r.stride, r.offset) == (dst.stride, dst.offset)
                                               for r in loop.refs())
        if loop is not None and not loop.closed and tuple(v.size) == dst.size and v.dtype == dst.dtype and same_layout:
            loop.write_backs.append((v, dst))  # each element is read before it is written
            self.written_back[node] = loop
            return True
        src_ref = self.ref(src)
        emit = lambda a: [c_tensor("dst", a(dst), dst.size, dst.stride, dst.dtype),  # noqa: E731
                          c_tensor("src", a(src_ref), dst.size, broadcast_strides(src_ref, dst.size), src_ref.dtype),
                          'VNC_JIT_TRY(vnc_rt->copy(s, "aten::copy_", &dst, &src));']
        self.prog.steps.append(Extern("aten::copy_", emit, [src_ref], [dst]))
        return True

    def _number_of(self, x):
        if isinstance(x, torch.fx.Node) and isinstance(self.values.get(x), (bool, int, float)):
            return self.values[x]
        return x

    def view(self, node) -> bool:
        src = node.args[0]
        out = node.meta["val"]
        if not isinstance(src, torch.fx.Node) or not isinstance(src.meta.get("val"), torch.Tensor):
            return False
        base_meta = src.meta["val"]
        metas = out if isinstance(out, (list, tuple)) else [out]
        if any(not isinstance(m, torch.Tensor) or m.dtype != base_meta.dtype for m in metas):
            return False
        base = self.ref(src)

        def one(m):
            return TRef(base.buf, m.dtype, tuple(m.shape), tuple(m.stride()),
                        base.offset + m.storage_offset() - base_meta.storage_offset())

        self.values[node] = tuple(one(m) for m in metas) if isinstance(out, (list, tuple)) else one(out)
        return True

    def eager(self, node, fn=None, name=None, collective=False):
        """An Eager step running `node` (or `fn` with its arguments) through the dispatcher
        (`collective`: recorded as a collective rather than an eager op)."""
        target = node.target
        if fn is None and isinstance(target, torch._ops.OpOverload) and not has_native_kernel(target) and \
                not _host_only(node):
            raise UnsupportedOp(node, "has no native neuron kernel, no lowering and no decomposition "
                                      "(eager mode would run it through the CPU fallback)")

        def arg(x):
            if isinstance(x, torch.fx.Node):
                v = self.values[x]
                if isinstance(v, PW):
                    return self.ref(x)
                return v
            return x

        args = tree_map(arg, node.args)
        kwargs = tree_map(arg, node.kwargs)
        out = node.meta.get("val")
        if out is None and any(u.target is operator.getitem for u in node.users):
            # (a higher-order op such as control_deps, around stream and event calls: no "val";
            # its results are known from the getitems that read them)
            gets = {u.args[1]: u.meta.get("val") for u in node.users if u.target is operator.getitem}
            out = tuple(gets.get(i) for i in range(max(gets) + 1))
        outs = tree_map(lambda m: self.fresh_ref(m, "eager") if isinstance(m, torch.Tensor) else m, out)
        name = name or _op_name(target)
        self.prog.steps.append(Eager(name, fn or target, args, kwargs, outs, node))
        metas = [m for m in tree_leaves(out) if isinstance(m, torch.Tensor)]
        on_host = metas and all(m.device.type == "cpu" for m in metas)
        (self.prog.collective_ops if collective else self.prog.host_ops if on_host else self.prog.eager_ops).append(name)
        self.values[node] = outs

    def output(self, node):
        def out(x):
            if isinstance(x, torch.fx.Node):
                v = self.values[x]
                return self.ref(x) if isinstance(v, PW) else v
            return x

        self.prog.outputs = tree_map(out, node.args[0])
        self.close_all()
        if self.host_write_backs:
            # Host inputs are updated by the host, all in one _foreach_copy_ after the last C
            # step: every read of an input in the (functional) graph means its old value, and
            # one step keeps the C steps in one task and costs one dispatcher call.
            dsts, srcs = (list(x) for x in zip(*self.host_write_backs))
            self.prog.steps.append(Eager("aten::_foreach_copy_", aten._foreach_copy_.default, (dsts, srcs), {}, None))
            self.prog.host_ops.append("aten::_foreach_copy_")


# host scalars computed on the device keep their dtype there (float64 would run as float32)
_DEVICE_SCALAR_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


_ACCEPTS: dict = {}


def _cpu_accepts(node) -> bool:
    """Whether CPU's kernel accepts the node's arguments, tried once per (op, argument dtypes and
    ranks, constants) on empty CPU tensors. ATen refuses some at run time only (sub of a bool
    tensor, relu or abs of bool, integers to a negative power), where the fake tensors of
    tracing do not; a node it refuses is not lowered but runs eagerly, raising as eager does."""
    def stand_in(a):
        if isinstance(a, torch.fx.Node):
            v = a.meta.get("val")
            if isinstance(v, torch.Tensor):
                return torch.zeros((0,) * v.dim() if v.dim() else (), dtype=v.dtype)
            if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                return {torch.SymInt: 1, torch.SymFloat: 1.0, torch.SymBool: True}[type(v)]
            return v
        if isinstance(a, (list, tuple)):
            return type(a)(stand_in(e) for e in a)
        if isinstance(a, torch.device):
            return torch.device("cpu")
        return a

    if not any(isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), torch.Tensor) for a in node.args) or \
            any(isinstance(a, (list, tuple)) for a in (*node.args, *node.kwargs.values())):
        return True  # factories and ops given sizes (full, new_zeros): nothing to refuse, and sizes to allocate
    # real CPU tensors, outside the fake mode and dispatch modes the backend runs under
    with torch.utils._python_dispatch._disable_current_modes(), torch.no_grad():
        try:
            args = stand_in(tuple(node.args))
            kwargs = {k: stand_in(v) for k, v in node.kwargs.items()}
            key = (node.target, repr(args), repr(sorted(kwargs.items())))
        except Exception:  # noqa: BLE001 - an argument this cannot stand in for: the rule decides
            return True
        if key not in _ACCEPTS:
            try:
                node.target(*args, **kwargs)
                _ACCEPTS[key] = True
            except Exception:  # noqa: BLE001 - CPU refuses these arguments: eager raises its error
                _ACCEPTS[key] = False
    return _ACCEPTS[key]


def _host_only(node) -> bool:
    """Whether every tensor `node` reads or returns is a CPU tensor: it runs on the host, as in
    eager (a CPU value of a mixed graph: neither a device kernel nor a fallback)."""
    ins = [a.meta.get("val") for a in tree_leaves((node.args, node.kwargs)) if isinstance(a, torch.fx.Node)]
    metas = [m for m in tree_leaves((ins, node.meta.get("val"))) if isinstance(m, torch.Tensor)]
    return bool(metas) and all(m.device.type == "cpu" for m in metas)


def _pointwise(target) -> bool:
    """A pointwise op with a lowering rule, or a ``_foreach_`` op lowered element by element."""
    if isinstance(target, torch._ops.OpOverload) and target.__name__.startswith("_foreach_"):
        return foreach_single(target) is not None
    return target in RULES


class _Stub:
    """What a pointwise rule reads of a node (args, kwargs, meta), for one element of a
    ``_foreach_`` op."""

    def __init__(self, args, kwargs, meta):
        self.args, self.kwargs, self.meta = tuple(args), kwargs, {"val": meta}


def _per_element(scalar_list_pos=None):
    """Element i's (args, extra kwargs): the ScalarList argument, if any, taken element-wise."""
    def pick(args, i):
        if scalar_list_pos is not None and len(args) > scalar_list_pos and isinstance(args[scalar_list_pos], (list, tuple)):
            args = list(args)
            args[scalar_list_pos] = args[scalar_list_pos][i]
        return args, {}

    return pick


def foreach_single(op):
    """(single-tensor overload with a lowering rule, argument mapping) of a ``_foreach_`` op,
    or None. ``.Scalar``/``.List``/``.ScalarList`` map to the ``.Tensor`` (or default) overload
    with the element (or the number) as operand."""
    base = op.__name__[len("_foreach_"):].split(".")[0]
    ov = op._overloadname
    packet = getattr(aten, base, None)
    if packet is None:
        return None
    if base in ("addcmul", "addcdiv"):  # the foreach op's positional value is the op's keyword
        if packet.default not in RULES or ov not in ("Scalar", "ScalarList"):
            return None
        return packet.default, lambda args, i: (list(args[:3]), {"value": args[3][i] if ov == "ScalarList" else
                                                                 (args[3] if len(args) > 3 else 1)})
    if base == "pow":  # List: pow.Tensor_Tensor, Scalar(List): pow.Tensor_Scalar, ScalarAndTensor: pow.Scalar
        single = {"List": packet.Tensor_Tensor, "Scalar": packet.Tensor_Scalar, "ScalarList": packet.Tensor_Scalar,
                  "ScalarAndTensor": packet.Scalar}.get(ov)
        return (single, _per_element(1 if ov == "ScalarList" else None)) if single in RULES else None
    if base == "lerp":
        single = packet.Scalar if ov == "Scalar" else packet.Tensor if ov == "List" else None
        return (single, _per_element()) if single in RULES else None
    for cand in ("Tensor", "default"):
        single = getattr(packet, cand, None)
        if single in RULES:
            return single, _per_element(1 if ov == "ScalarList" else None)
    return None


class DynamicShapes(Exception):
    """The graph has symbolic sizes (compiled graphs are static; see the backend)."""


def _contiguous_strides(shape) -> tuple:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc if n != 1 else 0)
        acc *= n
    return tuple(reversed(out))


def fuse_row_epilogues(prog: Program) -> list:
    """Moves the pointwise consumer of a row kernel's output into the kernel (Extern.epilogue):
    the runtime then runs it on each finished block of rows while they are in cache, instead
    of a second pass over the output. Row kernels are the Externs that declare ``rows``: GEMMs
    (bias, activation, residual add, GELU backward after a product; vnc_gemm_fused), softmax,
    log_softmax and their backward, layer norm's y and layer norm backward's dx (a residual
    gradient add; vnc/nn_fused.h).

    A fusion group qualifies when its rows are the kernel's output rows: its last dim is the
    output's columns, its other dims count the output's rows, and every read of the output's
    buffer is the output itself, contiguous in the group's index order (so a block reads only
    finished rows); it reads none of the kernel's other outputs (layer norm's statistics;
    layer norm backward's dweight and dbias, whole only at the end). The group must follow the
    kernel with only C steps between them, none of which writes what the group reads or names
    what it writes (so it may run earlier), store only into fresh buffers, and have no integer
    division (whose zero check needs the loop's fault path).
    Values are unchanged: the same body computes each element. When nothing else reads the
    output, the kernel writes it straight into a group output of the same layout, which the
    group then overwrites in place (_product_in_place). Returns the names of the Externs
    that took an epilogue, in program order."""
    keep = {x.buf.id for x in tree_leaves(prog.outputs) if isinstance(x, TRef)}
    return _fuse_row_hooks(prog, "epilogue", _epilogue_fits, lambda g, lp: _product_in_place(prog.steps, g, lp, keep))


def fuse_row_prologues(prog: Program) -> list:
    """Moves the pointwise producer of a row kernel's input into the kernel (Extern.prologue):
    the runtime computes each block of the input's rows just before the kernel reads them
    (vnc/nn_fused.h), so the kernel reads them from cache instead of memory — the residual or
    bias add before a layer norm, the scale and mask before a softmax, the gradient before
    layer norm backward. The group still stores its values (later steps may read them).

    A fusion group qualifies for kernel `g` (softmax, layer norm and their backward: the
    Externs with ``rows`` and ``row_reads``) when its rows are the kernel's rows (last dim the
    columns, other dims counting the rows) and every value it stores is dense in that order
    in a fresh buffer, which `g` reads only as one of its row inputs (same layout), and `g`'s
    epilogue reads only row by row; `g` reads at least one. Only C steps lie between the
    group and `g`, none of which names what the group stores or writes what it reads (so it
    may run later); the group reads nothing `g` writes, and has no integer division (whose
    zero check needs the loop's fault path). Values are unchanged: the same body computes
    each element and the kernel reads what it stored. Returns the names of the Externs that
    took a prologue, in program order."""
    return _fuse_row_hooks(prog, "prologue", _prologue_fits)


def _fuse_row_hooks(prog: Program, hook: str, fits, placed=None) -> list:
    """The walk of fuse_row_epilogues (`hook` "epilogue": the C steps after each row kernel,
    nearest first) and fuse_row_prologues ("prologue": the C steps before it): the first
    fusion group for which ``fits(group, kernel, written, named)`` holds, given the buffers
    the steps between write and name at all, becomes the kernel's `hook` and leaves the step
    list; then ``placed(kernel, group)``. Returns the names of the kernels that took one."""
    steps = prog.steps
    after = hook == "epilogue"
    fused, i = [], 0
    while i < len(steps):
        g = steps[i]
        i += 1
        if not isinstance(g, Extern) or g.rows is None or getattr(g, hook) is not None:
            continue
        written, named = set(), set()
        for j in range(i, len(steps)) if after else range(i - 2, -1, -1):
            lp = steps[j]
            if not isinstance(lp, C_STEPS):
                break
            if isinstance(lp, Loop) and fits(lp, g, written, named):
                setattr(g, hook, lp)
                del steps[j]
                i -= 0 if after else 1  # the kernel moved up one place
                if placed is not None:
                    placed(g, lp)
                fused.append(g.name)
                break
            written.update(id(r.buf) for r in written_refs(lp))
            named.update(id(r.buf) for r in lp.refs())
    return fused


def _rows_of(shape, nrows: int, ncols: int) -> bool:
    """A loop of this shape walks the kernel's rows: last dim the columns, the rest the rows."""
    return bool(shape) and shape[-1] == ncols and math.prod(shape[:-1]) == nrows and nrows * ncols != 0


def _row_aligned(r: TRef, shape, base: TRef) -> bool:
    """`r`, read over a loop of `shape`, is `base`'s memory row by row (same buffer, offset,
    dense in the loop's order)."""
    return r.buf is base.buf and r.offset == base.offset and \
        broadcast_strides(r, shape) == _contiguous_strides(shape)


def _prologue_fits(lp: Loop, g: Extern, written: set, named: set) -> bool:
    if not g.row_reads:
        return False
    shape = tuple(lp.shape)
    if not _rows_of(shape, *g.rows) or lp.write_backs or not lp.stores:
        return False
    stores = [r for _, r in lp.stores]
    if any(r.buf.kind != "alloc" or r.offset != 0 or not _row_aligned(r, shape, r) or r.numel != r.buf.numel
           or id(r.buf) in named for r in stores):
        return False
    mine = {id(r.buf): r for r in stores}
    row_inputs = [r for r in g.row_reads if id(r.buf) in mine]
    if not row_inputs or any(not r.is_contiguous() or r.numel != mine[id(r.buf)].numel or r.offset != 0
                             or r.dtype != mine[id(r.buf)].dtype for r in row_inputs):
        return False
    if any(id(r.buf) in mine and not any(r is x for x in g.row_reads) for r in g.reads):
        return False  # read another way too (a weight, statistics)
    if g.epilogue is not None:
        eshape = tuple(g.epilogue.shape)
        for m in g.epilogue.members:
            for x in m.inputs:
                if isinstance(x, Load) and id(x.ref.buf) in mine and \
                        not any(_row_aligned(x.ref, eshape, r) for r in stores):
                    return False
    reads = [x.ref for m in lp.members for x in m.inputs if isinstance(x, Load)]
    outs = {id(r.buf) for r in written_refs(g)}
    if any(id(r.buf) in written or id(r.buf) in outs for r in reads):
        return False
    return not _faults(lp)


def _faults(lp: Loop) -> bool:
    """The group has an integer division, whose zero check needs a loop's own fault path."""
    from .pointwise import INT_FAULT_ROWS

    return any(m.op in INT_FAULT_ROWS and not m.compute.is_floating_point for m in lp.members)


def _product_in_place(steps, g: Extern, lp: Loop, keep: set) -> None:
    """Places the output of `g` (writes[0]: a product, a softmax, ...) in the memory of an
    output of its epilogue `lp` when no other step and no graph output reads it and that
    output has its dtype, is dense and in its order: one buffer fewer (the epilogue reads each
    element, then overwrites it; codegen gives the load and the store one pointer)."""
    out = g.writes[0]
    x = out.buf
    if x.kind != "alloc" or x.id in keep or any(s is not g and any(r.buf is x for r in s.refs()) for s in steps):
        return
    shape, contiguous = tuple(lp.shape), _contiguous_strides(tuple(lp.shape))
    for _, r in lp.stores:
        if (r.dtype == out.dtype and r.offset == 0 and broadcast_strides(r, shape) == contiguous
                and r.buf.numel == x.numel == r.numel):
            moved = {}
            g.writes[0] = TRef(r.buf, out.dtype, out.size, out.stride, out.offset)
            for m in lp.members:
                for v in m.inputs:
                    if isinstance(v, Load) and v.ref.buf is x:
                        if id(v.ref) not in moved:
                            moved[id(v.ref)] = TRef(r.buf, v.ref.dtype, v.ref.size, v.ref.stride, v.ref.offset)
                        v.ref = moved[id(v.ref)]
            return


def _epilogue_fits(lp: Loop, g: Extern, written: set, touched: set) -> bool:
    out, shape = g.writes[0], tuple(lp.shape)
    if not _rows_of(shape, *g.rows):
        return False
    reads = [x.ref for m in lp.members for x in m.inputs if isinstance(x, Load)]
    mine = [r for r in reads if r.buf is out.buf]
    if not mine or not all(_row_aligned(r, shape, out) for r in mine):
        return False
    if any(id(r.buf) in written or any(r.buf is w.buf for w in g.writes[1:]) for r in reads):
        return False
    if any(r.buf.kind != "alloc" or r.buf is out.buf or id(r.buf) in touched for _, r in lp.stores) or lp.write_backs:
        return False
    return not _faults(lp)


def lower(gm: torch.fx.GraphModule, donated=()) -> Program:
    """Lowers `gm`; `donated`: input positions AOTAutograd donates (saved activations of a
    backward graph that nothing else holds). Row epilogues, then row prologues, are fused
    afterwards."""
    prog = Lowerer(gm).run()
    prog.donated = set(donated or ())
    prog.row_epilogues = fuse_row_epilogues(prog)
    prog.row_prologues = fuse_row_prologues(prog)
    return prog
