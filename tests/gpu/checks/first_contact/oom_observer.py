"""An out-of-memory observer that reads the statistics (what trackers do):
it must run, not hang on the allocator's lock; the OOM is torch's error."""
import json

import torch

seen = []
torch._C._cuda_attach_out_of_memory_observer(lambda dev, alloc, total, free: seen.append(torch.cuda.memory_stats()["num_ooms"]))
torch.ones(1, device="cuda")
try:
    torch.empty(400 << 30, dtype=torch.uint8, device="cuda")
    err = "no error"
except Exception as e:  # noqa: BLE001
    err = type(e).__name__
print("PROBE " + json.dumps({"observer_saw": seen, "error": err}), flush=True)
