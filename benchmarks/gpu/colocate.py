"""RL-style colocation in one process (issue 32's benchmark): a trainer and a
generator take turns on one GPU for 5 cycles, each side paused while the
other runs.

    python -m xsalloc.run benchmarks/gpu/colocate.py --saver xsalloc [--out FILE]
    python benchmarks/gpu/colocate.py --saver tms       (torch_memory_saver, torch hook mode)
    python benchmarks/gpu/colocate.py --saver none      (the same program, never paused: the reference)

benchmarks/gpu/colocate.sh runs the variants side by side and prints the
table and the issue's PASS/FAIL lines (colocate_report.py).

Trainer: GPT-2 small from transformers.GPT2Config (no download), fp32,
eager attention, AdamW, batch 8 of seeded lengths 128-1024, --train-steps
a cycle; its weights and optimizer state are tagged "trainer" with CPU
backup, and its activations (the free cache of its pool) are dropped at
pause. Generator: a Llama from transformers.LlamaConfig (12 layers, 2048
wide, 16 heads, MLP 5632, vocab 32000, fp32: in bf16 the greedy tokens of
this random model changed between two identical calls in one process,
under torch's allocator too, near-tied logits flipping on rounding noise,
so no run could be compared with another; tests/gpu/probes/
decode_determinism_probe.py shows it), its weights untagged; its
KV cache (static, batch 32 x 1024 positions) tagged "kv_cache" and its
decode steps captured in CUDA graphs (batch 1-32, one shared pool, tagged
"graph" where the saver can: xsalloc; torch_memory_saver's torch mode cannot
tag a graph pool), both dropped at pause. The decode step uses the model's
own modules with a static cache and our rotary and masked attention, so
that it can be captured whatever the transformers version. Each cycle
prefills a seeded batch of 16 prompts of 128 tokens and decodes
--decode-steps tokens greedily by replaying the batch-16 graph.

Measured per phase: the process's device memory from cuMemGetInfo
(torch.cuda.mem_get_info, total - free) minus the context (the same
reading after a warm-up pass of both models has loaded every kernel and
freed everything, less what the allocator still reserves then); the live
memory that is not paused; pause and resume seconds per tag (after a
synchronize, until pause or resume returned and a synchronize; the
kv_cache's also over --kv-repeats extra resume and pause pairs a cycle,
for enough samples of a few-millisecond call); the
trainer's backup rate (its live bytes / pause seconds; for xsalloc also the
copy step's own rate, xsalloc.elastic.last_report) beside a plain
pinned copy_ of the same tensors timed in the same run; the losses (as
float hex) and a hash of the generated tokens. Backups are retained
across cycles (retain_cpu_backup) in both savers, as RL frameworks set it:
cycle 1 pins host memory, later cycles reuse it. Prints "RESULT {json}".
"""
import argparse
import contextlib
import gc
import hashlib
import json
import os
import random
import sys
import time

MiB = 1 << 20
TAGS = ("trainer", "kv_cache", "graph")
GRAPH_BATCHES = (1, 2, 4, 8, 16, 32)


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--saver", choices=("xsalloc", "tms", "none"), required=True)
    p.add_argument("--cycles", type=int, default=5)
    p.add_argument("--train-steps", type=int, default=6)
    p.add_argument("--decode-steps", type=int, default=48)
    p.add_argument("--kv-repeats", type=int, default=4,
                   help="extra resume and pause pairs of the kv_cache after each generator pause, timed too "
                        "(samples for the comparison of pause and resume without backup)")
    p.add_argument("--label", default=None, help="the variant's name in the table (default: --saver)")
    p.add_argument("--out", default=None, help="also write the RESULT json to this file")
    return p.parse_args(argv)


