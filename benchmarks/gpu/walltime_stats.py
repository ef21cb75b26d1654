"""Paired ratios of walltime.py's rounds: how far a gap between two allocators stands out of the runs' noise.

Design: the runs of one round ran back to back (or side by side), so one
round's ratio of two allocators' median steps cancels what the host did
to both; what is left swings from round to round (10-20% on the GPU
hosts). A gap is summed up as the geometric mean of the rounds' ratios
(ratios compose by product, so 1.1 and 1/1.1 mean no gap), with a 95%
percentile bootstrap interval: the rounds drawn again with replacement,
DRAWS times, from a fixed seed so a table reads the same each time it is
printed. Over several workloads the draw is stratified: each workload's
rounds are drawn among themselves, so each weighs by its rounds, as in
the point estimate. The interval assumes rounds independent; the same
figure for two allocators that xsalloc is not (torch expandable against
native) is printed beside it, so a reader sees how wide honest noise is.
"""

import math
import random

DRAWS = 4000
SEED = 20261129


def paired(groups, draws=DRAWS, seed=SEED):
    """groups: lists of per-round ratios (one list a workload). Returns (geometric mean over all ratios, the
    interval's low, its high, how many ratios are above 1, how many there are)."""
    groups = [[math.log(r) for r in g] for g in groups if g]
    n = sum(len(g) for g in groups)
    if not n:
        raise ValueError("paired: no ratios")
    rng = random.Random(seed)
    means = sorted(sum(sum(rng.choices(g, k=len(g))) for g in groups) / n for _ in range(draws))
    low, high = means[int(0.025 * draws)], means[int(0.975 * draws) - 1]
    point = sum(sum(g) for g in groups) / n
    return math.exp(point), math.exp(low), math.exp(high), sum(x > 0 for g in groups for x in g), n


def cell(groups):
    """paired() as the tables print it: '1.054 [1.014-1.098] (7/8)'."""
    g, low, high, above, n = paired(groups)
    return f"{g:.3f} [{low:.3f}-{high:.3f}] ({above}/{n})"
