#!/usr/bin/env bash
# colocate.sh: issue 32's colocation benchmark (benchmarks/gpu/colocate.py),
# every variant side by side in one call on one GPU, then one table and the
# issue's PASS/FAIL lines (benchmarks/gpu/colocate_report.py).
#
#   bash benchmarks/gpu/colocate.sh [colocate.py options, e.g. --cycles 5]
#     PYTHON=...    the python3 with torch and transformers (default /opt/torch/.venv/bin/python3, else python3)
#     TMS_SRC=...   torch_memory_saver's source (default .carry/torch_memory_saver)
#     OUT=DIR       keep the results and logs there (default: a new /tmp/xsa-colocate.XXXXXX)
#     BUDGET_S=360  no run starts after this many seconds (each may take RUN_S=120 at most)
#
# Builds xsalloc with pip into a venv over torch's Python (as
# tests/gpu/run_pip_check.sh) and torch_memory_saver from TMS_SRC into the
# same venv (TMS_CUDA_MAJOR=13 pip install --no-build-isolation, about
# 15 s), compiles the torch adapter once, then runs, one process each:
#   none               the program never paused, torch's allocator (the reference)
#   tms                torch_memory_saver, torch hook mode (it refuses expandable segments)
#   uninterrupted-xsalloc  the program never paused, on xsalloc (the xsalloc runs' reference: the
#                      same allocator, the same cuBLAS choices; bf16 decoding of a random model
#                      flips a token on any rounding difference)
#   xsalloc            python -m xsalloc.run, XSALLOC_CONF=expandable_segments:True
#   xsalloc-norecycle  the same with page_recycling:False
# About 4-5 minutes on an H100 or H200, the builds included.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
cd "$ROOT"
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3; else PY=python3; fi
TMS=${TMS_SRC:-$ROOT/.carry/torch_memory_saver}
OUT=${OUT:-$(mktemp -d /tmp/xsa-colocate.XXXXXX)}
BUDGET_S=${BUDGET_S:-360}
RUN_S=${RUN_S:-120}
mkdir -p "$OUT"
start=$SECONDS
log() { echo "colocate.sh [$((SECONDS - start))s]: $*"; }
trap 'rm -rf "$ROOT/build" "$ROOT/python/xsalloc.egg-info"' EXIT

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
venv=$OUT/venv
"$PY" -m venv --system-site-packages "$venv" || exit 1
"$PY" -c 'import site; print("\n".join(site.getsitepackages()))' \
    > "$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/torch_python.pth"
log "pip install --no-build-isolation . (xsalloc)"
"$venv/bin/python" -m pip install -q --no-index --no-build-isolation . > "$OUT/pip-xsalloc.log" 2>&1 ||
    { tail -20 "$OUT/pip-xsalloc.log"; echo "FAIL xsalloc did not build"; exit 1; }
if [ -f "$TMS/setup.py" ]; then
    log "TMS_CUDA_MAJOR=13 pip install --no-build-isolation $TMS"
    rm -rf "$OUT/tms-src" && cp -r "$TMS" "$OUT/tms-src"
    (cd "$OUT/tms-src" && TMS_CUDA_MAJOR=13 "$venv/bin/python" -m pip install -q --no-index --no-build-isolation . \
        > "$OUT/pip-tms.log" 2>&1) || { tail -20 "$OUT/pip-tms.log"; echo "torch_memory_saver did not build: no tms run"; }
else
    echo "no torch_memory_saver source at $TMS (copy ../shared/peers/torch_memory_saver to .carry/torch_memory_saver and carry it): no tms run"
fi
cd "$OUT"  # away from the source tree: the installed xsalloc must be the one found
echo 'import torch, xsalloc.torch; assert xsalloc.torch.adapter_in_use(); torch.zeros(1, device="cuda")' > warm.py
log "compiling the torch adapter (once)"
"$venv/bin/python" -m xsalloc.run warm.py || echo "the adapter did not build: the xsalloc runs will fail"

prog=$ROOT/benchmarks/gpu/colocate.py
# run LABEL VAR=VALUE... -- COMMAND...
run() {
    local label=$1; shift
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    if ((SECONDS - start + RUN_S > BUDGET_S)); then
        echo "FAIL $label: not started, the $BUDGET_S s budget would be exceeded"; return
    fi
    local t0=$SECONDS
    if env -u XSALLOC_CONF -u PYTORCH_CUDA_ALLOC_CONF -u PYTORCH_ALLOC_CONF "${envs[@]}" timeout "$RUN_S" \
            "$@" --label "$label" --out "$OUT/$label.json" > "$OUT/$label.log" 2>&1; then
        log "$label done in $((SECONDS - t0)) s"
    else
        local rc=$?
        if grep -q '^RESULT ' "$OUT/$label.log"; then
            # torch_memory_saver's torch mode crashes at exit (a free outside its region: "only support
            # interesting region", seen on the H200) after the program printed its result.
            log "$label done in $((SECONDS - t0)) s, then exited with status $rc: its result is kept"
        else
            echo "FAIL $label (exit $rc, $((SECONDS - t0)) s); the log's tail:"; tail -n 20 "$OUT/$label.log" | sed 's/^/    /'
            rm -f "$OUT/$label.json"
        fi
    fi
}
run none -- "$venv/bin/python" "$prog" --saver none "$@"
if "$venv/bin/python" -c 'import torch_memory_saver' 2> /dev/null; then
    run tms -- "$venv/bin/python" "$prog" --saver tms "$@"
fi
run uninterrupted-xsalloc XSALLOC_CONF=expandable_segments:True -- "$venv/bin/python" -m xsalloc.run "$prog" --saver none "$@"
run xsalloc XSALLOC_CONF=expandable_segments:True -- "$venv/bin/python" -m xsalloc.run "$prog" --saver xsalloc "$@"
run xsalloc-norecycle XSALLOC_CONF=expandable_segments:True,page_recycling:False -- \
    "$venv/bin/python" -m xsalloc.run "$prog" --saver xsalloc "$@"
log "results in $OUT"
"$venv/bin/python" "$ROOT/benchmarks/gpu/colocate_report.py" "$OUT"/*.json
