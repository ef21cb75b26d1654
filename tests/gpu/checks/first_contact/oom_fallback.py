"""An allocation the device cannot hold must raise torch.OutOfMemoryError,
never give a tensor at address 0 (the pluggable path's NULL)."""
import json
import sys

import torch

torch.ones(1, device="cuda")
out = {"adapter_in_use": bool(sys.modules.get("xsalloc.torch") and sys.modules["xsalloc.torch"].adapter_in_use())}
try:
    t = torch.empty(400 << 30, dtype=torch.uint8, device="cuda")
    out["result"] = f"tensor at {t.data_ptr():#x}"
    t.fill_(1)
    torch.cuda.synchronize()
    out["after_fill"] = "ok"
except Exception as e:  # noqa: BLE001
    out["result"] = f"{type(e).__name__}: {str(e)[:120]}"
print("PROBE " + json.dumps(out), flush=True)
