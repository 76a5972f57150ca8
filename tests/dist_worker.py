"""One rank of a multi-process test of the `neuron` torch.distributed backend.

Run by tests/test_distributed.py (``python tests/dist_worker.py SCENARIO`` per rank, with RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT, LOCAL_RANK set, or under torchrun). Each rank writes a
JSON report to ``$DIST_RESULT_DIR/rank<R>.json``: ``{"checks": {name: "ok" | error text}, ...}``.

Expected values come from CPU PyTorch: every rank builds every rank's inputs from the rank
number (``make_input``) and reduces them with CPU ops.
"""
from __future__ import annotations

import datetime
import json
import os
import sys
import tempfile
import time
import traceback

import torch
import torch.distributed as dist

RANK = int(os.environ.get("RANK", "0"))
WORLD = int(os.environ.get("WORLD_SIZE", "1"))
DEV = "neuron"
R = dist.ReduceOp


def report(payload: dict) -> None:
    out = os.environ.get("DIST_RESULT_DIR")
    if out:
        with open(os.path.join(out, f"rank{RANK}.json"), "w") as f:
            json.dump(payload, f)


def init(backend="neuron", timeout_s=30.0, **kw) -> None:
    dist.init_process_group(backend, timeout=datetime.timedelta(seconds=timeout_s), **kw)


def make_input(rank: int, shape, dtype) -> torch.Tensor:
    """Rank-dependent CPU values, exact in every dtype (small integers)."""
    n = 1
    for s in shape:
        n *= s
    base = (torch.arange(n, dtype=torch.int64) * 3 + 5 * rank + 1) % 7 + 1
    if dtype == torch.bool:
        return ((base + rank) % 2 == 0).reshape(shape)
    return base.reshape(shape).to(dtype)


def reference(op, tensors: list[torch.Tensor]) -> torch.Tensor:
    """CPU PyTorch reduction of the ranks' tensors (float math for halves, then cast back)."""
    dtype = tensors[0].dtype
    work = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    s = torch.stack([t.to(work) for t in tensors])
    if dtype == torch.bool:
        s = s.to(torch.int64)
        out = {R.SUM: s.sum(0), R.PRODUCT: s.prod(0), R.MIN: s.amin(0), R.MAX: s.amax(0)}[op]
        return out.bool()
    if op == R.SUM:
        out = s.sum(0, dtype=work)
    elif op == R.AVG:
        out = s.sum(0) / len(tensors)
    elif op == R.PRODUCT:
        out = s.prod(0, dtype=work)
    elif op == R.MIN:
        out = s.amin(0)
    elif op == R.MAX:
        out = s.amax(0)
    else:
        raise ValueError(op)
    return out.to(dtype)


def same(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual.cpu(), expected, rtol=0, atol=0)


def close(actual: torch.Tensor, expected: torch.Tensor) -> None:
    torch.testing.assert_close(actual.cpu(), expected)


def column_view(t_cpu: torch.Tensor, fill=-9):
    """A (n, 3) device tensor whose column 1 holds `t_cpu` (stride 3) and whose other columns
    hold `fill`; returns (matrix, column view)."""
    n = t_cpu.numel()
    m = torch.full((n, 3), fill, dtype=t_cpu.dtype) if t_cpu.dtype != torch.bool else torch.zeros(n, 3, dtype=torch.bool)
    m[:, 1] = t_cpu.reshape(-1)
    md = m.to(DEV)
    return md, md[:, 1]


def untouched(md: torch.Tensor, fill=-9) -> None:
    """Columns 0 and 2 of a column_view matrix still hold `fill`."""
    c = md.cpu()
    expect = torch.full_like(c[:, 0], fill) if c.dtype != torch.bool else torch.zeros_like(c[:, 0])
    same(c[:, 0], expect)
    same(c[:, 2], expect)


# ---------------------------------------------------------------- collective checks

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


ALL_DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.uint8, torch.bool]


def _ops_for(dtype):
    if dtype == torch.bool:
        return [R.SUM, R.PRODUCT, R.MIN, R.MAX]
    ops = [R.SUM, R.PRODUCT, R.MIN, R.MAX]
    if dtype.is_floating_point:
        ops.append(R.AVG)
    return ops


@check
def all_reduce_dtypes_ops():
    for dtype in ALL_DTYPES:
        for op in _ops_for(dtype):
            ins = [make_input(r, (5, 3), dtype) for r in range(WORLD)]
            t = ins[RANK].to(DEV)
            dist.all_reduce(t, op=op)
            try:
                close(t, reference(op, ins))
            except AssertionError as e:
                raise AssertionError(f"{dtype} {op}: {e}") from None


@check
def all_reduce_premul_sum():
    for dtype in (torch.float32, torch.bfloat16):
        ins = [make_input(r, (8,), dtype) for r in range(WORLD)]
        t = ins[RANK].to(DEV)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
        close(t, (reference(R.SUM, ins).float() * 0.5).to(dtype))
        factor = torch.tensor(0.25, device=DEV)
        t = ins[RANK].to(DEV)
        dist.all_reduce(t, op=dist._make_nccl_premul_sum(factor))
        close(t, (reference(R.SUM, ins).float() * 0.25).to(dtype))


