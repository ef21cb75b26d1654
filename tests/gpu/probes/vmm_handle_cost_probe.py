"""What does a page cost the CPU, by how it is laid out in handles and mappings?

    python3 tests/gpu/probes/vmm_handle_cost_probe.py [--groups 100] [--rounds 5]     (a GPU machine with torch)

vmm_stall_probe.py showed that the driver's CPU cost goes by handle, not by
byte: an access grant over ten one-page handles costs about ten times one
over a ten-page handle. cuMemMap can map a part of a handle at an offset, so
a ten-page handle can also be mapped as ten one-page mappings, which would
let its pages move one by one. This times, while about a second of bf16
matmuls is queued (the H100's driver is 4-7x slower then), groups of ten
pages laid out as: ten one-page handles; one ten-page handle mapped once;
one ten-page handle mapped page by page. For each layout: growing (create,
map, one access grant over the ten pages), granting again, unmapping page by
page and in one call over the ten pages (the call may be refused where the
range spans several mappings: the result says so), and moving one page
(map at a new address, grant there, unmap the old address). It also checks
that a page mapped from a handle's offset holds its data through a second
address, and how much device memory a handle holds once all but one of its
pages are unmapped.
"""
import argparse
import ctypes
import statistics
import time

import torch
from vmm_sync_probe import check, cu, interleaved, matmul_batch, page_calls, reserve

GROUP = 10  # pages a group


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--groups", type=int, default=100, help="groups of ten pages a round (100)")
    ap.add_argument("--rounds", type=int, default=5, help="rounds of every kind, interleaved (5)")
    args = ap.parse_args()
    torch.cuda.init()
    n = args.groups
    prop, access, page, base = reserve(torch.cuda.current_device(), 2 * GROUP * n)  # the second half: moves' targets

    addr, create, map_at, grant, unmap = page_calls(prop, access, page, base)

    # A group's layout: its handles, and its mappings as (first page, pages, handle index, offset in pages).
    def lay_out(layout, g, state):
        k = g * GROUP
        if layout == "10 one-page handles":
            hs = [create(1) for _ in range(GROUP)]
            maps = [(k + i, 1, i, 0) for i in range(GROUP)]
        else:
            hs = [create(GROUP)]
            maps = [(k, GROUP, 0, 0)] if layout == "1 handle, 1 mapping" else [(k + i, 1, 0, i) for i in range(GROUP)]
        for first, pages, hi, off in maps:
            map_at(first, pages, hs[hi], off)
        grant(k, GROUP)
        state["groups"].append((hs, maps))

    layouts = ["10 one-page handles", "1 handle, 1 mapping"]
    head = offset_map_refused(create, addr, page, 0)
    print(f"cuMemMap of page 0 only of a {GROUP}-page handle: {'refused, CUresult %d' % head if head else 'mapped'}")
    refused = offset_map_refused(create, addr, page, 1)
    if refused:
        print(f"cuMemMap of page 1 of a {GROUP}-page handle (offset 1 page, size 1 page): refused, CUresult {refused}; "
              "the page-by-page layout is left out")
    else:
        layouts.append("1 handle, 10 mappings")

    def grow(layout):
        return lambda state: [lay_out(layout, g, state) for g in range(n)]

    def regrant(state):
        for g in range(n):
            grant(g * GROUP, GROUP)

    def unmap_each(state):
        for hs, maps in state["groups"]:
            for first, pages, _, _ in maps:
                unmap(first, pages)
        state["groups"] = [(hs, []) for hs, _ in state["groups"]]

    def unmap_whole(state):
        for i, (hs, maps) in enumerate(state["groups"]):
            r = cu.cuMemUnmap(addr(maps[0][0]), ctypes.c_size_t(GROUP * page))
            if r != 0:
                state["refused"] = r
                return
            state["groups"][i] = (hs, [])

    def move_one(state):
        for i, (hs, maps) in enumerate(state["groups"]):
            first, pages, hi, off = maps[-1]
            target = GROUP * n + first
            if pages == 1:
                map_at(target, 1, hs[hi], off)
                grant(target, 1)
                unmap(first, 1)
                maps[-1] = (target, 1, hi, off)

    kinds = {"none": {}}
    for layout in layouts:
        kinds[f"grow: {layout}"] = {"timed": grow(layout)}
        kinds[f"grant again: {layout}"] = {"setup": grow(layout), "timed": regrant}
        kinds[f"unmap page by page: {layout}"] = {"setup": grow(layout), "timed": unmap_each}
        kinds[f"unmap in one call: {layout}"] = {"setup": grow(layout), "timed": unmap_whole}
        if layout != "1 handle, 1 mapping":
            kinds[f"move one page: {layout}"] = {"setup": grow(layout), "timed": move_one}

    a, b, c, mms = matmul_batch()

    def one_round(kind):
        spec = kinds[kind]
        state = {"groups": []}
        if "setup" in spec:
            spec["setup"](state)
        torch.cuda.synchronize()
        end = torch.cuda.Event()
        for _ in range(mms):
            torch.mm(a, b, out=c)
        end.record()
        t0 = time.perf_counter()
        if "timed" in spec:
            spec["timed"](state)
        cpu_ms = (time.perf_counter() - t0) * 1e3
        busy = not end.query()
        end.synchronize()
        for hs, maps in state["groups"]:
            for first, pages, _, _ in maps:
                unmap(first, pages)
            for h in hs:
                check(cu.cuMemRelease(h), "release")
        return cpu_ms, busy, state.get("refused")

    rows = interleaved(kinds, args.rounds, one_round)
    print(f"device {torch.cuda.get_device_name()}; {mms} matmuls of 4096^2 bf16 queued a round; {n} groups of "
          f"{GROUP} pages of {page >> 20} MiB a round; medians of {args.rounds} interleaved rounds")
    print(f"{'kind':48s} {'CPU us/group':>12s} {'CPU us/page':>11s}  calls ended first  refused")
    for kind, rs in rows.items():
        cpu = statistics.median(x for x, _, _ in rs)
        first = sum(1 for _, busy, _ in rs if busy)
        codes = {r for _, _, r in rs if r}
        print(f"{kind:48s} {cpu * 1e3 / n:12.1f} {cpu * 1e3 / n / GROUP:11.1f}  {first}/{len(rs)}  "
              f"{'CUresult ' + ','.join(map(str, codes)) if codes else '-'}")
    if not refused:
        check_offsets(page, create, map_at, grant, addr, unmap)
    check(cu.cuMemAddressFree(base, ctypes.c_size_t(2 * GROUP * n * page)), "address free")


