"""Copies CPU->neuron, neuron->CPU and neuron->neuron for every dtype pair and every layout
kind (contiguous, transposed, sliced with step, expanded, storage offset, 0-dim, zero-size),
compared bitwise with CPU PyTorch's own conversion."""
import warnings

import pytest
import torch

from conftest import assert_bitwise_equal

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.float32, torch.float64, torch.complex64, torch.complex128, torch.bool,
          torch.bfloat16]
FLOATING = {torch.float16, torch.float32, torch.float64, torch.bfloat16}
COMPLEX = {torch.complex64, torch.complex128}

# Finite values inside every integer range (casts out of range are undefined in C++ too).
SAFE = [-100.0, -3.0, -1.0, -0.0, 0.0, 0.5, 1.0, 1.7, 2.0, 7.25, 99.9, 100.0, -2.5, 42.0]
SPECIAL = [float("inf"), float("-inf"), float("nan"), 65520.0, 1e-8, 3.0e38, -1e-45]

# Each layout: (shape of the base tensor, function making the view under test).
LAYOUTS = {
    "contiguous": ((3, 4, 5), lambda t: t),
    "transposed": ((5, 4, 3), lambda t: t.permute(2, 1, 0)),
    "sliced_step": ((6, 8, 10), lambda t: t[::2, 1::2, ::2]),
    "expanded": ((1, 4, 1), lambda t: t.expand(3, 4, 5)),
    "offset": ((70,), lambda t: t[10:70].view(3, 4, 5)),
    "zero_dim": ((7,), lambda t: t[3]),
    "zero_size": ((4, 0, 5), lambda t: t),
}


def source(dtype, shape, special=False):
    n = 1
    for s in shape:
        n *= s
    vals = SAFE + SPECIAL if special else SAFE
    flat = torch.tensor([vals[i % len(vals)] for i in range(n)], dtype=torch.float64)
    if dtype in COMPLEX:
        flat = torch.complex(flat, flat.flip(0) * 0.5)
    if dtype == torch.uint8:
        flat = flat.abs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return flat.reshape(shape).to(dtype)


