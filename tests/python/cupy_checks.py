"""CuPy on a gpupool slice. Run under gp-run with CUPY_COMPILE_WITH_PTX=1, so that CuPy's NVRTC-compiled kernels
reach the device as PTX (the emulated device runs PTX; a GPU server runs either).

  cupy_checks.py kernels   elementwise, reductions (CuPy's own, CUPY_ACCELERATORS=''), RawKernel: each verified
  cupy_checks.py cub       a reduction through CUB, whose kernels CuPy ships precompiled (SASS only): prints what
                           came back; on an emulated device older than 12.0 gpupool names the missing PTX on stderr
  cupy_checks.py cub_checked  reductions and a scan through CUB, each verified against NumPy
  cupy_checks.py random    cupy.random's cuRAND generators, bit for bit against cuRAND's host generators (the same
                           library, run on the CPU: cuRAND specifies its sequences exactly), and default_rng
  cupy_checks.py linalg    `a @ b` (cuBLAS) in float32 and float64 and cupy.linalg.solve (cuSOLVER getrf/getrs),
                           against NumPy; cuBLAS takes its PTX on an emulated device of compute capability 13.0
  cupy_checks.py managed   managed memory (cudaMallocManaged): the host reads and writes CuPy's arrays at their own
                           address between kernels; prefetch and advice; CuPy's allocator on managed memory
"""
import ctypes
import sys

import cupy as cp
import numpy as np
from cupy_backends.cuda.libs import curand as cupy_curand


