"""The ``torch.compile`` backend ``neuron``: Dynamo → AOTAutograd (forward and backward ATen
graphs) → lowering → C → JIT, with TorchNeuron's options and metrics.

Options (``torch.compile(..., options={...})``): ``fallback_execution`` (bool: a graph that
cannot be compiled runs eagerly with one warning instead of raising; default from
``TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION``, which is on, i.e. raise), ``model_name`` (names
graphs and metrics; default ``"model"``). ``mode`` other than the default warns and is
ignored.
"""
from __future__ import annotations

import collections
import operator
import os
import time
import warnings

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._functorch.partitioners import min_cut_rematerialization_partition

from . import jit, metrics
from .codegen import generate
from .executor import CompiledGraph, EagerGraph
from .lowering import _ASSERTS, DynamicShapes, UnsupportedOp, has_native_kernel, lower

_OPTIONS = {"fallback_execution", "model_name"}
_warned = set()


def _warn_once(key, msg):
    if key not in _warned:
        _warned.add(key)
        warnings.warn(msg, UserWarning, stacklevel=3)


def _fallback_default() -> bool:
    v = os.environ.get("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION")
    return v is not None and v.strip().lower() in ("0", "false", "no", "off")


def _decompositions():
    """PyTorch's core ATen decompositions of the ops eager would run through the CPU fallback:
    every op eager runs natively (its own kernel, or a composite of native kernels) stays
    whole, so compiled code computes what eager computes."""
    from torch._decomp import core_aten_decompositions

    # CPU flash attention's decomposition (meant for export) returns the attention weights where
    # the op returns its logsumexp, which the op's backward then reads: wrong gradients
    wrong_for_training = {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}
    return {op: fn for op, fn in core_aten_decompositions().items()
            if isinstance(op, torch._ops.OpOverload) and not has_native_kernel(op) and op not in wrong_for_training}


_DECOMPS = None


def _donated():
    """Backward inputs AOTAutograd donates (saved activations freed by this graph), or none."""
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    return list(getattr(meta, "bw_donated_idxs", None) or [])


def _aot_names():
    try:
        from torch._functorch._aot_autograd.logging_utils import get_aot_compilation_context

        graphs, _, nth = get_aot_compilation_context()
        aot_id, _, kind = (graphs[-1] if graphs else "0_graph").partition("_")
        return aot_id, kind or "graph", nth
    except Exception:  # pragma: no cover - private API moved
        return "0", "graph", 0


def _has_neuron_tensors(gm: torch.fx.GraphModule, example_inputs=()) -> bool:
    """Whether any value of `gm` (input, intermediate or constant) is a neuron tensor: a graph
    with none (a CPU model compiled with this backend) is not ours to lower, and its CPU-only
    ops (e.g. SDPA's CPU flash-attention backward) would otherwise fail the lowering."""
    from torch.utils._pytree import tree_leaves

    def on_neuron(v):
        return isinstance(v, torch.Tensor) and v.device.type == "neuron"

    if any(on_neuron(v) for v in example_inputs):
        return True
    for node in gm.graph.nodes:  # "val": AOTAutograd's graphs; "example_value": Dynamo's
        val = getattr(gm, node.target, None) if node.op == "get_attr" else \
            node.meta.get("val", node.meta.get("example_value"))
        if any(on_neuron(v) for v in tree_leaves(val)):
            return True
    return False


# Integer arithmetic that gives the same value on Python ints and on 0-dim int64 tensors
# (floor division and modulo round toward -inf in both), and tensor ops whose result is the same
# for a Python int operand and a 0-dim int64 one (type promotion treats both as a scalar).
_INT_ARITH = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg}
_SCALAR_OPERAND = {operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
                   torch.add, torch.sub, torch.mul, torch.div, torch.true_divide, torch.floor_divide,
                   torch.remainder, "add", "sub", "mul", "div", "true_divide", "floor_divide", "remainder",
                   "add_", "sub_", "mul_", "div_"}


