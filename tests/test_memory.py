"""The caching allocator through the public API: exact stats, reuse, empty_cache, OOM."""
import pytest
import torch

from conftest import run_py

MiB = 1 << 20


def stats():
    torch.neuron.synchronize()
    return torch.neuron.memory_stats()


def test_stats_are_exact_and_consistent(neuron):
    torch.neuron.empty_cache()
    base = stats()
    x = torch.empty(1000, dtype=torch.float32, device=neuron)  # 4000 B -> 4096 B size class
    s = stats()
    assert s["allocated_bytes.all.current"] - base["allocated_bytes.all.current"] == 4096
    assert s["requested_bytes.all.current"] - base["requested_bytes.all.current"] == 4000
    assert s["allocation.all.current"] - base["allocation.all.current"] == 1
    for pool in ("all", "small_pool", "large_pool"):
        assert s[f"allocated_bytes.{pool}.current"] <= s[f"reserved_bytes.{pool}.current"]
        assert s[f"allocated_bytes.{pool}.current"] <= s[f"allocated_bytes.{pool}.peak"]
    y = torch.empty(3 * MiB, dtype=torch.uint8, device=neuron)
    s2 = stats()
    assert s2["allocated_bytes.large_pool.current"] - s["allocated_bytes.large_pool.current"] == 3 * MiB
    assert torch.neuron.memory_allocated() == s2["allocated_bytes.all.current"]
    assert torch.neuron.memory_reserved() == s2["reserved_bytes.all.current"]
    del x, y
    s3 = stats()
    assert s3["allocated_bytes.all.current"] == base["allocated_bytes.all.current"]
    assert s3["reserved_bytes.all.current"] >= s2["reserved_bytes.all.current"]  # cached


def test_blocks_are_reused(neuron):
    x = torch.empty(256, device=neuron)
    ptr = x.data_ptr()
    del x
    y = torch.empty(250, device=neuron)  # same size class
    assert y.data_ptr() == ptr


def test_alignment(neuron):
    for n in (1, 3, 17, 1000, 300000):
        assert torch.empty(n, dtype=torch.uint8, device=neuron).data_ptr() % 64 == 0


def test_empty_cache_keeps_live_tensors(neuron):
    live = torch.full((2 * MiB,), 7, dtype=torch.uint8, device=neuron)
    dead = torch.empty(5 * MiB, dtype=torch.uint8, device=neuron)
    del dead
    torch.neuron.empty_cache()
    s = stats()
    assert s["reserved_bytes.all.current"] == s["allocated_bytes.all.current"]
    assert int(live.sum().item()) == 7 * 2 * MiB


def test_peak_reset(neuron):
    x = torch.empty(4 * MiB, dtype=torch.uint8, device=neuron)
    del x
    assert torch.neuron.max_memory_allocated() >= 4 * MiB
    torch.neuron.reset_peak_memory_stats()
    assert torch.neuron.max_memory_allocated() == torch.neuron.memory_allocated()
    torch.accelerator.reset_peak_memory_stats()
    torch.neuron.reset_accumulated_memory_stats()
    assert stats()["allocated_bytes.all.freed"] == 0


def test_out_of_memory_is_clean_and_recoverable():
    out = run_py("""
        import torch
        keep = torch.empty(48 << 20, dtype=torch.uint8, device="neuron")
        try:
            torch.empty(32 << 20, dtype=torch.uint8, device="neuron")
        except torch.OutOfMemoryError as e:
            print("OOM:", e)
        del keep
        x = torch.ones(32 << 20, dtype=torch.uint8, device="neuron")
        print("after:", int(x.sum().item()), torch.neuron.memory_stats()["num_ooms"])
    """, env={"TORCH_NEURONX_CORE_MEMORY": "64M"}).stdout
    assert "OOM: neuron out of memory. Tried to allocate 32.00 MiB" in out
    assert "capacity of 64.00 MiB" in out and "48.00 MiB is allocated" in out
    assert f"after: {32 << 20} 1" in out


