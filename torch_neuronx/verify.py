"""Install check (``python -m torch_neuronx verify``): the quickstart verification users expect.

Prints the versions of Python, PyTorch and this package, the devices and their properties;
then checks that the device is usable (a small matmul and its gradient on ``neuron`` against
CPU, run natively without CPU fallback) and that autoload works (a fresh interpreter that only
imports ``torch`` can create a ``neuron`` tensor). Ends with ``OK`` or with each failed check
and what to do about it; :func:`main` returns the exit status (0 OK, 1 failed).
"""
from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap
import traceback
from dataclasses import dataclass

EXPECTED_TORCH = "2.13"
REBUILD = "reinstall the package in this environment (`make build`, or `pip install --no-build-isolation -e .`)"


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    advice: str = ""


def _package_version() -> str:
    import torch_neuronx

    try:
        from importlib.metadata import version

        dist = version("torch-neuronx-open")
    except Exception:  # not installed as a distribution (source tree on sys.path)
        dist = "not installed as a distribution"
    return f"{torch_neuronx.__version__} (distribution torch-neuronx-open {dist})"


def check_torch_version() -> Check:
    import torch

    ok = torch.__version__.startswith(EXPECTED_TORCH)
    return Check("PyTorch version", ok, f"torch {torch.__version__}",
                 "" if ok else f"this build targets torch {EXPECTED_TORCH}.x: pip install torch==2.13.0 "
                 "--index-url https://download.pytorch.org/whl/cpu, then " + REBUILD)


def cpu_model() -> str:
    """The host CPU's model name (/proc/cpuinfo; platform.processor() elsewhere)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _kernel_host() -> str:
    """Where the runtime's kernels run: CPU model, the tier in use (and the cap, if set), the
    tiers this CPU supports and the kernel threads."""
    import torch_neuronx

    cap = os.environ.get("TORCH_NEURONX_ISA")
    supported = [t for t in ("avx512", "avx2", "baseline") if torch_neuronx._C._cpu_isa_supported(t)]
    return (f"kernels: CPU tier {torch_neuronx.get_cpu_isa()}"
            + (f" (capped by TORCH_NEURONX_ISA={cap})" if cap else "")
            + f", supported {', '.join(supported)}; GEMM {torch_neuronx.get_gemm_provider()};"
            + f" {torch_neuronx.get_num_threads()} threads; {cpu_model()}")


def check_devices() -> Check:
    import torch

    n = torch.neuron.device_count()
    if n < 1:
        return Check("devices", False, "no neuron devices visible",
                     "check NEURON_RT_VISIBLE_CORES / NEURON_RT_NUM_CORES (unset both for the default of 2 cores)")
    lines = [f"{n} virtual NeuronCore{'s' if n > 1 else ''}; accelerator: {torch.accelerator.current_accelerator()}"]
    for i in range(n):
        p = torch.neuron.get_device_properties(i)
        lines.append(f"  {p.name}: capacity {p.total_memory / 2**30:.1f} GiB, physical core {p.physical_core}")
    lines.append(_kernel_host())
    return Check("devices", True, "\n".join(lines))


def check_matmul() -> Check:
    import torch

    import torch_neuronx

    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(64, 48, generator=g), torch.randn(48, 32, generator=g)
    torch_neuronx.clear_op_tracking()
    da = a.to("neuron").requires_grad_()
    out = da @ b.to("neuron")
    out.sum().backward()
    torch.neuron.synchronize()
    ca = a.clone().requires_grad_()
    ref = ca @ b
    ref.sum().backward()
    err = (out.detach().cpu() - ref.detach()).abs().max().item()
    gerr = (da.grad.cpu() - ca.grad).abs().max().item()
    fallback = torch_neuronx.get_fallback_ops()
    ok = (torch.allclose(out.detach().cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
          and torch.allclose(da.grad.cpu(), ca.grad, rtol=1e-5, atol=1e-5))
    detail = (f"(64x48) @ (48x32) on {out.device}: max |difference| from CPU {err:.1e}, gradient {gerr:.1e}; "
              f"native ops {', '.join(torch_neuronx.get_executed_op_counts())}")
    if not ok:
        return Check("matmul on neuron", False, detail,
                     "the device computes wrong results: rerun with NEURON_LAUNCH_BLOCKING=1 and report a bug "
                     "with this output")
    if fallback:
        return Check("matmul on neuron", False, detail + f"; CPU fallback: {sorted(set(fallback))}",
                     "the native matmul kernels are not registered: " + REBUILD)
    return Check("matmul on neuron", True, detail)


def check_autoload() -> Check:
    code = textwrap.dedent("""
        import sys, torch
        x = torch.ones(2, 2, device="neuron")
        print(x.device, (x @ x).sum().item(), "torch_neuronx" in sys.modules)
    """)
    env = dict(os.environ)
    off = env.get("TORCH_DEVICE_BACKEND_AUTOLOAD") == "0"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    out = proc.stdout.strip()
    if proc.returncode == 0 and out == "neuron:0 8.0 True":
        return Check("autoload", True, "a fresh `import torch` (no torch_neuronx import) runs on neuron:0")
    tail = (proc.stderr.strip().splitlines() or [out])[-1]
    advice = ("TORCH_DEVICE_BACKEND_AUTOLOAD=0 is set: unset it, or `import torch_neuronx` in your scripts"
              if off else "the torch.backends entry point of torch-neuronx-open is missing or broken: " + REBUILD)
    return Check("autoload", False, f"a script that only imports torch failed: {tail}", advice)


def run_checks() -> list[Check]:
    checks = []
    for fn in (check_torch_version, check_devices, check_matmul, check_autoload):
        try:
            checks.append(fn())
        except Exception as e:  # a check that crashes is a failed check, with the reason
            name = fn.__name__.removeprefix("check_").replace("_", " ")
            checks.append(Check(name, False, f"{type(e).__name__}: {e}",
                                "see the traceback above; " + REBUILD + " if the extension does not load"))
            traceback.print_exc()
    return checks


def main(argv=None) -> int:
    import torch

    import torch_neuronx

    print(f"python {platform.python_version()} on {platform.system()} {platform.machine()}")
    print(f"torch {torch.__version__}; torch_neuronx {_package_version()}")
    print(f"torch_neuronx at {os.path.dirname(torch_neuronx.__file__)}")
    checks = run_checks()
    for c in checks:
        mark = "ok  " if c.ok else "FAIL"
        first, *rest = c.detail.splitlines()
        print(f"[{mark}] {c.name}: {first}")
        for line in rest:
            print(f"       {line}")
    failed = [c for c in checks if not c.ok]
    if not failed:
        print("OK: the neuron device is installed and working")
        return 0
    print(f"FAILED: {len(failed)} of {len(checks)} checks")
    for c in failed:
        print(f"  - {c.name}: {c.advice}")
    return 1
