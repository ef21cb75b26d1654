"""A -m target: python -m modtarget (through python -m xsalloc.run -m modtarget)."""
import json
import sys

import torch

x = torch.ones(4, device="cuda")
xs = sys.modules.get("xsalloc.torch")
print("PROBE " + json.dumps({"name": __name__, "argv": sys.argv, "sum": x.sum().item(),
                             "adapter_in_use": bool(xs and xs.adapter_in_use())}), flush=True)
