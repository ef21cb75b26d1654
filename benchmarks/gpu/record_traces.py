"""Records allocation traces of real PyTorch workloads, in the shared trace format.

Runs on a GPU machine with torch (no downloads: models are built in code and
fed random data). Each workload runs under PyTorch's own caching allocator
with its memory history recording on; the history's alloc / free_requested
entries become 'a <id> <bytes> <stream>' / 'f <id>' lines (bytes as the
history records them). These traces were not used to design xsalloc's
policies: they test its claims on work it has not seen.

    python3 record_traces.py OUT_DIR [--only NAME]
"""
import argparse
import gzip
import os
import random
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def bert_varlen(steps=24):
    """BERT-base-like encoder, masked-LM head, AdamW, bf16, batch 8-32 x length 32-512."""
    vocab, width = 30522, 768
    layer = nn.TransformerEncoderLayer(width, 12, 3072, batch_first=True, norm_first=True)
    model = nn.ModuleDict({
        "embed": nn.Embedding(vocab, width),
        "encoder": nn.TransformerEncoder(layer, 12, enable_nested_tensor=False),
        "head": nn.Linear(width, vocab),
    }).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    for _ in range(steps):
        batch, length = random.randint(8, 32), random.randint(32, 512)
        tokens = torch.randint(0, vocab, (batch, length), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            hidden = model["encoder"](model["embed"](tokens))
            loss = F.cross_entropy(model["head"](hidden).float().view(-1, vocab), tokens.view(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


class UNet(nn.Module):
    def __init__(self, widths=(64, 128, 256, 512)):
        super().__init__()
        self.down, self.up = nn.ModuleList(), nn.ModuleList()
        prev = 3
        for w in widths:
            self.down.append(nn.Sequential(nn.Conv2d(prev, w, 3, padding=1), nn.GroupNorm(8, w), nn.SiLU(),
                                           nn.Conv2d(w, w, 3, padding=1), nn.SiLU()))
            prev = w
        for w in reversed(widths[:-1]):
            self.up.append(nn.Sequential(nn.Conv2d(prev + w, w, 3, padding=1), nn.GroupNorm(8, w), nn.SiLU()))
            prev = w
        self.out = nn.Conv2d(prev, 3, 1)

    def forward(self, x):
        skips = []
        for i, block in enumerate(self.down):
            x = block(x)
            if i < len(self.down) - 1:
                skips.append(x)
                x = F.max_pool2d(x, 2)
        for block in self.up:
            x = F.interpolate(x, scale_factor=2)
            x = block(torch.cat([x, skips.pop()], 1))
        return self.out(x)


def unet_varres(steps=24):
    """Conv UNet denoiser, SGD, bf16, channels-last, batch 4-16 x side 128-384."""
    model = UNet().cuda().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    for _ in range(steps):
        batch, side = random.randint(4, 16), 32 * random.randint(4, 12)
        x = torch.randn(batch, 3, side, side, device="cuda").to(memory_format=torch.channels_last)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.mse_loss(model(x).float(), x)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)


def llm_decode(requests=8):
    """Decoder-only inference with a KV cache grown by concatenation: batch 1-16,
    prompt 64-1024, 32-256 new tokens, 12 layers of width 2048, bf16."""
    width, heads, layers, vocab = 2048, 16, 12, 32000
    dt = torch.bfloat16
    embed = nn.Embedding(vocab, width).cuda().to(dt)
    qkv = [nn.Linear(width, 3 * width).cuda().to(dt) for _ in range(layers)]
    proj = [nn.Linear(width, width).cuda().to(dt) for _ in range(layers)]
    mlp = [nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width)).cuda().to(dt)
           for _ in range(layers)]
    head = nn.Linear(width, vocab).cuda().to(dt)
    with torch.no_grad():
        for _ in range(requests):
            batch, prompt, new = random.randint(1, 16), random.randint(64, 1024), random.randint(32, 256)
            tokens = torch.randint(0, vocab, (batch, prompt), device="cuda")
            cache = [None] * layers
            for _step in range(new):
                x = embed(tokens)
                for i in range(layers):
                    q, k, v = qkv[i](x).view(batch, -1, 3, heads, width // heads).unbind(2)
                    if cache[i] is not None:
                        k = torch.cat([cache[i][0], k], 1)
                        v = torch.cat([cache[i][1], v], 1)
                    cache[i] = (k, v)
                    a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                       is_causal=cache[i][0].shape[1] == q.shape[1])
                    x = x + proj[i](a.transpose(1, 2).reshape(batch, -1, width))
                    x = x + mlp[i](x)
                tokens = head(x[:, -1:]).argmax(-1)
            del cache


WORKLOADS = {"bert_varlen": bert_varlen, "unet_varres": unet_varres, "llm_decode": llm_decode}


def write_trace(snapshot, path, waits=False):
    """alloc / free_requested history entries -> trace lines; returns (calls, peak live bytes).
    With waits, a gap of 1 ms or more between two lines' entries (time_us)
    becomes a 'w <us>' line between them: the program's time, for replays
    on trace time."""
    ids, streams, lines = {}, {}, []
    live = peak = 0
    sizes = {}
    last = None
    for e in snapshot["device_traces"][0]:
        if e["action"] not in ("alloc", "free_requested") or (e["action"] != "alloc" and e["addr"] not in ids):
            continue
        if waits and last is not None and e["time_us"] - last >= 1000:
            lines.append(f"w {e['time_us'] - last}")
        last = e["time_us"]
        if e["action"] == "alloc":
            stream = streams.setdefault(e["stream"], len(streams))
            ids[e["addr"]] = len(sizes)
            sizes[len(sizes)] = e["size"]
            lines.append(f"a {ids[e['addr']]} {e['size']} {stream}")
            live += e["size"]
            peak = max(peak, live)
        else:
            i = ids.pop(e["addr"])
            lines.append(f"f {i}")
            live -= sizes[i]
    with gzip.open(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    return sum(not line.startswith("w") for line in lines), peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--only")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name, fn in WORKLOADS.items():
        if args.only and name != args.only:
            continue
        random.seed(0)
        torch.manual_seed(0)
        torch.cuda.memory._record_memory_history(max_entries=4_000_000, context=None, stacks="python")
        start = time.time()
        fn()
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        calls, peak = write_trace(snapshot, os.path.join(args.out, f"{name}.trace.gz"))
        print(f"{name}: {calls} calls, peak live {peak / 1e9:.2f} GB, {time.time() - start:.1f} s", flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
