"""A small unchanged training script for tests/gpu/run_pip_check.sh: an MLP
trained for 20 steps on seeded random data; prints one loss a line, then the
allocator backend torch reports and, when xsalloc is loaded, its settings line."""
import sys

import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 2048), torch.nn.GELU(), torch.nn.Linear(2048, 10)).cuda()
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(20):
    x = torch.randn(256 * (1 + step % 4), 512, device="cuda")
    y = torch.randint(0, 10, (x.shape[0],), device="cuda")
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"loss {step} {loss.item():.6f}")
print("backend", torch.cuda.get_allocator_backend())
if "xsalloc" in sys.modules:
    import xsalloc

    print("summary-tail", xsalloc.memory_summary(0).strip().splitlines()[-1])
    print("stats-equal", torch.cuda.memory_stats()["allocated_bytes.all.peak"] ==
          xsalloc.memory_stats(0)["allocated_bytes.all.peak"])
