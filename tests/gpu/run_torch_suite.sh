#!/usr/bin/env bash
# PyTorch's own CUDA tests (../shared/pytorch/test_cuda.py) under torch's
# allocator and under xsalloc, one table of outcomes (tests/gpu/checks/torch_suite.py).
#
# The file is PyTorch's and is never committed here: it is read from
# ../shared/pytorch, copied into .carry/pytorch (git-ignored), which a GPU
# machine's call carries (carry: [".carry"]). Each mode runs in its own
# processes; a test that kills the process is named a crash and the run
# goes on in a new process without the tests done. With PARALLEL=1 the
# modes run side by side on the one GPU, then every test whose outcome
# there could be the other processes' doing (the reference's non-passes,
# each mode's misses of the reference's passes) runs again alone, and that
# outcome is the one counted. A mode's misses run in a process each (a test
# may fail for what an earlier one left, as test_host_memory_stats does
# after another test allocated pinned memory).
#   bash tests/gpu/run_torch_suite.sh [-k PATTERN ...]
#   env: PYTHON (the python3 with torch), MODES (default "torch torch_expandable default norec classic";
#        "decay" (helper_thread:True,page_decay_ms:500, the defaults written out) and "off"
#        (helper_thread:False) as well),
#        CLASSES (default "TestCuda TestMemPool TestBlockStateAbsorption TestCudaOptims"),
#        PARALLEL=1, OUT=DIR (kept; default a temporary folder), XSALLOC_LIBRARY (a built library),
#        TEST_TIMEOUT (seconds a test may take before it counts as a crash; default 600)
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
suite=.carry/pytorch/test_cuda.py
if [ -f ../shared/pytorch/test_cuda.py ]; then
    mkdir -p .carry/pytorch && cp ../shared/pytorch/test_cuda.py .carry/pytorch/
fi
[ -f "$suite" ] || { echo "no $suite: copy ../shared/pytorch into .carry/pytorch and carry .carry" >&2; exit 1; }
source tests/gpu/build_lib.sh
out=${OUT:-$(mktemp -d /tmp/xsa-suite.XXXXXX)}
mkdir -p "$out"
modes=${MODES:-torch torch_expandable default norec classic}
classes=(${CLASSES:-TestCuda TestMemPool TestBlockStateAbsorption TestCudaOptims})
kargs=()
while [ $# -gt 0 ]; do
    case "$1" in -k) kargs+=(-k "$2"); shift 2 ;; *) echo "unknown argument $1" >&2; exit 2 ;; esac
done

# Runs mode $1 until its process ends well, a new process after each crash,
# recording into $2 (extra arguments: --only ...).
run_mode() {
    local m=$1 file=$2; shift 2
    for _ in $(seq 1 100); do
        "$PY" tests/gpu/checks/torch_suite.py --file "$suite" --mode "$m" --out "$file" --classes "${classes[@]}" \
            --timeout "${TEST_TIMEOUT:-600}" "${kargs[@]}" "$@" >> "$out/$m.log" 2>&1 && return 0
    done
}

# The adapter is compiled once, before the modes start side by side.
"$PY" -c 'import xsalloc.torch; xsalloc.torch.use()' || exit 1
start=$(date +%s)
for m in $modes; do
    if [ "${PARALLEL:-0}" = 1 ]; then run_mode "$m" "$out/$m.jsonl" & else run_mode "$m" "$out/$m.jsonl"; fi
done
wait
if [ "${PARALLEL:-0}" = 1 ]; then
    for m in $modes; do
        again=$("$PY" tests/gpu/checks/torch_suite.py --to-confirm "$out" --mode "$m")
        if [ "$m" = torch ]; then
            [ -n "$again" ] && run_mode "$m" "$out/$m.jsonl.confirm" --only $again
        else
            for t in $again; do run_mode "$m" "$out/$m.jsonl.confirm" --only "$t"; done
        fi
    done
fi
echo "torch suite: $(( $(date +%s) - start )) s; outcomes in $out"
"$PY" tests/gpu/checks/torch_suite.py --table "$out"
