"""PyTorch on xsalloc: use() makes libxsalloc.so torch's CUDA allocator.

    import torch
    import xsalloc.torch
    xsalloc.torch.use()          # before the first CUDA tensor

Design: the allocator torch gets is the C++ adapter (csrc/ beside this
file): torch's own CUDAAllocator interface over xsalloc's C API, which pip
install compiles against the installed torch, C++ only (xsalloc._adapter
builds it at first use where pip could not, and says why when neither can
be had). Through it torch's statistics, snapshots and
_record_memory_history (with Python frames), torch.OutOfMemoryError, CUDA
graphs, torch.compile(mode="reduce-overhead")'s pool checks and
torch.cuda.MemPool reach xsalloc with no patching, and torch's own settings
(c10's, which ProcessGroupNCCL and others read) are told xsalloc's. Nothing
here touches CUDA: use() takes the settings (xsa_configure) and installs the
adapter; xsalloc starts its driver when torch first allocates, after torch
initialised CUDA itself, so CUDA_VISIBLE_DEVICES set later by the script
and forks before the first CUDA use behave as under torch alone. There is
no silent fallback: where the adapter cannot be had use() raises
AdapterUnavailableError saying what failed and how to fix it or run without
xsalloc. use(adapter=False) (or XSALLOC_TORCH_ADAPTER=0) asks for
torch.cuda.memory.CUDAPluggableAllocator instead, whose malloc is the
small library pluggable_malloc.cpp builds, so that out of memory is still
torch.OutOfMemoryError; that interface has no statistics hooks, so use()
then points torch.cuda's statistics functions (memory_stats and everything
built on it; the reset functions) and torch.accelerator's (which find the
allocator registered with c10, never the pluggable one) at xsalloc's
(patch_torch_stats). torch's allocator can only be swapped before CUDA is
initialised; use() checks that first and says so. On both paths use() wraps
torch's settings setter (torch._C._accelerator_setAllocatorSettings, which
torch.cuda.memory._set_allocator_settings calls at call time; the older
torch._C._cuda_cudaCachingAllocator_set_allocator_settings): xsalloc checks
the string first (xsa_check_allocator_settings), then torch's setter keeps
it, then xsalloc applies it, so a string either side refuses changes
neither (docs/configuration.md, "Changing settings at run time"). The
Python function is wrapped rather than torch's C++ parser hook, whose
storage an extension cannot be sure to share with torch.
"""

import os
import warnings

import xsalloc
from . import _adapter, _lib
from ._adapter import AdapterUnavailableError

__all__ = ["AdapterUnavailableError", "adapter_in_use", "empty_cache", "installed", "memory_stats", "memory_summary",
           "snapshot", "use"]

_installed = None       # torch's allocator object: kept alive for the life of the process
_adapter_module = None  # the adapter's extension module, when it is in use


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
    (PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF, with XSALLOC_CONF over it).
    patch_torch_stats: on the pluggable path only, point torch.cuda.memory_stats
    and the functions built on it at xsalloc's statistics. adapter: True (or None
    with $XSALLOC_TORCH_ADAPTER unset) for the C++ adapter, raising
    AdapterUnavailableError if it can be neither loaded nor built; False (or
    $XSALLOC_TORCH_ADAPTER=0) for the pluggable path. Must run before torch
    initialises CUDA, and touches no CUDA itself; a second call returns the
    allocator installed first.
    """
    global _installed, _adapter_module
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
    lib.configure(conf)
    lib.prefer_real_driver("PyTorch")
    if adapter is None:
        adapter = os.environ.get("XSALLOC_TORCH_ADAPTER", "") not in ("0", "false", "False")
    if adapter:
        module = _adapter.load_adapter(torch, lib)
        module.install()
        _adapter_module = module
        _installed = torch.cuda.memory._get_current_allocator()
        _sync_torch_settings(module)
        _hook_allocator_settings(torch, lambda: _sync_torch_settings(module))
        return _installed
    path, malloc_fn, free_fn = _adapter.load_pluggable(torch, lib)
    alloc = torch.cuda.memory.CUDAPluggableAllocator(path, malloc_fn, free_fn)
    native = alloc.allocator()
    for setter, fn in _lib.TORCH_HOOKS.items():
        # Older torch versions lack some setters; the hook is then torch's no-op.
        if hasattr(native, setter):
            getattr(native, setter)(lib.address(fn))
    torch.cuda.memory.change_current_allocator(alloc)
    _installed = alloc
    _hook_allocator_settings(torch, None)
    if patch_torch_stats:
        _patch_torch_stats(torch)
    return alloc


def _sync_torch_settings(module):
    """torch's own settings (c10's) told xsalloc's; torch refusing (it parses its own variables
    first, and refuses keys it does not know there) is said once, not fatal: xsalloc is the
    allocator either way, only what others read in torch's settings stays torch's."""
    try:
        module.sync_torch_settings()
    except RuntimeError as e:
        warnings.warn(f"xsalloc: torch's own allocator settings still say torch's, not xsalloc's (what other code, "
                      f"ProcessGroupNCCL for one, reads there): torch refused them: {e}", stacklevel=3)


# torch's settings setters, newest first (torch._C functions).
_SETTINGS_SETTERS = ("_accelerator_setAllocatorSettings", "_cuda_cudaCachingAllocator_set_allocator_settings")


def _hook_allocator_settings(torch, sync):
    """Settings changed through torch reach xsalloc: each setter torch has
    first asks xsalloc whether it takes the string (its refusal raises
    before torch keeps anything), then runs torch's own (its checks and
    errors stay torch's), then applies the string to xsalloc and, with the
    adapter, tells torch's settings xsalloc's again (sync)."""
    C = getattr(torch, "_C", None)
    lib = _lib.load()
    for name in _SETTINGS_SETTERS:
        torchs = getattr(C, name, None)
        if torchs is None or getattr(torchs, "_xsalloc", False):
            continue

        def set_allocator_settings(env, _torchs=torchs):
            lib.check(lib.cdll.xsa_check_allocator_settings(env.encode()), "xsa_check_allocator_settings")
            result = _torchs(env)
            xsalloc.set_allocator_settings(env)
            if sync:
                sync()
            return result

        set_allocator_settings._xsalloc = True
        set_allocator_settings.__doc__ = getattr(torchs, "__doc__", None)
        setattr(C, name, set_allocator_settings)


def adapter_in_use():
    """True when torch's allocator is the C++ adapter (not the pluggable path)."""
    return _adapter_module is not None


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
