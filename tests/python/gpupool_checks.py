"""The gpupool Python package (python/gpupool), from inside Python, without gp-run.

  gpupool_checks.py private   no pool configured: attach(n=2, fraction=0.5) gives torch two emulated slices, which
                              pynvml sees too; a second attach with other arguments is refused
  gpupool_checks.py pool      GPUPOOL_SERVERS names an agent (run_remote.sh --pool-env): State(), lease() as a context
                              manager, errors as exceptions with gpupool's messages, then attach() with CuPy computing
                              on the slice while State() shows the lease
  gpupool_checks.py refused   a pool of two devices: attach(n=3) raises Unsatisfiable with gpupool's reason
  gpupool_checks.py late      a framework initialised CUDA first: attach() refuses, saying to call it before
"""
import os
import sys

import gpupool


def refusal(call, error, *says):
    """The exception `call` raises, which must be an `error` whose message holds each of `says`."""
    try:
        result = call()
    except error as e:
        for part in says:
            assert part in str(e), (part, str(e))
        return e
    raise AssertionError(f"no {error.__name__}: {result!r}")


def private():
    attached = gpupool.attach(n=2, fraction=0.5)
    assert attached.devices == 2, attached
    import torch
    assert torch.cuda.device_count() == 2, torch.cuda.device_count()
    for i in range(2):
        props = torch.cuda.get_device_properties(i)
        x = torch.empty(16 << 20, dtype=torch.uint8, device=f"cuda:{i}")
        x.copy_(torch.full((16 << 20,), 7, dtype=torch.uint8))
        assert int(x.cpu()[12345]) == 7, "a copy through the slice"
        print(f"private: cuda:{i} {props.name} {props.total_memory >> 20} MiB")
    import pynvml
    pynvml.nvmlInit()
    assert pynvml.nvmlDeviceGetCount() == 2, "NVML sees the slices"
    assert gpupool.attach(n=2, fraction=0.5) is attached, "the same attach twice is the first"
    refusal(lambda: gpupool.attach(n=1), gpupool.Error, "attached already")
    print("gpupool private: PASSED")


def pool():
    servers = gpupool.State()
    assert len(servers) == 1 and servers[0].up, servers
    devices = servers[0].devices
    assert len(devices) == 2 and all(d.emulated for d in devices), devices
    assert not servers[0].leases, "nothing held yet"
    with gpupool.lease(n=2, fraction=0.25) as held:
        assert len(held.slices) == 2 and all(abs(s["compute_share"] - 0.25) < 1e-9 for s in held.slices), held.slices
        assert held.token() and held.id
        [server] = gpupool.State()
        assert [l.id for l in server.leases] == [held.id], server.leases
    assert not gpupool.State()[0].leases, "released after the block"
    for kwargs, error, says in [
        (dict(n=3), gpupool.Unsatisfiable, "can never be granted"),
        (dict(fraction=0.01), gpupool.InvalidRequest, "0.05"),
        (dict(memory="12 bananas"), gpupool.Error, "12 bananas"),
    ]:
        refusal(lambda: gpupool.lease(**kwargs).__enter__(), error, says)
    with gpupool.lease(n=2):
        print("pool: busy says:", refusal(lambda: gpupool.lease(n=1).__enter__(), gpupool.Busy))
    os.environ.pop("CUPY_COMPILE_WITH_PTX", None)  # attach() sets it for emulated slices.
    attached = gpupool.attach(n=1, fraction=0.5)
    assert attached.devices == 1, attached
    assert os.environ.get("CUPY_COMPILE_WITH_PTX") == "1", "CuPy told to compile to PTX for an emulated slice"
    import cupy as cp
    a = cp.arange(1 << 20, dtype=cp.int64)
    assert int((a * 2).sum()) == (1 << 20) * ((1 << 20) - 1), "CuPy on the attached slice"
    [server] = gpupool.State()
    assert [l.pid for l in server.leases] == [os.getpid()], server.leases
    assert server.leases[0].sessions >= 1, "this process's session on it"
    lease_id = server.leases[0].id
    # A child forked now that exits normally (exit handlers, interpreter teardown) leaves the parent's lease alone.
    child = os.fork()
    if child == 0:
        sys.exit(0)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    [server] = gpupool.State()
    assert [l.id for l in server.leases] == [lease_id], f"the child released the lease: {server.leases}"
    assert int((a + 1).sum()) == (1 << 20) * ((1 << 20) + 1) // 2, "CuPy after the child's exit"
    print(f"gpupool pool: lease {lease_id} on {server.name}: PASSED")


def refused():
    """attach() that the pool can never grant raises gpupool's reason as its exception."""
    print("gpupool refused:",
          refusal(lambda: gpupool.attach(n=3), gpupool.Unsatisfiable, "can never be granted", "the pool has 2"))
    refusal(lambda: gpupool.attach(fraction=0.01), gpupool.InvalidRequest, "0.05")
    print("gpupool refused: PASSED")


def late():
    import ctypes
    # As a framework does: the system's CUDA driver (here the toolkit's stub, which has the same soname) loaded first.
    stub = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "lib64", "stubs", "libcuda.so")
    ctypes.CDLL(stub, mode=ctypes.RTLD_GLOBAL)
    print("gpupool late:", refusal(lambda: gpupool.attach(), gpupool.Error, "call gpupool.attach() before"))
    print("gpupool late: PASSED")


if __name__ == "__main__":
    {"private": private, "pool": pool, "refused": refused, "late": late}[sys.argv[1]]()
