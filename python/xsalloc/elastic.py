"""Pausing and resuming tagged memory, without a framework: xsalloc's C calls for it in Python.

    import xsalloc.elastic as elastic
    with elastic.region("kv_cache"):                     # CuPy arrays, xsa_malloc: tagged
        kv = cupy.zeros(1 << 28, dtype=cupy.uint8)
    with elastic.region("weights", enable_cpu_backup=True):
        w = cupy.ones(1 << 20)
    elastic.pause()            # every tagged pool: weights copied to host, kv_cache dropped
    elastic.resume()           # same addresses, weights restored

Design: one function per C call of include/xsalloc/xsalloc.h (xsa_tag_region_begin
and _end, xsa_mempool_set_tag, xsa_pause, xsa_resume, xsa_paused_bytes,
xsa_cpu_backup, the backup retention), each turning a failed status into
XsallocError with the C sentence. A tag is a str (the C side checks its
length); a pool id is a pair of integers, PyTorch's MemPool.id. The
semantics are the C API's (docs/pause-resume.md): this module adds none, so
that xsalloc.memory_saver (PyTorch, torch_memory_saver's API) and C users
see one behaviour. region() tags what the C and CuPy paths allocate on the
calling thread (xsa_malloc, xsalloc.cupy); PyTorch's allocations go through
MemPool instead (xsalloc.memory_saver).
"""

import contextlib
import ctypes

import xsalloc
from . import _lib

TAG_CPU_BACKUP = 0x1   # XSA_TAG_CPU_BACKUP: pause copies live bytes to host memory, resume restores them
TAG_BACKUP_MMAP = 0x2  # XSA_TAG_BACKUP_MMAP: the host copy in mmap'd memory (RSS returned by munmap)
PAUSE_BACKUP = 0x1       # XSA_PAUSE_BACKUP: back up every paused pool's live bytes, whatever its tag's flags
PAUSE_DISCARD = 0x2      # XSA_PAUSE_DISCARD: back up nothing
PAUSE_SYNC_DEVICE = 0x4  # XSA_PAUSE_SYNC_DEVICE: wait for all of the device's work first

CPU_BACKUP_BACKENDS = ("pinned", "mmap")  # torch_memory_saver's names: cuMemHostAlloc, or mmap + registration


def _tag(tag, allow_none=False):
    if tag is None and allow_none:
        return None
    if not isinstance(tag, str):
        raise TypeError(f"xsalloc: a tag is a str, not {type(tag).__name__} ({tag!r})")
    return tag.encode()


def tag_flags(enable_cpu_backup=False, cpu_backup_backend=None):
    """The XSA_TAG_* flags of torch_memory_saver's arguments: host backup on,
    in pinned (default) or mmap'd memory. A backend without backup, or
    one that is neither 'pinned' nor 'mmap', is a ValueError (as in
    torch_memory_saver)."""
    if cpu_backup_backend is not None:
        if not enable_cpu_backup:
            raise ValueError("cpu_backup_backend requires enable_cpu_backup=True")
        if cpu_backup_backend not in CPU_BACKUP_BACKENDS:
            raise ValueError(f"cpu_backup_backend must be 'pinned' or 'mmap', not {cpu_backup_backend!r}")
    if not enable_cpu_backup:
        return 0
    return TAG_CPU_BACKUP | (TAG_BACKUP_MMAP if cpu_backup_backend == "mmap" else 0)


@contextlib.contextmanager
def region(tag="default", enable_cpu_backup=False, cpu_backup_backend=None):
    """Inside the block, the calling thread's allocations through xsa_malloc
    and xsa_malloc_current (C, xsalloc.cupy) go to the tag's own pool on each
    device (xsa_tag_region_begin / _end). Regions nest, 16 deep."""
    flags = tag_flags(enable_cpu_backup, cpu_backup_backend)
    lib = _lib.load()
    lib.check(lib.function("xsa_tag_region_begin")(_tag(tag), flags), f"xsa_tag_region_begin({tag!r})")
    try:
        yield
    finally:
        lib.check(lib.cdll.xsa_tag_region_end(), f"xsa_tag_region_end ({tag!r})")


def set_tag(device, pool_id, tag, enable_cpu_backup=False, cpu_backup_backend=None):
    """Tags memory pool `pool_id` (a pair of integers, torch's MemPool.id or a
    graph's pool) of `device` (xsa_mempool_set_tag); before its first
    allocation. Tagging it again with the same tag changes its flags."""
    flags = tag_flags(enable_cpu_backup, cpu_backup_backend)
    lib = _lib.load()
    first, second = pool_id
    st = lib.function("xsa_mempool_set_tag")(device, _lib.MempoolId(first, second), _tag(tag), flags)
    lib.check(st, f"xsa_mempool_set_tag(device {device}, pool ({first}, {second}), {tag!r})")


