"""ctypes binding of libxsalloc.so: finding it, the C declarations, statuses as exceptions.

Design: one process-wide Library object (load()) over one dlopen of the
shared library; PyTorch's CUDAPluggableAllocator dlopens the same path, so
both see the same allocator state. Every status other than XSA_SUCCESS becomes an XsallocError carrying
the status name and xsa_last_error()'s sentence, read on the same thread
right after the call (the message is thread local in C).
"""

import ctypes
import json
import os
import threading

ENV_LIBRARY = "XSALLOC_LIBRARY"
LIBRARY_NAME = "libxsalloc.so"

SUCCESS = 0
ERROR_OUT_OF_MEMORY = 2
ERROR_CONFIG = 5
ERROR_ALREADY_INITIALIZED = 8


class XsallocError(RuntimeError):
    """A failed xsalloc call; .status is the C status name (e.g. 'XSA_ERROR_OUT_OF_MEMORY')."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


class XsallocConfigError(XsallocError, ValueError):
    """A settings string xsalloc refuses (status 'XSA_ERROR_CONFIG'): also a ValueError, as torch's own
    refusal of a bad value is, so that code catching torch's error catches xsalloc's."""


class LibraryNotFoundError(ImportError):
    """libxsalloc.so could not be found or loaded."""


class _Stat(ctypes.Structure):
    _fields_ = [(name, ctypes.c_int64) for name in ("current", "peak", "allocated", "freed")]


_POOLS = ("all", "small_pool", "large_pool")  # XSA_STAT_ALL, _SMALL_POOL, _LARGE_POOL
_STAT_ARRAYS = (
    "allocation", "segment", "active", "inactive_split", "allocated_bytes",
    "reserved_bytes", "active_bytes", "inactive_split_bytes", "requested_bytes",
)
_COUNTERS = ("num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free")
_EXTRA = ("num_pages_mapped", "num_pages_unmapped", "num_pages_recycled")
_LOCK_WAITS = ("num_device_lock_waits", "device_lock_wait_us")


class DeviceStats(ctypes.Structure):
    """xsa_device_stats, field for field (include/xsalloc/types.h)."""

    _fields_ = (
        [(name, _Stat * len(_POOLS)) for name in _STAT_ARRAYS]
        + [(name, ctypes.c_int64) for name in _COUNTERS]
        + [("oversize_allocations", _Stat), ("oversize_segments", _Stat), ("max_split_size", ctypes.c_int64)]
        + [(name, ctypes.c_int64) for name in _EXTRA]
        + [("paused_bytes", _Stat)]
        + [(name, ctypes.c_int64) for name in _LOCK_WAITS]
    )

    def as_nested_dict(self):
        """The layout of torch.cuda.memory_stats_as_nested_dict(), plus xsalloc's page counters,
        paused_bytes (the page bytes tagged pools released by pausing) and the device lock's waits."""

        def stat(s):
            return {"current": s.current, "peak": s.peak, "allocated": s.allocated, "freed": s.freed}

        out = {name: getattr(self, name) for name in _COUNTERS + ("max_split_size",) + _EXTRA + _LOCK_WAITS}
        for name in _STAT_ARRAYS:
            out[name] = {pool: stat(getattr(self, name)[i]) for i, pool in enumerate(_POOLS)}
        out["oversize_allocations"] = stat(self.oversize_allocations)
        out["oversize_segments"] = stat(self.oversize_segments)
        out["paused_bytes"] = stat(self.paused_bytes)
        return out


class MempoolId(ctypes.Structure):
    """xsa_mempool_id (PyTorch's MempoolId_t), passed by value."""

    _fields_ = [("first", ctypes.c_uint64), ("second", ctypes.c_uint64)]


class LiveBlock(ctypes.Structure):
    """xsa_live_block: a live block of a memory pool, as xsa_mempool_checkpoint lists it."""

    _fields_ = [("ptr", ctypes.c_void_p), ("size", ctypes.c_size_t), ("requested", ctypes.c_size_t),
                ("stream", ctypes.c_void_p)]


