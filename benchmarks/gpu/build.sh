#!/usr/bin/env bash
# build.sh: xsalloc's replay and hotpath binaries with gcc directly, for
# machines without Bazel (the GPU host).
#
#   benchmarks/gpu/build.sh SRC_DIR OUT_DIR [extra gcc flags...]
#
# SRC_DIR is a source tree (vmm/, sim/, pool/, api/, trace/, benchmarks/);
# the library is an archive, so that only the objects the tools need link.
# Trees older than that layout (no sim/ or trace/) build too, for A/B runs
# against old code. The flags are
# the Bazel build's (-O2, link-time optimisation, hidden visibility), plus any given.
set -euo pipefail
src=$(cd "$1" && pwd)
out=$2
shift 2
mkdir -p "$out"
out=$(cd "$out" && pwd)
cflags=(-std=c11 -O2 -flto=auto -fvisibility=hidden -D_GNU_SOURCE -Wall "-I$src" "-I$src/include" -I/usr/local/cuda/include "$@")
rm -f "$out"/*.o "$out/libxsalloc.a"
pids=()
library=()
for d in vmm sim pool api; do [ -d "$src/$d" ] && library+=("$src/$d"/*.c); done
replay=("$src"/trace/replay.c "$src"/trace/trace.c)
[ -d "$src/trace" ] || replay=("$src"/benchmarks/replay_lib.c "$src"/benchmarks/trace.c)
for f in "${library[@]}"; do
    rel=${f#"$src"/}
    gcc "${cflags[@]}" -c "$f" -o "$out/${rel//\//_}.o" &
    pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
gcc-ar rcs "$out/libxsalloc.a" "$out"/*.o
libs=("$out/libxsalloc.a" -ldl -lpthread -lz)
gcc "${cflags[@]}" -o "$out/replay" "$src"/benchmarks/replay.c "${replay[@]}" "${libs[@]}"
gcc "${cflags[@]}" -o "$out/hotpath" "$src"/benchmarks/hotpath.c "${libs[@]}"
