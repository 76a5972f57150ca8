"""One rank of the multi-process tests of PyTorch's distributed stacks on `neuron`: FSDP2,
DTensor and tensor parallel, distributed checkpoints, pipelining, functional collectives
(eager and compiled), and the 2-D mesh on 4 ranks.

Run by tests/test_distributed_stacks.py (and tests/dist_mesh_4ranks.py) as
``python tests/dist_stacks.py SCENARIO`` per rank, with the environment of
tests/test_distributed.py's ``run_ranks``. Each scenario runs a list of checks; a check raises
on a mismatch (expected values come from CPU PyTorch, or from the same stack in one process
where the issue asks for that) and returns figures (largest differences seen). The rank writes
``{"checks": {name: {"figures": ...} | {"error": traceback}}, "fallback_ops": [...]}``.

The model is the main job's GPT (torch_neuronx.examples.gpt.TinyGPT, small) trained with SGD
with momentum: Adam would turn the rounding noise of gradients that are zero in exact
arithmetic (the key projection's bias) into full-size steps, hiding real differences.
"""
from __future__ import annotations

import copy
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dist_worker import DEV, RANK, WORLD, init, report  # noqa: E402

from torch_neuronx.examples.gpt import TinyGPT  # noqa: E402

GPT = dict(vocab=50, d=32, layers=2, heads=4, block=16)
STEPS = 3
BATCH = 8  # global batch (sequences); data-parallel ranks take equal slices
FP32 = dict(loss_rtol=1e-5, param_tol=1e-5)  # param_tol: max |diff| / max(1, max |param|)


def gpt(seed: int = 0) -> TinyGPT:
    torch.manual_seed(seed)
    return TinyGPT(**GPT)


def batches(steps: int = STEPS, batch: int = BATCH):
    g = torch.Generator().manual_seed(1234)
    return [(torch.randint(0, GPT["vocab"], (batch, GPT["block"]), generator=g),
             torch.randint(0, GPT["vocab"], (batch, GPT["block"]), generator=g)) for _ in range(steps)]


def my_rows(batch: int = BATCH, world: int = WORLD, rank: int = RANK) -> slice:
    n = batch // world
    return slice(rank * n, (rank + 1) * n)


def sgd(params, **kw):
    return torch.optim.SGD(params, lr=0.1, momentum=0.9, **kw)


def full_params(model) -> dict[str, torch.Tensor]:
    """name -> full float32 CPU tensor (DTensor parameters gathered)."""
    from torch.distributed.tensor import DTensor

    return {n: (p.full_tensor() if isinstance(p, DTensor) else p).detach().float().cpu()
            for n, p in model.named_parameters()}


def cpu_reference(data=None):
    """One CPU process on the whole batch: (losses, parameters)."""
    model = gpt()
    opt = sgd(model.parameters())
    losses = []
    for x, y in data or batches():
        loss = model(x, y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    return losses, full_params(model)


def compare(losses, params, ref_losses, ref_params, loss_rtol, param_tol, names=None) -> dict:
    """Raises unless the losses and parameters (those in `names`, default all) match; returns
    the largest relative loss difference and scaled parameter difference."""
    ref_l = torch.tensor(ref_losses, dtype=torch.float64)
    got_l = torch.tensor(losses, dtype=torch.float64)
    loss_rel = ((got_l - ref_l).abs() / ref_l.abs()).max().item()
    assert loss_rel <= loss_rtol, f"losses {losses} vs one process {ref_losses} (rel diff {loss_rel:.3g})"
    worst, worst_name = 0.0, None
    for n in names if names is not None else ref_params:
        diff = (params[n] - ref_params[n]).abs().max().item() / max(1.0, ref_params[n].abs().max().item())
        if diff > worst:
            worst, worst_name = diff, n
    assert worst <= param_tol, f"parameter {worst_name}: scaled max diff {worst:.3g} > {param_tol}"
    return {"loss_max_rel_diff": loss_rel, "param_max_scaled_diff": worst}


def mean_over_ranks(values, group=None) -> list[float]:
    t = torch.tensor(values, device=DEV)
    dist.all_reduce(t, op=dist.ReduceOp.AVG, group=group)
    return t.cpu().tolist()


def run_checks(checks: dict, extra: dict | None = None) -> None:
    """Runs each check (all ranks in step), reports figures or the traceback of each."""
    import torch_neuronx

    torch_neuronx.clear_op_tracking()
    out = {}
    only = os.environ.get("DIST_CHECKS")
    for name, fn in checks.items():
        if only and name not in only.split(","):
            continue
        t0 = time.monotonic()
        try:
            figures = fn() or {}
            torch.neuron.synchronize()
            out[name] = {"figures": figures, "seconds": time.monotonic() - t0}
        except Exception:
            out[name] = {"error": traceback.format_exc(limit=8)}
        if dist.is_initialized():
            dist.barrier()
    report({"checks": out, "fallback_ops": torch_neuronx.get_fallback_ops(), **(extra or {})})


# ---------------------------------------------------------------- FSDP2


def _mesh():
    from torch.distributed.device_mesh import init_device_mesh

    return init_device_mesh(DEV, (WORLD,))


def _fsdp_train(mesh, rows: slice, data, **shard_kw):
    """fully_shard on each block and the root; SGD steps on this rank's rows. Returns (model,
    losses as this rank saw them, whether the blocks' parameters were sharded after forward)."""
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import DTensor

    model = gpt()
    if "offload_policy" not in shard_kw:
        model = model.to(DEV)
    for block in model.blocks:
        fully_shard(block, mesh=mesh, **shard_kw)
    fully_shard(model, mesh=mesh, **shard_kw)
    opt = sgd(model.parameters())
    losses, sharded_after_forward = [], None
    for x, y in data:
        loss = model(x[rows].to(DEV), y[rows].to(DEV))
        if sharded_after_forward is None:  # FSDP registers the unsharded parameters while unsharded
            sharded_after_forward = isinstance(model.blocks[0].qkv.weight, DTensor)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.detach().float().item())
    return model, losses, sharded_after_forward


