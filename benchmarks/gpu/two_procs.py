"""Two processes on one GPU: B asks for the memory A freed after its burst. Decay on: B gets it; off: B does not.

    two_procs.py [--modes xsalloc,xsalloc_decay,xsalloc_off,native,native_ec] [--wait-s 1.5] [--timeout 150]
    two_procs.py trainer --mode M --dir D          (process A)
    two_procs.py asker --dir D                     (process B)

Design: for each mode, the parent starts B first (torch's own allocator;
it initialises CUDA, then waits for a file) and A (the mode's allocator),
which trains GPT-2 small (real_workloads.py; batch 8 x 512, AdamW, bf16)
for a few steps, measures the GPU's free memory F, then runs a burst: an
evaluation's forward pass on twice the batch plus tensors up to 85% of F
in all, held at once, then freed (native_ec: then torch.cuda.empty_cache(),
by hand). A keeps training and writes a line when the burst is over; the
parent waits --wait-s, then tells B to allocate half of F at once
(torch.empty). With decay on A's allocator has given the burst's memory
back to the driver by then and B's allocation succeeds; with it off (and
under torch's allocators without empty_cache) A still holds it and B gets
out of memory. Every number is printed: F, A's reserved memory at the
burst's peak and when B asked (its allocator's statistics and the GPU's
used memory from cuMemGetInfo), B's request, B's result and the GPU's free
memory B saw. Exit 1 if a mode's outcome is not the expected one (decay
on, as xsalloc's defaults have it: granted; off, native: refused; native_ec: granted). About 40 s a mode
on an H100.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
GB = 1e9

MODES = {  # name: (XSALLOC_CONF ("": the defaults) or None for torch's allocator, empty_cache after the burst,
    #          B should succeed)
    "xsalloc": ("", False, True),
    "xsalloc_decay": ("helper_thread:True,page_decay_ms:500", False, True),
    "xsalloc_off": ("helper_thread:False", False, False),
    "native": (None, False, False),
    "native_ec": (None, True, True),
}


def wait_for(path, timeout):
    t0 = time.monotonic()
    while not os.path.exists(path):
        if time.monotonic() - t0 > timeout:
            raise TimeoutError(f"no {path} after {timeout} s")
        time.sleep(0.01)


def say(path, obj):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def trainer(args):
    conf, empty, _ = MODES[args.mode]
    for var in ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "XSALLOC_CONF"):
        os.environ.pop(var, None)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    if conf is not None:
        sys.path.append(os.path.join(ROOT, "python"))
        import xsalloc.torch

        xsalloc.torch.use(conf=conf or None)
    sys.path.insert(0, HERE)
    import real_workloads

    torch.manual_seed(0)
    model, _ = real_workloads.gpt2_model()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    vocab, batch, length = real_workloads.GPT2_VOCAB, 8, 512

    def step():
        ids = torch.randint(0, vocab, (batch, length), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(5):
        step()
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    before = torch.cuda.memory_allocated()
    ids = torch.randint(0, vocab, (2 * batch, length), device="cuda")
    with torch.autocast("cuda", dtype=torch.bfloat16):
        loss = model(input_ids=ids, labels=ids).loss  # an evaluation's activations, kept
    held, pad = [], int(0.85 * free) - (torch.cuda.memory_allocated() - before)
    while pad > 0:  # tensors up to 85% of the free memory in all, as a long evaluation holds
        n = min(pad, 1 << 30)
        held.append(torch.empty(n, dtype=torch.uint8, device="cuda"))
        pad -= n
    torch.cuda.synchronize()
    peak_reserved = torch.cuda.memory_reserved()
    peak_used = total - torch.cuda.mem_get_info()[0]
    del loss, ids, held
    if empty:
        torch.cuda.empty_cache()
    torch.cuda.synchronize()
    say(os.path.join(args.dir, "burst"), {"free_before": free, "total": total, "peak_reserved": peak_reserved,
                                          "peak_used": peak_used})
    stop = os.path.join(args.dir, "stop")
    asked = os.path.join(args.dir, "asked")
    report = None
    t0 = time.monotonic()
    while not os.path.exists(stop) and time.monotonic() - t0 < 60:
        step()
        torch.cuda.synchronize()
        if report is None and os.path.exists(asked):
            report = {"reserved_when_asked": torch.cuda.memory_reserved(),
                      "allocated_when_asked": torch.cuda.memory_allocated(),
                      "used_when_asked": total - torch.cuda.mem_get_info()[0]}
            say(os.path.join(args.dir, "trainer"), report)


def asker(args):
    os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    os.environ.pop("PYTORCH_ALLOC_CONF", None)
    import torch

    torch.zeros(1, device="cuda")  # CUDA initialised before A's burst
    say(os.path.join(args.dir, "ready"), {})
    wait_for(os.path.join(args.dir, "go"), 120)
    with open(os.path.join(args.dir, "go")) as f:
        want = json.load(f)["bytes"]
    say(os.path.join(args.dir, "asked"), {})
    free = torch.cuda.mem_get_info()[0]
    try:
        x = torch.empty(want, dtype=torch.uint8, device="cuda")
        x.fill_(1)
        torch.cuda.synchronize()
        result = {"granted": True}
        del x
    except torch.OutOfMemoryError as e:
        result = {"granted": False, "error": str(e).split(".")[0]}
    say(os.path.join(args.dir, "asker"), dict(result, bytes=want, free_seen=free))


def one_mode(mode, args):
    d = tempfile.mkdtemp(prefix=f"two_procs-{mode}-")
    me = os.path.abspath(__file__)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    b = subprocess.Popen([sys.executable, me, "asker", "--dir", d], env=env, stdout=subprocess.DEVNULL,
                         stderr=open(os.path.join(d, "asker.log"), "w"))
    wait_for(os.path.join(d, "ready"), 60)
    a = subprocess.Popen([sys.executable, me, "trainer", "--mode", mode, "--dir", d], env=env,
                         stdout=subprocess.DEVNULL, stderr=open(os.path.join(d, "trainer.log"), "w"))
    try:
        wait_for(os.path.join(d, "burst"), args.timeout)
        with open(os.path.join(d, "burst")) as f:
            burst = json.load(f)
        time.sleep(args.wait_s)
        say(os.path.join(d, "go"), {"bytes": burst["free_before"] // 2})
        wait_for(os.path.join(d, "asker"), 60)
        wait_for(os.path.join(d, "trainer"), 60)
    finally:
        open(os.path.join(d, "stop"), "w").close()
        for p in (a, b):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
    with open(os.path.join(d, "asker")) as f:
        asked = json.load(f)
    with open(os.path.join(d, "trainer")) as f:
        trained = json.load(f)
    return burst, asked, trained


def main(argv):
    if argv and argv[0] in ("trainer", "asker"):
        p = argparse.ArgumentParser(prog=f"two_procs.py {argv[0]}")
        p.add_argument("--dir", required=True)
        if argv[0] == "trainer":
            p.add_argument("--mode", required=True, choices=list(MODES))
        args = p.parse_args(argv[1:])
        (trainer if argv[0] == "trainer" else asker)(args)
        return 0
    p = argparse.ArgumentParser(prog="two_procs.py", description=__doc__.splitlines()[0])
    p.add_argument("--modes", default=",".join(MODES))
    p.add_argument("--wait-s", type=float, default=1.5, help="after A's burst, before B asks (1.5)")
    p.add_argument("--timeout", type=float, default=150, help="seconds for A to reach its burst (150)")
    args = p.parse_args(argv)
    bad = 0
    for mode in [m for m in args.modes.split(",") if m]:
        try:
            burst, asked, trained = one_mode(mode, args)
        except (TimeoutError, OSError, ValueError) as e:
            print(f"two_procs: {mode}: FAILED: {e}", flush=True)
            bad += 1
            continue
        expect = MODES[mode][2]
        ok = asked["granted"] == expect
        bad += not ok
        print(f"two_procs: {mode:14s} free before A's burst {burst['free_before'] / GB:6.2f} GB; A at its burst: reserved "
              f"{burst['peak_reserved'] / GB:6.2f} GB, GPU used {burst['peak_used'] / GB:6.2f} GB; "
              f"{args.wait_s:g} s after: A reserved {trained['reserved_when_asked'] / GB:6.2f} GB (live "
              f"{trained['allocated_when_asked'] / GB:.2f}), GPU used {trained['used_when_asked'] / GB:6.2f} GB; "
              f"B asked {asked['bytes'] / GB:.2f} GB with {asked['free_seen'] / GB:.2f} GB free: "
              f"{'GRANTED' if asked['granted'] else 'REFUSED'} (expected {'granted' if expect else 'refused'}"
              f"{'' if ok else ': MISMATCH'})", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
