"""PyTorch on xsalloc: use() swaps torch's CUDA allocator for libxsalloc.so.

    import torch
    import xsalloc.torch
    xsalloc.torch.use()          # before the first CUDA tensor

Design: torch.cuda.memory.CUDAPluggableAllocator loads xsa_torch_malloc /
xsa_torch_free from the library, and the hooks torch's pluggable allocator
accepts (record_stream, empty_cache, memory fraction, base allocation) are
set to the library's xsa_torch_* functions, so torch.Tensor.record_stream,
torch.cuda.empty_cache and torch.cuda.set_per_process_memory_fraction reach
xsalloc. The pluggable interface has no statistics hooks (torch raises for
them), so by default use() also points torch.cuda's statistics functions
(memory_stats and everything built on it: memory_allocated,
max_memory_reserved, memory_summary...; reset_peak_memory_stats,
reset_accumulated_memory_stats) at xsalloc's, and the program needs no
change. torch's allocator can only be swapped before CUDA is initialised;
use() checks that first and says so.
"""

import xsalloc
from . import _lib

_installed = None  # the CUDAPluggableAllocator: kept alive for the life of the process


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


def use(conf=None, patch_torch_stats=True):
    """Makes xsalloc torch's CUDA allocator; returns the CUDAPluggableAllocator.

    conf: settings in PYTORCH_CUDA_ALLOC_CONF syntax, None for the environment's
    (XSALLOC_CONF, else PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF). patch_torch_stats: point torch.cuda.memory_stats and the
    functions built on it at xsalloc's statistics. Must run before torch
    initialises CUDA; a second call returns the allocator installed first.
    """
    global _installed
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
    alloc = torch.cuda.memory.CUDAPluggableAllocator(lib.path, "xsa_torch_malloc", "xsa_torch_free")
    native = alloc.allocator()
    for setter, fn in _lib.TORCH_HOOKS.items():
        # Older torch versions lack some setters; the hook is then torch's no-op.
        if hasattr(native, setter):
            getattr(native, setter)(lib.address(fn))
    torch.cuda.memory.change_current_allocator(alloc)
    _installed = alloc
    if patch_torch_stats:
        _patch_torch_stats(torch)
    return alloc


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
