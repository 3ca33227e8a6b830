#!/usr/bin/env python3
# Regenerates the numba-cuda PTX test inputs of tests/emu/ptx_parser_test.cc. Needs no GPU.
#
# Made with numba-cuda 0.30.4 (numba 0.68.1, llvmlite 0.50.0, Python 3.11) against the CUDA 13.0 toolkit's NVVM:
#   python3 -m venv /tmp/numba-venv && /tmp/numba-venv/bin/pip install numba-cuda==0.30.4
#   CUDA_HOME=/usr/local/cuda /tmp/numba-venv/bin/python tests/emu/ptx/numba/gen.py
# CUDA_HOME makes numba find libnvvm.so in /usr/local/cuda/lib64 (our toolkit has no nvvm/lib64).
import os

from numba import cuda, float32, int32

OUT = os.path.dirname(os.path.abspath(__file__))
CC = (7, 5)


# Elementwise kernel with an exception check: debug=True makes numba emit the exception flag globals that the host
# reads back through cuModuleGetGlobal after the launch.
def scale(a, out):
    i = cuda.grid(1)
    if i < out.size:
        if a[i] < 0:
            raise ValueError("negative input")
        out[i] = a[i] * 2.0


# Block-wide sum through a static shared array and syncthreads.
def block_sum(a, out):
    tile = cuda.shared.array(128, dtype=float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    tile[tid] = a[i] if i < a.size else float32(0)
    cuda.syncthreads()
    stride = 64
    while stride > 0:
        if tid < stride:
            tile[tid] += tile[tid + stride]
        cuda.syncthreads()
        stride //= 2
    if tid == 0:
        out[cuda.blockIdx.x] = tile[0]


# Histogram with global atomics, plus a float atomic add and a compare-and-swap.
def histogram(values, bins, total, flag):
    i = cuda.grid(1)
    if i < values.size:
        v = values[i]
        cuda.atomic.add(bins, v % bins.size, 1)
        cuda.atomic.add(total, 0, float32(v))
        cuda.atomic.max(bins, 0, v)
        cuda.atomic.compare_and_swap(flag, 0, i)


KERNELS = [
    ("scale.ptx", scale, (float32[:], float32[:]), dict(debug=True, opt=False)),
    ("block_sum.ptx", block_sum, (float32[:], float32[:]), {}),
    ("histogram.ptx", histogram, (int32[:], int32[:], float32[:], int32[:]), {}),
]

if __name__ == "__main__":
    for name, fn, sig, opts in KERNELS:
        ptx, _ = cuda.compile_ptx(fn, sig, cc=CC, **opts)
        with open(os.path.join(OUT, name), "w") as f:
            f.write(ptx)
        print(name, len(ptx), "bytes")
