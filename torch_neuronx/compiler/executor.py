"""Running a compiled graph: allocate, launch each C segment as one task on the current
stream, run eager steps in between, hand the outputs back.

Nothing here waits for the device: launches return at once (the runtime's sticky-error model
reports a failing kernel at the next synchronisation, naming the graph and the kernel).
Buffers come from the caching allocator when first needed and are dropped right after their
last use is enqueued; stream-ordered reuse makes that safe.
"""
from __future__ import annotations

import os

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

from .. import _C
from .codegen import segments
from .ir import C_STEPS, Eager, TRef


def _autocopy_disabled() -> bool:
    return os.environ.get("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "0") not in ("", "0")


class CompiledGraph:
    """Callable with AOTAutograd's boxed convention: ``f(args: list) -> list`` (the list is
    cleared, so inputs can be freed early)."""

    def __init__(self, prog, module, tables, ints, name: str):
        self._boxed_call = True  # an instance attribute: it survives functools.wraps (Dynamo's disable)
        self.prog = prog
        self.module = module
        self.name = name
        self.device = prog.device
        self.dev_index = prog.device.index if prog.device is not None and prog.device.index is not None \
            else torch.neuron.current_device()
        nbuf = len(prog.buffers)
        used_by_c = set()
        actions = []
        seg_steps = {}
        segs = segments(prog.steps, prog.releases_inputs)
        starts = {a: (k, b) for k, (a, b) in enumerate(segs)}
        i = 0
        while i < len(prog.steps):
            if i in starts:
                k, b = starts[i]
                refs = [r for s in prog.steps[i:b] for r in s.refs()]
                used_by_c.update(r.buf.id for r in refs)
                actions.append(("seg", module.symbol(f"seg_{k}") if module else 0, tables[k], refs, ints[k]))
                seg_steps[len(actions) - 1] = prog.steps[i:b]
                i = b
            else:
                step = prog.steps[i]
                actions.append(("eager", step, None, step.refs(), ()))
                i += 1
        out_leaves, self.out_spec = tree_flatten(prog.outputs)
        keep = {x.buf.id for x in out_leaves if isinstance(x, TRef)}
        # allocation before the first action that names a buffer; release after the last
        first, last = {}, {}
        for a, (_, _, _, refs, _) in enumerate(actions):
            for r in refs:
                first.setdefault(r.buf.id, a)
                last[r.buf.id] = a
            if actions[a][0] == "eager":
                for x in tree_flatten(actions[a][1].outs)[0]:
                    if isinstance(x, TRef):
                        first.setdefault(x.buf.id, a)
                        last[x.buf.id] = max(last.get(x.buf.id, a), a)
        self.plan = []
        self.undonated, self.donors, self.donation_checked = {}, set(), False
        for a, (kind, what, table, _, kvals) in enumerate(actions):
            # temporaries of one segment share an arena planned by liveness; the rest are tensors
            internal = {b for b in (table or ()) if prog.buffers[b].kind == "alloc" and b not in keep
                        and first[b] == a and last[b] == a}
            # donated inputs (saved activations AOTAutograd hands over) last used by this
            # segment lend their memory to its temporaries that start after that use
            donated = {b for b in (table or ()) if prog.buffers[b].kind == "input" and
                       prog.buffers[b].input_index in prog.donated and b not in keep and last[b] == a
                       and _dense(prog.buffers[b])}
            arena = _plan_arena(prog, seg_steps[a], internal, donated) if internal else (0, {})
            if any(base >= 0 for base, _ in arena[1].values()):  # a plan without donation, in case
                self.undonated[a] = _plan_arena(prog, seg_steps[a], internal)  # inputs share storage
                self.donors.update(base for base, _ in arena[1].values() if base >= 0)
            allocs = [prog.buffers[b] for b, f in first.items()
                      if f == a and prog.buffers[b].kind == "alloc" and b not in internal]
            # inputs too: the boxed call cleared the caller's list, so dropping the graph's
            # reference frees a saved activation after its last use, as eager's backward does
            frees = [b for b, l in last.items() if l == a and b not in keep
                     and prog.buffers[b].kind != "const" and b not in internal]
            if table is not None:  # (base buffer or -1 for the arena, byte offset)
                table = [arena[1][b] if b in internal else (b, 0) for b in table]
            if kind == "eager":
                what = (what, _leaves(what.outs), isinstance(what.outs, TRef))
            if a in self.undonated:
                plain = self.undonated[a]
                self.undonated[a] = ([plain[1][b] if b in internal else (b, 0) for b in actions[a][2]], plain[0], kvals)
            self.plan.append((kind, what, (table, arena[0], kvals), allocs, frees))
        self.out_leaves = out_leaves
        for b in prog.buffers:  # outputs never named by a step (pure views of inputs) need nothing
            if b.kind == "alloc" and b.id in keep and b.id not in first:
                self.plan.insert(0, ("noop", None, None, [b], []))
        # constants the graph holds; those on the host that C steps read move to the device once
        # (real copies: AOTAutograd compiles under its FakeTensorMode, which would make them fake)
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        with unset_fake_temporarily():
            self.consts = [(b, t.to(self.device) if t.device.type == "cpu" and b in used_by_c else t)
                           for b, t in prog.consts.items()]
        self.cpu_checked = [b for b in prog.inputs if b is not None and b.id in used_by_c]
        self.nbuf = nbuf

    # ---------------------------------------------------------------- run

    def __call__(self, *call_args):
        args = _unbox(call_args)
        env = [None] * self.nbuf
        for b, t in self.consts:
            env[b] = t
        for b in self.prog.inputs:
            if b is not None:
                env[b.id] = args[b.input_index]
        args.clear()  # env holds the inputs now, each dropped after its last use
        for b in self.cpu_checked:
            t = env[b.id]
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                if _autocopy_disabled():
                    raise RuntimeError(f"Input tensor at index {b.input_index} is on cpu device; the compiled "
                                       f"graph {self.name} runs on {self.device} "
                                       "(TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1 turns off copying it)")
        device = self.device
        if self.donors and not self.donation_checked:
            self._check_donors(env)
        for kind, what, seg, allocs, frees in self.plan:
            for b in allocs:
                env[b.id] = torch.empty_strided(b.size, b.stride, dtype=b.dtype, device=device)
            if kind == "seg":
                table, arena_bytes, kvals = seg
                arena = torch.empty(arena_bytes, dtype=torch.uint8, device=device) if arena_bytes else None
                base = arena.data_ptr() if arena is not None else 0
                addrs = [base + off if j < 0 else env[j].data_ptr() + off for j, off in table]
                addrs += kvals  # the sizes, strides and offsets of the shape-generic code
                host = [(k, env[j]) for k, (j, off) in enumerate(table)
                        if j >= 0 and off == 0 and env[j].device.type != "neuron"]
                # (the arena is held until the launch: copies of host inputs must not reuse it)
                staged = _stage_host_tensors(host, addrs, device) if host else None  # noqa: F841 (kept until launch)
                _C._jit_launch(self.module.handle, what, self.dev_index, self.name, addrs)
                # released at once: stream-ordered reuse waits for this task
                arena = staged = None
            elif kind == "eager":
                self._eager(what, env)
            for b in frees:
                env[b] = None
        leaves = [self._tensor(env, x) if isinstance(x, TRef) else x for x in self.out_leaves]
        return tree_unflatten(leaves, self.out_spec)

    def _check_donors(self, env):
        """Donated memory is reused only if no other input shares its storage (views of one
        buffer, as q, k, v split from one projection, keep each other alive): checked on the
        first call, the plans without donation are used otherwise."""
        self.donation_checked = True
        inputs = [b.id for b in self.prog.inputs if b is not None and isinstance(env[b.id], torch.Tensor)]
        owners = {}
        for b in inputs:
            key = env[b].untyped_storage().data_ptr()
            owners[key] = owners.get(key, 0) + 1
        if any(owners[env[b].untyped_storage().data_ptr()] > 1 for b in self.donors):
            self.plan = [(k, w, self.undonated.get(a, seg), al, fr) for a, (k, w, seg, al, fr) in enumerate(self.plan)]
            self.donors = set()

    @staticmethod
    def _tensor(env, ref: TRef) -> torch.Tensor:
        t = env[ref.buf.id]
        b = ref.buf
        if ref.offset == 0 and ref.size == b.size and ref.stride == b.stride and ref.dtype == b.dtype:
            return t  # the whole buffer (for an eager result: exactly what the kernel returned)
        return torch.as_strided(t, ref.size, ref.stride, t.storage_offset() + ref.offset)

    def _eager(self, call, env):
        step, outs, single = call
        result = step.fn(*_fill(step.args, env), **_fill(step.kwargs, env))
        res = [result] if single else _leaves(result)
        for ref, t in zip(outs, res):
            if not isinstance(ref, TRef) or t is None:  # (an output the kernel was asked not to compute)
                continue
            if tuple(t.shape) == ref.size and (tuple(t.stride()) != ref.stride or t.dtype != ref.dtype):
                # generated code reads this result at the layout the meta function gave
                fixed = torch.empty_strided(ref.size, ref.stride, dtype=ref.dtype, device=t.device)
                fixed.copy_(t)
                t = fixed
            env[ref.buf.id] = t


def _fill(x, env):
    """An eager step's arguments with each TRef replaced by its tensor. (The structures are
    tuples, lists and dicts of TRefs and constants; a foreach op's lists are long, and this is
    several times cheaper per element than pytree's generic unflatten.)"""
    if isinstance(x, TRef):
        return CompiledGraph._tensor(env, x)
    if isinstance(x, (list, tuple)):
        return type(x)(_fill(e, env) for e in x)
    if isinstance(x, dict):
        return {k: _fill(v, env) for k, v in x.items()}
    return x


def _leaves(result) -> list:
    """The leaves of an op's result (a tensor, None, or a list/tuple of them), in order."""
    if isinstance(result, (list, tuple)):
        return [y for e in result for y in _leaves(e)]
    return [result]


def _stage_host_tensors(host, addrs, device):
    """Host tensors a segment reads (CPU scalars such as an optimizer's step counts, computed
    on the host inside the graph) reach the device by stream-ordered copies, since the task
    runs later: the one-element ones of each dtype packed into one copy. Rewrites their
    entries of `addrs`; returns the device tensors (dropping them after the launch is safe)."""
    staged, scalars = [], {}
    for k, t in host:
        if t.numel() == 1:
            scalars.setdefault(t.dtype, []).append((k, t))
        else:
            d = t.pin_memory().to(device, non_blocking=True)
            addrs[k] = d.data_ptr()
            staged.append(d)
    for dtype, items in scalars.items():
        # through pinned memory: the copy is queued, not waited for (pageable copies block)
        pinned = torch.empty(len(items), dtype=dtype, pin_memory=True)
        torch.stack([t if t.dim() == 0 else t.reshape(()) for _, t in items], out=pinned)
        d = pinned.to(device, non_blocking=True)
        for i, (k, _) in enumerate(items):
            addrs[k] = d.data_ptr() + i * d.element_size()
        staged.append(d)
    return staged


ARENA_ALIGN = 64


def _dense(b) -> bool:
    """The buffer's elements fill its span (no gaps another tensor could occupy)."""
    expected = 1
    for n, st in sorted(zip(b.size, b.stride), key=lambda x: x[1]):
        if n != 1 and st != expected:
            return False
        expected *= n
    return True


def _plan_arena(prog, steps, internal, donated=frozenset()) -> tuple:
    """Places the temporaries of one segment: (arena bytes, {buffer id: (base, byte offset)})
    where base is -1 for the arena or a donated input whose memory the temporary reuses. Each
    temporary lives from the first to the last step naming it; a donated input's bytes are free
    after its last use. Largest first, each takes the lowest aligned offset free of every
    temporary whose life overlaps its own: in a donated input if one has room, else the arena."""
    life = {}
    for t, step in enumerate(steps):
        for r in step.refs():
            if r.buf.id in internal or r.buf.id in donated:
                lo, hi = life.get(r.buf.id, (t, t))
                life[r.buf.id] = (min(lo, t), max(hi, t))

    def nbytes(b):
        return max(prog.buffers[b].numel, 1) * prog.buffers[b].dtype.itemsize

    size = {b: -(-nbytes(b) // ARENA_ALIGN) * ARENA_ALIGN for b in life if b in internal}
    # regions: (base, capacity bytes, free after step); the arena is unbounded, free throughout
    regions = [(-1, None, -1)] + sorted(((b, nbytes(b) // ARENA_ALIGN * ARENA_ALIGN, life[b][1]) for b in donated
                                         if b in life), key=lambda r: -r[1])
    placed = {r[0]: [] for r in regions}
    offsets, total = {}, 0
    for b in sorted(size, key=lambda b: (-size[b], b)):
        lo, hi = life[b]
        for base, cap, free_after in regions[1:] + regions[:1]:
            if lo <= free_after or (cap is not None and size[b] > cap):
                continue
            busy = sorted((o, o + size[c]) for c, o, (l2, h2) in placed[base] if l2 <= hi and lo <= h2)
            off = 0
            for a0, a1 in busy:
                if off + size[b] <= a0:
                    break
                off = max(off, a1)
            if cap is not None and off + size[b] > cap:
                continue
            placed[base].append((b, off, (lo, hi)))
            offsets[b] = (base, off)
            if base == -1:
                total = max(total, off + size[b])
            break
    return total, offsets


class EagerGraph:
    """The FX graph run eagerly (fallback execution; graphs the compiler does not take)."""

    def __init__(self, gm):
        self._boxed_call = True
        self.gm = gm

    def __call__(self, *call_args):
        return self.gm(*_unbox(call_args))


def _unbox(call_args) -> list:
    """Arguments of either calling convention: boxed (one list, cleared so the caller's
    references go) or plain positional."""
    if len(call_args) == 1 and isinstance(call_args[0], list):
        args = list(call_args[0])
        call_args[0].clear()
        return args
    return list(call_args)


def is_c_step(step) -> bool:
    return isinstance(step, C_STEPS)
