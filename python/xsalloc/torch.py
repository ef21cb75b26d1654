"""PyTorch on xsalloc: use() makes libxsalloc.so torch's CUDA allocator.

    import torch
    import xsalloc.torch
    xsalloc.torch.use()          # before the first CUDA tensor

Design: the allocator torch gets is the C++ adapter (csrc/
beside this file): torch's own CUDAAllocator interface over xsalloc's C
API, compiled once against the installed torch with
torch.utils.cpp_extension (torch caches the build) and linked to this
package's library. Through it torch's statistics, snapshots and
_record_memory_history (with Python frames), torch.OutOfMemoryError, CUDA
graphs, torch.compile(mode="reduce-overhead")'s pool checks and
torch.cuda.MemPool reach xsalloc with no patching. Where the adapter cannot
be built (no C++ compiler, say), use() falls back to
torch.cuda.memory.CUDAPluggableAllocator over the library's xsa_torch_*
entry points, with one warning naming what is lost; that interface has no
statistics hooks, so use() then points torch.cuda's statistics functions
(memory_stats and everything built on it; the reset functions) and
torch.accelerator's (which find the allocator registered with c10, never
the pluggable one) at xsalloc's (patch_torch_stats). XSALLOC_TORCH_ADAPTER=0 (or use(adapter=False)) asks
for the pluggable path. torch's allocator can only be swapped before CUDA
is initialised; use() checks that first and says so. On both paths use()
wraps torch's settings setter (torch._C._accelerator_setAllocatorSettings,
which torch.cuda.memory._set_allocator_settings calls at call time; the
older torch._C._cuda_cudaCachingAllocator_set_allocator_settings): torch
checks and keeps the string first, then xsalloc applies it
(xsalloc.set_allocator_settings; docs/configuration.md, "Changing settings at run
time"). The Python function is wrapped rather than torch's C++ parser hook,
whose storage an extension cannot be sure to share with torch.
"""

import glob
import hashlib
import os
import warnings

import xsalloc
from . import _lib

_installed = None  # torch's allocator object: kept alive for the life of the process
_adapter = None    # the adapter's extension module, when it is in use


def _import_torch():
    try:
        import torch
    except ImportError as e:
        raise ImportError(f"xsalloc.torch needs PyTorch with CUDA support, and importing torch failed: {e}") from e
    return torch


def _device_index(device):
    """torch's device argument (None: current device, int, 'cuda:1', torch.device) as an index."""
    torch = _import_torch()
    if device is None and not torch.cuda.is_initialized():
        return 0  # what current_device() would say, without initialising CUDA
    return torch.cuda._get_device_index(device, optional=True)


def use(conf=None, patch_torch_stats=True, adapter=None):
    """Makes xsalloc torch's CUDA allocator; returns torch's allocator object.

    conf: settings in PYTORCH_CUDA_ALLOC_CONF syntax, None for the environment's
    (XSALLOC_CONF, else PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF).
    patch_torch_stats: on the pluggable path only, point torch.cuda.memory_stats
    and the functions built on it at xsalloc's statistics. adapter: True to
    require the C++ adapter, False for the pluggable path, None for
    $XSALLOC_TORCH_ADAPTER (0: pluggable) or else the adapter with the
    pluggable path as fallback. Must run before torch initialises CUDA; a
    second call returns the allocator installed first.
    """
    global _installed, _adapter
    torch = _import_torch()
    if _installed is not None:
        if conf is not None:
            raise RuntimeError("xsalloc.torch.use(conf): xsalloc is already torch's allocator; conf applies only to the first use()")
        return _installed
    if torch.cuda.is_initialized():
        raise RuntimeError(
            "xsalloc.torch.use() must run before PyTorch initialises CUDA (the first CUDA tensor, "
            "torch.cuda.current_device(), torch.cuda.memory_allocated()...): torch cannot change its "
            "allocator afterwards. Call it right after 'import torch'."
        )
    lib = _lib.load()
    lib.init(conf)
    lib.require_real_driver("PyTorch")
    if adapter is None:
        adapter = None if os.environ.get("XSALLOC_TORCH_ADAPTER", "") not in ("0", "false", "False") else False
    module = None
    if adapter is not False:
        try:
            module = _build_adapter(torch, lib)
        except Exception as e:  # no compiler, no headers, a torch without cpp_extension...
            if adapter:
                raise
            warnings.warn(
                f"xsalloc: the torch adapter could not be built ({type(e).__name__}: {e}); using torch's "
                "CUDAPluggableAllocator instead, which loses torch's snapshots and _record_memory_history, "
                "torch.OutOfMemoryError (a failed allocation gives a tensor at address 0), "
                "torch.compile(mode='reduce-overhead') and torch.cuda.MemPool", stacklevel=2)
    if module is not None:
        module.install()
        _adapter = module
        _installed = torch.cuda.memory._get_current_allocator()
        _hook_allocator_settings(torch)
        return _installed
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib.path, "xsa_torch_malloc", "xsa_torch_free")
    native = alloc.allocator()
    for setter, fn in _lib.TORCH_HOOKS.items():
        # Older torch versions lack some setters; the hook is then torch's no-op.
        if hasattr(native, setter):
            getattr(native, setter)(lib.address(fn))
    torch.cuda.memory.change_current_allocator(alloc)
    _installed = alloc
    _hook_allocator_settings(torch)
    if patch_torch_stats:
        _patch_torch_stats(torch)
    return alloc


