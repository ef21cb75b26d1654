"""The torch C++ adapter on a GPU with torch (issue 18's GPU check).

    python3 tests/gpu/checks/adapter_check.py --case CASE [--conf XSALLOC_CONF]
    bash tests/gpu/run_adapter_check.sh            (every case, own process each)

CASE:
- stats: torch.cuda.memory_stats() equals xsalloc.memory_stats(0), key for
  key, with nothing patched (torch asks the adapter).
- history: _record_memory_history() + _dump_snapshot(): the pickle opens in
  torch.cuda._memory_viz (trace_plot and segment_plot), and the
  allocations made in a named function carry its Python frame, in the
  trace and on the live blocks.
- oom: a 200 GiB torch.empty raises torch.OutOfMemoryError (not a tensor at
  address 0) whose text is PyTorch's from its first word ("CUDA out of
  memory. Tried to allocate 200.00 GiB. GPU 0 has a total capacity of") and
  is xsa_last_error()'s, word for word; 8 EiB gives PyTorch's "Tried to
  allocate more than 1EB memory"; after empty_cache() training goes on.
- accelerator: torch.accelerator's memory API reaches xsalloc (TestCuda.
  test_memory_stats): the allocator counts as initialised, memory_stats()
  equals xsalloc's key for key, a 1 KiB tensor moves active_bytes by 1024
  and its free shows in freed, empty_cache() gives the cached memory back,
  the peak resets.
- fraction0: set_per_process_memory_fraction(0.0) is accepted and read
  back as 0.0; a request the cache cannot serve raises OutOfMemoryError
  naming "0 bytes allowed"; back at 1.0 allocations work.
- settings: torch.cuda.memory._set_allocator_settings reaches xsalloc: with
  expandable_segments:False a new tensor lands in a classic segment, with
  True in an expandable one; roundup_power2_divisions:4 rounds 84 MiB to
  96 MiB; a value torch refuses raises torch's ValueError; a key xsalloc
  cannot change any more (per_process_memory_fraction) raises naming it;
  xsalloc's settings report the last string.
- mp (--conf ipc_handles:True): torch.multiprocessing (spawn) sends CUDA
  tensors to a child over a Pipe (what a Queue's feeder thread does, on the
  calling thread so an error surfaces here): a slice at a nonzero offset
  of a 4 MiB block, a 48 MiB tensor over several pages, and two small
  tensors of one page. The child (which makes xsalloc its allocator when it
  imports this file, as a spawned child imports the main module) checks the
  data, writes into the slice and the big tensor; the parent sees the
  writes once the child says so. The slice sent again arrives as the same
  storage, and the two small tensors, whose handles are the same bytes at
  other offsets, are opened once (their addresses differ as the sender's
  do). Afterwards the parent frees everything (allocated bytes back to
  where they were) and allocates again; xsalloc's invariants hold on both
  sides. Under Yama ptrace_scope 1 the parent names the child as allowed to
  take its fds (prctl PR_SET_PTRACER); the detail says the scope.
- mp_handles (--conf ipc_handles:True,page_recycling_headroom:1): the same
  with physical handles of several pages (the big tensor's share must hold
  one).
- mp_off (no conf): sending a CUDA tensor raises RuntimeError naming
  ipc_handles:True and XSALLOC_CONF, and the process goes on.
Prints one JSON line: {"case", "ok", "detail"}.
"""
import argparse
import ctypes
import os
import pickle
import sys
import tempfile

from case_report import run_case

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python")

if __name__ == "__mp_main__":  # a spawned torch.multiprocessing child: xsalloc before any CUDA tensor
    sys.path.insert(0, PYTHON_DIR)
    import xsalloc.torch
    xsalloc.torch.use(adapter=True)  # XSALLOC_CONF: the parent's, inherited


def case_stats(torch, xsalloc):
    keep = [torch.empty(n, device="cuda") for n in (1000, 300000, 5000000)]
    del keep[1]
    mine, theirs = xsalloc.memory_stats(0), torch.cuda.memory_stats()
    shared = sorted(set(mine) & set(theirs))
    diff = [k for k in shared if mine[k] != theirs[k]]
    ok = len(shared) > 50 and not diff and theirs["allocated_bytes.all.current"] > 0
    return ok, f"{len(shared)} keys compared, differing: {diff[:5]}; only torch: {sorted(set(theirs) - set(mine))[:5]}"


