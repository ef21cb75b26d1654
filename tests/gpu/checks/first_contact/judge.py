"""The verdict of one case of tests/gpu/run_first_contact.sh: what issue 34
wants it to show, checked against what the case printed.

    python3 judge.py CASE WORKDIR [EXTRA]

WORKDIR holds CASE.out (stdout, with PROBE lines), CASE.err and CASE.rc,
and CASE_plain.* for a case run under plain python beside; EXTRA is the
case's extension cache (the cases about builds). Prints one line, "PASS
CASE: detail" or "FAIL CASE: detail", and exits 0 or 1.
"""

import glob
import json
import os
import re
import sys

MiB = 1 << 20


class Run:
    def __init__(self, work, name):
        def read(ext, default=""):
            path = os.path.join(work, f"{name}.{ext}")
            return open(path, errors="replace").read() if os.path.exists(path) else default

        self.out, self.err = read("out"), read("err")
        self.rc = int(read("rc", "-1").strip() or -1)
        self.probes = [json.loads(line[6:]) for line in self.out.splitlines() if line.startswith("PROBE ")]
        self.probe = self.probes[0] if self.probes else {}


def short(text, n=300):
    text = " | ".join(line for line in text.strip().splitlines() if line.strip())
    return text[-n:]


def builds(cache):
    """Build directories in the extension cache, and the files each holds."""
    return {os.path.basename(d): sorted(os.listdir(d)) for d in glob.glob(os.path.join(cache or "", "*"))}


def on_adapter(r):
    return r.rc == 0 and r.probe.get("adapter_in_use") is True


def gpt2(r, cache):
    ok = on_adapter(r) and r.probe.get("finite") and r.probe.get("backend") == "xsalloc" and not builds(cache)
    return ok, f"rc {r.rc}, {r.probe or short(r.err)}, builds at first use: {len(builds(cache))}"


def same_as_plain(key):
    def judge(r, plain, want):
        ok = r.rc == 0 and plain.rc == 0 and r.probe == plain.probe == want
        return ok, f"xsalloc {r.probe or short(r.err)}; plain {plain.probe or short(plain.err)}"
    return judge


def fork_after(r, plain):
    msg = "Cannot re-initialize CUDA in forked subprocess"
    ok = r.rc == 0 and msg in r.probe.get("child", "") and msg in plain.probe.get("child", "")
    return ok, f"child: {r.probe.get('child', short(r.err))[:120]}"


def oom(adapter):
    def judge(r):
        ok = (r.rc == 0 and r.probe.get("adapter_in_use") is adapter
              and r.probe.get("result", "").startswith("OutOfMemoryError") and "after_fill" not in r.probe)
        return ok, f"{r.probe or short(r.err)}"
    return judge


def no_adapter(r):
    ok = (r.rc == 1 and not r.probes and "xsalloc cannot become the allocator" in r.err
          and "XSALLOC_TORCH_ADAPTER=0" in r.err and "Traceback" not in r.err)
    return ok, f"rc {r.rc}; {short(r.err, 400)}"


def observer(r, plain):
    want = {"observer_saw": [1], "error": "OutOfMemoryError"}
    ok = r.rc == 0 and r.probe == want and plain.probe == want
    return ok, f"xsalloc {r.probe or short(r.err)}; plain {plain.probe}"


def spawn(r):
    """DDP children on the adapter, with the same weights after their steps (DDP's all-reduce)."""
    ok = (r.rc == 0 and len(r.probes) == 2 and all(p.get("adapter_in_use") for p in r.probes)
          and len({p.get("weight_sum") for p in r.probes}) == 1)
    kids = [(p.get("rank"), f"cuda:{p.get('device')}", p.get("backend"), p.get("adapter_in_use")) for p in r.probes]
    return ok, f"rc {r.rc}; children (rank, device, backend, adapter) {kids}; weights {[p.get('weight_sum') for p in r.probes]}"


def torchrun(ranks, jit):
    def judge(r, cache):
        on = [p for p in r.probes if p.get("adapter_in_use") is True]
        b = builds(cache)
        waits = len(set(re.findall(r"rank (\d+) \(pid \d+\): waiting for", r.err)))  # ranks that said so
        ok = r.rc == 0 and len(on) == ranks and len(b) == (1 if jit else 0) and (not jit or waits == ranks - 1)
        return ok, (f"rc {r.rc}; ranks on the adapter {len(on)} of {ranks}; builds at first use {len(b)}; "
                    f"ranks saying they wait {waits}")
    return judge


def killed(r, cache):
    removed = "left by a build that was killed" in r.err
    ok = on_adapter(r)
    return ok, (f"rc {r.rc}; adapter {r.probe.get('adapter_in_use')}; torch's stale lock "
                f"{'found and removed' if removed else 'not left by the kill'}; {short(r.err, 200)}")


