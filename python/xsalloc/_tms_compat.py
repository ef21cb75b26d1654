"""The torch_memory_saver internals that its own tests reach, and nothing more.

torch_memory_saver's test/examples/cpu_backup.py reads, besides the public API:

    torch_memory_saver._impl._binary_wrapper.cdll.tms_get_cpu_backup_backend()  # b"pinned" or b"mmap"
    torch_memory_saver._impl._binary_wrapper.cdll.cudaHostGetFlags              # is a host copy still allocated?
    torch_memory_saver._impl._binary_wrapper.cdll.cudaGetLastError
    torch_memory_saver._impl._mem_pools.pop((tag, True, False, "pinned", device))
    torch_memory_saver._impl._with_region_config(tag=..., enable_cpu_backup=..., cpu_backup_backend=...)

Design: a compatibility surface for exactly those, so that those tests run
unchanged against xsalloc.memory_saver; not an API. _mem_pools is the
saver's own dict of tagged MemPools (popping one drops the saver's
reference); _with_region_config is the saver's thread region configuration
(the C-level tag region, xsalloc.elastic.region, with that backend);
tms_get_cpu_backup_backend answers from it as torch_memory_saver's does (the
innermost explicit backend, else $TMS_INIT_CPU_BACKUP_BACKEND, else pinned);
cudaHostGetFlags and cudaGetLastError are the CUDA runtime's own, from the
libcudart PyTorch loaded (xsalloc's pinned host copies come from
cuMemHostAlloc, which the runtime's cudaHostGetFlags knows). Any other name
of torch_memory_saver's C library is an AttributeError saying so.
"""

import ctypes
import functools
import sys
import types

_RUNTIME_NAMES = ("cudaHostGetFlags", "cudaGetLastError")


@functools.lru_cache(maxsize=None)
def cuda_runtime():
    """The CUDA runtime PyTorch loaded: libcudart.so.<torch.version.cuda's major>, else libcudart.so."""
    cuda = getattr(getattr(sys.modules.get("torch"), "version", None), "cuda", None)
    names = ([f"libcudart.so.{cuda.split('.')[0]}"] if cuda else []) + ["libcudart.so"]
    tried = []
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            tried.append(f"{name} ({e})")
    raise AttributeError("xsalloc.memory_saver: the CUDA runtime could not be loaded for "
                         f"{' and '.join(_RUNTIME_NAMES)}; tried " + "; ".join(tried))


class Cdll:
    """torch_memory_saver's C library, as far as its tests read it."""

    def __init__(self, saver):
        self._saver = saver

    def tms_get_cpu_backup_backend(self):
        return self._saver._current_backend().encode()

    def __getattr__(self, name):
        if name in _RUNTIME_NAMES:
            return getattr(cuda_runtime(), name)
        raise AttributeError(f"xsalloc.memory_saver has no torch_memory_saver C function {name!r}: its "
                             "compatibility surface covers only what torch_memory_saver's own tests read "
                             "(xsalloc/_tms_compat.py)")


class Impl:
    """torch_memory_saver._impl, as far as its tests read it."""

    def __init__(self, saver):
        self._mem_pools = saver._mem_pools
        self._binary_wrapper = types.SimpleNamespace(cdll=Cdll(saver))
        self._with_region_config = saver._with_region_config
