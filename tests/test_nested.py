"""nn.TransformerEncoder's nested-tensor fast path on neuron (eval mode, src_key_padding_mask,
the default enable_nested_tensor=True): _nested_tensor_from_mask(_left_aligned),
_transformer_encoder_layer_fwd on a nested input and to_padded_tensor run natively and the
result equals CPU's everywhere, padded positions included (zeros on both).
"""
import pytest
import torch

import torch_neuronx

TOL = dict(rtol=1e-4, atol=1e-5)
NESTED_OPS = {"aten::_nested_tensor_from_mask", "aten::_transformer_encoder_layer_fwd", "aten::to_padded_tensor"}


def _encoder(d_model=16, nhead=4, layers=2, **kw):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model, nhead, 2 * d_model, batch_first=True, dropout=0.0, **kw)
    return torch.nn.TransformerEncoder(layer, layers).eval()


def _padding_mask(lengths, L):
    return torch.arange(L).unsqueeze(0) >= torch.tensor(lengths).unsqueeze(1)   # True = padding


def _compare(enc, x, kpm, **kw):
    with torch.no_grad():
        expected = enc(x, src_key_padding_mask=kpm, **kw)
        dev = enc.to("neuron")
        actual = dev(x.to("neuron"), src_key_padding_mask=kpm.to("neuron"), **kw)
        enc.cpu()
    assert actual.device.type == "neuron" and actual.shape == expected.shape
    torch.testing.assert_close(actual.cpu(), expected, **TOL)
    return expected, actual.cpu()


@pytest.mark.parametrize("kw", [dict(), dict(activation="gelu"), dict(layer_norm_eps=1e-3)], ids=["relu", "gelu", "eps"])
def test_encoder_nested_fast_path_matches_cpu(native, kw):
    enc = _encoder(**kw)
    x = torch.randn(4, 9, 16, generator=torch.Generator().manual_seed(1))
    kpm = _padding_mask([9, 5, 1, 7], 9)
    expected, actual = _compare(enc, x, kpm)
    assert torch.equal(actual[kpm], torch.zeros_like(actual[kpm]))   # padding: zeros, as CPU writes
    assert NESTED_OPS <= set(torch_neuronx.get_executed_ops())


def test_encoder_with_final_norm_and_full_and_empty_sequences(native):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(32, 8, 64, batch_first=True, dropout=0.0)
    enc = torch.nn.TransformerEncoder(layer, 3, norm=torch.nn.LayerNorm(32)).eval()
    x = torch.randn(3, 6, 32, generator=torch.Generator().manual_seed(2))
    _compare(enc, x, _padding_mask([6, 6, 6], 6))    # no padding at all
    _compare(enc, x, _padding_mask([6, 0, 2], 6))    # an empty sequence
    assert NESTED_OPS <= set(torch_neuronx.get_executed_ops())


def test_not_left_aligned_mask_takes_the_dense_path_like_cpu(native):
    enc = _encoder()
    x = torch.randn(2, 5, 16, generator=torch.Generator().manual_seed(3))
    kpm = torch.tensor([[True, False, False, False, False], [False, False, True, True, True]])
    _compare(enc, x, kpm)
    assert "aten::_nested_tensor_from_mask_left_aligned" in torch_neuronx.get_executed_ops()
    assert "aten::_nested_tensor_from_mask" not in torch_neuronx.get_executed_ops()


def test_entry_ops_directly(native):
    x = torch.randn(3, 4, 5, generator=torch.Generator().manual_seed(4))
    mask = torch.tensor([[True, True, False, False], [True, True, True, True], [True, False, False, False]])
    assert torch._nested_tensor_from_mask_left_aligned(x.to("neuron"), mask.to("neuron"))
    assert not torch._nested_tensor_from_mask_left_aligned(x.to("neuron"), mask.flip(1).to("neuron"))
    nt_c = torch._nested_tensor_from_mask(x, mask)
    nt_d = torch._nested_tensor_from_mask(x.to("neuron"), mask.to("neuron"))
    assert nt_d.is_nested and nt_d.device.type == "neuron"
    for kw in (dict(padding=0.0), dict(padding=-1.5), dict(padding=2.0, output_size=(3, 6, 7))):
        torch.testing.assert_close(nt_d.to_padded_tensor(**kw).cpu(), nt_c.to_padded_tensor(**kw), rtol=0, atol=0)
    with pytest.raises(RuntimeError, match="Mask must be left-aligned without gaps"):
        torch._nested_tensor_from_mask(x.to("neuron"), mask.flip(1).to("neuron"), mask_check=True)
    with pytest.raises(RuntimeError, match="Truncation is not supported"):
        nt_d.to_padded_tensor(0.0, (3, 1, 5))


