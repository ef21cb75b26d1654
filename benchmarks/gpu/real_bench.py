"""Real PyTorch workloads under several allocators, interleaved, in one table.

    real_bench.py [--runs 3] [--workloads gpt2,...] [--allocs native,...] [--xsalloc-conf NAME=CONF]...
                  [--steps W=N]... [--steps-W N] [--timeout S] [--budget-s S] [--out DIR]
    real_bench.py child --workload W --alloc A --steps N --out FILE [--conf CONF] [--lag FILE]
    real_bench.py table FILE.jsonl
    real_bench.py record --workload W --out FILE.trace.gz [--steps N] [--max-entries N] [--seed N] [--waits]

Design: PyTorch reads its allocator configuration once per process, so
every (run, workload, allocator) is a child process of its own; the parent
only plans, launches, records and reports, and never imports torch. Runs
are interleaved (for each run, each workload, each allocator, the
allocators' order rotated every run) so that a slow spell of the host
blurs every allocator alike. A child writes one JSON object; the parent
adds the run, the child's exit and, under xsalloc, the lag probe's file
(XSALLOC_LAG_PROBE, written by the library at exit), and appends it to
real_results.jsonl at once, so an interrupted run keeps what it measured.
A failed or timed-out child becomes a failed record with the last line
of its output and never stops the others; --budget-s stops launching
once the time is spent. The table is made from the JSON lines alone
(`table` reprints it). The workloads are in real_workloads.py.
"""

import argparse
import bisect
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GB = 1e9

# The workloads (functions of real_workloads.py) and their default steps.
WORKLOAD_STEPS = {"gpt2": 24, "resnet": 24, "llama_gen": 5, "multistream": 24}
# Workloads for traces only (record): not timed by default.
RECORD_ONLY_STEPS = {"llama_requests": 24}
# PyTorch's own allocators: PYTORCH_CUDA_ALLOC_CONF (None: unset).
TORCH_ALLOCS = {"native": None, "expandable": "expandable_segments:True", "async": "backend:cudaMallocAsync"}
DEFAULT_ALLOCS = ["native", "expandable", "async", "xsalloc"]
XSALLOC_STATS = ("num_pages_recycled", "num_pages_mapped", "num_pages_unmapped", "num_device_alloc",
                 "num_device_free", "num_alloc_retries", "num_ooms", "allocation.all.allocated",
                 "num_device_lock_waits", "device_lock_wait_us")


# ---- arguments ----