@check
def all_reduce_strided_views():
    for dtype in (torch.float32, torch.int64, torch.bool):
        ins = [make_input(r, (6,), dtype) for r in range(WORLD)]
        md, col = column_view(ins[RANK])
        dist.all_reduce(col, op=R.MAX)
        same(col, reference(R.MAX, ins))
        untouched(md)
    # offset slice of a contiguous tensor: aliased, no staging
    ins = [make_input(r, (10,), torch.float32) for r in range(WORLD)]
    base = torch.full((16,), -9.0).to(DEV)
    base[3:13] = ins[RANK].to(DEV)
    dist.all_reduce(base[3:13])
    b = base.cpu()
    same(b[3:13], reference(R.SUM, ins))
    same(b[:3], torch.full((3,), -9.0))
    same(b[13:], torch.full((3,), -9.0))
    # a transposed 2-D tensor and a 0-dim tensor
    ins = [make_input(r, (4, 3), torch.float32) for r in range(WORLD)]
    t = ins[RANK].t().contiguous().to(DEV).t()
    dist.all_reduce(t)
    same(t, reference(R.SUM, ins))
    s = torch.tensor(float(RANK + 1), device=DEV)
    dist.all_reduce(s)
    same(s, torch.tensor(float(sum(range(1, WORLD + 1)))))


@check
def all_reduce_complex_and_zero_size():
    ins = [torch.complex(make_input(r, (4,), torch.float32), -make_input(r, (4,), torch.float32)) for r in range(WORLD)]
    t = ins[RANK].to(DEV)
    dist.all_reduce(t)
    same(t, sum(ins))
    z = torch.empty(0, 3, device=DEV)
    dist.all_reduce(z)
    assert z.shape == (0, 3)


@check
def broadcast_roots_dtypes_strided():
    for root in range(WORLD):
        for dtype in ALL_DTYPES + [torch.int16, torch.float64, torch.complex64]:
            src = make_input(root, (7,), dtype) if not dtype.is_complex else torch.complex(
                make_input(root, (7,), torch.float32), make_input(root, (7,), torch.float32))
            t = (make_input(RANK, (7,), dtype) if not dtype.is_complex else src * 0).to(DEV)
            if RANK == root:
                t = src.to(DEV)
            dist.broadcast(t, src=root)
            same(t, src)
        md, col = column_view(make_input(RANK, (5,), torch.float32))
        dist.broadcast(col, src=root)
        same(col, make_input(root, (5,), torch.float32))
        untouched(md)


@check
def reduce_root_and_non_root():
    for root in range(WORLD):
        ins = [make_input(r, (6,), torch.float32) for r in range(WORLD)]
        t = ins[RANK].to(DEV)
        dist.reduce(t, dst=root)
        same(t, reference(R.SUM, ins) if RANK == root else ins[RANK])  # non-root input unchanged
        md, col = column_view(ins[RANK])
        dist.reduce(col, dst=root, op=R.MAX)
        same(col, reference(R.MAX, ins) if RANK == root else ins[RANK])
        untouched(md)


@check
def all_gather_list_and_tensor():
    for dtype in (torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.int16):
        ins = [make_input(r, (2, 3), dtype) for r in range(WORLD)]
        outs = [torch.empty(2, 3, dtype=dtype, device=DEV) for _ in range(WORLD)]
        dist.all_gather(outs, ins[RANK].to(DEV))
        for r in range(WORLD):
            same(outs[r], ins[r])
        out = torch.empty(WORLD * 2, 3, dtype=dtype, device=DEV)
        dist.all_gather_into_tensor(out, ins[RANK].to(DEV))
        same(out, torch.cat(ins))
    # strided input and output
    ins = [make_input(r, (4,), torch.float32) for r in range(WORLD)]
    md, col = column_view(ins[RANK])
    omd = torch.full((4 * WORLD, 3), -9.0).to(DEV)
    dist.all_gather_into_tensor(omd[:, 1], col)
    same(omd[:, 1], torch.cat(ins))
    untouched(omd)
    untouched(md)
    outs_m = [torch.full((4, 3), -9.0).to(DEV) for _ in range(WORLD)]
    dist.all_gather([m[:, 2] for m in outs_m], col)
    for r in range(WORLD):
        same(outs_m[r][:, 2], ins[r])
        same(outs_m[r][:, :2].cpu(), torch.full((4, 2), -9.0))
    # the stacked output form (world size, *input shape), as NCCL takes it
    parts = [make_input(r, (2, 3), torch.float32) for r in range(WORLD)]
    out = torch.empty(WORLD, 2, 3, device=DEV)
    dist.all_gather_into_tensor(out, parts[RANK].to(DEV))
    same(out, torch.stack(parts))
    # in place: the input is this rank's slice of the output (FSDP's pattern)
    out = torch.zeros(WORLD * 4, device=DEV)
    out[RANK * 4:(RANK + 1) * 4] = ins[RANK].to(DEV)
    dist.all_gather_into_tensor(out, out[RANK * 4:(RANK + 1) * 4])
    same(out, torch.cat(ins))


@check
def reduce_scatter_list_and_tensor():
    for op in (R.SUM, R.MAX, R.AVG):
        full = [make_input(r, (WORLD * 3,), torch.float32) for r in range(WORLD)]
        expect = reference(op, full).reshape(WORLD, 3)[RANK]
        out = torch.empty(3, device=DEV)
        dist.reduce_scatter_tensor(out, full[RANK].to(DEV), op=op)
        close(out, expect)
        out = torch.empty(3, device=DEV)
        dist.reduce_scatter(out, list(full[RANK].to(DEV).chunk(WORLD)), op=op)
        close(out, expect)
    full = [make_input(r, (WORLD * 3,), torch.bfloat16) for r in range(WORLD)]
    out = torch.empty(3, dtype=torch.bfloat16, device=DEV)
    dist.reduce_scatter_tensor(out, full[RANK].to(DEV), op=dist._make_nccl_premul_sum(0.5))
    close(out, (reference(R.SUM, full).float() * 0.5).to(torch.bfloat16).reshape(WORLD, 3)[RANK])
    # the stacked input form (world size, *output shape)
    full = [make_input(r, (WORLD, 2), torch.float32) for r in range(WORLD)]
    out = torch.empty(2, device=DEV)
    dist.reduce_scatter_tensor(out, full[RANK].to(DEV))
    close(out, reference(R.SUM, full)[RANK])
    # strided output and input
    full = [make_input(r, (WORLD * 4,), torch.float32) for r in range(WORLD)]
    imd, icol = column_view(full[RANK])
    omd, ocol = column_view(torch.zeros(4))
    dist.reduce_scatter_tensor(ocol, icol)
    same(ocol, reference(R.SUM, full).reshape(WORLD, 4)[RANK])
    untouched(omd)
    untouched(imd)
    # list form: strided inputs and output
    chunks = [column_view(full[RANK][r * 4:(r + 1) * 4]) for r in range(WORLD)]
    omd, ocol = column_view(torch.zeros(4))
    dist.reduce_scatter(ocol, [c for _, c in chunks])
    same(ocol, reference(R.SUM, full).reshape(WORLD, 4)[RANK])
    untouched(omd)
    for m, _ in chunks:
        untouched(m)


