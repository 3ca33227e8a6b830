"""CuPy on a gpupool slice. Run under gp-run with CUPY_COMPILE_WITH_PTX=1, so that CuPy's NVRTC-compiled kernels
reach the device as PTX (the emulated device runs PTX; a GPU server runs either).

  cupy_checks.py kernels   elementwise, reductions (CuPy's own, CUPY_ACCELERATORS=''), RawKernel: each verified
  cupy_checks.py cub       a reduction through CUB, whose kernels CuPy ships precompiled (SASS only): prints what
                           came back; on an emulated device older than 12.0 gpupool names the missing PTX on stderr
  cupy_checks.py cub_checked  reductions and a scan through CUB, each verified against NumPy
  cupy_checks.py linalg    `a @ b` (cuBLAS) in float32 and float64 and cupy.linalg.solve (cuSOLVER getrf/getrs),
                           against NumPy; cuBLAS takes its PTX on an emulated device of compute capability 13.0
"""
import sys

import cupy as cp
import numpy as np


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


if __name__ == "__main__":
    {"kernels": kernels, "cub": cub, "cub_checked": cub_checked, "linalg": linalg}[sys.argv[1]]()
