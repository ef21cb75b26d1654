"""Do virtual-memory driver calls slow the GPU's queued work, and by how much?

    python3 tests/gpu/probes/vmm_stall_probe.py [--calls 200] [--rounds 5] [--xsalloc]     (a GPU machine with torch)

vmm_sync_probe.py showed that no call waits for queued kernels, yet each
costs the CPU 4-7x more while kernels run. This asks the other side: does
the GPU lose time? Each round queues about a second of bf16 matmuls
(torch's native allocator, buffers made before), then, while they run,
makes --calls driver calls of one kind in a reservation of its own that no
kernel touches, and times the matmuls with CUDA events. GPU ms lost = the
matmuls' time minus the median of the rounds without calls (interleaved);
the CPU column is the calls' own time. Kinds: cuMemCreate of 2 MiB; create
+ map of 2 MiB at fresh addresses; the same with one cuMemSetAccess a page;
with one cuMemSetAccess over 10 pages; one 20 MiB handle a call (create,
map, set access, PyTorch's expandable segments' unit); cuMemSetAccess again
on mapped pages; cuMemUnmap. Everything made is released after each round. --xsalloc: the matmuls'
buffers come from xsalloc (pages of an expandable segment) instead.
"""
import argparse
import ctypes
import statistics
import time

import torch
from vmm_sync_probe import check, cu, interleaved, matmul_batch, page_calls, reserve


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=200, help="driver calls of one kind a round (200)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of every kind, interleaved (5)")
    ap.add_argument("--xsalloc", action="store_true", help="the matmuls' buffers from xsalloc (XSALLOC_LIBRARY)")
    args = ap.parse_args()
    if args.xsalloc:
        import xsalloc.torch

        xsalloc.torch.use()
    torch.cuda.init()
    n = args.calls
    prop, access, page, base = reserve(torch.cuda.current_device(), 10 * n)  # room for 10 pages a call
    span = 10 * n * page

    a, b, c, mms = matmul_batch()

    _, create, map_at, grant, unmap_pages = page_calls(prop, access, page, base)

    def mapped(pages_each, grant_every):
        """n handles of pages_each pages mapped one after another; set access once per grant_every pages."""
        def run(state):
            for i in range(n):
                h = create(pages_each)
                map_at(i * pages_each, pages_each, h)
                state["handles"].append((h, i * pages_each, pages_each))
                done = (i + 1) * pages_each
                if grant_every and done % grant_every == 0:
                    grant(done - grant_every, grant_every)
        return run

    def only_create(state):
        for _ in range(n):
            state["loose"].append(create(1))

    def setup_mapped(state):
        mapped(1, 1)(state)

    def regrant(state):
        for i in range(n):
            grant(i, 1)

    def unmap(state):
        for h, k, pages in state["handles"]:
            unmap_pages(k, pages)
            state["loose"].append(h)
        state["handles"] = []

    # kind: (setup before the matmuls are queued, the timed calls)
    kinds = {
        "none": (None, lambda state: None),
        "cuMemCreate 2 MiB": (None, only_create),
        "create+map 2 MiB, no access": (None, mapped(1, 0)),
        "create+map+access, 2 MiB each": (None, mapped(1, 1)),
        "create+map 2 MiB, access per 10 pages": (None, mapped(1, 10)),
        "create+map+access, 20 MiB each": (None, mapped(10, 10)),
        "cuMemSetAccess again, 2 MiB": (setup_mapped, regrant),
        "cuMemUnmap 2 MiB": (setup_mapped, unmap),
    }

    def one_round(kind):
        setup, calls = kinds[kind]
        state = {"handles": [], "loose": []}
        if setup:
            setup(state)
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(mms):
            torch.mm(a, b, out=c)
        end.record()
        t0 = time.perf_counter()
        calls(state)
        cpu_ms = (time.perf_counter() - t0) * 1e3
        busy = not end.query()  # the calls must end while the matmuls run
        end.synchronize()
        for h, k, pages in state["handles"]:
            unmap_pages(k, pages)
            state["loose"].append(h)
        for h in state["loose"]:
            check(cu.cuMemRelease(h), "release")
        return start.elapsed_time(end), cpu_ms, busy

    rows = interleaved(kinds, args.rounds, one_round)
    base_ms = statistics.median(g for g, _, _ in rows["none"])
    print(f"device {torch.cuda.get_device_name()}; {mms} matmuls of 4096^2 bf16 a round ({base_ms:.0f} ms of GPU "
          f"work without calls); {n} items (calls, or create+map+access groups) a round; medians of {args.rounds} interleaved rounds")
    print(f"{'kind':40s} {'GPU ms':>8s} {'GPU ms lost':>11s} {'us lost/item':>12s} {'CPU us/item':>11s}  calls ended first")
    for kind, rs in rows.items():
        g = statistics.median(x for x, _, _ in rs)
        cpu = statistics.median(x for _, x, _ in rs)
        first = sum(1 for _, _, busy in rs if busy)
        print(f"{kind:40s} {g:8.1f} {g - base_ms:11.1f} {(g - base_ms) * 1e3 / n:12.1f} {cpu * 1e3 / n:11.1f}  "
              f"{first}/{len(rs)}")
    check(cu.cuMemAddressFree(base, ctypes.c_size_t(span)), "address free")


if __name__ == "__main__":
    main()
