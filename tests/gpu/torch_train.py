"""A small deterministic PyTorch training loop (CNN + MLP head on synthetic data) for the GPU acceptance kit.

Run it natively and under gp-run; the kit compares the losses step by step and the median step times.
    python3 torch_train.py --steps 200 --out losses.json
"""
import argparse
import json
import os
import statistics
import sys
import time

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False

    dev = torch.device("cuda")
    print(f"torch {torch.__version__}, device {torch.cuda.get_device_name(0)}, "
          f"{torch.cuda.get_device_properties(0).total_memory >> 20} MiB", flush=True)
    gen = torch.Generator().manual_seed(1)
    x_all = torch.randn(64 * 8, 3, 32, 32, generator=gen)
    y_all = torch.randint(0, 10, (64 * 8,), generator=gen)
    model = torch.nn.Sequential(
        # Strided convolutions, not pooling: the pooling layers' CUDA backward passes have no deterministic
        # implementation, and the kit compares losses bit for bit.
        torch.nn.Conv2d(3, 16, 3, padding=1, stride=2), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1, stride=2), torch.nn.ReLU(),
        torch.nn.Flatten(), torch.nn.Linear(32 * 8 * 8, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10),
    ).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    x_all, y_all = x_all.to(dev), y_all.to(dev)

    losses, times = [], []
    for step in range(args.steps):
        t0 = time.perf_counter()
        i = (step % 8) * 64
        x, y = x_all[i:i + 64], y_all[i:i + 64]
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())  # .item() synchronises: the step time includes the device work.
        times.append(time.perf_counter() - t0)
    median_ms = statistics.median(times[10:]) * 1e3
    print(f"steps {args.steps}: loss {losses[0]:.4f} -> {losses[-1]:.4f}, median step {median_ms:.3f} ms", flush=True)
    with open(args.out, "w") as f:
        json.dump({"losses": losses, "median_step_ms": median_ms}, f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
