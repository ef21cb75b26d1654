#!/usr/bin/env bash
# First contact (issue 34): the launcher and the torch adapter where users
# run them, each case judged PASS or FAIL against what it should do
# (tests/gpu/checks/first_contact/judge.py says what each case must show);
# exit status 1 on any FAIL. About 5 minutes on a 16-core GPU machine.
#
# pip install into a fresh venv over torch's Python, first with no CUDA
# toolkit at all (/usr/local/cuda hidden: the headers must come from the
# nvidia packages beside torch; SKIP when that environment has none), else
# with the toolkit's headers but no nvcc on PATH; TORCH_CUDA_ARCH_LIST and
# CUDA_HOME unset throughout. Then each case in its own process:
#   pip_no_toolkit / pip_no_nvcc / pip_adapter   the install, and the adapter and pluggable malloc it built
#   gpt2           GPT-2 small trained under python -m xsalloc.run, nvcc off PATH, arch list unset: on the adapter, no build at first use
#   cvd            the script sets CUDA_VISIBLE_DEVICES="" itself: as under plain python
#   fork           mp.Pool fork children made before any CUDA use, and fork DataLoader workers, using CUDA: as under plain python
#   fork_after     a forked child touching the parent's CUDA: torch's guard
#   oom_adapter / oom_pluggable   400 GiB through the adapter / the pluggable path asked for: torch.OutOfMemoryError
#   no_adapter     no adapter to load and none can be built: the job stops before the script, saying why and what to do
#   observer       an out-of-memory observer reading memory_stats: no hang
#   spawn          torch.multiprocessing.spawn DDP, one GPU a rank (2 GPUs) or both on GPU 0: both children on the adapter
#   torchrun8      torchrun --nproc_per_node 8 on a cold cache: every rank on the adapter, no build at first use
#   torchrun8_jit  the same without pip's adapter: one build at first use, the 7 other ranks say they wait
#   killed         a builder killed mid-build, then a start on its cache: it builds (and removes torch's stale lock)
#   module         python -m xsalloc.run -m modtarget a b
#   cpu_only       CUDA_VISIBLE_DEVICES="" python -m xsalloc.run probe.py: runs on CPU with one notice
#   cupy           importlib.util.find_spec("cupy") before import cupy: CuPy on xsalloc (SKIP without cupy)
#   settings       XSALLOC_CONF over PYTORCH_CUDA_ALLOC_CONF, torch's own settings, a string torch takes and xsalloc refuses
#   settings_default  torch's own expandable_segments says xsalloc's default (True)
#   lag            XSALLOC_LAG_PROBE through the adapter
#   bash tests/gpu/run_first_contact.sh       (PYTHON=... the python3 with torch; CASES="..." for some cases)
set -uo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
PY=${PYTHON:-python3}
D=$root/tests/gpu/checks/first_contact
work=$(mktemp -d /tmp/xsa-fc.XXXXXX)
restore_cuda() { [ -e /usr/local/.cuda-hidden ] && mv /usr/local/.cuda-hidden /usr/local/cuda; true; }
trap 'restore_cuda; rm -rf "$work" "$root/build" "$root/python/xsalloc.egg-info"' EXIT
want() { [ -z "${CASES:-}" ] || [[ " $CASES " == *" $1 "* ]]; }
pass=0 fail=0 skip=0
# say VERDICT CASE DETAIL: one line, counted; count CASE [EXTRA]: judge.py's verdict, said.
say() { echo "$1 $2: $3"; case $1 in PASS) pass=$((pass + 1)) ;; SKIP) skip=$((skip + 1)) ;; *) fail=$((fail + 1)) ;; esac; }
count() { local line; line=$("$PY" "$D/judge.py" "$1" "$work" "${2:-}")
    echo "$line"; case $line in PASS*) pass=$((pass + 1)) ;; SKIP*) skip=$((skip + 1)) ;; *) fail=$((fail + 1)) ;; esac; }
# case_ NAME LIMIT CMD...: runs CMD in $work, its stdout, stderr and status in NAME.out, .err, .rc.
case_() {
    local name=$1 limit=$2; shift 2
    local s=$(date +%s)
    (cd "$work" && timeout -k 5 "$limit" "$@" > "$work/$name.out" 2> "$work/$name.err"; echo $? > "$work/$name.rc")
    echo "   ($name: $(( $(date +%s) - s )) s)" >> "$work/times"
}
fresh() { mktemp -d "$work/ext.XXXXXX"; }
nocuda_path=$(echo "$PATH" | tr ':' '\n' | grep -v cuda | paste -sd:)
clean=(env -u TORCH_CUDA_ARCH_LIST -u CUDA_HOME -u CUDA_PATH PATH="$nocuda_path")

