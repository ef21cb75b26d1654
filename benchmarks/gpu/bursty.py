"""Reserved and live memory over GPT-2 training with evaluation bursts, per allocator, and an SVG of it.

    bursty.py [--steps 60] [--burst-every 10] [--modes M,...] [--out DIR] [--timeout 240] [--decay-ms 500]
              [--record MODE] [--snapshot-steps N,...]
    bursty.py child --mode M --steps N --burst-every K --out FILE [--decay-ms D] [--record FILE]
                    [--snapshot PREFIX --snapshot-steps N,...]

Design: every mode is one child process (the allocator is chosen when the
process starts). The child trains GPT-2 small, built from transformers'
GPT2Config (no download; a plain-torch GPT-2 of the same shape without
transformers: real_workloads.py), with AdamW under bf16 autocast on batch 8
x length 1024, and after every K-th step (but the last) runs an
evaluation burst: a forward pass with gradients on twice the batch, whose
activations autograd keeps until the loss is dropped (twice a step's
activations at once), then dropped; the *_ec modes call
torch.cuda.empty_cache() after it, as a user would by hand. A sampler
thread reads, every 10 ms: the device's used bytes from cuMemGetInfo
(torch.cuda.mem_get_info) less those used before the model was built (the
process's reserved memory as the driver sees it, which another process
can or cannot have), torch.cuda.memory_reserved() and memory_allocated()
(live); the allocator's peak allocated bytes are read and reset at each
burst's start and end. After each burst, the time until the driver's view
of reserved memory is within 5% of the live peak before the next burst is
measured (issue 33: under 1 s with decay on). --record MODE writes that
mode's allocation trace with its waits, to replay on the simulated
driver (bazel run //benchmarks:replay -- --trace FILE, trace time on);
--snapshot-steps N,... writes each mode's memory_snapshot() after those
steps: where reserved memory sits before and after a burst.

Modes: xsalloc (the library's defaults: decay is on by default),
xsalloc_decay (helper_thread:True,page_decay_ms:500), xsalloc_off
(helper_thread:False), native, native_ec, expandable, expandable_ec.
Prints one line per mode (peak reserved, reserved GB·s, the settling time
after each burst, the steps' median time) and writes bursty.svg (one panel
per mode: reserved as the driver sees it, and live, over time) and
bursty.jsonl to --out. About 20-30 s a mode on an H100.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GB = 1e9

MODES = {  # name: (PYTORCH_CUDA_ALLOC_CONF, XSALLOC_CONF ("": the defaults) or None, xsalloc?,
    #          empty_cache after a burst?)
    "xsalloc": (None, "", True, False),
    "xsalloc_decay": (None, "helper_thread:True,page_decay_ms:{decay}", True, False),
    "xsalloc_off": (None, "helper_thread:False", True, False),
    "native": (None, None, False, False),
    "native_ec": (None, None, False, True),
    "expandable": ("expandable_segments:True", None, False, False),
    "expandable_ec": ("expandable_segments:True", None, False, True),
}


def child(args):
    torch_conf, xsa_conf, use_xsalloc, empty = MODES[args.mode]
    for var in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "XSALLOC_CONF"):
        os.environ.pop(var, None)
    if torch_conf:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = torch_conf
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if use_xsalloc:
        sys.path.append(os.path.join(ROOT, "python"))
        import xsalloc.torch

        xsalloc.torch.use(conf=xsa_conf.format(decay=args.decay_ms) or None)
    sys.path.insert(0, HERE)
    import real_workloads

    torch.cuda.init()
    torch.zeros(1, device="cuda")  # the context; under xsalloc its first page
    free, total = torch.cuda.mem_get_info()
    base = (total - free) - torch.cuda.memory_reserved()  # the context's own memory
    samples, stop, t0 = [], threading.Event(), time.perf_counter()

    def sampler():
        while not stop.is_set():
            f, _ = torch.cuda.mem_get_info()
            samples.append((time.perf_counter() - t0, total - f - base, torch.cuda.memory_reserved(),
                            torch.cuda.memory_allocated()))
            time.sleep(0.01)

    torch.manual_seed(0)
    model, impl = real_workloads.gpt2_model()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    vocab = real_workloads.GPT2_VOCAB
    batch, length = 8, 1024
    if args.record:
        torch.cuda.memory._record_memory_history(max_entries=4_000_000, context=None, stacks="python")
    thread = threading.Thread(target=sampler, daemon=True)
    thread.start()
    step_times, bursts, live_peaks, peaks = [], [], [], [0, 0]

    def interval_peak():
        """The highest allocated bytes since the last call (the sampler misses a step's short peak)."""
        live_peaks.append(torch.cuda.max_memory_allocated())
        peaks[0] = max(peaks[0], torch.cuda.max_memory_reserved())
        peaks[1] = max(peaks[1], live_peaks[-1])
        torch.cuda.reset_peak_memory_stats()

    for i in range(1, args.steps + 1):
        s0 = time.perf_counter()
        ids = torch.randint(0, vocab, (batch, length), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        step_times.append(time.perf_counter() - s0)
        if args.snapshot and i in args.snapshot_steps:
            with open(f"{args.snapshot}-step{i}.json", "w") as f:
                json.dump(torch.cuda.memory_snapshot(), f)
        if i % args.burst_every or i == args.steps:
            continue
        if bursts:
            interval_peak()  # the live peak between the last burst and this one
        b0 = time.perf_counter() - t0
        ids = torch.randint(0, vocab, (2 * batch, length), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss  # twice the activations, kept by autograd
        torch.cuda.synchronize()
        del loss, ids
        if empty:
            torch.cuda.empty_cache()
        bursts.append((b0, time.perf_counter() - t0))
        interval_peak()  # the burst's own: from here on, the steps after it
        live_peaks.pop()
    torch.cuda.synchronize()
    time.sleep(0.05)
    stop.set()
    thread.join()
    if bursts:
        interval_peak()
    peaks = [max(peaks[0], torch.cuda.max_memory_reserved()), max(peaks[1], torch.cuda.max_memory_allocated())]
    out = {"mode": args.mode, "impl": impl, "device": torch.cuda.get_device_name(), "samples": samples,
           "bursts": bursts, "live_peaks": live_peaks, "step_median_s": statistics.median(step_times[2:]),
           "peak_reserved": peaks[0], "peak_allocated": peaks[1]}
    if args.record:
        from record_traces import write_trace

        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        write_trace(snapshot, args.record, waits=True)
    with open(args.out, "w") as f:
        json.dump(out, f)


def settle_times(rec):
    """Seconds from each burst's end until the driver's view of reserved is
    within 5% of the live peak before the next burst (None: never). The
    live peak is the allocator's own (max_memory_allocated, reset after
    each burst): a step's peak lasts milliseconds and the sampler misses it."""
    s, out = rec["samples"], []
    ends = [b[1] for b in rec["bursts"]]
    starts = [b[0] for b in rec["bursts"][1:]] + [s[-1][0] if s else 0]
    for i, (end, nxt) in enumerate(zip(ends, starts)):
        window = [x for x in s if end <= x[0] <= nxt]
        if not window:
            out.append(None)
            continue
        live = rec["live_peaks"][i]
        hit = next((x[0] - end for x in window if x[1] <= 1.05 * live), None)
        out.append(hit)
    return out


def gb_s(rec):
    s = rec["samples"]
    return sum((s[i][0] - s[i - 1][0]) * s[i][1] / GB for i in range(1, len(s)))


def svg(records, path):
    """One panel per mode: the driver's view of reserved (solid) and live (dashed) memory over time."""
    w, h, pad = 900, 170, 50
    top = max((max((x[1] for x in r["samples"]), default=1) for r in records), default=1)
    span = max((r["samples"][-1][0] for r in records if r["samples"]), default=1)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h * len(records) + 20}" '
             'font-family="sans-serif" font-size="12">']
    for k, r in enumerate(records):
        y0 = k * h + 10

        def pt(t, v):
            return f"{pad + (w - 2 * pad) * t / span:.1f},{y0 + h - 30 - (h - 50) * v / top:.1f}"

        for idx, dash, color in ((1, "", "#1f77b4"), (3, ' stroke-dasharray="4,3"', "#d62728")):
            pts = " ".join(pt(x[0], x[idx]) for x in r["samples"])
            parts.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.2"{dash} points="{pts}"/>')
        for b in r["bursts"]:
            parts.append(f'<line x1="{pad + (w - 2 * pad) * b[1] / span:.1f}" x2="{pad + (w - 2 * pad) * b[1] / span:.1f}" '
                         f'y1="{y0 + 15}" y2="{y0 + h - 30}" stroke="#999" stroke-width="0.5"/>')
        parts.append(f'<line x1="{pad}" x2="{w - pad}" y1="{y0 + h - 30}" y2="{y0 + h - 30}" stroke="#000"/>')
        parts.append(f'<text x="{pad}" y="{y0 + 12}">{r["mode"]}: reserved as cuMemGetInfo sees it (solid), live '
                     f'(dashed); top {top / GB:.1f} GB, {span:.0f} s; grey: bursts\' ends</text>')
    parts.append("</svg>")
    with open(path, "w") as f:
        f.write("\n".join(parts))


def main(argv):
    if argv and argv[0] == "child":
        p = argparse.ArgumentParser(prog="bursty.py child")
        p.add_argument("--mode", required=True, choices=list(MODES))
        p.add_argument("--steps", type=int, required=True)
        p.add_argument("--burst-every", type=int, required=True)
        p.add_argument("--decay-ms", type=int, default=500)
        p.add_argument("--out", required=True)
        p.add_argument("--record", help="write the run's allocation trace, with its waits, here")
        p.add_argument("--snapshot", metavar="PREFIX",
                       help="write torch.cuda.memory_snapshot() to PREFIX-stepN.json after each step N of --snapshot-steps")
        p.add_argument("--snapshot-steps", type=lambda v: {int(x) for x in v.split(",") if x}, default=set())
        child(p.parse_args(argv[1:]))
        return
    p = argparse.ArgumentParser(prog="bursty.py", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--burst-every", type=int, default=10)
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--decay-ms", type=int, default=500)
    p.add_argument("--out", default=".")
    p.add_argument("--timeout", type=float, default=240, help="seconds a mode may run (240)")
    p.add_argument("--record", metavar="MODE",
                   help="also write MODE's allocation trace with its waits (trace/trace.h's 'w' lines), "
                        "bursty-MODE.trace.gz in --out, for replays on the simulated driver")
    p.add_argument("--snapshot-steps", metavar="N,...",
                   help="each mode writes bursty-MODE.snapshot-stepN.json, its memory_snapshot() after step N: "
                        "where reserved memory sits (before a burst, after it)")
    args = p.parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    records = []
    for mode in [m for m in args.modes.split(",") if m]:
        path = os.path.join(args.out, f"bursty-{mode}.json")
        cmd = [sys.executable, os.path.abspath(__file__), "child", "--mode", mode, "--steps", str(args.steps),
               "--burst-every", str(args.burst_every), "--decay-ms", str(args.decay_ms), "--out", path]
        if args.snapshot_steps:
            cmd += ["--snapshot", os.path.join(args.out, f"bursty-{mode}.snapshot"), "--snapshot-steps",
                    args.snapshot_steps]
        if mode == args.record:
            cmd += ["--record", os.path.join(args.out, f"bursty-{mode}.trace.gz")]
        t0 = time.monotonic()
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
            err = None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["no output"])[-1][:300]
        except subprocess.TimeoutExpired:
            err = f"timed out after {args.timeout:g} s"
        if err:
            print(f"bursty: {mode}: FAILED: {err}", flush=True)
            continue
        with open(path) as f:
            rec = json.load(f)
        records.append(rec)
        st = settle_times(rec)
        done = [x for x in st if x is not None]
        settle = (f"median {statistics.median(done):.2f} s, longest {max(done):.2f} s" if done else "") + \
                 (f", never {len(st) - len(done)} of {len(st)}" if len(done) < len(st) else "")
        print(f"bursty: {mode:14s} peak reserved {rec['peak_reserved'] / GB:6.2f} GB (allocated "
              f"{rec['peak_allocated'] / GB:.2f}), {gb_s(rec):7.1f} GB·s, within 5% after a burst: {settle}; "
              f"step {rec['step_median_s'] * 1e3:.1f} ms ({time.monotonic() - t0:.0f} s)", flush=True)
    if records:
        svg(records, os.path.join(args.out, "bursty.svg"))
        with open(os.path.join(args.out, "bursty.jsonl"), "w") as f:
            for r in records:
                f.write(json.dumps({k: v for k, v in r.items() if k != "samples"} |
                                   {"settle_s": settle_times(r), "gb_s": gb_s(r)}) + "\n")
        print(f"bursty: {records[0]['device']}, {records[0]['impl']}; plot {os.path.join(args.out, 'bursty.svg')}")


if __name__ == "__main__":
    main(sys.argv[1:])
