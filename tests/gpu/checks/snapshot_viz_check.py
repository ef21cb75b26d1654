#!/usr/bin/env python3
"""Checks that a snapshot pickle written by xsalloc (xsa_dump_snapshot /
xsa_snapshot_pickle) is what PyTorch's memory viewers expect.

    python3 tests/gpu/checks/snapshot_viz_check.py SNAPSHOT.pickle
    python3 tests/gpu/checks/snapshot_viz_check.py --no-torch [--json SNAPSHOT.json] [--digest] SNAPSHOT.pickle

Without --no-torch (needs torch): the structural checks below, then
torch.cuda._memory_viz's text and HTML views of the snapshot (segsum,
trace, trace_plot, segment_plot where present), and, on a machine with a
GPU, a comparison of the keys with a snapshot PyTorch itself takes.

Structural checks (python3 alone): the layout of
torch.cuda.memory._snapshot(); blocks tile their segment and the segment
sizes add up; and a walk back through each device's trace from the final
state, as pytorch.org/memory_viz replays it to draw earlier states, finds
every block and segment an event refers to. --json: the JSON snapshot
holds the same document. --digest prints counts for a test to compare.
Exit status 0 when every check passes, 1 otherwise (2: bad usage).
"""
import argparse
import collections
import json
import pickle
import sys

ACTIONS = {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free",
           "segment_map", "segment_unmap", "oom", "snapshot"}
STATES = {"active_allocated", "active_pending_free", "inactive"}
SEGMENT_KEYS = {"device", "address", "total_size", "allocated_size", "active_size", "requested_size",
                "stream", "segment_type", "segment_pool_id", "is_expandable", "frames", "blocks"}
BLOCK_KEYS = {"address", "size", "requested_size", "state", "frames"}


class CheckError(Exception):
    pass


def need(cond, what):
    if not cond:
        raise CheckError(what)


def check_segment(seg):
    need(SEGMENT_KEYS <= set(seg), f"segment keys {sorted(seg)} lack {sorted(SEGMENT_KEYS - set(seg))}")
    need(seg["segment_type"] in ("large", "small"), f"segment_type {seg['segment_type']!r}")
    need(isinstance(seg["is_expandable"], bool), "is_expandable is not a bool")
    addr = seg["address"]
    sums = collections.Counter()
    for b in seg["blocks"]:
        need(BLOCK_KEYS <= set(b), f"block keys {sorted(b)}")
        need(b["state"] in STATES, f"block state {b['state']!r}")
        need(b["address"] == addr, f"segment {seg['address']:#x}: block at {b['address']:#x}, expected {addr:#x}")
        need(b["size"] > 0 and b["requested_size"] <= b["size"], f"block {addr:#x}: size/requested_size")
        addr += b["size"]
        sums["total"] += b["size"]
        if b["state"] == "active_allocated":
            sums["allocated"] += b["size"]
        if b["state"] != "inactive":
            sums["active"] += b["size"]
            sums["requested"] += b["requested_size"]
    need(sums["total"] == seg["total_size"], f"segment {seg['address']:#x}: blocks cover {sums['total']} of {seg['total_size']}")
    for key in ("allocated", "active", "requested"):
        need(sums[key] == seg[key + "_size"], f"segment {seg['address']:#x}: {key}_size {seg[key + '_size']}, blocks say {sums[key]}")


def check_layout(snap):
    need(isinstance(snap, dict), "the snapshot is not a dict")
    need({"segments", "device_traces"} <= set(snap), f"top-level keys {sorted(snap)}")
    for seg in snap["segments"]:
        check_segment(seg)
    for dev in {s["device"] for s in snap["segments"]}:
        need(0 <= dev < len(snap["device_traces"]), f"segment on device {dev} but {len(snap['device_traces'])} traces")
        segs = sorted((s["address"], s["total_size"]) for s in snap["segments"] if s["device"] == dev)
        for (a, n), (b, _) in zip(segs, segs[1:]):
            need(a + n <= b, f"device {dev}: segments at {a:#x} and {b:#x} overlap")
    for trace in snap["device_traces"]:
        for e in trace:
            need(e["action"] in ACTIONS, f"trace action {e['action']!r}")
            need({"action", "size", "stream", "time_us"} <= set(e), f"trace entry keys {sorted(e)}")
            need(("device_free" if e["action"] == "oom" else "addr") in e, f"{e['action']} entry lacks its address key")


def elide_frees(trace):
    """The viewer merges a free_requested directly followed by the
    free_completed of the same address into one 'free'."""
    out = []
    for e in trace:
        if e["action"] == "free_completed" and out and out[-1]["action"] == "free_requested" and out[-1]["addr"] == e["addr"]:
            out[-1] = dict(out[-1], action="free")
            continue
        out.append(e)
    return out


