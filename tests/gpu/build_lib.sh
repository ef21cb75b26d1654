# Sourced by the GPU scripts: builds libxsalloc.so with setup.py (the GPU
# machine has no Bazel) into a temporary folder and exports XSALLOC_LIBRARY
# to it, unless XSALLOC_LIBRARY already names a built library; puts
# python/ on PYTHONPATH so that `import xsalloc` finds the package.
# Expects PY (the python3 with torch) and the repository root as the
# current directory.
if [ -z "${XSALLOC_LIBRARY:-}" ]; then
    xsa_build_dir=$(mktemp -d /tmp/xsa-lib.XXXXXX)
    "$PY" setup.py -q build_ext --build-lib "$xsa_build_dir" --build-temp "$xsa_build_dir/tmp" \
        > "$xsa_build_dir/build.log" 2>&1 || { cat "$xsa_build_dir/build.log"; exit 1; }
    export XSALLOC_LIBRARY=$xsa_build_dir/xsalloc/libxsalloc.so
fi
export PYTHONPATH="$PWD/python${PYTHONPATH:+:$PYTHONPATH}"
