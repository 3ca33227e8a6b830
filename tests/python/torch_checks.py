"""PyTorch (the stock CUDA wheel from pip) on gpupool slices. torch ships its kernels as SASS only, so on the emulated
device everything short of a kernel is checked; a kernel launch must fail with an error, never hang or crash.
Run under gp-run; each mode prints "torch_checks MODE: PASSED" at its end.

  torch_checks.py basics     device queries show the slice; caching allocator; torch.zeros; copies both ways
                             (pageable, pinned, non_blocking); streams, events and elapsed_time; mem_get_info = the
                             slice; set_per_process_memory_fraction; OutOfMemoryError beyond the slice (and work
                             goes on after it). Also with PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True.
  torch_checks.py two        two slices (-n 2): both visible, a copy between them
  torch_checks.py loader     a DataLoader with two worker processes (fork after CUDA initialisation)
  torch_checks.py kernel     a kernel launch: must raise (no PTX for the emulated device), not crash
  torch_checks.py nvml       pynvml sees the slices through gpupool's libnvidia-ml.so.1
  torch_checks.py spawn      torch.multiprocessing ('spawn') children attach to the lease's slice and share its
                             memory with the parent: what the parent holds is not theirs to take, and comes back
"""
import os
import sys

import torch

GIB = 1 << 30


def slice_bytes():
    return torch.cuda.get_device_properties(0).total_memory


