"""PyTorch's side of benchmarks/gpu/compare.sh, and its results table.

    torch_bench.py replay --mode NAME TRACE     one JSON line: peak allocated/reserved
    torch_bench.py hotpath --mode NAME --ops N [--with-async]
    torch_bench.py table RESULTS.jsonl          the comparison table

Design: PyTorch reads PYTORCH_CUDA_ALLOC_CONF once per process, so
compare.sh runs one process per configuration and this script only reports
(--mode is the label it reports under). A replay drives
torch.cuda.caching_allocator_alloc/delete on the current stream, as the
figures of benchmarks/traces/README.md were taken. The hot path goes
through the C++ entry points (hotpath_ext.cpp): built with
torch.utils.cpp_extension.load_inline, or, where that cannot build (no
ninja), with g++ into a plain shared library loaded through ctypes.
"""

import argparse
import ctypes
import gzip
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))  # where "benchmarks/timing.h" resolves
GB = 1e9

# benchmarks/traces/README.md: PyTorch 2.11 on an H100.
README_REPLAY = {
    ("gpt2_varlen", "native"): (36.58, 1.605),
    ("gpt2_varlen", "expandable"): (24.57, 1.079),
    ("resnet_varbatch", "native"): (5.78, 1.417),
    ("resnet_varbatch", "expandable"): (4.13, 1.015),
}
README_ASYNC_RATIO = {"gpt2_varlen": 1.084, "resnet_varbatch": 1.014}
README_HOTPATH = {"native": (531, 947), "expandable": (788, 1239), "cudaMallocAsync": (1658, 2854)}


def trace_name(path):
    base = os.path.basename(path)
    return base[: -len(".trace.gz")] if base.endswith(".trace.gz") else base


def read_trace(path):
    """(kind, id, bytes) tuples; exits with status 3 on a multi-stream trace."""
    events = []
    with gzip.open(path, "rt") as f:
        for n, line in enumerate(f, 1):
            parts = line.split()
            if not parts or parts[0].startswith("#"):
                continue
            if parts[0] == "r" or (parts[0] == "a" and parts[3] != "0"):
                print(f"torch_bench: {path}:{n}: multi-stream traces are not replayed", file=sys.stderr)
                sys.exit(3)
            events.append((parts[0], int(parts[1]), int(parts[2]) if parts[0] == "a" else 0))
    return events


def replay(args):
    import torch

    events = read_trace(args.trace)
    torch.cuda.init()
    alloc, delete = torch.cuda.caching_allocator_alloc, torch.cuda.caching_allocator_delete
    live = {}
    t0 = time.perf_counter()
    for kind, ident, size in events:
        if kind == "a":
            live[ident] = alloc(size) if size else 0
        else:
            ptr = live.pop(ident)
            if ptr:
                delete(ptr)
    elapsed = time.perf_counter() - t0
    peak_alloc, peak_resv = torch.cuda.max_memory_allocated(), torch.cuda.max_memory_reserved()
    for ptr in live.values():
        if ptr:
            delete(ptr)
    print(json.dumps({
        "kind": "replay", "tool": "torch", "mode": args.mode, "trace": trace_name(args.trace),
        "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""), "events": len(events),
        "peak_allocated": peak_alloc, "peak_reserved": peak_resv,
        "ratio": peak_resv / peak_alloc if peak_alloc else 0.0,
        "ns_per_event_python": elapsed * 1e9 / max(len(events), 1),
    }))


def build_ext(build_dir):
    """xsa_bench(pattern, backend, ops) from hotpath_ext.cpp."""
    import torch.utils.cpp_extension as ext

    src_path = os.path.join(HERE, "hotpath_ext.cpp")
    with open(src_path) as f:
        src = f.read()
    try:
        mod = ext.load_inline(name="xsa_hotpath_ext", cpp_sources=[src], functions=["xsa_bench"],
                              with_cuda=True, build_directory=build_dir, extra_cflags=["-O2"],
                              extra_include_paths=[ROOT], verbose=False)
        return mod.xsa_bench
    except Exception as e:  # typically: ninja is missing
        print(f"torch_bench: load_inline failed ({str(e).splitlines()[0] if str(e) else e}); "
              "building with g++ and ctypes", file=sys.stderr)
    return build_ext_gxx(src_path, build_dir)


def loaded_cudart():
    """The libcudart torch loaded, so the ctypes library shares it."""
    with open("/proc/self/maps") as f:
        for line in f:
            path = line.split()[-1]
            if "libcudart.so" in path:
                return ["-Wl,-rpath," + os.path.dirname(path), path]
    return ["-L/usr/local/cuda/lib64", "-Wl,-rpath,/usr/local/cuda/lib64", "-lcudart"]


def build_ext_gxx(src_path, build_dir):
    import torch
    import torch.utils.cpp_extension as ext

    torch.cuda.init()
    lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
    out = os.path.join(build_dir, "libxsa_hotpath_ext.so")
    cmd = (["g++", "-O2", "-shared", "-fPIC", "-std=c++17",
            f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
            src_path, "-o", out, "-I/usr/local/cuda/include", "-I" + ROOT]
           + ["-I" + p for p in ext.include_paths()]
           + [f"-L{lib_dir}", f"-Wl,-rpath,{lib_dir}", "-lc10", "-lc10_cuda"] + loaded_cudart())
    subprocess.run(cmd, check=True)
    fn = ctypes.CDLL(out).xsa_bench
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_int, ctypes.c_int, ctypes.c_int64]
    return fn