def parse_run_args(argv):
    """The parent's options, checked: returns (args, workloads, allocs, steps) where
    allocs is a list of (name, xsalloc conf or None, is_xsalloc)."""
    p = argparse.ArgumentParser(prog="real_bench.py", description=__doc__.splitlines()[0])
    p.add_argument("--out", help="directory for the results (default: a new one under /tmp)")
    p.add_argument("--runs", type=int, default=3, help="rounds of every workload under every allocator (3)")
    p.add_argument("--workloads", default=",".join(WORKLOAD_STEPS), help="comma-separated (%(default)s)")
    p.add_argument("--allocs", default=",".join(DEFAULT_ALLOCS), help="comma-separated (%(default)s)")
    p.add_argument("--xsalloc-conf", action="append", default=[], metavar="NAME=CONF",
                   help="an extra allocator: xsalloc with XSALLOC_CONF string CONF (repeatable)")
    p.add_argument("--steps", action="append", default=[], metavar="W=N", help="steps of workload W (repeatable)")
    for w in WORKLOAD_STEPS:
        names = sorted({f"--steps-{w}", f"--steps-{w.replace('_', '-')}"})
        p.add_argument(*names, type=int, dest=f"steps_{w}", metavar="N", help=f"steps of {w} ({WORKLOAD_STEPS[w]})")
    p.add_argument("--xsalloc-lib", action="append", default=[], metavar="NAME=PATH",
                   help="an xsalloc variant NAME (default conf) that loads libxsalloc.so from PATH: another build "
                        "compared in the same interleaved run (repeatable)")
    p.add_argument("--warmup", action="store_true",
                   help="first run one discarded child (2 steps of the first workload, native): the first process "
                        "on a fresh machine runs slower, whichever allocator it has")
    p.add_argument("--timeout", type=float, default=240, help="seconds a child may run (240)")
    p.add_argument("--budget-s", type=float, default=420,
                   help="launch no child after this many seconds (420; 0: no limit)")
    p.add_argument("--no-lag", action="store_true",
                   help="no lag probe under xsalloc (it adds an event query to each allocator call)")
    p.add_argument("--profile", action="store_true",
                   help="run each workload's first quarter under torch.profiler and table where its time went "
                        "(the profiler slows that part, alike for every allocator)")
    args = p.parse_args(argv)

    if args.runs < 1:
        p.error(f"--runs {args.runs}: at least 1")
    workloads = [w for w in args.workloads.split(",") if w]
    unknown = [w for w in workloads if w not in WORKLOAD_STEPS]
    if unknown or not workloads:
        p.error(f"--workloads: unknown {unknown or 'empty list'}; the workloads are {', '.join(WORKLOAD_STEPS)}")

    variants = {}
    for item in args.xsalloc_conf:
        name, sep, conf = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not conf.strip():
            p.error(f"--xsalloc-conf {item!r}: expected NAME=CONF with NAME of letters, digits, '_', '.' or '-' "
                    "and a non-empty XSALLOC_CONF string, e.g. norecycle=page_recycling:False")
        if name in TORCH_ALLOCS or name == "xsalloc" or name in variants:
            p.error(f"--xsalloc-conf {item!r}: the name {name!r} is taken")
        variants[name] = conf
    libs = {}
    for item in args.xsalloc_lib:
        name, sep, path = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z0-9_.-]+", name) or not os.path.isfile(path):
            p.error(f"--xsalloc-lib {item!r}: expected NAME=PATH of an existing libxsalloc.so")
        if name in TORCH_ALLOCS or name == "xsalloc" or name in variants:
            p.error(f"--xsalloc-lib {item!r}: the name {name!r} is taken")
        variants[name] = None
        libs[name] = os.path.abspath(path)
    args.libs = libs
    names = [a for a in args.allocs.split(",") if a]
    unknown = [a for a in names if a not in TORCH_ALLOCS and a != "xsalloc" and a not in variants]
    if unknown:
        p.error(f"--allocs: unknown {unknown}; known: {', '.join(list(TORCH_ALLOCS) + ['xsalloc'] + list(variants))}")
    names += [v for v in variants if v not in names]
    if not names:
        p.error("--allocs: empty list")
    allocs = [(a, variants.get(a), a not in TORCH_ALLOCS) for a in names]

    steps = dict(WORKLOAD_STEPS)
    for item in args.steps:
        w, sep, n = item.partition("=")
        if not sep or w not in WORKLOAD_STEPS or not n.isdigit() or int(n) < 1:
            p.error(f"--steps {item!r}: expected W=N with W one of {', '.join(WORKLOAD_STEPS)} and N >= 1")
        steps[w] = int(n)
    for w in WORKLOAD_STEPS:
        n = getattr(args, f"steps_{w}")
        if n is not None:
            if n < 1:
                p.error(f"--steps-{w} {n}: at least 1")
            steps[w] = n
    return args, workloads, allocs, steps


def plan(runs, workloads, allocs):
    """(run, workload, alloc) in launch order: the allocators' order rotates each run."""
    out = []
    for run in range(1, runs + 1):
        k = (run - 1) % len(allocs)
        for w in workloads:
            out += [(run, w, a) for a in allocs[k:] + allocs[:k]]
    return out


# ---- the child: one workload under one allocator ----


def optional(fn):
    """fn(), or None with a line on stderr: a statistic an allocator lacks costs only its cell."""
    try:
        return fn()
    except Exception as e:
        print(f"real_bench warning: {fn.__name__}() failed: {type(e).__name__}: {e}", file=sys.stderr)
        return None


def union_us(intervals):
    """Microseconds covered by the union of (start, end) intervals, and the gaps between them."""
    busy, gaps, end = 0.0, [], None
    for a, b in sorted(intervals):
        if end is not None and a > end:
            gaps.append((end, a))
        if end is None or a > end:
            busy, end = busy + b - a, b
        elif b > end:
            busy, end = busy + b - end, b
    return busy, gaps


