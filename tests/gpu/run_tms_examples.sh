#!/usr/bin/env bash
# On a GPU machine: torch_memory_saver's own examples, unchanged, with
# torch_memory_saver resolved to xsalloc.memory_saver (issue 32's "Done
# means"), then tests/gpu/checks/memory_saver_check.py (xsalloc's own GPU
# cases: pause under a running kernel, resume OOM, vLLM sleep, ...).
#
#   bash tests/gpu/run_tms_examples.sh
#     PYTHON=...   the python3 with torch (default /opt/torch/.venv/bin/python3, else python3)
#     TMS_SRC=...  torch_memory_saver's source (default .carry/torch_memory_saver: the lead
#                  copies ../shared/peers/torch_memory_saver there and carries it)
#     CONFS="A B"  XSALLOC_CONF values, one pass each (default: expandable segments on,
#                  then the same with page recycling off)
#     ONLY=TEXT    only the examples whose module.function holds TEXT (e.g. multi_device on a
#                  2-GPU machine), and no memory_saver_check.py
#
# Builds xsalloc with pip into a venv over torch's Python (as
# run_pip_check.sh), builds the torch adapter once, and makes a shim package
# torch_memory_saver in a temporary directory: its __init__ exports
# xsalloc.memory_saver, its testing_utils.py and utils.py are
# torch_memory_saver's own (copied from TMS_SRC, never committed here).
# Each example's function then runs in a process of its own under
# `python -m xsalloc.run` (tests/gpu/checks/tms_example.py), as
# torch_memory_saver's test_examples.py runs each in a spawned process:
# PASS or FAIL per example, hook mode and settings, the log's tail on a
# FAIL. The required ones (simple, cuda_graph, cpu_backup run and run_rss,
# disk_backup, multi_device_torch_mode) run in every pass; the extra ones
# (cpu_backup's environment variants, multi-device mmap restore) in the
# first. multi_device_* are skipped, saying so, on one GPU. About 5 minutes
# on an H100 (the build and the adapter's first compile take 1-2 of them).
set -euo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
if [ -n "${PYTHON:-}" ]; then PY=$PYTHON; elif [ -x /opt/torch/.venv/bin/python3 ]; then PY=/opt/torch/.venv/bin/python3; else PY=python3; fi
TMS=${TMS_SRC:-$ROOT/.carry/torch_memory_saver}
CONFS=${CONFS:-"expandable_segments:True expandable_segments:True,page_recycling:False"}
[ -d "$TMS/test/examples" ] && [ -f "$TMS/torch_memory_saver/testing_utils.py" ] || {
    echo "run_tms_examples.sh: no torch_memory_saver source at $TMS (copy ../shared/peers/torch_memory_saver" \
         "to .carry/torch_memory_saver and carry it, or set TMS_SRC)" >&2
    exit 2
}
start=$SECONDS
log() { echo "run_tms_examples.sh [$((SECONDS - start))s]: $*"; }
work=$(mktemp -d /tmp/xsa-tms.XXXXXX)
trap 'rm -rf "$work" "$ROOT/build" "$ROOT/python/xsalloc.egg-info"' EXIT

venv=$work/venv
"$PY" -m venv --system-site-packages "$venv"
"$PY" -c 'import site; print("\n".join(site.getsitepackages()))' \
    > "$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/torch_python.pth"
log "pip install --no-build-isolation . into $venv"
"$venv/bin/python" -m pip install -q --no-index --no-build-isolation . 2>&1 | tail -5
shim=$work/shim/torch_memory_saver
mkdir -p "$shim"
cat > "$shim/__init__.py" <<'EOF'
"""torch_memory_saver resolved to xsalloc.memory_saver (tests/gpu/run_tms_examples.sh's shim)."""
from xsalloc.memory_saver import TorchMemorySaver, configure_subprocess, torch_memory_saver  # noqa: F401
EOF
cp "$TMS/torch_memory_saver/testing_utils.py" "$TMS/torch_memory_saver/utils.py" "$shim/"
cp -r "$TMS/test/examples" "$work/examples"
export PYTHONPATH=$work/shim

