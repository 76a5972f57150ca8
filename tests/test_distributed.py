"""The `neuron` torch.distributed backend on 2 ranks (separate processes, spawned here).

Each scenario runs `tests/dist_worker.py` in one process per rank (a fresh session each, killed
as a group on timeout, so no process outlives its test) and reads every rank's JSON report.
Expected values come from CPU PyTorch inside the workers.
"""
from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "dist_worker.py")
WORLD = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (from /proc), children first found by parent id."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def kill_group(proc: subprocess.Popen) -> None:
    """Kills `proc`, its session and every descendant (torchrun's workers live in sessions
    of their own), so no process outlives a test."""
    for pid in [proc.pid, *descendants(proc.pid)]:
        for kill in (lambda p: os.killpg(p, signal.SIGKILL), lambda p: os.kill(p, signal.SIGKILL)):
            try:
                kill(pid)
            except (ProcessLookupError, PermissionError):
                pass
    proc.wait()


def run_ranks(scenario: str, ranks=None, timeout: float = 120, env: dict | None = None,
              world: int = WORLD, torchrun: bool = False, worker: str = WORKER):
    """Run `scenario` of `worker` (a script taking the scenario name) on `ranks` (default: all
    of `world`); returns (reports by rank, return codes by rank, outputs by rank, elapsed
    seconds). Every process is killed at `timeout` (a hang fails the test instead of blocking
    the suite)."""
    ranks = list(range(world)) if ranks is None else ranks
    out_dir = tempfile.mkdtemp(prefix="neuron_dist_")
    port = free_port()
    base = dict(os.environ)
    base.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": str(world),
                 "DIST_RESULT_DIR": out_dir, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    base.update(env or {})
    procs = {}
    logs = {}
    start = time.monotonic()
    if torchrun:
        cmd = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={world}",
               f"--master_port={port}", worker, scenario]
        logs[0] = tempfile.TemporaryFile("w+")
        procs[0] = subprocess.Popen(cmd, env=base, stdout=logs[0], stderr=subprocess.STDOUT,
                                    start_new_session=True, text=True)
    else:
        for r in ranks:
            e = dict(base, RANK=str(r), LOCAL_RANK=str(r))
            logs[r] = tempfile.TemporaryFile("w+")
            procs[r] = subprocess.Popen([sys.executable, worker, scenario], env=e, stdout=logs[r],
                                        stderr=subprocess.STDOUT, start_new_session=True, text=True)
    codes = {}
    try:
        for r, p in procs.items():
            left = max(1.0, timeout - (time.monotonic() - start))
            try:
                codes[r] = p.wait(timeout=left)
            except subprocess.TimeoutExpired:
                codes[r] = "timeout"
    finally:
        for p in procs.values():
            kill_group(p)  # also reaps anything a rank left behind in its session
    elapsed = time.monotonic() - start
    outputs = {}
    for r, f in logs.items():
        f.seek(0)
        outputs[r] = f.read()
        f.close()
    reports = {}
    for name in os.listdir(out_dir):
        with open(os.path.join(out_dir, name)) as f:
            reports[int(name[4:-5])] = json.load(f)
        os.unlink(os.path.join(out_dir, name))
    os.rmdir(out_dir)
    return reports, codes, outputs, elapsed


