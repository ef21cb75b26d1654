"""The torch C++ adapter on a GPU with torch (issue 18's GPU check).

    python3 tests/gpu/adapter_check.py --case CASE [--conf XSALLOC_CONF]
    bash tests/gpu/run_adapter_check.sh            (every case, own process each)

CASE:
- stats: torch.cuda.memory_stats() equals xsalloc.memory_stats(0), key for
  key, with nothing patched (torch asks the adapter).
- history: _record_memory_history() + _dump_snapshot(): the pickle opens in
  torch.cuda._memory_viz (trace_plot and segment_plot), and the
  allocations made in a named function carry its Python frame, in the
  trace and on the live blocks.
- oom: a 200 GiB torch.empty raises torch.OutOfMemoryError (not a tensor at
  address 0) with xsalloc's report; after empty_cache() training goes on.
Prints one JSON line: {"case", "ok", "detail"}.
"""
import argparse
import os
import pickle
import sys
import tempfile

from case_report import run_case


def case_stats(torch, xsalloc):
    keep = [torch.empty(n, device="cuda") for n in (1000, 300000, 5000000)]
    del keep[1]
    mine, theirs = xsalloc.memory_stats(0), torch.cuda.memory_stats()
    shared = sorted(set(mine) & set(theirs))
    diff = [k for k in shared if mine[k] != theirs[k]]
    ok = len(shared) > 50 and not diff and theirs["allocated_bytes.all.current"] > 0
    return ok, f"{len(shared)} keys compared, differing: {diff[:5]}; only torch: {sorted(set(theirs) - set(mine))[:5]}"


def allocate_in_named_function(torch):
    return [torch.empty(1 << 20, device="cuda") for _ in range(4)]


def case_history(torch, xsalloc):
    torch.cuda.memory._record_memory_history(max_entries=100000)
    live = allocate_in_named_function(torch)
    del live[0]
    path = os.path.join(tempfile.mkdtemp(), "snap.pickle")
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    from torch.cuda import _memory_viz
    html = _memory_viz.trace_plot(snap) + _memory_viz.segment_plot(snap)

    def named(frames):
        return any(fr.get("name") == "allocate_in_named_function" for fr in frames)
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    traced = sum(named(e.get("frames", [])) for e in allocs)
    blocks = [b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    framed = sum(named(b.get("frames", [])) for b in blocks)
    ok = traced >= 4 and framed >= 3 and len(html) > 1000
    return ok, (f"{len(allocs)} allocs traced, {traced} with the function's frame; {framed} live blocks with it; "
                f"viz html {len(html)} chars; settings {snap.get('allocator_settings', {}).get('PYTORCH_CUDA_ALLOC_CONF')!r}")


def train(torch, steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        x = torch.randn(128, 512, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def case_oom(torch, xsalloc):
    train(torch, 3)
    try:
        t = torch.empty(200 << 30, dtype=torch.uint8, device="cuda")
        return False, f"no error: a tensor at {t.data_ptr():#x}"
    except torch.OutOfMemoryError as e:
        message = str(e).splitlines()[0]
    torch.cuda.empty_cache()
    losses = train(torch, 5)
    ok = len(losses) == 5 and all(l == l for l in losses) and torch.cuda.memory_stats()["num_ooms"] >= 1
    return ok, f"OutOfMemoryError: {message[:200]}; 5 more steps trained"


CASES = {"stats": case_stats, "history": case_history, "oom": case_oom}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", required=True, choices=list(CASES))
    p.add_argument("--conf", default=None)
    p.add_argument("--adapter", type=int, default=1)
    a = p.parse_args()
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
    import xsalloc
    import xsalloc.torch
    import torch

    xsalloc.torch.use(conf=a.conf, adapter=bool(a.adapter))
    return run_case(CASES[a.case], (torch, xsalloc), {"case": a.case, "adapter": a.adapter})


if __name__ == "__main__":
    sys.exit(main())
