"""Hugging Face models built from tiny configs (no download) run on neuron with no CPU
fallback and match CPU PyTorch: GPT-2 and Llama generate() greedy (the same tokens as CPU)
and with sampling (top-k/top-p, temperature, repetition penalty), and a BERT training step
(loss and every gradient against CPU)."""
import warnings

import pytest
import torch

import torch_neuronx

transformers = pytest.importorskip("transformers")   # pinned in requirements-dev.txt


@pytest.fixture(autouse=True)
def _quiet():
    transformers.logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def _gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=120, n_positions=64,
                                  bos_token_id=0, eos_token_id=1, pad_token_id=1)
    return transformers.GPT2LMHeadModel(cfg)


def _llama():
    cfg = transformers.LlamaConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                   num_key_value_heads=2, vocab_size=120, max_position_embeddings=64,
                                   bos_token_id=0, eos_token_id=1, pad_token_id=1)
    return transformers.LlamaForCausalLM(cfg)


def _prompt():
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(2, 120, (2, 6), generator=g)
    mask = torch.ones_like(ids)
    mask[1, :2] = 0   # left padding in the second row
    return ids, mask


@pytest.mark.parametrize("build", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_generate_greedy_matches_cpu_without_fallback(build):
    torch.manual_seed(0)
    model = build().eval()
    ids, mask = _prompt()
    with torch.no_grad():
        expected = model.generate(ids, attention_mask=mask, max_new_tokens=12, do_sample=False)
        model.to("neuron")
        torch_neuronx.clear_op_tracking()
        actual = model.generate(ids.to("neuron"), attention_mask=mask.to("neuron"), max_new_tokens=12, do_sample=False)
        torch.neuron.synchronize()
    assert torch_neuronx.get_fallback_ops() == []
    assert "aten::isin" in torch_neuronx.get_executed_ops()   # generate()'s stopping criteria
    assert torch.equal(actual.cpu(), expected)


@pytest.mark.parametrize("build", [_gpt2, _llama], ids=["gpt2", "llama"])
def test_generate_sampling_without_fallback(build):
    torch.manual_seed(0)
    model = build().eval().to("neuron")
    ids, mask = _prompt()
    torch_neuronx.clear_op_tracking()
    with torch.no_grad():
        out = model.generate(ids.to("neuron"), attention_mask=mask.to("neuron"), max_new_tokens=10, do_sample=True,
                             top_k=20, top_p=0.9, temperature=0.8, repetition_penalty=1.2)
        torch.neuron.synchronize()
    assert torch_neuronx.get_fallback_ops() == []
    assert out.shape[0] == 2 and 6 < out.shape[1] <= 16
    assert torch.equal(out[:, :6].cpu(), ids) and int(out.min()) >= 0 and int(out.max()) < 120
    assert "aten::multinomial" in torch_neuronx.get_executed_ops()


def test_bert_training_step_matches_cpu_without_fallback():
    torch.manual_seed(0)
    cfg = transformers.BertConfig(num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                                  vocab_size=120, max_position_embeddings=64, num_labels=3,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    cpu = transformers.BertForSequenceClassification(cfg)
    dev = transformers.BertForSequenceClassification(cfg)
    dev.load_state_dict(cpu.state_dict())
    dev.to("neuron")
    ids, mask = _prompt()
    labels = torch.tensor([0, 2])
    torch_neuronx.clear_op_tracking()
    losses = []
    for model, d in ((cpu, "cpu"), (dev, "neuron")):
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        out = model(input_ids=ids.to(d), attention_mask=mask.to(d), labels=labels.to(d))
        out.loss.backward()
        grads = {n: p.grad.detach().cpu().clone() for n, p in model.named_parameters() if p.grad is not None}
        opt.step()
        losses.append((out.loss.item(), grads))
    torch.neuron.synchronize()
    assert torch_neuronx.get_fallback_ops() == []
    (lc, gc), (ld, gd) = losses
    assert abs(lc - ld) <= 1e-5 * max(1.0, abs(lc))
    assert gc.keys() == gd.keys()
    for name in gc:
        torch.testing.assert_close(gd[name], gc[name], rtol=1e-3, atol=1e-5, msg=lambda m: f"{name}: {m}")
    for p, q in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), rtol=1e-4, atol=1e-5)
