"""The hot path through torch's allocator interface, in one process: xsalloc's C++ adapter against torch's
CUDAPluggableAllocator over xsalloc's entry points, both over one libxsalloc.so.

    XSALLOC_LIBRARY=.../libxsalloc.so python3 benchmarks/gpu/adapter_ab.py [--rounds 100] [--batch 20000] [--conf STR]

Design: adapter_ab.cpp does the calls and the timing; this script installs the
adapter (xsalloc.torch.use, before CUDA starts), compiles adapter_ab.cpp with
torch.utils.cpp_extension.load as xsalloc.torch compiles the adapter, hands it
the addresses of xsa_torch_malloc/free (what use(adapter=False) hands torch),
warms every case up over each chunk of the window sequence, runs the rounds
and reports, per way and pattern, each side's median ns and the median and
range of the per-round ratio adapter / pluggable: a markdown table, then one
JSON line per case. "Driver calls" are the timed calls that went to the driver
(device allocations and recycled pages): the patterns time cache hits. torch's
native allocator cannot run in this process (the adapter replaces it before
CUDA starts); benchmarks/gpu/compare.sh times it.
"""
import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHUNKS = 8  # adapter_ab.cpp's kChunks
LIVE = 2 * 2 * 64  # sides x ways x slots: the window's blocks a Bench holds
WAYS = {"tensor": "tensor: allocate + DataPtr deleter", "raw": "raw: raw_alloc_with_stream + raw_delete"}
PATTERNS = {"pair": "pair: alloc 1 MiB + free (ns a pair)", "window": "64 live slots, 512 B-64 MiB (ns an op)"}


def driver_calls(stats):
    return stats["num_device_alloc"] + stats["num_pages_recycled"]


def run(args):
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import torch
    import xsalloc
    import xsalloc.torch
    from torch.utils import cpp_extension

    xsalloc.torch.use(conf=args.conf, adapter=True)
    torch.empty(1, device="cuda")  # CUDA and the adapter initialised
    ext = cpp_extension.load(name="xsalloc_adapter_ab", sources=[os.path.join(HERE, "adapter_ab.cpp")],
                             extra_include_paths=[ROOT], extra_cflags=["-O2"], with_cuda=True, verbose=False)
    lib = xsalloc.load()
    live = xsalloc.memory_stats(0)["allocation.all.current"]
    bench = ext.Bench(lib.address("xsa_torch_malloc"), lib.address("xsa_torch_free"), args.batch)
    if xsalloc.memory_stats(0)["allocation.all.current"] - live != LIVE:
        sys.exit("adapter_ab: the adapter and the pluggable entry points do not share one libxsalloc.so")
    for r in range(CHUNKS):
        bench.round(r)
    ghz = [ext.core_ghz()]
    before = driver_calls(xsalloc.memory_stats(0))
    rounds = [bench.round(r) for r in range(args.rounds)]
    calls = driver_calls(xsalloc.memory_stats(0)) - before
    ghz.append(ext.core_ghz())
    bench.close()
    if xsalloc.memory_stats(0)["allocation.all.current"] != live:
        sys.exit("adapter_ab: blocks left live after close()")
    return rounds, calls, ghz


def report(args, rounds, calls, ghz):
    print(f"Hot path through torch's CUDAAllocator interface, one process, conf '{args.conf}': "
          f"{args.rounds} rounds of {args.batch}, sides interleaved, medians\n")
    print("| way | pattern | adapter ns | pluggable ns | adapter / pluggable (range) |")
    print("|---|---|---:|---:|---|")
    lines, met = [], 0
    for way, way_text in WAYS.items():
        for pattern, pattern_text in PATTERNS.items():
            a = [r[f"{way} {pattern} adapter"] for r in rounds]
            p = [r[f"{way} {pattern} pluggable"] for r in rounds]
            ratio = [x / y for x, y in zip(a, p)]
            row = {"bench": "adapter_ab", "way": way, "pattern": pattern,
                   "adapter_ns": round(statistics.median(a), 1), "pluggable_ns": round(statistics.median(p), 1),
                   "ratio": round(statistics.median(ratio), 4), "ratio_min": round(min(ratio), 4),
                   "ratio_max": round(max(ratio), 4), "rounds": args.rounds, "batch": args.batch,
                   "conf": args.conf, "driver_calls": calls, "core_ghz": [round(g, 2) for g in ghz]}
            met += row["ratio"] <= 1
            print(f"| {way_text} | {pattern_text} | {row['adapter_ns']:.0f} | {row['pluggable_ns']:.0f} | "
                  f"{row['ratio']:.3f} ({row['ratio_min']:.3f}-{row['ratio_max']:.3f}) |")
            lines.append(json.dumps(row))
    print(f"\nThe adapter costs no more than the pluggable path in {met} of {len(lines)} cases (median ratio <= 1). "
          f"Timed calls that went to the driver: {calls}. Core clock: {ghz[0]:.2f} GHz before, {ghz[1]:.2f} after.\n")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=100)
    p.add_argument("--batch", type=int, default=20000, help="calls a case times per round")
    p.add_argument("--conf", default="expandable_segments:True,page_recycling:False",
                   help="xsalloc's settings (inproc_ab.c's default: expandable segments, no page recycling)")
    args = p.parse_args()
    if args.rounds < 1 or args.batch < 1:
        p.error("--rounds and --batch must be at least 1")
    report(args, *run(args))


if __name__ == "__main__":
    main()
