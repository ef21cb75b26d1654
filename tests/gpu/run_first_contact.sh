#!/usr/bin/env bash
# First contact (issue 34): the launcher and the torch adapter where users
# run them. pip install into a fresh venv over torch's Python, then each case
# in its own process with its own time limit, printing "CASE name rc secs"
# and the probe's JSON line (tests/gpu/checks/first_contact/). Cases:
#   env          what the machine sets (TORCH_CUDA_ARCH_LIST, nvcc, CUDA_HOME, cuda.h)
#   cold_nvcc    cold extension cache, TORCH_CUDA_ARCH_LIST unset, nvcc present
#   cold_nonvcc  the same with no nvcc and no CUDA toolkit (/usr/local/cuda hidden)
#   cvd          the script sets CUDA_VISIBLE_DEVICES="" itself (plain python beside)
#   fork         mp.Pool fork children and fork DataLoader workers using CUDA
#   fork_after   a forked child touching the parent's CUDA (torch's guard)
#   fallback     the adapter cannot be built (unwritable cache): then a 400 GiB request
#   observer     an OOM observer that reads memory_stats (re-entry)
#   spawn        torch.multiprocessing.spawn, 2 children on GPU 0
#   torchrun8    torchrun --nproc_per_node 8 on a cold cache: ranks, builds
#   killed       a builder killed mid-build, then a start on that cache
#   module       python -m xsalloc.run -m modtarget
#   cpu_only     CUDA_VISIBLE_DEVICES="" python -m xsalloc.run probe.py
#   cupy         find_spec("cupy") before import cupy
#   settings     XSALLOC_CONF over PYTORCH_CUDA_ALLOC_CONF; torch's view; a run-time string
#   lag          XSALLOC_LAG_PROBE through the adapter
#   bash tests/gpu/run_first_contact.sh       (PYTHON=...; CASES="..." for some)
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
PY=${PYTHON:-python3}
D=$root/tests/gpu/checks/first_contact
work=$(mktemp -d /tmp/xsa-fc.XXXXXX)
cuda_real=$(readlink -f /usr/local/cuda 2>/dev/null || true)
restore_cuda() { [ -e /usr/local/.cuda-hidden ] && mv /usr/local/.cuda-hidden /usr/local/cuda; true; }
trap 'restore_cuda; rm -rf "$work"' EXIT
want() { [ -z "${CASES:-}" ] || [[ " $CASES " == *" $1 "* ]]; }

venv=$work/venv
"$PY" -m venv --system-site-packages "$venv"
"$PY" -c 'import site; print("\n".join(site.getsitepackages()))' \
    > "$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/torch_python.pth"
t0=$(date +%s)
"$venv/bin/python" -m pip install -q --no-index --no-build-isolation . > "$work/pip.log" 2>&1 || { tail -20 "$work/pip.log"; exit 1; }
echo "pip install: $(( $(date +%s) - t0 )) s; built: $(ls "$venv"/lib/python*/site-packages/xsalloc/ | tr '\n' ' ')"
rm -rf build python/xsalloc.egg-info
VPY=$venv/bin/python
export PYTHONUNBUFFERED=1
cd "$work"

# case NAME LIMIT CMD...: runs CMD (cwd $work), prints its PROBE lines and, if none, its last stderr lines.
case_() {
    local name=$1 limit=$2; shift 2
    local s=$(date +%s%N)
    timeout -k 5 "$limit" "$@" > "$work/$name.out" 2> "$work/$name.err"
    local rc=$?
    echo "CASE $name rc=$rc $(( ($(date +%s%N) - s) / 1000000 )) ms"
    grep -h '^PROBE' "$work/$name.out" | sed 's/^/  /'
    grep -hiE 'xsalloc|error|warn|waiting|lock' "$work/$name.err" | grep -v '^\s*$' | tail -6 | cut -c1-400 | sed 's/^/  err: /'
    grep -q '^PROBE' "$work/$name.out" || tail -4 "$work/$name.err" | cut -c1-400 | sed 's/^/  tail: /'
}
fresh() { mktemp -d "$work/ext.XXXXXX"; }

if want env; then
    echo "== env: TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST-<unset>} CUDA_HOME=${CUDA_HOME-<unset>}" \
         "TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR-<unset>} nvcc=$(command -v nvcc || echo none)" \
         "ninja=$(command -v ninja || echo none) /usr/local/cuda -> $cuda_real nproc=$(nproc)"
    echo "   extension cache: $(ls ~/.cache/torch_extensions 2>/dev/null | head -3 | tr '\n' ' ')"
    echo "   cuda.h: $(find / -xdev -name cuda.h -path '*include*' 2>/dev/null | head -4 | tr '\n' ' ')"
    "$VPY" -c 'import torch; print("   torch", torch.__version__, torch.version.cuda, "gpus", torch.cuda.device_count())'
