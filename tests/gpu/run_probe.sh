#!/bin/bash
# Builds tests/gpu/driver_probe.c with gcc (no Bazel: the GPU machine has
# none) against the library's own driver sources, and runs it. Run from
# anywhere on a machine with a GPU: bash tests/gpu/run_probe.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cuda_include="${CUDA_HOME:-/usr/local/cuda}/include"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
gcc -O2 -std=c11 -Wall -Wextra -D_GNU_SOURCE -I. -I"$cuda_include" \
    vmm/driver.c vmm/driver_cuda.c vmm/driver_sim.c vmm/sim_timeline.c vmm/sim_capture.c vmm/sim_check.c tests/gpu/driver_probe.c \
    -ldl -lpthread -o /tmp/probe
/tmp/probe
