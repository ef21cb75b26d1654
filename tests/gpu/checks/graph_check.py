"""CUDA graphs on xsalloc, on a GPU with torch (issue 16's GPU check).

    python3 tests/gpu/checks/graph_check.py --mode MODE --case CASE   (one case, one process)
    bash tests/gpu/run_graph_check.sh                           (every mode and case)

MODE: native (PyTorch's own allocator, the reference), default (decay and
the helper thread on), norec (page_recycling:False), classic
(expandable_segments:False), reuse (graph_capture_record_stream_reuse:True),
off (helper_thread:False). CASE:
- issue: issue 16's program: a graph captured on its own stream frees its
  temporaries inside the capture; then 32 eager tensors on the default stream
  and 32 on the capture's stream; three replays must give the eager result
  and leave every eager tensor untouched.
- two_stream: a capture that forks onto a side stream and joins back, with
  record_stream on both, then eager tensors on all three streams.
- compile: torch.compile(mode="reduce-overhead") trains a small model 20
  steps; prints the losses (run_graph_check.sh compares them with native's).
- mempool: torch.cuda.MemPool + use_mem_pool.
- mempool_allocator: MemPool(allocator) over a cudaMalloc/cudaFree pair
  compiled with load_inline (as NCCL's ncclMemAlloc would be): kernels
  read and write its tensors right, the pool and the Python allocator
  deleted while a tensor lives free nothing, and once the tensors are gone
  every segment went back through the pair's free; a no_split pool takes
  a segment per tensor.
- ckpt: cudagraph trees restore a checkpoint of their pool
  (setCheckpointPoolState): torch.compile(mode="reduce-overhead") trains
  a small model, evaluates it under no_grad (a new graph warmed up while
  the training path is being replayed), trains again with a smaller last
  batch (the same), evaluates and trains; prints the losses, the eval
  outputs' sums and how many restores torch made (run_graph_check.sh
  compares all three with native's; at least one restore is required).
- reclaim: PyTorch's test_graph_capture_reclaim_4_streams with values: a
  block freed in the capture after reads on three side streams is reused
  after the last join in mode reuse only (never before it, in any mode),
  and every replay's reads see the values written before the reuse.
Prints one JSON line: {"mode", "case", "ok", "detail"}. A crash of the CUDA
context (illegal address) is a failed process: run_graph_check.sh says so.
"""
import argparse
import os
import sys

from case_report import run_case

CONFS = {"default": "", "norec": "page_recycling:False", "classic": "expandable_segments:False",
         "reuse": "graph_capture_record_stream_reuse:True", "off": "helper_thread:False"}
N = 1024


def eager_tensors(streams, torch):
    out = []
    for s in streams:
        with torch.cuda.stream(s):
            out += [torch.full((N, N), 7.0, device="cuda") for _ in range(32)]
    return out


def untouched(tensors, torch):
    torch.cuda.synchronize()
    return all(bool((t == 7.0).all()) for t in tensors)


def case_issue(torch):
    torch.manual_seed(0)
    x = torch.randn(N, N, device="cuda")
    w = torch.randn(N, N, device="cuda") / 32

    def f(x):
        a = x @ w
        b = a.relu()
        del a
        c = b @ w
        del b
        return c * 2

    cap = torch.cuda.Stream()
    cap.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(cap):
        for _ in range(3):
            f(x)
    torch.cuda.current_stream().wait_stream(cap)
    expected = f(x)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=cap):
        out = f(x)
    eager = eager_tensors([torch.cuda.current_stream(), cap], torch)
    results = []
    for _ in range(3):
        g.replay()
        torch.cuda.synchronize()
        results.append(torch.equal(out, expected))
        eager += eager_tensors([cap], torch)  # more eager memory between replays
    ok = all(results) and untouched(eager, torch)
    return ok, f"replays equal {results}, {len(eager)} eager tensors untouched: {untouched(eager, torch)}"


