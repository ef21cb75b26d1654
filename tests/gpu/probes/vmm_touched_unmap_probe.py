"""Does unmapping pages that kernels have used wait for the GPU's queued work, and hold up another thread?

    python3 tests/gpu/probes/vmm_touched_unmap_probe.py [--rounds 5] [--pages 16]     (a GPU machine with torch)

vmm_sync_probe.py found that no virtual-memory call waits for queued
kernels, but its pages were never touched by the GPU. Decay and page
recycling unmap pages the program's kernels used (their work done, as a
fence says), while the GPU runs other work. Here each round maps --pages
pages, has the GPU write them (cuMemsetD32Async), waits for that, queues
about 0.3 s of spin kernel on the current stream, and then times, with the
kernel still running: cuMemUnmap of the touched pages and cuMemRelease of
their handles on this thread; and, with the unmap and release made by a
second thread, how long this thread takes to launch 200 tiny kernels
(against 200 launches while the second thread does nothing). A call that
waits for the GPU takes about the spin's time; launches held up by it
take that long too. The same with pages the GPU never touched is the
control. Medians of --rounds rounds, interleaved.
"""
import argparse
import ctypes
import statistics
import threading
import time

import torch
from vmm_sync_probe import check, cu, interleaved, page_calls, reserve

SPIN_S = 0.3
LAUNCHES = 200


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--pages", type=int, default=16)
    args = ap.parse_args()
    torch.cuda.init()
    torch.empty(1, device="cuda")
    dev = torch.cuda.current_device()
    n = args.pages
    prop, access, page, base = reserve(dev, n)
    addr, create, map_at, grant, unmap = page_calls(prop, access, page, base)
    props = torch.cuda.get_device_properties(dev)
    spin_cycles = int(SPIN_S * getattr(props, "clock_rate", 1_500_000) * 1000)
    stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)

    def mapped(touched):
        handles = [create(1) for _ in range(n)]
        for k, h in enumerate(handles):
            map_at(k, 1, h)
        grant(0, n)
        if touched:
            check(cu.cuMemsetD32Async(addr(0), ctypes.c_uint(0x5A5A5A5A), ctypes.c_size_t(n * page // 4), stream),
                  "memset")
        torch.cuda.synchronize()  # the pages' own work is done, as decay's fence says
        return handles

    def release(handles):
        unmap(0, n)
        for h in handles:
            check(cu.cuMemRelease(h), "release")

    def one_round(kind):
        touched = kind.endswith("touched") and not kind.endswith("untouched")
        handles = mapped(touched)
        torch.cuda._sleep(spin_cycles)  # the GPU busy with other work
        res = {}
        if kind.startswith("here"):
            t0 = time.perf_counter()
            unmap(0, n)
            res["unmap_ms"] = (time.perf_counter() - t0) * 1e3
            t0 = time.perf_counter()
            for h in handles:
                check(cu.cuMemRelease(h), "release")
            res["release_ms"] = (time.perf_counter() - t0) * 1e3
        else:
            other = threading.Thread(target=release, args=(handles,)) if kind.startswith("thread") else None
            t0 = time.perf_counter()
            if other:
                other.start()
            for _ in range(LAUNCHES):
                torch.cuda._sleep(1)
            res["launches_ms"] = (time.perf_counter() - t0) * 1e3
            if other:
                other.join()
            else:
                release(handles)
        torch.cuda.synchronize()
        return res

    kinds = ["here untouched", "here touched", "launches, other thread idle", "thread untouched", "thread touched"]
    rows = interleaved(kinds, args.rounds, one_round)
    print(f"device {torch.cuda.get_device_name()}, {n} pages of {page >> 20} MiB, spin {SPIN_S} s queued; "
          f"medians of {args.rounds} rounds")
    for kind in kinds:
        cells = [f"{k} {statistics.median(r[k] for r in rows[kind]):.2f}" for k in rows[kind][0]]
        print(f"  {kind:28s} " + ", ".join(cells))
    base_ = ctypes.c_uint64(base.value)
    check(cu.cuMemAddressFree(base_, ctypes.c_size_t(n * page)), "address free")


if __name__ == "__main__":
    main()