@check
def gather_scatter():
    for root in range(WORLD):
        ins = [make_input(r, (5,), torch.float32) for r in range(WORLD)]
        md, col = column_view(ins[RANK])
        outs = [torch.empty(5, device=DEV) for _ in range(WORLD)] if RANK == root else None
        dist.gather(col, outs, dst=root)
        if RANK == root:
            for r in range(WORLD):
                same(outs[r], ins[r])
        untouched(md)
        chunks = [make_input(10 + r, (5,), torch.int64) for r in range(WORLD)]
        omd, ocol = column_view(torch.zeros(5, dtype=torch.int64))
        dist.scatter(ocol, [c.to(DEV) for c in chunks] if RANK == root else None, src=root)
        same(ocol, chunks[RANK])
        untouched(omd)


@check
def all_to_all_even_uneven_and_list():
    # even split
    ins = [make_input(r, (WORLD * 2, 3), torch.float32) for r in range(WORLD)]
    out = torch.empty(WORLD * 2, 3, device=DEV)
    dist.all_to_all_single(out, ins[RANK].to(DEV))
    same(out, torch.cat([ins[r][RANK * 2:(RANK + 1) * 2] for r in range(WORLD)]))

    # uneven: rank r sends (r + d + 1) rows to rank d
    def rows(src, dst):
        return src + dst + 1

    in_splits = [rows(RANK, d) for d in range(WORLD)]
    out_splits = [rows(s, RANK) for s in range(WORLD)]
    src_all = [make_input(r, (sum(rows(r, d) for d in range(WORLD)), 2), torch.int64) for r in range(WORLD)]
    out = torch.empty(sum(out_splits), 2, dtype=torch.int64, device=DEV)
    dist.all_to_all_single(out, src_all[RANK].to(DEV), out_splits, in_splits)
    expect = []
    for s in range(WORLD):
        start = sum(rows(s, d) for d in range(RANK))
        expect.append(src_all[s][start:start + rows(s, RANK)])
    same(out, torch.cat(expect))
    # strided (column) input and output, uneven splits
    imd, icol = column_view(src_all[RANK][:, 0].contiguous())
    omd, ocol = column_view(torch.zeros(sum(out_splits), dtype=torch.int64))
    dist.all_to_all_single(ocol, icol, out_splits, in_splits)
    same(ocol, torch.cat(expect)[:, 0])
    untouched(omd)
    untouched(imd)
    # list form with different sizes per peer, strided output
    in_list = [make_input(RANK * 10 + d, (RANK + d + 1,), torch.float32).to(DEV) for d in range(WORLD)]
    mds = [column_view(torch.zeros(s + RANK + 1)) for s in range(WORLD)]
    dist.all_to_all([c for _, c in mds], in_list)
    for s in range(WORLD):
        same(mds[s][1], make_input(s * 10 + RANK, (s + RANK + 1,), torch.float32))
        untouched(mds[s][0], fill=-9)