def hotpath(args):
    import torch

    torch.cuda.init()
    torch.empty(1, device="cuda")  # creates the context and the allocator
    os.makedirs(args.build_dir, exist_ok=True)
    bench = build_ext(args.build_dir)
    backends = [(args.mode, 0)] + ([("cudaMallocAsync", 1)] if args.with_async else [])
    for label, backend in backends:
        pair, slots = bench(0, backend, args.ops), bench(1, backend, args.ops)
        if pair < 0 or slots < 0:
            sys.exit(f"torch_bench: hot path through {label} failed")
        print(json.dumps({"kind": "hotpath", "tool": "torch", "mode": label, "ops": args.ops,
                          "conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                          "pair_ns": pair, "slots_ns": slots}))


def fmt_gb(r):
    return f"{r['peak_allocated'] / GB:7.2f} | {r['peak_reserved'] / GB:7.2f} | {r['ratio']:6.3f}"


def replay_table(rows):
    print("| trace | allocator | peak alloc GB | peak resv GB | ratio | README (PyTorch 2.11, H100) |")
    print("|---|---|---:|---:|---:|---|")
    for trace in sorted({r["trace"] for r in rows}):
        seen = set()
        for r in [r for r in rows if r["trace"] == trace]:
            if (r["tool"], r["mode"]) in seen:
                continue  # repeated timing runs: the peaks are the same
            seen.add((r["tool"], r["mode"]))
            ref = README_REPLAY.get((trace, "native" if r["mode"] == "classic" else
                                     "expandable" if r["mode"] == "recycling" else r["mode"]))
            ref_s = f"{ref[0]:.2f} GB, {ref[1]:.3f}" if ref else "-"
            print(f"| {trace} | {r['tool']} {r['mode']} | {fmt_gb(r)} | {ref_s} |")
        if trace in README_ASYNC_RATIO:
            print(f"| {trace} | cudaMallocAsync (README, whole workload) | | | "
                  f"{README_ASYNC_RATIO[trace]:.3f} | |")


def replay_time_table(rows):
    """xsalloc's replay time per mode: the median of the repeated runs
    (the host's driver call costs vary up to 2x between processes)."""
    ours = [r for r in rows if r["tool"] == "xsalloc"]
    print("| trace | runs | classic ns/event | expandable ns/event | recycling ns/event "
          "| recycling / expandable | pages moved |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for trace in sorted({r["trace"] for r in ours}):
        med, runs = {}, 0
        for mode in ("classic", "expandable", "recycling"):
            ns = [r["ns_per_event"] for r in ours if r["trace"] == trace and r["mode"] == mode]
            med[mode] = statistics.median(ns) if ns else float("nan")
            runs = max(runs, len(ns))
        moved = next((r["pages_recycled"] for r in ours
                      if r["trace"] == trace and r["mode"] == "recycling"), 0)
        print(f"| {trace} | {runs} | {med['classic']:.0f} | {med['expandable']:.0f} | "
              f"{med['recycling']:.0f} | {med['recycling'] / med['expandable']:.2f}x | {moved} |")


def hotpath_table(rows):
    """Median per allocator over the repeated processes; misses are the
    timed calls that went to the driver (xsalloc only)."""
    print("| allocator | runs | alloc 1 MiB + free (ns a pair) | 64 live slots (ns an op) "
          "| pair range | slots range | driver calls (pair / slots) | README pair / slots |")
    print("|---|---:|---:|---:|---|---|---|---|")
    keys = []
    for r in rows:
        if (r["tool"], r["mode"]) not in keys:
            keys.append((r["tool"], r["mode"]))
    for tool, mode in keys:
        rs = [r for r in rows if (r["tool"], r["mode"]) == (tool, mode)]
        pair = [r["pair_ns"] for r in rs]
        slots = [r["slots_ns"] for r in rs]
        ref = README_HOTPATH.get(mode if tool == "torch" else
                                 "native" if mode == "classic" else "expandable")
        misses = (f"{max(r['pair_misses'] for r in rs)} / {max(r['slots_misses'] for r in rs)}"
                  if all("pair_misses" in r for r in rs) else "")
        print(f"| {tool} {mode} | {len(rs)} | {statistics.median(pair):.0f} | "
              f"{statistics.median(slots):.0f} | {min(pair):.0f}-{max(pair):.0f} | "
              f"{min(slots):.0f}-{max(slots):.0f} | {misses} | {ref[0]} / {ref[1]} |")


def table(args):
    with open(args.results) as f:
        rows = [json.loads(line) for line in f if line.strip()]
    replays = [r for r in rows if r["kind"] == "replay"]
    hot = [r for r in rows if r["kind"] == "hotpath"]
    print("\n## Fragmentation (GB = 1e9 bytes; ratio = peak reserved / peak allocated)\n")
    replay_table(replays)
    print("\n## xsalloc replay time (median of the repeated runs, modes interleaved)\n")
    replay_time_table(replays)
    print("\n## Hot path (legacy default stream; each process: median of 7 runs after a warm-up; "
          "the table: median over the processes)\n")
    hotpath_table(hot)
    ours = [r for r in replays if r["tool"] == "xsalloc"]
    if ours:
        ns = statistics.median(r["ns_per_event"] for r in ours)
        drivers = ", ".join(sorted({r["driver"] for r in ours}))
        print(f"\nxsalloc replay cost: median {ns:.0f} ns an event over {len(ours)} replays "
              f"({drivers} driver).")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("replay")
    r.add_argument("--mode", required=True)
    r.add_argument("trace")
    h = sub.add_parser("hotpath")
    h.add_argument("--mode", required=True)
    h.add_argument("--ops", type=int, default=200000)
    h.add_argument("--with-async", action="store_true")
    h.add_argument("--build-dir", default="/tmp/xsa_hotpath_ext")
    t = sub.add_parser("table")
    t.add_argument("results")
    args = p.parse_args()
    {"replay": replay, "hotpath": hotpath, "table": table}[args.cmd](args)


if __name__ == "__main__":
    main()
