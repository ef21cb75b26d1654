"""torch_memory_saver's API (and vLLM's sleep mode) on xsalloc: pause and
resume PyTorch memory by tag at the same addresses, CUDA-graph memory included.

    from xsalloc.memory_saver import torch_memory_saver    # was: from torch_memory_saver import ...

    with torch_memory_saver.region(tag="weights", enable_cpu_backup=True):
        model = build_model()
    with torch_memory_saver.region(tag="kv_cache"):
        kv = torch.empty(n, device="cuda")
    with torch_memory_saver.cuda_graph(g, tag="graph"):     # any hook mode
        out = step(static_input)
    torch_memory_saver.pause()        # weights copied to host; kv_cache and the graph's memory dropped
    torch_memory_saver.resume()       # pages back at the same addresses, weights restored

    saver = torch_memory_saver        # vLLM's CuMemAllocator shape
    with saver.use_memory_pool(tag="weights"): ...
    saver.sleep(offload_tags=("weights",)); saver.wake_up()

xsalloc must be PyTorch's allocator: run the program under
`python -m xsalloc.run`, or call xsalloc.torch.use() right after import
torch. No LD_PRELOAD, hook_mode is accepted and ignored. Non-torch code
(CuPy, C) uses xsalloc.elastic.region instead.

Design: the pausing is the allocator's (xsa_pause / xsa_resume through
xsalloc.elastic: waits for the pool's work, backs up, unmaps; see
docs/pause-resume.md); this module only routes torch's allocations to
tagged pools, as torch_memory_saver's torch mode does: one
torch.cuda.MemPool per (tag, enable_cpu_backup, enable_disk_backup, cpu
backup backend, device), entered with torch.cuda.use_mem_pool and tagged
once, before its first allocation, with xsa_mempool_set_tag. cuda_graph()
takes a fresh graph pool handle when none is given (torch's g.pool() is
readable only after the capture) and tags it right after the capture
begins, so the graph's memory pauses too. Disk backup is Python's
(_disk_spill.py). The environment torch_memory_saver reads
(TMS_RETAIN_CPU_BACKUP, TMS_INIT_CPU_BACKUP_BACKEND, TMS_DISK_BACKUP_DIR,
TMS_DISK_BACKUP_CHUNK_MB) is read the same way, at first use. The few
internals torch_memory_saver's own tests reach are in _tms_compat.py.
"""

import contextlib
import ctypes
import gc
import os
import sys
import threading
import warnings

import xsalloc
from . import _disk_spill, _tms_compat, elastic
from ._lib import XsallocError

__all__ = ["TorchMemorySaver", "configure_subprocess", "torch_memory_saver"]

_TAG_DEFAULT = "default"
HOOK_MODES = ("preload", "torch")
WEIGHTS, KV_CACHE = "weights", "kv_cache"  # vLLM's tags

_NOT_INSTALLED = (
    "xsalloc.memory_saver needs xsalloc as PyTorch's CUDA allocator: run the program with "
    "`python -m xsalloc.run SCRIPT ARGS` (torchrun ... -m xsalloc.run SCRIPT ARGS), or call "
    "xsalloc.torch.use() right after `import torch`, before the first CUDA tensor. No LD_PRELOAD is needed.")
_NO_ADAPTER = (
    "xsalloc.memory_saver needs torch.cuda.MemPool, which xsalloc gives PyTorch through its torch adapter; "
    "xsalloc runs through CUDAPluggableAllocator here, as XSALLOC_TORCH_ADAPTER=0 (or "
    "xsalloc.torch.use(adapter=False)) asked: run without it (docs/pytorch.md)")


def _env_bool(name):
    """torch_memory_saver's reading of a boolean variable: None when unset."""
    text = os.environ.get(name)
    if text is None:
        return None
    if text in ("1", "true", "TRUE", "yes", "YES"):
        return True
    if text in ("0", "false", "FALSE", "no", "NO"):
        return False
    raise ValueError(f"{name}={text!r}: expected 1, true, yes or 0, false, no")