@check
def point_to_point():
    peer = (RANK + 1) % WORLD
    prev = (RANK - 1) % WORLD
    t = make_input(RANK, (6,), torch.float32).to(DEV)
    got = torch.zeros(6, device=DEV)
    reqs = [dist.isend(t, peer), dist.irecv(got, prev)]
    for r in reqs:
        r.wait()
    same(got, make_input(prev, (6,), torch.float32))
    # blocking send/recv with tags, strided destination, int dtype
    if RANK == 0:
        dist.send(make_input(0, (5,), torch.int32).to(DEV), 1, tag=7)
        dist.send(make_input(1, (5,), torch.int32).to(DEV), 1, tag=3)
    elif RANK == 1:
        md, col = column_view(torch.zeros(5, dtype=torch.int32))
        other = torch.zeros(5, dtype=torch.int32, device=DEV)
        dist.recv(col, 0, tag=7)
        dist.recv(other, 0, tag=3)
        same(col, make_input(0, (5,), torch.int32))
        same(other, make_input(1, (5,), torch.int32))
        untouched(md)
    # matched by tag, not by order (as Gloo and NCCL): a receive for a later tag posted first,
    # a send for a later tag issued first; one tag's messages arrive in the order sent
    if RANK == 0:
        dist.send(make_input(2, (3,), torch.float32).to(DEV), 1, tag=11)  # rank 1 waits for tag 12 first
        dist.send(make_input(3, (3,), torch.float32).to(DEV), 1, tag=12)
        sends = [dist.isend(make_input(k, (3,), torch.float32).to(DEV), 1, tag=tag)
                 for k, tag in ((4, 14), (5, 13), (6, 15), (7, 15))]
        for w in sends:
            w.wait()
    elif RANK == 1:
        got = {tag: torch.zeros(3, device=DEV) for tag in (11, 12, 13, 14)}
        for w in [dist.irecv(got[12], 0, tag=12), dist.irecv(got[11], 0, tag=11)]:
            w.wait()
        dist.recv(got[13], 0, tag=13)  # rank 0's tag 14 send was issued first
        dist.recv(got[14], 0, tag=14)
        first, second = torch.zeros(3, device=DEV), torch.zeros(3, device=DEV)
        dist.recv(first, 0, tag=15)
        dist.recv(second, 0, tag=15)
        for k, tag in ((2, 11), (3, 12), (5, 13), (4, 14)):
            same(got[tag], make_input(k, (3,), torch.float32))
        same(first, make_input(6, (3,), torch.float32))
        same(second, make_input(7, (3,), torch.float32))
    # many tags (more than the threads kept for quiet tags)
    many = range(100, 140)
    if RANK == 0:
        for tag in many:
            dist.send(torch.full((2,), float(tag), device=DEV), 1, tag=tag)
    elif RANK == 1:
        for tag in many:
            x = torch.zeros(2, device=DEV)
            dist.recv(x, 0, tag=tag)
            same(x, torch.full((2,), float(tag)))
    # batch_isend_irecv (both directions at once)
    send = make_input(RANK + 20, (3, 2), torch.bfloat16).to(DEV)
    recv = torch.zeros(3, 2, dtype=torch.bfloat16, device=DEV)
    ops = [dist.P2POp(dist.isend, send, peer), dist.P2POp(dist.irecv, recv, prev)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    same(recv, make_input(prev + 20, (3, 2), torch.bfloat16))
    # recv from any source
    if RANK == 1:
        x = torch.zeros(4, device=DEV)
        src = dist.recv(x)
        assert src == 0, src
        same(x, make_input(0, (4,), torch.float32))
    elif RANK == 0:
        dist.send(make_input(0, (4,), torch.float32).to(DEV), 1)
    # a recv of the wrong size or dtype fails (at the call or, stream-ordered, at the next
    # synchronisation); the message is discarded and the group stays usable
    for wrong in (torch.zeros(6, device=DEV), torch.zeros(4, dtype=torch.int32, device=DEV)):
        if RANK == 1:
            try:
                dist.recv(wrong, 0, tag=5)
                torch.neuron.synchronize()
            except RuntimeError as e:
                assert "the sender sent 4 elements" in str(e) and "stays usable" in str(e), str(e)
            else:
                raise AssertionError("a recv of the wrong size or dtype did not raise")
            assert not wrong.any().item()
        elif RANK == 0:
            dist.send(make_input(0, (4,), torch.float32).to(DEV), 1, tag=5)
        t = torch.ones(2, device=DEV)
        dist.all_reduce(t)
        same(t, torch.full((2,), float(WORLD)))


@check
def coalesced_ops():
    ins = [[make_input(r + k, (k + 2,), torch.float32) for k in range(3)] for r in range(WORLD)]
    ts = [t.to(DEV) for t in ins[RANK]]
    dist.all_reduce_coalesced(ts)
    for k in range(3):
        same(ts[k], reference(R.SUM, [ins[r][k] for r in range(WORLD)]))
    outs = [torch.empty(WORLD * 4, device=DEV), torch.empty(WORLD * 2, device=DEV)]
    srcs = [make_input(RANK, (4,), torch.float32).to(DEV), make_input(RANK + 5, (2,), torch.float32).to(DEV)]
    with dist._coalescing_manager():
        for o, s in zip(outs, srcs):
            dist.all_gather_into_tensor(o, s)
    same(outs[0], torch.cat([make_input(r, (4,), torch.float32) for r in range(WORLD)]))
    same(outs[1], torch.cat([make_input(r + 5, (2,), torch.float32) for r in range(WORLD)]))
    rs_out = [torch.empty(2, device=DEV), torch.empty(3, device=DEV)]
    rs_in = [make_input(RANK, (WORLD * 2,), torch.float32), make_input(RANK + 1, (WORLD * 3,), torch.float32)]
    with dist._coalescing_manager():
        for o, i in zip(rs_out, rs_in):
            dist.reduce_scatter_tensor(o, i.to(DEV))
    same(rs_out[0], reference(R.SUM, [make_input(r, (WORLD * 2,), torch.float32) for r in range(WORLD)]).reshape(WORLD, 2)[RANK])
    same(rs_out[1], reference(R.SUM, [make_input(r + 1, (WORLD * 3,), torch.float32) for r in range(WORLD)]).reshape(WORLD, 3)[RANK])


@check
def object_collectives():
    objs = [None] * WORLD
    dist.all_gather_object(objs, {"rank": RANK, "text": "x" * (RANK * 50 + 1)})
    assert objs == [{"rank": r, "text": "x" * (r * 50 + 1)} for r in range(WORLD)], objs
    lst = [f"from {RANK}", RANK] if RANK == 0 else [None, None]
    dist.broadcast_object_list(lst, src=0)
    assert lst == ["from 0", 0], lst
    got = [None] * WORLD if RANK == 1 else None
    dist.gather_object(("g", RANK), got, dst=1)
    if RANK == 1:
        assert got == [("g", r) for r in range(WORLD)], got
    out = [None]
    dist.scatter_object_list(out, [("s", r) for r in range(WORLD)] if RANK == 0 else None, src=0)
    assert out == [("s", RANK)], out


@check
def barriers_and_subgroups():
    dist.barrier()
    world_again = dist.new_group(list(range(WORLD)))
    t = make_input(RANK, (3,), torch.float32).to(DEV)
    dist.all_reduce(t, group=world_again)
    same(t, reference(R.SUM, [make_input(r, (3,), torch.float32) for r in range(WORLD)]))
    dist.barrier(group=world_again)
    singles = [dist.new_group([r]) for r in range(WORLD)]  # every rank calls new_group for all
    mine = singles[RANK]
    s = make_input(RANK, (3,), torch.float32).to(DEV)
    dist.all_reduce(s, group=mine)
    same(s, make_input(RANK, (3,), torch.float32))
    dist.barrier(group=mine)
    sub, _ = dist.new_subgroups(group_size=1)
    s2 = torch.ones(2, device=DEV)
    dist.all_reduce(s2, group=sub)
    same(s2, torch.ones(2))
    for g in [world_again, *singles]:
        dist.destroy_process_group(g)


@check
def async_work_and_futures():
    ins = [make_input(r, (64,), torch.float32) for r in range(WORLD)]
    t = ins[RANK].to(DEV)
    w = dist.all_reduce(t, async_op=True)
    assert isinstance(w, dist.Work)
    fut = w.get_future()
    vals = fut.wait()
    same(vals[0], reference(R.SUM, ins))
    deadline = time.time() + 10
    while not w.is_completed():
        assert time.time() < deadline, "is_completed() stayed False"
        time.sleep(0.001)
    assert w.is_success()
    w.wait()
    # then(): the callback's device work is ordered after the collective
    t2 = ins[RANK].to(DEV)
    f2 = dist.all_reduce(t2, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    same(f2.wait(), reference(R.SUM, ins) * 2)
    # asking for the future after completion
    t3 = ins[RANK].to(DEV)
    w3 = dist.all_reduce(t3, async_op=True)
    w3.wait()
    torch.neuron.synchronize()
    same(w3.get_future().wait()[0], reference(R.SUM, ins))
    # several in flight on the same tensor: each sees the previous result (stream order)
    t4 = torch.ones(8, device=DEV)
    works = [dist.all_reduce(t4, async_op=True) for _ in range(3)]
    for x in works:
        x.wait()
    same(t4, torch.full((8,), float(WORLD ** 3)))


@check
def stream_ordering():
    # The producer's queued work runs before the collective reads the tensor: a slow
    # matmul chain still queued when all_reduce is called.
    a = torch.full((256, 256), 1.0 / 256, device=DEV)
    x = torch.eye(256, device=DEV) * (RANK + 1)
    for _ in range(20):
        x = x @ a * 256 / 256 + 0  # keeps values (x @ a with a = 1/256 everywhere)
    y = x.sum(1)  # each entry: (RANK + 1) * 1 after the first product
    dist.all_reduce(y)
    expect = torch.full((256,), float(sum(r + 1 for r in range(WORLD))))
    close(y, expect)
    # a read queued before a broadcast sees the old value (write-after-read ordering)
    src = torch.full((4,), float(RANK + 1), device=DEV)
    before = src * 10
    dist.broadcast(src, src=0)
    same(before, torch.full((4,), 10.0 * (RANK + 1)))
    same(src, torch.full((4,), 1.0))
    # the current stream waits: a later kernel on it sees the reduced value
    z = torch.full((4,), float(RANK), device=DEV)
    dist.all_reduce(z)
    after = z + 1
    same(after, torch.full((4,), float(sum(range(WORLD)) + 1)))
    # a collective issued on a side stream orders against that stream
    s = torch.neuron.Stream()
    with torch.neuron.stream(s):
        q = torch.full((4,), 2.0, device=DEV)
        dist.all_reduce(q)
        q2 = q * 1
    torch.neuron.current_stream().wait_stream(s)
    same(q2, torch.full((4,), 2.0 * WORLD))


@check
def bad_inputs_raise_clearly():
    def expect(exc, words, fn):
        try:
            fn()
        except exc as e:
            msg = str(e)
            for w in words:
                assert w in msg, f"{w!r} not in {msg!r}"
            return
        raise AssertionError(f"no {exc.__name__} raised")

    expect(ValueError, ["all_reduce", "int16", "cast"],
           lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16, device=DEV)))
    expect(ValueError, ["AVG", "floating"],
           lambda: dist.all_reduce(torch.ones(3, dtype=torch.int64, device=DEV), op=R.AVG))
    expect(ValueError, ["BAND", "integer"],
           lambda: dist.all_reduce(torch.ones(3, device=DEV), op=R.BAND))
    expect(ValueError, ["all_gather_into_tensor", "elements"],
           lambda: dist.all_gather_into_tensor(torch.empty(3, device=DEV), torch.ones(2, device=DEV)))
    expect(ValueError, ["root rank", "out of range"],
           lambda: dist.distributed_c10d._get_default_group().broadcast(torch.ones(2, device=DEV), WORLD + 3))
    expect(ValueError, ["all_to_all_single", "split"],
           lambda: dist.all_to_all_single(torch.empty(4, device=DEV), torch.ones(4, device=DEV), [1] * WORLD, [1] * WORLD))
    expect(ValueError, ["overlapping"],
           lambda: dist.all_gather_into_tensor(torch.zeros(1, device=DEV).expand(2 * WORLD), torch.ones(2, device=DEV)))
    # in-place collectives write their input: refused on every rank, root or not
    for name, call in (("all_reduce", lambda t: dist.all_reduce(t)), ("broadcast", lambda t: dist.broadcast(t, 0)),
                       ("reduce", lambda t: dist.reduce(t, 0))):
        expect(ValueError, [name, "overlapping"], lambda: call(torch.ones(1, device=DEV).expand(4)))
    # checked at the call (Gloo's own checks would fail on the communication thread and end the group)
    expect(ValueError, ["all_gather_into_tensor", "float64"],
           lambda: dist.all_gather_into_tensor(torch.empty(2 * WORLD, dtype=torch.float64, device=DEV), torch.ones(2, device=DEV)))
    expect(ValueError, ["reduce_scatter_tensor", "float64"],
           lambda: dist.reduce_scatter_tensor(torch.empty(2, dtype=torch.float64, device=DEV), torch.ones(2 * WORLD, device=DEV)))
    expect(ValueError, ["all_gather", "one tensor per rank"],
           lambda: dist.all_gather([torch.empty(2, device=DEV) for _ in range(WORLD + 1)], torch.ones(2, device=DEV)))
    expect(ValueError, ["reduce_scatter", "one tensor per rank"],
           lambda: dist.reduce_scatter(torch.empty(2, device=DEV), [torch.ones(2, device=DEV) for _ in range(WORLD + 1)]))
    # the group still works afterwards
    t = torch.ones(2, device=DEV)
    dist.all_reduce(t)
    same(t, torch.full((2,), float(WORLD)))


