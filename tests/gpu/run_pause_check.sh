#!/usr/bin/env bash
# Pause and resume on a GPU through torch (issue 32): builds libxsalloc.so
# with setup.py, then each case of tests/gpu/checks/pause_check.py in its
# own process (running kernels, OOM in resume, free while paused, a CUDA
# graph's pool, backup bandwidth), one JSON line each; exits 1 if any fails.
#   bash tests/gpu/run_pause_check.sh   (PYTHON=...; CASES="running oom"; XSALLOC_LIBRARY=... to reuse a build)
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
if [ -z "${XSALLOC_LIBRARY:-}" ]; then
    lib=$(mktemp -d /tmp/xsa-pause.XXXXXX)
    "$PY" setup.py -q build_ext --build-lib "$lib" --build-temp "$lib/tmp" > "$lib/build.log" 2>&1 || { cat "$lib/build.log"; exit 1; }
    export XSALLOC_LIBRARY=$lib/xsalloc/libxsalloc.so
fi
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
fail=0
for c in ${CASES:-running oom free graph bandwidth}; do
    line=$(timeout 300 "$PY" tests/gpu/checks/pause_check.py --case "$c" 2>/tmp/pause-$c.err | tail -1)
    [ -n "$line" ] || line="{\"case\": \"$c\", \"ok\": false, \"detail\": \"died: $(tail -1 /tmp/pause-$c.err | tr -d '"\\')\"}"
    echo "$line"
    echo "$line" | grep -q '"ok": true' || fail=1
done
exit $fail
