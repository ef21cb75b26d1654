"""Does a virtual-memory driver call wait for queued GPU work?

    python3 tests/gpu/probes/vmm_sync_probe.py        (a GPU machine with torch)

Page recycling maps, grants and unmaps pages while kernels are queued. If a
call waited for them, the CPU would lose its lead over the GPU at each one.
For each call (cuMemCreate, cuMemMap, cuMemSetAccess, cuMemUnmap,
cuMemRelease, and cuEventRecord + cuEventQuery for comparison) this times
the call with the GPU idle and with a ~0.5 s spin kernel queued on torch's
current stream (and on another stream), in a reservation of its own that no
kernel touches. A call that waits takes about the kernel's time. Calls go
straight to libcuda through ctypes, on the context torch made current.
"""
import ctypes
import statistics
import time

import torch

cu = ctypes.CDLL("libcuda.so.1")
MiB = 1 << 20


class Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class AllocFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class Prop(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", AllocFlags)]


class Access(ctypes.Structure):
    _fields_ = [("location", Location), ("flags", ctypes.c_int)]


def check(r, what):
    if r != 0:
        raise RuntimeError(f"{what} failed: CUresult {r}")


def reserve(dev, pages):
    """(prop, access, page, base): the properties of a pinned allocation on device dev, read/write
    access for it, its page size (the granularity) and a reservation of `pages` pages of its own."""
    prop = Prop(type=1, requestedHandleTypes=0, location=Location(1, dev))  # pinned, on the device
    access = Access(location=Location(1, dev), flags=3)  # read/write
    gran = ctypes.c_size_t()
    check(cu.cuMemGetAllocationGranularity(ctypes.byref(gran), ctypes.byref(prop), 0), "granularity")
    page = gran.value
    base = ctypes.c_uint64()
    check(cu.cuMemAddressReserve(ctypes.byref(base), ctypes.c_size_t(pages * page), ctypes.c_size_t(0),
                                 ctypes.c_uint64(0), ctypes.c_uint64(0)), "reserve")
    return prop, access, page, base


def matmul_batch(seconds=1.0):
    """(a, b, c, count): bf16 4096^2 operands, and how many torch.mm(a, b, out=c) make about `seconds` of
    GPU work, timed after a warm-up (cuBLAS's first calls set it up and would shorten the batch)."""
    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    b = torch.randn_like(a)
    c = torch.empty_like(a)
    for _ in range(5):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(50):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    return a, b, c, max(100, int(seconds / ((time.perf_counter() - t0) / 50)))


def interleaved(kinds, rounds, one_round):
    """{kind: [one_round(kind) of each round]}: every kind once a round, rounds + 1 rounds, the first
    only warming every path up."""
    rows = {k: [] for k in kinds}
    for r in range(rounds + 1):
        for kind in kinds:
            res = one_round(kind)
            if r:
                rows[kind].append(res)
    return rows


def page_calls(prop, access, page, base):
    """(addr, create, map_at, grant, unmap) over a reservation made by reserve(): page k's address; a
    handle of n pages; mapping a handle at page k (at an offset into it, which the driver may refuse);
    read/write access on pages [k, k+n); unmapping them. Each raises on a driver error."""
    def addr(k):
        return ctypes.c_uint64(base.value + k * page)

    def create(pages):
        h = ctypes.c_uint64()
        check(cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(pages * page), ctypes.byref(prop), ctypes.c_uint64(0)),
              "create")
        return h

    def map_at(k, pages, h, offset_pages=0):
        check(cu.cuMemMap(addr(k), ctypes.c_size_t(pages * page), ctypes.c_size_t(offset_pages * page), h,
                          ctypes.c_uint64(0)), "map")

    def grant(k, pages):
        check(cu.cuMemSetAccess(addr(k), ctypes.c_size_t(pages * page), ctypes.byref(access), ctypes.c_size_t(1)),
              "set access")

    def unmap(k, pages):
        check(cu.cuMemUnmap(addr(k), ctypes.c_size_t(pages * page)), "unmap")

    return addr, create, map_at, grant, unmap


def main():
    torch.cuda.init()
    torch.empty(1, device="cuda")
    dev = torch.cuda.current_device()
    prop, access, page, base = reserve(dev, 64)
    other = torch.cuda.Stream()
    ev = ctypes.c_void_p()
    check(cu.cuEventCreate(ctypes.byref(ev), 2), "event create")  # disable timing

    spin_cycles = int(0.5 * torch.cuda.get_device_properties(dev).clock_rate * 1000) if hasattr(
        torch.cuda.get_device_properties(dev), "clock_rate") else int(1e9)

    def one_round(queued, slot):
        """Times each call once; queued: None (idle), 'same' or 'other' stream spinning."""
        addr = ctypes.c_uint64(base.value + slot * page)
        h = ctypes.c_uint64()
        times = {}

        def timed(name, fn):
            if queued == "same":
                torch.cuda._sleep(spin_cycles)
            elif queued == "other":
                with torch.cuda.stream(other):
                    torch.cuda._sleep(spin_cycles)
            t0 = time.perf_counter()
            fn()
            times[name] = (time.perf_counter() - t0) * 1e6
            torch.cuda.synchronize()

        stream = ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)
        timed("cuMemCreate", lambda: check(cu.cuMemCreate(ctypes.byref(h), ctypes.c_size_t(page), ctypes.byref(prop),
                                                         ctypes.c_uint64(0)), "create"))
        timed("cuMemMap", lambda: check(cu.cuMemMap(addr, ctypes.c_size_t(page), ctypes.c_size_t(0), h,
                                                   ctypes.c_uint64(0)), "map"))
        timed("cuMemSetAccess", lambda: check(cu.cuMemSetAccess(addr, ctypes.c_size_t(page), ctypes.byref(access),
                                                               ctypes.c_size_t(1)), "set access"))
        timed("cuMemUnmap", lambda: check(cu.cuMemUnmap(addr, ctypes.c_size_t(page)), "unmap"))
        timed("cuMemRelease", lambda: check(cu.cuMemRelease(h), "release"))
        timed("cuEventRecord+Query", lambda: (check(cu.cuEventRecord(ev, stream), "record"), cu.cuEventQuery(ev)))
        return times

    print(f"device {torch.cuda.get_device_name()}, page {page // MiB} MiB, spin kernel ~0.5 s ({spin_cycles} cycles)")
    spin_t0 = time.perf_counter()
    torch.cuda._sleep(spin_cycles)
    torch.cuda.synchronize()
    print(f"spin kernel alone: {(time.perf_counter() - spin_t0) * 1e3:.0f} ms")
    for queued in (None, "same", "other"):
        rounds = [one_round(queued, i) for i in range(5)]
        cells = [f"{name} {statistics.median(r[name] for r in rounds):,.0f}" for name in rounds[0]]
        print(f"{'GPU idle' if queued is None else 'kernel queued on ' + queued + ' stream':28s} us (median of 5): "
              + ", ".join(cells))


if __name__ == "__main__":
    main()