_c = ctypes
# name: (restype, argtypes). Status-returning functions return c_int.
_DECLS = {
    "xsa_status_name": (_c.c_char_p, [_c.c_int]),
    "xsa_last_error": (_c.c_char_p, []),
    "xsa_use_driver": (_c.c_int, [_c.c_char_p]),
    "xsa_driver_name": (_c.c_char_p, []),
    "xsa_init": (_c.c_int, [_c.c_char_p]),
    "xsa_configure": (_c.c_int, [_c.c_char_p]),
    "xsa_shutdown": (_c.c_int, []),
    "xsa_device_count": (_c.c_int, [_c.POINTER(_c.c_int)]),
    "xsa_malloc": (_c.c_int, [_c.POINTER(_c.c_void_p), _c.c_size_t, _c.c_int, _c.c_void_p]),
    "xsa_free": (_c.c_int, [_c.c_void_p]),
    "xsa_record_stream": (_c.c_int, [_c.c_void_p, _c.c_void_p]),
    "xsa_empty_cache": (_c.c_int, []),
    "xsa_time_driver_calls": (_c.c_int, [_c.c_int]),
    "xsa_driver_calls_json": (_c.c_int, [_c.c_char_p, _c.c_size_t, _c.POINTER(_c.c_size_t)]),
    "xsa_cache_info": (_c.c_int, [_c.c_int, _c.POINTER(_c.c_size_t), _c.POINTER(_c.c_size_t)]),
    "xsa_get_base_allocation": (_c.c_int, [_c.c_void_p, _c.POINTER(_c.c_void_p), _c.POINTER(_c.c_size_t)]),
    "xsa_set_memory_fraction": (_c.c_int, [_c.c_double, _c.c_int]),
    "xsa_set_allocator_settings": (_c.c_int, [_c.c_char_p]),
    "xsa_check_allocator_settings": (_c.c_int, [_c.c_char_p]),
    "xsa_get_stats": (_c.c_int, [_c.c_int, _c.POINTER(DeviceStats)]),
    "xsa_reset_peak_stats": (_c.c_int, [_c.c_int]),
    "xsa_reset_accumulated_stats": (_c.c_int, [_c.c_int]),
    "xsa_check_invariants": (_c.c_int, [_c.c_int]),
    "xsa_free_buffer": (None, [_c.c_void_p]),
    "xsa_memory_summary": (_c.c_int, [_c.c_int, _c.c_int, _c.POINTER(_c.c_void_p)]),
    "xsa_snapshot_json": (_c.c_int, [_c.POINTER(_c.c_void_p)]),
    "xsa_ctx_malloc": (_c.c_int, [_c.POINTER(_c.c_void_p), _c.c_size_t, _c.c_int, _c.c_void_p]),
    "xsa_ctx_free": (_c.c_int, [_c.c_void_p]),
    "xsa_ctx_empty_cache": (_c.c_int, []),
    "xsa_torch_malloc": (_c.c_void_p, [_c.c_ssize_t, _c.c_int, _c.c_void_p]),
    "xsa_torch_free": (None, [_c.c_void_p, _c.c_ssize_t, _c.c_int, _c.c_void_p]),
    "xsa_torch_record_stream": (None, [_c.c_void_p, _c.c_void_p]),
    "xsa_torch_empty_cache": (None, []),
    "xsa_torch_set_memory_fraction": (None, [_c.c_double, _c.c_int]),
    "xsa_torch_base_alloc": (_c.c_void_p, [_c.c_void_p, _c.POINTER(_c.c_size_t)]),
    "xsa_mempool_create": (_c.c_int, [_c.c_int, MempoolId]),
    "xsa_mempool_release": (_c.c_int, [_c.c_int, MempoolId]),
    "xsa_mempool_checkpoint": (_c.c_int, [_c.c_int, MempoolId, _c.POINTER(_c.POINTER(LiveBlock)),
                                          _c.POINTER(_c.c_size_t)]),
    # Pausing and resuming tagged memory (xsalloc.elastic)
    "xsa_mempool_set_tag": (_c.c_int, [_c.c_int, MempoolId, _c.c_char_p, _c.c_uint]),
    "xsa_tag_region_begin": (_c.c_int, [_c.c_char_p, _c.c_uint]),
    "xsa_tag_region_end": (_c.c_int, []),
    "xsa_pause": (_c.c_int, [_c.c_char_p, _c.c_uint]),
    "xsa_resume": (_c.c_int, [_c.c_char_p]),
    "xsa_paused_bytes": (_c.c_int, [_c.c_int, _c.c_char_p, _c.POINTER(_c.c_size_t)]),
    "xsa_cpu_backup": (_c.c_int, [_c.c_void_p, _c.c_size_t, _c.POINTER(_c.c_void_p)]),
    "xsa_set_backup_retention": (_c.c_int, [_c.c_int]),
    "xsa_get_backup_retention": (_c.c_int, [_c.POINTER(_c.c_int)]),
    "xsa_last_pause_report": (_c.c_int, [_c.c_int, _c.c_int, _c.c_void_p]),
}

