"""torch.multiprocessing.spawn DDP with 2 processes: one GPU each (NCCL) where
the machine has 2, else both on GPU 0 (gloo). Each child trains a few DDP
steps and reports whether xsalloc's adapter is its allocator, its device and
its losses (DDP keeps the replicas equal, so both ranks print the same)."""
import json
import os
import sys

import torch
import torch.multiprocessing as tmp


def worker(rank, n):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    two = torch.cuda.device_count() >= n
    device = rank if two else 0
    torch.cuda.set_device(device)
    dist.init_process_group("nccl" if two else "gloo", rank=rank, world_size=n)
    torch.manual_seed(0)
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)).cuda(),
                device_ids=[device])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator(device="cuda").manual_seed(rank)
    losses = []
    for _ in range(3):
        x = torch.randn(64, 256, device="cuda", generator=gen)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(round(loss.item(), 6))
    weight = model.module[0].weight.detach().sum().item()
    xs = sys.modules.get("xsalloc.torch")
    print("PROBE " + json.dumps({"rank": rank, "device": device, "backend": dist.get_backend(),
                                 "adapter_in_use": bool(xs and xs.adapter_in_use()),
                                 "allocator": torch.cuda.get_allocator_backend(), "losses": losses,
                                 "weight_sum": round(weight, 5)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    tmp.spawn(worker, args=(2,), nprocs=2)
