"""Stand-ins for torch and cupy: written as packages that child processes import from a
directory on PYTHONPATH (tests/python/test_run.py, test_children.py, test_adapter_build.py),
and their shared classes for the in-process stand-ins of test_xsalloc.py (`classes`).

Design: just what xsalloc.run, xsalloc.torch and xsalloc.cupy touch, each
telling whether xsalloc became its allocator. The classes both kinds share
(torch's pluggable allocator and the hooks its native allocator takes,
cupy's memory objects and its out-of-memory error) are one source text,
written into the packages and executed for test_xsalloc.py.
torch.utils.cpp_extension.load stands in for the adapter's build at first
use: it builds nothing, but it behaves as torch's does where the tests
look. It skips what is built already (a 'built' file in the build
directory), holds torch's FileBaton (a 'lock' file there) while it
'builds' for $FAKE_BUILD_S seconds, appends its pid to 'builds' there,
and gives a stand-in adapter module whose install() makes "the adapter"
torch's allocator. $FAKE_TORCH_VERSION is torch.__version__.
"""

import os
import textwrap

# torch.cuda.memory.CUDAPluggableAllocator as xsalloc.torch uses it: it
# loads the library's malloc and free as torch does, and its allocator()
# takes the set_* hooks (recorded by name).
PLUGGABLE = """\
import ctypes

class Native:
    def __init__(self):
        self.hooks = {}

    def __getattr__(self, name):
        if name.startswith("set_"):
            return lambda address: self.hooks.__setitem__(name, address)
        raise AttributeError(name)

class CUDAPluggableAllocator:
    def __init__(self, path, alloc_fn_name, free_fn_name):
        so = ctypes.CDLL(path)  # what torch does
        self.fns = [ctypes.cast(getattr(so, n), ctypes.c_void_p).value for n in (alloc_fn_name, free_fn_name)]
        self.native = Native()

    def allocator(self):
        return self.native
"""

# cupy.cuda.memory's classes xsalloc.cupy uses.
CUPY_MEMORY = """\
class UnownedMemory:
    def __init__(self, ptr, size, owner, device_id):
        self.ptr, self.size, self._owner, self.device_id = ptr, size, owner, device_id

class MemoryPointer:
    def __init__(self, mem, offset):
        self.mem, self.ptr = mem, mem.ptr + offset

class OutOfMemoryError(MemoryError):
    def __init__(self, size, total, limit=0):
        super().__init__(f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes).")
"""


def classes():
    """The shared stand-in classes, by name (for in-process stand-ins)."""
    ns = {}
    exec(PLUGGABLE, ns)
    exec(CUPY_MEMORY, ns)
    return ns


FAKE_TORCH = """\
import os, types
""" + PLUGGABLE + """
__version__ = os.environ.get("FAKE_TORCH_VERSION", "2.99.0+fake")
version = types.SimpleNamespace(cuda="13.0")

memory = types.SimpleNamespace(installed=None, CUDAPluggableAllocator=CUDAPluggableAllocator,
                               memory_stats_as_nested_dict=None)
memory.change_current_allocator = lambda allocator: setattr(memory, "installed", allocator)
memory._get_current_allocator = lambda: memory.installed
cuda = types.SimpleNamespace(memory=memory, is_initialized=lambda: False,
                             _get_device_index=lambda device, optional=False: 0)
"""

FAKE_CPP_EXTENSION = """\
import os, time, types

def load(name, sources, build_directory, is_python_module=True, **kw):
    if not os.path.exists(os.path.join(build_directory, "built")):
        baton = os.path.join(build_directory, "lock")  # torch's FileBaton
        open(baton, "x").close()
        time.sleep(float(os.environ.get("FAKE_BUILD_S", "0")))
        with open(os.path.join(build_directory, "builds"), "a") as f:
            f.write(f"{os.getpid()}\\n")
        open(os.path.join(build_directory, "built"), "w").close()
        os.remove(baton)
    import torch
    module = types.SimpleNamespace(name=name)
    module.install = lambda: setattr(torch.cuda.memory, "installed", "the adapter")
    module.sync_torch_settings = lambda: False
    return module
"""

FAKE_CUPY = CUPY_MEMORY + """
import types

memory = types.SimpleNamespace(UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
                               OutOfMemoryError=OutOfMemoryError)
cuda = types.SimpleNamespace(memory=memory, allocator=None, runtime=types.SimpleNamespace(getDevice=lambda: 0),
                             get_current_stream=lambda: types.SimpleNamespace(ptr=0))
cuda.set_allocator = lambda fn: setattr(cuda, "allocator", fn)
"""


def write(root, torch=True, cpp_extension=True, cupy=False):
    """The stand-in packages under root (a directory to put on PYTHONPATH); returns root."""
    files = {}
    if torch:
        files["torch/__init__.py"] = FAKE_TORCH
    if torch and cpp_extension:
        files["torch/utils/__init__.py"] = ""
        files["torch/utils/cpp_extension.py"] = FAKE_CPP_EXTENSION
    if cupy:
        files["cupy/__init__.py"] = FAKE_CUPY
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(textwrap.dedent(text))
    return root