def cast(t, dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # complex -> real discards the imaginary part
        return t.to(dtype)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("src_dtype", DTYPES, ids=str)
def test_copy_matrix(layout, src_dtype, neuron):
    shape, view = LAYOUTS[layout]
    base_cpu = source(src_dtype, shape)
    src_cpu = view(base_cpu)
    src_dev = view(base_cpu.to(neuron))  # same strides and offset on the device
    assert src_dev.stride() == src_cpu.stride()
    assert_bitwise_equal(src_dev.cpu(), src_cpu)  # neuron -> CPU, strided source
    for dst_dtype in DTYPES:
        expected = cast(src_cpu, dst_dtype)
        assert_bitwise_equal(cast(src_dev, dst_dtype), expected)  # on-device cast, strided
        if layout in ("expanded",):
            continue  # an expanded destination overlaps itself: not writable
        dst_dev = view(torch.empty(shape, dtype=dst_dtype, device=neuron))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dst_dev.copy_(src_cpu)  # CPU -> neuron into a strided destination, with a cast
        assert_bitwise_equal(dst_dev, expected)


@pytest.mark.parametrize("src_dtype", sorted(FLOATING | COMPLEX, key=str), ids=str)
def test_special_values(src_dtype, neuron):
    src_cpu = source(src_dtype, (len(SAFE) + len(SPECIAL),), special=True)
    src_dev = src_cpu.to(neuron)
    for dst_dtype in sorted(FLOATING | COMPLEX, key=str) + [torch.bool]:
        assert_bitwise_equal(cast(src_dev, dst_dtype), cast(src_cpu, dst_dtype))


def test_negative_float_to_uint8_matches_cpu(neuron):
    x = torch.tensor([-1.0, -2.5, -100.0, 3.5], dtype=torch.float32)
    assert_bitwise_equal(x.to(neuron).to(torch.uint8), x.to(torch.uint8))


def test_broadcasting_copy(neuron):
    dst = torch.zeros(3, 4, device=neuron)
    dst.copy_(torch.arange(4.0))
    assert torch.equal(dst.cpu(), torch.arange(4.0).expand(3, 4))
    dst.copy_(torch.tensor([[1.0], [2.0], [3.0]], device=neuron))
    assert torch.equal(dst.cpu(), torch.tensor([[1.0], [2.0], [3.0]]).expand(3, 4))
    with pytest.raises(RuntimeError, match="cannot be broadcast"):
        dst.copy_(torch.ones(5, device=neuron))


def test_cross_core_copy():
    a = torch.arange(12, dtype=torch.int32, device="neuron:0").reshape(3, 4)
    b = a.t().to("neuron:1", torch.float64)
    assert b.device == torch.device("neuron:1")
    assert_bitwise_equal(b, torch.arange(12, dtype=torch.int32).reshape(3, 4).t().double())
    c = torch.empty(4, 3, device="neuron:1")
    c.copy_(a.t())
    assert_bitwise_equal(c, a.t().float().cpu())


def test_clone_contiguous_and_tensor_factory(neuron):
    t = torch.tensor([[1, 2, 3], [4, 5, 6]], device=neuron)
    assert t.device == neuron and t.dtype == torch.int64
    tt = t.t()
    assert not tt.is_contiguous()
    c = tt.contiguous()
    assert c.is_contiguous() and torch.equal(c.cpu(), torch.tensor([[1, 4], [2, 5], [3, 6]]))
    cl = tt.clone()
    assert cl.stride() == tt.stride() and torch.equal(cl.cpu(), tt.cpu())


def test_pinned_memory_and_non_blocking(neuron):
    host = torch.arange(1 << 20, dtype=torch.float32).pin_memory()
    assert host.is_pinned() and host[5:].is_pinned()
    assert not torch.arange(3).is_pinned()
    dev = host.to(neuron, non_blocking=True)
    back = torch.empty_like(host).pin_memory()
    back.copy_(dev, non_blocking=True)
    torch.neuron.synchronize()
    assert torch.equal(back, host)
    # A pinned source released right after a non_blocking copy stays alive until it ran.
    for _ in range(10):
        src = torch.full((1 << 18,), 3.0).pin_memory()
        dst = src.to(neuron, non_blocking=True)
        del src
    assert dst.sum().item() == 3.0 * (1 << 18)


def test_dataloader_pin_memory(neuron):
    ds = torch.utils.data.TensorDataset(torch.arange(32.0).reshape(16, 2), torch.arange(16))
    loader = torch.utils.data.DataLoader(ds, batch_size=4, pin_memory=True)
    total = 0.0
    for x, y in loader:
        assert x.is_pinned()
        total += x.to(neuron, non_blocking=True).sum().item()
    assert total == float(sum(range(32)))


def test_item_and_scalar_reads(neuron):
    assert torch.tensor(3.5, device=neuron).item() == 3.5
    assert torch.tensor([7], dtype=torch.int64, device=neuron).item() == 7
    assert torch.tensor(True, device=neuron).item() is True
    assert torch.tensor([[2 ** 40 + 1]], device=neuron).item() == 2 ** 40 + 1
    with pytest.raises(RuntimeError, match="cannot be converted to Scalar"):
        torch.ones(2, device=neuron).item()


def test_fill_and_zero(neuron):
    for dtype in DTYPES:
        if dtype == torch.float64:
            continue
        x = torch.empty(5, 3, dtype=dtype, device=neuron).t()[1:]
        x.fill_(2)
        assert_bitwise_equal(x, torch.full((2, 5), 2, dtype=dtype))
        x.zero_()
        assert_bitwise_equal(x, torch.zeros((2, 5), dtype=dtype))
    y = torch.empty(4, dtype=torch.int8, device=neuron)
    with pytest.raises(RuntimeError, match="overflow"):
        y.fill_(300)
    # overlapping elements all take the value, as on CPU (expanded dims, overlapping views)
    for make in (lambda d: torch.zeros(1, device=d).expand(4), lambda d: torch.zeros(2, 1, device=d).expand(2, 3),
                 lambda d: torch.zeros(3, device=d).as_strided((2, 2), (1, 1))):
        assert_bitwise_equal(make(neuron).fill_(1.5), make("cpu").fill_(1.5))


def test_views_share_storage(neuron):
    x = torch.zeros(4, 6, device=neuron)
    v = x.view(2, 12)
    u = x.unfold(1, 2, 2)
    s = x[1:, ::2]
    s.fill_(1.0)
    assert v.data_ptr() == x.data_ptr() and u.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert x.sum().item() == 9.0
    c = torch.zeros(3, 2, device=neuron)
    r = torch.view_as_complex(c)
    assert torch.view_as_real(r).data_ptr() == c.data_ptr()
    assert x.reshape(24).data_ptr() == x.data_ptr()
    assert x.as_strided((2, 2), (1, 6), 1).data_ptr() == x.data_ptr() + 4


# ---------------------------------------------------------------- stored-only dtypes
# Dtypes the device stores but does not compute with: uint16-64, the float8 formats, float4
# pairs and the bits types. Same-dtype copies (CPU<->neuron, neuron->neuron) and fills are
# native byte moves; conversions from or to them are the visible CPU fallback of
# aten::_copy_from (CPU's values and CPU's errors).
STORED_ONLY = [torch.uint16, torch.uint32, torch.uint64, torch.float8_e4m3fn, torch.float8_e5m2,
               torch.float8_e4m3fnuz, torch.float8_e5m2fnuz, torch.float8_e8m0fnu, torch.float4_e2m1fn_x2,
               torch.bits8, torch.bits16, torch.bits1x8, torch.bits2x4, torch.bits4x2]
RAW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
CONVERTIBLE = [d for d in STORED_ONLY if not str(d).startswith(("torch.bits", "torch.float4"))]


def _random_bits(dtype, shape, seed=0):
    raw = torch.randint(-128, 128, shape + (dtype.itemsize,), dtype=torch.int8,
                        generator=torch.Generator().manual_seed(seed))
    return raw.view(torch.uint8).view(dtype).reshape(shape)


def _raw(t):
    return t.cpu().contiguous().view(RAW[t.dtype.itemsize])


@pytest.mark.parametrize("dtype", STORED_ONLY, ids=str)
def test_stored_only_dtypes_copy_bytes_natively(dtype, native):
    host = _random_bits(dtype, (6, 8))
    dev = host.to("neuron")
    assert dev.dtype == dtype and torch.equal(_raw(dev), _raw(host))
    for view in (lambda t: t.t(), lambda t: t[1::2, ::3], lambda t: t[2]):
        assert torch.equal(_raw(view(dev)), _raw(view(host)))        # neuron -> CPU of a strided view
        assert torch.equal(_raw(view(dev).clone()), _raw(view(host)))  # neuron -> neuron
        assert torch.equal(_raw(view(host).to("neuron")), _raw(view(host)))
    out = torch.empty(6, 8, dtype=dtype, device="neuron")
    out.t().copy_(dev.t())
    assert torch.equal(_raw(out), _raw(host))
    assert torch.equal(_raw(torch.zeros(5, dtype=dtype, device="neuron")), _raw(torch.zeros(5, dtype=dtype)))


@pytest.mark.parametrize("dtype", STORED_ONLY, ids=str)
def test_stored_only_dtypes_save_and_load(dtype, native, tmp_path):
    host = _random_bits(dtype, (3, 5), seed=1)
    torch.save({"t": host.to("neuron")}, tmp_path / "t.pt")
    back = torch.load(tmp_path / "t.pt")["t"]
    assert back.device.type == "neuron" and back.dtype == dtype
    assert torch.equal(_raw(back), _raw(host))
    on_cpu = torch.load(tmp_path / "t.pt", map_location="cpu")["t"]
    assert on_cpu.is_cpu and torch.equal(_raw(on_cpu), _raw(host))


@pytest.mark.parametrize("dtype", CONVERTIBLE, ids=str)
def test_stored_only_dtypes_fill_like_cpu(dtype, native):
    for value in (0, 1, 3, 0.5, -2.25, 448, float("nan")):
        try:
            want = torch.empty(4, dtype=dtype).fill_(value)
        except Exception as e:   # CPU refuses (value out of the dtype's range): the same error
            with pytest.raises(type(e), match=str(e)[:40]):
                torch.empty(4, dtype=dtype, device="neuron").fill_(value)
            continue
        got = torch.empty(4, dtype=dtype, device="neuron").fill_(value)
        assert torch.equal(_raw(got), _raw(want)), (value, _raw(got), _raw(want))
    assert torch.equal(_raw(torch.ones(3, dtype=dtype, device="neuron")), _raw(torch.ones(3, dtype=dtype)))


def test_bits_dtypes_zero_and_fill_as_cpu(native):
    z = torch.zeros(4, dtype=torch.bits8, device="neuron")
    assert torch.equal(_raw(z), torch.zeros(4, dtype=torch.uint8))
    with pytest.raises(NotImplementedError, match="\"fill_\" not implemented for 'Bits8'"):
        z.fill_(1)


@pytest.mark.parametrize("dtype", CONVERTIBLE, ids=str)
def test_stored_only_dtype_conversions_are_the_visible_cpu_fallback(dtype, neuron):
    import torch_neuronx
    src = torch.tensor([[0.0, -1.5, 2.0, 0.3], [448.0, 1e-3, float("nan"), -0.0]])
    if dtype in (torch.uint16, torch.uint32, torch.uint64, torch.float8_e8m0fnu):
        src = src.abs().nan_to_num(5.0)
    want = src.to(dtype)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        for got in (src.to("neuron").to(dtype),              # neuron -> neuron
                    src.to(dtype=dtype, device="neuron"),    # CPU -> neuron
                    src.to("neuron").t().to(dtype).t()):     # strided
            assert got.device.type == "neuron" and got.dtype == dtype
            assert torch.equal(_raw(got), _raw(want))
        dev = want.to("neuron")
        for target in (torch.float32, torch.float16, torch.int64, torch.bfloat16):
            assert_bitwise_equal(dev.to(target), want.to(target))                       # neuron -> neuron
            assert_bitwise_equal(dev.to("cpu", target), want.to(target))               # neuron -> CPU
            assert_bitwise_equal(torch.empty(2, 4, dtype=target).copy_(dev), want.to(target))
    assert set(torch_neuronx.get_fallback_ops()) == {"aten::_copy_from"}


def test_stored_only_conversion_refused_as_on_cpu(neuron):
    src = torch.zeros(3, dtype=torch.bits8)
    with pytest.raises(NotImplementedError, match="not implemented for 'Bits8'"):
        src.float()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(NotImplementedError, match="not implemented for 'Bits8'"):
            src.to("neuron").float()
    x = torch.ones(3, device="neuron")
    x.add_(1)   # the process stays usable
    assert x.cpu().tolist() == [2.0, 2.0, 2.0]


def test_stored_only_conversion_in_strict_mode_names_op_and_dtypes(neuron):
    import torch_neuronx
    prev = torch_neuronx.set_strict_fallback(True)
    try:
        with pytest.raises(NotImplementedError, match="aten::_copy_from.*from Float to Float8_e4m3fn.*STRICT"):
            torch.zeros(3, device="neuron").to(torch.float8_e4m3fn)
    finally:
        torch_neuronx.set_strict_fallback(prev)


def test_float16_conversions_match_cpu_bit_for_bit():
    """Dense float16 <-> float32 copies (the tier's vector conversions): every float16 value
    widens to CPU's bits; narrowing rounds as CPU (subnormals, overflow to inf, ties, signed
    zeros, infinities), NaN stays NaN; also inside a strided (non-dense) copy."""
    every = torch.arange(65536, dtype=torch.int32).to(torch.int16).view(torch.float16)
    wide = every.to("neuron").float().cpu()
    nan = every.isnan()
    assert torch.equal(wide.isnan(), nan)
    assert torch.equal(wide[~nan].view(torch.int32), every[~nan].float().view(torch.int32))
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(4099, generator=g) * s for s in (1e-8, 6e-5, 1.0, 6.5e4, 1e5)])
    x[::101] = float("nan")
    x[::97] = float("inf")
    x[::89] = -0.0
    x[5] = 2049.0  # a tie: rounds to even
    for src in (x, x[::3]):
        got, want = src.to("neuron").half().cpu(), src.half()
        assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(got[~want.isnan()].view(torch.int16), want[~want.isnan()].view(torch.int16))


