"""Shared helpers: a subprocess runner for behaviour that is per-process (autoload, env
vars, one-time warnings, fork) and bitwise comparison against CPU PyTorch."""
import atexit
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest

# Compiled graphs go to a fresh temporary cache, never the user's (~/.cache/torch_neuronx).
_CACHE = tempfile.mkdtemp(prefix="torch_neuronx_test_jit_")
os.environ["TORCH_NEURONX_CACHE_DIR"] = _CACHE
atexit.register(shutil.rmtree, _CACHE, True)

import torch  # noqa: E402

import torch_neuronx  # noqa: F401,E402  (explicit, so the suite also runs with autoload off)


# Ops with only a CPU kernel: on neuron they always take the CPU fallback, whatever native
# kernels exist, so the fallback machinery stays testable.
CPU_ONLY = torch.library.Library("neuron_test", "DEF")
CPU_ONLY.define("scale(Tensor x, float s) -> Tensor")
CPU_ONLY.define("scale_(Tensor(a!) x, float s) -> Tensor(a!)")
CPU_ONLY.define("scale.out(Tensor x, float s, *, Tensor(a!) out) -> Tensor(a!)")
CPU_ONLY.define("shift(Tensor x) -> Tensor")
CPU_ONLY.define("alias_op(Tensor(a) x) -> Tensor(a)")
CPU_ONLY.impl("scale", lambda x, s: x * s, "CPU")
CPU_ONLY.impl("scale_", lambda x, s: x.mul_(s), "CPU")
CPU_ONLY.impl("scale.out", lambda x, s, out: torch.mul(x, s, out=out), "CPU")
CPU_ONLY.impl("shift", lambda x: x + 1, "CPU")
CPU_ONLY.impl("alias_op", lambda x: x.view(-1), "CPU")
SCRIPT_CPU_ONLY = """
import torch
_lib = torch.library.Library("neuron_test", "DEF")
_lib.define("scale(Tensor x, float s) -> Tensor")
_lib.define("shift(Tensor x) -> Tensor")
_lib.impl("scale", lambda x, s: x * s, "CPU")
_lib.impl("shift", lambda x: x + 1, "CPU")
"""


def run_py(code: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run `code` in a fresh interpreter; returns the completed process (text output)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(textwrap.dedent(code))  # a file, so that `spawn` children can import __main__
    try:
        proc = subprocess.run([sys.executable, f.name], env=full_env, capture_output=True,
                              text=True, timeout=300)
    finally:
        os.unlink(f.name)
    if check and proc.returncode != 0:
        raise AssertionError(f"subprocess failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return proc


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor) -> None:
    """Same shape, dtype and bytes (signed zeros and infinities included). NaNs must sit at
    the same places; their payload bits are not compared, since CPU PyTorch itself yields
    different NaN payloads for the same cast depending on layout (vectorised or not)."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    assert actual.dtype == expected.dtype, (actual.dtype, expected.dtype)
    a = actual.detach().cpu().contiguous().reshape(-1)
    e = expected.detach().cpu().contiguous().reshape(-1)
    if a.is_complex():
        a, e = torch.view_as_real(a), torch.view_as_real(e)
    if a.dtype == torch.bool:
        assert torch.equal(a, e)
        return
    if a.is_floating_point():
        nan_a, nan_e = torch.isnan(a), torch.isnan(e)
        assert torch.equal(nan_a, nan_e), (actual, expected)
        a, e = a[~nan_a], e[~nan_e]
    assert torch.equal(a.view(torch.uint8), e.view(torch.uint8)), (actual, expected)


@pytest.fixture
def neuron():
    """The device under test, with op tracking cleared and all queued work finished after."""
    torch_neuronx.clear_op_tracking()
    yield torch.device("neuron:0")
    torch.neuron.synchronize()


@pytest.fixture
def native(neuron):
    """As `neuron`, and after the test (its queued work finished) nothing may have taken the
    CPU fallback."""
    yield neuron
    torch.neuron.synchronize()
    assert torch_neuronx.get_fallback_ops() == []


def pytest_terminal_summary(terminalreporter):
    """The conformance counts per dtype (and, in the full run, the registered overloads no
    sample reached), when the conformance harness ran."""
    import sys
    conformance = sys.modules.get("conformance")
    if conformance is None or not conformance.REPORT.counts:
        return
    for line in conformance.REPORT.lines(show_unreached=conformance.FULL):
        terminalreporter.write_line(line)
    path = os.environ.get("NEURON_CONFORMANCE_FALLBACKS")  # make conformance, or by hand for the slice
    if path:
        conformance.REPORT.write_fallbacks(path)
        terminalreporter.write_line(f"wrote {path}")
