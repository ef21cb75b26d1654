#!/usr/bin/env bash
# real_bench.sh: real PyTorch workloads (GPT-2 and ResNet-50 training, Llama
# generation, a side-stream data loader) under PyTorch's allocators and
# xsalloc, interleaved, in one table, on a GPU machine without Bazel.
#
#   benchmarks/gpu/real_bench.sh [real_bench.py options]     (from anywhere)
#     OUT=DIR       keep everything there (default: a new /tmp/xsa-real.XXXXXX)
#     RECORD=1      then record each workload's allocation trace into $OUT/traces/
#     RECORD=only   only record the traces
#     PYTHON=...    the python3 with torch (default python3)
#
# Builds libxsalloc.so with setup.py (as `pip install .` does) into
# $OUT/xsalloc/, then runs benchmarks/gpu/real_bench.py, which writes every result as a
# JSON line to $OUT/real_results.jsonl and the table to $OUT/real_table.txt
# (real_bench.py table FILE reprints it). The default run (3 runs x 4
# workloads x 4 allocators, one process each) stops launching after 420 s
# (--budget-s) and takes about 7-8 minutes on an H100; recording adds about
# 2 minutes. Needs gcc, the CUDA headers and python3 with torch,
# torchvision, transformers and setuptools.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-$(mktemp -d /tmp/xsa-real.XXXXXX)}
PY=${PYTHON:-python3}
RECORD=${RECORD:-0}
mkdir -p "$OUT"
start=$SECONDS
log() { echo "real_bench.sh [$((SECONDS - start))s]: $*" >&2; }

case "$RECORD" in 0 | 1 | only) ;; *) echo "real_bench.sh: RECORD=$RECORD: expected 0, 1 or only" >&2; exit 2 ;; esac
"$PY" -c 'import torch; assert torch.cuda.is_available(), "torch sees no GPU"' || {
    echo "real_bench.sh: $PY cannot import torch with a usable GPU (see above)" >&2
    exit 1
}

status=0
if [ "$RECORD" != only ]; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
    log "building $OUT/xsalloc/libxsalloc.so with setup.py"
    "$PY" setup.py -q build_ext --build-lib "$OUT" --build-temp "$OUT/build"
    export XSALLOC_LIBRARY="$OUT/xsalloc/libxsalloc.so" PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}"
    log "running benchmarks/gpu/real_bench.py --out $OUT $*"
    "$PY" benchmarks/gpu/real_bench.py --out "$OUT" "$@" || status=$?
fi

if [ "$RECORD" != 0 ]; then
    mkdir -p "$OUT/traces"
    for w in gpt2 resnet llama_gen multistream; do
        log "recording $w under PyTorch's native allocator"
        "$PY" benchmarks/gpu/real_bench.py record --workload "$w" --out "$OUT/traces/$w.trace.gz" || status=1
    done
fi
log "done (exit $status); results in $OUT"
exit $status