def run_cmd(cmd: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """subprocess.run that also kills the command's descendants on timeout or failure."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        out, err = proc.communicate()
        return subprocess.CompletedProcess(cmd, "timeout", out, err)
    kill_group(proc)  # reaps anything left behind
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def describe(codes, outputs) -> str:
    return "\n".join(f"--- rank {r} (exit {codes.get(r)}):\n{outputs[r][-3000:]}" for r in outputs)


# ---------------------------------------------------------------- every collective

sys.path.insert(0, HERE)
import dist_worker  # noqa: E402  (the check names)


@pytest.fixture(scope="module")
def collectives():
    reports, codes, outputs, _ = run_ranks("collectives", timeout=240)
    assert all(c == 0 for c in codes.values()) and len(reports) == WORLD, describe(codes, outputs)
    return reports


@pytest.mark.parametrize("name", list(dist_worker.CHECKS))
def test_collective(collectives, name):
    for rank in range(WORLD):
        result = collectives[rank]["checks"].get(name)
        assert result == "ok", f"rank {rank}: {result}"


def test_collectives_native_and_on_local_rank_device(collectives):
    for rank in range(WORLD):
        rep = collectives[rank]
        assert rep["fallback_ops"] == [], rep["fallback_ops"]
        assert rep["device"] == rank % 2  # LOCAL_RANK % device_count (2 cores by default)
        # contiguous tensors were aliased; only the strided views of the checks were staged
        assert rep["stats"]["collectives"] > 100
        assert 0 < rep["stats"]["staged_tensors"] < rep["stats"]["collectives"]
        # the fingerprint history skipped most exchanges of repeated collectives
        assert rep["stats"]["fingerprint_skips"] > 0


# ---------------------------------------------------------------- launch modes


def test_torchrun_default_backend_resolves_to_neuron_and_the_group_can_be_created_again():
    reports, codes, outputs, _ = run_ranks("torchrun_default", torchrun=True, timeout=90)
    assert codes[0] == 0 and len(reports) == WORLD, describe(codes, outputs)
    for rank, rep in reports.items():
        assert rep["backend_class"] == "_NeuronBackend"
        assert rep["device"] == rep["local_rank"] % 2  # neuron:(LOCAL_RANK % device_count)
        # the group started the runtime on that device, so DeviceMesh keeps the choice rather
        # than setting neuron:LOCAL_RANK (invalid with more ranks than cores: dist_mesh_4ranks.py)
        assert rep["runtime_started"]
        assert rep["visible_cores"] is None  # NEURON_RT_VISIBLE_CORES untouched
        assert rep["runtime_threads"] == 1  # the rank's thread budget (OMP_NUM_THREADS=1)
        assert rep["result"] == [3.0] * 3
        assert rep["again"] == [3.0] * 2  # the group created again in the same processes and store


def test_mixed_cpu_gloo_neuron_group_new_group_and_split_group():
    reports, codes, outputs, _ = run_ranks("mixed", timeout=90)
    assert all(c == 0 for c in codes.values()) and len(reports) == WORLD, describe(codes, outputs)
    for rep in reports.values():
        assert rep["cpu_backend"] == "ProcessGroupGloo" and rep["neuron_backend"] == "_NeuronBackend"
        assert rep["cpu"] == [3.0] * 3 and rep["neuron"] == [3.0] * 3
        assert rep["objs"] == [0, 1] and rep["sub"] == [2.0, 2.0]
        # dist.split_group splits both backends
        assert rep["split_backend"] == "_NeuronBackend"
        assert rep["split_pair"] == [3.0, 3.0] and rep["split_cpu"] == [2.0, 2.0]
        assert rep["split_single"] in ([1.0, 1.0], [2.0, 2.0])


def test_subgroups_of_a_group_with_a_bound_device_id():
    """new_group/new_subgroups from ranks outside the new group, and split_group of a CPU Gloo
    backend that is not the process's first Gloo instance (PyTorch's Gloo split crashed there)."""
    reports, codes, outputs, _ = run_ranks("groups_with_device_id", timeout=120)
    assert all(c == 0 for c in codes.values()) and len(reports) == WORLD, describe(codes, outputs)
    for rank, rep in reports.items():
        for r in rep["rounds"]:
            assert r["outside_first"] == (rank != 0)
            assert r["sub"] == [rank + 1.0] * 2 and r["split_cpu"] == [rank + 1.0] * 2
            assert r["world"] == [float(WORLD)] * 2


# ---------------------------------------------------------------- failures (group timeouts of a few seconds)


def test_rank_that_dies_gives_an_error_naming_the_collective():
    reports, codes, outputs, elapsed = run_ranks("rank_dies", env={"DIST_TIMEOUT": "8"}, timeout=40)
    assert codes[1] == 3, describe(codes, outputs)  # rank 1 exited on purpose
    assert codes[0] == 0, describe(codes, outputs)
    rep = reports[0]
    assert rep["error"] and "all_reduce" in rep["error"], rep
    assert rep["seconds"] < 8 + 2, rep  # within the group's timeout
    assert rep["usable"], rep  # the process keeps working
    assert "unusable" in rep["second_error"] and "all_reduce" in rep["second_error"], rep


def test_rank_that_never_calls_times_out_with_the_collective_named():
    reports, codes, outputs, elapsed = run_ranks("never_calls", env={"DIST_TIMEOUT": "4"}, timeout=40)
    assert codes[0] == 0, describe(codes, outputs)
    rep = reports[0]
    assert rep["error"] and "all_reduce" in rep["error"] and "timeout" in rep["error"], rep
    assert 3.5 < rep["seconds"] < 4 + 3, rep
    assert rep["usable"]


def test_rank_that_never_joins_fails_init_within_the_timeout():
    reports, codes, outputs, elapsed = run_ranks("never_joins", ranks=[0], env={"DIST_TIMEOUT": "4"}, timeout=40)
    assert codes[0] == 0, describe(codes, outputs)
    rep = reports[0]
    assert rep["error"] and ("Timed out" in rep["error"] or "timed out" in rep["error"]), rep
    assert rep["seconds"] < 4 + 4, rep
    assert rep["usable"]


MISMATCH_WORDS = {
    "numel": ["mismatch", "all_reduce", "number of elements"],
    "dtype": ["mismatch", "dtype", "torch.float32", "torch.int32"],
    "collective": ["mismatch", "collective differs"],
    "all_gather": ["mismatch", "all_gather_into_tensor", "number of elements"],
    "broadcast_root": ["mismatch", "root rank"],
    "splits": ["split sizes disagree"],
}


def test_mismatched_calls_raise_instead_of_crashing_or_corrupting():
    reports, codes, outputs, _ = run_ranks("mismatch", env={"DIST_TIMEOUT": "6"}, timeout=90)
    assert all(c == 0 for c in codes.values()) and len(reports) == WORLD, describe(codes, outputs)
    for rank, rep in reports.items():
        cases = rep["cases"]
        for name, words in MISMATCH_WORDS.items():
            err = cases[name]["error"]
            assert err, f"rank {rank} {name}: no error"
            for w in words:
                assert w in err, f"rank {rank} {name}: {w!r} not in {err!r}"
            assert cases[name]["seconds"] < 3, (name, cases[name])  # detected, not timed out
        # a mismatch right after repeated identical calls (whose check the history skips):
        # at worst the group's timeout, never a crash or mixed data
        late = cases["after_repeats"]
        assert late["error"] and ("mismatch" in late["error"] or "timeout" in late["error"]), late
        assert late["seconds"] < 6 + 3, late
        assert rep["default_group_ok"] and rep["usable"]


def test_mismatch_under_debug_detail_names_both_calls():
    env = {"DIST_TIMEOUT": "6", "TORCH_DISTRIBUTED_DEBUG": "DETAIL", "DIST_CASES": "numel,dtype"}
    reports, codes, outputs, _ = run_ranks("mismatch", env=env, timeout=90)
    assert all(c == 0 for c in codes.values()) and len(reports) == WORLD, describe(codes, outputs)
    for rep in reports.values():
        assert "Tensor shapes: " in rep["cases"]["numel"]["error"] or "shape" in rep["cases"]["numel"]["error"]
        assert "dtypes" in rep["cases"]["dtype"]["error"], rep["cases"]["dtype"]
        assert rep["default_group_ok"]


# ---------------------------------------------------------------- DDP


def test_ddp_matches_one_process_on_the_whole_batch():
    """DDP on 2 ranks (built-in all-reduce, and a Python communication hook; unused parameters
    on odd steps; several buckets) against one CPU process on the concatenated batch."""
    import torch

    reports, codes, outputs, _ = run_ranks("ddp", timeout=150)
    assert all(c == 0 for c in codes.values()) and len(reports) == WORLD, describe(codes, outputs)
    for rank, rep in reports.items():
        assert rep["fallback_ops"] == [], rep["fallback_ops"]
        for variant in ("builtin", "hook"):
            r = rep[variant]
            torch.testing.assert_close(torch.tensor(r["losses"]), torch.tensor(r["ref_losses"]), rtol=1e-5, atol=1e-6)
            for name, diff in r["param_max_abs_diff"].items():
                assert diff <= 1e-5 * max(1.0, r["param_max_abs"][name]), (rank, variant, name, diff)


# ---------------------------------------------------------------- SyncBatchNorm


SYNCBN_OPS = ["aten::batch_norm_backward_elemt", "aten::batch_norm_backward_reduce", "aten::batch_norm_elemt",
              "aten::batch_norm_gather_stats_with_counts", "aten::batch_norm_stats"]


def test_sync_batch_norm_matches_batch_norm_on_the_whole_batch():
    """nn.SyncBatchNorm (1-D, 2-D and 3-D inputs) on 2 ranks with uneven batches (3 and 5
    samples), two training steps and an eval step, against BatchNorm on the concatenated batch
    on CPU: outputs, input gradients, weight/bias gradients summed over ranks, running stats;
    natively (its CUDA-only ops run as neuron kernels, no CPU fallback)."""
    reports, codes, outputs, _ = run_ranks("syncbn", timeout=120)
    assert all(c == 0 for c in codes.values()) and len(reports) == WORLD, describe(codes, outputs)
    for rank, rep in reports.items():
        assert rep["fallback_ops"] == [], rep["fallback_ops"]
        assert set(SYNCBN_OPS) <= set(rep["batch_norm_ops"]), rep["batch_norm_ops"]
        for variant in ("1d", "2d", "3d"):
            for key, d in rep[variant].items():
                assert d <= 5e-5, (rank, variant, key, d)


# ---------------------------------------------------------------- the main job under torchrun


def _gpt_cmd(runs_dir, name, batch, steps=40, eval_every=20):
    return [os.path.join(HERE, "..", "examples", "train_gpt.py"), "--steps", str(steps), "--batch", str(batch),
            "--layers", "2", "--d-model", "64", "--eval-every", str(eval_every), "--eval-batches", "4",
            "--sample-chars", "0", "--runs-dir", runs_dir, "--run-name", name, "--no-progress"]


def ddp_follows_one_process(runs_dir, name, env, steps=40, eval_every=20):
    """Runs the main job in one process with the global batch (16) and checks the 2-rank DDP
    run `name` in `runs_dir` against it: no CPU fallback, the same evaluation steps, validation
    losses within 1 %."""
    one = run_cmd([sys.executable, *_gpt_cmd(runs_dir, "one", 16, steps, eval_every)], env, timeout=240)
    assert one.returncode == 0, one.stdout[-3000:] + one.stderr[-3000:]
    with open(os.path.join(runs_dir, name, "summary.json")) as f:
        ddp = json.load(f)
    with open(os.path.join(runs_dir, "one", "summary.json")) as f:
        ref = json.load(f)
    assert ddp["world_size"] == 2 and ddp["fallback_ops"] == [] and ddp["training_fallback_ops"] == []
    assert len(ddp["history"]["val_loss"]) == len(ref["history"]["val_loss"]) >= 2, (ddp["history"], ref["history"])
    for (s1, v1), (s2, v2) in zip(ddp["history"]["val_loss"], ref["history"]["val_loss"]):
        assert s1 == s2 and abs(v1 - v2) <= 0.01 * v2, (s1, v1, v2)


def test_train_gpt_under_torchrun_matches_one_rank_with_twice_the_batch(tmp_path):
    """examples/train_gpt.py with DDP on 2 ranks (batch B each) follows the validation curve of
    one process with batch 2B (the ranks take the two halves of the same global batch)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    runs = str(tmp_path)
    two = run_cmd([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                   f"--master_port={free_port()}", *_gpt_cmd(runs, "ddp", 8)], env, timeout=240)
    assert two.returncode == 0, two.stdout[-3000:] + two.stderr[-3000:]
    assert two.stdout.count("val loss") >= 3 and "DDP: 2 ranks x 8" in two.stdout  # rank 0 printed, once
    ddp_follows_one_process(runs, "ddp", env)
    assert sorted(os.listdir(os.path.join(runs, "ddp"))) == ["ckpt.pt", "loss.png", "summary.json"]
