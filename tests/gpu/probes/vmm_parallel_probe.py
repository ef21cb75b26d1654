"""Do virtual-memory driver calls from several CPU threads at once take less wall time?

    python3 tests/gpu/probes/vmm_parallel_probe.py [--pages 400] [--rounds 3]     (a GPU machine with torch)

The driver's cost goes by handle (vmm_handle_cost_probe.py: about 50 us to
create, map and grant a one-page handle, 25 us to unmap one, while kernels
run), and a growth of many one-page handles pays it in a row on the thread
that asked for memory. If the driver does that work outside one global lock,
threads could share a growth. While about a second of bf16 matmuls is
queued, this times --pages one-page handles created, mapped and granted (one
grant per 10 pages), and then unmapped, by 1, 2, 4 and 8 threads each taking
an equal share of the pages (ctypes releases the GIL in a foreign call; each
thread makes torch's context current first). Wall ms of the whole batch,
medians of --rounds interleaved rounds.
"""
import argparse
import ctypes
import statistics
import threading
import time

import torch
from vmm_sync_probe import check, cu, interleaved, matmul_batch, page_calls, reserve

GRANT_EVERY = 10


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pages", type=int, default=400, help="one-page handles a batch (400)")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of every thread count, interleaved (3)")
    args = ap.parse_args()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    n = args.pages
    prop, access, page, base = reserve(torch.cuda.current_device(), n)
    _, create, map_at, grant, unmap = page_calls(prop, access, page, base)
    ctx = ctypes.c_void_p()
    check(cu.cuCtxGetCurrent(ctypes.byref(ctx)), "current context")

    a, b, c, mms = matmul_batch()

    def in_threads(threads, work):
        """Wall seconds of work(first, count) over [0, n) split among `threads` threads."""
        share = n // threads
        errors = []

        def run(first):
            try:
                check(cu.cuCtxSetCurrent(ctx), "set context")
                work(first, share)
            except Exception as e:  # reported after the join
                errors.append(e)

        ts = [threading.Thread(target=run, args=(i * share,)) for i in range(threads)]
        t0 = time.perf_counter()
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = time.perf_counter() - t0
        if errors:
            raise errors[0]
        return wall

    handles = [None] * n

    def grow(first, count):
        for k in range(first, first + count):
            handles[k] = create(1)
            map_at(k, 1, handles[k])
            if (k + 1 - first) % GRANT_EVERY == 0:
                grant(k + 1 - GRANT_EVERY, GRANT_EVERY)

    def shrink(first, count):
        for k in range(first, first + count):
            unmap(k, 1)

    def one_round(threads):
        end = torch.cuda.Event()
        for _ in range(mms):
            torch.mm(a, b, out=c)
        end.record()
        grow_s = in_threads(threads, grow)
        shrink_s = in_threads(threads, shrink)
        busy = not end.query()
        end.synchronize()
        for h in handles:
            check(cu.cuMemRelease(h), "release")
        return grow_s, shrink_s, busy

    rows = interleaved((1, 2, 4, 8), args.rounds, one_round)
    print(f"device {torch.cuda.get_device_name()}; {n} one-page handles of {page >> 20} MiB a batch, one grant per "
          f"{GRANT_EVERY} pages; {mms} matmuls queued a round; medians of {args.rounds} interleaved rounds")
    print(f"{'threads':>7s} {'grow ms':>8s} {'us/page':>8s} {'unmap ms':>9s} {'us/page':>8s}  calls ended first")
    for t, rs in rows.items():
        g = statistics.median(x for x, _, _ in rs) * 1e3
        s = statistics.median(x for _, x, _ in rs) * 1e3
        first = sum(1 for _, _, busy in rs if busy)
        print(f"{t:7d} {g:8.1f} {g * 1e3 / n:8.1f} {s:9.1f} {s * 1e3 / n:8.1f}  {first}/{len(rs)}")
    check(cu.cuMemAddressFree(base, ctypes.c_size_t(n * page)), "address free")


if __name__ == "__main__":
    main()
