"""GPT-2 small (built from its config: no download) trained for 10 steps
on random tokens, an unchanged script: prints one PROBE line with the last
loss, whether xsalloc's adapter is torch's allocator, torch's backend name
and the peaks (tests/gpu/run_first_contact.sh, case gpt2)."""
import json
import math
import sys

import torch
from transformers import GPT2Config, GPT2LMHeadModel

torch.manual_seed(0)
cfg = GPT2Config(n_layer=12, n_embd=768, n_head=12, n_positions=512)
model = GPT2LMHeadModel(cfg).cuda()
opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
for step in range(10):
    ids = torch.randint(0, cfg.vocab_size, (8, 256), device="cuda")
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
xs = sys.modules.get("xsalloc.torch")
print("PROBE " + json.dumps({
    "loss": round(loss.item(), 4), "finite": math.isfinite(loss.item()),
    "adapter_in_use": bool(xs and xs.adapter_in_use()), "backend": torch.cuda.get_allocator_backend(),
    "peak_allocated": torch.cuda.max_memory_allocated(), "peak_reserved": torch.cuda.max_memory_reserved()}),
    flush=True)
