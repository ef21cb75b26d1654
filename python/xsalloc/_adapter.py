"""Finding the torch adapter (and the pluggable path's malloc) for the torch
that is imported: the one pip install built, else a build at first use.

Design: pip install (and setup.py build_ext) builds both against the torch
it finds, beside libxsalloc.so, and writes which torch beside them
(_adapter_build.STAMP); they are loaded from the directory of the library in
use, and only for that same torch. Otherwise they are built at first use with torch.utils.cpp_extension
(C++ only: _adapter_build), into a directory of their own under
TORCH_EXTENSIONS_DIR (or torch's default) whose name holds the torch and
Python versions, the library linked and the sources' text. One process
builds while the others wait: an exclusive flock on xsalloc.lock there,
which the kernel releases when its holder dies, so a builder killed
mid-build never blocks the next. Each waiting process says so on stderr,
with its rank under torchrun. The holder of the flock is the only process
that can be inside torch's build in that directory, so a 'lock' file of
torch's found there was left by a killed builder: it is removed, and said.
When neither can be had, AdapterUnavailableError says what failed, how to
fix it and how to run without xsalloc: xsalloc never falls back silently.
"""

import contextlib
import fcntl
import importlib.util
import json
import os
import sys
import time

from . import _adapter_build as build

HERE = os.path.dirname(os.path.abspath(__file__))
WAIT_REPORT_S = 30  # a waiting process says so again every this many seconds
NAME_BYTES = 64  # the lock file holds its holder's name (_me()), blank-padded to this
NAME_WAIT_S = 1.0  # how long a waiter that finds the file blank reads it again


class AdapterUnavailableError(RuntimeError):
    """The torch adapter (or, on the pluggable path, its malloc) can be neither loaded nor built."""


def _me():
    """This process as a waiting message names it: 'rank R (pid P)' under torchrun, else 'pid P'."""
    rank = os.environ.get("RANK") or os.environ.get("LOCAL_RANK")
    return f"rank {rank} (pid {os.getpid()})" if rank is not None else f"pid {os.getpid()}"


def _say(text):
    print(f"xsalloc: {_me()}: {text}", file=sys.stderr, flush=True)


def _include_dir():
    """The directory holding xsalloc/pytorch.h: the package's (pip install copies the headers) or
    the source tree's include/."""
    for inc in (os.path.join(HERE, "include"), os.path.join(os.path.dirname(os.path.dirname(HERE)), "include")):
        if os.path.exists(os.path.join(inc, "xsalloc", "pytorch.h")):
            return inc
    raise AdapterUnavailableError(f"no xsalloc/pytorch.h in {HERE}/include or the source tree's include/")


def prebuilt(torch, what, libdir):
    """(path, None) of the file pip install built for this torch beside the library (libdir),
    or (None, why there is none); what: 'adapter' or 'pluggable'."""
    try:
        with open(os.path.join(libdir, build.STAMP)) as f:
            built = json.load(f)
    except (OSError, ValueError):
        return None, "pip install built no torch adapter here (torch was not importable then, or the build was skipped)"
    if built.get("torch") != torch.__version__:
        return None, f"pip install built it for torch {built.get('torch')}, and this is torch {torch.__version__}"
    name = build.ADAPTER if what == "adapter" else build.PLUGGABLE
    path = os.path.join(libdir, name + ".so")
    if what not in built.get("built", []) or not os.path.exists(path):
        return None, f"pip install did not build {name}.so"
    return path, None


def _holder(fd):
    """The name the lock's holder wrote in the lock file. A holder writes it right after it took the
    lock, so a blank file is read again for up to NAME_WAIT_S before it says "another process"."""
    deadline = time.monotonic() + NAME_WAIT_S
    while True:
        name = os.pread(fd, NAME_BYTES, 0).decode(errors="replace").strip()
        if name or time.monotonic() >= deadline:
            return name or "another process"
        time.sleep(0.02)