def pause(tag=None, backup=None, sync_device=False):
    """Pauses the pools tagged `tag` (None: every tagged pool) on every device
    (xsa_pause): waits for their work, backs up what has backup, releases their
    pages and keeps their addresses. backup: None for each tag's own flags,
    True to back up everything paused (XSA_PAUSE_BACKUP), False for nothing
    (XSA_PAUSE_DISCARD). sync_device: wait for all of each device's work."""
    flags = {None: 0, True: PAUSE_BACKUP, False: PAUSE_DISCARD}[backup]
    flags |= PAUSE_SYNC_DEVICE if sync_device else 0
    lib = _lib.load()
    lib.check(lib.function("xsa_pause")(_tag(tag, allow_none=True), flags), f"xsa_pause({tag!r})")


def resume(tag=None):
    """Resumes the paused pools tagged `tag` (None: all) at their addresses,
    restoring their backups (xsa_resume). Out of device memory: XsallocError
    with status XSA_ERROR_OUT_OF_MEMORY, and the device's pools stay paused
    with their backups: a later resume can succeed."""
    lib = _lib.load()
    lib.check(lib.function("xsa_resume")(_tag(tag, allow_none=True)), f"xsa_resume({tag!r})")


def paused_bytes(device=0, tag=None):
    """Page bytes that the pools tagged `tag` (None: all) of `device` released by pausing."""
    lib = _lib.load()
    n = ctypes.c_size_t()
    st = lib.function("xsa_paused_bytes")(device, _tag(tag, allow_none=True), ctypes.byref(n))
    lib.check(st, f"xsa_paused_bytes({device}, {tag!r})")
    return n.value


def cpu_backup(ptr, size):
    """The address of the host copy of device bytes [ptr, ptr+size), inside one
    allocation that has a backup (while paused, or after resume with
    retention on), else None (xsa_cpu_backup). A pointer xsalloc does not
    own: XSA_ERROR_INVALID_POINTER; a range past the allocation's end:
    XSA_ERROR_INVALID_VALUE."""
    lib = _lib.load()
    host = ctypes.c_void_p()
    lib.check(lib.function("xsa_cpu_backup")(ptr, size, ctypes.byref(host)), f"xsa_cpu_backup({ptr:#x}, {size})")
    return host.value


def set_backup_retention(retain):
    """Keep host copies after resume (and reuse them, same address, at the
    next pause of the same allocation) instead of releasing them. Consulted
    at resume; off by default."""
    lib = _lib.load()
    lib.check(lib.function("xsa_set_backup_retention")(1 if retain else 0), f"xsa_set_backup_retention({retain})")


def backup_retention():
    """True when host copies are kept after resume (set_backup_retention)."""
    lib = _lib.load()
    retain = ctypes.c_int()
    lib.check(lib.function("xsa_get_backup_retention")(ctypes.byref(retain)), "xsa_get_backup_retention")
    return bool(retain.value)


class _PauseReport(ctypes.Structure):
    """xsa_pause_report, field for field (include/xsalloc/types.h)."""

    _fields_ = [(name, ctypes.c_uint64) for name in ("wait_ns", "copy_ns", "map_ns", "copied_bytes", "pages")] + [
        ("pools", ctypes.c_uint32)]


def last_report(device=0, resume=False):
    """What the last pause (or resume) that did something on `device` did:
    {"wait_s", "copy_s", "map_s", "copied_bytes", "pages", "pools"}
    (xsa_last_pause_report); copied_bytes / copy_s is the backup's rate."""
    lib = _lib.load()
    r = _PauseReport()
    st = lib.function("xsa_last_pause_report")(device, 1 if resume else 0, ctypes.byref(r))
    lib.check(st, f"xsa_last_pause_report({device}, {resume})")
    return {"wait_s": r.wait_ns / 1e9, "copy_s": r.copy_ns / 1e9, "map_s": r.map_ns / 1e9,
            "copied_bytes": r.copied_bytes, "pages": r.pages, "pools": r.pools}


def live_blocks(device, pool_id):
    """The allocated blocks of memory pool `pool_id` of `device`, in address
    order, as (address, requested bytes) pairs (xsa_mempool_checkpoint)."""
    lib = _lib.load()
    first, second = pool_id
    blocks, n = ctypes.POINTER(_lib.LiveBlock)(), ctypes.c_size_t()
    st = lib.cdll.xsa_mempool_checkpoint(device, _lib.MempoolId(first, second), ctypes.byref(blocks), ctypes.byref(n))
    lib.check(st, f"xsa_mempool_checkpoint(device {device}, pool ({first}, {second}))")
    try:
        return [(blocks[i].ptr, blocks[i].requested) for i in range(n.value)]
    finally:
        if n.value:
            lib.cdll.xsa_free_buffer(ctypes.cast(blocks, ctypes.c_void_p))


def paused_pools():
    """{(device, pool id)}: the memory pools with paused segments now (the snapshot's "is_paused")."""
    return {(seg["device"], tuple(seg["segment_pool_id"]))
            for seg in xsalloc.snapshot()["segments"] if seg.get("is_paused")}
