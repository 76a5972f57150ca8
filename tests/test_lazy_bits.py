"""Lazy-bit views on neuron: x.conj(), torch._neg_view, x.conj().imag, resolve_conj/resolve_neg,
conj_physical, view_as_real/view_as_complex, and copies into and out of such views.

A conjugate or negative view is a flag over unchanged memory; every copy has to honour it. A
copy path that resolved the flag by copying again once recursed until the stack overflowed,
killing the process, so the cases run in a child interpreter (this file run as a script) that
reports one JSON line per case: a crash fails the case it happened in and every later one,
instead of taking pytest down. Expected values come from the same expression on CPU.

The fallback re-entrancy guard is tested the same way: a custom op whose CPU kernel calls
itself on neuron re-enters its own CPU fallback; that must raise a RuntimeError naming the op
and leave the process usable.
"""
import json
import os
import subprocess
import sys

import pytest
import torch

# (name, function of the device, ops allowed to take the CPU fallback)
NATIVE = ()


def _cases():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, dtype=torch.complex64, generator=g)
    y = torch.randn(6, 5, dtype=torch.complex64, generator=g)
    f = torch.randn(6, 5, generator=g)
    i = torch.randint(-9, 9, (6, 5), generator=g)

    def into(view, dtype, src):  # copy_ src into a lazy-bit view of zeros; returns the base
        def run(d):
            z = torch.zeros(6, 5, dtype=dtype, device=d)
            view(z).copy_(src.to(d))
            return z
        return run

    return [
        ("conj to host", lambda d: x.to(d).conj(), NATIVE),
        ("conj resolve_conj", lambda d: x.to(d).conj().resolve_conj(), NATIVE),
        ("conj clone", lambda d: x.to(d).conj().clone(), NATIVE),
        ("conj of a transposed view", lambda d: x.to(d).t().conj().contiguous(), NATIVE),
        ("conj of a strided slice", lambda d: x.to(d)[::2, 1::2].conj().clone(), NATIVE),
        ("x * x.conj()", lambda d: x.to(d) * x.to(d).conj(), NATIVE),
        ("x.conj() + y", lambda d: x.to(d).conj() + y.to(d), NATIVE),
        ("conj sum", lambda d: x.to(d).conj().sum(), NATIVE),
        ("conj abs", lambda d: x.to(d).conj().abs(), NATIVE),
        ("conj_physical", lambda d: torch.conj_physical(x.to(d)), NATIVE),
        ("conj_physical of a conj view", lambda d: torch.conj_physical(x.to(d).conj()), NATIVE),
        ("conj_physical of a real tensor", lambda d: torch.conj_physical(f.to(d)), NATIVE),
        ("conj_physical_", lambda d: x.clone().to(d).conj_physical_(), NATIVE),
        ("conj_physical out=", lambda d: torch.conj_physical(x.to(d), out=torch.empty(0, dtype=x.dtype, device=d)),
         NATIVE),
        ("_neg_view", lambda d: torch._neg_view(f.to(d)), NATIVE),
        ("_neg_view resolve_neg", lambda d: torch._neg_view(f.to(d)).resolve_neg(), NATIVE),
        ("_neg_view of int64", lambda d: torch._neg_view(i.to(d)).clone(), NATIVE),
        ("_neg_view of complex", lambda d: torch._neg_view(x.to(d)).clone(), NATIVE),
        ("imag of a conj view (a neg view)", lambda d: x.to(d).conj().imag, NATIVE),
        ("imag of a conj view + 1", lambda d: x.to(d).conj().imag + 1, NATIVE),
        ("imag of a conj view resolve_neg", lambda d: x.to(d).conj().imag.resolve_neg(), NATIVE),
        ("view_as_real of a conj view (raises)", lambda d: torch.view_as_real(x.to(d).conj()), NATIVE),
        ("view_as_real of a resolved conj", lambda d: torch.view_as_real(x.to(d).conj().resolve_conj()), NATIVE),
        ("view_as_complex", lambda d: torch.view_as_complex(torch.view_as_real(x.to(d)) * 2), NATIVE),
        ("copy_ into a conj view", into(torch.conj, torch.complex64, y), NATIVE),
        ("copy_ into a neg view", into(torch._neg_view, torch.float32, f), NATIVE),
        ("copy_ of a conj view into a conj view", into(torch.conj, torch.complex64, y.conj()), NATIVE),
        ("x.copy_(x.conj())", lambda d: (lambda z: z.copy_(z.conj()))(x.clone().to(d)), NATIVE),
        ("conj view from the host", lambda d: x.conj().to(d), NATIVE),
        ("conj view to complex128", lambda d: x.to(d).conj().to(torch.complex128), NATIVE),
        ("conj view to float32 (real part)", lambda d: x.to(d).conj().to(torch.float32), NATIVE),
        ("neg view to int32", lambda d: torch._neg_view(i.to(d)).to(torch.int32), NATIVE),
        ("conj view to another core", lambda d: x.to(d).conj().to("neuron:1" if d == "neuron" else d), NATIVE),
        ("repr of a conj view", lambda d: repr(x.to(d).conj()).replace(", device='neuron:0'", ""), NATIVE),
        ("fft cross-correlation", lambda d: torch.fft.irfft(torch.fft.rfft(f.to(d)) * torch.fft.rfft(2 * f.to(d)).conj()),
         ("aten::_fft_r2c", "aten::_fft_c2r")),
    ]


