"""The colocation benchmark's table and issue 32's PASS/FAIL lines, from colocate.py's RESULT files.

    python3 benchmarks/gpu/colocate_report.py RESULT.json...    (colocate.sh calls it)

Design: one RESULT json per variant (label: xsalloc runs start with
"xsalloc", then "tms" and "none"). Memory in MiB: device memory is
cuMemGetInfo's used bytes less the context; per phase, the largest over
the cycles. Times: the median over cycles 2 and later (cycle 1 pins the
host copies), cycle 1 beside it for the trainer's pause. The checks, for
each xsalloc variant:
  paused:   at every pause point (each side paused, and the other too),
            device memory <= live memory not paused + 64 MiB (the context
            is already subtracted);
  losses, tokens: equal to the uninterrupted run's on the same allocator
            ('uninterrupted-xsalloc', else 'none'), bit for bit;
  backup:   the trainer's backup rate (the copy step's own, which xsalloc
            reports; median) >= 80% of the pinned copy_ rate of the same run;
  no slower: pause and resume of the KV cache (no backup) <= TMS's medians
            + 1 ms of timer noise;
  frees:    the memory a generator pause frees >= what TMS's frees + the
            graph memory xsalloc paused - 64 MiB, and after a trainer pause
            the device holds no more than after TMS's + 64 MiB (xsalloc's
            training holds less memory to begin with, so it frees less).
Exit status 1 if a check failed or a variant is missing.
"""
import json
import statistics
import sys

PHASES = ("train", "trainer_paused", "generate", "generator_paused")
PAUSE_POINTS = ("trainer_paused", "generator_paused")
SLACK_MIB = 64


def load(paths):
    runs = {}
    for path in paths:
        try:
            with open(path) as f:
                rec = json.loads(f.read().strip().splitlines()[-1])
            runs[rec["label"]] = rec
        except (OSError, ValueError, IndexError) as e:
            print(f"colocate_report: {path}: no result ({e})")
    return runs


def phase(rec, name, key="device_mib"):
    return max(r[key] for r in rec["phases"] if r["phase"] == name and r["cycle"] > 0)


def median_time(rec, key, first=2):
    """The median of `key` over cycles `first`+, with the cycles' repeats of it (KEY_more_s: the
    kv_cache's extra resume and pause pairs, --kv-repeats) among the samples."""
    vals = [v for t in rec["times"] if t["cycle"] >= first and t.get(key) is not None
            for v in [t[key]] + t.get(key[:-2] + "_more_s", [])]
    return statistics.median(vals) if vals else None


def pause_rate(rec, first=2):
    """The trainer's live bytes / the whole pause's seconds (waits, copies, unmapping)."""
    rates = [t["backup_bytes"] / t["pause_trainer_s"] / (1 << 30) for t in rec["times"]
             if t["cycle"] >= first and t.get("pause_trainer_s")]
    return statistics.median(rates) if rates else None


def backup_rate(rec, first=2):
    """The trainer backup's rate: the copy step's own where the saver reports it (xsalloc), else the
    whole pause's (pause_rate)."""
    rates = [t["backup_copy_gib_s"] for t in rec["times"] if t["cycle"] >= first and t.get("backup_copy_gib_s")]
    return statistics.median(rates) if rates else pause_rate(rec, first)


def freed(rec, before, after):
    """Median over cycles of the device memory a pause freed (phase `before` minus phase `after`)."""
    dev = {(r["cycle"], r["phase"]): r["device_mib"] for r in rec["phases"]}
    vals = [dev[c, before] - dev[c, after] for c, p in dev if p == before and (c, after) in dev]
    return statistics.median(vals) if vals else None


def fmt(v, spec=".0f"):
    return "-" if v is None else format(v, spec)


def table(runs):
    names = list(runs)
    w = max(12, *(len(n) for n in names))
    head = f"{'':24}" + "".join(f"{n:>{w + 2}}" for n in names)
    any_rec = next(iter(runs.values()))
    print(f"device {any_rec['device']}; memory in MiB (largest over the cycles), device/live-not-paused")
    print(head)
    for p in PHASES:
        cells = [f"{fmt(phase(r, p))}/{fmt(phase(r, p, 'live_unpaused_mib'))}" for r in runs.values()]
        print(f"{p:24}" + "".join(f"{c:>{w + 2}}" for c in cells))
    print(f"{'context':24}" + "".join(f"{fmt(r['context_mib']):>{w + 2}}" for r in runs.values()))
    graph = [max((r.get("paused_mib") or {}).get("graph", 0) for r in rec["phases"]) if rec["saver"] == "xsalloc"
             else None for rec in runs.values()]
    print(f"{'graph memory paused':24}" + "".join(f"{fmt(g):>{w + 2}}" for g in graph))
    print("seconds (median of cycles 2+; trainer pause of cycle 1 in brackets), GiB/s")
    rows = [("pause trainer", lambda r: f"{fmt(median_time(r, 'pause_trainer_s'), '.3f')}"
             f"[{fmt(r['times'][0].get('pause_trainer_s') if r['times'] else None, '.2f')}]"),
            ("resume trainer", lambda r: fmt(median_time(r, "resume_trainer_s"), ".3f")),
            ("pause kv_cache", lambda r: fmt(median_time(r, "pause_kv_s"), ".4f")),
            ("resume kv_cache", lambda r: fmt(median_time(r, "resume_kv_s"), ".4f")),
            ("pause graph", lambda r: fmt(median_time(r, "pause_graph_s"), ".4f")),
            ("resume graph", lambda r: fmt(median_time(r, "resume_graph_s"), ".4f")),
            ("backup GiB/s", lambda r: fmt(backup_rate(r), ".1f")),
            ("live bytes / pause GiB/s", lambda r: fmt(pause_rate(r), ".1f")),
            ("pinned copy_ GiB/s", lambda r: fmt(r.get("pinned_copy_gib_s"), ".1f"))]
    for name, cell in rows:
        print(f"{name:24}" + "".join(f"{cell(r):>{w + 2}}" for r in runs.values()))
    steps(runs)


