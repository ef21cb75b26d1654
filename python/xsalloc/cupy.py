"""CuPy on xsalloc: use() makes libxsalloc.so CuPy's device memory allocator.

    import cupy
    import xsalloc.cupy
    xsalloc.cupy.use()

Design: cupy.cuda.set_allocator takes a function size -> MemoryPointer. Ours
allocates with xsa_ctx_malloc on CuPy's current device and stream and wraps
the pointer in a cupy.cuda.memory.UnownedMemory whose owner frees it with
xsa_ctx_free when CuPy drops the last reference (the array is garbage
collected). The block then returns to xsalloc's cache for that stream, as in
PyTorch. On out-of-memory, unreachable arrays may still hold memory, so the
allocation is retried once after gc.collect() (what CuPy's own pool does)
before cupy.cuda.memory.OutOfMemoryError is raised.
"""

import ctypes
import gc
import sys

from . import _lib

_state = {}  # "lib", "cupy" once use() ran


def _import_cupy():
    try:
        import cupy
    except ImportError as e:
        raise ImportError(f"xsalloc.cupy needs CuPy, and importing cupy failed: {e}") from e
    return cupy


class _Allocation:
    """Owner of one xsalloc block: frees it when CuPy's memory object goes away."""

    __slots__ = ("ptr",)

    def __init__(self, ptr):
        self.ptr = ptr

    def __del__(self):
        lib = _state.get("lib")
        if lib is None or self.ptr is None:
            return
        try:
            st = lib.cdll.xsa_ctx_free(self.ptr)
        except Exception:  # interpreter shutdown: ctypes may be half torn down
            return
        if st != _lib.SUCCESS:
            sys.stderr.write(f"xsalloc: freeing a CuPy buffer failed: {lib.last_error()}\n")


def _try_malloc(lib, size, device, stream):
    p = ctypes.c_void_p()
    st = lib.cdll.xsa_ctx_malloc(ctypes.byref(p), size, device, stream)
    return st, p.value


def _malloc(size):
    lib, cupy = _state["lib"], _state["cupy"]
    memory = cupy.cuda.memory
    device = cupy.cuda.runtime.getDevice()
    if size == 0:
        return memory.MemoryPointer(memory.UnownedMemory(0, 0, None, device), 0)
    stream = cupy.cuda.get_current_stream().ptr
    st, ptr = _try_malloc(lib, size, device, stream)
    if st == _lib.ERROR_OUT_OF_MEMORY:
        gc.collect()
        st, ptr = _try_malloc(lib, size, device, stream)
    if st == _lib.ERROR_OUT_OF_MEMORY:
        detail = lib.last_error()
        total = lib.stats(device).reserved_bytes[0].current
        err = memory.OutOfMemoryError(size, total)
        err.args = (f"{err.args[0]} {detail}",)  # xsalloc's report: PyTorch's text, as in C
        raise err
    lib.check(st, f"xsa_malloc({size}, device {device})")
    return memory.MemoryPointer(memory.UnownedMemory(ptr, size, _Allocation(ptr), device), 0)


def use(conf=None):
    """Makes xsalloc CuPy's allocator (cupy.cuda.set_allocator).

    conf: settings in PYTORCH_CUDA_ALLOC_CONF syntax, None for the environment's
    (PyTorch's variable with XSALLOC_CONF over it) or for the configuration
    the library already has (e.g. from xsalloc.torch.use()). Touches no CUDA.
    """
    cupy = _import_cupy()
    lib = _lib.load()
    lib.configure(conf)  # the driver starts at the first allocation, after CuPy's own start
    lib.prefer_real_driver("CuPy")
    _state.update(lib=lib, cupy=cupy)
    cupy.cuda.set_allocator(_malloc)

