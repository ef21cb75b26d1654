"""Wall time of real workloads under PyTorch's allocators and xsalloc, interleaved, rounds spread over calls.

    walltime.py run [--rounds 8] [--results FILE] [--workloads W,...] [--allocs A,...] [--budget-s 540]
                    [--timeout 240] [--gpus N] [--alternate] [--pin]
    walltime.py table FILE
    walltime.py child --workload W --alloc A --out FILE [--alternate N] [--cpus LIST]

Design: each run is one child process (PyTorch reads its allocator
configuration once per process) that builds its workload
(real_workloads.py: models built in code, random data, fixed seeds) and
reports its median step time after warm-up: a CUDA event is recorded
after every step without synchronizing, so the CPU runs ahead of the GPU
as in training, and step i's time is the GPU's time between the events of
steps i-1 and i (what the GPU spent on the step, and any time it waited
for the CPU). The first quarter of the steps (at least 2) is warm-up.
Each thread's CPU time over the steps (/proc) shows what a second
thread, xsalloc's helper among them, took from the host. A
round runs every workload under every allocator, the allocators' order
rotated every round (and every workload), so a slow spell of the host
blurs them alike. Every result is appended to the results file as one
JSON line as soon as it is measured. --rounds is the number of rounds
wanted in the file: a call launches, in order, the runs the file lacks
(failed ones again) until --budget-s is spent, so that a session's
device time (about 30 minutes) holds part of them and the next call
with the same --results goes on where it stopped; then it prints the
table of everything in the file. With --gpus N (a machine of N GPUs), N
children run at once, each alone on its GPU, taking the runs in the same
order: the allocators of one workload and round run side by side, and
which GPU each gets changes from round to round; each result names its
GPU. Each result also holds the run's start-up (import_s: process start
to torch imported; setup_s: to its first step), which the table's
start-up line sums up: the device time a run spends besides its steps;
and the `run` call that launched it (call: when that call began, UTC),
since rounds of one call lean together and the table shows each call's
ratios apart.
Before any run it refuses --gpus beyond the machine's GPUs and a
results file from another kind of card, and it stops launching after
runs fail in a row (twice --gpus, at least 4). `table` prints, one table
a kind of card, per workload and allocator, the median of the
runs' medians with their min and max and how many runs, and each
allocator's median against the fastest of torch native and expandable
and against xsalloc with decay and the helper off, and the same ratios
taken round by round (a run against the runs of its own round) with
their median, min and max, and torch expandable against torch native
round by round: the method's own spread, what a ratio must beat to mean
anything; the same pairs summed up as a geometric mean with a bootstrap
interval (walltime_stats.py), per workload and over all; and each
variant against each torch allocator apart, beside how far taking the faster of a round's two torch runs lowers that
comparator (with runs this noisy, the faster of two is lower than either
allocator's typical run). Since that spread is larger than 2% on these
hosts, an xsalloc child also times its driver calls (two clock reads a
call) and the table
gives what xsalloc itself spent on the allocating threads a step (driver
calls, the helper thread's counted apart, and waits for the device's
lock), so a variant's cost over xsalloc_off is measured where the
ratios cannot show it, and the driver calls' median step after warm-up
(each step's driver time is read after its end), to set beside the
median step times.

`run --pin` runs each child on the CPUs local to its GPU (the GPU's
NUMA node, from nvidia-smi's PCI bus id and sysfs; `child --cpus LIST`
sets the affinity before torch is imported), so that no run's launches
cross to the other socket; each result names its CPUs, and pinned and
unpinned runs go in results files of their own.

`child --alternate N` (an xsalloc allocator) measures decay's cost inside
one process, where runs of one allocator differ by up to 15% between
processes: every N steps it switches between xsalloc_off's and
xsalloc_decay's settings at run time (xsalloc.set_allocator_settings),
blocks in the order off, decay, decay, off, off, decay, ... (so that a
drift over the run weighs on both alike), and reports each mode's median
step time after warm-up, leaving out the first step of every block (the
switch's own cost), and their ratio. `run --alternate` runs such
children (xsalloc_off's settings first, ALTERNATE_BLOCK's N a workload)
as rounds, in a results file of their own, and the table gives each
workload's ratios, median [min-max] (n runs).

Allocators: native (no PYTORCH_CUDA_ALLOC_CONF), expandable
(expandable_segments:True), xsalloc (xsalloc.torch.use(), its defaults),
xsalloc_off (helper_thread:False: no decay, no helper), xsalloc_helper
(helper_thread:True,page_decay_ms:0: the helper alone), xsalloc_decay
(helper_thread:True,page_decay_ms:500), xsalloc_roomy (xsalloc_off with
page_recycling_headroom:0.08: what the 1% headroom costs in time, since
a small job's pages are then created in chunks of several and move only
past 8%; not in the rounds by default). Workloads: gpt2_200 (GPT-2 small,
200 steps), resnet (ResNet-50, 48 steps), loader_24 and loader_200 (the
side-stream data loader, 24 and 200 steps), llama_gen (Llama generation,
8 requests), moe (Mixtral-style MoE training, 40 steps).
"""

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

