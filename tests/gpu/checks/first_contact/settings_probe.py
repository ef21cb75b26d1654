"""What each side believes the settings are: xsalloc's summary line, torch's
own view of expandable_segments, and a run-time string torch takes but
xsalloc refuses."""
import json
import sys

import torch

torch.ones(1, device="cuda")
out = {}
import xsalloc  # noqa: E402

out["xsalloc_settings"] = xsalloc.memory_summary(0).strip().splitlines()[-1]
x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
seg = [s for s in torch.cuda.memory._snapshot()["segments"] if s["address"] <= x.data_ptr() < s["address"] + s["total_size"]]
out["segment_type_of_64MiB"] = seg[0].get("segment_type") if seg else None
out["segment_is_expandable"] = bool(seg and seg[0].get("is_expandable"))
acc = getattr(torch._C, "_accelerator_getAllocatorSettings", None) or getattr(torch._C, "_cuda_cudaCachingAllocator_get_allocator_settings", None)
try:
    out["torch_expandable"] = torch._C._cuda_cudaCachingAllocator_expandable_segments() if hasattr(torch._C, "_cuda_cudaCachingAllocator_expandable_segments") else None
except Exception as e:  # noqa: BLE001
    out["torch_expandable"] = repr(e)
try:
    from torch._C._acc import _get_allocator_config  # noqa: F401
except Exception:
    pass
for name in ("_accelerator_getAllocatorSettings",):
    if hasattr(torch._C, name):
        out[name] = getattr(torch._C, name)()
try:
    torch.cuda.memory._set_allocator_settings("max_split_size_mb:30")
    out["runtime_bad"] = "accepted"
except Exception as e:  # noqa: BLE001
    out["runtime_bad"] = f"{type(e).__name__}: {str(e)[:160]}"
out["xsalloc_settings_after"] = xsalloc.memory_summary(0).strip().splitlines()[-1]
print("PROBE " + json.dumps(out), flush=True)