def _fsdp_fp32(reshard: bool, offload: bool = False):
    from torch.distributed.fsdp import CPUOffloadPolicy

    data = batches()
    kw = {"reshard_after_forward": reshard}
    if offload:
        kw["offload_policy"] = CPUOffloadPolicy()
    model, losses, sharded = _fsdp_train(_mesh(), my_rows(), data, **kw)
    assert sharded == reshard, f"reshard_after_forward={reshard} but sharded after forward: {sharded}"
    if offload:  # the sharded parameters (and the optimizer step) live on the host
        local = model.blocks[0].qkv.weight.to_local()
        assert local.device.type == "cpu", local.device
    ref_losses, ref_params = cpu_reference(data)
    return compare(mean_over_ranks(losses), full_params(model), ref_losses, ref_params, **FP32)


def fsdp_reshard_after_forward():
    return _fsdp_fp32(reshard=True)


def fsdp_no_reshard_after_forward():
    return _fsdp_fp32(reshard=False)


def fsdp_cpu_offload():
    # gathering host-resident shards (full_tensor, full state dicts) takes the group's CPU
    # backend: the scenario's group is 'cpu:gloo,neuron:neuron'
    return _fsdp_fp32(reshard=True, offload=True)


def fsdp_mixed_precision():
    """bf16 parameters, float32 gradient reduction: 2 ranks against the same policy in one
    process (a one-rank mesh) on the whole batch, within bf16 tolerance."""
    from torch.distributed.device_mesh import DeviceMesh
    from torch.distributed.fsdp import MixedPrecisionPolicy

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    data = batches()
    model, losses, _ = _fsdp_train(_mesh(), my_rows(), data, mp_policy=mp)
    own, _ = dist.new_subgroups(group_size=1)
    ref, ref_losses, _ = _fsdp_train(DeviceMesh.from_group(own, DEV), slice(None), data, mp_policy=mp)
    start = full_params(gpt())
    params, ref_params = full_params(model), full_params(ref)
    assert all(p.dtype == torch.float32 for p in model.parameters())  # sharded parameters stay float32
    # bf16 tolerance: losses as torch.testing's bf16 default; parameters within 2 % of how far
    # training moved them (bf16 has 8 bits of precision: 0.4 %)
    moved = max((ref_params[n] - start[n]).abs().max().item() for n in start)
    figures = compare(mean_over_ranks(losses), params, ref_losses, ref_params, loss_rtol=1.6e-2,
                      param_tol=0.02 * moved)
    figures["param_max_change"] = moved
    return figures


FSDP_CHECKS = {f.__name__: f for f in (fsdp_reshard_after_forward, fsdp_no_reshard_after_forward,
                                        fsdp_mixed_precision, fsdp_cpu_offload)}


def scenario_fsdp():
    init("cpu:gloo,neuron:neuron")  # CPU offload gathers host tensors (see fsdp_cpu_offload)
    run_checks(FSDP_CHECKS)
    dist.destroy_process_group()


