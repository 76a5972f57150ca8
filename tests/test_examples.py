"""The examples at a reduced size: character-level GPT training on the Jargon File (losses,
summary, plot, checkpoint, CPU parity, --compile and corpus errors), all-MiniLM-L6-v2 embeddings
against CPU, the install check and the console commands."""
import json
import os
import subprocess
import sys
import tomllib

import pytest
import torch

import torch_neuronx
from conftest import run_py
from torch_neuronx.examples import corpus as corpus_mod
from torch_neuronx.examples import embed, train_gpt
from torch_neuronx.examples.gpt import TinyGPT

ROOT = os.path.join(os.path.dirname(__file__), "..")
TINY = ["--layers", "1", "--d-model", "32", "--heads", "2", "--block", "32", "--batch", "16",
        "--lr", "1e-2", "--warmup", "5", "--eval-batches", "4", "--no-progress"]


@pytest.fixture(scope="module")
def jargon():
    if not os.path.isfile(corpus_mod.JARGON_PATH):
        pytest.fail(corpus_mod.MISSING_MESSAGE.format(path=corpus_mod.JARGON_PATH))
    return corpus_mod.load()


def test_corpus_is_the_normalised_jargon_file(jargon):
    assert jargon.vocab_size == 96 and all(" " <= c <= "~" or c == "\n" for c in jargon.chars)
    text = jargon.decode(jargon.train[:5000])
    assert text.startswith("The Jargon File\n\n(version 4.4.7)")
    assert ":hacker: n." in jargon.decode(jargon.train)
    n = jargon.train.numel() + jargon.val.numel()
    assert n > 1_400_000 and jargon.val.numel() == n - int(n * 0.9)
    x, y = jargon.batch("val", 4, 16, torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (4, 16) and torch.equal(x[:, 1:], y[:, :-1])


def test_missing_corpus_says_how_to_install_it(tmp_path, capsys):
    rc = train_gpt.main(["--corpus", str(tmp_path / "none.txt"), "--runs-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "apt-get install jargon-text" in err and "--corpus PATH" in err


def test_compile_flag_trains_like_eager(tmp_path, jargon):
    """--compile: torch.compile(backend="neuron"); the summary keeps compile and step time apart
    and the losses equal eager's (the compiled graphs compute eager's bits)."""
    import torch._dynamo

    torch._dynamo.reset()
    common = [*TINY, "--steps", "12", "--eval-every", "6", "--sample-chars", "0", "--runs-dir", str(tmp_path)]
    assert train_gpt.main([*common, "--run-name", "eager"]) == 0
    assert train_gpt.main([*common, "--run-name", "compiled", "--compile"]) == 0
    eager, comp = (json.load(open(tmp_path / n / "summary.json")) for n in ("eager", "compiled"))
    assert comp["compile"] is True and comp["compile_time_s"] > 0 and comp["step_time_ms"] > 0
    assert eager["compile_time_s"] is None
    assert abs(comp["final_val_loss"] - eager["final_val_loss"]) <= 0.01 * eager["final_val_loss"]
    assert comp["history"]["train_loss"] == eager["history"]["train_loss"]
    assert comp["training_fallback_ops"] == []


def test_train_gpt_learns_and_writes_the_run(tmp_path, jargon):
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "examples", "train_gpt.py"), *TINY, "--steps", "30", "--eval-every", "10",
         "--sample-chars", "40", "--runs-dir", str(tmp_path), "--run-name", "tiny"],
        capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = tmp_path / "tiny"
    s = json.loads((run / "summary.json").read_text())
    for key in ("steps", "initial_val_loss", "final_val_loss", "final_train_loss", "tokens_per_s",
                "peak_device_memory_bytes", "kernel_cache", "fallback_ops", "sample", "history"):
        assert key in s, key
    assert s["steps"] == 30 and s["device"] == "neuron" and s["corpus"].startswith("The Jargon File 4.4.7")
    train = [v for _, v in s["history"]["train_loss"]]
    val = [v for _, v in s["history"]["val_loss"]]
    assert len(train) == 30 and [st for st, _ in s["history"]["val_loss"]] == [0, 10, 20, 30]
    assert all(map(torch.isfinite, torch.tensor(train + val)))
    assert sum(train[-5:]) / 5 < sum(train[:5]) / 5 - 0.3  # the training loss falls
    assert s["final_val_loss"] < s["initial_val_loss"] - 0.3  # and so does the validation loss
    assert s["tokens_per_s"] > 0 and s["peak_device_memory_bytes"] > 0
    assert s["kernel_cache"]["hits"] > 0
    assert s["training_fallback_ops"] == []  # training itself is native
    assert s["fallback_ops"] == []  # sampling too
    assert (run / "loss.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    sample = (run / "sample.txt").read_text()
    assert sample == s["sample"] and sample.startswith(train_gpt.DEFAULTS["prompt"])
    assert len(sample) == len(train_gpt.DEFAULTS["prompt"]) + 40
    assert "val loss" in proc.stdout and "--- sample" in proc.stdout

    # The checkpoint reloads on CPU and on neuron and computes what the trained model computed.
    diffs = s["checkpoint"]["reload_max_abs_logit_diff"]
    assert diffs["neuron"] == 0.0 and diffs["cpu"] < 1e-4
    probe = jargon.val[:64].view(2, 32)
    logits = {}
    for where in ("cpu", "neuron"):
        ck = torch.load(run / "ckpt.pt", map_location=where, weights_only=True)
        assert next(iter(ck["model"].values())).device.type == where
        assert ck["chars"] == jargon.chars and ck["step"] == 30
        model = TinyGPT(**ck["config"])
        model.load_state_dict(ck["model"])
        model.to(where).eval()
        with torch.no_grad():
            logits[where] = model(probe.to(where)).cpu()
    # Observed: 6.2e-6 at most (the demo's model); 5e-5 leaves a margin of eight.
    torch.testing.assert_close(logits["neuron"], logits["cpu"], rtol=1e-5, atol=5e-5)
    ck = torch.load(run / "ckpt.pt", weights_only=True)  # saved from the device: loads back onto it
    assert next(iter(ck["model"].values())).device == torch.device("neuron:0")


def test_parity_of_the_first_losses_with_cpu(tmp_path, capsys, jargon):
    rc = train_gpt.main([*TINY, "--parity", "--parity-steps", "10", "--runs-dir", str(tmp_path), "--run-name", "p"])
    out = capsys.readouterr().out
    result = json.loads((tmp_path / "p" / "parity.json").read_text())
    assert rc == 0, out
    dev, cpu = result["losses"]["neuron"], result["losses"]["cpu"]
    assert len(dev) == len(cpu) == 10
    worst = max(abs(a - b) / abs(b) for a, b in zip(dev, cpu))
    # Observed 1.2e-7 (float32 roundings in another order); 1e-5 leaves a margin of eighty.
    assert worst <= 1e-5 and result["max_rel_diff"] == pytest.approx(worst)
    assert dev[-1] < dev[0]
    assert "max relative difference" in out and "OK" in out


def test_minilm_embeddings_match_cpu():
    args = embed.parse_args(["--repeat", "0"])
    out = embed.run(args)
    assert out["neuron_param_device"] == "neuron:0"
    # Observed: 1 - cosine 4.5e-13, largest component difference 1.8e-7 (float32 roundings);
    # the bounds leave margins of over a thousand and of ten.
    assert out["min_cosine"] >= 1 - 1e-9, out["cosine"]
    assert out["max_abs_diff"] < 2e-6, out["max_abs_diff"]
    assert out["rankings_identical"], (out["rank_cpu"], out["rank_device"])
    # The nearest sentence of each query is on its topic (a real model, really run).
    assert [order[0] for order in out["rank_device"]] == [2, 4, 8, 12, 16]
    assert out["fallback_ops"] == []
    assert out["ok"]


def test_verify_command_reports_ok():
    proc = subprocess.run([sys.executable, "-m", "torch_neuronx", "verify"], capture_output=True, text=True,
                          timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert lines[-1].startswith("OK")
    assert "torch 2.13.0" in proc.stdout and "virtual NeuronCores" in proc.stdout
    # The kernels' CPU tier (issue: kernel speed on every x86-64 tier) and thread count.
    import torch_neuronx
    assert f"kernels: CPU tier {torch_neuronx.get_cpu_isa()}" in proc.stdout
    assert f"{torch_neuronx.get_num_threads()} threads" in proc.stdout
    assert sum(line.startswith("[ok  ]") for line in lines) == 4


def test_verify_lists_what_failed_and_what_to_do():
    proc = subprocess.run([sys.executable, "-m", "torch_neuronx", "verify"], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, TORCH_DEVICE_BACKEND_AUTOLOAD="0"))
    assert proc.returncode == 1
    assert "[FAIL] autoload" in proc.stdout and "FAILED: 1 of 4 checks" in proc.stdout
    assert "unset it" in proc.stdout.splitlines()[-1]


def test_console_commands_resolve():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        scripts = tomllib.load(f)["project"]["scripts"]
    assert set(scripts) >= {"neuron-train-gpt", "neuron-embed"}
    for target in scripts.values():
        module, func = target.split(":")
        assert callable(getattr(__import__(module, fromlist=[func]), func))


def test_importing_torch_neuronx_before_torch():
    # Console commands and `python -m torch_neuronx` import the package before torch.
    out = run_py("""
        import torch_neuronx
        import torch
        print(torch.ones(1, device="neuron").device)
    """).stdout.split()
    assert out == ["neuron:0"]