echo "== env: TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST-<unset>} CUDA_HOME=${CUDA_HOME-<unset>}" \
     "nvcc=$(command -v nvcc || echo none) (cases: $(PATH=$nocuda_path command -v nvcc || echo none))" \
     "ninja=$(command -v ninja || echo none) /usr/local/cuda -> $(readlink -f /usr/local/cuda 2>/dev/null) nproc=$(nproc)"
"$PY" -c 'import torch; print("   torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())'
venv=$work/venv
"$PY" -m venv --system-site-packages "$venv"
"$PY" -c 'import site; print("\n".join(site.getsitepackages()))' \
    > "$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/torch_python.pth"
VPY=$venv/bin/python
headers=$("$PY" - "$root" <<'EOF'
import importlib.util, os, sys, torch
spec = importlib.util.spec_from_file_location("b", os.path.join(sys.argv[1], "python/xsalloc/_adapter_build.py"))
b = importlib.util.module_from_spec(spec); spec.loader.exec_module(b)
print(" ".join(d for d in b.cuda_include_dirs(torch, {}, "/nonexistent", "cuda_runtime_api.h")))
EOF
)
echo "   CUDA headers beside torch (no toolkit): ${headers:-none}"
pip_install() { "${clean[@]}" "$VPY" -m pip install -q --no-index --no-build-isolation --force-reinstall --no-deps "$root" > "$work/$1.log" 2>&1; }

t0=$(date +%s)
installed=
if [ -n "$headers" ]; then
    [ -e /usr/local/cuda ] && mv /usr/local/cuda /usr/local/.cuda-hidden
    if pip_install pip_no_toolkit; then installed=1; say PASS pip_no_toolkit "pip install with no CUDA toolkit: $(( $(date +%s) - t0 )) s"
    else say FAIL pip_no_toolkit "$(grep -vE '^ *[^ ]*(gcc|g\+\+|c\+\+|ld) ' "$work/pip_no_toolkit.log" | grep -E 'rror:|fatal|not found|No such|Traceback|OSError|RuntimeError' | grep -v 'subprocess-exited' | head -8 | tr '\n' ' ' | cut -c1-1500)"
          [ -n "${OUT:-}" ] && cp "$work/pip_no_toolkit.log" "$OUT/" && echo "   the whole log: \$OUT/pip_no_toolkit.log"; fi
    restore_cuda
else
    say SKIP pip_no_toolkit "this torch's environment has no CUDA headers of its own (no nvidia/*/include/cuda_runtime_api.h)"
fi
if [ -z "$installed" ]; then
    t0=$(date +%s)
    if pip_install pip_no_nvcc; then installed=1; say PASS pip_no_nvcc "pip install, toolkit headers, no nvcc on PATH: $(( $(date +%s) - t0 )) s"
    else say FAIL pip_no_nvcc "$(tail -5 "$work/pip_no_nvcc.log" | tr '\n' ' ' | cut -c1-600)"; echo "== $pass PASS, $fail FAIL, $skip SKIP"; exit 1; fi
fi
rm -rf "$root/build" "$root/python/xsalloc.egg-info"
site=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
built=$(cd "$site/xsalloc" && ls _torch_adapter.so libxsalloc_pluggable.so _torch_adapter.json 2>/dev/null | LC_ALL=C sort | tr '\n' ' ')
[ "$built" = "_torch_adapter.json _torch_adapter.so libxsalloc_pluggable.so " ] \
    && say PASS pip_adapter "built at pip install: $built($(cat "$site/xsalloc/_torch_adapter.json"))" \
    || say FAIL pip_adapter "the installed package holds: $(ls "$site/xsalloc" | tr '\n' ' ')"
nostamp=$work/nostamp  # the library alone: the adapter must be built at first use
mkdir "$nostamp" && cp "$site/xsalloc/libxsalloc.so" "$nostamp/"
export PYTHONUNBUFFERED=1
jit=(env XSALLOC_LIBRARY="$nostamp/libxsalloc.so")

# The cases that build, or start 8 ranks, in the background; the others meanwhile.
if want torchrun8; then
    c8=$(fresh)
    case_ torchrun8 240 "${clean[@]}" TORCH_EXTENSIONS_DIR="$c8" "$VPY" -m torch.distributed.run --standalone \
        --nproc_per_node 8 -m xsalloc.run "$D/probe.py" &
fi
if want torchrun8_jit; then
    cj=$(fresh)
    case_ torchrun8_jit 420 "${clean[@]}" "${jit[@]}" TORCH_EXTENSIONS_DIR="$cj" "$VPY" -m torch.distributed.run \
        --standalone --nproc_per_node 8 -m xsalloc.run "$D/probe.py" &
