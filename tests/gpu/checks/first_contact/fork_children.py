"""Forked children that use CUDA (mp.Pool made before the parent touches
CUDA, as Lightning's ddp_fork does), then a DataLoader with fork workers
while the parent trains on CUDA."""
import json
import multiprocessing as mp

import torch


def child(i):
    try:
        return float(torch.ones(4, device="cuda").sum().item())
    except Exception as e:  # noqa: BLE001
        return f"{type(e).__name__}: {str(e)[:160]}"


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 16

    def __getitem__(self, i):
        return torch.full((8,), float(i))


if __name__ == "__main__":
    out = {}
    with mp.get_context("fork").Pool(2) as pool:
        out["pool"] = pool.map(child, range(2))
    loader = torch.utils.data.DataLoader(Data(), batch_size=4, num_workers=2, multiprocessing_context="fork")
    total = 0.0
    for batch in loader:
        total += batch.cuda().sum().item()
    out["loader_sum"] = total
    print("PROBE " + json.dumps(out), flush=True)