# ---------------------------------------------------------------- DTensor and tensor parallel


def _expected_local(full: torch.Tensor, placement) -> torch.Tensor:
    """This rank's piece under `placement` (DTensor's even-chunk rule: torch.chunk sizes)."""
    from torch.distributed.tensor import Shard

    if isinstance(placement, Shard):
        chunks = list(torch.chunk(full, WORLD, dim=placement.dim))
        if RANK < len(chunks):
            return chunks[RANK]
        shape = list(full.shape)
        shape[placement.dim] = 0
        return full.new_empty(shape)
    return full


def dtensor_redistribute():
    """Every pair of Shard(0), Shard(1) (uneven: 5 rows, 7 columns on 2 ranks) and Replicate,
    and Partial (sum, max) to Replicate and to Shard: local pieces and full tensors exact."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

    mesh = _mesh()
    full = torch.arange(35, dtype=torch.float32).reshape(5, 7) * 0.5 - 3
    layouts = [Shard(0), Shard(1), Replicate()]
    for src in layouts:
        d = distribute_tensor(full.to(DEV), mesh, [src])
        torch.testing.assert_close(d.to_local().cpu(), _expected_local(full, src), rtol=0, atol=0)
        for dst in layouts:
            r = d.redistribute(mesh, [dst])
            assert r.placements == (dst,)
            torch.testing.assert_close(r.to_local().cpu(), _expected_local(full, dst), rtol=0, atol=0,
                                       msg=lambda m: f"{src} -> {dst}: {m}")
            torch.testing.assert_close(r.full_tensor().cpu(), full, rtol=0, atol=0)
    pieces = [full * (r + 1) - r for r in range(WORLD)]  # each rank's partial value
    for op, expect in (("sum", sum(pieces)), ("max", torch.stack(pieces).amax(0))):
        for dst in (Replicate(), Shard(0), Shard(1)):
            p = DTensor.from_local(pieces[RANK].to(DEV), mesh, [Partial(op)])
            r = p.redistribute(mesh, [dst])
            torch.testing.assert_close(r.to_local().cpu(), _expected_local(expect, dst), rtol=0, atol=0,
                                       msg=lambda m: f"Partial({op}) -> {dst}: {m}")


def dtensor_ops():
    """DTensor operators on neuron (sharding propagation; local kernels native) and their
    backward, against CPU: matmul of row shards, a contraction over a sharded dim (Partial),
    softmax, layer norm, reductions, broadcasting elementwise ops."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = _mesh()
    g = torch.Generator().manual_seed(7)
    a, w, b = torch.randn(6, 8, generator=g), torch.randn(8, 4, generator=g), torch.randn(4, generator=g)
    da = distribute_tensor(a.to(DEV), mesh, [Shard(0)]).requires_grad_()
    dw = distribute_tensor(w.to(DEV), mesh, [Replicate()]).requires_grad_()
    db = distribute_tensor(b.to(DEV), mesh, [Replicate()]).requires_grad_()
    h = torch.tanh(da @ dw + db)
    assert h.placements == (Shard(0),), h.placements
    s = torch.softmax(h, dim=1) * 3 + F.layer_norm(h, (4,))
    loss = (s * s).sum()
    a_, w_, b_ = (t.clone().requires_grad_() for t in (a, w, b))
    h_ = torch.tanh(a_ @ w_ + b_)
    loss_ = ((torch.softmax(h_, dim=1) * 3 + F.layer_norm(h_, (4,))) ** 2).sum()
    torch.testing.assert_close(s.full_tensor().cpu(), torch.softmax(h_, 1) * 3 + F.layer_norm(h_, (4,)))
    torch.testing.assert_close(loss.full_tensor().cpu(), loss_.detach())
    loss.backward()
    loss_.backward()
    for d, t in ((da, a_), (dw, w_), (db, b_)):
        torch.testing.assert_close(d.grad.full_tensor().cpu(), t.grad)
    # a contraction over the sharded dim gives a Partial sum, reduced on demand
    c = distribute_tensor(a.to(DEV), mesh, [Shard(1)]) @ distribute_tensor(w.to(DEV), mesh, [Shard(0)])
    assert c.placements[0].is_partial(), c.placements
    torch.testing.assert_close(c.full_tensor().cpu(), a @ w)
    m = distribute_tensor(a.to(DEV), mesh, [Shard(1)]).amax(dim=1)
    torch.testing.assert_close(m.full_tensor().cpu(), a.amax(1), rtol=0, atol=0)


