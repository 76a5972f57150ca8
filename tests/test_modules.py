"""Module-level semantics on neuron: parameters keep their identity when moved (optimizers and
tied weights stay attached), activation checkpointing replays the device RNG, and the
recurrent layers (which use PyTorch's fused cell ops on non-CPU devices) match CPU."""
import pytest
import torch

import torch_neuronx


def test_module_to_keeps_parameter_objects_and_tied_weights():
    m = torch.nn.Linear(3, 2)
    weight = m.weight
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    m.to("neuron")
    assert m.weight is weight and weight.device.type == "neuron"
    before = weight.detach().cpu().clone()
    m(torch.ones(1, 3, device="neuron")).sum().backward()
    opt.step()   # the optimizer created before the move updates the moved weight
    assert not torch.equal(weight.detach().cpu(), before)

    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(5, 3)
            self.head = torch.nn.Linear(3, 5, bias=False)
            self.head.weight = self.emb.weight

    t = Tied().to("neuron")
    assert t.head.weight is t.emb.weight and len(list(t.parameters())) == 1
    t.cpu()
    assert t.head.weight is t.emb.weight and t.emb.weight.device.type == "cpu"


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpoint_replays_the_neuron_rng(reentrant):
    x = torch.ones(4, 8, device="neuron", requires_grad=True)
    out = torch.utils.checkpoint.checkpoint(lambda t: torch.nn.functional.dropout(t, 0.5, True) * 1.0, x,
                                            use_reentrant=reentrant)
    out.sum().backward()
    assert torch.equal((out != 0).cpu(), (x.grad != 0).cpu())   # the recomputed mask is the forward's


@pytest.mark.parametrize("cls,kwargs", [
    (torch.nn.LSTM, dict(num_layers=2, bidirectional=True)),
    (torch.nn.LSTM, dict(proj_size=3)),
    (torch.nn.GRU, dict(num_layers=2)),
    (torch.nn.GRU, dict(bias=False, batch_first=True)),
], ids=["lstm-bidirectional", "lstm-proj", "gru", "gru-nobias"])
def test_recurrent_layers_match_cpu(cls, kwargs):
    torch.manual_seed(0)
    cpu = cls(4, 8, **kwargs)
    dev = cls(4, 8, **kwargs)
    dev.load_state_dict(cpu.state_dict())
    dev.to("neuron")
    x = torch.randn(5, 2, 4)
    torch_neuronx.clear_op_tracking()
    expected, actual = cpu(x)[0], dev(x.to("neuron"))[0]
    (expected * expected).sum().backward()
    (actual * actual).sum().backward()
    torch.testing.assert_close(actual.cpu(), expected.detach(), rtol=1e-5, atol=1e-6)
    for p, q in zip(cpu.parameters(), dev.parameters()):
        torch.testing.assert_close(q.grad.cpu(), p.grad, rtol=1e-5, atol=1e-6)
    assert torch_neuronx.get_fallback_ops() == []


def test_equal_is_native():
    a = torch.arange(6.0, device="neuron")
    torch_neuronx.clear_op_tracking()
    assert torch.equal(a, a.clone()) and not torch.equal(a, a + 1) and not torch.equal(a, a[:3])
    assert not torch.equal(torch.tensor([float("nan")], device="neuron"), torch.tensor([float("nan")], device="neuron"))
    assert torch_neuronx.get_fallback_ops() == []
