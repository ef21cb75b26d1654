#!/usr/bin/env bash
# Runs tests/python (unittest) against the built libxsalloc.so on the
# simulated driver: bazel test //tests:python_test. $1 is the library.
# Skips (exit 0) without a usable python3. Under the sanitizer configs the
# library is instrumented but python3 is not, so the sanitizer runtime the
# library links is preloaded; leak checking is off (the interpreter's own).
set -euo pipefail
lib=$(realpath "$1")
runtime=$(ldd "$lib" | grep -oE '/[^ ]*lib(asan|tsan)\.so[^ ]*' || true)
# Only python3 gets the runtime: bash itself can crash with TSan preloaded.
preload=()
if [ -n "$runtime" ]; then
    preload=(env LD_PRELOAD="$runtime" ASAN_OPTIONS=detect_leaks=0)
fi
# The first python3 that starts (a pyenv shim is a bash script; some builds
# crash with TSan). Probed in a child bash that does not exec the probe, so
# a crash notice goes to /dev/null too.
py=
for candidate in "$(command -v python3 || true)" /usr/bin/python3; do
    if [ -x "$candidate" ] && bash -c '"$@" -c pass; exit $?' probe "${preload[@]}" "$candidate" 2>/dev/null; then
        py=$candidate
        break
    fi
done
if [ -z "$py" ]; then
    echo "python_test: SKIPPED: no python3${runtime:+ that starts with $runtime preloaded}"
    exit 0
fi
echo "python_test: $py${runtime:+, preloading $runtime (the library is instrumented, python3 is not)}"
export XSALLOC_LIBRARY="$lib" XSA_DRIVER=sim PYTHONPATH="$PWD/python" PYTHONDONTWRITEBYTECODE=1
exec "${preload[@]}" "$py" -m unittest discover -s tests/python -t tests/python -v
