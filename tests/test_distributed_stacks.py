"""PyTorch's distributed stacks on `neuron`, 2 ranks: FSDP2, DTensor and tensor parallel,
distributed checkpoints, pipelining, functional collectives (eager and compiled).

Each scenario runs `tests/dist_stacks.py` once per rank (tests/test_distributed.py's
`run_ranks`: a session per rank, everything killed at the timeout) and reads every rank's
report; the ranks check their results against CPU PyTorch (or, for the mixed-precision
policy, against the same policy in one process) and report the largest differences. Every
stack must run without a CPU fallback. The 4-rank 2-D mesh is tests/dist_mesh_4ranks.py
(`make test-dist-4`).
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dist_stacks  # noqa: E402
from test_distributed import WORLD, describe, run_ranks  # noqa: E402

STACKS = os.path.join(HERE, "dist_stacks.py")


def run_scenario(name: str, timeout: float = 180, **kw):
    reports, codes, outputs, elapsed = run_ranks(name, timeout=timeout, worker=STACKS, **kw)
    assert all(c == 0 for c in codes.values()) and len(reports) == len(codes), describe(codes, outputs)
    return reports


_cache: dict[str, dict | str] = {}


def scenario_reports(name: str, timeout: float = 180) -> dict:
    """Every rank's report of scenario `name`, run once per test session (a failed run fails
    each of its checks with the same message, without running again)."""
    if name not in _cache:
        try:
            _cache[name] = run_scenario(name, timeout)
        except AssertionError as e:
            _cache[name] = f"scenario {name} failed:\n{e}"
    if isinstance(_cache[name], str):
        pytest.fail(_cache[name])
    return _cache[name]


def check_result(scenario: str, check: str, timeout: float = 180) -> None:
    reports = scenario_reports(scenario, timeout)
    for rank, rep in sorted(reports.items()):
        assert rep["fallback_ops"] == [], f"rank {rank}: CPU fallbacks {rep['fallback_ops']}"
        result = rep["checks"].get(check)
        assert result is not None, f"rank {rank}: {check} did not run"
        assert "error" not in result, f"rank {rank}:\n{result.get('error')}"


@pytest.mark.parametrize("check", dist_stacks.CHECK_NAMES["fsdp"])
def test_fsdp2(check):
    """fully_shard with reshard-after-forward on and off and with CPU offload (float32, against
    one CPU process on the whole batch), and with a bf16/fp32 MixedPrecisionPolicy (against
    the same policy in one process, bf16 tolerance)."""
    check_result("fsdp", check)


@pytest.mark.parametrize("check", dist_stacks.CHECK_NAMES["dtensor"])
def test_dtensor_and_tensor_parallel(check):
    """init_device_mesh('neuron'): redistribute between Shard, Replicate and Partial; DTensor
    ops and their backward; the RNG tracker; parallelize_module on the main job's GPT
    (ColwiseParallel, RowwiseParallel, SequenceParallel) against one CPU process."""
    check_result("dtensor", check)


@pytest.mark.parametrize("check", dist_stacks.CHECK_NAMES["pipeline"])
def test_pipelining(check):
    """torch.distributed.pipelining: the GPT in two stages, GPipe and 1F1B schedules over 4
    microbatches, against one CPU process on the whole batch."""
    check_result("pipeline", check)


@pytest.mark.parametrize("check", dist_stacks.CHECK_NAMES["funcol"])
def test_functional_collectives(check):
    """Functional collectives in eager, and inside torch.compile(backend='neuron') graphs
    (bitwise equal to eager; the graphs' metrics record the collectives)."""
    check_result("funcol", check, timeout=300)


def test_distributed_checkpoint_fsdp2_to_one_process():
    """torch.distributed.checkpoint: an FSDP2-sharded GPT and its AdamW state saved by 2 ranks
    and loaded by one process without a process group (world size 2 -> 1): every tensor equals
    the full state at the save; the next loss equals the 2 ranks' next (mean) loss."""
    ckpt = tempfile.mkdtemp(prefix="neuron_dcp_")
    try:
        saved = run_scenario("dcp_save", env={"DIST_CKPT_DIR": ckpt})
        for rank, rep in saved.items():
            assert rep["fallback_ops"] == [], rep["fallback_ops"]
            assert rep["local_rows"]["blocks.0.fc.weight"] == 4 * dist_stacks.GPT["d"] // WORLD  # sharded
        assert len(saved[0]["files"]) >= WORLD, saved[0]["files"]  # one data file per rank, metadata
        loaded = run_scenario("dcp_load", ranks=[0], world=1, env={"DIST_CKPT_DIR": ckpt})[0]
        assert loaded["fallback_ops"] == [], loaded["fallback_ops"]
        assert loaded["on_device"]
        assert loaded["keys"] > 30  # parameters, AdamW's step, exp_avg, exp_avg_sq, hyperparameters
        assert loaded["mismatched"] == [] and loaded["missing"] == [], loaded
        assert abs(loaded["next_loss"] - saved[0]["next_loss"]) <= 1e-5 * abs(saved[0]["next_loss"]), \
            (loaded["next_loss"], saved[0]["next_loss"])
    finally:
        shutil.rmtree(ckpt, ignore_errors=True)


def test_exit_with_a_collective_in_flight_is_an_ordinary_error_exit():
    """A rank whose script ends by an exception while a collective is in flight (no
    destroy_process_group) exits with status 1 and Python's traceback, never an abort from a
    thread that touches Python during the interpreter's shutdown."""
    reports, codes, outputs, _ = run_ranks("exit_in_flight", timeout=60, worker=STACKS)
    assert codes[0] == 1, describe(codes, outputs)
    assert "rank 0 ends with a collective in flight" in outputs[0], outputs[0][-2000:]
    assert "terminate called" not in outputs[0], outputs[0][-2000:]
    assert codes[1] == 0 and reports[1]["sum"] == [2.0, 2.0], describe(codes, outputs)


def test_compiled_in_place_collective_runs_after_the_reads_it_overwrites():
    """The lowering of an in-place collective (here all_gather_into_tensor_out, in a graph that
    make_fx traced without functionalization) first emits the open fusion group that still
    reads the old value of the tensor it writes. One process, a one-rank neuron group: the
    gather copies x into `out`; the expected values come from the inputs, on CPU."""
    import torch
    import torch.distributed as dist
    from torch.fx.experimental.proxy_tensor import make_fx

    import torch_neuronx
    from torch_neuronx.compiler.backend import _GraphCompiler

    dist.init_process_group("neuron", store=dist.HashStore(), rank=0, world_size=1)
    try:
        c10d = torch.ops._c10d_functional
        group = dist.group.WORLD.group_name

        def f(x, out):
            y = out * 2  # reads `out` before the collective overwrites it
            c10d.all_gather_into_tensor_out(x, 1, group, out=out)
            return y + 1, c10d.wait_tensor(out) * 3

        g = torch.Generator().manual_seed(0)
        x_cpu, out_cpu = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
        x, out = x_cpu.to("neuron"), out_cpu.to("neuron")
        gm = make_fx(f, tracing_mode="fake")(x, out)
        torch_neuronx.reset_dynamo_metrics()
        torch_neuronx.clear_op_tracking()
        y, w = _GraphCompiler("inplace_collective", False)(gm, [x, out], "inference")([x, out])
        torch.testing.assert_close(y.cpu(), out_cpu * 2 + 1, rtol=0, atol=0)
        torch.testing.assert_close(w.cpu(), x_cpu * 3, rtol=0, atol=0)
        torch.testing.assert_close(out.cpu(), x_cpu, rtol=0, atol=0)
        rec = torch_neuronx.get_dynamo_metrics()[0]
        assert rec["collective_ops"] == ["_c10d_functional::all_gather_into_tensor_out",
                                         "_c10d_functional::wait_tensor"], rec
        assert rec["eager_ops"] == [] and rec["fused_kernel_count"] >= 2, rec
        assert torch_neuronx.get_fallback_ops() == []
    finally:
        dist.destroy_process_group()


DOCS = os.path.join(HERE, "..", "docs", "distributed.md")

# Runs the scripts named on the command line one after the other in this process (each
# creates and destroys its process group), then prints the CPU fallbacks they caused.
_DOC_DRIVER = """
import runpy, sys
for path in sys.argv[1:]:
    runpy.run_path(path, run_name="__main__")
import torch_neuronx
sys.stdout.write(f"FALLBACK_OPS {torch_neuronx.get_fallback_ops()}\\n")  # one write: ranks share the pipe
sys.stdout.flush()
"""


def doc_examples() -> list[str]:
    """The whole-script examples (python blocks starting with an import) of docs/distributed.md's
    section on PyTorch's stacks, in order."""
    import re

    with open(DOCS) as f:
        text = f.read()
    start = text.index("## PyTorch's distributed stacks")
    section = text[start:text.index("\n## ", start + 3)]
    return [b for b in re.findall(r"```python\n(.*?)```", section, flags=re.S) if b.startswith("import")]


def test_docs_examples_run(tmp_path):
    """Each example of docs/distributed.md's stacks section runs as documented: under
    `torchrun --nproc_per_node=2` (all in the same 2 processes, one after the other), then the
    checkpoint example's load in one plain process (world size 2 -> 1); no CPU fallback."""
    from test_distributed import free_port, run_cmd

    scripts = []
    for i, code in enumerate(doc_examples()):
        scripts.append(str(tmp_path / f"example{i}.py"))
        with open(scripts[-1], "w") as f:
            f.write(code)
    assert len(scripts) == 5, f"expected 5 whole-script examples (FSDP2, DTensor, DCP, pipelining, " \
                              f"functional collectives), got {len(scripts)}"
    driver = tmp_path / "driver.py"
    driver.write_text(_DOC_DRIVER)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("RANK", None)
    cwd = os.getcwd()
    os.chdir(tmp_path)  # the checkpoint example writes ./ckpt
    try:
        two = run_cmd([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                       f"--master_port={free_port()}", str(driver), *scripts], env, timeout=240)
        assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-3000:]
        assert two.stdout.count("FALLBACK_OPS []") == 2, two.stdout[-3000:]
        dcp = next(s for s in scripts if "dcp.load" in open(s).read())
        one = run_cmd([sys.executable, str(driver), dcp], env, timeout=120)
        assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-3000:]
        assert "['exp_avg', 'exp_avg_sq', 'step']" in one.stdout and "FALLBACK_OPS []" in one.stdout, one.stdout
    finally:
        os.chdir(cwd)