import walltime_stats

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
    "xsalloc_helper": (None, "helper_thread:True,page_decay_ms:0", True),
    "xsalloc_decay": (None, "helper_thread:True,page_decay_ms:500", True),
    "xsalloc_roomy": (None, "helper_thread:False,page_recycling_headroom:0.08", True),
}
ON_REQUEST = ("xsalloc_roomy",)  # left out of run's default --allocs
TORCH = ("native", "expandable")  # the fastest of them is what xsalloc is held against
XSALLOCS = ("xsalloc", "xsalloc_helper", "xsalloc_decay", "xsalloc_roomy", "xsalloc_off")
VARIANTS = tuple(a for a in XSALLOCS if a != "xsalloc_off")  # each judged against xsalloc_off
AB_MODES = ("xsalloc_off", "xsalloc_decay")  # child --alternate: the settings it switches between, ABBA
# run --alternate: steps a block, a few of decay's 500 ms windows where steps are short (not llama_gen: its
# requests differ too much for a block's median)
ALTERNATE_BLOCK = {"gpt2_200": 10, "resnet": 4, "loader_24": 3, "loader_200": 10, "moe": 4}
# xsalloc's counters read before and after the steps: pages, and the calls that slept for the device's lock
XSALLOC_STEP_STATS = ("num_pages_mapped", "num_pages_unmapped", "num_pages_recycled", "num_device_lock_waits",
                      "device_lock_wait_us")
SYSFS_PCI = "/sys/bus/pci/devices"  # a PCI device's local_cpulist: the CPUs of its NUMA node


