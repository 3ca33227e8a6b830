"""cuda-python on a gpupool slice: cuda.bindings (driver API + NVRTC) and cuda.core, with kernels compiled by NVRTC
to PTX (the emulated device runs PTX; a GPU server runs either). Run under gp-run.

  cuda_python_checks.py bindings   NVRTC -> PTX -> cuModuleLoadDataEx / cuLibraryLoadData -> cuLaunchKernel:
                                   saxpy and a shared-memory block reduction, verified; the slice's memory info
  cuda_python_checks.py core       cuda.core: Program.compile("ptx"), Device, streams, the device's memory pool,
                                   launch, copies both ways, events: verified; and no warning that the driver is
                                   older than cuda.core's CUDA (gpupool reports the driver version of the CUDA
                                   toolkit wheel, whose driver API it serves)
  cuda_python_checks.py cubin      NVRTC asked for SASS (sm_75): loading fails, and gpupool says why on stderr
  cuda_python_checks.py host_functions
                                   the wheel's own cudart (CUDA 13.2, through ctypes): cudaLaunchHostFunc and 13.2's
                                   cudaLaunchHostFunc_v2, which needs a 13.1 driver's cuLaunchHostFunc_v2, run their
                                   host functions in stream order; a sync mode 13.2 does not define is refused
"""
import ctypes
import glob
import sys
import warnings

import numpy as np

SAXPY = r'''
extern "C" __global__ void saxpy(float a, const float* x, const float* y, float* out, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a * x[i] + y[i];
}
extern "C" __global__ void block_sum(const int* x, int* sums, int n) {
  __shared__ int part[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  part[threadIdx.x] = i < n ? x[i] : 0;
  __syncthreads();
  for (int s = blockDim.x / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(sums, part[0]);
}
'''


