"""A script that chooses its GPUs itself, before importing torch: with
CUDA_VISIBLE_DEVICES="" set here, torch must see no device, as under plain
python (xsalloc must not have started the driver before the script)."""
import os

os.environ["CUDA_VISIBLE_DEVICES"] = ""
import json

import torch

print("PROBE " + json.dumps({"device_count": torch.cuda.device_count(), "available": torch.cuda.is_available(),
                             "sum": torch.ones(3).sum().item()}), flush=True)
