"""The processes a `python -m xsalloc.run` program starts are on xsalloc too.

Design: the program, run under the launcher with the stand-in torch and
cupy of fake_site.py on PYTHONPATH, starts children the ways jobs do: a
multiprocessing spawn pool (what torch.multiprocessing.spawn and spawn
DataLoader workers use) and plain subprocesses of the same Python (what
torchrun's workers are). Each child reports whether xsalloc became its
torch's allocator (through the adapter) and CuPy's once it imported them,
and whether torch was imported before it asked (the start-up hook must not
import it). Under plain python the same program's children are not on
xsalloc: the stand-ins can tell. The start-up hook also runs a
sitecustomize it stands in front of.
"""

import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import fake_site

PROGRAM = """\
import json
import multiprocessing as mp
import subprocess
import sys

CHILD = (
    "import sys, json; before = 'torch' in sys.modules; import torch, cupy, xsalloc.torch; "
    "print(json.dumps([before, torch.cuda.memory.installed, xsalloc.torch.adapter_in_use(), "
    "cupy.cuda.allocator is not None]))")


def report(_):
    before = "torch" in sys.modules
    import torch
    import cupy
    import xsalloc.torch
    return [before, torch.cuda.memory.installed, xsalloc.torch.adapter_in_use(), cupy.cuda.allocator is not None]


if __name__ == "__main__":
    with mp.get_context("spawn").Pool(2, maxtasksperchild=1) as pool:  # a fresh process per task
        print(json.dumps(pool.map(report, [0, 1], chunksize=1)))
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True)
    print(out.stdout.strip() or out.stderr)
    out = subprocess.run([sys.executable, "-c", "import json, sys; print(json.dumps('torch' in sys.modules))"],
                         capture_output=True, text=True)
    print(out.stdout.strip() or out.stderr)
"""


class ChildrenTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        site = fake_site.write(os.path.join(self.dir, "site"), cupy=True)
        self.env = {k: v for k, v in os.environ.items() if not k.endswith("_ALLOC_CONF") and k != "XSALLOC_CONF"}
        self.env.update(PYTHONPATH=site + os.pathsep + os.environ["PYTHONPATH"],
                        TORCH_EXTENSIONS_DIR=os.path.join(self.dir, "ext"))
        self.script = os.path.join(self.dir, "job.py")
        with open(self.script, "w") as f:
            f.write(PROGRAM)

    def run_job(self, *launcher, env=None):
        r = subprocess.run([sys.executable, *launcher, self.script], env=env or self.env, capture_output=True,
                           text=True, timeout=120)
        self.assertEqual(r.returncode, 0, r.stderr)
        return [json.loads(line) for line in r.stdout.splitlines()]

    def test_spawned_and_subprocess_children_use_xsalloc(self):
        pool, sub, bare = self.run_job("-m", "xsalloc.run")
        on_xsalloc = [False, "the adapter", True, True]  # torch not imported early; adapter; CuPy's allocator
        self.assertEqual(pool, [on_xsalloc, on_xsalloc])
        self.assertEqual(sub, on_xsalloc)
        self.assertFalse(bare, "a child that never imports torch does not import it")

    def test_under_plain_python_they_do_not(self):
        pool, sub, bare = self.run_job()
        self.assertEqual(pool, [[False, None, False, False]] * 2, "the stand-ins can tell")
        self.assertEqual(sub, [False, None, False, False])

    def test_a_sitecustomize_already_there_still_runs(self):
        other = os.path.join(self.dir, "other")
        os.makedirs(other)
        with open(os.path.join(other, "sitecustomize.py"), "w") as f:
            f.write("import builtins\nbuiltins.OTHER_SITECUSTOMIZE = True\n")
        env = dict(self.env, PYTHONPATH=other + os.pathsep + self.env["PYTHONPATH"])
        with open(self.script, "w") as f:
            f.write(textwrap.dedent("""\
                import subprocess, sys
                code = "import builtins, json, torch; print(json.dumps([builtins.OTHER_SITECUSTOMIZE, torch.cuda.memory.installed]))"
                print(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip())
                """))
        self.assertEqual(self.run_job("-m", "xsalloc.run", env=env), [[True, "the adapter"]])


if __name__ == "__main__":
    unittest.main()
