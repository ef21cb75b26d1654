"""torch.multiprocessing.spawn with 2 processes on GPU 0 (gloo, as DDP on one
GPU): each child reports whether xsalloc's adapter is its allocator."""
import json
import os
import sys

import torch
import torch.multiprocessing as tmp


def worker(rank, n):
    import torch.distributed as dist
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    dist.init_process_group("gloo", rank=rank, world_size=n)
    t = torch.ones(4, device="cuda") * (rank + 1)
    xs = sys.modules.get("xsalloc.torch")
    print("PROBE " + json.dumps({"rank": rank, "adapter_in_use": bool(xs and xs.adapter_in_use()),
                                 "backend": torch.cuda.get_allocator_backend(), "sum": t.sum().item()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    tmp.spawn(worker, args=(2,), nprocs=2)
