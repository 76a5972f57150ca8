"""Runs the kernel benchmarks once per CPU tier this host supports (issue: kernel speed on every
x86-64 tier), each in a fresh process with both sides capped alike: TORCH_NEURONX_ISA for the
neuron runtime and ATEN_CPU_CAPABILITY for PyTorch's CPU kernels (avx512 -> avx512, avx2 ->
avx2, baseline -> default), and the libraries both sides call capped to the same instruction
set: BLAS (MKL_ENABLE_INSTRUCTIONS, OPENBLAS_CORETYPE; PyTorch's exp, log and tanh also run
Intel MKL's vector math, capped by the same variable) and oneDNN (ONEDNN_MAX_CPU_ISA: PyTorch's
GELU runs oneDNN's JIT kernels).

Run: `make bench` (or `python bench/run_tiers.py [--tiers avx2,avx512] [bench_kernels args]`)."""
import argparse
import os
import subprocess
import sys

ATEN = {"avx512": "avx512", "avx2": "avx2", "baseline": "default"}
MKL = {"avx512": "AVX512", "avx2": "AVX2", "baseline": "SSE4_2"}
OPENBLAS = {"avx512": "SkylakeX", "avx2": "Haswell", "baseline": "Prescott"}
ONEDNN = {"avx512": "AVX512_CORE", "avx2": "AVX2", "baseline": "SSE41"}


def supported() -> list[str]:
    import torch_neuronx

    return [t for t in ("avx512", "avx2", "baseline") if torch_neuronx._C._cpu_isa_supported(t)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tiers", default="", help="comma-separated tiers (default: avx512 and avx2 where supported, "
                        "else baseline)")
    args, rest = parser.parse_known_args()
    have = supported()
    tiers = args.tiers.split(",") if args.tiers else [t for t in have if t != "baseline"] or ["baseline"]
    status = 0
    for tier in tiers:
        if tier not in have:
            print(f"tier {tier}: not supported by this CPU (supported: {', '.join(have)})")
            continue
        env = dict(os.environ, TORCH_NEURONX_ISA=tier, ATEN_CPU_CAPABILITY=ATEN[tier], MKL_ENABLE_INSTRUCTIONS=MKL[tier],
                   OPENBLAS_CORETYPE=OPENBLAS[tier], ONEDNN_MAX_CPU_ISA=ONEDNN[tier])
        print(f"\n=== tier {tier} ===", flush=True)
        here = os.path.dirname(os.path.abspath(__file__))
        status |= subprocess.call([sys.executable, os.path.join(here, "bench_kernels.py"), *rest], env=env)
    return status


if __name__ == "__main__":
    sys.exit(main())