# torch's settings setters, newest first (torch._C functions).
_SETTINGS_SETTERS = ("_accelerator_setAllocatorSettings", "_cuda_cudaCachingAllocator_set_allocator_settings")


def _hook_allocator_settings(torch):
    """Settings changed through torch reach xsalloc: each setter torch has
    runs torch's own first (its checks and errors stay torch's), then
    xsalloc.set_allocator_settings; xsalloc's refusals raise from there."""
    C = getattr(torch, "_C", None)
    for name in _SETTINGS_SETTERS:
        torchs = getattr(C, name, None)
        if torchs is None or getattr(torchs, "_xsalloc", False):
            continue

        def set_allocator_settings(env, _torchs=torchs):
            result = _torchs(env)
            xsalloc.set_allocator_settings(env)
            return result

        set_allocator_settings._xsalloc = True
        set_allocator_settings.__doc__ = getattr(torchs, "__doc__", None)
        setattr(C, name, set_allocator_settings)


def _adapter_sources():
    """The adapter's sources (csrc/*.cpp; their headers sit beside them) and the include directory
    holding xsalloc/xsalloc.h and xsalloc/pytorch.h: the package's (pip install copies them there) or
    the source tree's include/."""
    here = os.path.dirname(os.path.abspath(__file__))
    sources = sorted(glob.glob(os.path.join(here, "csrc", "*.cpp")))
    for include in (os.path.join(here, "include"), os.path.join(os.path.dirname(os.path.dirname(here)), "include")):
        if sources and os.path.exists(os.path.join(include, "xsalloc", "pytorch.h")):
            return sources, include
    raise FileNotFoundError(f"no xsalloc/pytorch.h in {here}/include or the source tree's include/")


def _build_adapter(torch, lib):
    """Compiles the adapter against this torch (once: torch caches the build) and imports it."""
    from torch.utils import cpp_extension
    sources, include = _adapter_sources()
    libdir = os.path.dirname(os.path.abspath(lib.path))
    # One cached build per library: torch rebuilds an extension whose flags
    # changed, so two libraries under one name would rebuild at every switch.
    name = "xsalloc_torch_adapter_" + hashlib.sha1(libdir.encode()).hexdigest()[:10]
    return cpp_extension.load(
        name=name, sources=sources, extra_include_paths=[include],
        extra_cflags=["-O2"], extra_ldflags=[f"-L{libdir}", "-l:" + os.path.basename(lib.path), f"-Wl,-rpath,{libdir}"],
        with_cuda=True, verbose=False)


def adapter_in_use():
    """True when torch's allocator is the C++ adapter (not the pluggable fallback)."""
    return _adapter is not None


def _patch_torch_stats(torch):
    mem = torch.cuda.memory

    def memory_stats_as_nested_dict(device=None):
        return xsalloc.memory_stats_as_nested_dict(_device_index(device))

    def reset_peak_memory_stats(device=None):
        xsalloc.reset_peak_memory_stats(_device_index(device))

    def reset_accumulated_memory_stats(device=None):
        xsalloc.reset_accumulated_memory_stats(_device_index(device))

    # memory_stats, memory_allocated, memory_summary... look
    # memory_stats_as_nested_dict up in torch.cuda.memory's globals at call
    # time; the reset functions are also re-exported by torch.cuda.
    mem.memory_stats_as_nested_dict = memory_stats_as_nested_dict
    for name, fn in (("reset_peak_memory_stats", reset_peak_memory_stats),
                     ("reset_accumulated_memory_stats", reset_accumulated_memory_stats)):
        setattr(mem, name, fn)
        setattr(torch.cuda, name, fn)
    _patch_accelerator_stats(torch)


def _patch_accelerator_stats(torch):
    """torch.accelerator's memory API (torch 2.8 and later): memory_allocated,
    max_memory_reserved... read memory_stats in torch.accelerator.memory's
    globals at call time; it and the reset and empty_cache functions are
    re-exported by torch.accelerator."""
    acc = getattr(torch, "accelerator", None)
    mem = getattr(acc, "memory", None)
    if mem is None or not hasattr(mem, "memory_stats"):
        return

    def memory_stats(device_index=None, /):
        return xsalloc.memory_stats(_device_index(device_index))

    def reset_peak_memory_stats(device_index=None, /):
        xsalloc.reset_peak_memory_stats(_device_index(device_index))

    def reset_accumulated_memory_stats(device_index=None, /):
        xsalloc.reset_accumulated_memory_stats(_device_index(device_index))

    for name, fn in (("memory_stats", memory_stats), ("reset_peak_memory_stats", reset_peak_memory_stats),
                     ("reset_accumulated_memory_stats", reset_accumulated_memory_stats),
                     ("empty_cache", xsalloc.empty_cache)):
        setattr(mem, name, fn)
        if hasattr(acc, name):
            setattr(acc, name, fn)


def installed():
    """True once use() has made xsalloc torch's allocator."""
    return _installed is not None


def memory_stats(device=None):
    """torch.cuda.memory_stats()'s keys and values from xsalloc (device: as torch takes it)."""
    return xsalloc.memory_stats(_device_index(device))


def memory_summary(device=None, abbreviated=False):
    """torch.cuda.memory_summary()'s table from xsalloc's statistics."""
    return xsalloc.memory_summary(_device_index(device), abbreviated)


def empty_cache():
    """Releases xsalloc's cached free memory on every device (torch.cuda.empty_cache() does the same once use() ran)."""
    xsalloc.empty_cache()


def snapshot():
    """xsalloc.snapshot(): the allocator's segments and blocks."""
    return xsalloc.snapshot()