def offset_map_refused(create, addr, page, offset_pages):
    """The CUresult of mapping one page of a larger handle, at that offset (0: mapped)."""
    h = create(GROUP)
    r = cu.cuMemMap(addr(0), ctypes.c_size_t(page), ctypes.c_size_t(offset_pages * page), h, ctypes.c_uint64(0))
    if r == 0:
        check(cu.cuMemUnmap(addr(0), ctypes.c_size_t(page)), "unmap")
    check(cu.cuMemRelease(h), "release")
    return r


def check_offsets(page, create, map_at, grant, addr, unmap):
    """Page 3 of a ten-page handle mapped at two addresses reads the same data; memory held after unmapping."""
    free0, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(cu.cuMemGetInfo_v2(ctypes.byref(free0), ctypes.byref(total)), "mem info")
    h = create(GROUP)
    for i in range(GROUP):
        map_at(i, 1, h, i)
    grant(0, GROUP)
    map_at(GROUP, 1, h, 3)
    grant(GROUP, 1)
    check(cu.cuMemsetD32_v2(addr(3), ctypes.c_uint(0xC0FFEE), ctypes.c_size_t(page // 4)), "memset")
    out = (ctypes.c_uint * 4)()
    check(cu.cuCtxSynchronize(), "sync")
    check(cu.cuMemcpyDtoH_v2(out, addr(GROUP), ctypes.c_size_t(16)), "copy")
    same = all(x == 0xC0FFEE for x in out)
    for i in range(GROUP):
        unmap(i, 1)
    check(cu.cuMemRelease(h), "release")
    free1 = ctypes.c_size_t()
    check(cu.cuMemGetInfo_v2(ctypes.byref(free1), ctypes.byref(total)), "mem info")
    unmap(GROUP, 1)
    free2 = ctypes.c_size_t()
    check(cu.cuMemGetInfo_v2(ctypes.byref(free2), ctypes.byref(total)), "mem info")
    print(f"page 3 of a {GROUP}-page handle read through a second address: {'same data' if same else 'DIFFERENT'}; "
          f"device memory held with one page of it still mapped, the handle released: "
          f"{(free0.value - free1.value) >> 20} MiB; after its last unmap: {(free0.value - free2.value) >> 20} MiB")


if __name__ == "__main__":
    main()