def walk_back(snap, dev, trace, check_each_step):
    """Undoes the trace from the final state, as the viewer does, checking
    that every event finds what it refers to."""
    segs = [[s["address"], s["total_size"], s["stream"]] for s in snap["segments"] if s["device"] == dev]
    blocks = {}
    for s in snap["segments"]:
        if s["device"] != dev:
            continue
        for b in s["blocks"]:
            if b["state"] != "inactive":
                blocks[b["address"]] = [b["size"], b["state"] == "active_pending_free"]

    def containing(addr, size):
        for i, (a, n, _) in enumerate(segs):
            if a <= addr and addr + size <= a + n:
                return i
        return -1

    for i in range(len(trace) - 1, -1, -1):
        e = trace[i]
        act, where = e["action"], f"device {dev} event {i} ({e['action']})"
        if act in ("free", "free_completed"):
            blocks[e["addr"]] = [e["size"], act == "free_completed"]
        elif act == "free_requested":
            need(e["addr"] in blocks, f"{where}: no block at {e['addr']:#x}")
            blocks[e["addr"]][1] = False
        elif act == "alloc":
            need(e["addr"] in blocks, f"{where}: allocation {e['addr']:#x} is not live after it")
            del blocks[e["addr"]]
        elif act == "segment_free":
            need(containing(e["addr"], e["size"]) < 0, f"{where}: segment {e['addr']:#x} still there")
            segs.append([e["addr"], e["size"], e["stream"]])
        elif act == "segment_alloc":
            idx = [k for k, s in enumerate(segs) if s[0] == e["addr"]]
            need(idx, f"{where}: no segment at {e['addr']:#x}")
            del segs[idx[0]]
        elif act == "segment_unmap":
            need(containing(e["addr"], e["size"]) < 0, f"{where}: range {e['addr']:#x} is mapped after its unmap")
            segs.append([e["addr"], e["size"], e["stream"]])
            segs.sort()
            merged = [segs[0]]
            for s in segs[1:]:
                last = merged[-1]
                if last[0] + last[1] == s[0] and last[2] == s[2]:
                    last[1] += s[1]
                else:
                    merged.append(s)
            segs = merged
        elif act == "segment_map":
            k = containing(e["addr"], e["size"])
            need(k >= 0, f"{where}: mapped range {e['addr']:#x}+{e['size']} is in no segment after it")
            a, n, st = segs.pop(k)
            if e["addr"] > a:
                segs.append([a, e["addr"] - a, st])
            if e["addr"] + e["size"] < a + n:
                segs.append([e["addr"] + e["size"], a + n - e["addr"] - e["size"], st])
        if check_each_step:
            for addr, (size, _) in blocks.items():
                need(containing(addr, size) >= 0, f"before {where}: block {addr:#x}+{size} lies in no segment")


def check_viewer_replay(snap):
    for dev, trace in enumerate(snap["device_traces"]):
        walk_back(snap, dev, elide_frees(trace), check_each_step=len(trace) <= 5000)


def lists_for_tuples(x):
    if isinstance(x, (list, tuple)):
        return [lists_for_tuples(v) for v in x]
    if isinstance(x, dict):
        return {k: lists_for_tuples(v) for k, v in x.items()}
    return x


def digest(snap):
    states = collections.Counter(b["state"] for s in snap["segments"] for b in s["blocks"])
    actions = collections.Counter(e["action"] for t in snap["device_traces"] for e in t)
    parts = [f"segments={len(snap['segments'])}",
             f"expandable={sum(s['is_expandable'] for s in snap['segments'])}",
             f"reservations={len(snap.get('expandable_segments', []))}"]
    parts += [f"{s}={states[s]}" for s in sorted(STATES)]
    parts.append("actions=" + ",".join(f"{a}:{actions[a]}" for a in sorted(actions)))
    return " ".join(parts)


# Keys the viewers read; others PyTorch writes are reported, not required.
VIEWER_KEYS = {"segment": {"device", "address", "total_size", "stream", "blocks"},
               "block": {"address", "size", "requested_size", "state"},
               "trace entry": {"action", "addr", "size", "stream"}}


def compare_keys(kind, theirs, ours):
    missing = set(theirs) - set(ours)
    need(not (missing & VIEWER_KEYS[kind]), f"{kind}: keys the viewers read are missing: {sorted(missing)}")
    if missing:
        print(f"snapshot_viz_check: note: PyTorch's {kind} also has {sorted(missing)}")


def check_with_torch(snap):
    import torch
    from torch.cuda import _memory_viz as mv
    mv.segsum(snap)
    mv.trace(snap)
    need("<html>" in mv.trace_plot(snap), "trace_plot gave no HTML")
    if hasattr(mv, "segment_plot"):
        need("<html>" in mv.segment_plot(snap), "segment_plot gave no HTML")
    if not torch.cuda.is_available():
        print("snapshot_viz_check: no GPU: PyTorch's own snapshot not compared")
        return
    torch.cuda.memory._record_memory_history(max_entries=1000)
    x = torch.empty(3 << 20, dtype=torch.uint8, device="cuda")
    del x
    ref = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    ref_allocs = [e for t in ref["device_traces"] for e in t if e["action"] == "alloc"]
    our_allocs = [e for t in snap["device_traces"] for e in t if e["action"] == "alloc"]
    need(ref["segments"] and ref_allocs, "PyTorch's snapshot has no segment or no alloc event")
    if not (snap["segments"] and our_allocs):
        print("snapshot_viz_check: no segment or no alloc event here: keys not compared with PyTorch's")
        return
    compare_keys("segment", ref["segments"][0], snap["segments"][0])
    compare_keys("block", ref["segments"][0]["blocks"][0], snap["segments"][0]["blocks"][0])
    compare_keys("trace entry", ref_allocs[0], our_allocs[0])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pickle")
    ap.add_argument("--json")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--digest", action="store_true")
    args = ap.parse_args()
    try:
        with open(args.pickle, "rb") as f:
            snap = pickle.load(f)
        check_layout(snap)
        check_viewer_replay(snap)
        if args.json:
            with open(args.json) as f:
                need(json.load(f) == lists_for_tuples(snap), "the JSON and the pickle snapshots differ")
        if not args.no_torch:
            check_with_torch(snap)
    except CheckError as e:
        print(f"snapshot_viz_check: FAIL: {e}")
        return 1
    if args.digest:
        print(digest(snap))
    print("snapshot_viz_check: ok", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