def scenario_collectives():
    os.environ.setdefault("LOCAL_RANK", str(RANK))
    init("neuron")
    results = {}
    only = os.environ.get("DIST_CHECKS")
    for name, fn in CHECKS.items():
        if only and name not in only.split(","):
            continue
        try:
            fn()
            torch.neuron.synchronize()
            results[name] = "ok"
        except Exception:
            results[name] = traceback.format_exc(limit=6)
        dist.barrier()
    import torch_neuronx

    from torch_neuronx.distributed import get_backend_stats

    report({"checks": results, "fallback_ops": torch_neuronx.get_fallback_ops(),
            "device": torch.neuron.current_device(), "stats": get_backend_stats()})
    dist.destroy_process_group()


# ---------------------------------------------------------------- failures


def _error_text(fn):
    """Runs fn; returns (error text or None, seconds taken)."""
    t0 = time.monotonic()
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the test inspects the text)
        return f"{type(e).__name__}: {e}", time.monotonic() - t0
    return None, time.monotonic() - t0


def _still_usable() -> bool:
    x = torch.arange(4.0, device=DEV)
    return (x * 2).sum().item() == 12.0


def scenario_rank_dies():
    """Rank 1 exits abruptly after a first collective; rank 0's next all_reduce must fail."""
    init("neuron", timeout_s=float(os.environ.get("DIST_TIMEOUT", "8")))
    t = torch.ones(4, device=DEV)
    dist.all_reduce(t)
    torch.neuron.synchronize()
    if RANK == 1:
        os._exit(3)
    time.sleep(0.5)
    err, took = _error_text(lambda: (dist.all_reduce(t), t.cpu()))
    report({"error": err, "seconds": took, "usable": _still_usable()})
    err2, _ = _error_text(lambda: (dist.all_reduce(t), t.cpu()))
    report({"error": err, "seconds": took, "usable": _still_usable(), "second_error": err2})
    dist.destroy_process_group()


