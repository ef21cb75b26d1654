"""What each side says the settings are, and a run-time string torch takes
but xsalloc refuses (tests/gpu/run_first_contact.sh, cases settings and
settings_default): xsalloc's summary line, where a 64 MiB tensor lands
(expandable or not), torch's own settings as c10 holds them (what
ProcessGroupNCCL reads: xsalloc.torch's adapter reads them), then the
refused string and both sides again. Under plain python (argument
'plain'): whether torch itself takes the string."""
import json
import sys

import torch

BAD = "roundup_power2_divisions:[>:8]"  # torch fills every interval; xsalloc wants a size entry first
if sys.argv[1:] == ["plain"]:
    torch.ones(1, device="cuda")
    try:
        torch.cuda.memory._set_allocator_settings(BAD)
        print("PROBE " + json.dumps({"torch_takes": True}), flush=True)
    except Exception as e:  # noqa: BLE001
        print("PROBE " + json.dumps({"torch_takes": False, "error": f"{type(e).__name__}: {e}"[:200]}), flush=True)
    sys.exit(0)

import xsalloc  # noqa: E402
import xsalloc.torch as xt  # noqa: E402

torch.ones(1, device="cuda")


def torch_settings():
    return list(xt._adapter_module.torch_settings()) if xt.adapter_in_use() else None


out = {"adapter_in_use": xt.adapter_in_use(), "xsalloc_settings": xsalloc.memory_summary(0).strip().splitlines()[-1]}
x = torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
seg = [s for s in torch.cuda.memory._snapshot()["segments"]
       if s["address"] <= x.data_ptr() < s["address"] + s["total_size"]]
out["segment_is_expandable"] = bool(seg and seg[0].get("is_expandable"))
out["torch_settings"] = torch_settings()  # (expandable_segments, max_split_size, gc threshold, last string)
try:
    torch.cuda.memory._set_allocator_settings(BAD)
    out["runtime_bad"] = "accepted"
except Exception as e:  # noqa: BLE001
    out["runtime_bad"] = f"{type(e).__name__}: {str(e)[:200]}"
out["torch_settings_after"] = torch_settings()
out["xsalloc_settings_after"] = xsalloc.memory_summary(0).strip().splitlines()[-1]
print("PROBE " + json.dumps(out), flush=True)