class Saver:
    """The saver under test behind one interface; 'none' never pauses."""

    def __init__(self, kind, torch):
        self.kind, self.torch, self.s = kind, torch, None
        self.paused = set()  # torch_memory_saver refuses (and then crashes) to resume what is not paused
        self.steps = {}  # xsalloc: "pause_kv_cache" -> its last_report
        if kind == "xsalloc":
            from xsalloc.memory_saver import torch_memory_saver
            self.s = torch_memory_saver
        elif kind == "tms":
            from torch_memory_saver import torch_memory_saver
            torch_memory_saver.hook_mode = "torch"
            self.s = torch_memory_saver
        if self.s is not None:
            self.s.retain_cpu_backup = True

    def region(self, tag, backup=False):
        return self.s.region(tag=tag, enable_cpu_backup=backup) if self.s else contextlib.nullcontext()

    def graph(self, g, pool):
        if self.kind == "xsalloc":
            return self.s.cuda_graph(g, pool=pool, tag="graph")
        return self.torch.cuda.graph(g, pool=pool)

    def can_pause(self, tag):
        return self.s is not None and (tag != "graph" or self.kind == "xsalloc")

    def timed(self, what, tag):
        """Seconds of pause(tag) or resume(tag), from a synchronized device to a synchronized device."""
        if not self.can_pause(tag) or (what == "pause") == (tag in self.paused):
            return None
        self.torch.cuda.synchronize()
        t0 = time.perf_counter()
        getattr(self.s, what)(tag)
        self.torch.cuda.synchronize()
        seconds = time.perf_counter() - t0
        (self.paused.add if what == "pause" else self.paused.discard)(tag)
        if self.kind == "xsalloc":  # xsalloc's own account of the steps, for the log
            import xsalloc.elastic
            self.steps[f"{what}_{tag}"] = xsalloc.elastic.last_report(0, resume=what == "resume")
        return seconds

    def copy_rate(self):
        """GiB/s of the last pause's copy to host memory alone (xsalloc reports its steps), else None."""
        if self.kind != "xsalloc":
            return None
        import xsalloc.elastic
        r = xsalloc.elastic.last_report(0)
        return r["copied_bytes"] / r["copy_s"] / (1 << 30) if r["copy_s"] else None


def build_trainer(torch):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    config = GPT2Config(vocab_size=50257, n_positions=1024, n_embd=768, n_layer=12, n_head=12)
    config._attn_implementation = "eager"  # deterministic backward (no fused-attention atomics)
    with torch.device("cuda"):
        model = GPT2LMHeadModel(config)
    model.train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-4)


def train_steps(torch, model, opt, rng, steps):
    losses = []
    for _ in range(steps):
        length = rng.randint(128, 1024)
        ids = torch.randint(0, 50257, (8, length), device="cuda")
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item().hex())
    return losses