def module(r):
    ok = r.rc == 0 and r.probe.get("name") == "__main__" and r.probe.get("argv", [])[1:] == ["a", "b"] \
        and r.probe.get("adapter_in_use") is True
    return ok, f"rc {r.rc}; {r.probe or short(r.err)}"


def cpu_only(r, plain):
    notices = [line for line in r.err.splitlines() if line.startswith("xsalloc")]
    ok = (r.rc == 0 and r.probe.get("cuda_available") is False and r.probe.get("loss") == plain.probe.get("loss")
          and len(notices) == 1 and "CUDA_VISIBLE_DEVICES=''" in notices[0])
    return ok, f"rc {r.rc}; loss {r.probe.get('loss')} (plain {plain.probe.get('loss')}); notices {notices}"


def cupy(r):
    if "No module named 'cupy'" in r.err:
        return None, "cupy is not installed"
    ok = r.rc == 0 and r.probe.get("allocator") == "xsalloc.cupy"
    return ok, f"{r.probe or short(r.err)}"


def settings(r, plain):
    p = r.probe
    ts, after = p.get("torch_settings"), p.get("torch_settings_after")
    checks = {
        "on the adapter": p.get("adapter_in_use") is True,
        "layered line": 'from XSALLOC_CONF: "max_split_size_mb:64" over PYTORCH_CUDA_ALLOC_CONF: '
                        '"expandable_segments:False"' in p.get("xsalloc_settings", ""),
        "64 MiB in a classic segment": p.get("segment_is_expandable") is False,
        "torch's settings: expandable False, max split 64 MiB": bool(ts) and ts[0] is False and ts[1] == 64 * MiB,
        "torch takes the string alone": plain.probe.get("torch_takes") is True,
        "xsalloc refuses it": p.get("runtime_bad", "").startswith(("XsallocError", "XsallocConfigError")),
        "torch's settings unchanged": after == ts,
        "xsalloc's unchanged": p.get("xsalloc_settings_after") == p.get("xsalloc_settings"),
    }
    failed = [k for k, v in checks.items() if not v]
    return r.rc == 0 and not failed, f"failed: {failed}; {p or short(r.err)}" if failed else f"{p}"


def settings_default(r):
    p, ts = r.probe, r.probe.get("torch_settings")
    ok = r.rc == 0 and p.get("segment_is_expandable") is True and bool(ts) and ts[0] is True
    return ok, f"torch's expandable_segments {ts and ts[0]} (xsalloc's default True); {p.get('xsalloc_settings')}"


def lag(r, lag_file):
    try:
        with open(lag_file) as f:
            stats = json.load(f)
    except (OSError, ValueError) as e:
        return False, f"no lag file: {e}"
    ok = on_adapter(r) and stats.get("calls", 0) > 0 and stats.get("probes", 0) > 0 and stats.get("error") is None
    return ok, f"calls {stats.get('calls')}, probes {stats.get('probes')}, p50 {stats.get('p50')}"


def main():
    case, work = sys.argv[1], sys.argv[2]
    extra = sys.argv[3] if len(sys.argv) > 3 else None
    r = Run(work, case)
    plain = Run(work, case + "_plain")
    rules = {
        "gpt2": lambda: gpt2(r, extra),
        "cvd": lambda: same_as_plain("cvd")(r, plain, {"device_count": 0, "available": False, "sum": 3.0}),
        "fork": lambda: same_as_plain("fork")(r, plain, {"pool": [4.0, 4.0], "loader_sum": 960.0}),
        "fork_after": lambda: fork_after(r, plain),
        "oom_pluggable": lambda: oom(False)(r),
        "oom_adapter": lambda: oom(True)(r),
        "no_adapter": lambda: no_adapter(r),
        "observer": lambda: observer(r, plain),
        "spawn": lambda: spawn(r),
        "torchrun8": lambda: torchrun(8, False)(r, extra),
        "torchrun8_jit": lambda: torchrun(8, True)(r, extra),
        "killed": lambda: killed(r, extra),
        "module": lambda: module(r),
        "cpu_only": lambda: cpu_only(r, plain),
        "cupy": lambda: cupy(r),
        "settings": lambda: settings(r, plain),
        "settings_default": lambda: settings_default(r),
        "lag": lambda: lag(r, extra),
    }
    try:
        ok, detail = rules[case]()
    except Exception as e:  # noqa: BLE001 - a malformed output is the case's failure
        ok, detail = False, f"{type(e).__name__}: {e}; {short(r.out + r.err)}"
    verdict = "SKIP" if ok is None else "PASS" if ok else "FAIL"
    print(f"{verdict} {case}: {detail}"[:900], flush=True)
    sys.exit(0 if ok is not False else 1)


if __name__ == "__main__":
    main()