def dtensor_rng():
    """The DTensor RNG tracker: dropout of a replicated DTensor is the same on every rank (and
    equals one device's dropout under the same seed); of a row-sharded DTensor, the shards
    together equal one device's dropout of the whole tensor (each shard starts at its offset
    of the Philox stream); every rank's generator ends at the same offset; reseeding repeats."""
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor
    from torch.distributed.tensor import _random

    mesh = _mesh()
    ones = torch.ones(8, 6)

    def single_device():
        torch.manual_seed(123)
        return F.dropout(ones.to(DEV), 0.5).cpu()

    expected = single_device()
    results = {}
    for placement in (Replicate(), Shard(0), Shard(1)):
        torch.manual_seed(123)
        d = F.dropout(distribute_tensor(ones.to(DEV), mesh, [placement]), 0.5)
        results[placement] = (d.full_tensor().cpu(), d.to_local().cpu())
        state = torch.neuron.get_rng_state()
        states = [torch.empty_like(state) for _ in range(WORLD)]
        dist.all_gather_object(states, state)
        assert all(torch.equal(s, state) for s in states), f"{placement}: generator states differ between ranks"
        torch.manual_seed(123)
        again = F.dropout(distribute_tensor(ones.to(DEV), mesh, [placement]), 0.5).to_local().cpu()
        torch.testing.assert_close(again, results[placement][1], rtol=0, atol=0)
    assert isinstance(_random._rng_tracker, _random.OffsetBasedRNGTracker), _random._rng_tracker
    rep_local = results[Replicate()][1]
    torch.testing.assert_close(rep_local, expected, rtol=0, atol=0)
    torch.testing.assert_close(results[Shard(0)][0], expected, rtol=0, atol=0)
    col_full = results[Shard(1)][0]  # column shards draw from row-major offsets of their own
    assert not torch.equal(col_full[:, :3], col_full[:, 3:]), "the two column shards drew the same mask"
    kept = (col_full != 0).float().mean().item()
    assert 0.25 < kept < 0.75, kept
    return {"kept_fraction_column_shards": kept}


def tp_plan(model: TinyGPT, sequence_parallel: bool) -> dict:
    """The tensor-parallel plan of TinyGPT: attention heads and MLP columns split over the
    ranks (qkv and fc column-parallel, proj and out row-parallel), the embedding split by
    vocabulary rows, the head by vocabulary columns (logits gathered). With sequence
    parallelism the layer norms and the residual stream are split along the sequence."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (ColwiseParallel, PrepareModuleInput, RowwiseParallel,
                                                   SequenceParallel)

    plan = {"tok": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())}
    seq = Shard(1)
    if sequence_parallel:
        plan["blocks"] = PrepareModuleInput(input_layouts=Replicate(), desired_input_layouts=seq,
                                            use_local_output=True)
        plan["ln"] = SequenceParallel()
        plan["head"] = ColwiseParallel(input_layouts=seq, output_layouts=Replicate())
    else:
        plan["head"] = ColwiseParallel(output_layouts=Replicate())
    for i in range(len(model.blocks)):
        p = f"blocks.{i}."
        if sequence_parallel:
            plan.update({p + "ln1": SequenceParallel(), p + "ln2": SequenceParallel(),
                         p + "qkv": ColwiseParallel(input_layouts=seq), p + "fc": ColwiseParallel(input_layouts=seq),
                         p + "proj": RowwiseParallel(output_layouts=seq), p + "out": RowwiseParallel(output_layouts=seq)})
        else:
            plan.update({p + "qkv": ColwiseParallel(), p + "fc": ColwiseParallel(),
                         p + "proj": RowwiseParallel(), p + "out": RowwiseParallel()})
    return plan


def _tp_train(sequence_parallel: bool, compiled: bool = False, steps: int = STEPS, mesh=None):
    from torch.distributed.tensor.parallel import parallelize_module

    model = gpt().to(DEV)
    parallelize_module(model, mesh if mesh is not None else _mesh(), tp_plan(model, sequence_parallel))
    # foreach=False: parameters that the plan leaves alone (pos, layer norms without sequence
    # parallelism) stay plain tensors, which a foreach kernel cannot mix with DTensors
    opt = sgd(model.parameters(), foreach=False)
    step = torch.compile(model, backend="neuron") if compiled else model
    data = batches(steps)
    losses = []
    for x, y in data:  # every rank runs the whole batch; the ranks split the layers' work
        loss = step(x.to(DEV), y.to(DEV))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    ref_losses, ref_params = cpu_reference(data)
    return compare(losses, full_params(model), ref_losses, ref_params, **FP32)


def tensor_parallel():
    return _tp_train(sequence_parallel=False)


def tensor_parallel_sequence_parallel():
    return _tp_train(sequence_parallel=True)


DTENSOR_CHECKS = {f.__name__: f for f in (dtensor_redistribute, dtensor_ops, dtensor_rng, tensor_parallel,
                                           tensor_parallel_sequence_parallel)}


def scenario_dtensor():
    init("neuron")
    run_checks(DTENSOR_CHECKS)
    dist.destroy_process_group()


# ---------------------------------------------------------------- pipelining


class _FirstStage(torch.nn.Module):
    """Embeddings and the first half of TinyGPT's blocks (shares the parameters of `m`)."""

    def __init__(self, m: TinyGPT, split: int):
        super().__init__()
        self.tok, self.pos, self.blocks = m.tok, m.pos, m.blocks[:split]

    def forward(self, idx):
        return self.blocks(self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device)))