class Generator:
    """The Llama's modules, a static KV cache, and decode graphs (see the module's design note)."""

    def __init__(self, torch, saver, max_batch=32, max_len=1024):
        from transformers import LlamaConfig, LlamaForCausalLM

        self.torch, self.F = torch, torch.nn.functional
        torch.manual_seed(1)
        c = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=12,
                        num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=max_len)
        default = torch.get_default_dtype()
        torch.set_default_dtype(torch.float32)
        try:
            with torch.device("cuda"):
                self.model = LlamaForCausalLM(c).eval()
        finally:
            torch.set_default_dtype(default)
        self.heads, self.dim, self.max_len = c.num_attention_heads, c.hidden_size // c.num_attention_heads, max_len
        theta = getattr(c, "rope_theta", None) or 10000.0
        self.inv_freq = 1.0 / theta ** (torch.arange(0, self.dim, 2, device="cuda", dtype=torch.float32) / self.dim)
        self.positions = torch.arange(max_len, device="cuda")
        with saver.region("kv_cache"):
            shape = (max_batch, self.heads, max_len, self.dim)
            self.kv = [(torch.zeros(shape, device="cuda"), torch.zeros(shape, device="cuda"))
                       for _ in self.model.model.layers]
        self.kv_bytes = sum(k.nbytes + v.nbytes for k, v in self.kv)
        self.graphs = {}

    def rope(self, x, pos):
        freqs = pos[:, None].float() * self.inv_freq[None, :]
        cos, sin = freqs.cos().repeat(1, 2), freqs.sin().repeat(1, 2)
        half = x.shape[-1] // 2
        rotated = self.torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return (x.float() * cos + rotated.float() * sin).to(x.dtype)

    def forward(self, ids, pos):
        """Logits of the last position; writes K and V of positions `pos` (a tensor) into the cache."""
        torch, m = self.torch, self.model.model
        b, t = ids.shape
        h = m.embed_tokens(ids)
        mask = self.positions[None, :] <= pos[:, None]  # [t, max_len]: causal over what is written
        for layer, (kc, vc) in zip(m.layers, self.kv):
            x = layer.input_layernorm(h)
            a = layer.self_attn
            q, k, v = (proj(x).view(b, t, self.heads, self.dim).transpose(1, 2)
                       for proj in (a.q_proj, a.k_proj, a.v_proj))
            q, k = self.rope(q, pos), self.rope(k, pos)
            kc[:b].index_copy_(2, pos, k)
            vc[:b].index_copy_(2, pos, v)
            o = self.F.scaled_dot_product_attention(q, kc[:b], vc[:b], attn_mask=mask)
            h = h + a.o_proj(o.transpose(1, 2).reshape(b, t, self.heads * self.dim))
            h = h + layer.mlp(layer.post_attention_layernorm(h))
        return self.model.lm_head(m.norm(h[:, -1])).float()

    def capture(self, saver, pool):
        torch = self.torch
        for b in GRAPH_BATCHES:
            ids = torch.zeros((b, 1), dtype=torch.long, device="cuda")
            pos = torch.zeros((1,), dtype=torch.long, device="cuda")
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side), torch.inference_mode():
                for _ in range(2):
                    self.forward(ids, pos)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.inference_mode(), saver.graph(g, pool):
                out = self.forward(ids, pos)
            self.graphs[b] = (g, ids, pos, out)

    def generate(self, prompts, steps):
        torch = self.torch
        b, p = prompts.shape
        g, ids, pos, out = self.graphs[b]
        tokens = []
        for k, v in self.kv:  # unwritten positions are masked, but 0 x NaN is NaN: no stale bits may stay
            k.zero_()
            v.zero_()
        with torch.inference_mode():
            nxt = self.forward(prompts, self.positions[:p]).argmax(-1)
            for i in range(steps):
                tokens.append(nxt)
                ids.copy_(nxt[:, None])
                pos.fill_(p + i)
                g.replay()
                nxt = out.argmax(-1)
        return torch.stack(tokens, 1)


def used(torch):
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    return total - free


def context_after_warmup(torch):
    """The context once every kernel the run uses is loaded: a warm-up of both models, all freed,
    then cuMemGetInfo's used bytes less what the allocator still reserves (cuBLAS workspaces)."""
    model, opt = build_trainer(torch)
    train_steps(torch, model, opt, random.Random(99), 1)
    gen = Generator(torch, Saver("none", torch))
    gen.capture(Saver("none", torch), torch.cuda.graph_pool_handle())
    gen.generate(torch.randint(0, 32000, (16, 128), device="cuda"), 2)
    del model, opt, gen
    gc.collect()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    return used(torch) - torch.cuda.memory_reserved()


def pinned_copy_rate(torch, tensors):
    """GiB/s of copy_ of the tensors into one pinned host buffer (allocated first, not timed; best of 2)."""
    views = [t.detach().reshape(-1).view(torch.uint8) for t in tensors]
    host = torch.empty(sum(v.numel() for v in views), dtype=torch.uint8, pin_memory=True)
    best = None
    for _ in range(2):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        off = 0
        for v in views:
            host[off:off + v.numel()].copy_(v, non_blocking=True)
            off += v.numel()
        torch.cuda.synchronize()
        dt = time.perf_counter() - t0
        best = dt if best is None else min(best, dt)
    return off / best / (1 << 30)