@contextlib.contextmanager
def build_lock(build_dir):
    """Holds the build directory's flock, waiting (and saying so) while another process holds it."""
    os.makedirs(build_dir, exist_ok=True)
    path = os.path.join(build_dir, "xsalloc.lock")
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    held = False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _say(f"waiting for {_holder(fd)} to finish building the torch adapter in {build_dir}")
            start = last = time.monotonic()
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    time.sleep(0.2)
                if time.monotonic() - last >= WAIT_REPORT_S:
                    last = time.monotonic()
                    _say(f"still waiting for the torch adapter's build ({last - start:.0f} s)")
            _say(f"done waiting ({time.monotonic() - start:.1f} s)")
        held = True
        os.pwrite(fd, _me().encode()[:NAME_BYTES].ljust(NAME_BYTES), 0)  # one write: never read half done
        stale = os.path.join(build_dir, "lock")  # torch's FileBaton: no live builder can hold it now
        if os.path.exists(stale):
            os.remove(stale)
            _say(f"removed {stale}, left by a build that was killed before it finished; building again")
        yield
    finally:
        if held:
            os.pwrite(fd, b" " * NAME_BYTES, 0)  # a process that waits later names no one gone
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def _build_root(cpp_extension):
    root = os.environ.get("TORCH_EXTENSIONS_DIR")
    if root:
        return root
    default = getattr(cpp_extension, "get_default_build_root", None)
    return default() if default else os.path.join(os.path.expanduser("~"), ".cache", "torch_extensions")


def jit(torch, lib, what):
    """Builds (once for all processes: build_lock) and loads the adapter module, or the pluggable
    library's path, for this torch."""
    why = build.why_not(torch)
    if why:
        raise RuntimeError(why)
    from torch.utils import cpp_extension
    csrc = os.path.join(HERE, "csrc")
    libdir = os.path.dirname(os.path.abspath(lib.path))
    key = build.cache_key(torch, csrc, libdir)
    adapter = what == "adapter"
    name = f"xsalloc_torch_adapter_{key}" if adapter else f"xsalloc_pluggable_{key}"
    build_dir = os.path.join(_build_root(cpp_extension), name)
    libs = ["-l" + n for n in build.torch_cuda_libraries(torch)] if adapter else []
    with build_lock(build_dir):
        module = cpp_extension.load(
            name=name, sources=build.sources(csrc, build.ADAPTER_SOURCES if adapter else build.PLUGGABLE_SOURCES),
            extra_include_paths=[_include_dir()] + build.cuda_include_dirs(torch), extra_cflags=["-O2"],
            extra_ldflags=build.link_args(torch, libdir, libdir) + libs, build_directory=build_dir, with_cuda=False,
            is_python_module=adapter, verbose=False)
    return module if adapter else os.path.join(build_dir, name + ".so")


def _refusal(what, prebuilt_why, error):
    fix = ("install xsalloc again in this environment, after torch (pip install --no-build-isolation . builds "
           "it then), or make the build at first use work: a C++ compiler, ninja, the CUDA runtime headers (a "
           "CUDA toolkit in CUDA_HOME, or the nvidia pip packages torch depends on) and a writable "
           "TORCH_EXTENSIONS_DIR")
    if what == "adapter":
        return (f"xsalloc: the torch adapter cannot be used: {prebuilt_why}, and building it now failed "
                f"({type(error).__name__}: {error}). xsalloc does not fall back to torch's CUDAPluggableAllocator "
                "unasked: that path loses torch's snapshots and memory history, torch.compile's graph pools "
                f"and MemPool. To fix: {fix}. To run without xsalloc: python SCRIPT instead of python -m "
                "xsalloc.run SCRIPT (or no xsalloc.torch.use()). To take the pluggable path knowingly: "
                "XSALLOC_TORCH_ADAPTER=0.")
    return (f"xsalloc: the pluggable path (XSALLOC_TORCH_ADAPTER=0) needs its malloc, which raises "
            f"torch.OutOfMemoryError where torch's CUDAPluggableAllocator would hand out a tensor at address 0: "
            f"{prebuilt_why}, and building it now failed ({type(error).__name__}: {error}). To fix: {fix}. To run "
            "without xsalloc: python SCRIPT instead of python -m xsalloc.run SCRIPT.")


def load_adapter(torch, lib):
    """The adapter module for this torch: pip install's, else built now (AdapterUnavailableError)."""
    path, why = prebuilt(torch, "adapter", os.path.dirname(os.path.abspath(lib.path)))
    if path:
        spec = importlib.util.spec_from_file_location("xsalloc." + build.ADAPTER, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    try:
        return jit(torch, lib, "adapter")
    except Exception as e:  # no compiler, no ninja, no headers, an unwritable cache, another torch's API...
        raise AdapterUnavailableError(_refusal("adapter", why, e)) from e


def load_pluggable(torch, lib):
    """(path, malloc name, free name) of the pluggable path's functions for this torch."""
    path, why = prebuilt(torch, "pluggable", os.path.dirname(os.path.abspath(lib.path)))
    if not path:
        try:
            path = jit(torch, lib, "pluggable")
        except Exception as e:
            raise AdapterUnavailableError(_refusal("pluggable", why, e)) from e
    return (path,) + build.PLUGGABLE_FUNCTIONS
