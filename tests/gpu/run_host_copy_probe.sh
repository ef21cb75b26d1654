#!/bin/bash
# Builds tests/gpu/probes/host_copy_probe.c with gcc (no Bazel: the GPU
# machine has none) against the library's own driver sources, and runs it:
# the backup path's entry points checked on the real driver (64 MiB round
# trips, bandwidth), then each case's answers against the simulated
# driver's, then each risky case in a process of its own (an illegal
# address poisons the context; a crash is reported, not fatal). Run from
# anywhere on a machine with a GPU: bash tests/gpu/run_host_copy_probe.sh
# (exits non-zero on a failed check, a mismatch or a crash).
set -uo pipefail
cd "$(dirname "$0")/../.."
cuda_include="${CUDA_HOME:-/usr/local/cuda}/include"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
gcc -O2 -std=c11 -Wall -Wextra -D_GNU_SOURCE -I. -Iinclude -I"$cuda_include" \
    vmm/driver.c vmm/driver_cuda.c sim/*.c tests/gpu/probes/host_copy_probe.c \
    -ldl -lpthread -o /tmp/host_copy_probe || exit 2
status=0
timeout 300 /tmp/host_copy_probe || status=1
for c in $(/tmp/host_copy_probe risky-list); do
    timeout 60 /tmp/host_copy_probe risky "$c"
    rc=$?
    if [ "$rc" -gt 2 ]; then echo "compare $c: cuda CRASHED or hung (exit $rc)"; fi
    [ "$rc" -ne 0 ] && status=1
done
echo "host copy probe: exit $status"
exit $status