def kernels():
    props = cp.cuda.runtime.getDeviceProperties(0)
    free, total = cp.cuda.runtime.memGetInfo()
    print(f"device: {props['name'].decode()}, {total >> 20} MiB, {free >> 20} MiB free")
    n = 100_000
    host = np.arange(n, dtype=np.float32)
    a = cp.asarray(host)
    b = a * 2 + 1
    assert np.array_equal(cp.asnumpy(b), host * 2 + 1), "elementwise"
    assert int(cp.arange(n, dtype=cp.int64).sum()) == n * (n - 1) // 2, "integer sum"
    # float32 sums round differently in another order: close, not equal.
    assert abs(float(a.sum()) - float(host.astype(np.float64).sum())) <= 1e-5 * float(host.sum()), "float sum"
    assert int(cp.argmax(a)) == n - 1, "argmax"
    m = cp.asarray(np.arange(12, dtype=np.int64).reshape(3, 4))
    assert np.array_equal(cp.asnumpy(m.sum(axis=0)), np.arange(12).reshape(3, 4).sum(axis=0)), "axis sum"
    square = cp.RawKernel(r'''
extern "C" __global__ void square(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * x[i];
}''', "square")
    y = cp.empty_like(a)
    square(((n + 255) // 256,), (256,), (a, y, cp.int32(n)))
    assert np.array_equal(cp.asnumpy(y), host * host), "RawKernel"
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        c = cp.asarray(host) + 3
    stream.synchronize()
    assert np.array_equal(cp.asnumpy(c), host + 3), "stream"
    print("cupy kernels: PASSED")


def cub():
    a = cp.arange(1000, dtype=cp.float32)
    print(f"cupy cub: sum through CUB = {float(a.sum())} (expected 499500.0)")


def cub_checked():
    """Reductions through CUB (CUPY_ACCELERATORS=cub), each against NumPy."""
    host = (np.arange(100_000, dtype=np.int64) * 7919) % 100_003 - 50_000
    a = cp.asarray(host)
    assert int(a.sum()) == int(host.sum()), "int64 sum"
    assert int(a.min()) == int(host.min()) and int(a.max()) == int(host.max()), "min/max"
    assert int(cp.argmin(a)) == int(np.argmin(host)) and int(cp.argmax(a)) == int(np.argmax(host)), "argmin/argmax"
    f = cp.asarray(host.astype(np.float32))
    assert abs(float(f.sum()) - float(host.sum())) <= 1e-5 * float(np.abs(host).sum()), "float32 sum"
    assert np.array_equal(cp.asnumpy(cp.cumsum(a)), np.cumsum(host)), "cumsum"
    print(f"cupy cub: sum {int(a.sum())}, min {int(a.min())}, max {int(a.max())}, cumsum: PASSED")


def _loaded_library(stem):
    """The path of the shared library `stem` this process loaded (CuPy's own cuRAND, from its wheel)."""
    with open("/proc/self/maps") as maps:
        for line in maps:
            path = line.split()[-1]
            if "/" + stem in path:
                return path
    raise AssertionError(f"{stem} is not loaded")


def _host_sequence(curand, generator_type, seed, n, kind):
    """n values of cuRAND's host generator `generator_type` seeded with `seed` (offset 0, as CuPy sets it)."""
    gen = ctypes.c_void_p()
    assert curand.curandCreateGeneratorHost(ctypes.byref(gen), generator_type) == 0, "curandCreateGeneratorHost"
    try:
        assert curand.curandSetPseudoRandomGeneratorSeed(gen, ctypes.c_ulonglong(seed)) == 0, "seed"
        assert curand.curandSetGeneratorOffset(gen, ctypes.c_ulonglong(0)) == 0, "offset"
        if kind == "uniform":
            out = np.empty(n, dtype=np.float64)
            status = curand.curandGenerateUniformDouble(gen, out.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(n))
        else:
            out = np.empty(n, dtype=np.float64)
            status = curand.curandGenerateNormalDouble(gen, out.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(n),
                                                       ctypes.c_double(0.0), ctypes.c_double(1.0))
        assert status == 0, f"host generation: status {status}"
        return out
    finally:
        curand.curandDestroyGenerator(gen)


def random():
    """cupy.random on the slice against cuRAND's host generators, which give a GPU's sequence on the CPU."""
    n = 1 << 16
    generators = {"XORWOW": 101, "MRG32k3a": 121, "Philox4_32_10": 161}
    for name, generator_type in generators.items():
        method = getattr(cupy_curand, "CURAND_RNG_PSEUDO_" + name.upper())
        assert method == generator_type, f"{name}: CuPy's constant {method}"
        rs = cp.random.RandomState(seed=1234, method=method)
        uniform = cp.asnumpy(rs.random_sample(n, dtype=cp.float64))
        curand = ctypes.CDLL(_loaded_library("libcurand.so"))
        expected = _host_sequence(curand, generator_type, 1234, n, "uniform")
        mismatches = int(np.count_nonzero(uniform != expected))
        assert mismatches == 0, f"{name} uniform: {mismatches} of {n} differ, first at {np.argmax(uniform != expected)}"
        rs = cp.random.RandomState(seed=99, method=method)
        normal = cp.asnumpy(rs.standard_normal(n, dtype=cp.float64))
        expected = _host_sequence(curand, generator_type, 99, n, "normal")
        # Box-Muller through CUDA's log and sincos on the device, the host's libm here: a few ulps of the terms
        # apart (absolute: near a zero of the cosine the relative difference grows without meaning anything).
        worst = float(np.max(np.abs(normal - expected)))
        assert worst <= 1e-12, f"{name} normal: difference {worst} at {np.argmax(np.abs(normal - expected))}"
        print(f"cupy random {name}: {n} uniform doubles bit for bit, normals within {worst:.1e}")
    # default_rng: CuPy's own XORWOW bit generator, in kernels it compiles with NVRTC.
    a = cp.asnumpy(cp.random.default_rng(7).random(n))
    b = cp.asnumpy(cp.random.default_rng(7).random(n))
    assert np.array_equal(a, b), "default_rng(7) twice: different sequences"
    assert 0.0 <= a.min() and a.max() < 1.0, "default_rng: out of [0, 1)"
    assert abs(a.mean() - 0.5) < 0.01 and abs(a.var() - 1 / 12) < 0.005, f"default_rng: mean {a.mean()} var {a.var()}"
    ints = cp.asnumpy(cp.random.RandomState(5).randint(0, 10, size=n))
    counts = np.bincount(ints, minlength=10)
    assert counts.min() > n / 10 * 0.9 and counts.max() < n / 10 * 1.1, f"randint: counts {counts}"
    print("cupy random: PASSED")


def linalg():
    """Matrix products through cuBLAS and a linear solve through cuSOLVER, each against NumPy."""
    rng = np.random.default_rng(45)
    # Small integers: every product and partial sum is exact in float32, so the result is NumPy's bit for bit.
    a = rng.integers(-3, 4, size=(96, 80)).astype(np.float32)
    b = rng.integers(-3, 4, size=(80, 72)).astype(np.float32)
    assert np.array_equal(cp.asnumpy(cp.asarray(a) @ cp.asarray(b)), a @ b), "float32 a @ b"
    # Random float64: within the error bound of an 80-term dot product, k * eps * sum |a_ik b_kj|.
    x = rng.uniform(-1, 1, size=(64, 80))
    y = rng.uniform(-1, 1, size=(80, 48))
    bound = 80 * np.finfo(np.float64).eps * (np.abs(x) @ np.abs(y))
    assert np.all(np.abs(cp.asnumpy(cp.asarray(x) @ cp.asarray(y)) - x @ y) <= bound), "float64 a @ b"
    # A diagonally dominant system: the residual relative to |A| |x| within n * eps.
    n = 64
    m = rng.uniform(-1, 1, size=(n, n)) + n * np.eye(n)
    rhs = rng.uniform(-1, 1, size=n)
    solution = cp.asnumpy(cp.linalg.solve(cp.asarray(m), cp.asarray(rhs)))
    residual = np.max(np.abs(m @ solution - rhs)) / (np.max(np.abs(m).sum(axis=1)) * np.max(np.abs(solution)))
    assert residual <= n * np.finfo(np.float64).eps, f"solve: relative residual {residual}"
    print(f"cupy linalg: a @ b exact (float32), within the bound (float64); solve residual {residual:.3g}: PASSED")


def managed():
    n = 1 << 18
    pointer = cp.cuda.malloc_managed(n * 4)
    memory = pointer.mem  # cupy.cuda.memory.ManagedMemory
    device_view = cp.ndarray((n,), cp.float32, pointer)
    # The same bytes from the host, at the same address: no copy anywhere in this program.
    host_view = np.frombuffer((ctypes.c_float * n).from_address(memory.ptr), dtype=np.float32)
    host_view[:] = np.arange(n, dtype=np.float32)
    device_view *= 3
    cp.cuda.Device().synchronize()
    assert np.array_equal(host_view, np.arange(n, dtype=np.float32) * 3), "host view after a kernel"
    host_view[::7] = -1  # Sparse host writes reach the next kernel.
    device_view += 1
    cp.cuda.Device().synchronize()
    expected = np.arange(n, dtype=np.float32) * 3 + 1
    expected[::7] = 0
    assert np.array_equal(host_view, expected), "host view after sparse writes and a kernel"
    stream = cp.cuda.Stream()
    memory.prefetch(stream)
    memory.advise(cp.cuda.runtime.cudaMemAdviseSetReadMostly, cp.cuda.Device(0))
    stream.synchronize()
    assert float(device_view.sum()) == float(expected.sum()), "sum after prefetch and advice"
    attributes = cp.cuda.runtime.pointerGetAttributes(memory.ptr)
    assert attributes.type == cp.cuda.runtime.memoryTypeManaged, f"pointer type {attributes.type}"
    # CuPy's memory pool on managed memory: ordinary CuPy code, every array managed.
    cp.cuda.set_allocator(cp.cuda.MemoryPool(cp.cuda.malloc_managed).malloc)
    x = cp.arange(100000, dtype=cp.float64)
    y = (x * 2 + 1).astype(cp.int64)
    assert int(y.sum()) == 100000 * 100000, "sum on the managed pool"
    assert np.array_equal(cp.asnumpy(y[:5]), [1, 3, 5, 7, 9]), "copy out of the managed pool"
    print("cupy managed memory: host and kernels at one address, prefetch, advice, a managed pool: PASSED")


if __name__ == "__main__":
    {"kernels": kernels, "cub": cub, "cub_checked": cub_checked, "random": random, "linalg": linalg,
     "managed": managed}[sys.argv[1]]()
