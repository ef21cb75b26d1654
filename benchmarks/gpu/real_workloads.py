"""The real PyTorch workloads of real_bench.py: models built in code, random data, fixed seeds.

Design: each workload is a function taking `steps` that builds its model
directly on the GPU (under torch.device("cuda"), so no large model is
initialised on the CPU and nothing is downloaded), runs `steps` steps
through timed_steps and returns {"wall_s": seconds of the steps,
"steady_s": seconds of the steps after the first quarter, "impl": what ran}. Shapes are drawn per step from a seeded random.Random and
weights and data from torch's seeded generator, so every allocator sees
the same sequence of requests. Needs torch with CUDA; torchvision for
resnet; transformers for llama_gen, and for gpt2 when it is there (else a
plain-torch GPT-2 of the same shape).
"""
import random
import sys
import time
import types

import torch
import torch.nn as nn
import torch.nn.functional as F

GPT2_VOCAB = 50257


# Called with "start", "steady" and "end" right after timed_steps' synchronizes
# (real_bench.py reads xsalloc's driver calls there), or None.
on_phase = None
# When set (real_bench.py --profile), timed_steps runs the first quarter under
# torch.profiler and keeps (the profiler, the part's seconds) here.
profile_first = False
first_profile = None


def phase(name):
    if on_phase:
        on_phase(name)


def timed_steps(steps, step):
    """{"wall_s": seconds for step(0..steps-1), "steady_s": seconds for the
    steps after the first quarter}, the queued GPU work included. The first
    quarter is where every allocator gets its memory from the driver; the
    steady part is what a long run is made of. One synchronize at the
    boundary, so the GPU's lag behind the CPU is kept inside each part."""
    global first_profile
    warm = steps // 4
    torch.cuda.synchronize()
    phase("start")
    prof = None
    if profile_first:
        prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                  torch.profiler.ProfilerActivity.CUDA])
        prof.__enter__()
    t0 = time.perf_counter()
    t_warm = t0
    for i in range(steps):
        if i == warm:
            torch.cuda.synchronize()
            t_warm = time.perf_counter()
            if prof:
                prof.__exit__(None, None, None)
                first_profile = (prof, t_warm - t0)
            phase("steady")
        step(i)
    torch.cuda.synchronize()
    t1 = time.perf_counter()
    phase("end")
    return {"wall_s": t1 - t0, "steady_s": t1 - t_warm}


