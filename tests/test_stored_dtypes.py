"""Neuron tensors of the dtypes the device only stores (float8, float4, uint16 to uint64, bits)
and of complex32 through many native ops (indexing, gather/scatter, embedding, index_select,
flip, where, cat, stack, masked ops, printing, clone, contiguous, copy_, fills, and some that
compute): every outcome equals CPU PyTorch's on the same inputs (the same bytes, or the same
exception type where CPU raises), the data-movement kernels that declare a stored-only dtype
run it natively, and the process never crashes. The sweep (tests/stored_dtype_sweep.py) runs
in its own interpreter, so a crash is reported with the case it happened in."""
import json
import pathlib
import subprocess
import sys

import pytest

import stored_dtype_sweep as sweep_mod

SWEEP = pathlib.Path(__file__).with_name("stored_dtype_sweep.py")
DTYPES = [str(dt).replace("torch.", "") for dt in sweep_mod.DTYPES]


@pytest.fixture(scope="module")
def sweep():
    proc = subprocess.run([sys.executable, str(SWEEP)], capture_output=True, text=True, timeout=900)
    results, started = [], None
    for line in proc.stdout.splitlines():
        if line.startswith("start "):
            started = line[len("start "):]
        elif line.startswith("result "):
            results.append(json.loads(line[len("result "):]))
    return proc, results, started


def test_the_sweep_never_crashes(sweep):
    proc, results, started = sweep
    assert proc.returncode in (0, 1), f"the sweep died (status {proc.returncode}) in case {started}:\n{proc.stderr[-4000:]}"
    assert len(results) == len(sweep_mod.CASES) * len(DTYPES)


@pytest.mark.parametrize("dtype", DTYPES)
def test_neuron_matches_cpu(sweep, dtype):
    _, results, _ = sweep
    rows = [r for r in results if r["dtype"] == dtype]
    assert rows, f"no results for {dtype}"
    wrong = [f"{r['case']}: cpu {r['cpu']}, neuron {r['neuron']}" for r in rows if not r["match"]]
    assert not wrong, "\n".join(wrong)
    fell_back = [f"{r['case']}: {r['fallback']}" for r in rows if r["native_expected"] and r["fallback"]]
    assert not fell_back, "expected native, took the CPU fallback:\n" + "\n".join(fell_back)
