"""Train a small character-level GPT on the Jargon File on the `neuron` device.

`make demo` runs `python examples/train_gpt.py --run-name demo`; `--help` lists the options
(`--device cpu`, `--compile`, `--parity`, model and training sizes). The code lives in
`torch_neuronx/examples/train_gpt.py` (console command: `neuron-train-gpt`).
"""
import sys

from torch_neuronx.examples.train_gpt import main

if __name__ == "__main__":
    sys.exit(main())