def _ints_as_tensors(gm: torch.fx.GraphModule, example_inputs: list) -> tuple[list, list]:
    """Makes the symbolic Python ``int`` inputs of a Dynamo graph that only scale or shift tensor
    values (``x * n``, ``x + n // 2``; never a size, a dim or an op's int parameter) 0-dim int64
    tensor inputs, so one lowering serves every value (a tensor is read at run time; a Python int
    is a constant of the lowering). Their integer arithmetic (+, -, *, //, %, unary -) becomes
    tensor arithmetic, which gives the same values; type promotion treats a 0-dim tensor like the
    int it replaces, except beside a 0-dim integer tensor (then the input is left an int).
    Rewrites `gm` and `example_inputs` in place; returns the positions of the rewritten inputs
    (their values are wrapped in ``torch.tensor(n)`` at each call) and their arithmetic's nodes in
    graph order (see _with_int_tensors: int64 wraps where a Python int grows)."""
    from torch.fx.experimental.symbolic_shapes import free_symbols
    from torch.utils._pytree import tree_leaves

    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return [], []
    val = lambda n: n.meta.get("example_value") if isinstance(n, torch.fx.Node) else n  # noqa: E731
    in_shapes = set()  # symbols of any tensor's sizes, strides or offset
    for n in gm.graph.nodes:
        for v in tree_leaves(val(n)):
            if isinstance(v, torch.Tensor):
                in_shapes |= free_symbols((*v.shape, *v.stride(), v.storage_offset()))

    def scalar_operand(user, node):  # `node` is an operand of a tensor op that treats it as a scalar
        if user.op not in ("call_function", "call_method") or user.target not in _SCALAR_OPERAND \
                or node in user.kwargs.values():
            return False
        if user.target in (operator.floordiv, torch.floor_divide, "floor_divide") and user.args[0] is node:
            return False  # `n // t`: the reference floor_divide refuses a host tensor dividend
        others = [val(a) for a in user.args if a is not node]
        tensors = [t for t in others if isinstance(t, torch.Tensor)]
        # a 0-dim int32 (say) tensor beside a 0-dim int64 one would promote to int64, not beside an int
        return len(tensors) == 1 and (tensors[0].dim() > 0 or tensors[0].dtype in (torch.int64, torch.bool)
                                      or tensors[0].is_floating_point() or tensors[0].is_complex())

    def rewritable(node, seen):  # every use of an int value scales or shifts tensors, through int arithmetic
        seen.add(node)
        for user in node.users:
            if user.target in _INT_ARITH and isinstance(val(user), torch.SymInt) and user.op == "call_function":
                # with int literals or values of this same input only
                if not all(a in seen or type(a) is int for a in user.args if a is not node) or user.kwargs:
                    return False
                if user not in seen and not rewritable(user, seen):
                    return False
            elif not scalar_operand(user, node) or not isinstance(val(user), torch.Tensor):
                return False
        return True

    rewritten, arith = [], set()
    for i, (node, ex) in enumerate(zip(placeholders, example_inputs)):
        if not isinstance(ex, torch.SymInt) or free_symbols(ex) & in_shapes:
            continue
        ints = set()
        if not rewritable(node, ints):
            continue
        fake_mode = torch._guards.detect_fake_mode(example_inputs)
        if fake_mode is None:
            break
        with fake_mode:
            fake = torch.empty((), dtype=torch.int64)
        example_inputs[i] = fake
        for n in ints:  # the graph's own tracing values of the new tensors
            n.meta["example_value"] = fake
        rewritten.append(i)
        arith |= ints - {node}
    if rewritten:
        gm.recompile()
    return rewritten, [n for n in gm.graph.nodes if n in arith]


def _float64_on_device(gm: torch.fx.GraphModule) -> bool:
    """Whether a value of `gm` is a float64 or complex128 neuron tensor (the device rule's warning,
    as eager gives it). Host values do not count: Dynamo passes a Python float argument as a 0-dim
    float64 CPU tensor, where eager saw a Python number and warned of nothing."""
    from torch.utils._pytree import tree_leaves

    return any(isinstance(v, torch.Tensor) and v.dtype in (torch.float64, torch.complex128) and v.device.type == "neuron"
               for n in gm.graph.nodes for v in tree_leaves(n.meta.get("val")))


