"""Streams, events, asynchrony and sticky errors through the public API."""
import time

import pytest
import torch

import torch_neuronx
from conftest import run_py


def test_host_runs_ahead_and_reads_wait(neuron):
    x = torch.empty(32 << 20, dtype=torch.float32, device=neuron)  # 128 MiB
    torch.neuron.synchronize()
    t0 = time.perf_counter()
    for i in range(8):
        x.fill_(float(i))
    enqueue = time.perf_counter() - t0
    stream = torch.neuron.current_stream()
    busy = not stream.query()
    t1 = time.perf_counter()
    value = x[-1].item()  # a host read waits for all eight fills
    wait = time.perf_counter() - t1
    assert value == 7.0
    assert busy and enqueue < wait, (enqueue, wait)
    assert stream.query()


def test_streams_and_events_order_work(neuron):
    s1 = torch.neuron.Stream()
    s2 = torch.neuron.Stream()
    assert isinstance(s1, torch.neuron.Stream) and isinstance(s2, torch.neuron.Stream)
    assert s1 != s2 and s1.stream_id != s2.stream_id  # two streams of the pool, not one twice
    x = torch.empty(16 << 20, device=neuron)
    ev = torch.neuron.Event()
    with torch.neuron.stream(s1):
        x.fill_(3.0)
        ev.record()
    s2.wait_event(ev)
    with torch.neuron.stream(s2):
        y = x.to(torch.int32)  # runs on s2 after s1's fill
    s2.synchronize()
    assert ev.query()
    assert torch.equal(y.cpu(), torch.full((16 << 20,), 3, dtype=torch.int32))  # every element after the fill


def test_wait_stream_and_default_stream(neuron):
    s = torch.neuron.Stream()
    x = torch.zeros(1 << 20, device=neuron)
    s.wait_stream(torch.neuron.current_stream())
    with torch.neuron.stream(s):
        x.fill_(2.0)
    torch.neuron.current_stream().wait_stream(s)
    assert x.sum().item() == 2.0 * (1 << 20)
    assert torch.neuron.default_stream().stream_id == 0
    assert torch.neuron.current_stream().stream_id == 0


def test_event_timing(neuron):
    start = torch.neuron.Event(enable_timing=True)
    end = torch.neuron.Event(enable_timing=True)
    x = torch.empty(8 << 20, device=neuron)
    start.record()
    for _ in range(4):
        x.fill_(1.0)
    end.record()
    end.synchronize()
    ms = start.elapsed_time(end)
    assert 0.0 < ms < 10000.0
    untimed = torch.neuron.Event()
    untimed.record()
    untimed.synchronize()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing"):
        start.elapsed_time(untimed)


def test_sticky_error_reported_once_naming_the_op(neuron):
    x = torch.zeros(4, device=neuron)
    torch_neuronx._C._debug_enqueue_failure(0, "aten::gather", "index 9 is out of bounds for dimension 0 with size 4")
    x.fill_(5.0)  # queued behind the failure: dropped
    with pytest.raises(RuntimeError, match=r"aten::gather: index 9 is out of bounds"):
        torch.neuron.synchronize()
    torch.neuron.synchronize()  # cleared: no second report
    assert x.sum().item() == 0.0  # the dropped fill never ran
    x.fill_(1.0)
    assert x.sum().item() == 4.0  # the process stays usable


def test_sticky_error_surfaces_at_host_read(neuron):
    x = torch.ones(3, device=neuron)
    torch_neuronx._C._debug_enqueue_failure(0, "aten::index_select", "index 5 out of range")
    with pytest.raises(RuntimeError, match="aten::index_select"):
        x.cpu()
    assert x.cpu().tolist() == [1.0, 1.0, 1.0]


def test_launch_blocking_raises_at_the_call():
    out = run_py("""
        import torch, torch_neuronx
        try:
            torch_neuronx._C._debug_enqueue_failure(0, "aten::embedding", "index 11 out of range")
            print("no error at the call")
        except RuntimeError as e:
            print("raised:", e)
        torch.neuron.synchronize()
        print("sync ok")
    """, env={"NEURON_LAUNCH_BLOCKING": "1"}).stdout
    assert "raised: aten::embedding: index 11 out of range" in out
    assert "sync ok" in out


def test_accelerator_stream_api(neuron):
    s = torch.Stream(device="neuron")
    with s:
        assert torch.accelerator.current_stream().stream_id == s.stream_id
    assert torch.accelerator.current_stream().stream_id == 0
    e = torch.Event(device="neuron", enable_timing=True)
    e.record()
    e.synchronize()
    assert e.query()


def test_stream_and_device_contexts_restore_the_device(neuron):
    """torch.neuron.stream(s) on another device's stream restores the current device after the
    block, as CUDA's StreamContext; torch.neuron.device(-1) is a no-op, as torch.cuda.device(-1)."""
    start = torch.neuron.current_device()
    other = (start + 1) % torch.neuron.device_count()
    with torch.neuron.stream(torch.neuron.Stream(other)):
        assert torch.neuron.current_device() == other
        assert torch.ones(1, device="neuron").device.index == other
    assert torch.neuron.current_device() == start
    assert torch.ones(1, device="neuron").device.index == start
    with torch.neuron.device(-1):
        assert torch.neuron.current_device() == start
    assert torch.neuron.current_device() == start


def test_event_recorded_on_two_devices_names_both():
    proc = run_py("""
        import torch, torch_neuronx
        e = torch.Event("neuron")
        e.record(torch.Stream("neuron:0"))
        try:
            e.record(torch.Stream("neuron:1"))
        except RuntimeError as err:
            print("raised:", str(err).splitlines()[0])
    """, env={"NEURON_RT_NUM_CORES": "2"})
    assert "raised: event device 0 does not match the recording stream's device 1" in proc.stdout, proc.stdout


def test_record_stream_keeps_the_block_from_reuse_until_the_stream_ran(native):
    neuron = native
    side = torch.neuron.Stream()
    x = torch.full((1 << 18,), 3.0, device=neuron)  # 1 MiB, allocated on the default stream
    ptr = x.data_ptr()
    busy = torch.empty(32 << 20, device=neuron)
    side.wait_stream(torch.neuron.current_stream())
    with torch.neuron.stream(side):
        for i in range(6):
            busy.fill_(float(i))  # keeps the side stream busy for a while
        y = x * 2  # reads x on the side stream, after the fills
        x.record_stream(side)
    pending = not side.query()
    del x
    z = torch.full((1 << 18,), -1.0, device=neuron)  # the default stream may not take x's block yet
    assert pending and not side.query(), "the side stream finished too early for the check"
    assert z.data_ptr() != ptr
    side.synchronize()
    assert torch.equal(y.cpu(), torch.full((1 << 18,), 6.0))
    with pytest.raises(RuntimeError, match="record_stream: expected a neuron stream"):
        z.record_stream(torch.Stream("cpu"))
