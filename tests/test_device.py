"""Registration, autoload, the torch.neuron device module and torch.accelerator."""
import pytest
import torch

import torch_neuronx
from conftest import run_py


def test_autoload_with_plain_import_torch():
    out = run_py("""
        import torch
        x = torch.ones(2, device="neuron")
        print(torch.device("neuron"), torch.accelerator.current_accelerator(), x.device)
    """).stdout.split()
    assert out == ["neuron", "neuron", "neuron:0"]


def test_autoload_disabled_then_explicit_import():
    out = run_py("""
        import torch
        print(hasattr(torch, "neuron"))
        import torch_neuronx
        print(hasattr(torch, "neuron"), torch.zeros(1, device="neuron").device)
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}).stdout.split()
    assert out == ["False", "True", "neuron:0"]


def test_import_and_device_count_do_not_initialise():
    out = run_py("""
        import torch
        print(torch.neuron.device_count(), torch.neuron.is_available(), torch.neuron.is_initialized())
        torch.manual_seed(0)
        print(torch.neuron.is_initialized())
        torch.ones(1, device="neuron")
        print(torch.neuron.is_initialized())
    """).stdout.split()
    assert out == ["2", "True", "False", "False", "True"]


@pytest.mark.parametrize("env,count", [({"NEURON_RT_VISIBLE_CORES": "0-3"}, 4),
                                       ({"NEURON_RT_VISIBLE_CORES": "1,3"}, 2),
                                       ({"NEURON_RT_NUM_CORES": "3"}, 3), ({}, 2)])
def test_device_count_from_env(env, count):
    base = {"NEURON_RT_VISIBLE_CORES": "", "NEURON_RT_NUM_CORES": ""}
    base.update(env)
    out = run_py("import torch; print(torch.neuron.device_count(), torch.accelerator.device_count())",
                 env=base).stdout.split()
    assert out == [str(count), str(count)]


def test_visible_cores_map_to_physical_ids():
    out = run_py("import torch; print(torch.neuron.get_device_properties(1).physical_core)",
                 env={"NEURON_RT_VISIBLE_CORES": "1,3"}).stdout.strip()
    assert out == "3"


def test_capacity_env_var():
    out = run_py("import torch; print(torch.neuron.get_device_properties(0).total_memory)",
                 env={"TORCH_NEURONX_CORE_MEMORY": "512M"}).stdout.strip()
    assert int(out) == 512 << 20


@pytest.mark.parametrize("env,msg", [({"TORCH_NEURONX_CORE_MEMORY": "abc"}, "TORCH_NEURONX_CORE_MEMORY='abc' is not a size"),
                                     ({"TORCH_NEURONX_CORE_MEMORY": "0"}, "TORCH_NEURONX_CORE_MEMORY='0' is not a size"),
                                     ({"TORCH_NEURONX_NUM_THREADS": "two"}, "TORCH_NEURONX_NUM_THREADS='two' must be an integer"),
                                     ({"TORCH_NEURONX_PLAN_CACHE_SIZE": "-3"}, "TORCH_NEURONX_PLAN_CACHE_SIZE='-3' must be"),
                                     ({"NEURON_RT_VISIBLE_CORES": "1,1"}, "distinct cores"),
                                     ({"TORCH_NEURONX_BLAS": "atlas"}, "TORCH_NEURONX_BLAS='atlas' is not one of mkl, openblas"),
                                     ({"TORCH_NEURONX_BLAS": "MKL"}, "TORCH_NEURONX_BLAS='MKL' is not one of mkl, openblas"),
                                     ({"TORCH_NEURONX_STRICT": "yes"}, "TORCH_NEURONX_STRICT='yes' must be an integer from 0 to 1"),
                                     ({"NEURON_LAUNCH_BLOCKING": "maybe"}, "NEURON_LAUNCH_BLOCKING='maybe' must be"),
                                     ({"TORCH_NEURONX_FALLBACK_LIST_CAP": "-5"}, "TORCH_NEURONX_FALLBACK_LIST_CAP='-5' must be")])
def test_malformed_settings_raise_naming_them(env, msg):
    """A malformed setting is not ignored: using the device raises, naming it; `import torch`
    (which loads the backend) and CPU work still run."""
    out = run_py("""
        import torch
        print(torch.neuron.device_count())
        try:
            torch.ones(1, device="neuron")
        except RuntimeError as e:
            print("error:", e)
        print(torch.ones(2).sum().item())
    """, env=env).stdout
    assert out.splitlines()[0] == "0" and msg in out and out.splitlines()[-1] == "2.0"


def test_default_capacity_is_bounded_by_host_memory():
    import os
    host = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    total = torch.neuron.get_device_properties(0).total_memory
    assert total == min(24 << 30, host // 2 // torch.neuron.device_count())


def test_device_module_basics():
    assert torch.neuron.is_available()
    assert torch.neuron.get_device_name(1) == "neuron:1"
    assert torch.neuron.get_device_properties("neuron:0").name == "neuron:0"
    assert torch.neuron.get_amp_supported_dtype() == [torch.float32, torch.float16, torch.bfloat16]
    assert torch.neuron.is_bf16_supported()
    assert torch.neuron._is_in_bad_fork() is False
    for name in ["is_available", "device_count", "current_device", "synchronize", "memory_stats",
                 "get_fallback_ops", "get_executed_ops", "clear_op_tracking"]:
        assert callable(getattr(torch_neuronx, name))


def test_set_device_and_context():
    assert torch.neuron.current_device() == 0
    with torch.neuron.device(1):
        assert torch.neuron.current_device() == 1
        assert torch.empty(1, device="neuron").device == torch.device("neuron:1")
    assert torch.neuron.current_device() == 0
    torch.neuron.set_device("neuron:1")
    try:
        assert torch.accelerator.current_device_index() == 1
    finally:
        torch.neuron.set_device(0)


def test_invalid_device_index_names_the_range():
    with pytest.raises(RuntimeError, match="valid range is 0 to 1"):
        torch.neuron.set_device(7)
    with pytest.raises(RuntimeError, match="valid range is 0 to 1"):
        torch.empty(3, device="neuron:5")
    with pytest.raises(RuntimeError, match="valid range is 0 to 1"):
        torch.neuron.get_device_properties(2)
    for fn in (torch.neuron.get_device_properties, torch.neuron.get_device_name):
        with pytest.raises(RuntimeError, match="valid range is 0 to 1"):
            fn(-3)  # -1 is the current device, as on CUDA; other negatives are refused
    assert torch.neuron.get_device_name(-1) == f"neuron:{torch.neuron.current_device()}"
    assert torch.ones(2, device="neuron").sum().item() == 2  # still usable


def test_stream_and_strict_mode_arguments_are_checked():
    with pytest.raises(TypeError, match="torch.neuron.stream: expected a torch.Stream, got int"):
        with torch.neuron.stream(5):
            pass
    with pytest.raises(ValueError, match="torch.neuron.set_stream: expected a neuron stream, got a stream of device cpu"):
        torch.neuron.set_stream(torch.Stream("cpu"))
    with pytest.raises(TypeError, match="set_strict_fallback: enabled must be a bool, got str"):
        torch_neuronx.set_strict_fallback("no")
    s = torch.neuron.Stream()
    with torch.neuron.stream(s):
        assert torch.neuron.current_stream() == s


def test_tensor_and_module_methods():
    t = torch.arange(3).neuron()
    assert t.is_neuron and t.device.type == "neuron"
    assert not torch.ones(1).is_neuron
    m = torch.nn.Linear(3, 2).neuron()
    assert m.weight.device.type == "neuron"
    assert t.untyped_storage().device.type == "neuron"
    assert torch.ones(2).untyped_storage().neuron().device.type == "neuron"


def test_accelerator_api():
    assert torch.accelerator.is_available()
    assert torch.accelerator.current_accelerator() == torch.device("neuron")
    assert torch.accelerator.device_count() == torch.neuron.device_count()
    x = torch.ones(1024, device="neuron")
    torch.accelerator.synchronize()
    stats = torch.accelerator.memory_stats()
    assert stats["allocated_bytes.all.current"] >= 4096
    assert torch.accelerator.memory_allocated() == torch.neuron.memory_allocated()
    assert torch.accelerator.max_memory_allocated() == torch.neuron.max_memory_allocated()
    del x


def test_printing_is_a_host_read_without_fallbacks():
    torch_neuronx.clear_op_tracking()
    x = torch.randn(4, 5, device="neuron")
    torch_neuronx.clear_op_tracking()
    text = repr(x) + str(x.to(torch.bfloat16)) + str(x[0, 0]) + repr(x.double())
    assert "device='neuron:0'" in text
    assert torch_neuronx.get_fallback_ops() == []


def test_other_backend_in_the_slot_is_reported():
    proc = run_py("""
        import torch
        torch.utils.rename_privateuse1_backend("otherdev")
        import torch_neuronx
    """, env={"TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}, check=False)
    assert proc.returncode != 0
    assert "already claimed by 'otherdev'" in proc.stderr


def test_fork_child_must_use_spawn():
    out = run_py("""
        import multiprocessing as mp, torch
        torch.ones(1, device="neuron")                      # initialise in the parent
        def child(q):
            try:
                torch.manual_seed(1)                        # silent no-op, as PyTorch expects
                q.put(("bad_fork", torch.neuron._is_in_bad_fork()))
                torch.ones(1, device="neuron")
                q.put(("alloc", "no error"))
            except RuntimeError as e:
                q.put(("alloc", str(e)))
        q = mp.get_context("fork").Queue()
        p = mp.get_context("fork").Process(target=child, args=(q,))
        p.start(); p.join(60)
        print(q.get()); print(q.get())
        print(torch.ones(2, device="neuron").sum().item())   # parent unaffected
    """).stdout.splitlines()
    assert out[0] == "('bad_fork', True)"
    assert "spawn" in out[1] and "forked subprocess" in out[1]
    assert out[2] == "2.0"


def test_spawn_child_works():
    out = run_py("""
        import multiprocessing as mp, torch
        def child(q):
            import torch
            q.put(torch.full((3,), 2.0, device="neuron").sum().item())
        if __name__ == "__main__":
            torch.ones(1, device="neuron")
            ctx = mp.get_context("spawn")
            q = ctx.Queue(); p = ctx.Process(target=child, args=(q,)); p.start()
            print(q.get(timeout=120)); p.join(60)
    """).stdout.strip()
    assert out == "6.0"


def test_accelerator_device_capability_lists_convertible_dtypes():
    """torch.accelerator.get_device_capability: every dtype listed can be allocated on neuron
    and converted to and from float32 (values as CPU); quantized types are not listed."""
    caps = torch.accelerator.get_device_capability("neuron:0")["supported_dtypes"]
    assert {torch.float32, torch.float64, torch.bfloat16, torch.int64, torch.bool, torch.float8_e4m3fn} <= caps
    assert torch.qint8 not in caps
    for dt in caps:
        x = torch.arange(3).to(dt)
        back = x.to("neuron").to(torch.float32).to(dt).cpu()
        assert back.dtype == dt and torch.equal(back.to(torch.float32), x.to(torch.float32)), dt
    with pytest.raises(RuntimeError, match="invalid neuron device index"):
        torch.accelerator.get_device_capability(torch.neuron.device_count())


def test_sending_a_neuron_tensor_to_another_process_raises_naming_the_remedy():
    """torch.multiprocessing pickling of a neuron tensor (spawn arguments, queues) raises a
    RuntimeError saying to send .cpu(); CPU tensors still go through PyTorch's shared memory."""
    out = run_py("""
        import torch, torch.multiprocessing as mp
        q = mp.get_context("spawn").SimpleQueue()
        try:
            q.put(torch.ones(2, device="neuron"))
        except RuntimeError as e:
            print("refused:", e)
        q.put(torch.ones(2))
        print(q.get().tolist())
    """).stdout
    assert "refused: a neuron tensor cannot be sent to another process" in out and "tensor.cpu()" in out
    assert out.splitlines()[-1] == "[1.0, 1.0]"
