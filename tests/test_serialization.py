"""torch.save / torch.load of neuron tensors, storages and state dicts."""
import io

import torch

from conftest import assert_bitwise_equal


def roundtrip(obj, map_location=None):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, map_location=map_location, weights_only=True)


def test_location_tag(neuron):
    x = torch.ones(2, device="neuron:1")
    assert torch.serialization.location_tag(x.untyped_storage()) == "neuron:1"
    assert torch.serialization.location_tag(torch.ones(2, device=neuron).untyped_storage()) == "neuron:0"


def test_tensors_round_trip_exactly(neuron):
    values = {
        "f32": torch.randn(5, 3),
        "f64": torch.tensor([0.1, 1e-300, 2.0 ** 0.5], dtype=torch.float64),
        "bf16": torch.randn(4).bfloat16(),
        "i64": torch.tensor([2 ** 62, -1]),
        "bool": torch.tensor([True, False]),
        "c64": torch.complex(torch.randn(3), torch.randn(3)),
    }
    dev = {k: v.to(neuron) for k, v in values.items()}
    dev["view"] = dev["f32"].t()[1:]
    for loc, expect_device in [(None, "neuron:0"), ("cpu", "cpu"), ("neuron", "neuron:0"),
                               ("neuron:1", "neuron:1")]:
        loaded = roundtrip(dev, loc)
        for k, v in values.items():
            assert str(loaded[k].device) == expect_device
            assert_bitwise_equal(loaded[k], v)
        assert_bitwise_equal(loaded["view"], values["f32"].t()[1:])


def test_state_dict_round_trip(neuron):
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8)).to(neuron)
    sd = roundtrip(model.state_dict(), "cpu")
    fresh = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8))
    fresh.load_state_dict(sd)
    for (k, a), (_, b) in zip(model.state_dict().items(), fresh.state_dict().items()):
        assert_bitwise_equal(a, b)
    back = roundtrip(fresh.state_dict(), "neuron")
    assert all(v.device.type == "neuron" for v in back.values())


def test_storage_round_trip(neuron):
    st = torch.arange(8, dtype=torch.int32, device=neuron).untyped_storage()
    loaded = roundtrip(st, "neuron")
    assert loaded.device.type == "neuron"
    assert list(loaded.cpu()) == list(torch.arange(8, dtype=torch.int32).untyped_storage())
