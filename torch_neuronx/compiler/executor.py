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
from torch.utils._pytree import tree_flatten, tree_map, tree_unflatten

from .. import _C
from .codegen import segments
from .ir import C_STEPS, Eager, TRef


def _autocopy_disabled() -> bool:
    return os.environ.get("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", "0") not in ("", "0")


class CompiledGraph:
    """Callable with AOTAutograd's boxed convention: ``f(args: list) -> list`` (the list is
    cleared, so inputs can be freed early)."""

    def __init__(self, prog, module, tables, name: str):
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
        segs = segments(prog.steps)
        starts = {a: (k, b) for k, (a, b) in enumerate(segs)}
        i = 0
        while i < len(prog.steps):
            if i in starts:
                k, b = starts[i]
                refs = [r for s in prog.steps[i:b] for r in s.refs()]
                used_by_c.update(r.buf.id for r in refs)
                actions.append(("seg", module.symbol(f"seg_{k}") if module else 0, tables[k], refs))
                seg_steps[len(actions) - 1] = prog.steps[i:b]
                i = b
            else:
                step = prog.steps[i]
                actions.append(("eager", step, None, step.refs()))
                i += 1
        out_leaves, self.out_spec = tree_flatten(prog.outputs)
        keep = {x.buf.id for x in out_leaves if isinstance(x, TRef)}
        # allocation before the first action that names a buffer; release after the last
        first, last = {}, {}
        for a, (_, _, _, refs) in enumerate(actions):
            for r in refs:
                first.setdefault(r.buf.id, a)
                last[r.buf.id] = a
            if actions[a][0] == "eager":
                for x in tree_flatten(actions[a][1].outs)[0]:
                    if isinstance(x, TRef):
                        first.setdefault(x.buf.id, a)
                        last[x.buf.id] = max(last.get(x.buf.id, a), a)
        self.plan = []
        for a, (kind, what, table, _) in enumerate(actions):
            # temporaries of one segment share an arena planned by liveness; the rest are tensors
            internal = {b for b in (table or ()) if prog.buffers[b].kind == "alloc" and b not in keep
                        and first[b] == a and last[b] == a}
            arena = _plan_arena(prog, seg_steps[a], internal) if internal else (0, {})
            allocs = [prog.buffers[b] for b, f in first.items()
                      if f == a and prog.buffers[b].kind == "alloc" and b not in internal]
            frees = [b for b, l in last.items() if l == a and b not in keep
                     and prog.buffers[b].kind not in ("input", "const") and b not in internal]
            if table is not None:
                table = [(-1, arena[1][b]) if b in internal else (b, 0) for b in table]
            self.plan.append((kind, what, (table, arena[0]), allocs, frees))
        self.out_leaves = out_leaves
        for b in prog.buffers:  # outputs never named by a step (pure views of inputs) need nothing
            if b.kind == "alloc" and b.id in keep and b.id not in first:
                self.plan.insert(0, ("noop", None, None, [b], []))
        # constants the graph holds; those on the host that C steps read move to the device once
        self.consts = [(b, t.to(self.device) if t.device.type == "cpu" and b in used_by_c else t)
                       for b, t in prog.consts.items()]
        self.cpu_checked = [b for b in prog.inputs if b is not None and b.id in used_by_c]
        self.read_by_c = used_by_c
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
        for b in self.cpu_checked:
            t = env[b.id]
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                if _autocopy_disabled():
                    raise RuntimeError(f"Input tensor at index {b.input_index} is on cpu device; the compiled "
                                       f"graph {self.name} runs on {self.device} "
                                       "(TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1 turns off copying it)")
                env[b.id] = t.to(self.device)
        device = self.device
        for kind, what, seg, allocs, frees in self.plan:
            for b in allocs:
                env[b.id] = torch.empty_strided(b.size, b.stride, dtype=b.dtype, device=device)
            if kind == "seg":
                table, arena_bytes = seg
                base = torch.empty(arena_bytes, dtype=torch.uint8, device=device).data_ptr() if arena_bytes else 0
                # the arena is released at once: stream-ordered reuse waits for this task
                _C._jit_launch(self.module.handle, what, self.dev_index, self.name,
                               [base + off if j < 0 else env[j].data_ptr() for j, off in table])
            elif kind == "eager":
                self._eager(what, env)
            for b in frees:
                env[b] = None
        leaves = [self._tensor(env, x) if isinstance(x, TRef) else x for x in self.out_leaves]
        return tree_unflatten(leaves, self.out_spec)

    @staticmethod
    def _tensor(env, ref: TRef) -> torch.Tensor:
        t = env[ref.buf.id]
        b = ref.buf
        if ref.offset == 0 and ref.size == b.size and ref.stride == b.stride and ref.dtype == b.dtype:
            return t  # the whole buffer (for an eager result: exactly what the kernel returned)
        return torch.as_strided(t, ref.size, ref.stride, t.storage_offset() + ref.offset)

    def _eager(self, step: Eager, env):
        conv = lambda x: self._tensor(env, x) if isinstance(x, TRef) else x  # noqa: E731
        result = step.fn(*tree_map(conv, step.args), **tree_map(conv, step.kwargs))
        outs, _ = tree_flatten(step.outs)
        res, _ = tree_flatten(result)
        for ref, t in zip(outs, res):
            if not isinstance(ref, TRef):
                continue
            if t.device.type == "cpu" and ref.buf.id in self.read_by_c:
                t = t.to(self.device)  # C steps run later, on the stream: never read host memory
            if tuple(t.shape) == ref.size and (tuple(t.stride()) != ref.stride or t.dtype != ref.dtype):
                # generated code reads this result at the layout the meta function gave
                fixed = torch.empty_strided(ref.size, ref.stride, dtype=ref.dtype, device=t.device)
                fixed.copy_(t)
                t = fixed
            env[ref.buf.id] = t


ARENA_ALIGN = 64


def _plan_arena(prog, steps, internal) -> tuple:
    """(arena bytes, {buffer id: byte offset}) for the temporaries of one segment: each lives
    from the first to the last step naming it; a buffer takes the lowest aligned offset free of
    every buffer whose life overlaps its own (largest first)."""
    life = {}
    for t, step in enumerate(steps):
        for r in step.refs():
            if r.buf.id in internal:
                lo, hi = life.get(r.buf.id, (t, t))
                life[r.buf.id] = (min(lo, t), max(hi, t))
    size = {b: -(-max(prog.buffers[b].numel, 1) * prog.buffers[b].dtype.itemsize // ARENA_ALIGN) * ARENA_ALIGN
            for b in life}
    placed, offsets, total = [], {}, 0
    for b in sorted(life, key=lambda b: (-size[b], b)):
        lo, hi = life[b]
        busy = sorted((o, o + size[c]) for c, o, (l2, h2) in placed if l2 <= hi and lo <= h2)
        off = 0
        for a0, a1 in busy:
            if off + size[b] <= a0:
                break
            off = max(off, a1)
        placed.append((b, off, (lo, hi)))
        offsets[b] = off
        total = max(total, off + size[b])
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