fi
noarch=(env -u TORCH_CUDA_ARCH_LIST -u CUDA_HOME -u CUDA_PATH)
if want cold_nonvcc; then  # alone: it hides the toolkit from everything running
    nopath=$(echo "$PATH" | tr ':' '\n' | grep -v cuda | paste -sd:)
    [ -e /usr/local/cuda ] && mv /usr/local/cuda /usr/local/.cuda-hidden
    echo "   (hidden: /usr/local/cuda; nvcc on PATH: $(PATH=$nopath command -v nvcc || echo none))"
    case_ cold_nonvcc 240 "${noarch[@]}" PATH="$nopath" TORCH_EXTENSIONS_DIR="$(fresh)" "$VPY" -m xsalloc.run "$D/probe.py"
    restore_cuda
fi
# The building cases side by side, each on a cache of its own; their reports in order afterwards.
arch=${TORCH_CUDA_ARCH_LIST:-9.0}
want cold_nvcc && case_ cold_nvcc 300 "${noarch[@]}" TORCH_EXTENSIONS_DIR="$(fresh)" "$VPY" -m xsalloc.run "$D/probe.py" \
    > "$work/r.cold_nvcc" 2>&1 &
if want torchrun8; then
    cold=$(fresh)
    ( case_ torchrun8 300 env TORCH_EXTENSIONS_DIR="$cold" TORCH_CUDA_ARCH_LIST=$arch \
        "$VPY" -m torch.distributed.run --standalone --nproc_per_node 8 -m xsalloc.run "$D/probe.py"
      echo "  ranks with the adapter: $(grep -c '"adapter_in_use": true' "$work/torchrun8.out") of 8;" \
           "build directories: $(ls "$cold" | wc -l); stderr lines saying wait: $(grep -ci wait "$work/torchrun8.err")"
    ) > "$work/r.torchrun8" 2>&1 &
fi
if want killed; then
    k=$(fresh)
    ( ( TORCH_EXTENSIONS_DIR=$k TORCH_CUDA_ARCH_LIST=$arch setsid "$VPY" -c \
          'import xsalloc.torch as x; x.use(adapter=True)' > /dev/null 2>&1 & echo $! > "$work/builder.pid"; wait ) &
      sleep 10
      kill -9 -- -"$(cat "$work/builder.pid")" 2>/dev/null
      sleep 1
      echo "  after the kill at 10 s: $(find "$k" -name lock | wc -l) lock file(s)"
      case_ killed 90 env TORCH_EXTENSIONS_DIR="$k" TORCH_CUDA_ARCH_LIST=$arch "$VPY" -m xsalloc.run "$D/probe.py"
    ) > "$work/r.killed" 2>&1 &
fi
# A warm cache for the cases that are not about building.
warm=$(fresh)
export TORCH_EXTENSIONS_DIR=$warm
s=$(date +%s)
TORCH_CUDA_ARCH_LIST=$arch timeout 300 "$VPY" -c 'import xsalloc.torch as x; x.use(adapter=True)' > "$work/warm.log" 2>&1 \
    || { echo "warm build failed"; tail -5 "$work/warm.log"; }
echo "warm build (beside the others): $(( $(date +%s) - s )) s"
wait
for r in cold_nvcc torchrun8 killed; do [ -f "$work/r.$r" ] && cat "$work/r.$r"; done
if want cvd; then
    case_ cvd_plain 60 "$VPY" "$D/cvd.py"
    case_ cvd 60 "$VPY" -m xsalloc.run "$D/cvd.py"
fi
if want fork; then
    case_ fork_plain 120 "$VPY" "$D/fork_children.py"
    case_ fork 120 "$VPY" -m xsalloc.run "$D/fork_children.py"
fi
if want fork_after; then
    case_ fork_after_plain 90 "$VPY" "$D/forked_after_init.py"
    case_ fork_after 90 "$VPY" -m xsalloc.run "$D/forked_after_init.py"
fi
if want fallback; then
    case_ fallback 90 env TORCH_EXTENSIONS_DIR=/proc/xsalloc-unwritable "$VPY" -m xsalloc.run "$D/oom_fallback.py"
    case_ adapter_oom 90 "$VPY" -m xsalloc.run "$D/oom_fallback.py"
fi
if want observer; then
    case_ observer_plain 60 "$VPY" "$D/oom_observer.py"
    case_ observer 60 "$VPY" -m xsalloc.run "$D/oom_observer.py"
fi
if want spawn; then
    case_ spawn 120 "$VPY" -m xsalloc.run "$D/spawn_children.py"
fi
if want module; then
    case_ module 60 env PYTHONPATH="$D" "$VPY" -m xsalloc.run -m modtarget a b
fi
if want cpu_only; then
    case_ cpu_only 60 env CUDA_VISIBLE_DEVICES= "$VPY" -m xsalloc.run "$D/probe.py"
fi
if want cupy; then
    case_ cupy 90 "$VPY" -m xsalloc.run "$D/cupy_find_spec.py"
fi
if want settings; then
    case_ settings 60 env XSALLOC_CONF=max_split_size_mb:64 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False \
        "$VPY" -m xsalloc.run "$D/settings_probe.py"
fi
if want lag; then
    case_ lag 60 env XSALLOC_LAG_PROBE="$work/lag.json" "$VPY" -m xsalloc.run "$D/probe.py"
    echo "  lag file: $(head -c 300 "$work/lag.json" 2>/dev/null | tr '\n' ' ' || echo none)"
fi
