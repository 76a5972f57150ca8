"""Per-graph records of the neuron compiler (``torch_neuronx.get_dynamo_metrics()``)."""
from __future__ import annotations

import itertools
import threading
import time
from dataclasses import asdict, dataclass, field

_lock = threading.Lock()
_records: list = []
_ids = itertools.count()


@dataclass
class GraphRecord:
    """One compiled graph. Times in microseconds.

    graph_id: process-wide counter. graph_name: ``{model}_{aot_id}_{graph_type}_{nth}``.
    graph_type: ``forward``, ``backward`` or ``inference``. graph_node_count: FX nodes.
    has_collectives: the graph calls c10d functional collectives. fused_kernel_count: fusion
    groups generated as C loops; row_epilogue_count those of them run inside a row kernel on
    its finished rows, and row_epilogue_ops the kernels that run them, in program order
    (``aten::addmm``, ``aten::native_layer_norm_backward``, ...); gemm_epilogue_count those
    run on a GEMM's finished tiles (a bias, activation or residual add after a product).
    row_prologue_count / row_prologue_ops: likewise the groups computing a softmax's or layer
    norm's input rows inside the kernel. c_step_count: C steps (loops, reductions, runtime kernel
    calls). eager_op_count / eager_ops: neuron ops run through their eager kernels between C
    segments; host_ops: ops on CPU tensors in the graph (run by PyTorch's CPU kernels);
    collective_ops: the c10d functional collectives and waits the graph calls, in order. segment_count: tasks per run. aot_us: AOTAutograd tracing and partitioning
    (forward record of a frame). specialise_us: a symbolic graph's re-propagation with a new
    shape's fake tensors (its specialisation records). lowering_us, codegen_us, compile_us (C
    compiler and loading).
    cache_hit: the compiled object came from the cache (no C compiler run); compiler_runs.
    fallback: the graph runs eagerly (reason says why). artifact: path of the shared object.
    """

    graph_id: int
    graph_name: str
    model_name: str
    graph_type: str
    graph_node_count: int
    has_collectives: bool
    timestamp: float
    fused_kernel_count: int = 0
    gemm_epilogue_count: int = 0
    row_epilogue_count: int = 0
    row_epilogue_ops: list = field(default_factory=list)
    row_prologue_count: int = 0
    row_prologue_ops: list = field(default_factory=list)
    c_step_count: int = 0
    eager_op_count: int = 0
    eager_ops: list = field(default_factory=list)
    host_ops: list = field(default_factory=list)
    collective_ops: list = field(default_factory=list)
    segment_count: int = 0
    aot_us: float = 0.0
    specialise_us: float = 0.0
    lowering_us: float = 0.0
    codegen_us: float = 0.0
    compile_us: float = 0.0
    cache_hit: bool = False
    compiler_runs: int = 0
    fallback: bool = False
    reason: str = ""
    artifact: str = ""


def new_record(name, model_name, graph_type, gm) -> GraphRecord:
    nodes = list(gm.graph.nodes)
    coll = any("_c10d_functional" in str(getattr(n, "target", "")) for n in nodes)
    return GraphRecord(next(_ids), name, model_name, graph_type, len(nodes), coll, time.time())


def commit(rec: GraphRecord) -> None:
    with _lock:
        _records.append(rec)


def frame_start() -> tuple:
    with _lock:
        return len(_records), time.perf_counter()


def frame_end(mark: tuple) -> None:
    """Attributes a frame's AOTAutograd time (its total minus the graphs compiled in it) to
    its first record."""
    start, t0 = mark
    total = (time.perf_counter() - t0) * 1e6
    with _lock:
        recs = _records[start:]
        if recs:
            ours = sum(r.specialise_us + r.lowering_us + r.codegen_us + r.compile_us for r in recs)
            recs[0].aot_us = max(0.0, total - ours)


def get_dynamo_metrics() -> list[dict]:
    """One dict per graph the neuron compiler received, in order (see GraphRecord)."""
    with _lock:
        return [asdict(r) for r in _records]


def reset_dynamo_metrics() -> None:
    """Forget all records."""
    with _lock:
        _records.clear()