def steps(runs, first=2):
    """xsalloc's own account of each kv_cache pause and resume (xsalloc.elastic.last_report): the
    median of cycles 2+ of each step, in ms, beside the time the program measured."""
    for label, r in runs.items():
        for what in ("pause", "resume"):
            reps = [t["steps"][f"{what}_kv_cache"] for t in r["times"]
                    if t["cycle"] >= first and f"{what}_kv_cache" in t.get("steps", {})]
            if not reps:
                continue
            ms = {k: statistics.median(x[k] for x in reps) * 1e3 for k in ("wait_s", "copy_s", "map_s")}
            print(f"INFO [{label}] {what} kv_cache steps (ms, median): wait {ms['wait_s']:.2f}, copy "
                  f"{ms['copy_s']:.2f}, unmap or map {ms['map_s']:.2f}; {reps[0]['pages']} pages in "
                  f"{reps[0]['pools']} pools; measured {1e3 * median_time(r, what + '_kv_s', first):.2f}")


def checks(runs):
    results = []

    def check(ok, text):
        results.append(ok)
        print(f"{'PASS' if ok else 'FAIL'} {text}")

    ref, tms = runs.get("none"), runs.get("tms")
    same = runs.get("uninterrupted-xsalloc")  # the xsalloc runs' reference: the same allocator
    xs = [n for n in runs if n.startswith("xsalloc")]
    if same is not None and ref is not None:
        print(f"INFO [uninterrupted-xsalloc] losses {'equal' if same['losses'] == ref['losses'] else 'DIFFER'} to "
              f"torch's allocator's, tokens {'equal' if same['tokens_sha256'] == ref['tokens_sha256'] else 'DIFFER'}")
    if not xs:
        check(False, "no xsalloc result")
    if ref is None:
        check(False, "no 'none' result: losses and tokens cannot be compared")
    if tms is None:
        check(False, "no 'tms' result: the comparisons with torch_memory_saver cannot be made")
    for n in xs:
        r = runs[n]
        over = max(p["device_mib"] - p["live_unpaused_mib"] for p in r["phases"] if p["phase"] in PAUSE_POINTS)
        check(over <= SLACK_MIB, f"[{n}] device memory while paused <= live not paused + context + {SLACK_MIB} MiB "
              f"(largest excess {over:.0f} MiB)")
        base = same or ref
        if base is not None:
            check(r["losses"] == base["losses"], f"[{n}] {len(r['losses'])} losses after {len(r['times'])} cycles "
                  f"bitwise equal to the uninterrupted run ({base['label']})")
            check(r["tokens_sha256"] == base["tokens_sha256"],
                  f"[{n}] generated tokens identical to the uninterrupted run's ({base['label']})")
        rate, pinned = backup_rate(r), r.get("pinned_copy_gib_s")
        check(rate is not None and pinned and rate >= 0.8 * pinned,
              f"[{n}] backup {fmt(rate, '.1f')} GiB/s >= 80% of pinned copy_ {fmt(pinned, '.1f')} GiB/s")
        if tms is None:
            continue
        for what in ("pause_kv_s", "resume_kv_s"):
            a, b = median_time(r, what), median_time(tms, what)
            check(a is not None and b is not None and a <= b + 0.001,
                  f"[{n}] {what[:-2].replace('_', ' ')} (no backup) {fmt(a, '.4f')} s <= TMS's {fmt(b, '.4f')} s")
        graph = max(p.get("paused_mib", {}).get("graph", 0) for p in r["phases"])
        a, b = freed(r, "generate", "generator_paused"), freed(tms, "generate", "generator_paused")
        check(a is not None and b is not None and a >= b + graph - SLACK_MIB,
              f"[{n}] a generator pause frees {fmt(a)} MiB >= TMS's {fmt(b)} + graph {graph:.0f} - {SLACK_MIB}")
        # What a trainer pause leaves, not what it frees: xsalloc's training holds less to begin
        # with (it frees less because it held less).
        a, b = phase(r, "trainer_paused"), phase(tms, "trainer_paused")
        check(a <= b + SLACK_MIB, f"[{n}] after a trainer pause the device holds {fmt(a)} MiB <= TMS's {fmt(b)} + "
              f"{SLACK_MIB} (it frees what TMS frees; its training held {fmt(phase(r, 'train'))} MiB, TMS's "
              f"{fmt(phase(tms, 'train'))})")
    if tms is not None and ref is not None:
        print(f"INFO [tms] losses {'equal' if tms['losses'] == ref['losses'] else 'DIFFER'}, tokens "
              f"{'equal' if tms['tokens_sha256'] == ref['tokens_sha256'] else 'DIFFER'}; torch mode leaves the "
              "graph memory in place")
    return all(results)


def main(paths):
    runs = load(paths)
    if not runs:
        print("FAIL no results")
        return 1
    table(runs)
    return 0 if checks(runs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