def idle_summary(events, wall_s, self_cpu):
    """Where a profiled part's time went, from torch.profiler's chrome-trace events: the GPU's busy and
    idle time (kernels, copies, memsets), the CUDA runtime and driver calls and ops that ran while the
    GPU was idle (ms of overlap; nested ops each counted), and the runtime and driver calls that took
    the most time ([name, calls, ms]). self_cpu: [name, calls, ms] to keep."""
    gpu = [(e["ts"], e["ts"] + e["dur"]) for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    busy, gaps = union_us(gpu)
    starts, idle_by, api = [g0 for g0, _ in gaps], {}, {}
    for e in events:
        if e.get("cat") not in ("cpu_op", "cuda_runtime", "cuda_driver"):
            continue
        a, b = e["ts"], e["ts"] + e["dur"]
        if e["cat"] != "cpu_op":
            calls, us = api.get(e["name"], (0, 0.0))
            api[e["name"]] = (calls + 1, us + e["dur"])
        over, i = 0.0, max(0, bisect.bisect_right(starts, a) - 1)
        while i < len(gaps) and gaps[i][0] < b:
            over += max(0.0, min(b, gaps[i][1]) - max(a, gaps[i][0]))
            i += 1
        if over > 0:
            key = f"{e['cat']}:{e['name']}"
            idle_by[key] = idle_by.get(key, 0.0) + over / 1e3
    return {
        "wall_ms": wall_s * 1e3, "gpu_busy_ms": busy / 1e3, "gpu_idle_ms": sum(b - a for a, b in gaps) / 1e3,
        "gaps_over_1ms": sum(1 for a, b in gaps if b - a > 1e3),
        "idle_during": sorted(([k, round(v, 2)] for k, v in idle_by.items()), key=lambda kv: -kv[1])[:15],
        "api": sorted(([k, n, round(us / 1e3, 2)] for k, (n, us) in api.items()), key=lambda x: -x[2])[:15],
        "self_cpu": self_cpu,
    }


def profile_summary(prof, wall_s):
    """idle_summary of a finished torch.profiler.profile, with its 12 ops of most self CPU time."""
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(path)
        with open(path) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X" and "dur" in e]
    finally:
        os.remove(path)
    top = sorted(prof.key_averages(), key=lambda k: -k.self_cpu_time_total)[:12]
    return idle_summary(events, wall_s, [[k.key, k.count, round(k.self_cpu_time_total / 1e3, 2)] for k in top])


def child(args):
    """Sets the allocator up before torch touches CUDA, runs the workload,
    writes one JSON object to args.out."""
    torch_conf = TORCH_ALLOCS.get(args.alloc)
    use_xsalloc = args.alloc not in TORCH_ALLOCS
    # torch reads PYTORCH_ALLOC_CONF before PYTORCH_CUDA_ALLOC_CONF, and
    # xsalloc both after XSALLOC_CONF: none may leak in from the caller.
    os.environ.pop("PYTORCH_ALLOC_CONF", None)
    os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    os.environ.pop("XSALLOC_LAG_PROBE", None)
    if torch_conf:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = torch_conf
    if use_xsalloc:
        os.environ.pop("XSALLOC_CONF", None)  # default configuration unless --conf
        if args.lag:
            os.environ["XSALLOC_LAG_PROBE"] = args.lag  # read when xsalloc starts (its first allocation)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # models are built from configs: never reach for a hub

    import torch

    if use_xsalloc:
        sys.path.append(os.path.join(ROOT, "python"))
        import xsalloc.torch

        xsalloc.torch.use(conf=args.conf)
    sys.path.insert(0, HERE)
    import real_workloads

    real_workloads.profile_first = args.profile
    calls_at = {}
    if use_xsalloc:
        xsalloc.time_driver_calls(True)  # two clock reads per driver call
        real_workloads.on_phase = lambda name: calls_at.__setitem__(name, xsalloc.driver_calls())
    t0 = time.perf_counter()
    res = getattr(real_workloads, args.workload)(args.steps)
    total = time.perf_counter() - t0
    free, device_total = torch.cuda.mem_get_info()
    out = {
        "kind": "result", "workload": args.workload, "alloc": args.alloc, "xsalloc": use_xsalloc,
        "conf": (args.conf or "") if use_xsalloc else (torch_conf or ""), "steps": args.steps,
        "wall_s": res["wall_s"], "steady_s": res["steady_s"], "total_s": total, "impl": res["impl"],
        "peak_allocated": optional(torch.cuda.max_memory_allocated),
        "peak_reserved": optional(torch.cuda.max_memory_reserved),
        "device_used_end": device_total - free, "device": torch.cuda.get_device_name(), "torch": torch.__version__,
        "backend": optional(torch.cuda.get_allocator_backend),
    }
    if real_workloads.first_profile:
        out["first_profile"] = profile_summary(*real_workloads.first_profile)
    if use_xsalloc:
        stats = xsalloc.torch.memory_stats()
        out["xsalloc_stats"] = {k: stats[k] for k in XSALLOC_STATS}
        out["driver_calls"] = {part: calls_between(calls_at.get(a, {}), calls_at.get(b, {}))
                               for part, a, b in (("first", "start", "steady"), ("steady", "steady", "end"))}
        if stats["allocation.all.allocated"] == 0:
            raise RuntimeError("xsalloc made no allocation: torch did not allocate through it")
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, args.out)