def _env_backend():
    """The default CPU backup backend: $TMS_INIT_CPU_BACKUP_BACKEND, else 'pinned'."""
    text = os.environ.get("TMS_INIT_CPU_BACKUP_BACKEND", "")
    if text and text not in elastic.CPU_BACKUP_BACKENDS:
        raise ValueError(f"TMS_INIT_CPU_BACKUP_BACKEND={text!r}: expected 'pinned' or 'mmap'")
    return text or "pinned"


_oom_types = {}


def _as_torch_oom(err):
    """An XsallocError for an out-of-memory, as an exception that is also torch.OutOfMemoryError."""
    base = getattr(sys.modules.get("torch"), "OutOfMemoryError", None)
    if base is None or err.status != "XSA_ERROR_OUT_OF_MEMORY":
        return err
    cls = _oom_types.get(base)
    if cls is None:
        cls = _oom_types[base] = type("OutOfMemoryError", (XsallocError, base), {
            "__module__": __name__,
            "__doc__": "Out of device memory in xsalloc: both XsallocError and torch.OutOfMemoryError."})
    return cls(err.status, str(err))


@contextlib.contextmanager
def configure_subprocess():
    """torch_memory_saver's LD_PRELOAD set-up for child processes: nothing to do with xsalloc."""
    yield


