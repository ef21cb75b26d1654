"""Do virtual-memory driver calls on a second CPU thread delay the main thread's launches?

    python3 tests/gpu/probes/vmm_thread_probe.py [--rounds 8] [--steps 40]     (a GPU machine with torch)

A helper thread could take page creation, mapping, granting, unmapping and
releasing off the allocation path, but only if the driver lets the main
thread launch kernels meanwhile: the driver serializes VMM calls among
themselves (vmm_parallel_probe.py), and a launch that waited for a helper's
cuMemMap would move the cost instead of hiding it. The main thread runs a
busy training step (an MLP's forward and backward with Adam, many small and
large kernels, the GPU kept behind the CPU by a queued matmul batch), timing
each step's CPU time to enqueue its work and each launch of a probe kernel
inside it; a second thread meanwhile does nothing (idle), loops one-page
handles through create, map, grant (the page calls of an allocator's growth)
and unmap, release (vmm), or loops event record + query (events: the
calls an allocator makes anyway). The second thread is C
(vmm_thread_helper.c, compiled here with gcc), so it takes no Python lock
from the main thread. Rounds interleave the three modes; medians and the
99th percentile of the probe launches, and how many driver calls the helper
made per second of the main thread's steps.
"""
import argparse
import ctypes
import os
import statistics
import subprocess
import tempfile
import time

import torch
from vmm_sync_probe import check, cu, interleaved, matmul_batch, reserve

PAGES = 64  # one-page handles the helper cycles through


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=8, help="interleaved rounds of every mode (8)")
    ap.add_argument("--steps", type=int, default=40, help="training steps a round (40)")
    args = ap.parse_args()
    torch.cuda.init()
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[m for _ in range(8) for m in (torch.nn.Linear(2048, 2048), torch.nn.GELU())]).cuda()
    opt = torch.optim.Adam(model.parameters())
    x = torch.randn(256, 2048, device="cuda")
    probe_in = torch.randn(64, device="cuda")
    _, _, page, base = reserve(torch.cuda.current_device(), PAGES)
    ctx = ctypes.c_void_p()
    check(cu.cuCtxGetCurrent(ctypes.byref(ctx)), "current context")
    here = os.path.dirname(os.path.abspath(__file__))
    lib_path = os.path.join(tempfile.mkdtemp(), "helper.so")
    subprocess.run(["gcc", "-O2", "-shared", "-fPIC", "-I/usr/local/cuda/include",
                    os.path.join(here, "vmm_thread_helper.c"), "-o", lib_path, "-ldl", "-lpthread"], check=True)
    helper = ctypes.CDLL(lib_path)
    helper.helper_start.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_uint64,
                                    ctypes.c_size_t, ctypes.c_int]
    helper.helper_calls.restype = ctypes.c_ulonglong
    modes = {"idle": 0, "vmm": 1, "events": 2}
    a, b, c, mms = matmul_batch(seconds=0.5)

    def step(launches):
        y = model(x)
        loss = y.square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        probe_in.add_(1.0)  # one small kernel, its launch timed
        launches.append(time.perf_counter() - t0)

    for _ in range(3):  # warm-up: cuBLAS, Adam's state, the allocator's cache
        step([])
    torch.cuda.synchronize()

    def one_round(mode):
        for _ in range(mms):  # the GPU stays behind the CPU through the steps
            torch.mm(a, b, out=c)
        launches, steps = [], []
        if modes[mode]:
            stream = ctypes.c_void_p(torch.cuda.Stream().cuda_stream)
            check(helper.helper_start(modes[mode], ctx, stream, torch.cuda.current_device(), base.value, page, PAGES),
                  "helper start")
            time.sleep(0.01)
        start = helper.helper_calls() if modes[mode] else 0
        t0 = time.perf_counter()
        for _ in range(args.steps):
            s0 = time.perf_counter()
            step(launches)
            steps.append(time.perf_counter() - s0)
        wall = time.perf_counter() - t0
        calls = helper.helper_calls() - start if modes[mode] else 0
        if modes[mode]:
            check(helper.helper_stop(), "helper's driver calls")
        torch.cuda.synchronize()
        launches.sort()
        return statistics.median(steps), launches[len(launches) // 2], launches[int(len(launches) * 0.99)], calls / wall

    rows = interleaved(("idle", "vmm", "events"), args.rounds, one_round)
    print(f"device {torch.cuda.get_device_name()}; {args.steps} training steps a round (8 Linear 2048 + GELU, batch "
          f"256, Adam), {mms} matmuls queued first; medians of {args.rounds} interleaved rounds")
    print(f"{'helper':>7s} {'step CPU ms':>12s} {'launch us':>10s} {'p99 us':>8s} {'helper calls/s':>15s}")
    for mode, rs in rows.items():
        med = [statistics.median(r[i] for r in rs) for i in range(4)]
        print(f"{mode:>7s} {med[0] * 1e3:12.3f} {med[1] * 1e6:10.1f} {med[2] * 1e6:8.1f} {med[3]:15.0f}")
    check(cu.cuMemAddressFree(base, ctypes.c_size_t(PAGES * page)), "address free")


if __name__ == "__main__":
    main()
