#!/usr/bin/env bash
# Builds tests/gpu/checks/multi_gpu_check.c with gcc against the library's sources
# (the GPU machine has no Bazel) and runs it: peer access between GPU 0 and
# GPU 1 (skipped with one GPU) and IPC between two processes on GPU 0.
# Run from anywhere on a GPU machine: bash tests/gpu/run_multi_gpu.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cuda_include="${CUDA_HOME:-/usr/local/cuda}/include"
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader || true
nvidia-smi topo -m || true
gcc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -I. -Iinclude -I"$cuda_include" \
    vmm/*.c sim/*.c pool/*.c api/*.c tests/gpu/checks/multi_gpu_check.c -ldl -lpthread -o /tmp/multi_gpu_check
/tmp/multi_gpu_check
