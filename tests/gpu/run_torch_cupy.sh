#!/usr/bin/env bash
# Builds libxsalloc.so with setup.py (the GPU machine has no Bazel; the
# flags are those of `pip install .`) and runs
# tests/gpu/checks/torch_cupy_check.py: PyTorch training and a CuPy computation on
# their own allocators and on xsalloc, compared. Needs gcc, the CUDA headers
# and python3 with torch, cupy and setuptools. From anywhere:
#   bash tests/gpu/run_torch_cupy.sh        (OUT=DIR keeps the library)
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-$(mktemp -d /tmp/xsa-py.XXXXXX)}
mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
python3 setup.py -q build_ext --build-lib "$out" --build-temp "$out/build"
export XSALLOC_LIBRARY="$out/xsalloc/libxsalloc.so" PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
python3 tests/gpu/checks/torch_cupy_check.py
