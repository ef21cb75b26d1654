"""xsalloc.memory_saver on a GPU, beyond torch_memory_saver's examples: the
issue 32 cases that need a real device (tests/gpu/run_tms_examples.sh runs it).

    python -m xsalloc.run tests/gpu/checks/memory_saver_check.py

One line per case, "PASS name" or "FAIL name: why"; exit 1 if any failed.
  kernel_running: pause while a kernel on another stream still writes the
    tagged tensor (record_stream'ed): the pause waits, no illegal address,
    and the kernel's result is what resume restores.
  free_while_paused: a tagged tensor deleted while paused; the other comes back.
  resume_oom: resume with the device filled: torch.OutOfMemoryError, still
    paused; after freeing, a second resume restores every byte.
  vllm_sleep: sleep(offload_tags=("weights",)) releases weights and KV cache
    (cuMemGetInfo), wake_up() restores the weights bitwise.
  disable: a tensor made in disable() inside a region is not paused with it
    (torch 2.10+ routes nested MemPools to the innermost).
"""
import sys
import traceback

import torch

from xsalloc.memory_saver import torch_memory_saver as saver

GiB = 1 << 30
failed = []


def used():
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free


def case(fn):
    try:
        fn()
        print(f"PASS {fn.__name__}", flush=True)
    except Exception as e:  # one case's failure must not hide the others'
        traceback.print_exc()
        print(f"FAIL {fn.__name__}: {type(e).__name__}: {e}", flush=True)
        failed.append(fn.__name__)
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return fn


@case
def kernel_running():
    side = torch.cuda.Stream()
    with saver.region(tag="k", enable_cpu_backup=True):
        x = torch.ones(64 << 20, device="cuda")  # 256 MiB
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(2_000_000_000)  # about a second of spinning before the write
        x.add_(1)
    x.record_stream(side)
    saver.pause("k")
    saver.resume("k")
    assert torch.equal(x, torch.full_like(x, 2)), "the write that ran during pause was lost"


@case
def free_while_paused():
    with saver.region(tag="f", enable_cpu_backup=True):
        a = torch.randn(32 << 20, device="cuda")
        b = torch.randn(32 << 20, device="cuda")
    expected = b.cpu()
    saver.pause("f")
    del a
    saver.resume("f")
    assert torch.equal(b.cpu(), expected)


@case
def resume_oom():
    with saver.region(tag="o", enable_cpu_backup=True):
        t = torch.randn(GiB, dtype=torch.float16, device="cuda")  # 2 GiB
    expected = t.cpu()
    saver.pause("o")
    free, _ = torch.cuda.mem_get_info()
    hog = torch.empty(free - GiB, dtype=torch.uint8, device="cuda")
    try:
        saver.resume("o")
        raise AssertionError("resume succeeded with 1 GiB free for 2 GiB")
    except torch.OutOfMemoryError as e:
        print(f"  resume_oom: {str(e).splitlines()[0][:160]}")
    del hog
    torch.cuda.empty_cache()
    saver.resume("o")
    assert torch.equal(t.cpu(), expected)


@case
def vllm_sleep():
    with saver.use_memory_pool(tag="weights"):
        w = torch.randn(GiB // 2, device="cuda")  # 2 GiB
    with saver.use_memory_pool(tag="kv_cache"):
        kv = torch.zeros(GiB, device="cuda")  # 4 GiB
    expected = w.cpu()
    before = used()
    saver.sleep(offload_tags=("weights",))
    after = used()
    print(f"  vllm_sleep: device memory {before / GiB:.2f} -> {after / GiB:.2f} GiB")
    assert before - after >= 6 * GiB - (64 << 20), "sleep released less than weights + KV cache"
    saver.wake_up()
    assert torch.equal(w.cpu(), expected)
    kv.fill_(1)
    assert kv[0].item() == 1


@case
def disable():
    with saver.region(tag="w"):
        with saver.disable():
            t = torch.ones(1 << 20, device="cuda")
    saver.pause("w")
    try:
        assert t.sum().item() == 1 << 20
    finally:
        saver.resume("w")


sys.exit(1 if failed else 0)
