#!/usr/bin/env bash
# hotpath_ab.sh: the hot path of several builds of xsalloc, timed in
# interleaved processes on one machine: before/after comparisons.
#
#   benchmarks/gpu/hotpath_ab.sh NAME=SRC_DIR[:GCC_FLAGS] ...
#       ROUNDS=7 OPS=200000 DRIVER=cuda OUT=dir (all optional)
#
# e.g. hotpath_ab.sh before=/tmp/old after=. lto=.:-flto=auto
# The GPU host's timings differ up to 2x between processes and between
# machines, more than most changes, so each round runs every variant once
# per mode in turn, and the table gives each variant's median and range
# over the rounds, the median over the processes that ran at full clock
# (a measured core clock of at least 80% of the run's highest; their
# count in brackets), and the median in core cycles (ns x the clock the
# process measured): the clock is what differs most between processes.
# Results: one JSON line per process in $OUT/ab.jsonl.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
OUT=${OUT:-$(mktemp -d /tmp/xsa-ab.XXXXXX)}
ROUNDS=${ROUNDS:-7}
OPS=${OPS:-200000}
DRIVER=${DRIVER:-cuda}
MODES=("classic expandable_segments:False" "expandable expandable_segments:True,page_recycling:False")
[ $# -ge 1 ] || { echo "usage: hotpath_ab.sh NAME=SRC_DIR[:GCC_FLAGS] ..." >&2; exit 2; }
mkdir -p "$OUT"
: >"$OUT/ab.jsonl"

names=()
for spec in "$@"; do
    name=${spec%%=*}
    rest=${spec#*=}
    dir=${rest%%:*}
    flags=()
    [[ "$rest" == *:* ]] && read -r -a flags <<<"${rest#*:}"
    echo "hotpath_ab: building $name from $dir ${flags[*]:-}" >&2
    "$ROOT/benchmarks/gpu/build.sh" "$dir" "$OUT/$name" "${flags[@]}"
    names+=("$name")
done

for ((r = 1; r <= ROUNDS; r++)); do
    echo "hotpath_ab: round $r/$ROUNDS" >&2
    for m in "${MODES[@]}"; do
        read -r mode conf <<<"$m"
        for name in "${names[@]}"; do
            "$OUT/$name/hotpath" --driver "$DRIVER" --conf "$conf" --ops "$OPS" | tail -n 1 |
                sed "s/^{/{\"variant\": \"$name\", \"mode\": \"$mode\", \"round\": $r, /" >>"$OUT/ab.jsonl"
        done
    done
done

python3 - "$OUT/ab.jsonl" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
keys = []
for r in rows:
    k = (r["mode"], r["variant"])
    if k not in keys: keys.append(k)
top = max(r.get("core_ghz", 0) for r in rows)
print("| mode | variant | pair ns (median) | range | at full clock | cycles | window op ns (median) | range | at full clock | cycles | core GHz | processes |")
print("|---|---|---:|---|---:|---:|---:|---|---:|---:|---|---:|")
for mode, variant in sorted(keys, key=lambda k: (k[0], keys.index(k))):
    sel = [r for r in rows if r["mode"] == mode and r["variant"] == variant]
    full = [r for r in sel if r.get("core_ghz", 0) >= 0.8 * top] or sel
    pair = [r["pair_ns"] for r in sel]; win = [r["slots_ns"] for r in sel]
    ghz = [r.get("core_ghz", 0) for r in sel]
    pc = statistics.median(r["pair_ns"] * r.get("core_ghz", 0) for r in sel)
    wc = statistics.median(r["slots_ns"] * r.get("core_ghz", 0) for r in sel)
    pf = statistics.median(r["pair_ns"] for r in full); wf = statistics.median(r["slots_ns"] for r in full)
    print(f"| {mode} | {variant} | {statistics.median(pair):.0f} | {min(pair):.0f}-{max(pair):.0f} | {pf:.0f} ({len(full)}) | {pc:.0f} | "
          f"{statistics.median(win):.0f} | {min(win):.0f}-{max(win):.0f} | {wf:.0f} | {wc:.0f} | {min(ghz):.2f}-{max(ghz):.2f} | {len(sel)} |")
PY
