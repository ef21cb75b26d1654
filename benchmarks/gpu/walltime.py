"""Wall time of real workloads under PyTorch's allocators and xsalloc, interleaved, rounds spread over calls.

    walltime.py run [--rounds 8] [--results FILE] [--workloads W,...] [--allocs A,...] [--budget-s 540]
                    [--timeout 240]
    walltime.py table FILE
    walltime.py child --workload W --alloc A --out FILE

Design: each run is one child process (PyTorch reads its allocator
configuration once per process) that builds its workload
(real_workloads.py: models built in code, random data, fixed seeds) and
reports its median step time after warm-up: a CUDA event is recorded
after every step without synchronizing, so the CPU runs ahead of the GPU
as in training, and step i's time is the GPU's time between the events of
steps i-1 and i (what the GPU spent on the step, and any time it waited
for the CPU). The first quarter of the steps (at least 2) is warm-up. A
round runs every workload under every allocator, the allocators' order
rotated every round (and every workload), so a slow spell of the host
blurs them alike. Every result is appended to the results file as one
JSON line as soon as it is measured. --rounds is the number of rounds
wanted in the file: a call launches, in order, the runs the file lacks
(failed ones again) until --budget-s is spent, so that a session's
device time (about 30 minutes) holds part of them and the next call
with the same --results goes on where it stopped; then it prints the
table of everything in the file. `table` prints, per workload and allocator, the median of the
runs' medians with their min and max and how many runs, and each
allocator's median against the fastest of torch native and expandable
and against xsalloc with decay and the helper off.

Allocators: native (no PYTORCH_CUDA_ALLOC_CONF), expandable
(expandable_segments:True), xsalloc (xsalloc.torch.use(), its defaults),
xsalloc_off (helper_thread:False: no decay, no helper), xsalloc_decay
(helper_thread:True,page_decay_ms:500). Workloads: gpt2_200 (GPT-2 small,
200 steps), resnet (ResNet-50, 48 steps), loader_24 and loader_200 (the
side-stream data loader, 24 and 200 steps), llama_gen (Llama generation,
8 requests), moe (Mixtral-style MoE training, 40 steps).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))

# name: (real_workloads function, steps)
WORKLOADS = {
    "gpt2_200": ("gpt2", 200),
    "resnet": ("resnet", 48),
    "loader_24": ("multistream", 24),
    "loader_200": ("multistream", 200),
    "llama_gen": ("llama_gen", 8),
    "moe": ("moe", 40),
}
# name: (PYTORCH_CUDA_ALLOC_CONF, XSALLOC_CONF, xsalloc?)
ALLOCS = {
    "native": (None, None, False),
    "expandable": ("expandable_segments:True", None, False),
    "xsalloc": (None, None, True),
    "xsalloc_off": (None, "helper_thread:False", True),
    "xsalloc_decay": (None, "helper_thread:True,page_decay_ms:500", True),
}


def child(args):
    """Runs one workload under one allocator; writes one JSON object."""
    torch_conf, xsa_conf, use_xsalloc = ALLOCS[args.alloc]
    for var in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "XSALLOC_CONF", "XSALLOC_LAG_PROBE"):
        os.environ.pop(var, None)
    if torch_conf:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = torch_conf
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if use_xsalloc:
        sys.path.append(os.path.join(ROOT, "python"))
        import xsalloc.torch

        xsalloc.torch.use(conf=xsa_conf if xsa_conf else None)
    sys.path.insert(0, HERE)
    import real_workloads

    events = []

    def timed_steps(steps, step):  # real_workloads' own, with an event after every step
        torch.cuda.synchronize()
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        for i in range(steps):
            step(i)
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            events.append(e)
        torch.cuda.synchronize()
        events.insert(0, start)
        wall = time.perf_counter() - t0
        return {"wall_s": wall, "steady_s": wall}

    real_workloads.timed_steps = timed_steps
    fn, steps = WORKLOADS[args.workload]
    res = getattr(real_workloads, fn)(steps)
    times = [events[i - 1].elapsed_time(events[i]) / 1e3 for i in range(1, len(events))]
    warm = max(2, len(times) // 4)
    out = {"workload": args.workload, "alloc": args.alloc, "steps": steps, "median_step_s": statistics.median(times[warm:]),
           "wall_s": res["wall_s"], "impl": res["impl"], "device": torch.cuda.get_device_name(),
           "peak_reserved": torch.cuda.max_memory_reserved(), "peak_allocated": torch.cuda.max_memory_allocated()}
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, args.out)


def load(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    rows.append(json.loads(line))
    return rows


def run(args):
    workloads = [w for w in args.workloads.split(",") if w]
    allocs = [a for a in args.allocs.split(",") if a]
    bad = [w for w in workloads if w not in WORKLOADS] + [a for a in allocs if a not in ALLOCS]
    if bad or not workloads or not allocs:
        sys.exit(f"walltime: unknown or empty: {bad}; workloads {list(WORKLOADS)}, allocators {list(ALLOCS)}")
    done = {(r["round"], r["workload"], r["alloc"]) for r in load(args.results) if r.get("status") == "ok"}
    tmp_dir = os.path.dirname(os.path.abspath(args.results))
    start, launched, skipped = time.monotonic(), 0, 0
    for rnd in range(1, args.rounds + 1):
        for wi, w in enumerate(workloads):
            shift = (rnd + wi) % len(allocs)
            for a in allocs[shift:] + allocs[:shift]:
                if (rnd, w, a) in done:
                    continue
                if time.monotonic() - start > args.budget_s:
                    skipped += 1
                    continue
                out = os.path.join(tmp_dir, f".walltime-{os.getpid()}-{w}-{a}.json")
                cmd = [sys.executable, os.path.abspath(__file__), "child", "--workload", w, "--alloc", a, "--out", out]
                t0 = time.monotonic()
                try:
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
                    err = None if p.returncode == 0 else (p.stderr.strip().splitlines() or ["no output"])[-1][:300]
                except subprocess.TimeoutExpired:
                    err = f"timed out after {args.timeout} s"
                rec = {"round": rnd, "workload": w, "alloc": a, "child_s": round(time.monotonic() - t0, 1)}
                try:
                    with open(out) as f:
                        rec.update(json.load(f))
                    os.remove(out)
                    rec["status"] = "ok"
                except (OSError, ValueError):
                    rec.update(status="failed", error=err or "no result")
                with open(args.results, "a") as f:
                    f.write(json.dumps(rec) + "\n")
                launched += 1
                shown = f"{rec['median_step_s'] * 1e3:8.2f} ms a step" if rec["status"] == "ok" else f"FAILED: {rec['error']}"
                print(f"walltime [{time.monotonic() - start:4.0f}s] round {rnd} {w:10s} {a:14s} {shown}", flush=True)
    if skipped:
        print(f"walltime: budget of {args.budget_s:g} s spent: {skipped} runs not launched "
              "(run again with the same --results to go on)")
    table(args.results)


def table(path):
    rows = [r for r in load(path) if r.get("status") == "ok"]
    failed = [r for r in load(path) if r.get("status") != "ok"]
    if not rows:
        print("walltime: no results")
        return
    print(f"\nMedian step time after warm-up, median of the runs' medians [min-max] (n runs); {rows[0]['device']}")
    workloads = [w for w in WORKLOADS if any(r["workload"] == w for r in rows)]
    allocs = [a for a in ALLOCS if any(r["alloc"] == a for r in rows)]
    med = {}
    header = f"| {'workload':10s} | " + " | ".join(f"{a:>30s}" for a in allocs) + " |"
    print(header)
    print("|" + "-" * 12 + "|" + "|".join("-" * 32 for _ in allocs) + "|")
    for w in workloads:
        cells = []
        for a in allocs:
            v = [r["median_step_s"] * 1e3 for r in rows if r["workload"] == w and r["alloc"] == a]
            if not v:
                cells.append(f"{'-':>30s}")
                continue
            med[w, a] = statistics.median(v)
            cells.append(f"{med[w, a]:8.2f} ms [{min(v):.1f}-{max(v):.1f}] ({len(v)})".rjust(30))
        print(f"| {w:10s} | " + " | ".join(cells) + " |")
    print("\nxsalloc against the fastest of torch native and expandable, and against xsalloc_off (> 1.02: flagged)")
    for w in workloads:
        torch_best = min((med[w, a] for a in ("native", "expandable") if (w, a) in med), default=None)
        parts = []
        for a in ("xsalloc", "xsalloc_decay", "xsalloc_off"):
            if (w, a) not in med:
                continue
            s = f"{a} {med[w, a] / torch_best:.3f}x torch" if torch_best else a
            if a != "xsalloc_off" and (w, "xsalloc_off") in med:
                s += f", {med[w, a] / med[w, 'xsalloc_off']:.3f}x off"
            flag = torch_best and med[w, a] / torch_best > 1.02
            parts.append(s + (" (!)" if flag else ""))
        print(f"  {w:10s} " + "; ".join(parts))
    if failed:
        print(f"\n{len(failed)} failed runs, e.g. {failed[-1]['workload']} {failed[-1]['alloc']}: {failed[-1].get('error')}")


def main(argv):
    if argv and argv[0] == "child":
        p = argparse.ArgumentParser(prog="walltime.py child")
        p.add_argument("--workload", required=True, choices=list(WORKLOADS))
        p.add_argument("--alloc", required=True, choices=list(ALLOCS))
        p.add_argument("--out", required=True)
        child(p.parse_args(argv[1:]))
        return
    if argv and argv[0] == "table":
        table(argv[1])
        return
    p = argparse.ArgumentParser(prog="walltime.py run", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8, help="rounds wanted in the results file (8)")
    p.add_argument("--results", default="walltime_results.jsonl", help="JSON lines, appended to (walltime_results.jsonl)")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--allocs", default=",".join(ALLOCS))
    p.add_argument("--budget-s", type=float, default=540, help="no child is launched after this (540)")
    p.add_argument("--timeout", type=float, default=240, help="seconds a child may run (240)")
    run(p.parse_args(argv[1:] if argv and argv[0] == "run" else argv))


if __name__ == "__main__":
    main(sys.argv[1:])