def case_two_stream(torch):
    torch.manual_seed(1)
    x = torch.randn(N, N, device="cuda")
    w = torch.randn(N, N, device="cuda") / 32
    cap, side = torch.cuda.Stream(), torch.cuda.Stream()

    def f(x):
        a = x @ w
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            b = (a.relu() * 3) @ w
        a.record_stream(side)
        torch.cuda.current_stream().wait_stream(side)
        b.record_stream(torch.cuda.current_stream())
        del a
        return b + 1

    cap.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(cap):
        for _ in range(3):
            f(x)
    torch.cuda.current_stream().wait_stream(cap)
    torch.cuda.synchronize()
    expected = f(x).clone()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, stream=cap):
        out = f(x)
    eager = eager_tensors([torch.cuda.current_stream(), cap, side], torch)
    results = []
    for _ in range(3):
        g.replay()
        torch.cuda.synchronize()
        results.append(torch.allclose(out, expected, rtol=0, atol=0))
        eager += eager_tensors([side, cap], torch)
    ok = all(results) and untouched(eager, torch)
    return ok, f"replays equal {results}, {len(eager)} eager tensors untouched: {untouched(eager, torch)}"


def case_compile(torch):
    torch.manual_seed(2)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step_fn = torch.compile(model, mode="reduce-overhead")
    losses = []
    for step in range(20):
        x = torch.randn(64, 256, device="cuda")
        y = torch.randint(0, 10, (64,), device="cuda")
        loss = torch.nn.functional.cross_entropy(step_fn(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(round(loss.item(), 6))
    return True, losses


def case_mempool(torch):
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        t = torch.full((N, N), 3.0, device="cuda")
    u = torch.full((N, N), 5.0, device="cuda")
    ok = bool((t == 3.0).all()) and bool((u == 5.0).all())
    return ok, f"tensor in the pool and outside it right: {ok}"


ALLOCATOR_SOURCE = r'''
#include <cuda_runtime_api.h>
#include <cstddef>
extern "C" {
int check_allocs = 0, check_frees = 0;
void* check_alloc(size_t size, int device, void* stream) {
  void* p = nullptr;
  check_allocs++;
  return cudaMalloc(&p, size) == cudaSuccess ? p : nullptr;
}
void check_free(void* p, size_t size, int device, void* stream) {
  check_frees++;
  cudaFree(p);
}
}
'''


def case_mempool_allocator(torch):
    import ctypes

    from torch.utils.cpp_extension import load_inline

    path = load_inline(name="xsa_check_allocator", cpp_sources=ALLOCATOR_SOURCE, is_python_module=False,
                       with_cuda=True)
    lib = ctypes.CDLL(path)
    allocs, frees = (ctypes.c_int.in_dll(lib, n) for n in ("check_allocs", "check_frees"))
    allocator = torch.cuda.memory.CUDAPluggableAllocator(path, "check_alloc", "check_free")
    pool = torch.cuda.MemPool(allocator.allocator())
    with torch.cuda.use_mem_pool(pool):
        a = torch.full((N, N), 3.0, device="cuda")
        b = torch.full((N, N), 4.0, device="cuda")
        a.mul_(2.0)
    c = a + b
    checks = {"values": bool((c == 10.0).all()), "allocated": allocs.value >= 1, "kept": frees.value == 0}
    del pool, allocator  # a and b keep the pool's memory and the allocator alive
    torch.cuda.empty_cache()
    checks["kept_after_delete"] = frees.value == 0 and bool((a == 6.0).all())
    del a, b, c
    torch.cuda.empty_cache()
    checks["all_freed"] = frees.value == allocs.value
    allocator2 = torch.cuda.memory.CUDAPluggableAllocator(path, "check_alloc", "check_free")
    pool = torch.cuda.MemPool(allocator2.allocator(), no_split=True)
    before = allocs.value
    with torch.cuda.use_mem_pool(pool):
        x = torch.ones(1024, device="cuda")
        y = torch.ones(1024, device="cuda")
    checks["no_split"] = allocs.value - before == 2 and float((x + y).sum()) == 2048.0
    del x, y, pool
    torch.cuda.empty_cache()
    checks["no_split_freed"] = frees.value == allocs.value
    return all(checks.values()), checks


def case_ckpt(torch):
    # cudagraph_trees.py, CUDAGraphTreeManager._run: a function not warmed
    # up yet, called while the tree's path is replaying (ExecutionState.
    # EXECUTION), is warmed up after apply_checkpoint_execution_state_in_
    # allocator(), which calls torch._C._cuda_setCheckpointPoolState.
    import torch._inductor.config as inductor_config

    inductor_config.triton.slow_path_cudagraph_asserts = True  # the pool's live blocks checked after each restore
    restores = []
    restore = torch._C._cuda_setCheckpointPoolState

    def counted(*args):
        restore(*args)
        restores.append(1)

    torch._C._cuda_setCheckpointPoolState = counted
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step_fn = torch.compile(model, mode="reduce-overhead", dynamic=False)
    x_eval = torch.randn(64, 256, device="cuda")
    losses, evals = [], []

    def train(batch):
        model.train()
        x = torch.randn(batch, 256, device="cuda")
        y = torch.randint(0, 10, (batch,), device="cuda")
        loss = torch.nn.functional.cross_entropy(step_fn(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(round(loss.item(), 6))

    def evaluate():
        model.eval()
        with torch.no_grad():
            evals.append(round(step_fn(x_eval).sum().item(), 4))

    for _ in range(4):  # warm-up, recording, replays
        train(64)
    evaluate()  # a restore, then the eval graph's warm-up
    evaluate()
    for _ in range(3):
        train(64)
    train(48)  # the last, smaller batch of an epoch: a restore again
    evaluate()
    for _ in range(3):
        train(64)
    torch.cuda.synchronize()
    return len(restores) > 0, {"losses": losses, "evals": evals, "restores": len(restores)}


def case_reclaim(torch):
    # PyTorch's test_graph_capture_reclaim_4_streams, with values: data1 is
    # read on three side streams and freed in the capture; data2 is asked
    # for before the last join and must not get its block, data3 after it
    # and gets it in mode reuse only. data3 then overwrites the block: at
    # every replay the side streams' reads must still see ones.
    s1, s2, s3, s4 = (torch.cuda.Stream() for _ in range(4))
    g = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.stream(s1):
        g.capture_begin()
        data1 = torch.ones(8, device="cuda")
        data1_ptr = data1.data_ptr()
        sink1, sink3 = torch.zeros_like(data1), torch.zeros_like(data1)
        bufs = []
        for k, s in ((2, s2), (3, s3), (4, s4)):
            s.wait_stream(s1)
            with torch.cuda.stream(s):
                bufs.append(data1 + k)
                data1.record_stream(s)
        del data1
        s1.wait_stream(s2)
        sink1.fill_(1.0)
        s3.wait_stream(s4)
        with torch.cuda.stream(s3):
            sink3.fill_(3.0)
            sink3.record_stream(s3)
        data2 = torch.empty(8, device="cuda")
        data2.fill_(-1.0)
        s1.wait_stream(s3)
        sink1.add_(sink3)
        data3 = torch.empty(8, device="cuda")
        data3.fill_(7.0)
        g.capture_end()
    torch.cuda.synchronize()
    values = []
    for _ in range(3):
        for b in bufs:
            b.zero_()
        g.replay()
        torch.cuda.synchronize()
        values.append([b[0].item() for b in bufs])
    reused, before_join = data3.data_ptr() == data1_ptr, data2.data_ptr() == data1_ptr
    values_ok = all(v == [3.0, 4.0, 5.0] for v in values) and bool((data3 == 7.0).all())
    ok = values_ok and not before_join and reused == (MODE == "reuse")
    return ok, {"reused_after_join": reused, "reused_before_join": before_join, "replay_values": values[-1]}


CASES = {"issue": case_issue, "two_stream": case_two_stream, "compile": case_compile, "mempool": case_mempool,
         "mempool_allocator": case_mempool_allocator, "ckpt": case_ckpt, "reclaim": case_reclaim}
MODE = None


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", required=True, choices=["native"] + list(CONFS))
    p.add_argument("--case", required=True, choices=list(CASES))
    a = p.parse_args()
    global MODE
    MODE = a.mode
    if a.mode != "native":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
        import xsalloc.torch

        xsalloc.torch.use(conf=CONFS[a.mode])
    import torch

    return run_case(CASES[a.case], (torch,), {"mode": a.mode, "case": a.case})


if __name__ == "__main__":
    sys.exit(main())
