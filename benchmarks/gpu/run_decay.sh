#!/usr/bin/env bash
# run_decay.sh: issue 33's GPU measurements, each under a time limit, from
# the repository root of a GPU machine (no Bazel needed):
#
#   bash benchmarks/gpu/run_decay.sh bursty    [bursty.py options]      # ~3 min
#   bash benchmarks/gpu/run_decay.sh two_procs [two_procs.py options]   # ~3 min
#   bash benchmarks/gpu/run_decay.sh walltime  [walltime.py options]    # 390 s of runs + one child (180 s at most)
#   bash benchmarks/gpu/run_decay.sh alternate [walltime.py options]    # the same, walltime.py run --alternate
#
# Builds libxsalloc.so with setup.py (tests/gpu/build_lib.sh), then runs
# benchmarks/gpu/<script>.py. OUT=DIR keeps bursty's SVG and JSON and
# walltime's results there (default: a new /tmp/xsa-decay.XXXXXX).
# walltime writes $OUT/walltime_results.jsonl; WALLTIME_FROM=FILE (the
# file an earlier call returned, put in the working tree) is copied there
# first, so rounds add up over calls; without it, the tracked rounds of
# this machine's card, benchmarks/results/walltime_<card>.jsonl (h100,
# h200), if there are any (commit the returned file over it). alternate
# writes $OUT/walltime_alternate.jsonl (ALTERNATE_FROM=FILE as above; no
# tracked file). LIMIT=SECONDS caps the whole command
# (default 590: walltime's budget is 390 s and a child 180 s at most).
# PY: the python3 with torch (default /opt/torch/.venv/bin/python3, else
# python3).
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PY:-$( [ -x /opt/torch/.venv/bin/python3 ] && echo /opt/torch/.venv/bin/python3 || echo python3 )}
OUT=${OUT:-$(mktemp -d /tmp/xsa-decay.XXXXXX)}
LIMIT=${LIMIT:-590}
mkdir -p "$OUT"
what=${1:?usage: run_decay.sh bursty|two_procs|walltime|alternate [options]}
shift
. tests/gpu/build_lib.sh
export HF_HUB_OFFLINE=1
case "$what" in
bursty) exec timeout "$LIMIT" "$PY" benchmarks/gpu/bursty.py --out "$OUT" "$@" ;;
two_procs) exec timeout "$LIMIT" "$PY" benchmarks/gpu/two_procs.py "$@" ;;
walltime)
    card=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | grep -o 'H[0-9]*' | head -1 || true)
    tracked=benchmarks/results/walltime_$(echo "$card" | tr 'A-Z' 'a-z').jsonl
    if [ -z "${WALLTIME_FROM:-}" ] && [ -n "$card" ] && [ -f "$tracked" ]; then WALLTIME_FROM=$tracked; fi
    if [ -n "${WALLTIME_FROM:-}" ]; then
        echo "run_decay.sh: walltime goes on from $WALLTIME_FROM" >&2
        cp "$WALLTIME_FROM" "$OUT/walltime_results.jsonl"
    fi
    exec timeout "$LIMIT" "$PY" benchmarks/gpu/walltime.py run --results "$OUT/walltime_results.jsonl" \
        --budget-s 390 --timeout 180 "$@" ;;
alternate)
    if [ -n "${ALTERNATE_FROM:-}" ]; then cp "$ALTERNATE_FROM" "$OUT/walltime_alternate.jsonl"; fi
    exec timeout "$LIMIT" "$PY" benchmarks/gpu/walltime.py run --alternate --results "$OUT/walltime_alternate.jsonl" \
        --budget-s 390 --timeout 180 "$@" ;;
*) echo "run_decay.sh: $what: expected bursty, two_procs, walltime or alternate" >&2; exit 2 ;;
esac
