#!/usr/bin/env bash
# The shared library exports exactly the functions the public headers mark
# XSA_API (xsalloc/xsalloc.h, xsalloc/pytorch.h, xsalloc/sim.h): a public name missing
# fails at run time in Python or PyTorch, an internal one leaking could
# clash in the process and keeps calls inside the library indirect.
#   bazel test //tests:exports_test   ($1: libxsalloc.so, then the headers)
set -euo pipefail
lib=$1
shift
want=$(sed -nE 's/^XSA_API [^(]*[ *](xsa_[a-z0-9_]+)\(.*/\1/p' "$@" | sort -u)
have=$(nm -D --defined-only "$lib" | awk '$3 ~ /^xsa_/ {print $3}' | sort -u)
[ -n "$want" ] || { echo "exports_test: no XSA_API declaration found in $*"; exit 1; }
if [ "$want" != "$have" ]; then
    echo "exports_test: the library's xsa_ exports differ from the XSA_API declarations"
    diff <(echo "$want") <(echo "$have") | sed 's/^</  declared, not exported:/; s/^>/  exported, not declared:/' | grep -v '^[0-9]'
    exit 1
fi
echo "exports_test: $(echo "$want" | wc -l) functions exported, as declared"
