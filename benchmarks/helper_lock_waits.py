"""What the helper thread's rounds cost the allocating thread: a trace paced in real time, helper live.

    XSALLOC_LIBRARY=bazel-bin/api/libxsalloc.so python3 benchmarks/helper_lock_waits.py
        [--trace benchmarks/traces/llm_decode.trace.gz] [--events 60000] [--pace-us 50] [CONF ...]

Design: the simulated driver, the helper on its own thread and real clock
(not the replays' manual mode), and the trace's allocations and frees made
one by one from this thread, each followed by --pace-us of busy waiting
(the program's own work between allocator calls, so that decay's ticks
and the helper's rounds fall between and during them as in a real run).
For each XSALLOC_CONF string (default: the helper off, the helper alone,
the helper with decay) it prints the wall time, the time spent inside
xsa_malloc and xsa_free, and the calls that slept for the device's lock
and how long (num_device_lock_waits, device_lock_wait_us). The simulated
driver's calls take no time, and the helper makes its driver calls
outside the lock, so the waits are its planning and committing; each
configuration runs in a child process of its own.
"""
import argparse
import ctypes
import gzip
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFS = ("helper_thread:False", "helper_thread:True,page_decay_ms:0", "helper_thread:True,page_decay_ms:500")


def one(conf, trace, events, pace_us):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import xsalloc
    from xsalloc import _lib

    lib = _lib.load()
    lib.check(lib.cdll.xsa_use_driver(b"sim"), "xsa_use_driver")
    lib.check(lib.cdll.xsa_init(conf.encode()), "xsa_init")
    with gzip.open(trace, "rt") as f:
        lines = [line.split() for line in f]
    ptrs, inside, n = {}, 0.0, 0
    t_start = time.perf_counter()
    for p in lines:
        if n == events:
            break
        if not p or p[0] not in "af" or (p[0] == "f" and p[1] not in ptrs):
            continue
        t0 = time.perf_counter()
        if p[0] == "a":
            ptr = ctypes.c_void_p()
            stream = None if p[3] == "0" else ctypes.c_void_p(0x1000 + int(p[3]))  # as trace/replay.h numbers them
            lib.check(lib.cdll.xsa_malloc(ctypes.byref(ptr), ctypes.c_size_t(int(p[2])), 0, stream), "xsa_malloc")
            ptrs[p[1]] = ptr.value
        else:
            lib.check(lib.cdll.xsa_free(ctypes.c_void_p(ptrs.pop(p[1]))), "xsa_free")
        inside += time.perf_counter() - t0
        n += 1
        until = time.perf_counter() + pace_us / 1e6
        while time.perf_counter() < until:
            pass
    s = xsalloc.memory_stats(0)
    print(f"{conf:40s} {n} calls, {time.perf_counter() - t_start:.2f} s, inside xsalloc {inside * 1e3:.1f} ms, "
          f"{s['num_device_lock_waits']} lock waits, {s['device_lock_wait_us'] / 1e3:.2f} ms waited, "
          f"peak reserved {s['reserved_bytes.all.peak'] / 2**20:.0f} MiB", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trace", default=os.path.join(ROOT, "benchmarks/traces/llm_decode.trace.gz"))
    ap.add_argument("--events", type=int, default=60000, help="allocator calls made (60000)")
    ap.add_argument("--pace-us", type=float, default=50, help="busy time after each call (50)")
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)  # a child: one configuration
    ap.add_argument("confs", nargs="*", default=list(CONFS))
    args = ap.parse_args()
    if args.one:
        one(args.confs[0], args.trace, args.events, args.pace_us)
        return
    for conf in args.confs:
        subprocess.run([sys.executable, __file__, "--one", "--trace", args.trace, "--events", str(args.events),
                        "--pace-us", str(args.pace_us), conf], check=True, env=dict(os.environ, XSA_DRIVER="sim"))


if __name__ == "__main__":
    main()
