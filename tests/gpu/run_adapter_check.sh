#!/usr/bin/env bash
# The torch C++ adapter on a GPU with torch: builds libxsalloc.so with
# setup.py, compiles the adapter (timed: the first use() of a machine does
# it, later ones load torch's cached build), then every case of
# tests/gpu/checks/adapter_check.py in its own process, each with its settings
# (conf_of; none: xsalloc's defaults), and the hot path through the
# adapter against the pluggable path in one process
# (benchmarks/gpu/adapter_ab.py; ROUNDS rounds, ROUNDS=0 for none).
#   bash tests/gpu/run_adapter_check.sh   (PYTHON=...; XSALLOC_LIBRARY=... to reuse a built library;
#                                          CASES="oom accelerator fraction0 settings")
set -uo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
if [ -z "${XSALLOC_LIBRARY:-}" ]; then
    lib=$(mktemp -d /tmp/xsa-adapter.XXXXXX)
    "$PY" setup.py -q build_ext --build-lib "$lib" --build-temp "$lib/tmp" > "$lib/build.log" 2>&1 || { cat "$lib/build.log"; exit 1; }
    export XSALLOC_LIBRARY=$lib/xsalloc/libxsalloc.so
fi
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
start=$(date +%s%N)
"$PY" -c 'import torch, xsalloc.torch; xsalloc.torch.use(adapter=True); print("adapter built and installed:", xsalloc.torch.adapter_in_use(), torch.ones(4, device="cuda").sum().item())' || exit 1
echo "first use() with the build: $(( ($(date +%s%N) - start) / 1000000 )) ms"
start=$(date +%s%N)
"$PY" -c 'import torch, xsalloc.torch; xsalloc.torch.use(adapter=True)'
echo "a later use(), cached: $(( ($(date +%s%N) - start) / 1000000 )) ms"
conf_of() {  # the XSALLOC_CONF a case runs with
    case "$1" in
    mp) echo "ipc_handles:True" ;;
    mp_handles) echo "ipc_handles:True,page_recycling_headroom:1" ;;  # handles of several pages
    esac
}
fail=0
for c in ${CASES:-stats history oom accelerator fraction0 settings mp mp_handles mp_off}; do
    conf=$(conf_of "$c")
    line=$(env -u XSALLOC_CONF timeout 400 "$PY" tests/gpu/checks/adapter_check.py --case "$c" ${conf:+--conf "$conf"} \
           2>/tmp/adapter-$c.err | tail -1)
    [ -n "$line" ] || line="{\"case\": \"$c\", \"ok\": false, \"detail\": \"died: $(tail -1 /tmp/adapter-$c.err | tr -d '"\\')\"}"
    echo "$line"
    echo "$line" | grep -q '"ok": true' || fail=1
done
timeout 300 "$PY" benchmarks/gpu/adapter_ab.py --rounds "${ROUNDS:-100}" || fail=1
exit $fail
