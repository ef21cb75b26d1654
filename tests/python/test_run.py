"""python -m xsalloc.run SCRIPT ARGS against python SCRIPT ARGS, on the simulated driver.

Design: each case writes a script into a temporary directory and runs it
both ways in child processes; stdout, stderr and the exit status must be
the same, so what the script sees (sys.argv, __name__, __file__, its globals,
sys.path[0], sys.modules['__main__']) and how it ends (exit status, message,
traceback, syntax error) are compared with the interpreter itself rather
than with expectations written here; -m MODULE the same way against
python -m MODULE. Then stand-ins for torch and cupy (tests/python/
fake_site.py), importable from a directory on PYTHONPATH, show that xsalloc
is torch's allocator (through the adapter) before the script's first line
and CuPy's as soon as the script imports cupy, even after a find_spec of
it; that a failure to install stops the job before the script with the
reason; and that a process without a GPU runs the script with one notice.
Needs XSALLOC_LIBRARY, XSA_DRIVER=sim and the package on PYTHONPATH
(tests/python/python_test.sh sets them).
"""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

import fake_site

MiB = 1 << 20

# What a script can see of how it was started.
INTROSPECT = """\
import sys
main = sys.modules["__main__"]
print("argv", sys.argv)
print("name", __name__, main.__dict__ is globals())
print("file", __file__, __cached__, __spec__, __package__)
print("loader", type(__loader__).__name__, __loader__.name, __loader__.path)
print("globals", sorted(globals()))
print("path0", sys.path[0])
print("path", sys.path)
"""

# The same for a module (python -m): its spec by name, not by address.
INTROSPECT_MODULE = """\
import sys
main = sys.modules["__main__"]
print("argv", sys.argv)
print("name", __name__, main.__dict__ is globals())
print("file", __file__, __cached__, __spec__.name, __spec__.origin, __package__)
print("loader", type(__loader__).__name__, __loader__.name, __loader__.path)
print("globals", sorted(globals()))
print("path0", sys.path[0])
print("path", sys.path)
"""

class RunTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        os.mkdir(os.path.join(self.dir, "scripts"))
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("XSALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")}

    def write(self, relpath, text):
        path = os.path.join(self.dir, relpath)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
        return relpath

    def run_py(self, *argv, env=None):
        return subprocess.run([sys.executable, *argv], cwd=self.dir, env=env or self.env, capture_output=True,
                              text=True)

    def assert_same_as_python(self, script, *args):
        """python -m xsalloc.run SCRIPT ARGS prints and ends exactly as python SCRIPT ARGS; returns the result."""
        plain = self.run_py(script, *args)
        run = self.run_py("-m", "xsalloc.run", script, *args)
        self.assertEqual((run.returncode, run.stdout, run.stderr), (plain.returncode, plain.stdout, plain.stderr))
        return run

    def test_argv_main_file_globals_and_path(self):
        script = self.write("scripts/train.py", INTROSPECT)
        r = self.assert_same_as_python(script, "--epochs", "3", "-m", "x y")
        self.assertIn("argv ['scripts/train.py', '--epochs', '3', '-m', 'x y']", r.stdout)
        self.assertIn("name __main__ True", r.stdout)
        self.assertIn(f"path0 {os.path.realpath(os.path.join(self.dir, 'scripts'))}", r.stdout)
        self.assertEqual(r.returncode, 0)

    def test_safe_path_adds_no_directory(self):
        script = self.write("scripts/train.py", INTROSPECT)
        plain = self.run_py("-P", script)
        run = self.run_py("-P", "-m", "xsalloc.run", script)
        self.assertEqual((run.returncode, run.stdout, run.stderr), (plain.returncode, plain.stdout, plain.stderr))
        self.assertNotIn(os.path.join(self.dir, "scripts"), run.stdout.split("path ")[-1])

    def test_path0_is_the_linked_scripts_directory(self):
        self.write("scripts/train.py", INTROSPECT + "import helper; print(helper.X)\n")
        self.write("scripts/helper.py", "X = 'helper beside the script'\n")
        os.symlink(os.path.join("scripts", "train.py"), os.path.join(self.dir, "link.py"))
        r = self.assert_same_as_python("link.py")
        self.assertIn("helper beside the script", r.stdout)

    def test_exit_status(self):
        script = self.write("scripts/exit.py", """\
            import sys
            print("before")
            sys.exit(int(sys.argv[1]) if sys.argv[1].isdigit() else sys.argv[1])
            """)
        self.assertEqual(self.assert_same_as_python(script, "3").returncode, 3)
        self.assertEqual(self.assert_same_as_python(script, "0").returncode, 0)
        r = self.assert_same_as_python(script, "giving up")
        self.assertEqual((r.returncode, r.stderr), (1, "giving up\n"))

    def test_uncaught_exception_traceback_and_status(self):
        script = self.write("scripts/fail.py", """\
            def inner():
                raise ValueError("bad batch")

            try:
                inner()
            except ValueError as e:
                raise RuntimeError("training failed") from e
            """)
        r = self.assert_same_as_python(script)
        self.assertEqual(r.returncode, 1)
        self.assertIn('fail.py", line 2, in inner', r.stderr)
        self.assertTrue(r.stderr.endswith("RuntimeError: training failed\n"), r.stderr)
        self.assertNotIn("xsalloc", r.stderr)
        self.assertNotIn("runpy", r.stderr)

    def test_syntax_error(self):
        script = self.write("scripts/broken.py", "def (\n")
        r = self.assert_same_as_python(script)
        self.assertEqual(r.returncode, 1)
        self.assertIn("SyntaxError", r.stderr)
        self.assertNotIn("Traceback", r.stderr)

    def test_spawned_processes_find_the_scripts_functions(self):
        script = self.write("scripts/pool.py", """\
            import multiprocessing

            def square(x):
                return x * x

            if __name__ == "__main__":
                with multiprocessing.get_context("spawn").Pool(2) as pool:
                    print(pool.map(square, [1, 2, 3]))
            """)
        self.assertEqual(self.assert_same_as_python(script).stdout, "[1, 4, 9]\n")

    def test_usage_and_missing_script(self):
        r = self.run_py("-m", "xsalloc.run")
        self.assertEqual(r.returncode, 2)
        self.assertIn("usage: python -m xsalloc.run SCRIPT", r.stderr)
        r = self.run_py("-m", "xsalloc.run", "no_such.py")
        self.assertEqual(r.returncode, 2)
        self.assertIn("can't open file", r.stderr)

    def site_env(self, **kw):
        """The environment with the stand-ins' directory first on PYTHONPATH and a fresh extension cache."""
        site = os.path.join(self.dir, "site")
        return dict(self.env, PYTHONPATH=site + os.pathsep + self.env["PYTHONPATH"],
                    TORCH_EXTENSIONS_DIR=os.path.join(self.dir, "ext"), **kw)

    def test_torch_allocator_before_the_first_line(self):
        fake_site.write(os.path.join(self.dir, "site"))
        script = self.write("scripts/torch_train.py", """\
            import torch
            import xsalloc.torch
            assert torch.cuda.memory.installed == "the adapter", "xsalloc is not torch's allocator"
            assert xsalloc.torch.adapter_in_use()
            print("on xsalloc")
            """)
        env = self.site_env()
        r = self.run_py("-m", "xsalloc.run", script, env=env)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, "on xsalloc\n", ""))
        plain = self.run_py(script, env=env)
        self.assertIn("xsalloc is not torch's allocator", plain.stderr, "the stand-in can tell")

    def test_no_adapter_stops_the_job_before_the_script_saying_why(self):
        fake_site.write(os.path.join(self.dir, "site"), cpp_extension=False)  # nothing can build it
        script = self.write("scripts/train.py", "print('the script ran')\n")
        r = self.run_py("-m", "xsalloc.run", script, env=self.site_env())
        self.assertEqual((r.returncode, r.stdout), (1, ""))
        self.assertTrue(r.stderr.startswith("xsalloc.run: xsalloc cannot become the allocator, so the program does "
                                            "not start: xsalloc: the torch adapter cannot be used"), r.stderr)
        self.assertIn("XSALLOC_TORCH_ADAPTER=0", r.stderr)
        self.assertNotIn("Traceback", r.stderr)

    def test_cupy_allocator_when_cupy_is_imported(self):
        fake_site.write(os.path.join(self.dir, "site"), torch=False, cupy=True)
        for find_first in ("", "import importlib.util; assert importlib.util.find_spec('cupy') is not None\n"):
            script = self.write("scripts/cupy_job.py", find_first + textwrap.dedent("""\
                import sys
                assert "cupy" not in sys.modules, "imported before the script asked for it"
                import cupy
                import xsalloc
                assert cupy.cuda.allocator is not None, "xsalloc is not CuPy's allocator"
                assert type(cupy.__loader__).__name__ == "SourceFileLoader", "cupy keeps its own loader"
                mp = cupy.cuda.allocator(3 << 20)
                print(xsalloc.memory_stats(0)["allocated_bytes.all.current"])
                """))
            env = self.site_env()
            r = self.run_py("-m", "xsalloc.run", script, env=env)
            self.assertEqual((r.returncode, r.stdout, r.stderr), (0, f"{3 * MiB}\n", ""), find_first)
            plain = self.run_py(script, env=env)
            self.assertIn("xsalloc is not CuPy's allocator", plain.stderr, "the stand-in can tell")

    def test_module_targets_run_as_python_dash_m(self):
        self.write("pkg/__init__.py", "")
        self.write("pkg/__main__.py", INTROSPECT_MODULE + "print('package main')\n")
        self.write("pkg/tool.py", INTROSPECT_MODULE + "import sys\nsys.exit(int(sys.argv[1]))\n")
        self.write("pkg/fails.py", "def f():\n    raise ValueError('bad input')\nf()\n")
        for argv, status in ((["pkg", "--x", "1"], 0), (["pkg.tool", "5"], 5)):
            plain = self.run_py("-m", *argv)
            run = self.run_py("-m", "xsalloc.run", "-m", *argv)
            self.assertEqual((run.returncode, run.stdout, run.stderr), (plain.returncode, plain.stdout, plain.stderr))
            self.assertEqual(run.returncode, status)
            self.assertIn("name __main__ True", run.stdout)
        plain, run = self.run_py("-m", "pkg.fails"), self.run_py("-m", "xsalloc.run", "-m", "pkg.fails")
        self.assertEqual((run.returncode, run.stdout), (1, ""))
        self.assertTrue(run.stderr.endswith("ValueError: bad input\n") and plain.stderr.endswith("ValueError: bad input\n"))
        self.assertIn('fails.py", line 2, in f', run.stderr)
        self.assertNotIn("xsalloc", run.stderr)
        for missing in ("no_such_module", "pkg.no_such"):
            plain, run = self.run_py("-m", missing), self.run_py("-m", "xsalloc.run", "-m", missing)
            self.assertEqual((run.returncode, run.stderr), (plain.returncode, plain.stderr))
            self.assertIn("No module named", run.stderr)

    def test_no_gpu_runs_the_script_with_one_notice(self):
        fake_site.write(os.path.join(self.dir, "site"))
        script = self.write("scripts/cpu.py", """\
            import torch
            print("allocator", torch.cuda.memory.installed)
            """)
        env = self.site_env(CUDA_VISIBLE_DEVICES="")
        env.pop("XSA_DRIVER")  # taken at its word otherwise
        plain = self.run_py(script, env=env)
        r = self.run_py("-m", "xsalloc.run", script, env=env)
        self.assertEqual((r.returncode, r.stdout), (plain.returncode, plain.stdout))
        self.assertEqual(r.stdout, "allocator None\n")
        self.assertEqual(r.stderr.splitlines(), [
            "xsalloc.run: CUDA_VISIBLE_DEVICES='' hides every GPU: the program runs as python runs it, without "
            "xsalloc (on PyTorch's and CuPy's own allocators)"])


if __name__ == "__main__":
    unittest.main()