def main(argv=None):
    args = parse(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, before CUDA starts
    import torch

    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.zeros(1, device="cuda")
    context = context_after_warmup(torch)
    saver = Saver(args.saver, torch)
    rec = {"label": args.label or args.saver, "saver": args.saver, "device": torch.cuda.get_device_name(0),
           "conf": os.environ.get("XSALLOC_CONF", os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "")),
           "context_mib": context / MiB, "losses": [], "phases": [], "times": []}
    paused_live = {}  # tag -> live bytes it holds while paused (what memory_allocated still counts outside xsalloc)

    def measure(cycle, phase):
        live = torch.cuda.memory_allocated()
        if args.saver == "tms":
            live -= sum(paused_live.values())
        row = {"cycle": cycle, "phase": phase, "device_mib": (used(torch) - context) / MiB,
               "live_unpaused_mib": live / MiB, "reserved_mib": torch.cuda.memory_reserved() / MiB}
        if args.saver == "xsalloc":
            import xsalloc.elastic
            row["paused_mib"] = {t: xsalloc.elastic.paused_bytes(0, t) / MiB for t in TAGS}
        rec["phases"].append(row)

    with saver.region("trainer", backup=True):
        model, opt = build_trainer(torch)
    gen = Generator(torch, saver)
    gen.capture(saver, torch.cuda.graph_pool_handle())
    rng, token_hash = random.Random(7), hashlib.sha256()

    def pause_generator(cycle):
        times = {"pause_kv_s": saver.timed("pause", "kv_cache"), "pause_graph_s": saver.timed("pause", "graph")}
        if saver.can_pause("kv_cache"):
            more = [(saver.timed("resume", "kv_cache"), saver.timed("pause", "kv_cache")) for _ in range(args.kv_repeats)]
            times.update(resume_kv_more_s=[r for r, _ in more], pause_kv_more_s=[p for _, p in more])
        if saver.can_pause("kv_cache"):
            paused_live["kv_cache"] = gen.kv_bytes
        torch.cuda.empty_cache()
        measure(cycle, "generator_paused")
        return times

    pause_generator(0)
    for cycle in range(1, args.cycles + 1):
        t = {"cycle": cycle, "resume_trainer_s": saver.timed("resume", "trainer")}
        paused_live.pop("trainer", None)
        with saver.region("trainer", backup=True):
            rec["losses"] += train_steps(torch, model, opt, rng, args.train_steps)
        measure(cycle, "train")
        state = list(model.parameters()) + [v for s in opt.state.values() for v in s.values()
                                            if torch.is_tensor(v) and v.is_cuda]
        backup_bytes = sum(v.nbytes for v in state)
        if cycle == 1:
            rec["pinned_copy_gib_s"] = pinned_copy_rate(torch, state)
        t["pause_trainer_s"] = saver.timed("pause", "trainer")
        t["backup_copy_gib_s"] = saver.copy_rate()
        if saver.can_pause("trainer"):
            paused_live["trainer"] = backup_bytes
        torch.cuda.empty_cache()
        measure(cycle, "trainer_paused")
        t.update(resume_kv_s=saver.timed("resume", "kv_cache"), resume_graph_s=saver.timed("resume", "graph"))
        paused_live.pop("kv_cache", None)
        g = torch.Generator(device="cuda").manual_seed(1000 + cycle)
        prompts = torch.randint(0, 32000, (16, 128), device="cuda", generator=g)
        token_hash.update(gen.generate(prompts, args.decode_steps).cpu().numpy().tobytes())
        measure(cycle, "generate")
        t.update(pause_generator(cycle), backup_bytes=backup_bytes, steps=dict(saver.steps))
        rec["times"].append(t)
    rec["tokens_sha256"] = token_hash.hexdigest()
    line = json.dumps(rec)
    print("RESULT " + line, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()
