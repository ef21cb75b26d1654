"""Pause and resume on a GPU through torch (issue 32's H100 cases), each
case in its own process (run by tests/gpu/run_pause_check.sh):

- running: a kernel still runs on a side stream over tagged memory (the
  segment's stream), another over it on a stream recorded with
  record_stream, and a third on an unrelated stream; the pause waits for
  the first two (no illegal address, the values they wrote are backed up)
  and not for the third.
- oom: resume while another tensor holds the memory the paused tag needs:
  the error is raised and nothing is lost; once that tensor is freed the
  resume succeeds with every byte back.
- free: tensors of a paused tag are freed (one backed up): the paused
  bytes drop, and the resume maps only what is still live.
- graph: a CUDA graph captured into a tagged pool; pausing releases its
  memory (the device's free memory grows by it) and after the resume the
  graph replays with the right result.
- bandwidth: backup and restore GiB/s of 8 GiB of tensors, beside a plain
  pinned copy_ of the same bytes.

Tags go on through the C API (ctypes): a thread's tag region
(xsa_tag_region_begin) catches torch's allocations made through the
adapter; a graph's pool is tagged with xsa_mempool_set_tag right after its
capture begins. Prints one JSON line: {"case", "ok", "detail"}.
"""
import argparse
import ctypes
import json
import sys
import time

import torch

import xsalloc
import xsalloc.torch
from xsalloc import _lib

GiB = 1 << 30
MiB = 1 << 20
TAG_CPU_BACKUP = 0x1


class MempoolId(ctypes.Structure):
    _fields_ = [("first", ctypes.c_uint64), ("second", ctypes.c_uint64)]


def c():
    lib = _lib.load().cdll
    lib.xsa_tag_region_begin.argtypes = [ctypes.c_char_p, ctypes.c_uint]
    lib.xsa_pause.argtypes = [ctypes.c_char_p, ctypes.c_uint]
    lib.xsa_resume.argtypes = [ctypes.c_char_p]
    lib.xsa_paused_bytes.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(ctypes.c_size_t)]
    lib.xsa_mempool_set_tag.argtypes = [ctypes.c_int, MempoolId, ctypes.c_char_p, ctypes.c_uint]
    return lib


def call(fn, *args):
    st = fn(*args)
    if st != 0:
        raise xsalloc.XsallocError(st, _lib.load().last_error())


class region:
    def __init__(self, tag, flags=0):
        self.tag, self.flags = tag.encode(), flags

    def __enter__(self):
        call(c().xsa_tag_region_begin, self.tag, self.flags)

    def __exit__(self, *exc):
        call(c().xsa_tag_region_end)


def pause(tag, flags=0):
    call(c().xsa_pause, tag.encode() if tag else None, flags)


def resume(tag):
    call(c().xsa_resume, tag.encode() if tag else None)


def paused_bytes(tag=None):
    n = ctypes.c_size_t()
    call(c().xsa_paused_bytes, 0, tag.encode() if tag else None, ctypes.byref(n))
    return n.value


def used():
    free, total = torch.cuda.mem_get_info()
    return total - free


def case_running():
    side, other, third = torch.cuda.Stream(), torch.cuda.Stream(), torch.cuda.Stream()
    with torch.cuda.stream(side), region("kv", TAG_CPU_BACKUP):
        x = torch.zeros(64 * MiB, dtype=torch.float32, device="cuda")  # 256 MiB, its segment on `side`
    y = torch.zeros(256, 1024, 1024, dtype=torch.float32, device="cuda")
    with region("kv", TAG_CPU_BACKUP):
        z = torch.zeros(32 * MiB, dtype=torch.float32, device="cuda")  # default stream's segment
    torch.cuda.synchronize()
    cycles = int(1.5e9)  # about a second at H100 clocks
    with torch.cuda.stream(side):
        torch.cuda._sleep(cycles)
        x.add_(1)
    other.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(other):
        torch.cuda._sleep(cycles)
        z.add_(2)
    z.record_stream(other)
    with torch.cuda.stream(third):
        torch.cuda._sleep(3 * cycles)
        y.add_(3)
    t0 = time.perf_counter()
    pause("kv")
    paused_s = time.perf_counter() - t0
    third_done = third.query()
    resume("kv")
    torch.cuda.synchronize()
    ok = bool((x == 1).all()) and bool((z == 2).all()) and not third_done and paused_s > 0.5
    return ok, f"pause took {paused_s:.2f} s (waited for the kv streams' kernels), unrelated stream still busy: {not third_done}, values kept: x {bool((x == 1).all())} z {bool((z == 2).all())}"


