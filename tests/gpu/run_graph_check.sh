#!/usr/bin/env bash
# CUDA graphs on xsalloc against PyTorch's allocator, on a GPU with torch:
# every case of tests/gpu/checks/graph_check.py in its own process, under native
# (the reference), default, norec (page_recycling:False), classic
# (expandable_segments:False) and reuse (graph_capture_record_stream_reuse). Builds the library with setup.py; the
# compile and ckpt cases' details (losses; eval sums and restores) must equal native's. Exits non-zero on any failure.
#   bash tests/gpu/run_graph_check.sh   (PYTHON=... the python3 with torch; XSALLOC_LIBRARY=... a built library; CASES="issue two_stream"; MODES="default reuse off": off is helper_thread:False)
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
lib=$(mktemp -d /tmp/xsa-graph.XXXXXX)
if [ -z "${XSALLOC_LIBRARY:-}" ]; then  # else the library given (and the adapter torch cached for it)
    "$PY" setup.py -q build_ext --build-lib "$lib" --build-temp "$lib/tmp" > "$lib/build.log" 2>&1 || { cat "$lib/build.log"; exit 1; }
    export XSALLOC_LIBRARY=$lib/xsalloc/libxsalloc.so
fi
fail=0
native_detail=""
for c in ${CASES:-issue two_stream compile mempool mempool_allocator ckpt reclaim}; do
    for m in native ${MODES:-default norec classic reuse}; do
        line=$(timeout 300 "$PY" tests/gpu/checks/graph_check.py --mode "$m" --case "$c" 2> "$lib/$m-$c.err" | tail -1)
        rc=$?
        if [ -z "$line" ]; then
            line="{\"mode\": \"$m\", \"case\": \"$c\", \"ok\": false, \"detail\": \"process died (exit $rc): $(grep -v '^\s*$' "$lib/$m-$c.err" | tail -1 | tr -d '"\\')\"}"
        fi
        if [ "$c" = compile ] || [ "$c" = ckpt ]; then
            detail=$(echo "$line" | "$PY" -c 'import json,sys; r=json.load(sys.stdin); print(r["detail"] if r["ok"] else "")')
            [ "$m" = native ] && native_detail=$detail
            if [ "$m" != native ] && [ -n "$detail" ] && [ "$detail" != "$native_detail" ]; then
                line="${line%\}}, \"equal_native\": false}"
            fi
        fi
        echo "$line"
        echo "$line" | grep -q '"ok": true' && ! echo "$line" | grep -q 'equal_native": false' || fail=1
    done
done
rm -rf "$lib"
exit $fail