def _summary(v):
    if isinstance(v, torch.Tensor):
        return v.cpu().resolve_conj().resolve_neg()
    return v


def _child():
    import warnings

    import torch_neuronx

    warnings.simplefilter("ignore")
    for name, fn, allowed in _cases():
        print(json.dumps({"case": name, "status": "started"}), flush=True)
        try:
            want, want_err = _summary(fn("cpu")), None
        except Exception as e:  # noqa: BLE001 - the device must raise the same type
            want, want_err = None, e
        torch_neuronx.clear_op_tracking()
        try:
            got = fn("neuron")
            on_device = not isinstance(got, torch.Tensor) or got.device.type == "neuron"
            got, got_err = _summary(got), None
        except Exception as e:  # noqa: BLE001
            got, got_err, on_device = None, e, True
        fallbacks = sorted(set(torch_neuronx.get_fallback_ops()) - set(allowed))
        problem = None
        if want_err or got_err:
            if type(want_err) is not type(got_err):
                problem = f"cpu raised {want_err!r}, neuron raised {got_err!r}"
        elif not on_device:
            problem = "the result is not on neuron"
        elif isinstance(want, torch.Tensor):
            try:
                torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
            except AssertionError as e:
                problem = str(e)
        elif got != want:
            problem = f"{got!r} != {want!r}"
        if problem is None and fallbacks:
            problem = f"unexpected CPU fallback: {fallbacks}"
        print(json.dumps({"case": name, "status": "ok" if problem is None else "failed", "problem": problem}),
              flush=True)

    # The re-entrancy guard: a custom op whose CPU kernel runs the op again on neuron.
    lib = torch.library.Library("nx_lazy_test", "DEF")
    lib.define("loop(Tensor x) -> Tensor")
    lib.impl("loop", lambda t: torch.ops.nx_lazy_test.loop(t.to("neuron")).cpu(), "CPU")
    lib.define("twice(Tensor x) -> Tensor")  # a CPU-only op: reaches the fallback
    lib.impl("twice", lambda t: t * 2, "CPU")
    print(json.dumps({"case": "guard", "status": "started"}), flush=True)
    try:
        torch.ops.nx_lazy_test.loop(torch.ones(3, device="neuron"))
        problem = "no error"
    except RuntimeError as e:
        msg = str(e)
        problem = None if "nx_lazy_test::loop" in msg and "re-entered" in msg else f"unexpected message: {msg}"
    if problem is None:  # the process stays usable, the fallback included
        ok = torch.equal((torch.arange(4, device="neuron").float().cumprod(0) + 1).cpu(),
                         torch.tensor([1.0, 1.0, 1.0, 1.0]))
        ok = ok and torch.equal(torch.ops.nx_lazy_test.twice(torch.ones(3, device="neuron")).cpu(), torch.full((3,), 2.0))
        ok = ok and torch_neuronx.get_fallback_ops()[-1] == "nx_lazy_test::twice"
        problem = None if ok else "wrong results after the guard fired"
    print(json.dumps({"case": "guard", "status": "ok" if problem is None else "failed", "problem": problem}),
          flush=True)


@pytest.fixture(scope="module")
def child_results():
    env = dict(os.environ, NEURON_RT_NUM_CORES="2")
    env.pop("NEURON_RT_VISIBLE_CORES", None)
    proc = subprocess.run([sys.executable, __file__, "--child"], capture_output=True, text=True, timeout=600, env=env)
    results, last = {}, None
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            rec = json.loads(line)
            results[rec["case"]] = rec
            last = rec["case"]
    return results, last, proc


@pytest.mark.parametrize("name", [c[0] for c in _cases()] + ["guard"])
def test_lazy_bit_case_matches_cpu(child_results, name):
    results, last, proc = child_results
    rec = results.get(name)
    if rec is None or rec["status"] == "started":
        where = f"died during '{last}'" if last else "died before the first case"
        pytest.fail(f"the child process {where} (exit code {proc.returncode}):\n{proc.stderr[-3000:]}")
    assert rec["status"] == "ok", f"{name}: {rec['problem']}"


if __name__ == "__main__" and "--child" in sys.argv:
    _child()