def basics():
    assert torch.cuda.is_available(), "CUDA available"
    props = torch.cuda.get_device_properties(0)
    free, total = torch.cuda.mem_get_info()
    print(f"device: {props.name}, {total >> 20} MiB, {free >> 20} MiB free, cc {props.major}.{props.minor}")
    assert total == props.total_memory, "mem_get_info's total is the slice"
    assert free <= total

    # The caching allocator: allocations of several sizes, freed and reused.
    tensors = [torch.empty(n, device="cuda") for n in (1, 1000, 1 << 20, 3 << 20)]
    assert torch.cuda.memory_allocated() >= (4 << 20) * 4
    del tensors[2]
    again = torch.empty(1 << 20, device="cuda")
    assert again.is_cuda

    z = torch.zeros(1 << 16, device="cuda")
    assert torch.equal(z.cpu(), torch.zeros(1 << 16)), "torch.zeros"

    host = torch.arange(1 << 20, dtype=torch.float32)
    dev = host.to("cuda")
    assert torch.equal(dev.cpu(), host), "pageable copies"
    pinned = host.pin_memory()
    assert pinned.is_pinned()
    dev2 = pinned.to("cuda", non_blocking=True)
    out = torch.empty_like(host).pin_memory()
    out.copy_(dev2, non_blocking=True)
    torch.cuda.synchronize()
    assert torch.equal(out, host), "pinned, non_blocking copies"
    d2d = torch.empty_like(dev)
    d2d.copy_(dev)
    assert torch.equal(d2d.cpu(), host), "device-to-device copy"

    stream = torch.cuda.Stream()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    with torch.cuda.stream(stream):
        start.record()
        on_stream = torch.empty(1 << 20, device="cuda")
        on_stream.copy_(host, non_blocking=False)
        on_stream.zero_()
        end.record()
    end.synchronize()
    assert end.query()
    elapsed = start.elapsed_time(end)
    assert elapsed >= 0.0, "elapsed_time"
    torch.cuda.current_stream().wait_stream(stream)
    assert torch.equal(on_stream.cpu(), torch.zeros(1 << 20)), "work on a side stream"

    # Beyond the slice: PyTorch's own error, and the process goes on.
    try:
        torch.empty(slice_bytes() + GIB, dtype=torch.uint8, device="cuda")
        raise AssertionError("an allocation beyond the slice succeeded")
    except torch.cuda.OutOfMemoryError as e:
        print("beyond the slice:", str(e).splitlines()[0][:120])
    after = torch.empty(1 << 20, device="cuda")
    after.copy_(host)
    assert torch.equal(after.cpu(), host), "work after an out-of-memory error"

    # A per-process fraction below the slice: allocations over it fail even though the slice has room.
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(0.25)
    try:
        torch.empty(slice_bytes() // 2, dtype=torch.uint8, device="cuda")
        raise AssertionError("an allocation over the memory fraction succeeded")
    except torch.cuda.OutOfMemoryError:
        pass
    torch.cuda.set_per_process_memory_fraction(1.0)
    big = torch.empty(slice_bytes() // 2, dtype=torch.uint8, device="cuda")
    del big
    print("allocator:", os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "default"),
          "reserved", torch.cuda.memory_reserved() >> 20, "MiB")


def two():
    assert torch.cuda.device_count() == 2, f"two devices, not {torch.cuda.device_count()}"
    host = torch.arange(100_000, dtype=torch.float32)
    a = host.to("cuda:0")
    b = a.to("cuda:1")
    assert b.device.index == 1
    assert torch.equal(b.cpu(), host), "a copy from slice 0 to slice 1"
    c = torch.empty_like(a)
    c.copy_(b)
    assert torch.equal(c.cpu(), host), "and back"
    for i in range(2):
        free, total = torch.cuda.mem_get_info(i)
        assert total == torch.cuda.get_device_properties(i).total_memory


def loader():
    x = torch.empty(10, device="cuda")  # CUDA is initialised before the workers fork.
    data = torch.utils.data.TensorDataset(torch.arange(64, dtype=torch.float32))
    batches = torch.utils.data.DataLoader(data, batch_size=8, num_workers=2)
    total = 0.0
    for (batch,) in batches:
        total += batch.to("cuda").cpu().sum().item()
    assert total == sum(range(64)), f"sum over the loader's batches: {total}"
    x.copy_(torch.ones(10))
    assert x.cpu().sum().item() == 10.0, "the parent keeps working after its workers ended"


def kernel():
    try:
        x = torch.ones(10, device="cuda")
        y = x + 1
        torch.cuda.synchronize()
        print("kernel ran:", y.cpu().tolist())
    except (RuntimeError, torch.AcceleratorError) as e:
        print("kernel refused:", str(e).splitlines()[0])
        raise SystemExit(3)


def nvml():
    import pynvml
    pynvml.nvmlInit()
    count = pynvml.nvmlDeviceGetCount()
    assert count == torch.cuda.device_count(), f"NVML sees {count} device(s)"
    for i in range(count):
        handle = pynvml.nvmlDeviceGetHandleByIndex(i)
        name = pynvml.nvmlDeviceGetName(handle)
        uuid = pynvml.nvmlDeviceGetUUID(handle)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        props = torch.cuda.get_device_properties(i)
        assert name == props.name, (name, props.name)
        assert uuid == "GPU-" + str(props.uuid), (uuid, props.uuid)
        assert memory.total == props.total_memory, "NVML's total is the slice"
        x = torch.empty(8 << 20, dtype=torch.uint8, device=f"cuda:{i}")
        used = pynvml.nvmlDeviceGetMemoryInfo(handle).used
        assert used >= 8 << 20, f"NVML's used memory follows the session ({used})"
        procs = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        assert [p.pid for p in procs] == [os.getpid()], procs
        print(f"nvml {i}: {name} {uuid} total {memory.total >> 20} MiB used {used >> 20} MiB")
        del x
    # The emulated slice measures its own utilisation (copies only here: PyTorch's kernels cannot run on it).
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceGetUtilizationRates(handle)  # Starts the window.
    x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda:0")
    for _ in range(8):
        x.copy_(torch.ones(64 << 20, dtype=torch.uint8))
    rates = pynvml.nvmlDeviceGetUtilizationRates(handle)
    print(f"nvml: utilisation gpu {rates.gpu}% memory {rates.memory}%")
    assert rates.gpu == 0 and 0 < rates.memory <= 100, "copies, no kernel"
    # What monitoring tools ask and the client cannot know: NOT_SUPPORTED (their "N/A"), not a missing function
    # (pynvml's FunctionNotFound) and never a made-up figure.
    unknown = {
        "temperature": lambda: pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
        "power": lambda: pynvml.nvmlDeviceGetPowerUsage(handle),
        "sm clock": lambda: pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
        "max memory clock": lambda: pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_MEM),
        "fan": lambda: pynvml.nvmlDeviceGetFanSpeed(handle),
        "power limit": lambda: pynvml.nvmlDeviceGetEnforcedPowerLimit(handle),
        "performance state": lambda: pynvml.nvmlDeviceGetPerformanceState(handle),
        "pcie width": lambda: pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle),
        "encoder": lambda: pynvml.nvmlDeviceGetEncoderUtilization(handle),
        "persistence": lambda: pynvml.nvmlDeviceGetPersistenceMode(handle),
    }
    for what, call in unknown.items():
        try:
            value = call()
            raise AssertionError(f"{what}: {value}, a figure the client cannot know")
        except pynvml.NVMLError_NotSupported:
            pass
    assert pynvml.nvmlDeviceGetComputeMode(handle) == pynvml.NVML_COMPUTEMODE_DEFAULT
    assert pynvml.nvmlDeviceGetGraphicsRunningProcesses(handle) == []
    pynvml.nvmlShutdown()