def check(result):
    """Unwraps cuda.bindings' (error, *values) tuples; raises on an error, naming it."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        raise RuntimeError(f"CUDA call failed: {err!r}")
    return values[0] if len(values) == 1 else (values or None)


def nvrtc_compile(arch):
    from cuda.bindings import nvrtc
    prog = check(nvrtc.nvrtcCreateProgram(SAXPY.encode(), b"checks.cu", 0, [], []))
    opts = [f"--gpu-architecture={arch}".encode()]
    err, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if int(err) != 0:
        size = check(nvrtc.nvrtcGetProgramLogSize(prog))
        log = b" " * size
        check(nvrtc.nvrtcGetProgramLog(prog, log))
        raise RuntimeError(f"NVRTC: {log.decode(errors='replace')}")
    if arch.startswith("compute_"):
        size = check(nvrtc.nvrtcGetPTXSize(prog))
        image = b" " * size
        check(nvrtc.nvrtcGetPTX(prog, image))
    else:
        size = check(nvrtc.nvrtcGetCUBINSize(prog))
        image = b" " * size
        check(nvrtc.nvrtcGetCUBIN(prog, image))
    return image


def bindings():
    from cuda.bindings import driver as cu
    ptx = nvrtc_compile("compute_75")
    assert b".target sm_75" in ptx, "NVRTC made PTX"
    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(0))
    name = check(cu.cuDeviceGetName(64, dev)).split(b"\0")[0].decode()
    ctx = check(cu.cuDevicePrimaryCtxRetain(dev))
    check(cu.cuCtxSetCurrent(ctx))
    free, total = check(cu.cuMemGetInfo())
    print(f"cuda.bindings: {name}, {total >> 20} MiB, {free >> 20} MiB free")
    assert 0 < free <= total, "memory info of the slice"
    stream = check(cu.cuStreamCreate(0))
    image = np.frombuffer(ptx, dtype=np.uint8)
    # Both loaders: the module API (cuModuleLoadDataEx) and the library API (cuLibraryLoadData).
    module = check(cu.cuModuleLoadDataEx(image.ctypes.data, 0, None, None))
    saxpy = check(cu.cuModuleGetFunction(module, b"saxpy"))
    library = check(cu.cuLibraryLoadData(image.ctypes.data, None, None, 0, None, None, 0))
    block_sum = check(cu.cuLibraryGetKernel(library, b"block_sum"))

    n = 10_000
    x = np.arange(n, dtype=np.float32)
    y = np.full(n, 0.5, dtype=np.float32)
    out = np.zeros(n, dtype=np.float32)
    d_x, d_y, d_out = (check(cu.cuMemAlloc(n * 4)) for _ in range(3))
    check(cu.cuMemcpyHtoDAsync(d_x, x.ctypes.data, n * 4, stream))
    check(cu.cuMemcpyHtoDAsync(d_y, y.ctypes.data, n * 4, stream))
    args = [np.array([3.0], np.float32), np.array([int(d_x)], np.uint64), np.array([int(d_y)], np.uint64),
            np.array([int(d_out)], np.uint64), np.array([n], np.uint64)]
    params = np.array([a.ctypes.data for a in args], dtype=np.uint64)
    check(cu.cuLaunchKernel(saxpy, (n + 255) // 256, 1, 1, 256, 1, 1, 0, stream, params.ctypes.data, 0))
    check(cu.cuMemcpyDtoHAsync(out.ctypes.data, d_out, n * 4, stream))
    check(cu.cuStreamSynchronize(stream))
    assert np.array_equal(out, 3.0 * x + y), "saxpy"

    ints = np.arange(n, dtype=np.int32)
    d_ints = check(cu.cuMemAlloc(n * 4))
    d_sum = check(cu.cuMemAlloc(4))
    check(cu.cuMemcpyHtoD(d_ints, ints.ctypes.data, n * 4))
    check(cu.cuMemsetD32(d_sum, 0, 1))
    args = [np.array([int(d_ints)], np.uint64), np.array([int(d_sum)], np.uint64), np.array([n], np.int32)]
    params = np.array([a.ctypes.data for a in args], dtype=np.uint64)
    # A CUkernel where a CUfunction goes, as cudart and cuda.core pass it.
    check(cu.cuLaunchKernel(cu.CUfunction(int(block_sum)), (n + 255) // 256, 1, 1, 256, 1, 1, 0, stream,
                            params.ctypes.data, 0))
    total_sum = np.zeros(1, dtype=np.int32)
    check(cu.cuStreamSynchronize(stream))
    check(cu.cuMemcpyDtoH(total_sum.ctypes.data, d_sum, 4))
    assert int(total_sum[0]) == n * (n - 1) // 2, f"block sum {int(total_sum[0])}"

    for d in (d_x, d_y, d_out, d_ints, d_sum):
        check(cu.cuMemFree(d))
    check(cu.cuLibraryUnload(library))
    check(cu.cuModuleUnload(module))
    check(cu.cuStreamDestroy(stream))
    check(cu.cuDevicePrimaryCtxRelease(dev))
    print("cuda.bindings: PASSED")


def core():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        core_checks()
    # cuda.core compares the driver's version with its NVRTC's: "The CUDA driver version is older than the backend
    # version. The generated ptx will not be loadable by the current driver."
    older = [str(w.message) for w in caught if "driver version is older" in str(w.message)]
    assert not older, f"cuda.core warned: {older[0]}"
    print(f"cuda.core: no driver-version warning ({len(caught)} other warning(s)): PASSED")


def core_checks():
    from cuda.core import Device, EventOptions, LaunchConfig, Program, ProgramOptions, launch
    dev = Device(0)
    dev.set_current()
    print(f"cuda.core: {dev.name}, compute capability {dev.compute_capability}")
    program = Program(SAXPY, code_type="c++", options=ProgramOptions(arch="compute_75", std="c++17"))
    code = program.compile("ptx")
    saxpy = code.get_kernel("saxpy")
    stream = dev.create_stream()
    n = 50_000
    x = np.arange(n, dtype=np.float32)
    y = np.ones(n, dtype=np.float32)
    d_x, d_y, d_out = (dev.allocate(n * 4, stream=stream) for _ in range(3))  # The device's memory pool.
    from cuda.bindings import driver as cu
    check(cu.cuMemcpyHtoDAsync(int(d_x.handle), x.ctypes.data, n * 4, stream.handle))
    check(cu.cuMemcpyHtoDAsync(int(d_y.handle), y.ctypes.data, n * 4, stream.handle))
    start = stream.record(options=EventOptions(timing_enabled=True))
    launch(stream, LaunchConfig(grid=(n + 127) // 128, block=128), saxpy, np.float32(2.0), d_x, d_y, d_out,
           np.uint64(n))
    end = stream.record(options=EventOptions(timing_enabled=True))
    out = np.zeros(n, dtype=np.float32)
    check(cu.cuMemcpyDtoHAsync(out.ctypes.data, int(d_out.handle), n * 4, stream.handle))
    stream.sync()
    assert np.array_equal(out, 2.0 * x + y), "saxpy through cuda.core"
    elapsed = end - start
    assert elapsed >= 0, "event timing"
    # Device to device, through cuda.core's own copy.
    d_copy = dev.allocate(n * 4, stream=stream)
    d_out.copy_to(d_copy, stream=stream)
    back = np.zeros(n, dtype=np.float32)
    check(cu.cuMemcpyDtoHAsync(back.ctypes.data, int(d_copy.handle), n * 4, stream.handle))
    stream.sync()
    assert np.array_equal(back, out), "device-to-device copy"
    for b in (d_x, d_y, d_out, d_copy):
        b.close(stream)
    stream.sync()
    print(f"cuda.core: saxpy of {n} in {elapsed:.3f} ms: PASSED")


def cubin():
    """SASS from NVRTC: the emulated device cannot run it; the load fails and gpupool names the cause."""
    from cuda.bindings import driver as cu
    sass = nvrtc_compile("sm_75")
    check(cu.cuInit(0))
    dev = check(cu.cuDeviceGet(0))
    check(cu.cuCtxSetCurrent(check(cu.cuDevicePrimaryCtxRetain(dev))))
    image = np.frombuffer(sass, dtype=np.uint8)
    err, _ = cu.cuModuleLoadData(image.ctypes.data)
    print(f"cuda.bindings: loading NVRTC's SASS: {err!r}")
    sys.exit(1 if int(err) != 0 else 0)


def host_functions():
    """cudart 13.2's host functions: the 13.1 form asks the driver for cuLaunchHostFunc by 13010 (4 arguments)."""
    found = glob.glob(f"{sys.prefix}/lib/python*/site-packages/nvidia/cu13/lib/libcudart.so.13")
    assert len(found) == 1, f"the cuda-toolkit wheel's libcudart.so.13: {found}"
    cudart = ctypes.CDLL(found[0])
    version = ctypes.c_int()
    assert cudart.cudaRuntimeGetVersion(ctypes.byref(version)) == 0 and version.value >= 13020, version.value
    host_fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
    seen = []
    data = np.zeros(1024, dtype=np.int32)

    @host_fn
    def record(tag):
        seen.append((tag, int(data[-1])))  # The copy queued before it has landed.

    stream = ctypes.c_void_p()
    assert cudart.cudaStreamCreate(ctypes.byref(stream)) == 0
    d_data = ctypes.c_void_p()
    assert cudart.cudaMalloc(ctypes.byref(d_data), ctypes.c_size_t(data.nbytes)) == 0
    host_to_device, device_to_host = 1, 2  # cudaMemcpyKind
    for tag, launch in ((1, lambda: cudart.cudaLaunchHostFunc(stream, record, ctypes.c_void_p(1))),
                        (2, lambda: cudart.cudaLaunchHostFunc_v2(stream, record, ctypes.c_void_p(2),
                                                                 ctypes.c_uint(0))),  # cudaHostTaskBlocking
                        (3, lambda: cudart.cudaLaunchHostFunc_v2(stream, record, ctypes.c_void_p(3),
                                                                 ctypes.c_uint(1)))):  # cudaHostTaskSpinWait
        source = np.full(1024, 100 * tag, dtype=np.int32)
        assert cudart.cudaMemcpyAsync(d_data, source.ctypes.data_as(ctypes.c_void_p), ctypes.c_size_t(source.nbytes),
                                      host_to_device, stream) == 0
        assert cudart.cudaMemcpyAsync(data.ctypes.data_as(ctypes.c_void_p), d_data, ctypes.c_size_t(data.nbytes),
                                      device_to_host, stream) == 0
        err = launch()
        assert err == 0, f"host function {tag}: cudaError {err}"
        assert cudart.cudaStreamSynchronize(stream) == 0
    assert seen == [(1, 100), (2, 200), (3, 300)], seen
    invalid_value = 1  # cudaErrorInvalidValue
    err = cudart.cudaLaunchHostFunc_v2(stream, record, None, ctypes.c_uint(2))
    assert err == invalid_value, f"sync mode 2: cudaError {err}"
    assert cudart.cudaStreamSynchronize(stream) == 0 and len(seen) == 3, seen
    assert cudart.cudaFree(d_data) == 0 and cudart.cudaStreamDestroy(stream) == 0
    print(f"cudart {version.value}: cudaLaunchHostFunc and cudaLaunchHostFunc_v2 in stream order: PASSED")


if __name__ == "__main__":
    {"bindings": bindings, "core": core, "cubin": cubin, "host_functions": host_functions}[sys.argv[1]]()
