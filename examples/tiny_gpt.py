"""A small decoder-only transformer (GPT) in plain PyTorch, used by the benchmarks and tests.

The model lives in the package (``torch_neuronx.examples.gpt``) so that the console command
``neuron-train-gpt`` can use it; this file re-exports it for ``bench/`` and ``tests/``.
"""
from torch_neuronx.examples.gpt import Block, TinyGPT  # noqa: F401