def _data_dependent(gm: torch.fx.GraphModule) -> bool:
    """Whether a value of `gm` has a size only known when the graph runs (an unbacked symbol:
    nonzero, masked_select, unique, boolean indexing under Dynamo's
    ``capture_dynamic_output_shape_ops``; ``.item()`` sizes under ``capture_scalar_outputs``)."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    from torch.utils._pytree import tree_leaves

    return any(free_unbacked_symbols(v) for n in gm.graph.nodes for v in tree_leaves(n.meta.get("val"))
               if isinstance(v, (torch.Tensor, torch.SymInt, torch.SymFloat, torch.SymBool)))


def _partition(joint: torch.fx.GraphModule, joint_inputs, **kwargs):
    """PyTorch's min-cut partitioner, after retagging the random ops of checkpointed regions
    (``torch.utils.checkpoint``) to be saved, not recomputed: recomputing them needs PyTorch's
    run_and_save_rng_state / run_with_rng_state, which it implements for cuda, cpu, hpu and xpu
    only. The backward then reads the forward's random values (dropout masks): eager's values,
    at the memory of one saved tensor per random op."""
    from torch.utils.checkpoint import CheckpointPolicy

    recompute = (CheckpointPolicy.MUST_RECOMPUTE, CheckpointPolicy.PREFER_RECOMPUTE)
    for node in joint.graph.nodes:
        if node.meta.get("recompute") in recompute and \
                torch.Tag.nondeterministic_seeded in getattr(node.target, "tags", ()):
            # a tensor result is saved; a tuple's (native_dropout's) tensors are, through its getitems
            tuple_out = not isinstance(node.meta.get("val"), torch.Tensor)
            node.meta["recompute"] = CheckpointPolicy.PREFER_SAVE if tuple_out else CheckpointPolicy.MUST_SAVE
            for user in node.users if tuple_out else ():
                user.meta["recompute"] = CheckpointPolicy.MUST_SAVE
    return min_cut_rematerialization_partition(joint, joint_inputs, **kwargs)


_NOT_OURS = "no neuron tensors"  # a graph PyTorch runs as it would without this backend


class _GraphCompiler:
    """Compiles the graphs of one Dynamo frame (forward, backward or inference)."""

    def __init__(self, model_name: str, fallback: bool):
        self.model_name = model_name
        self.fallback = fallback

    @staticmethod
    def _eagerly(gm, rec, reason: str):
        """`gm` run eagerly, op by op (not compiled), recorded with `reason` in the metrics."""
        rec.fallback, rec.reason = True, reason
        metrics.commit(rec)
        return EagerGraph(gm)

    def __call__(self, gm: torch.fx.GraphModule, example_inputs, graph_type: str, name: str | None = None,
                 specialise_us: float = 0.0, checked: bool = False):
        if name is None:
            aot_id, kind, nth = _aot_names()
            graph_type = kind if kind in ("forward", "backward", "inference") else graph_type
            name = f"{self.model_name}_{aot_id}_{graph_type}_{nth}"
        rec = metrics.new_record(name, self.model_name, graph_type, gm)
        rec.specialise_us = specialise_us
        t0 = time.perf_counter()
        # `checked`: a concrete copy of a symbolic graph that passed these checks (same nodes)
        if not checked and not _has_neuron_tensors(gm, example_inputs):  # as PyTorch would run it
            return self._eagerly(gm, rec, _NOT_OURS)
        if not checked and _data_dependent(gm):  # no size to specialise on before it runs: eager kernels, recorded
            _warn_once(("data-dependent", name), f"torch.compile(backend='neuron'): graph {name} has sizes that depend "
                       "on tensor values (unbacked symbols); it runs eagerly, op by op on neuron")
            return self._eagerly(gm, rec, "data-dependent sizes (unbacked symbols): run eagerly")
        try:
            prog = lower(gm, _donated() if graph_type == "backward" else ())
            prog.releases_inputs = graph_type == "backward"
        except DynamicShapes:
            rec.fallback, rec.reason = False, "symbolic shapes: lowered per concrete shape, shape-generic C shared"
            metrics.commit(rec)
            return SpecializingGraph(gm, self, name, graph_type)
        except UnsupportedOp as e:
            if not self.fallback:
                raise
            _warn_once(("op", e.op_name), f"{e.args[0].splitlines()[0]}; running graph {name} eagerly "
                                          "(fallback_execution)")
            return self._eagerly(gm, rec, str(e).splitlines()[0])
        t1 = time.perf_counter()
        rec.lowering_us = (t1 - t0) * 1e6
        if prog.device is None:  # no neuron value left after lowering
            return self._eagerly(gm, rec, _NOT_OURS)
        if _float64_on_device(gm):  # the device rule, as eager
            from torch_neuronx import _C

            _C._warn_float64(f"compiled graph {name}")
        source, tables, ints = generate(prog, name)
        t2 = time.perf_counter()
        rec.codegen_us = (t2 - t1) * 1e6
        keep = _keep_dir()
        if keep:
            _dump(keep, name, gm, source)
        module = None
        if tables:
            stats0 = jit.stats()
            module = jit.Module(source, name)
            rec.cache_hit = module.cache_hit
            rec.compiler_runs = jit.stats()["compiles"] - stats0["compiles"]
            rec.artifact = module.path
        rec.compile_us = (time.perf_counter() - t2) * 1e6
        rec.fused_kernel_count = prog.fused_kernels
        rec.c_step_count = prog.c_steps
        rec.gemm_epilogue_count = prog.gemm_epilogues
        rec.row_epilogue_count = len(prog.row_epilogues)
        rec.row_epilogue_ops = list(prog.row_epilogues)
        rec.row_prologue_count = len(prog.row_prologues)
        rec.row_prologue_ops = list(prog.row_prologues)
        rec.eager_ops = list(prog.eager_ops)
        rec.eager_op_count = len(prog.eager_ops)
        rec.host_ops = list(prog.host_ops)
        rec.collective_ops = list(prog.collective_ops)
        rec.segment_count = len(tables)
        metrics.commit(rec)
        return CompiledGraph(prog, module, tables, ints, name)


class SpecializingGraph:
    """A graph with symbolic sizes, lowered once per concrete shape it meets, whose shape-generic
    C is the same for every size of one structure (the JIT finds it compiled). A new shape binds
    the graph's size symbols to the inputs' sizes and evaluates every node's symbolic sizes,
    strides and numbers with them (a copy of the graph whose values are concrete fake tensors),
    then lowers that copy as a static graph. Where the inputs do not determine every symbol, the
    graph is re-propagated with fake tensors of the inputs instead (PyTorch's FakeTensorProp,
    ~4x slower). Each specialisation is a metrics record (``specialise_us``: the evaluation or
    re-propagation). The last CACHE_SIZE shapes are kept (least recently used dropped)."""

    CACHE_SIZE = 256
    # Lowerings for one set of tensor shapes (new values of Python numbers only) before the
    # warning that says how to avoid them.
    NUMBER_LOWERINGS_WARNED = 4

    def __init__(self, gm, compiler, name, graph_type):
        self._boxed_call = True
        self.gm, self.compiler, self.name, self.graph_type = gm, compiler, name, graph_type
        self.cache = collections.OrderedDict()
        self.count = 0
        self.fake_mode = None

    def __call__(self, *call_args):
        from .executor import _unbox

        args = _unbox(call_args)
        shapes = tuple((tuple(a.shape), tuple(a.stride()), a.dtype, a.device) for a in args if isinstance(a, torch.Tensor))
        key = (shapes, tuple((type(a).__name__, a) for a in args if not isinstance(a, torch.Tensor)))
        fn = self.cache.get(key)
        if fn is None:
            fn = self.cache[key] = self._specialise(args)
            if len(self.cache) > self.CACHE_SIZE:
                self.cache.popitem(last=False)
            if sum(k[0] == shapes for k in self.cache) > self.NUMBER_LOWERINGS_WARNED:
                # A symbolic Python int is a constant of each lowering (the C is shared, the
                # lowering is not); a 0-dim tensor is read at run time.
                _warn_once(("numbers", self.name), f"torch.compile(backend='neuron'): graph {self.name} is lowered "
                           "again for each new value of a Python int argument (tens of ms each); pass a value that "
                           "changes from call to call as a tensor (torch.tensor(n)), which is read at run time")
        else:
            self.cache.move_to_end(key)
        return fn(args)

    def _specialise(self, args):
        t0 = time.perf_counter()
        if self.fake_mode is None:  # holds the concrete values' fake tensors (built from meta tensors)
            from torch._subclasses.fake_tensor import FakeTensorMode

            self.fake_mode = FakeTensorMode()
        gm = _concrete_copy(self.gm, args, self.fake_mode)
        checked = gm is not None
        if gm is None:  # a symbol the inputs do not bind: PyTorch's re-propagation
            import copy

            from torch._subclasses.fake_tensor import FakeTensorMode
            from torch.fx.passes.fake_tensor_prop import FakeTensorProp

            gm = copy.deepcopy(self.gm)  # (a fresh mode: it would memoise the real inputs)
            FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*args)
        self.count += 1
        return self.compiler(gm, args, self.graph_type, f"{self.name}_s{self.count - 1}",
                             specialise_us=(time.perf_counter() - t0) * 1e6, checked=checked)


def _concrete_copy(gm, args, mode):
    """A copy of the symbolic graph `gm` whose ``meta["val"]`` are concrete for `args`: its size
    symbols bound from the placeholders' symbolic sizes, strides, offsets and integers (those
    that are a bare symbol), every symbolic value of every node evaluated with them. None if a
    symbol stays unbound or a placeholder's value disagrees with its argument (then the caller
    re-propagates)."""
    import sympy
    from torch._subclasses.fake_tensor import FakeTensor

    symbolic = (torch.SymInt, torch.SymFloat, torch.SymBool)
    bind = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(args):
        return None

    def facts(val, arg):
        if isinstance(val, torch.Tensor) and isinstance(arg, torch.Tensor):
            return list(zip((*val.shape, *val.stride(), val.storage_offset()),
                            (*arg.shape, *arg.stride(), arg.storage_offset())))
        return [(val, arg)] if isinstance(val, symbolic) else []

    pairs = [f for n, a in zip(placeholders, args) for f in facts(n.meta.get("val"), a)]
    for s, v in pairs:
        if isinstance(s, symbolic) and isinstance(s.node.expr, sympy.Symbol):
            bind[s.node.expr] = v
    known = {}

    def number(s):
        e = s.node.expr
        if e not in known:
            r = e.xreplace({k: sympy.sympify(v) for k, v in bind.items() if k in e.free_symbols})
            if r.free_symbols:
                raise LookupError(e)
            try:
                known[e] = bool(r) if isinstance(s, torch.SymBool) else float(r) if isinstance(s, torch.SymFloat) \
                    else int(r)
            except (TypeError, ValueError, AttributeError, OverflowError):  # sympy's oo (2 ** n past its range)
                raise LookupError(e) from None
        return known[e]

    def concrete(v):
        if isinstance(v, symbolic):
            return number(v)
        if not isinstance(v, FakeTensor):
            return v
        if not any(isinstance(x, symbolic) for x in (*v.shape, *v.stride(), v.storage_offset())):
            return v  # already concrete
        num = lambda xs: [number(x) if isinstance(x, symbolic) else x for x in xs]  # noqa: E731
        size, stride, offset = num(v.shape), num(v.stride()), concrete(v.storage_offset())
        extent = offset + 1 + sum((n - 1) * st for n, st in zip(size, stride)) if all(size) else offset
        elem = torch.empty(extent, dtype=v.dtype, device="meta").as_strided(size, stride, offset)
        return FakeTensor(mode, elem, v.device)

    from torch.utils._pytree import tree_map

    try:
        if any(concrete(s) != v for s, v in pairs):
            return None
        graph = torch.fx.Graph()
        out = graph.graph_copy(gm.graph, {})
        graph.output(out)
        for n in graph.nodes:
            if "val" in n.meta:
                n.meta["val"] = tree_map(concrete, n.meta["val"])
            if n.target in _ASSERTS:  # Dynamo's runtime assertions on sizes, raising as they would
                n.target(*tree_map(lambda a: a.meta["val"] if isinstance(a, torch.fx.Node) else a, n.args))
    except LookupError:
        return None
    return _with_graph(gm, graph)


def _with_graph(gm: torch.fx.GraphModule, graph: torch.fx.Graph) -> torch.fx.GraphModule:
    """`gm` holding `graph`, a copy of its own graph (same nodes and names, other meta): a new
    instance of gm's class sharing its submodules, attributes and generated forward, without
    torch.fx.GraphModule's Python code generation (milliseconds per graph, paid at each shape a
    symbolic graph is lowered for)."""
    new = object.__new__(type(gm))
    new.__dict__.update(gm.__dict__)
    new.__dict__["_graph"] = graph
    graph.owning_module = new
    return new


def _keep_dir():
    d = os.environ.get("TORCH_NEURONX_DEBUG_DIR")
    keep = os.environ.get("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", "0") not in ("", "0")
    return d if d and keep else None


def _dump(d, name, gm, source):
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, f"{name}.fx.txt"), "w") as f:
        f.write(gm.print_readable(print_output=False))
    with open(os.path.join(d, f"{name}.c"), "w") as f:
        f.write(source)


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, *, mode: str | None = None, options: dict | None = None):
    """The ``torch.compile`` backend ``"neuron"`` (registered with Dynamo and under the
    ``torch_dynamo_backends`` entry point).

    Args:
        gm: the FX graph Dynamo captured (Torch IR).
        example_inputs: its example inputs (fake tensors).
        mode: ``None``/``"default"``; any other value warns and is ignored.
        options: ``fallback_execution`` (bool), ``model_name`` (str).

    Returns:
        The compiled callable (AOTAutograd's forward; the backward compiles on first use).

    Raises:
        ValueError: an unknown option, or a fallback_execution that is not a bool.
        UnsupportedOp (through Dynamo's BackendCompilerFailed): an op with no native kernel,
            lowering or decomposition, unless fallback execution is on.
    """
    global _DECOMPS
    options = dict(options or {})
    unknown = set(options) - _OPTIONS
    if unknown:
        raise ValueError(f"torch.compile(backend='neuron'): unknown option(s) {sorted(unknown)}; "
                         f"supported: {sorted(_OPTIONS)}")
    if mode not in (None, "default"):
        _warn_once(("mode", mode), f"Neuron backend does not support mode='{mode}', falling back to default mode.")
    fallback = options.get("fallback_execution", _fallback_default())
    if not isinstance(fallback, bool):  # ("no" would be true)
        raise ValueError(f"torch.compile(backend='neuron'): option fallback_execution must be True or False, "
                         f"got {fallback!r}")
    compiler = _GraphCompiler(str(options.get("model_name", "model")), fallback)
    if _DECOMPS is None:
        _DECOMPS = _decompositions()
    if not _has_neuron_tensors(gm, example_inputs):  # a CPU model: run as captured, as backend="eager" would
        rec = metrics.new_record(f"{compiler.model_name}_dynamo", compiler.model_name, "dynamo", gm)
        compiler._eagerly(gm, rec, _NOT_OURS)
        return gm.forward
    mark = metrics.frame_start()
    ints, arith = _ints_as_tensors(gm, example_inputs) if any(isinstance(v, torch.SymInt) for v in example_inputs) \
        else ([], [])
    eager = torch.fx.GraphModule(gm, gm.graph) if ints else None  # the captured code, for ints past int64
    fn = aot_autograd(
        fw_compiler=lambda g, ex: compiler(g, ex, "forward"),
        bw_compiler=lambda g, ex: compiler(g, ex, "backward"),
        inference_compiler=lambda g, ex: compiler(g, ex, "inference"),
        decompositions=_DECOMPS,
        # saves fewer activations; pointwise ops are recomputed inside the backward's fused loops
        partition_fn=_partition,
        # inference graphs keep their input mutations (optimizer steps, in-place updates) as
        # copy_ nodes, which the lowering writes from the fused loops into the inputs' memory
        keep_inference_input_mutations=True,
    )(gm, example_inputs)
    metrics.frame_end(mark)
    return _with_int_tensors(fn, ints, arith, eager) if ints else fn


_INT64 = (-2**63, 2**63 - 1)


def _with_int_tensors(fn, positions, arith, eager):
    """`fn` (Dynamo's calling convention: unboxed) called with the Python ints at `positions` as
    0-dim int64 CPU tensors. Their arithmetic (`arith`, graph order) is first done on the Python
    ints: where a value leaves int64's range (which a tensor would wrap, a Python int does not),
    the call runs `eager`, the captured graph, op by op with the ints as they are (eager's
    values and errors)."""
    placeholders = [n for n in eager.graph.nodes if n.op == "placeholder"]

    def fits(args):
        env = {placeholders[i]: args[i] for i in positions}
        if not all(_INT64[0] <= v <= _INT64[1] for v in env.values()):
            return False
        for n in arith:
            v = env[n] = n.target(*[env.get(a, a) if isinstance(a, torch.fx.Node) else a for a in n.args])
            if not _INT64[0] <= v <= _INT64[1]:
                return False
        return True

    def call(*args):
        if not fits(args):
            return torch._dynamo.disable(eager.forward)(*args)
        args = list(args)
        for i in positions:
            args[i] = torch.tensor(args[i], dtype=torch.int64, device="cpu")
        return fn(*args)

    return call


__all__ = ["neuron_backend", "has_native_kernel"]
