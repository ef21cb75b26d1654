"""PyTorch and CuPy on xsalloc give the same numbers as on their own allocators (GPU machine).

    bash tests/gpu/run_torch_cupy.sh        (builds libxsalloc.so with setup.py, then runs this)

Design: every measurement runs in its own process, since an allocator can
be chosen only before CUDA is initialised: (1) a small conv net + MLP
trains (MSE regression) for STEPS steps on seeded random data with
deterministic algorithms, batches copied in on a side stream and handed over
with record_stream, once with PyTorch's native allocator and once under xsalloc.torch.use(); the
losses and the final weights must be bitwise equal. They are expected to be:
the same kernels run on the same inputs, because kernel choice depends on
shapes and on pointer alignment, and both allocators align every block to
at least 512 bytes; a difference would mean memory reused while still in use.
A difference within REL_TOL (1e-6) is reported as a warning and passes, for
a library that picks a kernel by exact address. (2) A CuPy computation (GEMM,
FFT, sort, reductions over many short-lived arrays, some on a second stream)
with its default memory pool and under xsalloc.cupy.use() must give
identical bytes, and under xsalloc the arrays must be in xsalloc's memory
and return to it on garbage collection. (3) Under xsalloc, an allocation
beyond torch.cuda.set_per_process_memory_fraction is reported (what torch
does with the NULL it gets: raise or not), as is the torch.cuda.memory_stats
key set against the native one. Prints one line per check and a summary;
exits 1 on a mismatch. Needs python3 with torch and cupy, and XSALLOC_LIBRARY
(or the package's default places) for libxsalloc.so.
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys

STEPS = 30
REL_TOL = 1e-6


def torch_train(alloc):
    import torch

    if alloc == "xsalloc":
        import xsalloc.torch
        xsalloc.torch.use()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # Only layers with deterministic CUDA kernels (no adaptive pooling, no NLL loss).
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(32, 64, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(64, 64, 3, stride=2, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(64 * 8 * 8, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10),
    ).cuda()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    side = torch.cuda.Stream()
    losses = []
    for step in range(STEPS):
        batch = (64, 48, 96, 32)[step % 4]  # varying sizes: blocks are split, merged and reused
        x_cpu = torch.randn(batch, 3, 32, 32, generator=gen).pin_memory()
        y_cpu = torch.randn(batch, 10, generator=gen).pin_memory()
        with torch.cuda.stream(side):
            x, y = x_cpu.to("cuda", non_blocking=True), y_cpu.to("cuda", non_blocking=True)
        torch.cuda.current_stream().wait_stream(side)
        x.record_stream(torch.cuda.current_stream())
        y.record_stream(torch.cuda.current_stream())
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if step == STEPS // 2:
            torch.cuda.empty_cache()
    torch.cuda.synchronize()
    weights = hashlib.sha256(b"".join(p.detach().cpu().numpy().tobytes() for p in model.parameters())).hexdigest()
    stats = torch.cuda.memory_stats()
    out = {
        "losses": [v.hex() for v in losses],
        "weights_sha256": weights,
        "memory_allocated": torch.cuda.memory_allocated(),
        "max_memory_reserved": torch.cuda.max_memory_reserved(),
        "stat_keys": sorted(stats),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(),
    }
    if alloc == "xsalloc":
        import ctypes
        import xsalloc.torch
        from xsalloc import _lib

        lib, base, size = _lib.load(), ctypes.c_void_p(), ctypes.c_size_t()
        out["params_in_xsalloc"] = all(
            lib.cdll.xsa_get_base_allocation(p.untyped_storage().data_ptr(), ctypes.byref(base), ctypes.byref(size)) == 0
            for p in model.parameters())
        out["xsalloc_allocations"] = xsalloc.torch.memory_stats()["allocation.all.allocated"]
        out["summary_lines"] = len(torch.cuda.memory_summary().splitlines())
    return out


def torch_oom():
    import torch
    import xsalloc.torch

    xsalloc.torch.use()
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(0.05)
    keep = torch.ones(1 << 20, device="cuda")
    try:
        t = torch.empty(int(total * 0.5), dtype=torch.uint8, device="cuda")
        outcome = f"torch returned a tensor (data_ptr {t.data_ptr():#x}) instead of raising"
        raised = False
    except Exception as e:  # torch.OutOfMemoryError or RuntimeError, depending on the version
        outcome = f"torch raised {type(e).__name__}: {str(e).splitlines()[0][:160]}"
        raised = True
    usable = float((keep * 2).sum().item()) == 2.0 * (1 << 20)
    return {"raised": raised, "outcome": outcome, "usable_after": usable,
            "num_ooms": xsalloc.torch.memory_stats()["num_ooms"]}


def cupy_compute(alloc):
    import cupy as cp

    if alloc == "xsalloc":
        import xsalloc
        import xsalloc.cupy
        xsalloc.cupy.use()
    rs = cp.random.RandomState(1234)
    a = rs.standard_normal((1024, 1024), dtype=cp.float32)
    b = rs.standard_normal((1024, 1024), dtype=cp.float32)
    digest = hashlib.sha256()
    acc = cp.zeros(513, dtype=cp.float64)  # rfft of 1024 columns
    side = cp.cuda.Stream()  # blocking: ordered after the legacy default stream's work on c
    for i in range(20):
        c = (a * (i + 1)) @ b  # many short-lived arrays of varying sizes
        f = cp.fft.rfft(c[: 64 + 32 * i], axis=1)
        acc += cp.abs(f).sum(axis=0).astype(cp.float64)
        with side:
            s = cp.sort(c[i].copy())
            side.synchronize()
        digest.update(cp.asnumpy(s).tobytes())
    digest.update(cp.asnumpy(acc).tobytes())
    out = {"sha256": digest.hexdigest()}
    if alloc == "xsalloc":
        dev = cp.cuda.runtime.getDevice()
        out["in_xsalloc"] = type(a.data.mem).__name__ == "UnownedMemory"
        live = xsalloc.memory_stats(dev)["allocated_bytes.all.current"]
        del a, b, c, f, s, acc
        import gc
        gc.collect()
        out["allocated_live"] = live
        out["allocated_after_gc"] = xsalloc.memory_stats(dev)["allocated_bytes.all.current"]
    return out


def child(args):
    if args.what == "torch":
        result = torch_train(args.alloc)
    elif args.what == "oom":
        result = torch_oom()
    else:
        result = cupy_compute(args.alloc)
    print("RESULT " + json.dumps(result))


def run_child(*argv):
    env = dict(os.environ, CUBLAS_WORKSPACE_CONFIG=":4096:8")
    env.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *argv],
                       env=env, capture_output=True, text=True)
    lines = [line for line in r.stdout.splitlines() if line.startswith("RESULT ")]
    if r.returncode != 0 or not lines:
        return None, f"exit {r.returncode}: {(r.stderr.strip().splitlines() or ['no output'])[-1]}"
    return json.loads(lines[-1][len("RESULT "):]), None


def max_rel_diff(a, b):
    return max(abs(x - y) / max(abs(x), abs(y), 1e-30) for x, y in zip(a, b))


def main():
    failures = []

    def report(ok, line):
        print(("ok    " if ok else "FAIL  ") + line)
        if not ok:
            failures.append(line)

    native, err_n = run_child("torch", "native")
    xs, err_x = run_child("torch", "xsalloc")
    if err_n or err_x:
        report(False, f"torch training: native {err_n or 'ran'}, xsalloc {err_x or 'ran'}")
    else:
        print(f"      torch {native['torch']} on {native['device']}, {STEPS} steps")
        ln = [float.fromhex(v) for v in native["losses"]]
        lx = [float.fromhex(v) for v in xs["losses"]]
        if ln == lx and native["weights_sha256"] == xs["weights_sha256"]:
            report(True, f"torch losses and final weights bitwise equal (first {ln[0]:.6f}, last {ln[-1]:.6f})")
        else:
            d = max_rel_diff(ln, lx)
            if d <= REL_TOL:
                print(f"WARN  torch losses not bitwise equal, max relative difference {d:.3g} <= {REL_TOL}")
            report(d <= REL_TOL, f"torch losses within {REL_TOL} (max relative difference {d:.3g}); "
                                 f"weights {'equal' if native['weights_sha256'] == xs['weights_sha256'] else 'differ'}")
        report(xs["xsalloc_allocations"] > 0 and xs["params_in_xsalloc"],
               f"torch allocated through xsalloc ({xs['xsalloc_allocations']} allocations, every parameter "
               f"{'is' if xs['params_in_xsalloc'] else 'is NOT'} an xsalloc block; "
               f"torch.cuda.memory_allocated() {xs['memory_allocated']:,})")
        print(f"      max_memory_reserved: native {native['max_memory_reserved']:,}, xsalloc {xs['max_memory_reserved']:,}")
        missing = sorted(set(native["stat_keys"]) - set(xs["stat_keys"]))
        extra = sorted(set(xs["stat_keys"]) - set(native["stat_keys"]))
        print(f"      torch.cuda.memory_stats keys under xsalloc: {len(xs['stat_keys'])}; "
              f"missing vs native: {missing or 'none'}; extra: {extra or 'none'}; summary {xs['summary_lines']} lines")

    oom, err = run_child("oom")
    if err:
        report(False, f"torch out-of-memory probe: {err}")
    else:
        print(("ok    " if oom["raised"] else "WARN  ") + f"torch allocation over the memory fraction: {oom['outcome']}; "
              f"num_ooms {oom['num_ooms']}; allocator usable after: {oom['usable_after']}")
        report(oom["usable_after"], "torch keeps working after the failed allocation")

    cn, err_n = run_child("cupy", "default")
    cx, err_x = run_child("cupy", "xsalloc")
    if err_n or err_x:
        report(False, f"cupy: default {err_n or 'ran'}, xsalloc {err_x or 'ran'}")
    else:
        report(cn["sha256"] == cx["sha256"], f"cupy results bitwise equal (sha256 {cn['sha256'][:16]}...)")
        report(cx["in_xsalloc"] and cx["allocated_live"] > 0 and cx["allocated_after_gc"] < cx["allocated_live"],
               f"cupy arrays in xsalloc memory ({cx['allocated_live']:,} bytes live, "
               f"{cx['allocated_after_gc']:,} after del + gc)")

    print(f"torch_cupy_check: {'PASS' if not failures else 'FAIL (' + str(len(failures)) + ')'}")
    return 1 if failures else 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", action="store_true")
    parser.add_argument("what", nargs="?", choices=["torch", "oom", "cupy"])
    parser.add_argument("alloc", nargs="?", choices=["native", "default", "xsalloc"])
    args = parser.parse_args()
    if args.child:
        child(args)
    else:
        sys.exit(main())