cd "$work"  # away from the source tree: the installed package must be the one found
log "building the torch adapter (once; torch caches it)"
cat > "$work/warm.py" <<'EOF'
import torch, xsalloc.torch
assert xsalloc.torch.adapter_in_use(), "no adapter"
torch.zeros(1, device="cuda")
print("adapter ready;", torch.cuda.get_device_name(0), "x", torch.cuda.device_count(), "; torch", torch.__version__)
try:
    torch.cuda.device_memory_used(0)
except Exception as e:
    print("NOTE: torch.cuda.device_memory_used fails (the examples measure with it):", e)
EOF
"$venv/bin/python" -m xsalloc.run "$work/warm.py"
gpus=$("$venv/bin/python" -c 'import torch; print(torch.cuda.device_count())')
# disable() relies on nested use_mem_pool routing to the innermost pool: what torch's own allocator does here.
"$venv/bin/python" - <<'EOF' || true
import torch
outer, inner = torch.cuda.MemPool(), torch.cuda.MemPool()
with torch.cuda.use_mem_pool(outer), torch.cuda.use_mem_pool(inner):
    t = torch.empty(1 << 20, device="cuda")
print("INFO torch's own allocator routes nested use_mem_pool to the", "inner" if inner.snapshot() else "outer", "pool")
EOF

pass=0; fail=0; skip=0
# run LABEL CONF MODULE FUNCTION HOOK_MODE [VAR=VALUE...]
run() {
    local label=$1 conf=$2 module=$3 function=$4 mode=$5; shift 5
    local name="$module.$function($mode)${*:+ $*} [$label]" out="$work/log.$((pass + fail + skip))"
    [[ -z ${ONLY:-} || "$module.$function" == *"$ONLY"* ]] || return 0
    if [[ $module == multi_device* || $function == *multi_device* ]] && [ "$gpus" -lt 2 ]; then
        echo "SKIP $name: needs 2 GPUs, this machine has $gpus"; skip=$((skip + 1)); return
    fi
    local t0=$SECONDS
    if env XSALLOC_CONF="$conf" "$@" timeout 300 "$venv/bin/python" -m xsalloc.run \
            "$ROOT/tests/gpu/checks/tms_example.py" "$work/examples" "$module" "$function" "$mode" > "$out" 2>&1 &&
            grep -q "^TMS-EXAMPLE-OK" "$out"; then
        echo "PASS $name ($((SECONDS - t0))s)"; pass=$((pass + 1))
    else
        echo "FAIL $name ($((SECONDS - t0))s); the log's tail:"; tail -n 25 "$out" | sed 's/^/    /'; fail=$((fail + 1))
    fi
}

first=1
for conf in $CONFS; do
    label="XSALLOC_CONF=$conf"
    log "pass with $label"
    for mode in preload torch; do
        run "$label" "$conf" simple run $mode
        run "$label" "$conf" cuda_graph run $mode
        run "$label" "$conf" cpu_backup run $mode
        run "$label" "$conf" disk_backup run $mode
    done
    run "$label" "$conf" cpu_backup run_rss torch
    run "$label" "$conf" multi_device_torch_mode run torch
    if [ $first = 1 ]; then
        for mode in preload torch; do
            run "$label extra" "$conf" cpu_backup run_retain_from_env $mode TMS_RETAIN_CPU_BACKUP=1
            run "$label extra" "$conf" cpu_backup run_backend_from_env $mode TMS_INIT_CPU_BACKUP_BACKEND=mmap
        done
        run "$label extra" "$conf" cpu_backup run_multi_device_mmap_restore torch
    fi
    t0=$SECONDS
    if [ -n "${ONLY:-}" ]; then first=0; continue; fi
    if XSALLOC_CONF=$conf timeout 300 "$venv/bin/python" -m xsalloc.run "$ROOT/tests/gpu/checks/memory_saver_check.py" > "$work/check.log" 2>&1; then
        pass=$((pass + 1)); status=PASS
    else
        fail=$((fail + 1)); status=FAIL
    fi
    grep -E "^(PASS|FAIL|  )" "$work/check.log" | sed 's/^/    /' || true
    [ $status = PASS ] || tail -n 25 "$work/check.log" | sed 's/^/    | /'
    echo "$status memory_saver_check.py [$label] ($((SECONDS - t0))s)"
    first=0
done
log "$pass passed, $fail failed, $skip skipped"
[ $fail = 0 ]
