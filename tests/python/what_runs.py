"""What each Python framework runs on an emulated slice: every operation tried and its result checked against NumPy,
printed as rows of README's framework table (scripts/framework-table.sh puts them between the README's markers, and
the test python.framework_table checks that the README says what this run found).

  what_runs.py FRAMEWORK     torch, cupy, numba or cuda-python; attaches with gpupool.attach() (no gp-run)

Each row: | framework | operation | on an emulated slice |, where the last cell is "runs" (the result was checked),
"wrong result" or "needs a GPU: <the first line of the error>".
"""
import re
import sys

import numpy as np

import gpupool


def row(framework, operation, probe):
    try:
        ok = probe()
        verdict = "runs" if ok else "wrong result"
    except Exception as e:  # noqa: BLE001 - every failure is a row of the table.
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        # The error's first sentence, without what varies between runs (which step of a multi-step call failed).
        first = re.sub(r"failed on \w+ step: ", "", first).split(". ")[0].replace("|", "/")
        verdict = "needs a GPU: " + (first if len(first) <= 90 else first[:87].rstrip() + "...")
    print(f"| {framework} | {operation} | {verdict} |", flush=True)


def torch_rows():
    import torch
    a = np.arange(64, dtype=np.float32).reshape(8, 8)

    def on_device(f):
        out = f()
        torch.cuda.synchronize()
        return out

    row("PyTorch", "device properties, memory, streams, events",
        lambda: torch.cuda.device_count() == 1 and torch.cuda.mem_get_info()[1] > 0 and
        torch.cuda.Event(enable_timing=True) is not None)
    row("PyTorch", "copies host <-> slice", lambda: np.array_equal(torch.from_numpy(a).cuda().cpu().numpy(), a))
    row("PyTorch", "elementwise (`x + 1`)", lambda: np.array_equal(
        on_device(lambda: torch.from_numpy(a).cuda() + 1).cpu().numpy(), a + 1))
    row("PyTorch", "matmul (cuBLAS)", lambda: np.allclose(
        on_device(lambda: torch.from_numpy(a).cuda() @ torch.from_numpy(a).cuda()).cpu().numpy(), a @ a))
    row("PyTorch", "conv2d (cuDNN)", lambda: on_device(lambda: torch.nn.functional.conv2d(
        torch.ones(1, 1, 8, 8, device="cuda"), torch.ones(1, 1, 3, 3, device="cuda"))).sum().item() == 36 * 9)
    row("PyTorch", "sort", lambda: np.array_equal(
        on_device(lambda: torch.from_numpy(a[::-1].copy().ravel()).cuda().sort().values).cpu().numpy(),
        np.sort(a.ravel())))
    row("PyTorch", "fft (cuFFT)", lambda: np.allclose(
        on_device(lambda: torch.fft.fft(torch.from_numpy(a[0]).cuda())).cpu().numpy(), np.fft.fft(a[0]), atol=1e-3))


def cupy_rows():
    import cupy as cp
    a = np.arange(64, dtype=np.float64).reshape(8, 8) + np.eye(8) * 100
    d = cp.asarray(a)
    row("CuPy", "elementwise, `RawKernel`", lambda: np.array_equal(cp.asnumpy(d * 2 + 1), a * 2 + 1))
    row("CuPy", "reductions (CUB, the default)", lambda: float(d.sum()) == a.sum() and int(cp.argmax(d)) == a.argmax())
    row("CuPy", "matmul `@` (cuBLAS)", lambda: np.allclose(cp.asnumpy(d @ d), a @ a))
    row("CuPy", "`cupy.linalg.solve` (cuSOLVER)", lambda: np.allclose(
        cp.asnumpy(cp.linalg.solve(d, cp.ones(8))), np.linalg.solve(a, np.ones(8))))
    row("CuPy", "sort", lambda: np.array_equal(cp.asnumpy(cp.sort(d[::-1].ravel())), np.sort(a.ravel())))
    row("CuPy", "`cupy.random` (cuRAND)", lambda: 0 <= float(cp.random.RandomState(1).random_sample(1000).mean()) < 1)
    row("CuPy", "`cupy.fft` (cuFFT)", lambda: np.allclose(cp.asnumpy(cp.fft.fft(d[0])), np.fft.fft(a[0])))

    def managed():
        pool = cp.cuda.MemoryPool(cp.cuda.malloc_managed)
        m = cp.ndarray((8, 8), cp.float64, pool.malloc(a.nbytes))
        m[...] = d
        return np.allclose(cp.asnumpy(m @ m + 1), a @ a + 1)

    row("CuPy", "managed memory (`cupy.cuda.malloc_managed`)", managed)


def numba_rows():
    from numba import cuda

    @cuda.jit
    def add_one(v):
        i = cuda.grid(1)
        if i < v.size:
            v[i] += 1

    def kernel():
        v = cuda.to_device(np.zeros(256, dtype=np.int32))
        add_one[2, 128](v)
        return np.array_equal(v.copy_to_host(), np.ones(256, dtype=np.int32))

    row("numba-cuda", "`@cuda.jit` kernels (after `gpupool.attach()`)", kernel)

    def managed():
        m = cuda.managed_array(256, dtype=np.int32)
        m[:] = np.arange(256)
        add_one[2, 128](m)
        cuda.synchronize()
        return np.array_equal(np.asarray(m), np.arange(256) + 1)

    row("numba-cuda", "`cuda.managed_array` (host and kernels on one array)", managed)


def cuda_python_rows():
    from cuda.core import Device, LaunchConfig, Program, ProgramOptions, launch
    dev = Device()
    dev.set_current()
    stream = dev.create_stream()
    source = 'extern "C" __global__ void fill(int* v) { v[threadIdx.x] = threadIdx.x; }'
    arch = "".join(str(x) for x in dev.compute_capability)

    def compiled(target):
        program = Program(source, "c++", ProgramOptions(arch=f"{'compute' if target == 'ptx' else 'sm'}_{arch}"))
        kernel = program.compile(target).get_kernel("fill")
        buf = dev.memory_resource.allocate(128 * 4, stream=stream)
        launch(stream, LaunchConfig(grid=1, block=128), kernel, buf)
        stream.sync()
        host = np.zeros(128, dtype=np.int32)
        from cuda.bindings import driver
        driver.cuMemcpyDtoH(host.ctypes.data, int(buf.handle), 128 * 4)
        return np.array_equal(host, np.arange(128, dtype=np.int32))

    row("cuda-python", "cuda.core: NVRTC to PTX, launch", lambda: compiled("ptx"))
    row("cuda-python", "cuda.core: NVRTC to a cubin (SASS)", lambda: compiled("cubin"))


if __name__ == "__main__":
    framework = sys.argv[1]
    gpupool.attach()
    {"torch": torch_rows, "cupy": cupy_rows, "numba": numba_rows, "cuda-python": cuda_python_rows}[framework]()