def graph():
    """torch.cuda.CUDAGraph end to end with copies only (its kernels cannot run on the emulated device): capture on
    PyTorch's side stream in its private memory pool, replay with new input, a graph-pool allocation inside."""
    src = torch.arange(1 << 20, dtype=torch.int32).cuda()
    dst = torch.zeros_like(src)
    host = torch.zeros(1 << 20, dtype=torch.int32).pin_memory()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tmp = torch.empty_like(src)  # From the graph's private pool.
        tmp.copy_(src)
        dst.copy_(tmp)
        host.copy_(dst, non_blocking=True)
    assert not torch.cuda.is_current_stream_capturing()
    for round in range(3):
        src.copy_(torch.full((1 << 20,), round * 7, dtype=torch.int32))
        g.replay()
        torch.cuda.synchronize()
        assert int(dst[12345]) == round * 7, int(dst[12345])
        assert int(host[999]) == round * 7, int(host[999])
    g.reset()
    print("graph: captured copies replayed 3 times")


def _spawned_child(rank, held, queue):
    """In a fresh process of the lease: the parent's `held` bytes are taken; the rest of the slice is not."""
    free, total = torch.cuda.mem_get_info()
    try:
        torch.empty(total - held + (64 << 20), dtype=torch.uint8, device="cuda")
        queue.put((rank, "allocated past what the lease has left"))
        return
    except torch.cuda.OutOfMemoryError:
        pass
    x = torch.empty((total - held) // 4, dtype=torch.uint8, device="cuda")
    back = torch.zeros(16, dtype=torch.uint8)
    back.copy_(x[:16])  # A copy, not a kernel: the emulated device cannot run PyTorch's (SASS-only) kernels.
    queue.put((rank, f"ok free {free} total {total}"))


def spawn():
    import torch.multiprocessing as mp
    total = slice_bytes()
    held = total // 2
    keep = torch.empty(held, dtype=torch.uint8, device="cuda")
    context = mp.get_context("spawn")
    queue = context.SimpleQueue()
    mp.spawn(_spawned_child, args=(held, queue), nprocs=2, join=True)
    answers = sorted(queue.get() for _ in range(2))
    for rank, answer in answers:
        print(f"spawn: child {rank}: {answer}")
        assert answer.startswith("ok"), answer
        free = int(answer.split()[2])
        assert free <= total - held, f"child {rank} saw the parent's memory as free ({free})"
    del keep
    torch.cuda.empty_cache()


if __name__ == "__main__":
    mode = sys.argv[1]
    {"basics": basics, "two": two, "loader": loader, "kernel": kernel, "nvml": nvml, "graph": graph,
     "spawn": spawn}[mode]()
    print(f"torch_checks {mode}: PASSED")
