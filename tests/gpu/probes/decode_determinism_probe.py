"""Is colocate.py's generator deterministic, and does pausing its memory
change what it generates? Under python -m xsalloc.run, in one process:
tokens of the same seeded prompts generated twice without a pause, then
after pausing and resuming the KV cache and the graphs' pool, then after
pausing only the KV cache, then only the graphs; each as a hash and the
first step where it differs from the first run, with that step's logit
gap (top-1 minus top-2) on the first run.

    python -m xsalloc.run tests/gpu/probes/decode_determinism_probe.py [MATH|EFFICIENT_ATTENTION|CUDNN_ATTENTION]
    PROBE_SAVER=none python tests/gpu/probes/decode_determinism_probe.py      (torch's allocator, no pause)

(the graphs are captured with the backend chosen)
"""
import hashlib
import os
import sys

os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "benchmarks", "gpu"))
import torch  # noqa: E402

import colocate  # noqa: E402

torch.use_deterministic_algorithms(True, warn_only=True)
torch.backends.cuda.matmul.allow_tf32 = False
saver = colocate.Saver(os.environ.get("PROBE_SAVER", "xsalloc"), torch)  # none: torch's own allocator
gen = colocate.Generator(torch, saver)
backend = sys.argv[1] if len(sys.argv) > 1 else "default"
if backend != "default":
    from torch.nn.attention import SDPBackend, sdpa_kernel
    sdpa_kernel(getattr(SDPBackend, backend)).__enter__()
gen.capture(saver, torch.cuda.graph_pool_handle())
g = torch.Generator(device="cuda").manual_seed(1001)
prompts = torch.randint(0, 32000, (16, 128), device="cuda", generator=g)


def run():
    return gen.generate(prompts, 48)


def report(name, toks, ref):
    same = torch.equal(toks, ref)
    first = None if same else int((toks != ref).any(0).nonzero()[0])
    print(f"{name:28} {hashlib.sha256(toks.cpu().numpy().tobytes()).hexdigest()[:16]} "
          f"{'same' if same else f'differs from step {first}'}", flush=True)


print("attention backend:", backend)
ref = run()
report("first", ref, ref)
report("again, no pause", run(), ref)
for tags in (("kv_cache", "graph"), ("kv_cache",), ("graph",)) if saver.s else ():
    for t in tags:
        saver.s.pause(t)
    for t in tags:
        saver.s.resume(t)
    report("after pausing " + "+".join(tags), run(), ref)
