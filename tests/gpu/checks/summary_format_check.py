#!/usr/bin/env python3
"""Checks xsa_memory_summary's golden text against PyTorch's own
torch.cuda.memory_summary, fed the same statistics (needs torch, no GPU).

    python3 tests/gpu/checks/summary_format_check.py tests/api/testdata/summary_stats.txt tests/api/testdata/summary_synthetic.txt

memory_stats is replaced by the statistics of the first file, then PyTorch's
summary (full and abbreviated) must equal the golden text (the second file,
and that file without its "from large/small pool" rows), title aside.
Exit status 0 when both match, 1 otherwise.
"""
import sys

import torch
import torch.cuda.memory as tcm


def main(stats_path, golden_path):
    stats = {}
    with open(stats_path) as f:
        for line in f:
            if line.strip() and not line.startswith("#"):
                key, value = line.split()
                stats[key] = int(value)
    with open(golden_path) as f:
        golden = f.read().replace("xsalloc CUDA memory summary", "PyTorch CUDA memory summary")
    abbreviated = "".join(l for l in golden.splitlines(keepends=True) if "from large pool" not in l and "from small pool" not in l)
    tcm.memory_stats = lambda device=None: stats
    failed = False
    for abbrev, want in ((False, golden), (True, abbreviated)):
        got = torch.cuda.memory_summary(device=0, abbreviated=abbrev)
        if got != want:
            failed = True
            print(f"summary_format_check: abbreviated={abbrev}: PyTorch prints\n{got}\nthe golden text is\n{want}")
    print("summary_format_check:", "FAIL" if failed else "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
