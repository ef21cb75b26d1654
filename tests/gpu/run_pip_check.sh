#!/usr/bin/env bash
# On a GPU machine with torch: pip install --no-build-isolation . into a
# fresh venv over torch's Python, then an unchanged script under
# `python -m xsalloc.run` must train with the same losses as without it, and
# PYTORCH_CUDA_ALLOC_CONF must show up in xsalloc's summary.
#   bash tests/gpu/run_pip_check.sh        (PYTHON=... the python3 with torch)
set -euo pipefail
cd "$(dirname "$0")/../.."
PY=${PYTHON:-python3}
venv=$(mktemp -d /tmp/xsa-venv.XXXXXX)
trap 'rm -rf "$venv" build python/xsalloc.egg-info' EXIT
"$PY" -m venv --system-site-packages "$venv"
# torch's Python may itself be a venv, whose packages --system-site-packages
# does not reach: a .pth file adds its site-packages after the new venv's.
"$PY" -c 'import site; print("\n".join(site.getsitepackages()))' \
    > "$("$venv/bin/python" -c 'import site; print(site.getsitepackages()[0])')/torch_python.pth"
"$venv/bin/python" -m pip install -q --no-index --no-build-isolation . 2>&1 | tail -5
cd /tmp  # away from the source tree: the installed package must be the one found
"$venv/bin/python" -c "import xsalloc, os; print('installed at', os.path.dirname(xsalloc.__file__)); print(xsalloc.memory_summary(0).splitlines()[-1])"
script=$OLDPWD/tests/gpu/checks/tiny_train.py
"$PY" "$script" > plain.txt
PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:64 "$venv/bin/python" -m xsalloc.run "$script" > xs.txt
cat xs.txt | tail -4
fail=0
diff <(grep ^loss plain.txt) <(grep ^loss xs.txt) > /dev/null && echo "PASS losses equal (20 steps)" || { echo "FAIL losses differ"; fail=1; }
grep -qE "^backend (xsalloc|pluggable)" xs.txt && echo "PASS torch allocator is xsalloc" || { echo "FAIL backend: $(grep ^backend xs.txt)"; fail=1; }
grep -q "PYTORCH_CUDA_ALLOC_CONF.*max_split_size_mb:64" xs.txt && echo "PASS settings line names PYTORCH_CUDA_ALLOC_CONF" || { echo "FAIL no settings line"; fail=1; }
grep -q "^stats-equal True" xs.txt && echo "PASS torch.cuda.memory_stats is xsalloc's" || { echo "FAIL stats"; fail=1; }
exit $fail