class _LastStage(torch.nn.Module):
    """The second half of the blocks, the final layer norm and the head."""

    def __init__(self, m: TinyGPT, split: int):
        super().__init__()
        self.blocks, self.ln, self.head = m.blocks[split:], m.ln, m.head

    def forward(self, x):
        return self.head(self.ln(self.blocks(x)))


def _lm_loss(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def _pipeline(schedule_name: str):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    model = gpt()
    split = GPT["layers"] // 2
    module = (_FirstStage(model, split) if RANK == 0 else _LastStage(model, split)).to(DEV)
    stage = PipelineStage(module, RANK, WORLD, torch.device(DEV, torch.neuron.current_device()))
    schedule = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule_name](stage, n_microbatches=4,
                                                                            loss_fn=_lm_loss)
    opt = sgd(module.parameters())
    data = batches()
    losses = []
    for x, y in data:
        if RANK == 0:
            schedule.step(x.to(DEV))
        else:
            mb = []
            schedule.step(target=y.to(DEV), losses=mb)
            losses.append(torch.stack(mb).mean().item())  # equal microbatches: the batch's mean
        opt.step()
        opt.zero_grad()
    ref_losses, ref_params = cpu_reference(data)
    mine = {id(p) for p in module.parameters()}
    names = [n for n, p in model.named_parameters() if id(p) in mine]
    assert names, "this stage holds no parameters"
    params = full_params(model)
    # the losses live on the last stage; the first compares its parameters only
    return compare(losses if RANK == WORLD - 1 else ref_losses, params, ref_losses, ref_params,
                   names=names, **FP32)


def pipeline_gpipe():
    return _pipeline("gpipe")


def pipeline_1f1b():
    return _pipeline("1f1b")


PIPELINE_CHECKS = {f.__name__: f for f in (pipeline_gpipe, pipeline_1f1b)}


def scenario_pipeline():
    init("neuron")
    run_checks(PIPELINE_CHECKS)
    dist.destroy_process_group()


# ---------------------------------------------------------------- distributed checkpoints


def _flat_state(model, opt) -> dict[str, torch.Tensor]:
    """Full (unsharded) model and optimizer state as {key path: CPU tensor or hyperparameter}."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    msd, osd = get_state_dict(model, opt, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    flat = {}

    def walk(prefix, x):
        if isinstance(x, dict):
            for k, v in x.items():
                walk(f"{prefix}/{k}", v)
        elif isinstance(x, (list, tuple)):
            for i, v in enumerate(x):
                walk(f"{prefix}/{i}", v)
        elif isinstance(x, torch.Tensor):
            from torch.distributed.tensor import DTensor

            flat[prefix] = (x.full_tensor() if isinstance(x, DTensor) else x).detach().cpu()
        else:  # hyperparameters
            flat[prefix] = x
    walk("model", msd)
    walk("optim", osd)
    return flat


def scenario_dcp_save():
    """2 ranks: FSDP2 TinyGPT + AdamW, two steps, torch.distributed.checkpoint.save of the
    sharded model and optimizer; rank 0 also saves the full state (the reference for the load)
    and the mean loss of a third step."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict
    from torch.distributed.fsdp import fully_shard

    import torch_neuronx

    init("neuron")
    ckpt = os.environ["DIST_CKPT_DIR"]
    torch_neuronx.clear_op_tracking()
    model = gpt().to(DEV)
    for block in model.blocks:
        fully_shard(block)
    fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = batches()
    for x, y in data[:2]:
        model(x[my_rows()].to(DEV), y[my_rows()].to(DEV)).backward()
        opt.step()
        opt.zero_grad()
    msd, osd = get_state_dict(model, opt)
    t0 = time.monotonic()
    dcp.save({"model": msd, "optim": osd}, checkpoint_id=os.path.join(ckpt, "sharded"))
    seconds = time.monotonic() - t0
    full = _flat_state(model, opt)
    sharded = {n: p.to_local().shape[0] for n, p in model.named_parameters()}
    if RANK == 0:
        torch.save(full, os.path.join(ckpt, "full.pt"))
    x, y = data[2]
    next_loss = mean_over_ranks([model(x[my_rows()].to(DEV), y[my_rows()].to(DEV)).item()])[0]
    report({"save_seconds": seconds, "next_loss": next_loss, "fallback_ops": torch_neuronx.get_fallback_ops(),
            "local_rows": sharded, "files": sorted(os.listdir(os.path.join(ckpt, "sharded")))})
    dist.destroy_process_group()