def scenario_never_calls():
    """Rank 1 joins the group but never calls the collective: rank 0 times out."""
    init("neuron", timeout_s=float(os.environ.get("DIST_TIMEOUT", "4")))
    if RANK == 1:
        time.sleep(float(os.environ.get("DIST_TIMEOUT", "4")) + 2)
        os._exit(0)
    t = torch.ones(4, device=DEV)
    err, took = _error_text(lambda: (dist.all_reduce(t), t.cpu()))
    report({"error": err, "seconds": took, "usable": _still_usable()})
    os._exit(0)  # the peer is gone or hung: no orderly shutdown


def scenario_never_joins():
    """Only rank 0 starts: init_process_group must fail within the timeout."""
    err, took = _error_text(lambda: init("neuron", timeout_s=float(os.environ.get("DIST_TIMEOUT", "4"))))
    report({"error": err, "seconds": took, "usable": _still_usable()})


def scenario_mismatch():
    """Ranks call collectives that disagree: a clear error, no crash, no corrupted data."""
    init("neuron", timeout_s=float(os.environ.get("DIST_TIMEOUT", "6")))
    cases = {
        "numel": lambda: dist.all_reduce(torch.ones(4 if RANK == 0 else 6, device=DEV)),
        "dtype": lambda: dist.all_reduce(torch.ones(4, dtype=torch.float32 if RANK == 0 else torch.int32, device=DEV)),
        "collective": lambda: (dist.all_reduce(torch.ones(4, device=DEV)) if RANK == 0
                               else dist.broadcast(torch.ones(4, device=DEV), src=0)),
        "all_gather": lambda: dist.all_gather_into_tensor(torch.zeros(2 * (4 if RANK == 0 else 6), device=DEV),
                                                          torch.ones(4 if RANK == 0 else 6, device=DEV)),
        "broadcast_root": lambda: dist.broadcast(torch.ones(4, device=DEV), src=RANK),
        "splits": lambda: dist.all_to_all_single(torch.zeros(4 if RANK == 0 else 2, device=DEV),
                                                 torch.ones(3, device=DEV), None if RANK else [2, 2], [1, 2]),
        # after a run of matching calls (whose checks the history skips), a mismatch
        "after_repeats": lambda: ([dist.all_reduce(torch.ones(4, device=DEV)) for _ in range(5)],
                                  dist.all_reduce(torch.ones(4 if RANK == 0 else 5, device=DEV))),
    }
    only = os.environ.get("DIST_CASES")
    results = {}
    for name, fn in cases.items():
        if only and name not in only.split(","):
            continue
        group = dist.new_group(list(range(WORLD)), timeout=datetime.timedelta(seconds=float(os.environ.get("DIST_TIMEOUT", "6"))))

        def call(fn=fn, group=group):
            with _default_group(group):
                fn()
            torch.neuron.synchronize()

        err, took = _error_text(call)
        results[name] = {"error": err, "seconds": took}
        dist.destroy_process_group(group)
    t = torch.ones(3, device=DEV)
    dist.all_reduce(t)  # the default group is unaffected
    report({"cases": results, "default_group_ok": t.cpu().tolist() == [float(WORLD)] * 3, "usable": _still_usable()})
    dist.destroy_process_group()


class _default_group:
    """Routes collectives without a group argument to `group` (test helper)."""

    def __init__(self, group):
        self.group = group

    def __enter__(self):
        self.saved = dist.distributed_c10d._world.default_pg
        dist.distributed_c10d._world.default_pg = self.group

    def __exit__(self, *exc):
        dist.distributed_c10d._world.default_pg = self.saved


