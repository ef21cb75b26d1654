"""The parent uses CUDA, then a forked child touches CUDA: torch's own guard
must say "Cannot re-initialize CUDA in forked subprocess"."""
import json
import multiprocessing as mp

import torch


def child(q):
    try:
        torch.ones(1, device="cuda")
        q.put("no error")
    except Exception as e:  # noqa: BLE001
        q.put(f"{type(e).__name__}: {str(e)[:200]}")


if __name__ == "__main__":
    torch.ones(1, device="cuda")
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    p.join(60)
    print("PROBE " + json.dumps({"child": q.get(timeout=5) if p.exitcode is not None else "hung",
                                 "exitcode": p.exitcode}), flush=True)