def scenario_dcp_load():
    """1 process, no process group: load the 2-rank checkpoint into a plain TinyGPT on neuron
    and its AdamW; every tensor must equal the full state saved at the same point, and the
    next step's loss on the whole batch the 2 ranks' mean loss."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    import torch_neuronx

    ckpt = os.environ["DIST_CKPT_DIR"]
    torch_neuronx.clear_op_tracking()
    model = gpt(seed=99).to(DEV)  # other initial values: everything must come from the checkpoint
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    msd, osd = get_state_dict(model, opt)
    state = {"model": msd, "optim": osd}
    t0 = time.monotonic()
    dcp.load(state, checkpoint_id=os.path.join(ckpt, "sharded"))
    set_state_dict(model, opt, model_state_dict=state["model"], optim_state_dict=state["optim"])
    seconds = time.monotonic() - t0
    on_device = all(p.device.type == "neuron" for p in model.parameters())
    loaded = _flat_state(model, opt)
    expected = torch.load(os.path.join(ckpt, "full.pt"))
    def equal(a, b):
        if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
            return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dtype == b.dtype and \
                torch.equal(a, b)
        return a == b

    mismatched = sorted(k for k in expected if k not in loaded or not equal(loaded[k], expected[k]))
    missing = sorted(set(loaded) - set(expected))
    x, y = batches()[2]
    loss = model(x.to(DEV), y.to(DEV)).item()
    report({"load_seconds": seconds, "mismatched": mismatched, "missing": missing, "keys": len(expected),
            "on_device": on_device, "next_loss": loss, "fallback_ops": torch_neuronx.get_fallback_ops()})


# ---------------------------------------------------------------- functional collectives


def _funcol_inputs(shape, seed=0):
    return [torch.randn(*shape, generator=torch.Generator().manual_seed(seed + r)) for r in range(WORLD)]


def funcol_eager():
    """torch.distributed._functional_collectives on neuron tensors, against CPU."""
    import torch.distributed._functional_collectives as fc

    group = dist.group.WORLD
    ins = _funcol_inputs((4, 6))
    x = ins[RANK].to(DEV)
    s = torch.stack(ins)
    same = dict(rtol=0, atol=0)
    torch.testing.assert_close(fc.all_reduce(x, "sum", group).cpu(), s.sum(0))
    torch.testing.assert_close(fc.all_reduce(x, "avg", group).cpu(), s.mean(0))
    torch.testing.assert_close(fc.all_reduce(x, "max", group).cpu(), s.amax(0), **same)
    torch.testing.assert_close(fc.all_gather_single(x, 0, group).cpu(), torch.cat(ins, 0), **same)
    torch.testing.assert_close(fc.all_gather_single(x, 1, group).cpu(), torch.cat(ins, 1), **same)
    torch.testing.assert_close(fc.reduce_scatter_single(x, "sum", 0, group).cpu(),
                               s.sum(0).chunk(WORLD, 0)[RANK])
    torch.testing.assert_close(fc.reduce_scatter_single(x, "sum", 1, group).cpu(),
                               s.sum(0).chunk(WORLD, 1)[RANK])
    torch.testing.assert_close(fc.all_to_all_single(x, None, None, group).cpu(),
                               torch.cat([i.chunk(WORLD)[RANK] for i in ins]), **same)
    # uneven: rank r sends r + d + 1 rows to rank d
    rows = [[r + d + 1 for d in range(WORLD)] for r in range(WORLD)]
    src = [torch.randn(sum(rows[r]), 3, generator=torch.Generator().manual_seed(50 + r)) for r in range(WORLD)]
    got = fc.all_to_all_single(src[RANK].to(DEV), [rows[r][RANK] for r in range(WORLD)], rows[RANK], group)
    expect = torch.cat([src[r].split(rows[r])[RANK] for r in range(WORLD)])
    torch.testing.assert_close(got.cpu(), expect, **same)
    torch.testing.assert_close(fc.broadcast(x, 1, group).cpu(), ins[1], **same)
    a, b = fc.all_reduce_coalesced([x, x[:, :2] * 2], "sum", group)
    torch.testing.assert_close(a.cpu(), s.sum(0))
    torch.testing.assert_close(b.cpu(), (s[:, :, :2] * 2).sum(0))
    # the differentiable forms: the gradient of an all-gather is a reduce-scatter, and so on
    xg = x.clone().requires_grad_()
    gathered = fc.all_gather_tensor_autograd(xg, 0, group)
    weight = torch.arange(gathered.numel(), dtype=torch.float32).reshape(gathered.shape)
    (fc.wait_tensor(gathered) * weight.to(DEV)).sum().backward()
    torch.testing.assert_close(xg.grad.cpu(), (weight * WORLD).chunk(WORLD)[RANK])
    xr = x.clone().requires_grad_()
    scattered = fc.wait_tensor(fc.reduce_scatter_tensor_autograd(xr, "sum", 0, group))
    (scattered * (RANK + 1)).sum().backward()
    torch.testing.assert_close(xr.grad.cpu(), torch.cat([torch.full((4 // WORLD, 6), float(r + 1))
                                                         for r in range(WORLD)]))
    return {}


def _overlapped(x, w, group):
    """A collective whose wait comes after independent compute, then more collectives: the
    shape of a compiled step with communication overlapped with computation."""
    import torch.distributed._functional_collectives as fc

    y = torch.relu(x @ w)
    r = fc.all_reduce(y, "sum", group)  # wait_tensor at the first use of r, below
    z = torch.tanh(x * 2 + 1) @ w.t()  # independent of the all-reduce
    g = fc.all_gather_single(z + r.sum(), 0, group)
    out = fc.reduce_scatter_single(g * 3, "sum", 0, group) + r.mean()
    return out, fc.all_to_all_single(g, None, None, group)


def funcol_compiled():
    """Functional collectives inside torch.compile(backend='neuron') graphs: they run as eager
    steps between the compiled C segments, in program order on the stream (producer and
    wait_tensor ordering as in eager), giving eager's results bit for bit; the graph's metrics
    record the collectives. Also a training graph through the differentiable collectives."""
    import torch.distributed._functional_collectives as fc

    import torch_neuronx

    group = dist.group.WORLD
    g = torch.Generator().manual_seed(3 + RANK)
    x = torch.randn(64, 48, generator=g).to(DEV)
    w = torch.randn(48, 48, generator=torch.Generator().manual_seed(11)).to(DEV)
    eager = _overlapped(x, w, group)
    torch_neuronx.reset_dynamo_metrics()
    compiled_fn = torch.compile(_overlapped, backend="neuron", fullgraph=True)
    for _ in range(2):  # the second call reuses the compiled graph
        got = compiled_fn(x, w, group)
        for a, b in zip(got, eager):
            torch.testing.assert_close(a.cpu(), b.cpu(), rtol=0, atol=0)
    metrics = torch_neuronx.get_dynamo_metrics()
    assert len(metrics) == 1 and metrics[0]["has_collectives"] and not metrics[0]["fallback"], metrics
    # each collective and its wait at its place in the program, none as a plain eager op
    calls = [op.split("::")[-1] for op in metrics[0]["collective_ops"]]
    assert calls == ["all_reduce", "wait_tensor", "all_gather_into_tensor", "wait_tensor",
                     "reduce_scatter_tensor", "wait_tensor", "all_to_all_single", "wait_tensor"], calls
    assert not any("c10d" in op for op in metrics[0]["eager_ops"]), metrics[0]["eager_ops"]
    assert metrics[0]["fused_kernel_count"] > 0, metrics[0]  # the computation around them is generated C

    def train_step(x, w):
        gathered = fc.all_gather_tensor_autograd(x @ w, 0, group)
        h = torch.nn.functional.gelu(fc.wait_tensor(gathered))
        back = fc.wait_tensor(fc.reduce_scatter_tensor_autograd(h, "sum", 0, group))
        return (back * back).mean()

    grads = []
    for fn in (train_step, torch.compile(train_step, backend="neuron", fullgraph=True)):
        wg = w.clone().requires_grad_()
        loss = fn(x, wg)
        loss.backward()
        grads.append((loss.detach().cpu(), wg.grad.cpu()))
    torch.testing.assert_close(grads[1][0], grads[0][0])
    torch.testing.assert_close(grads[1][1], grads[0][1])
    kinds = sorted({m["graph_name"].split("_")[-2] for m in torch_neuronx.get_dynamo_metrics()})
    assert "backward" in kinds and "forward" in kinds, kinds
    return {"graphs": len(torch_neuronx.get_dynamo_metrics())}


def tensor_parallel_compiled():
    """The sequence-parallel TinyGPT under torch.compile(backend='neuron'): DTensor's
    collectives appear in the forward and backward graphs; training matches one CPU process."""
    import torch_neuronx

    torch_neuronx.reset_dynamo_metrics()
    figures = _tp_train(sequence_parallel=True, compiled=True, steps=2)
    metrics = torch_neuronx.get_dynamo_metrics()
    assert sum(m["has_collectives"] for m in metrics) >= 2, metrics
    figures["graphs_with_collectives"] = sum(m["has_collectives"] for m in metrics)
    return figures


FUNCOL_CHECKS = {f.__name__: f for f in (funcol_eager, funcol_compiled, tensor_parallel_compiled)}


def scenario_funcol():
    init("neuron")
    run_checks(FUNCOL_CHECKS)
    dist.destroy_process_group()


# ---------------------------------------------------------------- exit with a collective in flight


def scenario_exit_in_flight():
    """Rank 0 ends by an uncaught exception while a collective is in flight (rank 1 joins it
    later, during rank 0's interpreter shutdown): rank 0 must exit with Python's status 1 and
    its traceback, not abort."""
    import torch.distributed._functional_collectives as fc

    init("neuron")

    class Linger:
        def __del__(self):  # keeps rank 0's interpreter shutting down while the collective completes
            time.sleep(1.5)

    globals()["_linger"] = Linger()
    if RANK == 1:
        time.sleep(1)
    y = fc.all_reduce(torch.ones(1 << 16, device=DEV), "sum", dist.group.WORLD)
    if RANK == 1:
        report({"sum": fc.wait_tensor(y)[:2].cpu().tolist()})
        dist.destroy_process_group()
        return
    raise RuntimeError("rank 0 ends with a collective in flight")


# ---------------------------------------------------------------- 2-D mesh (4 ranks)


def mesh_2d_fsdp_tp():
    """FSDP over the 'dp' dimension and tensor + sequence parallelism over 'tp' of a (2, 2)
    mesh: data-parallel pairs take halves of the batch; against one CPU process."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor.parallel import parallelize_module

    mesh = init_device_mesh(DEV, (2, WORLD // 2), mesh_dim_names=("dp", "tp"))
    model = gpt().to(DEV)
    parallelize_module(model, mesh["tp"], tp_plan(model, sequence_parallel=True))
    for block in model.blocks:
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    opt = sgd(model.parameters(), foreach=False)
    dp_rank = mesh["dp"].get_local_rank()
    data = batches()
    losses = []
    for x, y in data:
        rows = my_rows(BATCH, 2, dp_rank)
        loss = model(x[rows].to(DEV), y[rows].to(DEV))
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    losses = mean_over_ranks(losses, group=mesh["dp"].get_group())
    ref_losses, ref_params = cpu_reference(data)
    return compare(losses, full_params(model), ref_losses, ref_params, **FP32)


def scenario_mesh_2d():
    init("neuron")
    run_checks({"mesh_2d_fsdp_tp": mesh_2d_fsdp_tp}, {"device": torch.neuron.current_device()})
    dist.destroy_process_group()


SCENARIOS = {"fsdp": scenario_fsdp, "dtensor": scenario_dtensor, "pipeline": scenario_pipeline,
             "dcp_save": scenario_dcp_save, "dcp_load": scenario_dcp_load, "funcol": scenario_funcol,
             "exit_in_flight": scenario_exit_in_flight, "mesh_2d": scenario_mesh_2d}
CHECK_NAMES = {"fsdp": list(FSDP_CHECKS), "dtensor": list(DTENSOR_CHECKS), "pipeline": list(PIPELINE_CHECKS),
               "funcol": list(FUNCOL_CHECKS)}


def main() -> None:
    torch.set_num_threads(1)
    os.environ.setdefault("LOCAL_RANK", str(RANK))
    SCENARIOS[sys.argv[1]]()


if __name__ == "__main__":
    main()
