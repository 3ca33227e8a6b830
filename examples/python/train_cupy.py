"""A small training loop that runs on any gpupool slice, the emulated device included: logistic regression on
synthetic data with CuPy, written with elementwise operations and reductions only (no cuBLAS, whose kernels ship
as SASS), so that every kernel is compiled by NVRTC and reaches the device as PTX.

    CUPY_COMPILE_WITH_PTX=1 CUPY_ACCELERATORS= gp-run -p 0.25 -- python examples/python/train_cupy.py

CUPY_COMPILE_WITH_PTX=1 makes CuPy hand the device PTX (the emulated device runs PTX; a GPU runs either), and
CUPY_ACCELERATORS= keeps CuPy's reductions its own instead of CUB's SASS-only ones. Checks that the loss fell and
that the model classifies the training data.
"""
import argparse
import sys
import time

import cupy as cp
import numpy as np


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--samples", type=int, default=4096)
    parser.add_argument("--features", type=int, default=8)
    args = parser.parse_args()
    props = cp.cuda.runtime.getDeviceProperties(0)
    print(f"train_cupy: {props['name'].decode()}, {props['totalGlobalMem'] >> 20} MiB")

    rng = np.random.default_rng(0)
    true_w = rng.normal(size=args.features).astype(np.float32)
    x_host = rng.normal(size=(args.samples, args.features)).astype(np.float32)
    y_host = (x_host @ true_w > 0).astype(np.float32)
    x, y = cp.asarray(x_host), cp.asarray(y_host)
    w = cp.zeros(args.features, dtype=cp.float32)
    b = cp.float32(0)
    lr = cp.float32(0.5)

    def forward(w, b):
        # (x * w).sum(axis=1): a broadcast product and a row reduction, both CuPy's own kernels.
        return 1 / (1 + cp.exp(-((x * w).sum(axis=1) + b)))

    first = last = None
    start = time.perf_counter()
    for step in range(args.steps):
        p = forward(w, b)
        loss = float(-(y * cp.log(p + 1e-7) + (1 - y) * cp.log(1 - p + 1e-7)).mean())
        err = p - y
        w = w - lr * (x * err[:, None]).mean(axis=0)
        b = b - lr * err.mean()
        first = loss if first is None else first
        last = loss
        if step == 0 or (step + 1) % 20 == 0:
            print(f"train_cupy: step {step + 1:3d} loss {loss:.4f}")
    accuracy = float(((forward(w, b) > 0.5) == (y > 0.5)).mean())
    per_step = (time.perf_counter() - start) / args.steps * 1e3
    print(f"train_cupy: loss {first:.4f} -> {last:.4f}, accuracy {accuracy:.3f}, {per_step:.1f} ms per step")
    ok = last < first / 2 and accuracy > 0.9
    print(f"train_cupy: {'PASSED' if ok else 'FAILED'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
