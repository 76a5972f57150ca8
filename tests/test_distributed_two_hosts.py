"""Two hosts: the main job trains with DDP across two network namespaces joined by a veth pair.

Each namespace is a host with its own network stack (loopback and one end of the pair), so the
ranks reach each other only through the pair: the process group's traffic crosses "hosts"
over TCP exactly as between machines. Each host runs `torchrun --nnodes=2` with the c10d
rendezvous on the first host's address (the multi-host command of docs/distributed.md); rank 0
writes the run's summary, whose validation curve must follow one process with the global batch.

The test creates and removes its namespaces itself (`ip netns`, iproute2; root or CAP_SYS_ADMIN
and CAP_NET_ADMIN, which CI has). Where they cannot be created it fails with the reason, unless
NEURON_TEST_SKIP_NETNS=1 asks to skip it.
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from test_distributed import _gpt_cmd, ddp_follows_one_process, free_port, kill_group  # noqa: E402

SKIP_ENV = "NEURON_TEST_SKIP_NETNS"


class NamespaceError(RuntimeError):
    """The namespaces or the veth pair could not be created (the message says why)."""


def _ip(*args: str) -> str:
    try:
        proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise NamespaceError("the `ip` command (iproute2) is not installed: apt-get install iproute2") from None
    if proc.returncode != 0:
        raise NamespaceError(f"`ip {' '.join(args)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


@contextlib.contextmanager
def two_hosts():
    """Yields [(namespace, interface, address)] for two namespaces joined by a veth pair
    (10.213.0.1/24 and 10.213.0.2/24, loopback up in each); removes them afterwards (deleting
    a namespace deletes its end of the pair, and so the pair)."""
    tag = str(os.getpid() % 1000000)
    hosts = [(f"nxhost{tag}a", f"nxveth{tag}a", "10.213.0.1"), (f"nxhost{tag}b", f"nxveth{tag}b", "10.213.0.2")]
    made = []
    try:
        for ns, _, _ in hosts:
            _ip("netns", "add", ns)
            made.append(ns)
        _ip("link", "add", hosts[0][1], "type", "veth", "peer", "name", hosts[1][1])
        for ns, dev, addr in hosts:
            _ip("link", "set", dev, "netns", ns)
            _ip("-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", dev, "up")
        yield hosts
    finally:
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", hosts[0][1]], capture_output=True, timeout=30)  # if not moved yet


def _veth_bytes(ns: str, dev: str) -> int:
    stats = json.loads(_ip("-s", "-j", "-n", ns, "link", "show", "dev", dev))[0]["stats64"]
    return stats["rx"]["bytes"] + stats["tx"]["bytes"]


def test_ddp_trains_the_main_job_across_two_hosts(tmp_path):
    """examples/train_gpt.py, one rank per host (namespace), DDP over the neuron backend:
    the gradients cross the veth pair (its byte counters), and the validation curve equals
    one process's with the global batch."""
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: the two-host test (network namespaces) is skipped on request")
    runs = str(tmp_path)
    steps = 20
    cmd = _gpt_cmd(runs, "two_hosts", 8, steps=steps, eval_every=10)
    port = free_port()
    cleanup = contextlib.ExitStack()
    try:
        hosts = cleanup.enter_context(two_hosts())
    except NamespaceError as e:
        pytest.fail(f"cannot create the two hosts (network namespaces): {e}. The test needs root (CAP_SYS_ADMIN and "
                    f"CAP_NET_ADMIN: ip netns mounts) and iproute2; set {SKIP_ENV}=1 to skip it.")
    with cleanup:
        procs, logs = [], []
        for node, (ns, dev, addr) in enumerate(hosts):
            # --local-addr: the address the other host reaches this one at (the host name of a
            # namespace resolves to the machine's address); is_host: the first host serves the
            # rendezvous store. GLOO_SOCKET_IFNAME: Gloo's interface.
            launch = ["ip", "netns", "exec", ns, "env", f"GLOO_SOCKET_IFNAME={dev}", "OMP_NUM_THREADS=1",
                      sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1",
                      "--rdzv-backend=c10d", f"--rdzv-endpoint={hosts[0][2]}:{port}", "--rdzv-id=two_hosts",
                      f"--rdzv-conf=is_host={int(node == 0)}", f"--local-addr={addr}", *cmd]
            logs.append(open(tmp_path / f"host{node}.log", "w+"))
            procs.append(subprocess.Popen(launch, stdout=logs[-1], stderr=subprocess.STDOUT, text=True,
                                          start_new_session=True))
        deadline = time.monotonic() + 240
        codes = []
        try:
            for p in procs:
                try:
                    codes.append(p.wait(timeout=max(1.0, deadline - time.monotonic())))
                except subprocess.TimeoutExpired:
                    codes.append("timeout")
        finally:
            for p in procs:
                kill_group(p)  # the launchers, their workers, anything they left
        outputs = []
        for f in logs:
            f.seek(0)
            outputs.append(f.read())
            f.close()
        assert codes == [0, 0], "\n".join(f"--- host {i} (exit {c}):\n{o[-3000:]}" for i, (c, o) in
                                          enumerate(zip(codes, outputs)))
        crossed = _veth_bytes(hosts[0][0], hosts[0][1])
    out = outputs[0]
    assert "DDP: 2 ranks x 8" in out and out.count("val loss") >= 3, out[-3000:]
    params = 0.12e6  # TinyGPT(2 layers, d_model 64): one float32 all-reduce of the gradients per step
    assert crossed > steps * params * 4, f"only {crossed} bytes crossed the veth pair"
    ddp_follows_one_process(runs, "two_hosts", dict(os.environ, OMP_NUM_THREADS="1"), steps=steps, eval_every=10)