class TorchGPT2(nn.Module):
    """GPT-2 small in plain torch: token and position embeddings, 12 pre-norm
    causal layers (768 wide, 12 heads, GELU MLP of 3072, dropout 0.1), final
    LayerNorm, head tied to the embedding. forward(input_ids, labels)
    returns an object with .loss, as transformers' GPT2LMHeadModel does."""

    def __init__(self, vocab=GPT2_VOCAB, width=768, layers=12, heads=12, positions=1024):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(positions, width)
        layer = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.1, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.ln_f = nn.LayerNorm(width)

    def forward(self, input_ids, labels):
        n = input_ids.shape[1]
        x = self.wte(input_ids) + self.wpe(torch.arange(n, device=input_ids.device))
        mask = torch.full((n, n), float("-inf"), device=input_ids.device).triu(1)
        x = self.ln_f(self.blocks(x, mask=mask, is_causal=True))
        logits = x @ self.wte.weight.t()
        loss = F.cross_entropy(logits[:, :-1].float().reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        return types.SimpleNamespace(loss=loss)


def gpt2_model():
    """(model on the GPU, impl): transformers' GPT2LMHeadModel (GPT-2 small, no
    weights downloaded), or TorchGPT2 when transformers cannot be imported."""
    try:
        from transformers import GPT2Config, GPT2LMHeadModel
    except Exception as e:  # not installed, or incompatible with this torch
        print(f"real_workloads: transformers unavailable ({type(e).__name__}: {e}); "
              "gpt2 runs the plain-torch GPT-2", file=sys.stderr)
        make, impl = TorchGPT2, "plain-torch GPT-2 (transformers missing)"
    else:
        config = GPT2Config(vocab_size=GPT2_VOCAB, n_positions=1024, n_embd=768, n_layer=12, n_head=12)
        make, impl = (lambda: GPT2LMHeadModel(config)), "transformers GPT2LMHeadModel"
    with torch.device("cuda"):
        return make(), impl


def gpt2(steps=24):
    """GPT-2 small training, AdamW, bf16 autocast, batch 4-16 x length 64-1024 per step."""
    torch.manual_seed(0)
    rng = random.Random(1)
    model, impl = gpt2_model()
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(_):
        batch, length = rng.randint(4, 16), rng.randint(64, 1024)
        ids = torch.randint(0, GPT2_VOCAB, (batch, length), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss  # the shifted LM loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return {**timed_steps(steps, step), "impl": impl}


def resnet(steps=24):
    """torchvision ResNet-50 training, SGD, bf16 autocast, channels-last,
    batch 8-64 x image side 160-256 (multiples of 32) per step."""
    import torchvision

    torch.manual_seed(0)
    rng = random.Random(2)
    with torch.device("cuda"):
        model = torchvision.models.resnet50(weights=None).to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(_):
        batch, side = rng.randint(8, 64), 32 * rng.randint(5, 8)
        x = torch.randn(batch, 3, side, side, device="cuda").to(memory_format=torch.channels_last)
        y = torch.randint(0, 1000, (batch,), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return {**timed_steps(steps, step), "impl": "torchvision resnet50"}


def llama_gen(steps=5):
    """Greedy generation with the KV cache of a Llama built from
    transformers.LlamaConfig, bf16 weights, the shape of record_traces.py's
    llm_decode (12 layers, 2048 wide, 16 heads, vocab 32000; MLP 5632): per
    step one request of batch 1-8, prompt 64-1024, 16-48 new tokens
    (transformers' decode loop costs about 75 ms a token on an H100: more
    tokens would take minutes without changing the memory pattern). The
    loop is generate()'s: the decoder with its cache (DynamicCache, grown by
    concatenation each token), the head on the last position only."""
    return generation(steps, seed=3, batches=(1, 8), prompts=(64, 1024), new_tokens=(16, 48))


def llama_requests(steps=24, seed=7):
    """llama_gen's model and loop over a wider mix of requests, for traces
    (real_bench.py record): batch 1-16, prompt 16-1024, 16-128 new tokens."""
    return generation(steps, seed=seed, batches=(1, 16), prompts=(16, 1024), new_tokens=(16, 128))


def generation(steps, seed, batches, prompts, new_tokens):
    """llama_gen's loop: one request a step, its batch, prompt length and new
    tokens drawn from the (low, high) ranges by random.Random(seed)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    rng = random.Random(seed)
    config = LlamaConfig(vocab_size=32000, hidden_size=2048, intermediate_size=5632, num_hidden_layers=12,
                         num_attention_heads=16, num_key_value_heads=16, max_position_embeddings=2048)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)  # parameters are created in bf16, as from_config(dtype=bf16) does
    try:
        with torch.device("cuda"):
            model = LlamaForCausalLM(config)
    finally:
        torch.set_default_dtype(default_dtype)
    model.eval()

    def step(_):
        batch, prompt, new = rng.randint(*batches), rng.randint(*prompts), rng.randint(*new_tokens)
        with torch.inference_mode():
            ids = torch.randint(0, config.vocab_size, (batch, prompt), device="cuda")
            cache = None
            for _token in range(new):
                out = model.model(input_ids=ids, past_key_values=cache, use_cache=True)
                cache = out.past_key_values
                ids = model.lm_head(out.last_hidden_state[:, -1:]).argmax(-1)

    return {**timed_steps(steps, step), "impl": "transformers LlamaForCausalLM"}


def moe(steps=24):
    """Mixtral-style mixture-of-experts training built from
    transformers.MixtralConfig (8 layers, 1024 wide, 8 experts, 2 routed a
    token, vocab 32000), AdamW, bf16 autocast, batch 2-8 x length 128-1024
    per step: the experts' token counts change every step, so do their
    activations' shapes."""
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    rng = random.Random(5)
    config = MixtralConfig(vocab_size=32000, hidden_size=1024, intermediate_size=2048, num_hidden_layers=8,
                           num_attention_heads=16, num_key_value_heads=8, num_local_experts=8,
                           num_experts_per_tok=2, max_position_embeddings=2048)
    with torch.device("cuda"):
        model = MixtralForCausalLM(config)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def step(_):
        batch, length = rng.randint(2, 8), rng.randint(128, 1024)
        ids = torch.randint(0, config.vocab_size, (batch, length), device="cuda")
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return {**timed_steps(steps, step), "impl": "transformers MixtralForCausalLM"}


def convnet(classes=1000):
    """Eight 3x3 conv + BatchNorm + ReLU layers (64-512 channels), pooled, linear."""
    layers, prev = [], 3
    for width in (64, 128, 256, 512):
        layers += [nn.Conv2d(prev, width, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                   nn.Conv2d(width, width, 3, padding=1, bias=False), nn.BatchNorm2d(width), nn.ReLU()]
        prev = width
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(prev, classes))


def multistream(steps=24):
    """Conv net training fed as a pinned-memory prefetching data loader feeds
    it: batch k+1 (batch 32-256, side 96/128/160) is copied in and normalised
    on a side stream, where its memory is allocated, while batch k trains;
    the main stream waits for the side stream and record_stream()s the
    batch before using it. SGD, bf16 autocast, channels-last."""
    torch.manual_seed(0)
    rng = random.Random(4)
    sides, max_batch = (96, 128, 160), 256
    with torch.device("cuda"):
        model = convnet().to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    images = {s: torch.rand(max_batch, 3, s, s).pin_memory() for s in sides}
    labels = torch.randint(0, 1000, (max_batch,)).pin_memory()
    main, side = torch.cuda.current_stream(), torch.cuda.Stream()

    def load():
        batch, s = rng.randint(32, max_batch), rng.choice(sides)
        with torch.cuda.stream(side):
            x = images[s][:batch].to("cuda", non_blocking=True)
            x = ((x - 0.5) * 2.0).contiguous(memory_format=torch.channels_last)
            y = labels[:batch].to("cuda", non_blocking=True)
        return x, y

    ready = [load()]

    def step(_):
        main.wait_stream(side)
        x, y = ready.pop()
        x.record_stream(main)
        y.record_stream(main)
        ready.append(load())  # the next batch is copied in while this one trains
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return {**timed_steps(steps, step), "impl": "conv net, side-stream prefetch"}