# ---- the parent ----


def child_command(workload, alloc, conf, steps, out, lag, profile):
    cmd = [sys.executable, os.path.abspath(__file__), "child", "--workload", workload, "--alloc", alloc,
           "--steps", str(steps), "--out", out] + (["--profile"] if profile else [])
    if conf is not None:
        cmd += ["--conf", conf]
    if lag:
        cmd += ["--lag", lag]
    return cmd


def last_line(path):
    """The child's own summary of its failure if it wrote one, else its last line."""
    try:
        with open(path, errors="replace") as f:
            lines = [line.strip() for line in f if line.strip()]
    except OSError:
        return "no output"
    summary = [line for line in lines if line.startswith("real_bench child: ")]
    return (summary or lines or ["no output"])[-1][:400]


def read_json(path):
    """The JSON object in the file; None if it is missing, empty or not JSON."""
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def launch(run, workload, alloc, conf, use_xsalloc, steps, out_dir, timeout, probe_lag, lib=None, profile=False):
    """Runs one child (with XSALLOC_LIBRARY=lib when given); returns its record (status "ok" or "failed")."""
    base = os.path.join(out_dir, "children", f"r{run}-{workload}-{alloc}")
    result, log = base + ".json", base + ".log"
    lag = base + ".lag.json" if use_xsalloc and probe_lag else None
    for path in (result, lag):
        if path and os.path.exists(path):
            os.remove(path)
    record = {"kind": "result", "run": run, "workload": workload, "alloc": alloc, "xsalloc": use_xsalloc}
    t0 = time.monotonic()
    try:
        with open(log, "w") as f:
            # Unbuffered: its output stays in order, the failure's lines last.
            rc = subprocess.run(child_command(workload, alloc, conf, steps, result, lag, profile), stdout=f,
                                stderr=subprocess.STDOUT, timeout=timeout,
                                env=dict(os.environ, PYTHONUNBUFFERED="1",
                                         **({"XSALLOC_LIBRARY": lib} if lib else {}))).returncode
        error = None if rc == 0 else f"exit {rc}: {last_line(log)}"
    except subprocess.TimeoutExpired:
        rc, error = None, f"timed out after {timeout:g} s: {last_line(log)}"
    record["child_s"] = round(time.monotonic() - t0, 2)
    measured = read_json(result)
    if measured is None:
        record.update(status="failed", error=error or f"exit 0 but no result in {result}", log=log)
        return record
    record.update(measured, run=run, status="ok", exit=rc, log=log)
    if error:
        record["exit_error"] = error  # measured, then failed on the way out: kept, and said
    if lag:
        record["lag"] = read_json(lag)
        if record["lag"] is None:
            record["lag_error"] = f"no lag probe data in {lag}"
    return record


def progress(start, i, n, rec):
    head = f"real_bench [{time.monotonic() - start:5.0f}s] {i}/{n} run {rec['run']} {rec['workload']} {rec['alloc']}"
    if rec["status"] != "ok":
        return f"{head}: FAILED after {rec['child_s']:.1f} s: {rec['error']}"
    ratio = fmt_ratio(rec)
    line = (f"{head}: steps {rec['wall_s']:.2f} s, reserved/allocated {ratio} "
            f"({gb(rec['peak_reserved'])} / {gb(rec['peak_allocated'])} GB), child {rec['child_s']:.1f} s")
    if rec.get("lag"):
        line += f", lag p50 {rec['lag'].get('p50')} calls"
    if rec.get("exit_error"):
        line += f"; then {rec['exit_error']}"
    return line


