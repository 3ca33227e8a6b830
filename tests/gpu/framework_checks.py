"""Framework checks for the GPU acceptance kit: each check computes on the GPU and compares with the CPU.

    python3 framework_checks.py torch-blas | torch-cudnn | cupy | numba
Prints "<check>: PASSED" and exits 0, or the failure and exits 1.
"""
import sys

import numpy as np


def torch_blas():
    import torch
    torch.backends.cuda.matmul.allow_tf32 = False
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(512, 384, generator=g), torch.randn(384, 256, generator=g)
    got = (a.cuda() @ b.cuda()).cpu()
    err = (got - a @ b).abs().max().item()
    assert err < 1e-3, f"matmul max error {err}"
    bat = torch.randn(8, 64, 64, generator=g)
    got = torch.bmm(bat.cuda(), bat.cuda()).cpu()
    err = (got - torch.bmm(bat, bat)).abs().max().item()
    assert err < 1e-3, f"bmm max error {err}"


def torch_cudnn():
    import torch
    torch.backends.cudnn.allow_tf32 = False
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 8, 28, 28, generator=g), torch.randn(16, 8, 3, 3, generator=g)
    got = torch.nn.functional.conv2d(x.cuda(), w.cuda(), padding=1).cpu()
    err = (got - torch.nn.functional.conv2d(x, w, padding=1)).abs().max().item()
    assert torch.backends.cudnn.is_available(), "cuDNN is not available"
    assert err < 1e-3, f"conv2d max error {err}"


def cupy_check():
    import cupy as cp
    x = np.arange(1 << 20, dtype=np.float32)
    d = cp.asarray(x)
    got = cp.asnumpy(d * 2 + 1)
    assert np.array_equal(got, x * 2 + 1), "elementwise"
    total = float(cp.sum(d, dtype=cp.float64))
    assert total == float(x.astype(np.float64).sum()), f"sum {total}"
    k = cp.RawKernel(r'''extern "C" __global__ void sq(const float* a, float* b, int n) {
        int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) b[i] = a[i] * a[i]; }''', "sq")
    out = cp.empty_like(d)
    k(((x.size + 255) // 256,), (256,), (d, out, np.int32(x.size)))
    assert np.array_equal(cp.asnumpy(out), x * x), "RawKernel"


def numba_check():
    from numba import cuda

    @cuda.jit
    def axpy(out, a, x, y):
        i = cuda.grid(1)
        if i < out.size:
            out[i] = a * x[i] + y[i]

    x = np.arange(100000, dtype=np.float32)
    y = np.ones_like(x)
    dx, dy = cuda.to_device(x), cuda.to_device(y)
    dout = cuda.device_array_like(x)
    axpy[(x.size + 127) // 128, 128](dout, np.float32(3), dx, dy)
    assert np.array_equal(dout.copy_to_host(), 3 * x + y), "axpy"


CHECKS = {"torch-blas": torch_blas, "torch-cudnn": torch_cudnn, "cupy": cupy_check, "numba": numba_check}

if __name__ == "__main__":
    name = sys.argv[1]
    try:
        CHECKS[name]()
    except Exception as e:  # noqa: BLE001 -- report any failure with its type, then fail
        print(f"{name}: FAILED: {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
    print(f"{name}: PASSED", flush=True)
