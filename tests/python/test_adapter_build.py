"""The torch adapter's build at first use (xsalloc._adapter), and what pip install built.

Design: launcher processes run against the stand-in torch of fake_site.py,
whose cpp_extension.load behaves as torch's does where it matters here (it
skips a finished build, holds torch's 'lock' file while it builds, counts
its builds). On a cold cache, ranks started together build once and every
other rank says it is waiting; a builder killed mid-build leaves torch's
lock behind, and the next start removes it, says so and builds (it never
hangs: the flock of the killed process went with it); two torch versions
never share a build. In process: the files pip install built are used for
their own torch only, and the CUDA runtime's headers are found in the
nvidia pip packages beside torch when there is no toolkit.
"""

import contextlib
import fcntl
import glob
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import types
import unittest

import fake_site
from xsalloc import _adapter, _adapter_build

SCRIPT = "import torch\nassert torch.cuda.memory.installed == 'the adapter'\nprint('on xsalloc')\n"


class FirstUseBuildTest(unittest.TestCase):
    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        site = fake_site.write(os.path.join(self.dir, "site"))
        self.ext = os.path.join(self.dir, "ext")
        self.env = {k: v for k, v in os.environ.items() if not k.endswith("_ALLOC_CONF") and k != "XSALLOC_CONF"}
        self.env.update(PYTHONPATH=site + os.pathsep + os.environ["PYTHONPATH"], TORCH_EXTENSIONS_DIR=self.ext)
        self.script = os.path.join(self.dir, "train.py")
        with open(self.script, "w") as f:
            f.write(SCRIPT)

    def start(self, **env):
        return subprocess.Popen([sys.executable, "-m", "xsalloc.run", self.script], env=dict(self.env, **env),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(self, p):
        out, err = p.communicate(timeout=60)
        self.assertEqual((p.returncode, out), (0, "on xsalloc\n"), err)
        return err

    def builds(self):
        """{build directory: the pids that built there}."""
        out = {}
        for d in glob.glob(os.path.join(self.ext, "*")):
            path = os.path.join(d, "builds")
            with open(path) if os.path.exists(path) else open(os.devnull) as f:
                out[os.path.basename(d)] = f.read().split()
        return out

    def test_ranks_on_a_cold_cache_build_once_and_the_others_say_they_wait(self):
        procs = [self.start(RANK=str(r), FAKE_BUILD_S="1.5") for r in range(4)]
        errs = [self.finish(p) for p in procs]
        (name, pids), = self.builds().items()
        self.assertTrue(name.startswith("xsalloc_torch_adapter_"))
        self.assertEqual(len(pids), 1, "one build")
        builder = [p.pid for p in procs].index(int(pids[0]))
        self.assertEqual(errs[builder], "", "the builder says nothing")
        for r, err in enumerate(errs):
            if r != builder:
                self.assertIn(f"xsalloc: rank {r} (pid {procs[r].pid}): waiting for rank {builder} "
                              f"(pid {procs[builder].pid}) to finish building the torch adapter in {self.ext}/", err)
                self.assertIn("done waiting", err)

    def test_a_killed_builder_is_recovered_with_a_message(self):
        killed = self.start(FAKE_BUILD_S="60")
        deadline = time.monotonic() + 30
        while not glob.glob(os.path.join(self.ext, "*", "lock")) and time.monotonic() < deadline:
            time.sleep(0.05)  # torch's lock is held: the build is under way
        (baton,) = glob.glob(os.path.join(self.ext, "*", "lock"))
        killed.send_signal(signal.SIGKILL)
        killed.communicate()
        self.assertTrue(os.path.exists(baton), "what a killed build leaves")
        err = self.finish(self.start())
        self.assertIn(f"removed {baton}, left by a build that was killed before it finished; building again", err)
        (pids,) = self.builds().values()
        self.assertEqual(len(pids), 1, "built by the second start")

    def test_each_torch_version_has_a_build_of_its_own(self):
        for version in ("2.99.0+fake", "2.98.1+fake", "2.99.0+fake"):
            self.finish(self.start(FAKE_TORCH_VERSION=version))
        self.assertEqual(sorted(len(pids) for pids in self.builds().values()), [1, 1], "two builds, one reused")


class BuildLockTest(unittest.TestCase):
    """In process: the holder's name in the lock file, as a waiter reads it (the race behind
    'waiting for another process' where a rank was expected)."""

    def setUp(self):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        self.dir = tmp.name
        self.path = os.path.join(self.dir, "xsalloc.lock")

    def hold(self, name_after_s, release_after_s):
        """Another holder (its own open file, so its flock excludes build_lock's): it took the lock with
        the file blank, writes its name after name_after_s and lets go after release_after_s."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        fcntl.flock(fd, fcntl.LOCK_EX)
        os.pwrite(fd, b" " * _adapter.NAME_BYTES, 0)

        def later():
            time.sleep(name_after_s)
            os.pwrite(fd, b"rank 7 (pid 1)".ljust(_adapter.NAME_BYTES), 0)
            time.sleep(release_after_s - name_after_s)
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

        t = threading.Thread(target=later)
        t.start()
        self.addCleanup(t.join)

    def wait_for_lock(self):
        err = io.StringIO()
        with contextlib.redirect_stderr(err), _adapter.build_lock(self.dir):
            with open(self.path, "rb") as f:
                held = f.read().strip().decode()
        with open(self.path, "rb") as f:
            after = f.read()
        return err.getvalue(), held, after

    def test_a_waiter_names_a_holder_that_had_not_written_its_name_yet(self):
        self.hold(name_after_s=0.3, release_after_s=0.6)
        err, held, after = self.wait_for_lock()
        self.assertIn(f"pid {os.getpid()}: waiting for rank 7 (pid 1) to finish building the torch adapter in "
                      f"{self.dir}", err)
        self.assertIn("done waiting", err)
        self.assertEqual(held, f"pid {os.getpid()}", "the holder's name, whole")
        self.assertEqual(after, b" " * _adapter.NAME_BYTES, "blank once let go: a later waiter names no one gone")

    def test_a_holder_that_never_names_itself_is_another_process(self):
        self.hold(name_after_s=_adapter.NAME_WAIT_S + 0.5, release_after_s=_adapter.NAME_WAIT_S + 0.7)
        err, _, _ = self.wait_for_lock()
        self.assertIn("waiting for another process to finish building", err)


class PrebuiltTest(unittest.TestCase):
    def test_pip_installs_files_serve_their_torch_only(self):
        torch = types.SimpleNamespace(__version__="2.11.0+cu130", version=types.SimpleNamespace(cuda="13.0"))
        with tempfile.TemporaryDirectory() as libdir:
            path, why = _adapter.prebuilt(torch, "adapter", libdir)
            self.assertIsNone(path)
            self.assertIn("pip install built no torch adapter here", why)
            with open(os.path.join(libdir, _adapter_build.STAMP), "w") as f:
                json.dump(dict(_adapter_build.stamp(torch), built=["adapter", "pluggable"]), f)
            for name in (_adapter_build.ADAPTER, _adapter_build.PLUGGABLE):
                open(os.path.join(libdir, name + ".so"), "w").close()
            self.assertEqual(_adapter.prebuilt(torch, "adapter", libdir),
                             (os.path.join(libdir, "_torch_adapter.so"), None))
            self.assertEqual(_adapter.prebuilt(torch, "pluggable", libdir)[0],
                             os.path.join(libdir, "libxsalloc_pluggable.so"))
            torch.__version__ = "2.12.0+cu130"
            path, why = _adapter.prebuilt(torch, "adapter", libdir)
            self.assertIsNone(path)
            self.assertEqual(why, "pip install built it for torch 2.11.0+cu130, and this is torch 2.12.0+cu130")


class CudaHeadersTest(unittest.TestCase):
    """A torch installed by pip, no toolkit: the nvidia packages beside it have the headers."""

    def test_found_in_the_nvidia_pip_packages(self):
        with tempfile.TemporaryDirectory() as site:
            os.makedirs(os.path.join(site, "torch"))
            torch = types.SimpleNamespace(__file__=os.path.join(site, "torch", "__init__.py"), __version__="x",
                                          version=types.SimpleNamespace(cuda="13.0"))
            none = os.path.join(site, "no-toolkit")
            self.assertIn("no CUDA runtime headers", _adapter_build.why_not(torch, {}, none))
            for rel in ("nvidia/cu13/include/cuda_runtime_api.h", "nvidia/cu13/lib/libcudart.so.13",
                        "nvidia/cublas/include/cublas.h"):
                os.makedirs(os.path.dirname(os.path.join(site, rel)), exist_ok=True)
                open(os.path.join(site, rel), "w").close()
            packages = [os.path.join(site, "nvidia", p, "include") for p in ("cu13", "cublas")]  # every one, sorted
            self.assertEqual(_adapter_build.cuda_include_dirs(torch, {}, none), packages)
            # CUDA 13's runtime package has no crt/ (cuda_runtime_api.h includes crt/host_defines.h)
            self.assertIn("lack crt/host_defines.h", _adapter_build.why_not(torch, {}, none))
            triton = os.path.join(site, "triton/backends/nvidia/include")
            os.makedirs(os.path.join(triton, "crt"))
            open(os.path.join(triton, "crt/host_defines.h"), "w").close()
            self.assertEqual(_adapter_build.cuda_include_dirs(torch, {}, none), packages + [triton])  # triton's copy, last
            os.makedirs(os.path.join(site, "nvidia/cu13/include/crt"))
            open(os.path.join(site, "nvidia/cu13/include/crt/host_defines.h"), "w").close()
            self.assertEqual(_adapter_build.cuda_include_dirs(torch, {}, none), packages)  # nvidia's own: no triton
            self.assertIsNone(_adapter_build.why_not(torch, {}, none))
            self.assertEqual(_adapter_build.cudart(torch, {}, none), os.path.join(site, "nvidia/cu13/lib/libcudart.so.13"))
            self.assertIn(os.path.join(site, "nvidia/cu13/lib/libcudart.so.13"),
                          _adapter_build.link_args(torch, "/lib/x", "$ORIGIN", {}, none))


if __name__ == "__main__":
    unittest.main()