def allocate_in_named_function(torch):
    return [torch.empty(1 << 20, device="cuda") for _ in range(4)]


def case_history(torch, xsalloc):
    torch.cuda.memory._record_memory_history(max_entries=100000)
    live = allocate_in_named_function(torch)
    del live[0]
    path = os.path.join(tempfile.mkdtemp(), "snap.pickle")
    torch.cuda.memory._dump_snapshot(path)
    torch.cuda.memory._record_memory_history(enabled=None)
    with open(path, "rb") as f:
        snap = pickle.load(f)
    from torch.cuda import _memory_viz
    html = _memory_viz.trace_plot(snap) + _memory_viz.segment_plot(snap)

    def named(frames):
        return any(fr.get("name") == "allocate_in_named_function" for fr in frames)
    allocs = [e for e in snap["device_traces"][0] if e["action"] == "alloc"]
    traced = sum(named(e.get("frames", [])) for e in allocs)
    blocks = [b for s in snap["segments"] for b in s["blocks"] if b["state"] == "active_allocated"]
    framed = sum(named(b.get("frames", [])) for b in blocks)
    ok = traced >= 4 and framed >= 3 and len(html) > 1000
    return ok, (f"{len(allocs)} allocs traced, {traced} with the function's frame; {framed} live blocks with it; "
                f"viz html {len(html)} chars; settings {snap.get('allocator_settings', {}).get('PYTORCH_CUDA_ALLOC_CONF')!r}")