def child(args):
    """Runs one workload under one allocator; writes one JSON object."""
    t_start = time.perf_counter()
    torch_conf, xsa_conf, use_xsalloc = ALLOCS[args.alloc]
    block = args.alternate
    if block is not None and (not use_xsalloc or block < 1):
        sys.exit(f"walltime.py child: --alternate {block} needs an xsalloc allocator and N >= 1")
    if args.cpus:
        os.sched_setaffinity(0, parse_cpus(args.cpus))
    for var in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "XSALLOC_CONF", "XSALLOC_LAG_PROBE"):
        os.environ.pop(var, None)
    if torch_conf:
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = torch_conf
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    setup = {"import_s": time.perf_counter() - t_start}
    if use_xsalloc:
        sys.path.append(os.path.join(ROOT, "python"))
        import xsalloc
        import xsalloc.torch

        xsalloc.torch.use(conf=xsa_conf if xsa_conf else None)
    sys.path.insert(0, HERE)
    import real_workloads

    events, cpu_ends, counts, modes, step_path = [], [], {}, [], []

    def xsalloc_counts(entries):  # driver calls, their microseconds (the allocating threads', the helper's), pages
        stats = xsalloc.torch.memory_stats()
        calls = {k: v[0] for k, v in entries.items()}
        calls["driver_us"] = round(path_us(entries))
        calls["helper_driver_us"] = round(sum(v[3] for v in entries.values()))
        return {**calls, **{k: stats[k] for k in XSALLOC_STEP_STATS}}

    def path_us(entries):  # microseconds of driver calls on the allocating threads so far
        return sum(v[1] - v[3] for v in entries.values())

    def timed_steps(steps, step):  # real_workloads' own, with an event after every step
        torch.cuda.synchronize()
        setup.setdefault("setup_s", time.perf_counter() - t_start)  # the process's start to its first step
        counts["threads_before"] = thread_cpu()
        if use_xsalloc:
            xsalloc.time_driver_calls(True)  # two clock reads a driver call (microseconds each)
            entries = xsalloc.driver_calls()
            counts["before"] = xsalloc_counts(entries)
            step_path.append(path_us(entries))
        start = torch.cuda.Event(enable_timing=True)
        start.record()
        t0 = time.perf_counter()
        for i in range(steps):
            if block and i % block == 0:  # blocks off, decay, decay, off, off, decay, ...
                mode = AB_MODES[(i // block + 1) // 2 % 2]
                xsalloc.set_allocator_settings(ALLOCS[mode][1])
            if block:
                modes.append(mode)
            step(i)
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            events.append(e)
            cpu_ends.append(time.perf_counter() - t0)
            if use_xsalloc:  # 15 us a read (simulated driver, 9 entry points), after the step's end was taken
                step_path.append(path_us(xsalloc.driver_calls()))
        torch.cuda.synchronize()
        events.insert(0, start)
        wall = time.perf_counter() - t0
        counts["threads_after"] = thread_cpu()
        if use_xsalloc:
            counts["after"] = xsalloc_counts(xsalloc.driver_calls())
        return {"wall_s": wall, "steady_s": wall}

    real_workloads.timed_steps = timed_steps
    fn, steps = WORKLOADS[args.workload]
    res = getattr(real_workloads, fn)(steps)
    times = [events[i - 1].elapsed_time(events[i]) / 1e3 for i in range(1, len(events))]
    warm = warm_up(len(times))
    out = {"workload": args.workload, "alloc": args.alloc, "steps": steps, "median_step_s": statistics.median(times[warm:]),
           "wall_s": res["wall_s"], "impl": res["impl"], "device": torch.cuda.get_device_name(),
           "peak_reserved": torch.cuda.max_memory_reserved(), "peak_allocated": torch.cuda.max_memory_allocated(),
           **{k: round(v, 2) for k, v in setup.items()},
           # every step's GPU time and the CPU's time at each step's end, to see where a median moved
           "step_s": [round(t, 5) for t in times], "cpu_end_s": [round(t, 4) for t in cpu_ends]}
    if args.cpus:
        out["cpus"] = args.cpus
    # each thread's CPU seconds during the steps ("main": the thread that ran them), those above 10 ms
    before, after = counts["threads_before"], counts["threads_after"]
    used = {t: (name, cpu - before.get(t, (name, 0.0))[1]) for t, (name, cpu) in after.items()}
    out["threads_cpu_s"] = sorted(([("main" if t == os.getpid() else name), round(c, 3)] for t, (name, c) in used.items()
                                   if c >= 0.01), key=lambda x: -x[1])
    if use_xsalloc:  # what xsalloc did during the steps: driver calls per entry point, pages, lock waits
        before, after = counts["before"], counts["after"]
        out["xsalloc_steps"] = {k: v - before.get(k, 0) for k, v in after.items() if v != before.get(k, 0)}
        for k in ("driver_us", "helper_driver_us"):  # kept at 0: a run that timed its driver calls
            out["xsalloc_steps"].setdefault(k, 0)
        # each step's driver time on the allocating threads, to set beside the steps' times after warm-up
        out["step_driver_us"] = [round(b - a) for a, b in zip(step_path, step_path[1:])]
    if block:
        kept = [i for i in range(warm, len(times)) if i % block]  # a block's first step pays for the switch
        median = {m: statistics.median(times[i] for i in kept if modes[i] == m) for m in AB_MODES
                  if any(modes[i] == m for i in kept)}
        out["alternate"] = {"block": block, "modes": modes, "median_s": median}
        if len(median) == len(AB_MODES):
            out["alternate"]["ratio"] = median[AB_MODES[1]] / median[AB_MODES[0]]
    tmp = args.out + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, args.out)


def warm_up(steps):
    """How many of a run's first steps are warm-up: a quarter, at least 2."""
    return max(2, steps // 4)


def thread_cpu():
    """Each thread of this process: {tid: (name, CPU seconds so far)}, from /proc (empty where it is missing)."""
    out, tick = {}, os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                text = f.read()
        except OSError:
            continue  # the thread ended
        name, fields = text[text.index("(") + 1:text.rindex(")")], text[text.rindex(")") + 2:].split()
        out[int(tid)] = (name, (int(fields[11]) + int(fields[12])) / tick)  # utime, stime
    return out


def load(path):
    rows = []
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if line:
                    rows.append(json.loads(line))
    return rows


def parse_cpus(text):
    """A CPU list as sysfs writes it ("0-15,32-47") as a set of CPU numbers."""
    cpus = set()
    for part in text.strip().split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return cpus


def gpu_cpus(gpu):
    """The CPU list local to `gpu` (an index as CUDA_VISIBLE_DEVICES of this process counts them): its PCI
    device's local_cpulist in sysfs, found by nvidia-smi's bus id; None where either is missing."""
    buses = smi_query("pci.bus_id")
    if buses is None or gpu >= len(buses):
        return None
    # nvidia-smi writes the PCI domain with 8 digits (00000000:19:00.0), sysfs with 4, in lower case.
    try:
        with open(os.path.join(SYSFS_PCI, buses[gpu][-12:].lower(), "local_cpulist")) as f:
            cpus = f.read().strip()
        parse_cpus(cpus)
    except (OSError, ValueError):
        return None
    return cpus


def start_child(job, gpu, tmp_dir, block=None, cpus=None):
    """Launches run `job` (round, workload, allocator) on `gpu` (None: the default device), switching
    settings every `block` steps if given (child --alternate), on the CPUs `cpus` if given (child --cpus)."""
    rnd, w, a = job
    out = os.path.join(tmp_dir, f".walltime-{os.getpid()}-{rnd}-{w}-{a}.json")
    cmd = [sys.executable, os.path.abspath(__file__), "child", "--workload", w, "--alloc", a, "--out", out]
    if block:
        cmd += ["--alternate", str(block)]
    if cpus:
        cmd += ["--cpus", cpus]
    env = dict(os.environ)
    if gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(gpu)
    with open(out + ".err", "w") as err:  # a file, not a pipe nobody reads while the child runs
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=env)
    return {"job": job, "gpu": gpu, "out": out, "proc": proc, "t0": time.monotonic()}


def finish_child(c, results, start, timeout, call):
    """Collects a child that exited (or kills one past `timeout`): one JSON line in results, naming the `run`
    call that launched it (when the call began, UTC)."""
    rnd, w, a = c["job"]
    if c["proc"].poll() is None:
        c["proc"].kill()
        c["proc"].wait()
        err = f"timed out after {timeout:g} s"
    else:
        with open(c["out"] + ".err") as f:
            stderr = f.read().strip().splitlines()
        err = None if c["proc"].returncode == 0 else (stderr or ["no output"])[-1][:300]
    os.remove(c["out"] + ".err")
    rec = {"round": rnd, "workload": w, "alloc": a, "call": call, "child_s": round(time.monotonic() - c["t0"], 1)}
    if c["gpu"] is not None:
        rec["gpu"] = c["gpu"]
    try:
        with open(c["out"]) as f:
            rec.update(json.load(f))
        os.remove(c["out"])
        rec["status"] = "ok"
    except (OSError, ValueError):
        rec.update(status="failed", error=err or "no result")
    with open(results, "a") as f:
        f.write(json.dumps(rec) + "\n")
    shown = f"{rec['median_step_s'] * 1e3:8.2f} ms a step" if rec["status"] == "ok" else f"FAILED: {rec['error']}"
    if rec.get("alternate", {}).get("ratio"):
        shown += f", decay / off {rec['alternate']['ratio']:.3f} inside the run"
    where = f" gpu {c['gpu']}" if c["gpu"] is not None else ""
    print(f"walltime [{time.monotonic() - start:4.0f}s] round {rnd} {w:10s} {a:14s}{where} {shown}", flush=True)
    return rec["status"] == "ok"


def smi_query(field):
    """nvidia-smi's `field` of each GPU this process sees (CUDA_VISIBLE_DEVICES applied); None if nvidia-smi is
    missing."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={field}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    values = [v.strip() for v in out.splitlines() if v.strip()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        values = [values[int(i)] for i in visible.split(",") if i.strip().isdigit() and int(i) < len(values)]
    return values


def gpus_here():
    """This machine's GPU names (nvidia-smi, CUDA_VISIBLE_DEVICES applied); None if nvidia-smi is missing."""
    return smi_query("name")


def check_machine(args):
    """Refuses, before any run, --gpus beyond this machine's GPUs and a results file from other cards."""
    names = gpus_here()
    if names is None:
        return
    if args.gpus > len(names):
        sys.exit(f"walltime: --gpus {args.gpus} but this machine has {len(names)} GPU(s): {names}")
    # torch names an H100 "NVIDIA H100 80GB HBM3", nvidia-smi the same.
    theirs = sorted({r["device"] for r in load(args.results) if r.get("status") == "ok" and r.get("device")})
    if names and theirs and any(d != names[0] for d in theirs):
        sys.exit(f"walltime: {args.results} holds runs on {theirs}, this machine has {names[0]}: "
                 "timings add up on one kind of card only (start a new results file)")


def run(args):
    check_machine(args)
    workloads = [w for w in args.workloads.split(",") if w]
    allocs = [a for a in args.allocs.split(",") if a]
    if args.alternate:  # one child a workload and round, switching xsalloc_off's and xsalloc_decay's settings
        if args.workloads == ",".join(WORKLOADS):
            workloads = list(ALTERNATE_BLOCK)
        allocs = [AB_MODES[0]]
        if any(w not in ALTERNATE_BLOCK for w in workloads):
            sys.exit(f"walltime: --alternate runs {', '.join(ALTERNATE_BLOCK)} only")
    for flag, key, wanted in (("--alternate", "alternate", args.alternate), ("--pin", "cpus", args.pin)):
        if any(bool(r.get(key)) != bool(wanted) for r in load(args.results) if r.get("status") == "ok"):
            sys.exit(f"walltime: {args.results} holds runs {'without' if wanted else 'with'} {flag}: "
                     "they go in results files of their own")
    bad = [w for w in workloads if w not in WORKLOADS] + [a for a in allocs if a not in ALLOCS]
    if bad or not workloads or not allocs or args.gpus < 1:
        sys.exit(f"walltime: unknown or empty: {bad}; workloads {list(WORKLOADS)}, allocators {list(ALLOCS)}; "
                 f"--gpus {args.gpus}")
    done = {(r["round"], r["workload"], r["alloc"]) for r in load(args.results) if r.get("status") == "ok"}
    tmp_dir = os.path.dirname(os.path.abspath(args.results))
    jobs = []
    for rnd in range(1, args.rounds + 1):
        for wi, w in enumerate(workloads):
            shift = (rnd + wi) % len(allocs)
            jobs += [(rnd, w, a) for a in allocs[shift:] + allocs[:shift] if (rnd, w, a) not in done]
    # With --gpus N, N children at once, one a GPU: the allocators of one
    # workload and round run side by side, on GPUs that change every round.
    start, running, free = time.monotonic(), [], list(range(args.gpus)) if args.gpus > 1 else [None]
    call = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")
    cpus = {g: gpu_cpus(g or 0) for g in free} if args.pin else {}
    if any(c is None for c in cpus.values()):
        sys.exit(f"walltime: --pin: the CPUs local to GPU(s) {[g or 0 for g, c in cpus.items() if c is None]} "
                 "are unknown (nvidia-smi's PCI bus id or its local_cpulist in sysfs is missing)")
    failures = 0
    while jobs or running:
        while jobs and free and time.monotonic() - start <= args.budget_s:
            job = jobs.pop(0)
            gpu = free.pop(0)
            running.append(start_child(job, gpu, tmp_dir, ALTERNATE_BLOCK[job[1]] if args.alternate else None,
                                       cpus.get(gpu)))
        if time.monotonic() - start > args.budget_s and jobs:
            print(f"walltime: budget of {args.budget_s:g} s spent: {len(jobs)} runs not launched "
                  "(run again with the same --results to go on)")
            jobs = []
        time.sleep(0.2)
        for c in [c for c in running if c["proc"].poll() is not None or time.monotonic() - c["t0"] > args.timeout]:
            failures = 0 if finish_child(c, args.results, start, args.timeout, call) else failures + 1
            running.remove(c)
            free.append(c["gpu"])
        if failures >= max(4, 2 * args.gpus) and jobs:  # the machine, not a run: device time is scarce
            print(f"walltime: {failures} runs failed in a row: {len(jobs)} runs not launched")
            jobs = []
    table(args.results)


def table(path):
    rows = [r for r in load(path) if r.get("status") == "ok"]
    failed = [r for r in load(path) if r.get("status") != "ok"]
    if not rows:
        print("walltime: no results")
    for device in sorted({r["device"] for r in rows}):  # one table a kind of card: timings never mix
        mine = [r for r in rows if r["device"] == device]
        if any(r.get("alternate") for r in mine):
            alternate_table(mine, device)
        else:
            device_table(mine, device)
    if failed:
        print(f"\n{len(failed)} failed runs, e.g. {failed[-1]['workload']} {failed[-1]['alloc']}: {failed[-1].get('error')}")


def alternate_table(rows, device):
    """run --alternate's results: each workload's decay / off ratios inside a run."""
    print(f"\nxsalloc_decay / xsalloc_off inside one process (child --alternate), median [min-max] (n runs); {device}")
    for w in WORKLOADS:
        runs = [r["alternate"] for r in rows if r["workload"] == w and r["alternate"].get("ratio")]
        if runs:
            v = [a["ratio"] for a in runs]
            blocks = sorted({a["block"] for a in runs})
            print(f"  {w:10s} {statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}] ({len(v)}), "
                  f"blocks of {'/'.join(map(str, blocks))} steps")


def paired_ratios(rows, workloads):
    """Per round, each xsalloc variant's run against that round's fastest torch run and its xsalloc_off run
    (runs of one round ran side by side or back to back, so a slow spell of the host cancels): the median of
    those ratios [min-max] (n rounds)."""
    by = {(r["round"], r["workload"], r["alloc"]): r["median_step_s"] for r in rows}
    lines = []
    for w in workloads:
        parts = []
        for a in XSALLOCS:
            rounds = sorted({rnd for (rnd, ww, aa) in by if ww == w and aa == a})
            vs_torch = [by[rnd, w, a] / min(by[rnd, w, t] for t in TORCH if (rnd, w, t) in by)
                        for rnd in rounds if any((rnd, w, t) in by for t in TORCH)]
            vs_off = round_ratios(by, w, a, "xsalloc_off") if a != "xsalloc_off" else []
            cell = []
            for name, v in (("torch", vs_torch), ("off", vs_off)):
                if v:
                    cell.append(f"{statistics.median(v):.3f}x {name} [{min(v):.3f}-{max(v):.3f}] ({len(v)})")
            if cell:
                parts.append(f"{a} " + ", ".join(cell))
        if parts:
            lines.append(f"  {w:10s} " + "; ".join(parts))
    if lines:
        print("\nThe same, round by round: the median of each round's ratio [min-max] (n rounds)")
        print("\n".join(lines))
    spread = []
    for w in workloads:  # two allocators xsalloc is not: what the method reads between runs of one kind
        v = round_ratios(by, w, "expandable", "native")
        if v:
            spread.append(f"  {w:10s} {statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}] ({len(v)})")
    if spread:
        print("\nThe method's own spread: torch expandable / native, round by round, median [min-max] (n rounds)")
        print("\n".join(spread))
    paired_intervals(by, workloads)
    call_means(rows, workloads)
    torch_apart(by, workloads)


def paired_intervals(by, workloads):
    """Each xsalloc variant against xsalloc_off, and torch expandable against native (the method's check),
    round by round, as walltime_stats sums them up: per workload and over all of them together."""
    pairs = [(a, "xsalloc_off", f"{a} / off") for a in VARIANTS] + [
        ("expandable", "native", "expandable / native")]
    ratios = {(w, a, b): round_ratios(by, w, a, b) for w in workloads for a, b, _ in pairs}
    lines = []
    for w in workloads + [None]:
        parts = []
        for a, b, name in pairs:
            groups = [ratios[ww, a, b] for ww in ([w] if w else workloads)]
            if any(groups):
                parts.append(f"{name} {walltime_stats.cell(groups)}")
        if parts:
            lines.append(f"  {w or 'all':10s} " + "; ".join(parts))
    if lines and any(ratios[k] for k in ratios if k[1] != "expandable"):
        print("\nPaired, round by round: the geometric mean of the rounds' ratios [95% bootstrap interval] "
              "(rounds above 1 / rounds); all: every workload's rounds together")
        print("\n".join(lines))


def call_means(rows, workloads):
    """Each xsalloc variant against xsalloc_off, call by call: the geometric mean of the ratios of the rounds
    each `run` call finished (a round split over two calls counts in the later). Rounds of one call lean
    together (the host's state lasts longer than a round), so the bootstrap, which draws rounds as if
    independent, can be narrower than the spread between calls shown here. Only where a pair spans calls."""
    last, first = {}, {}  # the run's (place in the file, call, step) / each call's first place: rows come in
    for i, r in enumerate(rows):  # the order they were written
        if r.get("call"):
            last[r["round"], r["workload"], r["alloc"]] = (i, r["call"], r["median_step_s"])
            first.setdefault(r["call"], i)
    lines = []
    for w in workloads:
        parts = []
        for a in VARIANTS:
            calls = {}
            for rnd in sorted({k[0] for k in last if k[1] == w}):
                if (rnd, w, a) in last and (rnd, w, "xsalloc_off") in last:
                    x, off = last[rnd, w, a], last[rnd, w, "xsalloc_off"]
                    calls.setdefault(max(x, off)[1], []).append(x[2] / off[2])
            if len(calls) > 1:
                parts.append(f"{a} / off " + ", ".join(f"{statistics.geometric_mean(v):.3f} ({len(v)})"
                                                       for _, v in sorted(calls.items(), key=lambda c: first[c[0]])))
        if parts:
            lines.append(f"  {w:10s} " + "; ".join(parts))
    if lines:
        print("\nPaired, call by call: the geometric mean of the rounds' ratios of each walltime.py run call, "
              "in the calls' order (n rounds)")
        print("\n".join(lines))


def round_ratios(by, w, a, b):
    """Workload w's a / b in each round where both ran, in round order."""
    return [by[rnd, w, a] / by[rnd, w, b] for rnd in sorted({k[0] for k in by if k[1] == w})
            if (rnd, w, a) in by and (rnd, w, b) in by]


def torch_rounds(by, w):
    """The rounds of workload w in which every torch allocator ran, in order."""
    return sorted({rnd for (rnd, ww, _) in by if ww == w and all((rnd, w, t) in by for t in TORCH)})


def torch_apart(by, workloads):
    """Each xsalloc variant against each torch allocator apart, round by round (median, n rounds), and what
    taking the faster of two noisy torch runs does to the comparator: the mean of a round's two over its
    faster, median [min-max]. Where that pick lowers the comparator by as much as the gap judged, the
    ratios against each allocator tell more than the ratio against the faster."""
    lines = []
    for w in workloads:
        both = torch_rounds(by, w)
        if not both:
            continue
        parts = []
        for a in XSALLOCS:
            cell = []
            for t in TORCH:
                v = [by[rnd, w, a] / by[rnd, w, t] for rnd in both if (rnd, w, a) in by]
                if v:
                    cell.append(f"{statistics.median(v):.3f}x {t} ({len(v)})")
            if cell:
                parts.append(f"{a} " + ", ".join(cell))
        pick = [sum(by[rnd, w, t] for t in TORCH) / len(TORCH) / min(by[rnd, w, t] for t in TORCH) for rnd in both]
        lines.append(f"  {w:10s} " + "; ".join(parts + [f"the pick {statistics.median(pick):.3f} "
                                                          f"[{min(pick):.3f}-{max(pick):.3f}] ({len(pick)})"]))
    if lines:
        print("\nAgainst each torch allocator apart, round by round, median (n rounds); the pick: a round's mean "
              "of torch's two over the faster, median [min-max] (n rounds)")
        print("\n".join(lines))


def path_table(rows, workloads):
    """xsalloc's own time on the allocating threads over a run's steps, warm-up included: its driver calls
    (the helper thread's left out) and its waits for the device's lock, ms a step, median [min-max] (n runs);
    each variant's extra over xsalloc_off's in % of xsalloc_off's median step; and the helper thread's driver
    time (another CPU's). Only runs that timed their driver calls (xsalloc_steps' driver_us)."""
    lines = []
    for w in workloads:
        parts, path = [], {}
        off_step = [r["median_step_s"] * 1e3 for r in rows if r["workload"] == w and r["alloc"] == "xsalloc_off"]
        for a in XSALLOCS:
            mine = [r for r in rows if r["workload"] == w and r["alloc"] == a and "driver_us" in r.get("xsalloc_steps", {})]
            if not mine:
                continue
            ms = [(r["xsalloc_steps"]["driver_us"] + r["xsalloc_steps"].get("device_lock_wait_us", 0)) / 1e3 / r["steps"]
                  for r in mine]
            helper = [r["xsalloc_steps"]["helper_driver_us"] / 1e3 / r["steps"] for r in mine]
            path[a] = statistics.median(ms)
            cell = f"{a} {path[a]:.3f} [{min(ms):.3f}-{max(ms):.3f}] ({len(ms)})"
            steady = [statistics.median(r["step_driver_us"][warm_up(r["steps"]):]) / 1e3 for r in mine
                      if len(r.get("step_driver_us", ())) == r["steps"]]
            if steady:
                cell += f", after warm-up {statistics.median(steady):.3f} ({len(steady)})"
            if statistics.median(helper):
                cell += f", helper {statistics.median(helper):.3f}"
            parts.append(cell)
        extra = [f"{a} {100 * (path[a] - path['xsalloc_off']) / statistics.median(off_step):+.2f}%"
                 for a in XSALLOCS if a in path and a != "xsalloc_off" and "xsalloc_off" in path and off_step]
        if parts:
            lines.append(f"  {w:10s} " + "; ".join(parts) + (f" (over off: {', '.join(extra)})" if extra else ""))
    if lines:
        print("\nxsalloc on the allocating threads: driver calls and lock waits, ms a step over all steps, "
              "median [min-max] (n runs); after warm-up: the driver calls' median step, median of the runs; "
              "over off: the extra in % of off's median step")
        print("\n".join(lines))


def device_table(rows, device):
    print(f"\nMedian step time after warm-up, median of the runs' medians [min-max] (n runs); {device}")
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
        torch_best = min((med[w, a] for a in TORCH if (w, a) in med), default=None)
        parts = []
        for a in XSALLOCS:
            if (w, a) not in med:
                continue
            s = f"{a} {med[w, a] / torch_best:.3f}x torch" if torch_best else a
            if a != "xsalloc_off" and (w, "xsalloc_off") in med:
                s += f", {med[w, a] / med[w, 'xsalloc_off']:.3f}x off"
            flag = (torch_best and med[w, a] / torch_best > 1.02) or (
                a != "xsalloc_off" and (w, "xsalloc_off") in med and med[w, a] / med[w, "xsalloc_off"] > 1.02)
            parts.append(s + (" (!)" if flag else ""))
        print(f"  {w:10s} " + "; ".join(parts))
    paired_ratios(rows, workloads)
    path_table(rows, workloads)
    starts = {w: [r["setup_s"] for r in rows if r["workload"] == w and "setup_s" in r] for w in workloads}
    if any(starts.values()):  # where a run's device time goes besides its steps
        print("\nStart-up, median seconds from a run's process start to its first step: " +
              ", ".join(f"{w} {statistics.median(v):.1f}" for w, v in starts.items() if v))
    print("\nPeak reserved / peak allocated, median of the runs [min-max]")
    for w in workloads:
        parts = []
        for a in allocs:
            v = [r["peak_reserved"] / r["peak_allocated"] for r in rows
                 if r["workload"] == w and r["alloc"] == a and r.get("peak_allocated")]
            if v:
                parts.append(f"{a} {statistics.median(v):.3f} [{min(v):.3f}-{max(v):.3f}]")
        print(f"  {w:10s} " + "; ".join(parts))


def main(argv):
    if argv and argv[0] == "child":
        p = argparse.ArgumentParser(prog="walltime.py child")
        p.add_argument("--workload", required=True, choices=list(WORKLOADS))
        p.add_argument("--alloc", required=True, choices=list(ALLOCS))
        p.add_argument("--out", required=True)
        p.add_argument("--alternate", type=int, metavar="N",
                       help="switch between xsalloc_off's and xsalloc_decay's settings every N steps")
        p.add_argument("--cpus", metavar="LIST", help="run on these CPUs (a sysfs CPU list: 0-15,32-47)")
        child(p.parse_args(argv[1:]))
        return
    if argv and argv[0] == "table":
        table(argv[1])
        return
    p = argparse.ArgumentParser(prog="walltime.py run", description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=8, help="rounds wanted in the results file (8)")
    p.add_argument("--results", default="walltime_results.jsonl", help="JSON lines, appended to (walltime_results.jsonl)")
    p.add_argument("--workloads", default=",".join(WORKLOADS))
    p.add_argument("--allocs", default=",".join(a for a in ALLOCS if a not in ON_REQUEST))
    p.add_argument("--budget-s", type=float, default=540, help="no child is launched after this (540)")
    p.add_argument("--timeout", type=float, default=240, help="seconds a child may run (240)")
    p.add_argument("--gpus", type=int, default=1, help="children at once, one a GPU (1: one at a time)")
    p.add_argument("--alternate", action="store_true",
                   help="children that switch between xsalloc_off's and xsalloc_decay's settings (child --alternate)")
    p.add_argument("--pin", action="store_true", help="each child on the CPUs local to its GPU (child --cpus)")
    run(p.parse_args(argv[1:] if argv and argv[0] == "run" else argv))


if __name__ == "__main__":
    main(sys.argv[1:])