def test_mem_get_info_and_summary(neuron):
    free, total = torch.neuron.mem_get_info()
    assert total == torch.neuron.get_device_properties(0).total_memory
    assert 0 <= free <= total
    text = torch.neuron.memory_summary()
    assert "Allocated memory" in text and "neuron:0" in text


def test_devices_have_separate_allocators():
    a = torch.empty(2 * MiB, dtype=torch.uint8, device="neuron:1")
    assert torch.neuron.memory_stats(1)["allocated_bytes.all.current"] >= 2 * MiB
    assert a.device == torch.device("neuron:1")


def test_storage_resize(neuron):
    x = torch.arange(10, dtype=torch.float32, device=neuron)
    st = x.untyped_storage()
    st.resize_(80)
    assert st.nbytes() == 80
    assert torch.equal(torch.tensor([], dtype=torch.float32).set_(st.cpu()).reshape(-1)[:10],
                       torch.arange(10, dtype=torch.float32))
    st.resize_(0)
    assert st.nbytes() == 0
    st.resize_(16)
    assert st.nbytes() == 16


def test_tensor_resize(neuron):
    x = torch.arange(4, dtype=torch.int64, device=neuron)
    x.resize_(2, 3)
    assert x.shape == (2, 3) and x.is_contiguous()
    assert x.reshape(-1)[:4].cpu().tolist() == [0, 1, 2, 3]
    x.resize_(0)
    assert x.numel() == 0
    with pytest.raises(RuntimeError, match="negative dimension"):
        x.resize_(-1)


def test_host_allocator_calls(neuron):
    """torch.accelerator's host-memory calls reach the neuron host allocator (pinned memory; it
    caches nothing): empty_host_cache after device use and with live pinned tensors (was a
    segfault: no host allocator registered), pinned tensors still valid and copyable after."""
    proc = run_py("""
        import torch, torch_neuronx
        x = torch.ones(3, device="neuron")
        p = torch.arange(1000.0).pin_memory()
        assert p.is_pinned()
        torch.accelerator.empty_host_cache()
        y = p.to("neuron", non_blocking=True)
        torch.neuron.synchronize()
        assert torch.equal(y.cpu(), torch.arange(1000.0)) and torch.equal(x.cpu(), torch.ones(3))
        del p
        torch.accelerator.empty_host_cache()
        print("ok")
    """)
    assert proc.stdout.strip().endswith("ok"), proc.stdout + proc.stderr


def test_profiler_records_device_memory():
    """torch.profiler with profile_memory=True sees the caching allocator's allocations and
    frees (as CUDA's allocator reports them): the matmul's 256x256 float32 output."""
    from torch.profiler import ProfilerActivity, profile
    x = torch.randn(256, 256).to("neuron")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1], profile_memory=True) as prof:
        y = x @ x
        torch.neuron.synchronize()
    mm = [e for e in prof.key_averages() if e.key == "aten::mm"]
    assert mm and mm[0].device_memory_usage == 256 * 256 * 4, [(e.key, e.device_memory_usage) for e in mm]
    del y


def test_legacy_profiler_with_use_device_times_device_work():
    """torch.autograd.profiler.profile(use_device="neuron") (the legacy path, which needs the
    device's profiler hooks): finite CPU and device times, no internal-assert warnings."""
    import warnings
    x = torch.randn(64, 64).to("neuron")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.autograd.profiler.profile(use_device="neuron") as prof:
            (x @ x).sum().item()
    events = {e.key: e for e in prof.key_averages()}
    assert "aten::mm" in events
    assert 0 <= events["aten::mm"].cpu_time_total < 60e6 and events["aten::mm"].device_time_total >= 0
    assert not [w for w in caught if "INTERNAL ASSERT" in str(w.message) or "not enabled" in str(w.message)]
