"""Reserved memory after capturing a GPT-2-sized block's forward and backward
in a CUDA graph, under PyTorch's allocators and xsalloc (issue 16).

    python3 benchmarks/gpu/graph_memory.py               (every allocator, both captures, one process each)
    python3 benchmarks/gpu/graph_memory.py --alloc A [--side]  (one allocator of ALLOCS, one capture)

The block: GPT-2's (768 wide, 12 heads, MLP 3072, pre-norm, causal
attention), batch 8 x 1024 tokens, bf16 autocast off (fp32, as the traces).
Warm-up 3 eager steps on a side stream, then one graph capturing forward,
loss and backward; the graph is replayed 5 times. Prints, per allocator:
memory reserved and allocated after the capture and at the end, the peak of
reserved, and whether the replays reproduce the eager gradients.

Two captures: the plain one, and --side, where each block's MLP runs on a
second stream (forked from and joined to the capture stream, its output
record_stream'ed to it), so blocks freed in the capture were used by two
streams: the case graph_capture_record_stream_reuse is about. The *_reuse
allocators set that key (PyTorch 2.11 has it too).
"""
import argparse
import json
import os
import subprocess
import sys

ALLOCS = {
    "native": ("torch", ""),
    "expandable": ("torch", "expandable_segments:True"),
    "native_reuse": ("torch", "graph_capture_record_stream_reuse:True"),
    "expandable_reuse": ("torch", "expandable_segments:True,graph_capture_record_stream_reuse:True"),
    "xsalloc": ("xsalloc", ""),
    "xsalloc_reuse": ("xsalloc", "graph_capture_record_stream_reuse:True"),
    "norec": ("xsalloc", "page_recycling:False"),
    "classic": ("xsalloc", "expandable_segments:False"),
}
GB = 1e9


def child(alloc, side):
    kind, conf = ALLOCS[alloc]
    if kind == "xsalloc":
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
        import xsalloc.torch

        xsalloc.torch.use(conf=conf)
    else:
        os.environ.pop("PYTORCH_ALLOC_CONF", None)
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
    import torch
    import torch.nn as nn

    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self, d=768, h=12):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
            self.h = h

        def mlp(self, x):
            return self.out(nn.functional.gelu(self.fc(self.ln2(x))))

        def forward(self, x):
            b, t, d = x.shape
            q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
            a = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, d))
            if not side:
                return x + self.mlp(x)
            here = torch.cuda.current_stream()
            mlp_stream.wait_stream(here)
            with torch.cuda.stream(mlp_stream):
                m = self.mlp(x)
            here.wait_stream(mlp_stream)
            m.record_stream(here)
            return x + m

    mlp_stream = torch.cuda.Stream()
    block = nn.Sequential(*[Block() for _ in range(2)]).cuda()
    x = torch.randn(8, 1024, 768, device="cuda", requires_grad=True)
    target = torch.randn(8, 1024, 768, device="cuda")

    def step():
        for p in block.parameters():
            p.grad = None
        x.grad = None
        loss = nn.functional.mse_loss(block(x), target)
        loss.backward()
        return loss

    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(warm)
    torch.cuda.synchronize()
    eager_loss = step().item()
    eager_grad = x.grad.clone()
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    for p in block.parameters():
        p.grad = None
    x.grad = None
    with torch.cuda.graph(g):
        loss = nn.functional.mse_loss(block(x), target)
        loss.backward()
    torch.cuda.synchronize()
    after_capture = (torch.cuda.memory_reserved(), torch.cuda.memory_allocated())
    same = []
    for _ in range(5):
        g.replay()
        torch.cuda.synchronize()
        same.append(abs(loss.item() - eager_loss) < 1e-4 and torch.allclose(x.grad, eager_grad, rtol=1e-3, atol=1e-5))
    print(json.dumps({
        "alloc": alloc, "side": side, "reserved_after_capture": after_capture[0], "allocated_after_capture": after_capture[1],
        "reserved_end": torch.cuda.memory_reserved(), "allocated_end": torch.cuda.memory_allocated(),
        "peak_reserved": torch.cuda.max_memory_reserved(), "peak_allocated": torch.cuda.max_memory_allocated(),
        "replays_match_eager": all(same),
    }), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--alloc", choices=list(ALLOCS))
    p.add_argument("--side", action="store_true", help="the capture with each MLP on a second stream")
    a = p.parse_args()
    if a.alloc:
        child(a.alloc, a.side)
        return 0
    print("| capture | allocator | reserved after capture GB | allocated after capture GB | peak reserved GB | "
          "peak allocated GB | peak reserved / peak allocated | replays match eager |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    status = 0
    for side in (False, True):
        capture = "MLP on a side stream" if side else "one stream"
        for alloc in ALLOCS:
            r = subprocess.run([sys.executable, __file__, "--alloc", alloc] + (["--side"] if side else []),
                               capture_output=True, text=True)
            lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
            if r.returncode or not lines:
                err = (r.stderr.strip().splitlines() or ["?"])[-1]
                print(f"| {capture} | {alloc} | failed (exit {r.returncode}): {err} | | | | | |", flush=True)
                status = 1
                continue
            d = json.loads(lines[-1])
            print(f"| {capture} | {alloc} | {d['reserved_after_capture'] / GB:.3f} | "
                  f"{d['allocated_after_capture'] / GB:.3f} | {d['peak_reserved'] / GB:.3f} | "
                  f"{d['peak_allocated'] / GB:.3f} | {d['peak_reserved'] / d['peak_allocated']:.3f} | "
                  f"{d['replays_match_eager']} |", flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