class TorchMemorySaver:
    """torch_memory_saver's TorchMemorySaver: use the module's torch_memory_saver singleton."""

    def __init__(self):
        self._lock = threading.RLock()
        self._mem_pools = {}   # (tag, cpu backup, disk backup, backend or "", device) -> torch.cuda.MemPool
        self._vllm_tags = {}   # the tags use_memory_pool made, in order (a dict as an ordered set)
        self._local = threading.local()  # .backends: the CPU backup backends of the regions entered
        self._disk = _disk_spill.DiskSpill()
        self._default_backend = None     # set at first use (_ensure_initialized)
        self._impl_compat = None

    # ---- torch_memory_saver's API ----

    @contextlib.contextmanager
    def region(self, tag=_TAG_DEFAULT, enable_cpu_backup=False, enable_disk_backup=False, cpu_backup_backend=None):
        """PyTorch allocations of this thread inside the block are tagged `tag`:
        paused and resumed with it. enable_cpu_backup: pause copies their bytes
        to host memory (cpu_backup_backend 'pinned', the default, or 'mmap',
        whose host memory goes back to the system at resume); enable_disk_backup:
        to files (set_disk_backup_dir); neither: their bytes are dropped."""
        elastic.tag_flags(enable_cpu_backup, cpu_backup_backend)
        if enable_cpu_backup and enable_disk_backup:
            raise ValueError("enable_cpu_backup and enable_disk_backup are mutually exclusive")
        torch = self._torch()
        pool = self._pool(torch, tag, bool(enable_cpu_backup), bool(enable_disk_backup), cpu_backup_backend)
        with torch.cuda.use_mem_pool(pool), self._backend_scope(cpu_backup_backend):
            yield

    @contextlib.contextmanager
    def cuda_graph(self, cuda_graph, pool=None, stream=None, capture_error_mode="global", tag=_TAG_DEFAULT,
                   enable_cpu_backup=False, cpu_backup_backend=None):
        """torch.cuda.graph(cuda_graph, pool, stream, capture_error_mode) whose
        memory pool is tagged `tag`: pausing the tag releases the graph's
        memory (a pause waits for the device's work first) and resume maps it
        back at the same addresses, so the graph replays as before."""
        elastic.tag_flags(enable_cpu_backup, cpu_backup_backend)
        torch = self._torch()
        if pool is None:
            pool = torch.cuda.graph_pool_handle()  # the graph's pool id, known before the capture
        pool_id = tuple(getattr(pool, "id", pool))
        with torch.cuda.graph(cuda_graph, pool=pool, stream=stream, capture_error_mode=capture_error_mode):
            backend = (cpu_backup_backend or self._current_backend()) if enable_cpu_backup else None
            elastic.set_tag(torch.cuda.current_device(), pool_id, tag, enable_cpu_backup, backend)
            yield

    @contextlib.contextmanager
    def disable(self):
        """Inside a region: allocations in the block go to a fresh untagged pool, never paused."""
        torch = self._torch()
        pool = torch.cuda.MemPool()
        with torch.cuda.use_mem_pool(pool):
            yield

    def pause(self, tag=None):
        """Pauses the memory tagged `tag` (None: all tagged memory) on every device."""
        self._ensure_initialized()
        saved = self._disk.save(self._torch(), self._disk_pools(), tag) if self._disk_pools() else []
        try:
            elastic.pause(tag)
        except BaseException:
            self._disk.drop_unpaused(saved)
            raise

    def resume(self, tag=None):
        """Resumes the memory tagged `tag` (None: all). Out of device memory: an
        exception that is both torch.OutOfMemoryError and XsallocError; that
        device's memory stays paused with its backups, and resume can be tried again."""
        self._ensure_initialized()
        try:
            elastic.resume(tag)
        except XsallocError as e:
            oom = _as_torch_oom(e)
            if oom is e:
                raise
            raise oom from None
        finally:
            if self._disk.saved():
                self._disk.restore(self._torch(), tag)

    def get_cpu_backup(self, x, zero_copy=False):
        """The host copy of tensor x (while paused, or after resume with
        retain_cpu_backup) as a CPU tensor of x's dtype and shape, else None.
        zero_copy: a view of the host copy itself (valid until it is released), else a clone."""
        torch = sys.modules["torch"]
        if not x.is_cuda:
            raise ValueError(f"get_cpu_backup: x is on {x.device}, not a CUDA device")
        if not x.is_contiguous():
            raise ValueError(f"get_cpu_backup: x must be contiguous (shape {tuple(x.shape)}, stride {x.stride()})")
        n = x.numel() * x.element_size()
        host = elastic.cpu_backup(x.data_ptr(), n)
        if host is None:
            return None
        if n == 0:
            return torch.empty(x.shape, dtype=x.dtype)
        ans = torch.frombuffer((ctypes.c_uint8 * n).from_address(host), dtype=torch.uint8).view(x.dtype).view(x.shape)
        return ans if zero_copy else ans.clone()

    @property
    def retain_cpu_backup(self):
        """Host copies kept after resume (and reused by the next pause) instead of
        released; $TMS_RETAIN_CPU_BACKUP=1 turns it on. Consulted at resume."""
        self._ensure_initialized()
        return elastic.backup_retention()

    @retain_cpu_backup.setter
    def retain_cpu_backup(self, value):
        self._ensure_initialized()
        elastic.set_backup_retention(bool(value))

    def _set_hook_mode(self, hook_mode):
        if hook_mode not in HOOK_MODES:
            raise ValueError(f"hook_mode must be 'preload' or 'torch', not {hook_mode!r}")

    hook_mode = property(fset=_set_hook_mode, doc="Accepted and ignored: xsalloc needs no hook (no LD_PRELOAD).")

    def _set_memory_margin_bytes(self, value):
        warnings.warn("xsalloc.memory_saver ignores memory_margin_bytes: cap xsalloc's memory with "
                      "torch.cuda.set_per_process_memory_fraction (or per_process_memory_fraction in "
                      "XSALLOC_CONF) instead", stacklevel=2)

    memory_margin_bytes = property(fset=_set_memory_margin_bytes, doc="Accepted and ignored, with a warning.")

    @property
    def enabled(self):
        return True

    def set_disk_backup_dir(self, path):
        """Directory for disk backup files (created if needed); default $TMS_DISK_BACKUP_DIR, else /tmp."""
        os.makedirs(path, exist_ok=True)
        self._disk.directory = path

    # ---- vLLM's CuMemAllocator shape ----

    @contextlib.contextmanager
    def use_memory_pool(self, tag=_TAG_DEFAULT):
        """vLLM's use_memory_pool: allocations in the block are tagged `tag`
        ('weights', 'kv_cache'); sleep() decides at pause time what is backed up."""
        with self.region(tag=tag):
            with self._lock:
                self._vllm_tags[tag] = None
            yield

    def sleep(self, offload_tags=(WEIGHTS,)):
        """vLLM's sleep: pauses the tags use_memory_pool made, backing up those in
        offload_tags (a tag or a tuple) to host memory and dropping the others,
        then returns the free cache (level 1: offload_tags=('weights',); level 2: ())."""
        self._ensure_initialized()
        offload = {offload_tags} if isinstance(offload_tags, str) else set(offload_tags)
        for tag in self._vllm_tag_list():
            elastic.pause(tag, backup=tag in offload)
        gc.collect()
        xsalloc.empty_cache()

    def wake_up(self, tags=None):
        """vLLM's wake_up: resumes `tags` (None: every tag use_memory_pool made)."""
        for tag in self._vllm_tag_list() if tags is None else ([tags] if isinstance(tags, str) else tags):
            self.resume(tag)

    # ---- internals ----

    def _ensure_initialized(self):
        """First use: torch_memory_saver's environment (TMS_RETAIN_CPU_BACKUP, TMS_INIT_CPU_BACKUP_BACKEND)."""
        with self._lock:
            if self._default_backend is not None:
                return
            backend = _env_backend()
            retain = _env_bool("TMS_RETAIN_CPU_BACKUP")
            if retain is not None:
                elastic.set_backup_retention(retain)
            self._default_backend = backend

    def _torch(self):
        """torch, once xsalloc is its allocator through the adapter (MemPool needs it)."""
        from . import torch as xsalloc_torch

        torch = xsalloc_torch._import_torch()
        if not xsalloc_torch.installed():
            raise RuntimeError(_NOT_INSTALLED)
        if not xsalloc_torch.adapter_in_use():
            raise RuntimeError(_NO_ADAPTER)
        self._ensure_initialized()
        return torch

    def _pool(self, torch, tag, enable_cpu_backup, enable_disk_backup, cpu_backup_backend):
        """The tagged MemPool of these settings on the current device, made and tagged on first use."""
        device = torch.cuda.current_device()
        backend = (cpu_backup_backend or self._current_backend()) if enable_cpu_backup else ""
        key = (tag, enable_cpu_backup, enable_disk_backup, backend, device)
        with self._lock:
            pool = self._mem_pools.get(key)
            if pool is None:
                pool = torch.cuda.MemPool()
                elastic.set_tag(device, pool.id, tag, enable_cpu_backup, backend or None)
                self._mem_pools[key] = pool
        return pool

    def _disk_pools(self):
        with self._lock:
            return {k: p for k, p in self._mem_pools.items() if k[2]}

    def _vllm_tag_list(self):
        with self._lock:
            return list(self._vllm_tags)

    def _current_backend(self):
        """This thread's CPU backup backend: the innermost region's explicit one, else the default."""
        self._ensure_initialized()
        for backend in reversed(getattr(self._local, "backends", ())):
            if backend is not None:
                return backend
        return self._default_backend

    @contextlib.contextmanager
    def _backend_scope(self, backend):
        stack = self._local.__dict__.setdefault("backends", [])
        stack.append(backend)
        try:
            yield
        finally:
            stack.pop()

    @contextlib.contextmanager
    def _with_region_config(self, tag, enable_cpu_backup, cpu_backup_backend=None, enable_disk_backup=False):
        """torch_memory_saver's thread region configuration; here the C-level
        tag region (xsa_malloc and CuPy paths) with that backend: _tms_compat.py."""
        if enable_disk_backup:
            raise NotImplementedError("xsalloc: disk backup applies to region()'s PyTorch allocations only; "
                                      "a C-level tag region has host backup (enable_cpu_backup) or none")
        with elastic.region(tag, enable_cpu_backup, cpu_backup_backend), self._backend_scope(cpu_backup_backend):
            yield

    @property
    def _impl(self):
        """The torch_memory_saver internals its own tests reach (_tms_compat.py)."""
        with self._lock:
            if self._impl_compat is None:
                self._impl_compat = _tms_compat.Impl(self)
            return self._impl_compat


torch_memory_saver = TorchMemorySaver()