# The entry points PyTorch's CUDAPluggableAllocator hooks call, by setter name.
TORCH_HOOKS = {
    "set_record_stream_fn": "xsa_torch_record_stream",
    "set_reset_fn": "xsa_torch_empty_cache",
    "set_memory_fraction_fn": "xsa_torch_set_memory_fraction",
    "set_base_alloc_fn": "xsa_torch_base_alloc",
    # CUDA graphs (torch.cuda.graph, cudagraph trees): the graph's private pool
    "set_begin_allocate_to_pool": "xsa_torch_begin_allocate_to_pool",
    "set_end_allocate_to_pool_fn": "xsa_torch_end_allocate_to_pool",
    "set_release_pool": "xsa_torch_release_pool",
}


def candidates():
    """Where the library is looked for, in order: $XSALLOC_LIBRARY alone if set,
    else next to this package, then the Bazel output of the source tree."""
    env = os.environ.get(ENV_LIBRARY)
    if env:
        return [env]
    here = os.path.dirname(os.path.abspath(__file__))
    return [
        os.path.join(here, LIBRARY_NAME),
        os.path.join(here, "..", "..", "bazel-bin", "api", LIBRARY_NAME),
    ]


class Library:
    """The loaded library: declared ctypes functions plus status checking."""

    def __init__(self, path):
        self.path = path
        self.cdll = ctypes.CDLL(path)
        for name, (restype, argtypes) in _DECLS.items():
            fn = getattr(self.cdll, name, None)
            if fn is not None:
                fn.restype, fn.argtypes = restype, argtypes

    def address(self, name):
        """The C function's address, as PyTorch's allocator setters take it."""
        return ctypes.cast(getattr(self.cdll, name), ctypes.c_void_p).value

    def function(self, name):
        """The declared C function `name`; a library built before it existed is an XsallocError saying so."""
        fn = getattr(self.cdll, name, None)
        if fn is None:
            raise XsallocError("XSA_ERROR_NOT_SUPPORTED", f"{self.path} has no {name}: it was built before "
                               f"{name} existed; rebuild it (pip install --no-build-isolation ., or "
                               "bazel build //api:libxsalloc.so)")
        return fn

    def last_error(self):
        return self.cdll.xsa_last_error().decode(errors="replace")

    def status_name(self, status):
        return self.cdll.xsa_status_name(status).decode()

    def check(self, status, what):
        """Raises XsallocError("WHAT: STATUS: sentence") unless status is XSA_SUCCESS; the C
        sentence's own "fn: " prefix is dropped when it repeats what."""
        if status != SUCCESS:
            detail = self.last_error() or "no detail"
            if detail.startswith(what + ": "):
                detail = detail[len(what) + 2:]
            kind = XsallocConfigError if status == ERROR_CONFIG else XsallocError
            raise kind(self.status_name(status), f"{what}: {self.status_name(status)}: {detail}")

    def init(self, conf=None):
        """xsa_init(conf). Already initialised is accepted when conf is None
        (a second use(), or a lazy init by an earlier call)."""
        st = self.cdll.xsa_init(None if conf is None else conf.encode())
        if st == ERROR_ALREADY_INITIALIZED and conf is None:
            return
        self.check(st, "xsa_init" if conf is None else f"xsa_init({conf!r})")

    def configure(self, conf=None):
        """xsa_configure(conf): the settings, no driver yet (it starts at the first allocation).
        Already configured or started is accepted when conf is None."""
        st = self.cdll.xsa_configure(None if conf is None else conf.encode())
        if st == ERROR_ALREADY_INITIALIZED and conf is None:
            return
        self.check(st, "xsa_configure" if conf is None else f"xsa_configure({conf!r})")

    def prefer_real_driver(self, who):
        """For PyTorch and CuPy, which need device memory: the real driver when xsalloc starts,
        unless $XSA_DRIVER names one; touches no driver. If xsalloc has started already, it must
        be on the real driver (or the one $XSA_DRIVER names)."""
        if os.environ.get("XSA_DRIVER"):
            return
        if self.cdll.xsa_use_driver(b"cuda") == ERROR_ALREADY_INITIALIZED:
            self.require_real_driver(who)

    def driver_name(self):
        return self.cdll.xsa_driver_name().decode()

    def require_real_driver(self, who):
        """PyTorch and CuPy need device memory: the simulated driver only when asked for ($XSA_DRIVER)."""
        name = self.driver_name()
        if name != "cuda" and os.environ.get("XSA_DRIVER") != name:
            raise RuntimeError(
                f"xsalloc: {who} needs the real CUDA driver, but xsalloc is on the '{name}' driver "
                "(no usable GPU or libcuda.so.1); set XSA_DRIVER=cuda to see why"
            )

    def take_string(self, status, out, what):
        """The malloc'd C string a function left in `out`, freed with xsa_free_buffer."""
        self.check(status, what)
        try:
            return ctypes.string_at(out.value).decode()
        finally:
            self.cdll.xsa_free_buffer(out)

    def device_count(self):
        n = ctypes.c_int()
        self.check(self.cdll.xsa_device_count(ctypes.byref(n)), "xsa_device_count")
        return n.value

    def driver_calls(self):
        """{entry point: [calls, microseconds, helper calls, helper microseconds]} since initialisation
        (xsa_driver_calls_json)."""
        needed = ctypes.c_size_t()
        self.cdll.xsa_driver_calls_json(None, 0, ctypes.byref(needed))
        while True:
            # Another thread (the helper thread, the program's) may call the
            # driver between the two calls and lengthen the text: a few
            # bytes of room, and again with the size it says if too small.
            size = needed.value + 64
            buf = ctypes.create_string_buffer(size)
            st = self.cdll.xsa_driver_calls_json(buf, size, ctypes.byref(needed))
            if st == SUCCESS or needed.value <= size:
                self.check(st, "xsa_driver_calls_json")
                return json.loads(buf.value.decode())

    def stats(self, device):
        s = DeviceStats()
        self.check(self.cdll.xsa_get_stats(device, ctypes.byref(s)), f"xsa_get_stats({device})")
        return s


_lock = threading.Lock()
_loaded = None


def load():
    """The process's Library, loading it on first use; LibraryNotFoundError names every path tried."""
    global _loaded
    with _lock:
        if _loaded is None:
            tried = []
            for path in candidates():
                if not os.path.exists(path):
                    tried.append(f"{path} (no such file)")
                    continue
                try:
                    _loaded = Library(os.path.realpath(path))
                    break
                except OSError as e:
                    tried.append(f"{path} ({e})")
            if _loaded is None:
                raise LibraryNotFoundError(
                    "xsalloc: cannot load libxsalloc.so; tried " + "; ".join(tried)
                    + ". Install the package with it (pip install --no-build-isolation . in the repository), or"
                    f" build it (bazel build //api:libxsalloc.so) and set {ENV_LIBRARY}=/path/to/libxsalloc.so"
                )
        return _loaded
