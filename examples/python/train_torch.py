"""A small PyTorch training loop for a gpupool slice: a two-layer network learns y = sin(3x) + x^2 / 2 from
synthetic data, on the GPU gp-run hands it, and checks that the loss fell.

    gp-run -p 0.5 -- python examples/python/train_torch.py [--steps 300]

On a GPU server it runs end to end (cuBLAS, the caching allocator, autograd, the optimizer). On an emulated device
it stops at its first kernel: PyTorch's wheels carry SASS only, which the emulator cannot run; gpupool names the
missing PTX on stderr and the script exits with status 2 (see examples/python/train_cupy.py for a loop that runs
there).
"""
import argparse
import sys
import time

import torch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=1024)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        sys.exit("train_torch: no CUDA device (run it under gp-run)")
    device = torch.device("cuda")
    print(f"train_torch: {torch.cuda.get_device_name(0)}, "
          f"{torch.cuda.get_device_properties(0).total_memory >> 20} MiB")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(1, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1)).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    x = torch.linspace(-2, 2, args.batch, device="cpu").unsqueeze(1)
    y = torch.sin(3 * x) + x * x / 2
    x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
    first = last = None
    start = time.perf_counter()
    try:
        for step in range(args.steps):
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            if step == 0 or step + 1 == args.steps or (step + 1) % 100 == 0:
                value = loss.item()
                first = value if first is None else first
                last = value
                print(f"train_torch: step {step + 1:4d} loss {value:.5f}")
    except (RuntimeError, torch.AcceleratorError) as e:  # A kernel the device cannot run (emulated device).
        print(f"train_torch: stopped: {str(e).splitlines()[0]}")
        sys.exit(2)
    torch.cuda.synchronize()
    per_step = (time.perf_counter() - start) / args.steps * 1e3
    print(f"train_torch: loss {first:.5f} -> {last:.5f}, {per_step:.2f} ms per step")
    sys.exit(0 if last < first / 10 else 1)


if __name__ == "__main__":
    main()
