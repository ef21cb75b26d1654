#!/usr/bin/env bash
# Builds and runs the segment test on the real driver (GPU machine: gcc and
# CUDA headers, no Bazel, no cmocka package). cmocka's header and library are
# carried in CMOCKA_DIR (default .carry: cp /usr/include/cmocka.h and
# /usr/lib/x86_64-linux-gnu/libcmocka.so.0 there before the run).
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=${CMOCKA_DIR:-.carry}
gcc -std=c11 -D_GNU_SOURCE -DXSA_TEST_CUDA -Wall -Wextra -Werror -I. -Iinclude -I"$dir" -I/usr/local/cuda/include \
    tests/vmm/segment_test.c vmm/*.c sim/*.c \
    "$dir/libcmocka.so.0" -ldl -lpthread -o /tmp/segment_gpu_test
LD_LIBRARY_PATH="$PWD/$dir" /tmp/segment_gpu_test