# ---------------------------------------------------------------- launchers and mixed groups


def scenario_torchrun_default():
    """Under torchrun: init_process_group() with no backend resolves to neuron; env://. The
    group is then created again in the same processes (same name, same torchrun store)."""
    import torch_neuronx

    dist.init_process_group(timeout=datetime.timedelta(seconds=30))
    started = torch.neuron.is_initialized()  # before this script touched the device
    pg = dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device(DEV))
    t = torch.full((3,), float(RANK + 1), device=DEV)
    dist.all_reduce(t)
    rep = {"backend": dist.get_backend(), "backend_class": type(backend).__name__,
           "local_rank": int(os.environ["LOCAL_RANK"]), "device": torch.neuron.current_device(),
           "omp": os.environ.get("OMP_NUM_THREADS"), "runtime_threads": torch_neuronx._C._num_threads(),
           "visible_cores": os.environ.get("NEURON_RT_VISIBLE_CORES"), "runtime_started": started,
           "result": t.cpu().tolist()}
    dist.destroy_process_group()
    dist.init_process_group("neuron", timeout=datetime.timedelta(seconds=30))
    again = torch.full((2,), float(RANK + 1), device=DEV)
    dist.all_reduce(again)
    report(dict(rep, again=again.cpu().tolist()))
    dist.destroy_process_group()


def scenario_mixed():
    """'cpu:gloo,neuron:neuron': CPU tensors go to Gloo, neuron tensors to the neuron backend."""
    os.environ.setdefault("LOCAL_RANK", str(RANK))
    init("cpu:gloo,neuron:neuron", device_id=torch.device(DEV, RANK % torch.neuron.device_count()))
    pg = dist.distributed_c10d._get_default_group()
    c = torch.full((3,), float(RANK + 1))
    d = torch.full((3,), float(RANK + 1), device=DEV)
    dist.all_reduce(c)
    dist.all_reduce(d)
    objs = [None] * WORLD
    dist.all_gather_object(objs, RANK)
    dist.barrier()
    sub = dist.new_group(list(range(WORLD)))
    e = torch.ones(2, device=DEV)
    dist.all_reduce(e, group=sub)
    pair = dist.split_group(split_ranks=[list(range(WORLD))])
    singles = dist.split_group(split_ranks=[[r] for r in range(WORLD)])
    f = torch.full((2,), float(RANK + 1), device=DEV)
    dist.all_reduce(f, group=pair)
    g = torch.full((2,), float(RANK + 1), device=DEV)
    dist.all_reduce(g, group=singles)
    fc = torch.ones(2)
    dist.all_reduce(fc, group=pair)
    report({"cpu": c.tolist(), "neuron": d.cpu().tolist(), "objs": objs, "sub": e.cpu().tolist(),
            "split_pair": f.cpu().tolist(), "split_single": g.cpu().tolist(), "split_cpu": fc.tolist(),
            "split_backend": type(pair._get_backend(torch.device(DEV))).__name__,
            "cpu_backend": type(pg._get_backend(torch.device("cpu"))).__name__,
            "neuron_backend": type(pg._get_backend(torch.device(DEV))).__name__})
    dist.destroy_process_group()


def scenario_groups_with_device_id():
    """Subgroups of a group with a bound device_id: "neuron:neuron,cpu:gloo" (this backend's
    Gloo transports come before the CPU Gloo backend), new_group/new_subgroups with ranks
    outside them, split_group of both backends; then the same after destroy and init again."""
    os.environ.setdefault("LOCAL_RANK", str(RANK))
    rounds = []
    # the second round meets in a file store (PyTorch removes it after its last user): a rank done
    # with destroy_process_group could otherwise reach the first round's TCP store before rank 0
    # has closed it
    store_file = os.path.join(tempfile.gettempdir(), f"neuron_dist_groups_{os.environ['MASTER_PORT']}")
    for backend, method in (("neuron:neuron,cpu:gloo", "env://"), ("cpu:gloo,neuron:neuron", f"file://{store_file}")):
        init(backend, device_id=torch.device(DEV, RANK % torch.neuron.device_count()), init_method=method,
             rank=RANK, world_size=WORLD)
        first = dist.new_group([0])  # rank 1 is outside it
        mine, _ = dist.new_subgroups(group_size=1)
        singles = dist.split_group(split_ranks=[[r] for r in range(WORLD)])
        d = torch.full((2,), float(RANK + 1), device=DEV)
        dist.all_reduce(d, group=mine)
        c = torch.full((2,), float(RANK + 1))
        dist.all_reduce(c, group=singles)
        w = torch.ones(2, device=DEV)
        dist.all_reduce(w)
        rounds.append({"outside_first": first == dist.GroupMember.NON_GROUP_MEMBER, "sub": d.cpu().tolist(),
                       "split_cpu": c.tolist(), "world": w.cpu().tolist()})
        dist.barrier()
        dist.destroy_process_group()
    report({"rounds": rounds})


# ---------------------------------------------------------------- DDP


