#!/usr/bin/env bash
# `pip install --no-build-isolation .` as a user runs it, with no package
# index: bazel test //tests:pip_install_test. The declared sources (//:pip_sources)
# are copied out of the runfiles (pip builds inside the tree it is given), a
# fresh `python3 -m venv --system-site-packages` installs them, and then,
# from another directory and with no XSALLOC_LIBRARY or PYTHONPATH, the
# installed package must load its own libxsalloc.so (no libcuda linked),
# print memory_summary(0) on the simulated driver, and run a script and a
# module through `python -m xsalloc.run`. Debian's python3 is used: ./x installs its venv,
# pip, setuptools and wheel packages.
set -euo pipefail
py=/usr/bin/python3
tmp=$(mktemp -d "${TEST_TMPDIR:-/tmp}/pip.XXXXXX")
fail() { echo "pip_install_test: FAIL: $*" >&2; exit 1; }

mkdir "$tmp/src"
cp -rL pyproject.toml setup.py include vmm sim pool api python "$tmp/src/"
"$py" -m venv --system-site-packages "$tmp/venv" || fail "$py -m venv failed (./x installs python3-venv)"
export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1
"$tmp/venv/bin/python" -m pip install -q --no-build-isolation --no-index --no-cache-dir --root-user-action=ignore \
    "$tmp/src" || fail "pip install --no-build-isolation failed"

unset XSALLOC_LIBRARY PYTHONPATH XSALLOC_CONF PYTORCH_ALLOC_CONF PYTORCH_CUDA_ALLOC_CONF
export XSA_DRIVER=sim
cd "$tmp"
site=$("$tmp/venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')
lib="$site/xsalloc/libxsalloc.so"
[ -f "$lib" ] || fail "no $lib"
! ldd "$lib" | grep -q libcuda || fail "$lib links libcuda: $(ldd "$lib")"

# What xsalloc.torch compiles the torch adapter from.
for f in csrc/adapter.cpp csrc/contexts.cpp csrc/contexts.h csrc/snapshot.cpp csrc/snapshot.h csrc/common.h \
    csrc/torch_settings.cpp csrc/torch_settings.h csrc/pluggable_malloc.cpp _adapter.py _adapter_build.py \
    include/xsalloc/xsalloc.h include/xsalloc/types.h include/xsalloc/pytorch.h; do
    [ -f "$site/xsalloc/$f" ] || fail "the installed package has no $f (the torch adapter's source)"
done
# The start-up hook of the processes a launched program starts.
[ -f "$site/xsalloc/_child/sitecustomize.py" ] || fail "the installed package has no _child/sitecustomize.py"
# No torch here: nothing of torch's is built, and no stamp says otherwise.
[ ! -e "$site/xsalloc/_torch_adapter.json" ] || fail "a torch adapter stamp without torch"

out=$("$tmp/venv/bin/python" -c 'import xsalloc; print(xsalloc.memory_summary(0))')
echo "$out"
grep -qF "|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |" <<<"$out" || fail "no summary table"
grep -qF "xsalloc settings: all defaults" <<<"$out" || fail "no settings line"
loaded=$("$tmp/venv/bin/python" -c 'import xsalloc, xsalloc._lib as l; print(xsalloc.__file__, l.load().path)')
[ "$loaded" = "$site/xsalloc/__init__.py $(realpath "$lib")" ] || fail "loaded $loaded, not the installed package and its library"

printf 'import sys\nprint("script", sys.argv[1:], __name__)\nsys.exit(7)\n' >"$tmp/train.py"
status=0
ran=$("$tmp/venv/bin/python" -m xsalloc.run train.py --lr 0.1) || status=$?
[ "$status:$ran" = "7:script ['--lr', '0.1'] __main__" ] || fail "python -m xsalloc.run: exit $status, printed '$ran'"
mkdir "$tmp/mod" && printf 'import sys\nprint("module", sys.argv[1:], __name__, __spec__.name)\n' >"$tmp/mod/__main__.py"
ran=$("$tmp/venv/bin/python" -m xsalloc.run -m mod --lr 0.1) || fail "python -m xsalloc.run -m mod: exit $?"
[ "$ran" = "module ['--lr', '0.1'] __main__ mod.__main__" ] || fail "python -m xsalloc.run -m mod printed '$ran'"
echo "pip_install_test: ok ($lib)"
