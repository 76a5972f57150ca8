"""Process exit after a neuron backward: never an abort.

PyTorch's autograd engine runs neuron backward nodes on its device threads ("pt_autograd_<d>").
A device thread could drop the last reference to a finished backward's GraphTask, whose Python
objects it then frees under the GIL; when it waited for the GIL while the interpreter began
finalising, CPython ended the thread and the process aborted with "terminate called without an
active exception" (about one run in four of a script that ran a neuron backward, failing or
not, right before exiting). torch_neuronx flushes the device threads at exit (csrc/device.cpp,
flush_autograd_device_threads).

Fresh interpreters repeat the pattern, steered into the losing order of the race: the process
runs on one CPU and the device thread at the lowest priority (it yields the CPU to the woken
caller, which drops its reference first); the caller then holds the GIL in a 5 ms sleep (the
device thread starts waiting for it) and exits; a 0.2 s switch interval keeps the waiting
thread from asking for the GIL before finalisation. Without the flush most runs abort.
"""
import os
import subprocess
import sys

import torch

import torch_neuronx

CHILD = r"""
import ctypes, os, sys, warnings
import torch, torch_neuronx
warnings.simplefilter("ignore")  # the float64/fallback notices are not under test here
os.sched_setaffinity(0, {int(sys.argv[2])})
torch.ones(2, device="neuron", requires_grad=True).sum().backward()  # starts the device threads
device_threads = []
for tid in os.listdir("/proc/self/task"):
    with open(f"/proc/self/task/{tid}/comm") as f:
        if f.read().strip() == "pt_autograd_0":
            device_threads.append(int(tid))
assert device_threads, "no autograd device thread pt_autograd_0 to steer"
os.setpriority(os.PRIO_PROCESS, device_threads[0], 19)
sys.setswitchinterval(0.2)

class Scale(torch.autograd.Function):  # its backward node holds Python objects
    @staticmethod
    def forward(ctx, x):
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3

idx = torch.tensor([1, 2, 2], device="neuron")
if sys.argv[1] == "error":  # the backward raises inside a neuron kernel; the script catches it
    emb = torch.nn.Embedding(5, 3, sparse=True).to("neuron")
    try:
        emb(idx).sum().backward()
    except NotImplementedError as e:
        print("raised:", "sparse" in str(e))
else:
    emb = torch.nn.Embedding(5, 3).to("neuron")
    Scale.apply(emb(idx)).sum().backward()
    print("grad:", emb.weight.grad.cpu()[:, 0].tolist())
ctypes.PyDLL(None).usleep(5000)  # PyDLL: the GIL stays held
"""

EXPECTED = {"error": "raised: True", "ok": "grad: [0.0, 3.0, 6.0, 0.0, 0.0]"}


def test_exit_after_neuron_backward_never_aborts():
    cpus = sorted(os.sched_getaffinity(0))
    runs = [("error", "ok")[i % 2] for i in range(6)]
    failures = []
    for start in range(0, len(runs), len(cpus)):  # one child per CPU at a time
        batch = runs[start:start + len(cpus)]
        procs = [subprocess.Popen([sys.executable, "-c", CHILD, mode, str(cpu)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for mode, cpu in zip(batch, cpus)]
        for mode, p in zip(batch, procs):
            out, err = p.communicate(timeout=120)
            if p.returncode != 0 or "terminate" in err or EXPECTED[mode] not in out:
                failures.append(f"{mode}: returncode {p.returncode}\nstdout: {out}\nstderr: {err[-2000:]}")
    assert not failures, f"{len(failures)} of {len(runs)} runs failed:\n" + "\n".join(failures)


def test_flush_leaves_autograd_usable():
    # The exit flush runs a node through each device thread; the engine must work as before.
    w = torch.randn(4, 3)
    ref = torch.randn(4, 3)
    expected = 2 * (w - ref)
    for _ in range(2):
        x = w.to("neuron").requires_grad_()
        ((x - ref.to("neuron")) ** 2).sum().backward()
        torch.testing.assert_close(x.grad.cpu(), expected)
        torch_neuronx._flush_autograd_threads()