def test_other_nested_sparse_and_quantized_tensors_are_refused_with_a_remedy():
    nt = torch._nested_tensor_from_mask(torch.ones(2, 3, 4, device="neuron"),
                                        torch.ones(2, 3, dtype=torch.bool, device="neuron"))
    with pytest.raises(NotImplementedError, match="aten::add.Tensor: not supported on nested tensors on neuron.*nt.cpu()"):
        nt + 1
    emb = torch.nn.Embedding(10, 4, sparse=True).to("neuron")
    with pytest.raises(NotImplementedError, match="nn.Embedding and nn.EmbeddingBag need sparse=False"):
        emb(torch.tensor([1, 1, 3], device="neuron")).sum().backward()
    bag = torch.nn.EmbeddingBag(10, 4, sparse=True).to("neuron")
    with pytest.raises(NotImplementedError, match="sparse=False"):
        bag(torch.tensor([[1, 2]], device="neuron")).sum().backward()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch's "sparse CSR is in beta"
        csr = torch.eye(3).to_sparse_csr().to("neuron")  # ATen builds the shell from dense parts
    with pytest.raises(NotImplementedError, match="aten::_to_dense: sparse tensors are not supported on neuron"):
        csr.to_dense()
    # quantized tensors: the same kind of error with the remedy; fake quantization works
    q = torch.quantize_per_tensor(torch.randn(4), 0.1, 0, torch.qint8)
    with pytest.raises(NotImplementedError, match="quantized tensors .* are not supported on neuron.*dequantize"):
        q.to("neuron")
    with pytest.raises(NotImplementedError, match="quantized tensors"):
        torch.quantize_per_tensor(torch.randn(4, device="neuron"), 0.1, 0, torch.qint8)
    x = torch.randn(4, 4)
    torch.testing.assert_close(torch.fake_quantize_per_tensor_affine(x.to("neuron"), 0.1, 0, -128, 127).cpu(),
                               torch.fake_quantize_per_tensor_affine(x, 0.1, 0, -128, 127))
    assert torch.ones(2, device="neuron").sum().item() == 2  # the process stays usable


# ---------------------------------------------------------------- strided and jagged nested tensors
# A strided nested tensor made on neuron keeps its data reachable: ATen's device-generic nested
# kernels (nested.cpp) move, copy, unbind, print and view it, and compute linear, matmul and
# softmax on it, as on CPU.

def _parts(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, 4, generator=g), torch.randn(3, 4, generator=g)]


def _assert_nested_equal(actual, expected, **tol):
    assert actual.is_nested and expected.is_nested
    a, e = actual.unbind(), expected.unbind()
    assert len(a) == len(e)
    for x, y in zip(a, e):
        assert x.device.type == actual.device.type
        torch.testing.assert_close(x.cpu(), y, **(tol or dict(rtol=0, atol=0)))


def test_strided_nested_tensor_moves_copies_and_prints_natively(native):
    nc = torch.nested.nested_tensor(_parts())
    nd = torch.nested.nested_tensor(_parts(), device="neuron")
    assert nd.is_nested and nd.device.type == "neuron"
    for back in (nd.cpu(), nd.to("cpu"), nd.to("cpu", torch.float64)):
        assert back.is_nested and back.is_cpu
        _assert_nested_equal(back, nc.to(back.dtype))
    _assert_nested_equal(nc.to("neuron"), nc)
    _assert_nested_equal(nd.clone(), nc)
    _assert_nested_equal(nd.to(torch.float16), nc.to(torch.float16))
    for x, y in zip(nd.unbind(), nc.unbind()):
        assert x.device.type == "neuron" and torch.equal(x.cpu(), y)
    text = str(nd)
    assert text.startswith("nested_tensor([") and "device='neuron:0'" in text
    assert text.replace(", device='neuron:0'", "") == str(nc)
    z = nd.clone().zero_()
    _assert_nested_equal(z, torch.nested.nested_tensor([torch.zeros(2, 4), torch.zeros(3, 4)]))
    dst = torch.nested.nested_tensor([torch.zeros(2, 4), torch.zeros(3, 4)], device="neuron")
    dst.copy_(nd)
    _assert_nested_equal(dst, nc)


def test_strided_nested_views_and_math_match_cpu(native):
    nc = torch.nested.nested_tensor(_parts())
    nd = torch.nested.nested_tensor(_parts(), device="neuron")
    w, b = _parts(1)[1].t().contiguous(), torch.randn(3, generator=torch.Generator().manual_seed(2))
    tol = dict(rtol=1e-5, atol=1e-6)
    for f in (lambda n: n.transpose(1, 2).contiguous(),
              lambda n: n.transpose(1, 2),
              lambda n: n.unsqueeze(1).squeeze(1),
              lambda n: n.narrow(0, 1, 1),
              lambda n: torch.ops.aten.mul.Scalar(n, 0.5),
              lambda n: torch.nn.functional.linear(n, w.t().to(n.device), b.to(n.device)),
              lambda n: torch.softmax(n, -1)):
        _assert_nested_equal(f(nd), f(nc), **tol)
    assert torch.equal(nd._nested_tensor_size(), nc._nested_tensor_size())
    with pytest.raises(RuntimeError, match="Expected both to be nested") as on_cpu:   # CPU refuses it too
        torch.matmul(nc, w)
    with pytest.raises(RuntimeError, match=on_cpu.value.args[0][:50]):
        torch.matmul(nd, w.to("neuron"))


def test_jagged_sdpa_math_path_matches_cpu(neuron):
    g = torch.Generator().manual_seed(3)
    qs = [torch.randn(n, 2, 4, generator=g) for n in (3, 5, 2)]

    def run(device):
        q = torch.nested.nested_tensor([t.to(device) for t in qs], layout=torch.jagged).transpose(1, 2)
        return torch.nn.functional.scaled_dot_product_attention(q, q, q).transpose(1, 2)
    expected, actual = run("cpu"), run("neuron")
    assert actual.is_nested and actual.device.type == "neuron"
    for x, y in zip(actual.unbind(), expected.unbind()):
        torch.testing.assert_close(x.cpu(), y, rtol=1e-5, atol=1e-6)
