#!/bin/bash
# Builds tests/gpu/probes/driver_probe.c and tests/gpu/probes/capture_probe.c with gcc
# (no Bazel: the GPU machine has none) against the library's own driver
# sources, and runs them. Run from anywhere on a machine with a GPU:
# bash tests/gpu/run_probe.sh (exits non-zero when the simulated driver's
# capture rules differ from the real driver's).
set -euo pipefail
cd "$(dirname "$0")/../.."
cuda_include="${CUDA_HOME:-/usr/local/cuda}/include"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
gcc -O2 -std=c11 -Wall -Wextra -D_GNU_SOURCE -I. -Iinclude -I"$cuda_include" \
    vmm/driver.c vmm/driver_cuda.c sim/*.c tests/gpu/probes/driver_probe.c \
    -ldl -lpthread -o /tmp/probe
/tmp/probe
# Stream capture, the real driver against the simulated one (capture_probe.c).
gcc -O2 -std=c11 -Wall -Wextra -D_GNU_SOURCE -I. -Iinclude -I"$cuda_include" \
    vmm/driver.c vmm/driver_cuda.c sim/*.c tests/gpu/probes/capture_probe.c \
    -ldl -lpthread -o /tmp/capture_probe
/tmp/capture_probe