class _Net(torch.nn.Module):
    """A small MLP with a branch used only on even steps (find_unused_parameters)."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(8, 32)
        self.fc2 = torch.nn.Linear(32, 32)
        self.head = torch.nn.Linear(32, 4)
        self.extra = torch.nn.Linear(32, 32)
        self.norm = torch.nn.LayerNorm(32)

    def forward(self, x, use_extra: bool):
        h = torch.nn.functional.gelu(self.fc1(x))
        h = self.norm(self.fc2(h))
        if use_extra:
            h = h + torch.tanh(self.extra(h))
        return self.head(h)


def _batches(steps, per_rank):
    g = torch.Generator().manual_seed(1234)
    return [(torch.randn(WORLD * per_rank, 8, generator=g), torch.randn(WORLD * per_rank, 4, generator=g))
            for _ in range(steps)]


def _train(model, batches, rank_slice, device, step_fn=None):
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    losses = []
    for i, (x, y) in enumerate(batches):
        x, y = x[rank_slice].to(device), y[rank_slice].to(device)
        loss = torch.nn.functional.mse_loss(model(x, use_extra=(i % 2 == 0)), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return [float(l) for l in losses]


def scenario_ddp():
    """DDP on neuron (built-in all-reduce; and a Python comm hook) vs one process on the
    concatenated batch: losses (averaged over ranks) and parameters after each run."""
    import torch_neuronx
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.setdefault("LOCAL_RANK", str(RANK))
    init("neuron")
    steps, per_rank = 6, 8
    batches = _batches(steps, per_rank)
    mine = slice(RANK * per_rank, (RANK + 1) * per_rank)
    torch_neuronx.clear_op_tracking()
    out = {}
    for variant in ("builtin", "hook"):
        torch.manual_seed(0)
        ref = _Net()
        torch.manual_seed(0)
        model = _Net().to(DEV)
        ddp = DDP(model, find_unused_parameters=True, bucket_cap_mb=0.002)  # several buckets
        if variant == "hook":
            ddp.register_comm_hook(None, default_hooks.allreduce_hook)
        local = _train(ddp, batches, mine, DEV)
        mean_loss = torch.tensor(local, device=DEV)
        dist.all_reduce(mean_loss, op=R.AVG)
        ref_losses = _train(ref, batches, slice(None), "cpu")  # one process, whole batch, CPU
        diffs = {n: (p.detach().cpu() - dict(ref.named_parameters())[n].detach()).abs().max().item()
                 for n, p in model.named_parameters()}
        scale = {n: p.detach().abs().max().item() for n, p in ref.named_parameters()}
        out[variant] = {"losses": mean_loss.cpu().tolist(), "ref_losses": ref_losses,
                        "param_max_abs_diff": diffs, "param_max_abs": scale}
    out["fallback_ops"] = torch_neuronx.get_fallback_ops()
    report(out)
    dist.destroy_process_group()


# ---------------------------------------------------------------- SyncBatchNorm


def scenario_syncbn():
    """nn.SyncBatchNorm on neuron (uneven per-rank batches: 3 and 5 samples; two training
    steps, then eval) vs the plain BatchNorm on the concatenated batch on CPU: outputs, input
    gradients, weight/bias gradients (summed over ranks, as DDP would) and running stats."""
    import copy

    import torch_neuronx

    os.environ.setdefault("LOCAL_RANK", str(RANK))
    init("neuron")
    sizes = [3, 5][:WORLD] if WORLD == 2 else [4] * WORLD
    start = sum(sizes[:RANK])
    mine = slice(start, start + sizes[RANK])
    torch_neuronx.clear_op_tracking()
    out = {}
    for name, cls, shape in (("2d", torch.nn.BatchNorm2d, (3, 5, 4)), ("1d", torch.nn.BatchNorm1d, (3, 6)),
                             ("3d", torch.nn.BatchNorm3d, (2, 3, 2, 3))):
        channels = shape[0]
        ref = cls(channels, momentum=0.2)
        with torch.no_grad():
            ref.weight.copy_(torch.linspace(0.5, 1.5, channels))
            ref.bias.copy_(torch.linspace(-0.2, 0.3, channels))
        sync = torch.nn.SyncBatchNorm.convert_sync_batchnorm(copy.deepcopy(ref)).to(DEV)
        g = torch.Generator().manual_seed(11)
        diffs = {}

        def diff(key, actual, expected):
            diffs[key] = max(diffs.get(key, 0.0), (actual.detach().cpu() - expected.detach()).abs().max().item())

        for step in range(2):
            x = torch.randn(sum(sizes), *shape, generator=g) * (1 + step) + 0.5
            dy = torch.randn(sum(sizes), *shape, generator=g)
            xr = x.clone().requires_grad_()
            ref.zero_grad()
            yr = ref(xr)
            (yr * dy).sum().backward()
            xd = x[mine].to(DEV).requires_grad_()
            sync.zero_grad()
            yd = sync(xd)
            (yd * dy[mine].to(DEV)).sum().backward()
            grads = torch.cat([sync.weight.grad, sync.bias.grad])
            dist.all_reduce(grads)  # each rank holds its batch's share, DDP would sum them
            diff("output", yd, yr[mine])
            diff("input_grad", xd.grad, xr.grad[mine])
            diff("weight_grad", grads[:channels], ref.weight.grad)
            diff("bias_grad", grads[channels:], ref.bias.grad)
            diff("running_mean", sync.running_mean, ref.running_mean)
            diff("running_var", sync.running_var, ref.running_var)
        assert int(sync.num_batches_tracked) == int(ref.num_batches_tracked) == 2
        sync.eval(), ref.eval()
        x = torch.randn(sum(sizes), *shape, generator=g)
        diff("eval_output", sync(x[mine].to(DEV)), ref(x)[mine])
        out[name] = diffs
    out["fallback_ops"] = torch_neuronx.get_fallback_ops()
    out["batch_norm_ops"] = sorted(op for op in torch_neuronx.get_executed_op_counts() if "batch_norm" in op)
    report(out)
    dist.destroy_process_group()


SCENARIOS = {"ddp": scenario_ddp, "collectives": scenario_collectives, "rank_dies": scenario_rank_dies,
             "never_calls": scenario_never_calls, "never_joins": scenario_never_joins,
             "mismatch": scenario_mismatch, "torchrun_default": scenario_torchrun_default,
             "mixed": scenario_mixed, "groups_with_device_id": scenario_groups_with_device_id, "syncbn": scenario_syncbn}


def main() -> None:
    name = sys.argv[1]
    torch.set_num_threads(1)
    SCENARIOS[name]()


if __name__ == "__main__":
    main()