def run_all(argv):
    args, workloads, allocs, steps = parse_run_args(argv)
    out_dir = args.out or tempfile.mkdtemp(prefix="xsa-real.")
    os.makedirs(os.path.join(out_dir, "children"), exist_ok=True)
    results_path = os.path.join(out_dir, "real_results.jsonl")
    todo = plan(args.runs, workloads, [a[0] for a in allocs])
    by_name = {a[0]: a for a in allocs}
    print(f"real_bench: {len(todo)} children ({args.runs} runs x {len(workloads)} workloads x {len(allocs)} "
          f"allocators), budget {args.budget_s:g} s; results in {results_path}", flush=True)
    start = time.monotonic()
    failed = 0
    with open(results_path, "w") as results:
        def write(rec):
            results.write(json.dumps(rec) + "\n")
            results.flush()

        write({"kind": "meta", "argv": argv, "steps": steps, "planned": len(todo), "budget_s": args.budget_s,
               "allocs": {a: (c if x else TORCH_ALLOCS[a]) for a, c, x in allocs}})
        if args.warmup:
            rec = launch(0, workloads[0], "native", None, False, 2, out_dir, args.timeout, False)
            print(f"real_bench: warm-up child (discarded): {rec['status']}", flush=True)
        for i, (run, workload, alloc) in enumerate(todo):
            if args.budget_s and time.monotonic() - start >= args.budget_s:
                write({"kind": "skipped", "count": len(todo) - i, "planned": len(todo), "budget_s": args.budget_s})
                print(f"real_bench: budget of {args.budget_s:g} s spent: {len(todo) - i} of {len(todo)} "
                      "children not run", flush=True)
                break
            _, conf, use_xsalloc = by_name[alloc]
            rec = launch(run, workload, alloc, conf, use_xsalloc, steps[workload], out_dir, args.timeout,
                         not args.no_lag, args.libs.get(alloc), args.profile)
            failed += rec["status"] != "ok"
            write(rec)
            print(progress(start, i + 1, len(todo), rec), flush=True)
    text = table(load_rows(results_path))
    with open(os.path.join(out_dir, "real_table.txt"), "w") as f:
        f.write(text)
    print(text, end="", flush=True)
    print(f"real_bench: {time.monotonic() - start:.0f} s; results in {results_path}, table in "
          f"{os.path.join(out_dir, 'real_table.txt')}", flush=True)
    return 1 if failed else 0


# ---- the table ----


def load_rows(path):
    rows = []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except ValueError as e:
                    raise SystemExit(f"real_bench: {path}:{n}: not a JSON line ({e})")
    return rows


def gb(n):
    return "n/a" if n is None else f"{n / GB:.2f}"


def ratio_of(r):
    a, b = r.get("peak_reserved"), r.get("peak_allocated")
    return a / b if a is not None and b else None


def fmt_ratio(r):
    x = ratio_of(r)
    return "n/a" if x is None else f"{x:.3f}"


def med(values, fmt):
    values = [v for v in values if v is not None]
    return fmt.format(statistics.median(values)) if values else "n/a"


def span(values, fmt):
    values = [v for v in values if v is not None]
    return f"{fmt.format(min(values))}-{fmt.format(max(values))}" if values else "n/a"


def ordered(names, first):
    """`first`'s names in its order, then the others in the order seen."""
    seen = list(dict.fromkeys(names))
    return [n for n in first if n in seen] + [n for n in seen if n not in first]


def best_torch(results, workload, key):
    """The fastest median `key` over PyTorch's own configurations on `workload`."""
    medians = []
    for a in TORCH_ALLOCS:
        vals = [r.get(key) for r in results if r["workload"] == workload and r["alloc"] == a and r["status"] == "ok"]
        vals = [v for v in vals if v is not None]
        if vals:
            medians.append(statistics.median(vals))
    return min(medians) if medians else None


def relative(values, best):
    values = [v for v in values if v is not None]
    return f"{statistics.median(values) / best:.3f}x" if values and best else "n/a"


