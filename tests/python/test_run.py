"""python -m xsalloc.run SCRIPT ARGS against python SCRIPT ARGS, on the simulated driver.

Design: each case writes a script into a temporary directory and runs it
both ways in child processes; stdout, stderr and the exit status must be
the same, so what the script sees (sys.argv, __name__, __file__, its globals,
sys.path[0], sys.modules['__main__']) and how it ends (exit status, message,
traceback, syntax error) are compared with the interpreter itself rather
than with expectations written here. Then stand-ins for torch and cupy,
importable from a directory on PYTHONPATH, show that xsalloc is torch's
allocator before the script's first line and CuPy's as soon as the script
imports cupy. Needs XSALLOC_LIBRARY, XSA_DRIVER=sim and the package on
PYTHONPATH (tests/python/python_test.sh sets them).
"""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

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

FAKE_TORCH = """\
import ctypes, types

class _Native:
    def __init__(self):
        self.hooks = {}

    def __getattr__(self, name):
        if name.startswith("set_"):
            return lambda address: self.hooks.__setitem__(name, address)
        raise AttributeError(name)

class _Pluggable:
    def __init__(self, path, alloc_fn_name, free_fn_name):
        so = ctypes.CDLL(path)
        self.fns = [ctypes.cast(getattr(so, n), ctypes.c_void_p).value for n in (alloc_fn_name, free_fn_name)]
        self.native = _Native()

    def allocator(self):
        return self.native

memory = types.SimpleNamespace(installed=None, CUDAPluggableAllocator=_Pluggable, memory_stats_as_nested_dict=None)
memory.change_current_allocator = lambda allocator: setattr(memory, "installed", allocator)
cuda = types.SimpleNamespace(memory=memory, is_initialized=lambda: False,
                             _get_device_index=lambda device, optional=False: 0)
"""

FAKE_CUPY = """\
import types

class UnownedMemory:
    def __init__(self, ptr, size, owner, device_id):
        self.ptr, self.size, self._owner, self.device_id = ptr, size, owner, device_id

class MemoryPointer:
    def __init__(self, mem, offset):
        self.mem, self.ptr = mem, mem.ptr + offset

memory = types.SimpleNamespace(UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer, OutOfMemoryError=MemoryError)
cuda = types.SimpleNamespace(memory=memory, allocator=None, runtime=types.SimpleNamespace(getDevice=lambda: 0),
                             get_current_stream=lambda: types.SimpleNamespace(ptr=0))
cuda.set_allocator = lambda fn: setattr(cuda, "allocator", fn)
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

    def test_torch_allocator_before_the_first_line(self):
        self.write("site/torch/__init__.py", FAKE_TORCH)
        script = self.write("scripts/torch_train.py", """\
            import ctypes
            import torch
            alloc = torch.cuda.memory.installed
            assert alloc is not None, "xsalloc is not torch's allocator"
            malloc = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)(alloc.fns[0])
            p = malloc(3 << 20, 0, None)
            print(torch.cuda.memory.memory_stats_as_nested_dict()["allocated_bytes"]["all"]["current"])
            """)
        # The stand-in has no cpp_extension: the pluggable path, asked for
        # (the fallback's warning is xsalloc.torch's test).
        env = dict(self.env, PYTHONPATH=os.path.join(self.dir, "site") + os.pathsep + self.env["PYTHONPATH"],
                   XSALLOC_TORCH_ADAPTER="0")
        r = self.run_py("-m", "xsalloc.run", script, env=env)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, f"{3 * MiB}\n", ""))
        plain = self.run_py(script, env=env)
        self.assertIn("xsalloc is not torch's allocator", plain.stderr, "the stand-in can tell")

    def test_cupy_allocator_when_cupy_is_imported(self):
        self.write("site/cupy/__init__.py", FAKE_CUPY)
        script = self.write("scripts/cupy_job.py", """\
            import sys
            assert "cupy" not in sys.modules, "imported before the script asked for it"
            import cupy
            import xsalloc
            assert cupy.cuda.allocator is not None, "xsalloc is not CuPy's allocator"
            mp = cupy.cuda.allocator(3 << 20)
            print(xsalloc.memory_stats(0)["allocated_bytes.all.current"])
            """)
        # The stand-in has no cpp_extension: the pluggable path, asked for
        # (the fallback's warning is xsalloc.torch's test).
        env = dict(self.env, PYTHONPATH=os.path.join(self.dir, "site") + os.pathsep + self.env["PYTHONPATH"],
                   XSALLOC_TORCH_ADAPTER="0")
        r = self.run_py("-m", "xsalloc.run", script, env=env)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, f"{3 * MiB}\n", ""))
        plain = self.run_py(script, env=env)
        self.assertIn("xsalloc is not CuPy's allocator", plain.stderr, "the stand-in can tell")


if __name__ == "__main__":
    unittest.main()