fi
if want killed; then
    ck=$(fresh)
    (
        ("${clean[@]}" "${jit[@]}" TORCH_EXTENSIONS_DIR="$ck" setsid "$VPY" -m xsalloc.run "$D/probe.py" > /dev/null 2>&1 &
         echo $! > "$work/builder.pid"; wait) &
        for _ in $(seq 600); do ls "$ck"/*/lock > /dev/null 2>&1 && break; sleep 0.1; done  # torch's lock: building
        sleep 3
        kill -9 -- -"$(cat "$work/builder.pid")" 2> /dev/null
        wait
        echo "   killed the builder; left: $(cd "$ck" && ls */ 2> /dev/null | tr '\n' ' ')" > "$work/killed.note"
        case_ killed 420 "${clean[@]}" "${jit[@]}" TORCH_EXTENSIONS_DIR="$ck" "$VPY" -m xsalloc.run "$D/probe.py"
    ) &
fi

if want gpt2; then
    cg=$(fresh)
    case_ gpt2 240 "${clean[@]}" TORCH_EXTENSIONS_DIR="$cg" "$VPY" -m xsalloc.run "$D/gpt2_train.py"
    count gpt2 "$cg"
fi
if want cvd; then
    case_ cvd_plain 120 "$VPY" "$D/cvd.py"
    case_ cvd 120 "$VPY" -m xsalloc.run "$D/cvd.py"
    count cvd
fi
if want fork; then
    case_ fork_plain 120 "$VPY" "$D/fork_children.py"
    case_ fork 120 "$VPY" -m xsalloc.run "$D/fork_children.py"
    count fork
fi
if want fork_after; then
    case_ fork_after_plain 120 "$VPY" "$D/forked_after_init.py"
    case_ fork_after 120 "$VPY" -m xsalloc.run "$D/forked_after_init.py"
    count fork_after
fi
if want oom_adapter; then
    case_ oom_adapter 120 "$VPY" -m xsalloc.run "$D/oom_fallback.py"
    count oom_adapter
fi
if want oom_pluggable; then
    case_ oom_pluggable 120 env XSALLOC_TORCH_ADAPTER=0 "$VPY" -m xsalloc.run "$D/oom_fallback.py"
    count oom_pluggable
fi
if want no_adapter; then
    case_ no_adapter 120 "${jit[@]}" TORCH_EXTENSIONS_DIR=/proc/xsalloc-unwritable "$VPY" -m xsalloc.run "$D/probe.py"
    count no_adapter
fi
if want observer; then
    case_ observer_plain 120 "$VPY" "$D/oom_observer.py"
    case_ observer 120 "$VPY" -m xsalloc.run "$D/oom_observer.py"
    count observer
fi
if want spawn; then
    case_ spawn 180 "$VPY" -m xsalloc.run "$D/spawn_children.py"
    count spawn
fi
if want module; then
    case_ module 120 env PYTHONPATH="$D" "$VPY" -m xsalloc.run -m modtarget a b
    count module
fi
if want cpu_only; then
    case_ cpu_only_plain 120 env CUDA_VISIBLE_DEVICES= "$VPY" "$D/probe.py"
    case_ cpu_only 120 env CUDA_VISIBLE_DEVICES= "$VPY" -m xsalloc.run "$D/probe.py"
    count cpu_only
fi
if want cupy; then
    case_ cupy 120 "$VPY" -m xsalloc.run "$D/cupy_find_spec.py"
    count cupy
fi
if want settings; then
    case_ settings_plain 120 "$VPY" "$D/settings_probe.py" plain
    case_ settings 120 env XSALLOC_CONF=max_split_size_mb:64 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False \
        "$VPY" -m xsalloc.run "$D/settings_probe.py"
    count settings
fi
if want settings_default; then
    case_ settings_default 120 "$VPY" -m xsalloc.run "$D/settings_probe.py"
    count settings_default
fi
if want lag; then
    case_ lag 120 env XSALLOC_LAG_PROBE="$work/lag.json" "$VPY" -m xsalloc.run "$D/probe.py"
    count lag "$work/lag.json"
fi
wait
want torchrun8 && count torchrun8 "$c8"
want torchrun8_jit && count torchrun8_jit "$cj"
if want killed; then cat "$work/killed.note"; count killed "$ck"; fi
echo "   case times:$(tr -d '\n' < "$work/times" 2> /dev/null)"
echo "== $pass PASS, $fail FAIL, $skip SKIP"
[ "$fail" -eq 0 ]
