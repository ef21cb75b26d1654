#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) outside Bazel and
# runs each for a fixed time on its seed corpus (fuzz/corpus/<target>/).
#   fuzz/run.sh [SECONDS]     default 20 s per target
# New inputs go to a scratch corpus; the repository's seeds are read only.
# A crash leaves its reproducer in $OUT (printed) and fails the script.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
OUT="${XSA_FUZZ_OUT:-${TMPDIR:-/tmp}/xsalloc-fuzz}"
mkdir -p "$OUT"

flags=(-std=c11 -D_GNU_SOURCE -O1 -g -Wall -Wextra -Werror -I. -Iinclude -I/usr/local/cuda/include
       -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all)
allocator=(vmm/*.c sim/*.c pool/*.c api/*.c) # the whole library: the API ops_fuzz calls needs most of it

build() { # target sources...
    local t="$1"; shift
    clang "${flags[@]}" -o "$OUT/$t" "fuzz/$t.c" "$@" -ldl -lpthread
}
build config_fuzz api/config.c pool/options.c
build ops_fuzz "${allocator[@]}"

for t in config_fuzz ops_fuzz; do
    scratch="$OUT/corpus-$t"
    mkdir -p "$scratch"
    echo "fuzz: $t for ${secs}s" >&2
    (cd "$OUT" && "./$t" -max_total_time="$secs" -print_final_stats=1 "$scratch" "$OLDPWD/fuzz/corpus/$t") \
        >"$OUT/$t.log" 2>&1 || { tail -40 "$OUT/$t.log" >&2; echo "fuzz: $t FAILED (log and crash input in $OUT)" >&2; exit 1; }
    grep -E "^Done [0-9]+ runs|stat::number_of_executed_units" "$OUT/$t.log" | head -1 | sed "s/^/fuzz: $t: /" >&2
done
