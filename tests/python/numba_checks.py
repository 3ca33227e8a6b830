"""numba-cuda on a gpupool slice. numba compiles Python kernels with NVVM to PTX, then links them with cuda.core's
Linker, which uses nvJitLink (SASS out) whenever it can load it. On a GPU server that is fine. The emulated device
runs PTX, so there numba must link through the driver (cuLinkCreate/cuLinkAddData(PTX)/cuLinkComplete), which then
sees the PTX: see ptx_route() below.

  numba_checks.py kernels   the PTX route: saxpy, a shared-memory reduction with atomics, a 2-D kernel, device
                            functions and math, streams: each verified
  numba_checks.py stock     numba as installed (nvJitLink, LTO): the load fails and gpupool says what to do
  numba_checks.py attached  the kernels after gpupool.attach(), whose versioned shim takes the PTX route (no snippet)
  numba_checks.py managed   cuda.managed_array after gpupool.attach(): the host and kernels work on one array
"""
import math
import sys

import numpy as np


def ptx_route():
    """numba-cuda 0.30 has no public switch for this. Both choices follow from whether nvJitLink loads (a venv
    without the nvidia-nvjitlink wheel and no toolkit's libnvJitLink on the loader's path takes this route by
    itself); with nvJitLink installed, before the first kernel compiles:"""
    # cuda.core chooses its linker once per process: the driver's cuLink*, which then receives the PTX.
    import cuda.core._linker as linker
    from cuda.bindings import driver
    linker._driver = driver
    linker._use_nvjitlink_backend = False
    # numba: no LTO by default (NVVM then emits PTX, not LTO-IR). `@cuda.jit(lto=False)` alone is not enough in
    # 0.30.4: the decorator form without a signature drops the lto argument.
    import numba.cuda.decorators as decorators
    decorators._have_nvjitlink = lambda: False


def kernels(route=True):
    if route:
        ptx_route()
    from numba import cuda, float32, int32

    dev = cuda.get_current_device()
    print(f"numba: {dev.name.decode() if isinstance(dev.name, bytes) else dev.name}, cc {dev.compute_capability}")

    @cuda.jit("void(float32, float32[::1], float32[::1], float32[::1])")
    def saxpy(a, x, y, out):
        i = cuda.grid(1)
        if i < x.size:
            out[i] = a * x[i] + y[i]

    n = 20_000
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, 2.0, dtype=np.float32)
    d_out = cuda.device_array_like(x)
    saxpy[(n + 127) // 128, 128](float32(0.5), cuda.to_device(x), cuda.to_device(y), d_out)
    assert np.array_equal(d_out.copy_to_host(), np.float32(0.5) * x + y), "saxpy"

    @cuda.jit
    def block_sum(values, total):
        part = cuda.shared.array(128, int32)
        i = cuda.grid(1)
        t = cuda.threadIdx.x
        part[t] = values[i] if i < values.size else 0
        cuda.syncthreads()
        s = 64
        while s > 0:
            if t < s:
                part[t] += part[t + s]
            cuda.syncthreads()
            s //= 2
        if t == 0:
            cuda.atomic.add(total, 0, part[0])

    ints = np.arange(n, dtype=np.int32)
    total = cuda.to_device(np.zeros(1, dtype=np.int32))
    block_sum[(n + 127) // 128, 128](cuda.to_device(ints), total)
    assert int(total.copy_to_host()[0]) == int(ints.sum()), "shared-memory reduction with atomics"

    @cuda.jit(device=True)
    def hypot(a, b):
        return math.sqrt(a * a + b * b)

    @cuda.jit
    def grid2d(out):
        r, c = cuda.grid(2)
        if r < out.shape[0] and c < out.shape[1]:
            out[r, c] = hypot(float32(r), float32(c))

    out = cuda.device_array((37, 53), dtype=np.float32)
    grid2d[(3, 4), (16, 16)](out)
    rows, cols = np.indices((37, 53), dtype=np.float32)
    assert np.allclose(out.copy_to_host(), np.sqrt(rows * rows + cols * cols), rtol=1e-6), "2-D kernel"

    stream = cuda.stream()
    d_x = cuda.to_device(x, stream=stream)
    d_o = cuda.device_array_like(x, stream=stream)
    saxpy[(n + 127) // 128, 128, stream](float32(2.0), d_x, d_x, d_o)
    got = d_o.copy_to_host(stream=stream)
    stream.synchronize()
    assert np.array_equal(got, 3 * x), "a kernel on a stream"
    print("numba kernels: PASSED")


def stock():
    from numba import cuda

    @cuda.jit
    def add_one(v):
        i = cuda.grid(1)
        if i < v.size:
            v[i] += 1

    v = cuda.to_device(np.zeros(64, dtype=np.int32))
    try:
        add_one[1, 64](v)
        cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - whatever numba raises, the test checks gpupool's line on stderr.
        print(f"numba stock: {type(e).__name__}: {e}")
        sys.exit(1)
    print("numba stock: the kernel ran (nvJitLink was not used)")


def attached():
    """No snippet: gpupool.attach() gave this process emulated slices, and its shim takes the PTX route."""
    import gpupool
    gpupool.attach()
    kernels(route=False)


def managed():
    """numba's managed arrays (cuMemAllocManaged): NumPy on the host and kernels on the slice, one array, no copies."""
    import gpupool
    gpupool.attach()
    from numba import cuda

    @cuda.jit
    def triple_plus_one(a):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = a[i] * 3 + 1

    n = 300000
    a = cuda.managed_array(n, dtype=np.int64)
    a[:] = np.arange(n)  # NumPy on the host, in place.
    for _ in range(3):
        triple_plus_one[(n + 255) // 256, 256](a)
        cuda.synchronize()
        a[::5] += 1  # The host between kernels.
    expected = np.arange(n)
    for _ in range(3):
        expected = expected * 3 + 1
        expected[::5] += 1
    assert np.array_equal(np.asarray(a), expected), "managed array after three kernels and host updates"
    print("numba managed arrays: host and kernels on one array: PASSED")


if __name__ == "__main__":
    {"kernels": kernels, "stock": stock, "attached": attached, "managed": managed}[sys.argv[1]]()
