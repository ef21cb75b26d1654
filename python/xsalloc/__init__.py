"""xsalloc for Python: PyTorch and CuPy switch to the xsalloc caching allocator in two lines.

    import xsalloc.torch; xsalloc.torch.use()     # before the first CUDA tensor
    import xsalloc.cupy;  xsalloc.cupy.use()

Design: pure Python over libxsalloc.so with ctypes (no compiled extension).
This module holds what does not depend on a framework: statistics in
PyTorch's names and layout, the summary table, empty_cache, snapshot. The
framework modules (xsalloc.torch, xsalloc.cupy) import their framework only
when use() is called, so that a missing one is a clear ImportError there.
The library is found through $XSALLOC_LIBRARY, next to this package, or in
the source tree's bazel-bin/api/ (see _lib.candidates).
"""

import collections
import ctypes
import json

from ._lib import LibraryNotFoundError, XsallocError, load

__all__ = [
    "LibraryNotFoundError",
    "XsallocError",
    "driver_name",
    "empty_cache",
    "memory_stats",
    "memory_stats_as_nested_dict",
    "memory_summary",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
    "snapshot",
]


def driver_name():
    """'cuda' or 'sim': the driver xsalloc runs on (initialises from XSALLOC_CONF if needed)."""
    return load().driver_name()


def memory_stats_as_nested_dict(device=0):
    """torch.cuda.memory_stats_as_nested_dict()'s layout for `device`, plus
    num_pages_mapped / num_pages_unmapped / num_pages_recycled."""
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


def empty_cache():
    """Returns every cached free block's memory to the driver (all devices), like torch.cuda.empty_cache()."""
    lib = load()
    lib.check(lib.cdll.xsa_ctx_empty_cache(), "xsa_empty_cache")


def _format_size(sz, pref_sz):
    prefixes = ["B  ", "KiB", "MiB", "GiB", "TiB", "PiB"]
    prefix = prefixes[0]
    for new_prefix in prefixes[1:]:
        if pref_sz < 768 * 1024:
            break
        prefix = new_prefix
        sz //= 1024
        pref_sz /= 1024
    return f"{sz:6d} {prefix}"


def _format_count(cnt, pref_cnt):
    prefixes = [" ", "K", "M"]
    prefix = prefixes[0]
    for new_prefix in prefixes[1:]:
        if pref_cnt < 750 * 1000:
            break
        prefix = new_prefix
        cnt //= 1000
        pref_cnt /= 1000
    return f"{cnt:7d} {prefix} "


def memory_summary(device=0, abbreviated=False):
    """torch.cuda.memory_summary()'s table (same rows, columns and units) for
    xsalloc's statistics on `device`: xsa_memory_summary's when the library
    has it, else formatted here from xsa_get_stats (with one more row, the
    expandable segments' page counts)."""
    lib = load()
    if lib.has("xsa_memory_summary"):
        out = ctypes.c_void_p()
        st = lib.cdll.xsa_memory_summary(device, int(abbreviated), ctypes.byref(out))
        return lib.take_string(st, out, f"xsa_memory_summary({device})")
    return _summary_from_stats(device, abbreviated)


def _summary_from_stats(device, abbreviated):
    stats = memory_stats(device)
    rows = [
        ("allocated_bytes", "Allocated memory", _format_size),
        ("active_bytes", "Active memory", _format_size),
        ("requested_bytes", "Requested memory", _format_size),
        ("reserved_bytes", "GPU reserved memory", _format_size),
        ("inactive_split_bytes", "Non-releasable memory", _format_size),
        ("allocation", "Allocations", _format_count),
        ("active", "Active allocs", _format_count),
        ("segment", "GPU reserved segments", _format_count),
        ("inactive_split", "Non-releasable allocs", _format_count),
    ]
    cols = ("current", "peak", "allocated", "freed")

    def row(name, values, prefs, fmt):
        return f" {name:<21} | " + " | ".join(fmt(v, p) for v, p in zip(values, prefs)) + " "

    lines = [
        "=" * 75,
        f" {'':16} xsalloc CUDA memory summary, device ID {device:<17d} ",
        "-" * 75,
        f"  {'':9} CUDA OOMs: {stats['num_ooms']:<12d} | {'':6} cudaMalloc retries: {stats['num_alloc_retries']:<8d}  ",
        "=" * 75,
        "        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  ",
    ]
    for key, name, fmt in rows:
        lines.append("-" * 75)
        pools = [("all", name)]
        if not abbreviated:
            pools += [("large_pool", "      from large pool"), ("small_pool", "      from small pool")]
        prefs = [stats[f"{key}.all.{c}"] for c in cols]
        for pool, label in pools:
            lines.append(row(label, [stats[f"{key}.{pool}.{c}"] for c in cols], prefs, fmt))
    for key, name in (("oversize_allocations", "Oversize allocations"), ("oversize_segments", "Oversize GPU segments")):
        lines.append("-" * 75)
        values = [stats[f"{key}.{c}"] for c in cols]
        lines.append(row(name, values, values, _format_count))
    lines.append("-" * 75)
    pages = (
        f"mapped {stats['num_pages_mapped']}, unmapped {stats['num_pages_unmapped']}, "
        f"recycled {stats['num_pages_recycled']}"
    )
    lines.append(f" {'Expandable pages':<21} | {pages:<49} ")
    lines.append("=" * 75)
    return "|" + "|\n|".join(lines) + "|\n"


def snapshot():
    """All devices' segments and blocks with the structure of torch.cuda.memory._snapshot()
    ("segments", "device_traces", ...), from xsa_snapshot_json. Raises
    NotImplementedError when the loaded library has no xsa_snapshot_json (a
    build from before the C API had snapshots)."""
    lib = load()
    if not lib.has("xsa_snapshot_json"):
        raise NotImplementedError(
            f"xsalloc.snapshot(): {lib.path} has no xsa_snapshot_json (this build of libxsalloc.so predates "
            "snapshots in the C API); memory_stats() and memory_summary() are available"
        )
    out = ctypes.c_void_p()
    return json.loads(lib.take_string(lib.cdll.xsa_snapshot_json(ctypes.byref(out)), out, "xsa_snapshot_json"))