def train(torch, steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        x = torch.randn(128, 512, device="cuda")
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def oom_message(torch, nbytes):
    """The first line of the OutOfMemoryError an allocation of nbytes raises, and xsa_last_error() then."""
    try:
        t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        return f"no error: a tensor at {t.data_ptr():#x}", ""
    except torch.OutOfMemoryError as e:
        import xsalloc
        return str(e).splitlines()[0], xsalloc._lib.load().last_error()


def case_oom(torch, xsalloc):
    train(torch, 3)
    message, last = oom_message(torch, 200 << 30)
    exa, _ = oom_message(torch, 8 << 60)
    torch.cuda.empty_cache()
    losses = train(torch, 5)
    ok = (len(losses) == 5 and all(l == l for l in losses) and torch.cuda.memory_stats()["num_ooms"] >= 1
          and message.startswith("CUDA out of memory. Tried to allocate 200.00 GiB. GPU 0 has a total capacity of ")
          and message == last and exa.startswith("CUDA out of memory. Tried to allocate more than 1EB memory."))
    return ok, f"OutOfMemoryError: {message[:400]}; same as xsa_last_error: {message == last}; 8 EiB: {exa[:80]}"


def case_accelerator(torch, xsalloc):
    acc = torch.accelerator
    x = torch.ones(1 << 20, device="cuda")
    initialised = torch._C._accelerator_isAllocatorInitialized()
    mine, theirs = xsalloc.memory_stats(0), acc.memory_stats()
    shared = sorted(set(mine) & set(theirs))
    diff = [k for k in shared if mine[k] != theirs[k]]
    torch.cuda.reset_accumulated_memory_stats()
    before = acc.memory_stats()["active_bytes.all.current"]
    t = torch.randn(256, device="cuda")
    grew = acc.memory_stats()["active_bytes.all.current"] - before
    del t
    acc.empty_cache()
    freed = acc.memory_stats()["active_bytes.all.freed"]
    del x
    acc.empty_cache()
    reserved = acc.memory_reserved()
    acc.reset_peak_memory_stats()
    peak = acc.max_memory_reserved()
    ok = initialised and len(shared) > 50 and not diff and grew == 1024 and freed == 1024 and peak == reserved
    return ok, (f"initialised {initialised}; {len(shared)} keys compared, differing {diff[:5]}; active +{grew}, "
                f"freed {freed}; reserved after empty_cache {reserved}, peak after reset {peak}")


def case_fraction0(torch, xsalloc):
    torch.cuda.empty_cache()
    torch.cuda.set_per_process_memory_fraction(0.0)
    read = torch.cuda.get_per_process_memory_fraction()
    try:
        torch.empty(64 << 20, dtype=torch.uint8, device="cuda")
        message = "no error"
    except torch.OutOfMemoryError as e:
        message = str(e).splitlines()[0]
    torch.cuda.set_per_process_memory_fraction(1.0)
    y = torch.ones(64 << 20, dtype=torch.uint8, device="cuda")
    ok = read == 0.0 and "0 bytes allowed; " in message and y.sum().item() == 64 << 20
    return ok, f"read back {read}; OutOfMemoryError: {message[:300]}; at 1.0 64 MiB allocated"


def in_expandable_segment(torch, tensor):
    ptr = tensor.untyped_storage().data_ptr()
    for s in torch.cuda.memory_snapshot():
        if s["address"] <= ptr < s["address"] + s["total_size"]:
            return s["is_expandable"]
    return None


def case_settings(torch, xsalloc):
    set_settings = torch.cuda.memory._set_allocator_settings
    set_settings("expandable_segments:False")
    classic = torch.ones(4 << 20, device="cuda")
    set_settings("expandable_segments:True")
    expandable = torch.ones(4 << 20, device="cuda")
    set_settings("roundup_power2_divisions:4")
    start = torch.cuda.memory_stats()["active_bytes.all.allocated"]
    rounded = torch.empty(84 << 20, dtype=torch.uint8, device="cuda")
    grew = torch.cuda.memory_stats()["active_bytes.all.allocated"] - start
    set_settings("")
    errors = []
    for conf, kind, needle in (("garbage_collection_threshold:1.2", ValueError, ""),
                               ("per_process_memory_fraction:0.5", RuntimeError, "per_process_memory_fraction")):
        try:
            set_settings(conf)
            errors.append(f"{conf}: no error")
        except kind as e:
            if needle not in str(e):
                errors.append(f"{conf}: {type(e).__name__}: {str(e).splitlines()[0]}")
    text = xsalloc.memory_summary(0).splitlines()[-1]
    ok = (in_expandable_segment(torch, classic) is False and in_expandable_segment(torch, expandable) is True
          and grew == 96 << 20 and not errors and text.endswith('xsa_set_allocator_settings: ""'))
    del rounded
    return ok, (f"classic segment: {in_expandable_segment(torch, classic) is False}, expandable: "
                f"{in_expandable_segment(torch, expandable)}; 84 MiB took {grew >> 20} MiB; errors {errors}; {text}")


def invariants_hold():
    import xsalloc
    lib = xsalloc._lib.load()
    return lib.cdll.xsa_check_invariants(0) == 0 or lib.last_error()


def share_layout(xsalloc, tensor):
    """(handles, largest handle's pages) of xsalloc's share of the tensor's block (xsa_ipc_share)."""
    lib = xsalloc._lib.load().cdll
    lib.xsa_ipc_share.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_size_t),
                                  ctypes.POINTER(ctypes.c_size_t)]
    data, size, offset = ctypes.c_void_p(), ctypes.c_size_t(), ctypes.c_size_t()
    if lib.xsa_ipc_share(tensor.untyped_storage().data_ptr(), ctypes.byref(data), ctypes.byref(size), ctypes.byref(offset)):
        return 0, 0
    raw = ctypes.string_at(data, size.value)
    lib.xsa_free_buffer(data)
    n = int.from_bytes(raw[20:24], "little")  # api/ipc_share.c's layout
    return n, max(int.from_bytes(raw[40 + 16 * i + 4:40 + 16 * i + 8], "little") for i in range(n))


