#!/usr/bin/env bash
# Builds libxsalloc.so with gcc (the GPU machine has no Bazel) and runs
# tests/gpu/torch_cupy_check.py: PyTorch training and a CuPy computation on
# their own allocators and on xsalloc, compared. Needs gcc, the CUDA headers
# and python3 with torch and cupy. From anywhere:
#   bash tests/gpu/run_torch_cupy.sh        (OUT=DIR keeps the library)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$(mktemp -d /tmp/xsa-py.XXXXXX)}
mkdir -p "$out"
cuda_include="${CUDA_HOME:-/usr/local/cuda}/include"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
gcc -O2 -flto=auto -fvisibility=hidden -shared -fPIC -std=c11 -D_GNU_SOURCE -Wall -Wextra -I. -I"$cuda_include" \
    vmm/*.c pool/*.c api/*.c -ldl -lpthread -o "$out/libxsalloc.so"
export XSALLOC_LIBRARY="$out/libxsalloc.so" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
python3 tests/gpu/torch_cupy_check.py
