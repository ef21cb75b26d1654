#!/usr/bin/env bash
# compare.sh: xsalloc against PyTorch's allocators on a GPU machine, in one
# command, printing one table.
#
#   benchmarks/gpu/compare.sh     (from anywhere; OUT=DIR keeps the results, OPS=N hot-path ops)
#
# Needs gcc, g++, CUDA headers in /usr/local/cuda/include, python3 with torch;
# no Bazel. Steps: build xsalloc's replay and hotpath binaries with gcc
# directly; replay every bundled single-stream trace through xsalloc (cuda
# driver: classic, expandable, recycling) and through PyTorch (native and
# expandable_segments, one process each, since PyTorch reads
# PYTORCH_CUDA_ALLOC_CONF once); time the hot path through xsalloc, PyTorch's
# C++ entry points and cudaMallocAsync; print the table (torch_bench.py
# table). Every result is one JSON line in $OUT/results.jsonl. Replays and
# hot paths are repeated (REPS, HOT_REPS) because the host's timings vary
# between processes. Takes about 5-6 minutes on an H100 (most of it torch
# imports and the extension build).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$(mktemp -d /tmp/xsa-compare.XXXXXX)}
BUILD="$OUT/build"
RES="$OUT/results.jsonl"
OPS=${OPS:-200000}
REPS=${REPS:-5}         # xsalloc replays per mode, interleaved: the time table takes the median
HOT_REPS=${HOT_REPS:-5} # hot-path processes per allocator, interleaved: the table takes the median
DRIVER=${DRIVER:-cuda} # DRIVER=sim: a dry run of xsalloc's side on a machine without a GPU
PY=${PYTHON:-python3}
BENCH="$ROOT/benchmarks/gpu/torch_bench.py"
mkdir -p "$BUILD"
: >"$RES"
start=$SECONDS

log() { echo "compare [$((SECONDS - start))s]: $*" >&2; }

MODES=(
    "classic expandable_segments:False"
    "expandable expandable_segments:True,page_recycling:False"
    "recycling expandable_segments:True,page_recycling:True"
)

build() {
    log "building xsalloc with gcc"
    "$ROOT/benchmarks/gpu/build.sh" "$ROOT" "$BUILD"
}

# Prefixes a JSON object line with the fields in $1 ('"a": 1, "b": 2').
tag() { sed "s/^{/{$1, /"; }

replay_xsalloc() {
    local trace=$1 mode conf line rep
    for ((rep = 1; rep <= REPS; rep++)); do
        for m in "${MODES[@]}"; do
            read -r mode conf <<<"$m"
            line=$("$BUILD/replay" --driver "$DRIVER" --conf "$conf" "$trace" | tail -n 1) || return 1
            echo "$line" | tag "\"kind\": \"replay\", \"tool\": \"xsalloc\", \"mode\": \"$mode\", \"rep\": $rep" >>"$RES"
        done
    done
}

replay_torch() {
    local trace=$1
    env -u PYTORCH_CUDA_ALLOC_CONF "$PY" "$BENCH" replay --mode native "$trace" >>"$RES" || failed=1
    PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "$PY" "$BENCH" replay --mode expandable "$trace" \
        >>"$RES" || failed=1
}

# Traces with more than one stream are for the simulated driver only.
multi_stream() { zcat "$1" | awk '$1 == "r" || ($1 == "a" && $4 != 0) { found = 1 } END { exit !found }'; }

replays() {
    for trace in "$ROOT"/benchmarks/traces/*.trace.gz; do
        if multi_stream "$trace"; then
            log "skipping $(basename "$trace") (multi-stream)"
            continue
        fi
        log "replaying $(basename "$trace") through xsalloc"
        replay_xsalloc "$trace" || failed=1
        log "replaying $(basename "$trace") through PyTorch"
        replay_torch "$trace"
    done
}

# Every hot-path process runs HOT_REPS times, allocators interleaved (pinned
# to core PIN_CORE when it is set): between processes the host's timings
# vary up to 2x, so the table takes each allocator's median. Pinning did not
# help on the H100 host (results/2026-11-23-h100-hotpath/), so it is off.
hotpaths() {
    local mode conf rep pin=()
    [ -n "${PIN_CORE:-}" ] && command -v taskset >/dev/null && pin=(taskset -c "$PIN_CORE")
    for ((rep = 1; rep <= HOT_REPS; rep++)); do
        for m in "${MODES[@]}"; do
            read -r mode conf <<<"$m"
            log "hot path: xsalloc $mode ($rep/$HOT_REPS)"
            "${pin[@]}" "$BUILD/hotpath" --driver "$DRIVER" --conf "$conf" --ops "$OPS" | tail -n 1 |
                tag "\"kind\": \"hotpath\", \"tool\": \"xsalloc\", \"mode\": \"$mode\", \"rep\": $rep" >>"$RES" || failed=1
        done
        log "hot path: PyTorch native and cudaMallocAsync ($rep/$HOT_REPS; the first builds the extension)"
        env -u PYTORCH_CUDA_ALLOC_CONF "${pin[@]}" "$PY" "$BENCH" hotpath --mode native --ops "$OPS" \
            --with-async --build-dir "$BUILD/ext" >>"$RES" || failed=1
        log "hot path: PyTorch expandable_segments ($rep/$HOT_REPS)"
        PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "${pin[@]}" "$PY" "$BENCH" hotpath \
            --mode expandable --ops "$OPS" --build-dir "$BUILD/ext" >>"$RES" || failed=1
    done
}

# A failed step is reported and the others still run: partial tables help.
failed=0
build
replays
hotpaths
"$PY" "$BENCH" table "$RES"
log "done; results in $RES"
exit $failed
