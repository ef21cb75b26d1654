"""First-contact probe (tests/gpu/run_first_contact.sh): a small unchanged
training script. Prints one JSON line: whether xsalloc is torch's allocator
through the adapter, the backend torch names, the device count torch sees,
and a loss."""
import json
import os
import sys

import torch

out = {"pid": os.getpid(), "cuda_available": torch.cuda.is_available(),
       "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0}
dev = "cuda" if out["cuda_available"] else "cpu"
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(), torch.nn.Linear(1024, 10)).to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
for step in range(5):
    x = torch.randn(128, 256, device=dev)
    loss = model(x).square().mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
out["loss"] = round(loss.item(), 6)
xs = sys.modules.get("xsalloc.torch")
out["xsalloc_loaded"] = xs is not None
out["adapter_in_use"] = bool(xs and xs.adapter_in_use())
out["backend"] = torch.cuda.get_allocator_backend() if out["cuda_available"] else None
if len(sys.argv) > 1:
    out["tag"] = sys.argv[1]
print("PROBE " + json.dumps(out), flush=True)
