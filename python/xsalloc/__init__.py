"""xsalloc for Python: PyTorch and CuPy switch to the xsalloc caching allocator in two lines.

    import xsalloc.torch; xsalloc.torch.use()     # before the first CUDA tensor
    import xsalloc.cupy;  xsalloc.cupy.use()

or with no change to the program: python -m xsalloc.run train.py ARGS.

Design: pure Python over libxsalloc.so with ctypes (no compiled extension).
This module holds what does not depend on a framework: statistics in
PyTorch's names and layout, the summary table, empty_cache, snapshot. The
framework modules (xsalloc.torch, xsalloc.cupy) import their framework only
when use() is called, so that a missing one is a clear ImportError there.
The library is found through $XSALLOC_LIBRARY, next to this package (where
pip install puts it), or in the source tree's bazel-bin/api/ (see
_lib.candidates). Settings come from XSALLOC_CONF, else PYTORCH_ALLOC_CONF,
else PYTORCH_CUDA_ALLOC_CONF.
"""

import collections
import ctypes
import json

from . import _lib
from ._lib import LibraryNotFoundError, XsallocConfigError, XsallocError, load

__all__ = [
    "LibraryNotFoundError",
    "XsallocConfigError",
    "XsallocError",
    "driver_name",
    "empty_cache",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "set_allocator_settings",
    "snapshot",
    "time_driver_calls",
    "driver_calls",
]


def driver_name():
    """'cuda' or 'sim': the driver xsalloc runs on (initialises from the environment if needed)."""
    return load().driver_name()


def memory_stats_as_nested_dict(device=0):
    """torch.cuda.memory_stats_as_nested_dict()'s layout for `device`, plus
    num_pages_mapped / num_pages_unmapped / num_pages_recycled, paused_bytes (xsa_pause) and
    num_device_lock_waits / device_lock_wait_us (calls that slept for the device's lock, and how long)."""
    return load().stats(device).as_nested_dict()


def memory_stats(device=0):
    """torch.cuda.memory_stats()'s flat, sorted dict ("allocated_bytes.all.current", ...,
    "num_alloc_retries", ...) for `device`, from xsa_get_stats."""
    flat = []

    def walk(prefix, obj):
        if isinstance(obj, dict):
            for k, v in obj.items():
                walk(f"{prefix}.{k}" if prefix else k, v)
        else:
            flat.append((prefix, obj))

    walk("", memory_stats_as_nested_dict(device))
    flat.sort()
    return collections.OrderedDict(flat)


def reset_peak_memory_stats(device=0):
    lib = load()
    lib.check(lib.cdll.xsa_reset_peak_stats(device), f"xsa_reset_peak_stats({device})")


def reset_accumulated_memory_stats(device=0):
    lib = load()
    lib.check(lib.cdll.xsa_reset_accumulated_stats(device), f"xsa_reset_accumulated_stats({device})")


def set_allocator_settings(conf):
    """Changes the settings at run time, on every device (xsa_set_allocator_settings):
    XSALLOC_CONF's syntax and keys with PyTorch's run-time rules (docs/configuration.md).
    A string xsalloc refuses raises XsallocError, nothing changed: .status
    'XSA_ERROR_CONFIG' for a malformed one (naming the key and value),
    'XSA_ERROR_NOT_SUPPORTED' for a key that cannot change any more (naming it)."""
    lib = load()
    lib.check(lib.cdll.xsa_set_allocator_settings(conf.encode()), "xsa_set_allocator_settings")


def time_driver_calls(enabled=True):
    """Start (or stop) adding up the time xsalloc spends in each CUDA driver entry point."""
    lib = load()
    lib.check(lib.cdll.xsa_time_driver_calls(1 if enabled else 0), "xsa_time_driver_calls")


def driver_calls():
    """{entry point: [calls, microseconds, helper calls, helper microseconds]}: the driver calls
    xsalloc made since it started, and the part of them the helper thread made (the rest was on
    the allocating threads' path); microseconds only while time_driver_calls() was on."""
    return load().driver_calls()


def empty_cache():
    """Returns every cached free block's memory to the driver (all devices), like torch.cuda.empty_cache()."""
    lib = load()
    lib.check(lib.cdll.xsa_ctx_empty_cache(), "xsa_empty_cache")


def memory_summary(device=0, abbreviated=False):
    """torch.cuda.memory_summary()'s table (same rows, columns and units) for
    xsalloc's statistics on `device`, then a line naming where the settings
    came from (XSALLOC_CONF, PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF or
    the conf string), from xsa_memory_summary."""
    lib = load()
    out = ctypes.c_void_p()
    st = lib.cdll.xsa_memory_summary(device, int(abbreviated), ctypes.byref(out))
    return lib.take_string(st, out, f"xsa_memory_summary({device})")


def snapshot():
    """All devices' segments and blocks with the structure of torch.cuda.memory._snapshot()
    ("segments", "device_traces", ...), from xsa_snapshot_json."""
    lib = load()
    out = ctypes.c_void_p()
    return json.loads(lib.take_string(lib.cdll.xsa_snapshot_json(ctypes.byref(out)), out, "xsa_snapshot_json"))
