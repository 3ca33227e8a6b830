"""A PyTorch program that idles mid-run (the GPU kit suspends its lease then): it computes, prints "idle", sleeps,
computes again on the tensors it kept, and checks both results bit for bit against the CPU. Prints "ok" or fails."""
import sys
import time

import torch

torch.manual_seed(0)
a = torch.randn(512, 512, device="cuda")
b = torch.randn(512, 512, device="cuda")
c = (a @ b).relu_()
torch.cuda.synchronize()
print("idle", flush=True)
time.sleep(float(sys.argv[1]) if len(sys.argv) > 1 else 4.0)
d = (c + a).sum(dim=0)
want_c = (a.cpu() @ b.cpu()).relu_()
ok = torch.allclose(c.cpu(), want_c, rtol=1e-3, atol=1e-3) and torch.equal(d.cpu(), (c.cpu() + a.cpu()).sum(dim=0))
print("ok" if ok else "WRONG", flush=True)
sys.exit(0 if ok else 1)
