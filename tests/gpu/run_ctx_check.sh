#!/usr/bin/env bash
# Builds tests/gpu/checks/ctx_check.c with gcc against the library's sources (the
# GPU machine has no Bazel) and runs it: the PyTorch entry points keep the
# calling thread's current CUDA context. From anywhere on a GPU machine:
#   bash tests/gpu/run_ctx_check.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
cuda_include="${CUDA_HOME:-/usr/local/cuda}/include"
gcc -O2 -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -I. -Iinclude -I"$cuda_include" \
    vmm/*.c sim/*.c pool/*.c api/*.c tests/gpu/checks/ctx_check.c -ldl -lpthread -o /tmp/ctx_check
/tmp/ctx_check
