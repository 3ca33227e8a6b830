"""CuPy on a gpupool slice. Run under gp-run with CUPY_COMPILE_WITH_PTX=1, so that CuPy's NVRTC-compiled kernels
reach the device as PTX (the emulated device runs PTX; a GPU server runs either).

  cupy_checks.py kernels   elementwise, reductions (CuPy's own, CUPY_ACCELERATORS=''), RawKernel: each verified
  cupy_checks.py cub       a reduction through CUB, whose kernels CuPy ships precompiled (SASS only): prints what
                           came back; on an emulated device older than 12.0 gpupool names the missing PTX on stderr
  cupy_checks.py cub_checked  reductions and a scan through CUB, each verified against NumPy
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


if __name__ == "__main__":
    {"kernels": kernels, "cub": cub, "cub_checked": cub_checked}[sys.argv[1]]()