def case_oom():
    free, total = torch.cuda.mem_get_info()
    with region("weights", TAG_CPU_BACKUP):
        w = torch.arange(2 * GiB // 4, dtype=torch.int32, device="cuda")
    pause("weights")
    free_now, _ = torch.cuda.mem_get_info()
    hog = torch.empty(free_now - GiB, dtype=torch.uint8, device="cuda")
    try:
        resume("weights")
        return False, "resume succeeded with the memory taken"
    except xsalloc.XsallocError as e:
        err = str(e)
    still = paused_bytes("weights")
    del hog
    torch.cuda.empty_cache()
    resume("weights")
    intact = bool((w == torch.arange(2 * GiB // 4, dtype=torch.int32, device="cuda")).all())
    return (still >= 2 * GiB and intact and "stays paused" in err), \
        f"resume refused: '{err[:90]}...'; paused bytes kept {still / GiB:.2f} GiB; after freeing, resume ok and intact: {intact}"


def case_free():
    with region("kv", TAG_CPU_BACKUP):
        a = torch.ones(256 * MiB, dtype=torch.uint8, device="cuda")
        b = torch.full((512 * MiB,), 7, dtype=torch.uint8, device="cuda")
    pause("kv")
    before = paused_bytes("kv")
    del a
    after = paused_bytes("kv")
    u = used()
    resume("kv")
    grew = used() - u
    ok = before >= 768 * MiB and before - after >= 256 * MiB and grew <= 512 * MiB + 4 * MiB and bool((b == 7).all())
    return ok, f"paused {before / MiB:.0f} MiB, after freeing 256 MiB of it {after / MiB:.0f} MiB; resume mapped {grew / MiB:.0f} MiB; b intact {bool((b == 7).all())}"


def case_graph():
    static_in = torch.ones(1024, device="cuda")
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        (static_in * 2).sum()
    torch.cuda.current_stream().wait_stream(s)
    pid = torch.cuda.graph_pool_handle()  # g.pool() answers only after the capture
    with torch.cuda.graph(g, pool=pid):
        call(c().xsa_mempool_set_tag, torch.cuda.current_device(), MempoolId(*pid), b"graph", 0)
        big = torch.ones(512 * MiB, device="cuda")  # 2 GiB of intermediates
        out = (big * static_in.sum()).sum() + static_in.sum()
        del big
    g.replay()
    torch.cuda.synchronize()
    want = 512 * MiB * 1024 + 1024
    first = out.item()
    u = used()
    pause("graph")
    released = u - used()
    resume("graph")
    static_in.fill_(2)
    g.replay()
    torch.cuda.synchronize()
    again = out.item()
    close = lambda a, b: abs(a - b) <= 1e-6 * b  # noqa: E731  (float32 sums of 2^29 terms)
    ok = close(first, want) and close(again, 512 * MiB * 2048 + 2048) and released >= 2 * GiB
    return ok, f"graph pool released {released / GiB:.2f} GiB on pause; replay before {first:.0f} after {again:.0f}"


def case_bandwidth():
    n = 8
    with region("weights", TAG_CPU_BACKUP):
        ts = [torch.full((GiB,), i, dtype=torch.uint8, device="cuda") for i in range(n)]
    host = torch.empty(n * GiB, dtype=torch.uint8, pin_memory=True)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for i, t in enumerate(ts):
        host[i * GiB:(i + 1) * GiB].copy_(t, non_blocking=True)
    torch.cuda.synchronize()
    copy = n / (time.perf_counter() - t0)
    del host
    lib = c()

    def cycles(k):
        times = []
        for _ in range(k):
            t0 = time.perf_counter()
            pause("weights")
            t1 = time.perf_counter()
            resume("weights")
            times.append((n / (t1 - t0), n / (time.perf_counter() - t1)))
        return times

    fresh = cycles(3)  # no retention: each pause takes (pins) new host memory
    call(lib.xsa_set_backup_retention, 1)
    kept = cycles(4)[1:]  # retention: the first pinned, the rest refresh in place
    call(lib.xsa_set_backup_retention, 0)
    ok = all(bool((t[::4096] == i).all()) for i, t in enumerate(ts))
    best = max(kept)
    ok = ok and best[0] >= 0.8 * copy
    fmt = lambda ts_: ", ".join(f"{a:.1f}/{b:.1f}" for a, b in ts_)  # noqa: E731
    return ok, (f"pinned copy_ {copy:.1f} GiB/s; pause/resume GiB/s, new host memory each cycle: {fmt(fresh)}; "
                f"retained host memory: {fmt(kept)} (backup at {100 * best[0] / copy:.0f}% of copy_)")


CASES = {"running": case_running, "oom": case_oom, "free": case_free, "graph": case_graph, "bandwidth": case_bandwidth}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", required=True, choices=sorted(CASES))
    args = ap.parse_args()
    xsalloc.torch.use(adapter=True)
    try:
        ok, detail = CASES[args.case]()
    except Exception as e:  # noqa: BLE001
        ok, detail = False, f"{type(e).__name__}: {e}"
    print(json.dumps({"case": args.case, "ok": ok, "detail": detail}), flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