def memory_rows(results, workloads, allocs):
    lines = ["| workload | allocator | runs | reserved / allocated | range | peak reserved GB | "
             "peak allocated GB | wall s | wall / best torch | steady s | steady / best torch | "
             "pages recycled | pages mapped |",
             "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for w in workloads:
        best_wall, best_steady = best_torch(results, w, "wall_s"), best_torch(results, w, "steady_s")
        for a in allocs:
            rs = [r for r in results if r["workload"] == w and r["alloc"] == a]
            if not rs:
                continue
            ok = [r for r in rs if r["status"] == "ok"]
            runs = f"{len(ok)}" + (f" ({len(rs) - len(ok)} failed)" if len(ok) < len(rs) else "")
            if not ok:
                lines.append(f"| {w} | {a} | {runs} | failed: {rs[-1]['error']} | | | | | | | | | |")
                continue
            ratios = [ratio_of(r) for r in ok]
            walls = [r["wall_s"] for r in ok]
            steadies = [r.get("steady_s") for r in ok]
            xs = [r["xsalloc_stats"] for r in ok if r.get("xsalloc_stats")]
            recycled = med([s["num_pages_recycled"] for s in xs], "{:.0f}") if xs else ""
            mapped = med([s["num_pages_mapped"] for s in xs], "{:.0f}") if xs else ""
            lines.append(f"| {w} | {a} | {runs} | {med(ratios, '{:.3f}')} | {span(ratios, '{:.3f}')} | "
                         f"{med([r.get('peak_reserved') and r['peak_reserved'] / GB for r in ok], '{:.2f}')} | "
                         f"{med([r.get('peak_allocated') and r['peak_allocated'] / GB for r in ok], '{:.2f}')} | "
                         f"{med(walls, '{:.2f}')} | {relative(walls, best_wall)} | "
                         f"{med(steadies, '{:.2f}')} | {relative(steadies, best_steady)} | {recycled} | {mapped} |")
    return lines


def calls_between(before, after):
    """{entry: [calls, us]} made between two xsalloc.driver_calls() readings (the helper's share left in)."""
    diff = {}
    for entry, (n, us, *_) in after.items():
        n0, us0 = before.get(entry, (0, 0.0))[:2]
        if n > n0:
            diff[entry] = [n - n0, round(us - us0, 1)]
    return diff


def driver_rows(results, workloads, allocs):
    """Median driver milliseconds of xsalloc runs, first quarter and steady part, and the entry points
    that took the most of it."""
    lines = ["| workload | allocator | runs | first quarter: driver ms (calls) | steady: driver ms (calls) | "
             "most time (first quarter) |", "|---|---|---:|---:|---:|---|"]
    for w in workloads:
        for a in allocs:
            rs = [r for r in results if r["workload"] == w and r["alloc"] == a and r["status"] == "ok"
                  and r.get("driver_calls")]
            if not rs:
                continue
            cells = []
            for part in ("first", "steady"):
                ms = [sum(us for _, us in r["driver_calls"][part].values()) / 1e3 for r in rs]
                n = [sum(c for c, _ in r["driver_calls"][part].values()) for r in rs]
                cells.append(f"{med(ms, '{:.1f}')} ({med(n, '{:.0f}')})")
            first = rs[len(rs) // 2]["driver_calls"]["first"]
            top = sorted(first.items(), key=lambda kv: -kv[1][1])[:3]
            cells.append(", ".join(f"{e} {us / 1e3:.1f} ms / {c}" for e, (c, us) in top))
            lines.append(f"| {w} | {a} | {len(rs)} | " + " | ".join(cells) + " |")
    return lines


def profile_rows(results, workloads, allocs):
    """The first quarter under torch.profiler (--profile): medians of GPU busy and idle time, and, from the
    median run, what the CPU ran while the GPU was idle and the ops with the most self CPU time."""
    lines = ["| workload | allocator | runs | wall ms | GPU busy ms | GPU idle ms (gaps > 1 ms) | "
             "CPU while the GPU was idle, ms | most self CPU, ms (calls) | CUDA API calls, ms (calls) |",
             "|---|---|---:|---:|---:|---:|---|---|---|"]
    for w in workloads:
        for a in allocs:
            ps = sorted((r["first_profile"] for r in results if r["workload"] == w and r["alloc"] == a
                         and r["status"] == "ok" and r.get("first_profile")), key=lambda p: p["wall_ms"])
            if not ps:
                continue
            mid = ps[len(ps) // 2]
            idle = ", ".join(f"{k} {v:.1f}" for k, v in mid["idle_during"][:5])
            top = ", ".join(f"{k} {ms:.1f} ({n})" for k, n, ms in mid["self_cpu"][:5])
            api = ", ".join(f"{k} {ms:.1f} ({n})" for k, n, ms in mid.get("api", [])[:5])
            lines.append(f"| {w} | {a} | {len(ps)} | {med([p['wall_ms'] for p in ps], '{:.0f}')} | "
                         f"{med([p['gpu_busy_ms'] for p in ps], '{:.0f}')} | "
                         f"{med([p['gpu_idle_ms'] for p in ps], '{:.0f}')} ({mid['gaps_over_1ms']}) | {idle} | {top} | {api} |")
    return lines


def lag_rows(results, workloads, allocs):
    lines = ["| workload | allocator | runs | calls | probes | p50 | p90 | p99 | max | pending | skipped |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for w in workloads:
        for a in allocs:
            rs = [r for r in results if r["workload"] == w and r["alloc"] == a and r["status"] == "ok" and r["xsalloc"]]
            if not rs:
                continue
            lags = [r["lag"] for r in rs if r.get("lag")]
            if not any("lag" in r or "lag_error" in r for r in rs):
                continue  # run with --no-lag
            if not lags:
                lines.append(f"| {w} | {a} | {len(rs)} | no data: {rs[-1].get('lag_error', '?')} | | | | | | | |")
                continue
            errors = sorted({g["error"] for g in lags if g.get("error")})
            cells = [med([g.get(k) for g in lags], "{:.0f}") for k in ("calls", "probes", "p50", "p90", "p99")]
            maxes = [g["max"] for g in lags if g.get("max") is not None]
            cells.append(str(max(maxes)) if maxes else "n/a")
            cells += [med([g.get(k) for g in lags], "{:.0f}") for k in ("pending", "skipped")]
            note = f" (probe error: {'; '.join(errors)})" if errors else ""
            lines.append(f"| {w} | {a}{note} | {len(lags)} | " + " | ".join(cells) + " |")
    return lines


def table(rows):
    """The report of a results file's rows, as markdown text."""
    results = [r for r in rows if r.get("kind") == "result"]
    skipped = [r for r in rows if r.get("kind") == "skipped"]
    meta = next((r for r in rows if r.get("kind") == "meta"), {})
    workloads = ordered([r["workload"] for r in results], list(WORKLOAD_STEPS))
    allocs = ordered([r["alloc"] for r in results], DEFAULT_ALLOCS)
    ok = [r for r in results if r["status"] == "ok"]
    out = []
    if ok:
        devices = sorted({f"{r['device']}, torch {r['torch']}" for r in ok})
        out.append(f"Device: {'; '.join(devices)}")
    if meta.get("allocs"):
        confs = ", ".join(f"{a}: {c or 'unset'}" for a, c in meta["allocs"].items())
        out.append(f"Allocators (PYTORCH_CUDA_ALLOC_CONF, or XSALLOC_CONF for xsalloc ones): {confs}")
    if meta.get("steps"):
        out.append("Steps: " + ", ".join(f"{w} {n}" for w, n in meta["steps"].items() if w in workloads))
    out += ["", "## Memory and time (GB = 1e9 bytes; median over runs; range: min-max over runs)", "",
            "reserved / allocated = peak reserved / peak allocated bytes of the whole process (1.000: no memory",
            "held beyond the worst moment's live bytes); wall s = the steps, model building excluded;",
            "steady s = the steps after the first quarter (where memory comes from the driver);",
            "/ best torch = against the fastest of PyTorch's configurations run (native, expandable,",
            "async) on the same workload, medians.", ""]
    out += memory_rows(results, workloads, allocs)
    drv = driver_rows(results, workloads, allocs)
    if len(drv) > 2:
        out += ["", "## Time xsalloc spent in the CUDA driver (xsalloc.driver_calls(); median over runs)", ""]
        out += drv
    prof = profile_rows(results, workloads, allocs)
    if len(prof) > 2:
        out += ["", "## The first quarter under torch.profiler (--profile; GPU = kernels, copies, memsets)", ""]
        out += prof
    lag = lag_rows(results, workloads, allocs)
    if len(lag) > 2:
        out += ["", "## GPU lag under xsalloc (XSALLOC_LAG_PROBE: allocator calls between recording an event",
                "on a call's stream and seeing it complete, every 16th call; median over runs, max: over runs)", ""]
        out += lag
    notes = sorted({f"{r['workload']}: {r['impl']}" for r in ok if "missing" in r.get("impl", "")})
    failures = [r for r in results if r["status"] != "ok" or r.get("exit_error")]
    if notes or failures or skipped:
        out.append("")
    out += [f"Note: {n}" for n in notes]
    for r in failures:
        out.append(f"Failed: run {r['run']} {r['workload']} {r['alloc']}: {r.get('error') or r['exit_error']}"
                   + (f" (log: {r['log']})" if r.get("log") else ""))
    for s in skipped:
        out.append(f"Budget of {s['budget_s']:g} s spent: {s['count']} of {s['planned']} planned children not run.")
    return "\n".join(out) + "\n"


# ---- trace recording ----


def record(args):
    """The workload once under PyTorch's native allocator with its memory
    history on, written as a trace by record_traces.write_trace."""
    os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    sys.path.insert(0, HERE)
    import real_workloads
    from record_traces import write_trace

    steps = args.steps or {**WORKLOAD_STEPS, **RECORD_ONLY_STEPS}[args.workload]
    seed = {"seed": args.seed} if args.seed is not None else {}
    torch.cuda.memory._record_memory_history(max_entries=args.max_entries, context=None, stacks="python")
    t0 = time.perf_counter()
    getattr(real_workloads, args.workload)(steps, **seed)
    torch.cuda.synchronize()
    snapshot = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    entries = snapshot["device_traces"][0]
    if len(entries) >= args.max_entries:
        print(f"real_bench record: WARNING: the history kept its last {args.max_entries} entries and dropped older "
              "ones; the trace leaves out frees of what it does not show. Raise --max-entries.", file=sys.stderr)
    actions = sorted({e["action"] for e in entries})
    if any("record_stream" in a for a in actions):
        print(f"real_bench record: the history has record_stream entries, which write_trace does not turn "
              f"into 'r' lines (actions: {actions})", file=sys.stderr)
    elif args.workload == "multistream":
        print("real_bench record: PyTorch's memory history has no record_stream entries (actions: "
              f"{', '.join(actions)}), so the trace has no 'r' lines: its side-stream blocks are freed "
              "as if record_stream had not been called", file=sys.stderr)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    calls, peak = write_trace(snapshot, args.out, waits=args.waits)
    print(f"{args.workload}: {steps} steps, {calls} calls, peak live {peak / GB:.2f} GB, "
          f"{time.perf_counter() - t0:.1f} s -> {args.out}", flush=True)


# ---- entry ----


def main(argv):
    if argv and argv[0] in ("child", "table", "record"):
        p = argparse.ArgumentParser(prog=f"real_bench.py {argv[0]}")
        if argv[0] == "table":
            p.add_argument("results", help="real_results.jsonl")
            print(table(load_rows(p.parse_args(argv[1:]).results)), end="")
            return 0
        p.add_argument("--workload", required=True,
                       choices=list(WORKLOAD_STEPS) + (list(RECORD_ONLY_STEPS) if argv[0] == "record" else []))
        p.add_argument("--out", required=True)
        if argv[0] == "child":
            p.add_argument("--alloc", required=True, help="native, expandable, async, or any name for xsalloc")
            p.add_argument("--steps", type=int, required=True)
            p.add_argument("--conf", help="XSALLOC_CONF string for xsalloc (default: xsalloc's defaults)")
            p.add_argument("--lag", help="file for xsalloc's lag probe (XSALLOC_LAG_PROBE)")
            p.add_argument("--profile", action="store_true", help="the first quarter under torch.profiler")
            args = p.parse_args(argv[1:])
            try:
                child(args)
            except BaseException as e:  # the parent reports the last line
                import traceback

                traceback.print_exc()
                print(f"real_bench child: {args.workload} under {args.alloc} failed: {type(e).__name__}: "
                      f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}", file=sys.stderr, flush=True)
                return 1
            return 0
        p.add_argument("--steps", type=int, help="default: the workload's")
        p.add_argument("--max-entries", type=int, default=4_000_000, help="memory history ring (4,000,000)")
        p.add_argument("--waits", action="store_true",
                       help="also write the host's waits of 1 ms or more ('w' lines), for replays on trace time")
        p.add_argument("--seed", type=int, help="the request mix's seed (llama_requests)")
        record(p.parse_args(argv[1:]))
        return 0
    return run_all(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