TRANSPOSE_CASES = [  # (base shape, permutation): the source dense along another dim than the result
    ((37, 29), (1, 0)), ((8, 8), (1, 0)), ((64, 130), (1, 0)), ((3, 17, 40), (0, 2, 1)),
    ((2, 9, 11, 24), (0, 2, 3, 1)), ((2, 24, 9, 11), (0, 3, 1, 2)), ((5, 16, 3, 12), (0, 2, 1, 3)),
]


@pytest.mark.parametrize("dtype", [torch.bool, torch.uint8, torch.int16, torch.bfloat16, torch.float32,
                                   torch.int64, torch.float64, torch.complex64, torch.complex128], ids=str)
@pytest.mark.parametrize("case", range(len(TRANSPOSE_CASES)))
def test_transposed_copies_are_exact(native, dtype, case):
    """contiguous() of permuted tensors (8 x 8 register tiles and their edges, every element
    width), also from a flipped or offset source: CPU's bytes."""
    shape, perm = TRANSPOSE_CASES[case]
    x = torch.randn(shape) * 50
    x = x.to(dtype) if dtype != torch.complex128 else torch.complex(x, -x).to(dtype)
    for view in (lambda t: t.permute(perm), lambda t: t.flip(-1).permute(perm), lambda t: t[1:].permute(perm)):
        want = view(x).contiguous()
        got = view(x.to(native)).contiguous()
        assert got.is_contiguous()
        assert_bitwise_equal(got.cpu(), want)