def _mp_child(conn):
    """case mp's receiving process."""
    import torch
    import xsalloc.torch
    out = {"adapter": xsalloc.torch.adapter_in_use()}
    try:
        part, big, small_a, small_b = conn.recv()
        part_again = conn.recv()
        out["part"] = bool((part == 7).all())
        out["big"] = bool((big == torch.arange(big.numel(), device="cuda", dtype=big.dtype)).all())
        out["small"] = bool((small_a == 3).all()) and bool((small_b == 4).all())
        out["same_storage"] = part_again.data_ptr() == part.data_ptr()
        out["small_delta"] = small_b.data_ptr() - small_a.data_ptr()
        part.fill_(9)
        big[-1] = -1
        torch.cuda.synchronize()
        out["invariants"] = invariants_hold()
    except Exception as e:
        out["error"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    conn.send(out)
    conn.recv()  # the parent has read the writes: let go of the tensors


def allow_ptrace(pid):
    """Yama's ptrace_scope 1 lets no child take its parent's fds (pidfd_getfd) unless named: name it."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            scope = f.read().strip()
    except OSError:
        return "none (no Yama)"
    if scope == "1":
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(0x59616D61, pid, 0, 0, 0) != 0:  # PR_SET_PTRACER
            return f"1 (PR_SET_PTRACER failed: errno {ctypes.get_errno()})"
        return "1 (child named with PR_SET_PTRACER)"
    return scope


def case_mp(torch, xsalloc, many_page_handles=False):
    import torch.multiprocessing as mp
    torch.cuda.synchronize()
    allocated_before = torch.cuda.memory_allocated()
    base = torch.zeros(1 << 20, device="cuda")  # 4 MiB
    part = base[100000:104096]
    part.fill_(7)
    big = torch.arange(12 << 20, device="cuda", dtype=torch.float32)  # 48 MiB
    small_a = torch.full((256,), 3.0, device="cuda")
    small_b = torch.full((256,), 4.0, device="cuda")
    handles, pages = share_layout(xsalloc, big)
    torch.cuda.synchronize()
    ctx = mp.get_context("spawn")
    mine, theirs = ctx.Pipe()
    child = ctx.Process(target=_mp_child, args=(theirs,))
    child.start()
    try:
        scope = allow_ptrace(child.pid)
        mine.send((part, big, small_a, small_b))
        mine.send(part)  # the same tensor again
        if not mine.poll(300):
            return False, f"no answer from the child in 300 s (exit code {child.exitcode}); ptrace_scope {scope}"
        got = mine.recv()
        torch.cuda.synchronize()
        wrote = bool((part == 9).all()) and big[-1].item() == -1 and big[-2].item() == big.numel() - 2
        mine.send("bye")
        child.join(120)
    finally:
        if child.is_alive():
            child.terminate()
    delta = small_b.data_ptr() - small_a.data_ptr()
    del base, part, big, small_a, small_b
    torch.cuda.ipc_collect()
    freed = torch.cuda.memory_allocated() == allocated_before
    again = torch.ones(16 << 20, device="cuda")
    total = again.sum().item()
    del again
    torch.cuda.empty_cache()
    mine_ok = invariants_hold()
    ok = (got.get("adapter") is True and "error" not in got and got["part"] and got["big"] and got["small"]
          and got["same_storage"] and got["small_delta"] == delta and got["invariants"] is True and wrote
          and child.exitcode == 0 and freed and total == 16 << 20 and mine_ok is True
          and handles >= 1 and (pages > 1 if many_page_handles else True))
    return ok, {"child": got, "parent_sees_writes": wrote, "child_exit": child.exitcode, "freed": freed,
                "allocated_again": total == 16 << 20, "invariants": mine_ok, "small_delta_sent": delta,
                "big_share": f"{handles} handles, largest {pages} pages", "ptrace_scope": scope}


def case_mp_handles(torch, xsalloc):
    return case_mp(torch, xsalloc, many_page_handles=True)


def case_mp_off(torch, xsalloc):
    import torch.multiprocessing  # noqa: F401 (registers torch's reductions with ForkingPickler)
    from multiprocessing.reduction import ForkingPickler
    t = torch.ones(1 << 20, device="cuda")
    try:
        ForkingPickler.dumps(t)
        return False, "a CUDA tensor was shared with ipc_handles off"
    except RuntimeError as e:
        message = str(e).splitlines()[0]
    u = torch.ones(8 << 20, device="cuda") * 2
    ok = "ipc_handles:True" in message and "XSALLOC_CONF" in message and u.sum().item() == 16 << 20 and bool((t == 1).all())
    return ok, f"RuntimeError: {message[:300]}; the process went on"


CASES = {"stats": case_stats, "history": case_history, "oom": case_oom, "accelerator": case_accelerator,
         "fraction0": case_fraction0, "settings": case_settings, "mp": case_mp, "mp_handles": case_mp_handles,
         "mp_off": case_mp_off}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", required=True, choices=list(CASES))
    p.add_argument("--conf", default=None)
    p.add_argument("--adapter", type=int, default=1)
    a = p.parse_args()
    if a.conf is not None:
        os.environ["XSALLOC_CONF"] = a.conf  # for spawned children too
    sys.path.insert(0, PYTHON_DIR)
    import xsalloc
    import xsalloc.torch
    import torch

    xsalloc.torch.use(adapter=bool(a.adapter))
    return run_case(CASES[a.case], (torch, xsalloc), {"case": a.case, "adapter": a.adapter})


if __name__ == "__main__":
    sys.exit(main())
