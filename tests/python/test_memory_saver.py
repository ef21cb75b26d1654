"""xsalloc.memory_saver (torch_memory_saver's and vLLM's API) on the simulated driver, without torch.

Design: a stand-in for torch with only what memory_saver touches, doing
what torch's adapter does with xsalloc as its allocator: MemPool() creates
the pool (xsa_mempool_create, torch's createOrIncrefPool), use_mem_pool and
torch.cuda.graph route allocations to a pool (xsa_begin_allocate_to_pool,
every stream; torch's filter takes the thread's) and end the routing, and a
"tensor" is an allocation made through xsa_torch_malloc while routed. The copies the
disk backup makes are memmoves: simulated device memory is host memory.
So the pools, tags, pauses, backups and files are xsalloc's and the
saver's own; only torch is stood in for. xsalloc.torch is marked as
installed with its adapter (what use() leaves behind) unless a test says
otherwise. Shares test_elastic's two 256 MiB simulated devices.
"""

import contextlib
import ctypes
import gc
import os
import tempfile
import types
import unittest
import warnings

import xsalloc
import xsalloc.elastic as elastic
import xsalloc.memory_saver as memory_saver
import xsalloc.torch as xsalloc_torch
from xsalloc import _lib, _tms_compat
from test_elastic import ElasticSimCase, end_route, route
from test_xsalloc import TORCH_MALLOC, module_as

MiB = 1 << 20


class DevBytes:
    """n bytes at an address (device memory of the simulated driver, or host memory): torch's
    uint8 tensor as far as the disk backup uses one (slices, copy_, data_ptr)."""

    def __init__(self, ptr, n, owner=None):
        self.ptr, self.n, self.owner = ptr, n, owner

    def data_ptr(self):
        return self.ptr

    def __getitem__(self, s):
        start, stop, _ = s.indices(self.n)
        return DevBytes(self.ptr + start, stop - start, self)

    def copy_(self, src):
        assert src.n == self.n, (src.n, self.n)
        ctypes.memmove(self.ptr, src.ptr, self.n)


class HostView:
    """torch.frombuffer's tensor over a host copy, as get_cpu_backup uses it."""

    def __init__(self, buf):
        self.buf = buf

    def view(self, _):
        return self

    def clone(self):
        return HostView((ctypes.c_uint8 * len(self.buf)).from_buffer_copy(self.buf))

    def data_ptr(self):
        return ctypes.addressof(self.buf)

    def tobytes(self):
        return bytes(self.buf)


class FakeTensor:
    def __init__(self, ptr, n, contiguous=True):
        self.ptr, self.n, self.contiguous = ptr, n, contiguous
        self.is_cuda, self.device, self.dtype, self.shape = True, "cuda:0", "uint8", (n,)

    def data_ptr(self):
        return self.ptr

    def numel(self):
        return self.n

    def element_size(self):
        return 1

    def is_contiguous(self):
        return self.contiguous

    def stride(self):
        return (1 if self.contiguous else 2,)


def saver_torch(lib):
    """A stand-in for torch over xsalloc's entry points (see the module's design note)."""
    torch = types.ModuleType("torch")
    state = types.SimpleNamespace(device=0, next_id=1000, syncs=0)
    torch.version = types.SimpleNamespace(cuda="13.0")
    torch.uint8 = "uint8"
    torch.OutOfMemoryError = type("OutOfMemoryError", (RuntimeError,), {})

    def release(device, pool_id):
        lib.check(lib.cdll.xsa_mempool_release(device, _lib.MempoolId(*pool_id)), "releasePool")

    def new_id():
        state.next_id += 1
        return (0, state.next_id)

    class MemPool:
        def __init__(self):
            self.id, self.device = new_id(), state.device
            lib.check(lib.cdll.xsa_mempool_create(self.device, _lib.MempoolId(*self.id)), "createOrIncrefPool")

        def __del__(self):
            lib.cdll.xsa_mempool_release(self.device, _lib.MempoolId(*self.id))

    @contextlib.contextmanager
    def use_mem_pool(pool):
        route(lib, state.device, pool.id)  # beginAllocateToPool: a use of the pool, and its routing
        try:
            yield
        finally:
            end_route(lib, state.device, pool.id)
            release(state.device, pool.id)

    @contextlib.contextmanager
    def graph(g, pool=None, stream=None, capture_error_mode="global"):
        g.pool_id = tuple(pool)  # capture_begin(pool): a routing to the graph's pool (and a use of it)
        route(lib, state.device, g.pool_id)
        try:
            yield
        finally:
            end_route(lib, state.device, g.pool_id)

    def synchronize(device=None):
        state.syncs += 1
        lib.cdll.xsa_sim_complete_all()

    def empty(n, dtype=None, pin_memory=False):
        buf = (ctypes.c_uint8 * n)()
        return DevBytes(ctypes.addressof(buf), n, buf)

    def as_tensor(obj, device=None):
        cai = obj.__cuda_array_interface__
        return DevBytes(cai["data"][0], cai["shape"][0])

    torch.cuda = types.SimpleNamespace(
        MemPool=MemPool, use_mem_pool=use_mem_pool, graph=graph, graph_pool_handle=new_id,
        current_device=lambda: state.device, synchronize=synchronize, state=state)
    torch.empty, torch.as_tensor = empty, as_tensor
    torch.frombuffer = lambda buf, dtype=None: HostView(buf)
    return torch


class SaverCase(ElasticSimCase):
    def setUp(self):
        super().setUp()
        self.saved_torch_state = (xsalloc_torch._installed, xsalloc_torch._adapter_module)
        xsalloc_torch._installed, xsalloc_torch._adapter_module = "torch's allocator", "the adapter"
        self.torch = saver_torch(self.lib)
        self.enterContext(module_as("torch", self.torch))
        self.saver = memory_saver.TorchMemorySaver()
        self.torch_malloc = TORCH_MALLOC(self.lib.address("xsa_torch_malloc"))

    def tearDown(self):
        xsalloc_torch._installed, xsalloc_torch._adapter_module = self.saved_torch_state
        self.saver = None  # its MemPools go (xsa_mempool_release) before the invariants are checked
        gc.collect()  # the saver and its _impl refer to each other
        super().tearDown()

    def tensor(self, n, device=0):
        """A torch allocation of n bytes (routed to the pool of the region it is made in)."""
        p = self.torch_malloc(n, device, None)
        self.assertTrue(p)
        return p

    def in_pool(self, p, pool):
        return p in [ptr for ptr, _ in elastic.live_blocks(pool.device, pool.id)]


class TorchMemorySaverTest(SaverCase):
    def test_region_pools_are_keyed_and_tagged_as_in_torch_memory_saver(self):
        with self.saver.region(tag="w", enable_cpu_backup=True):
            a = self.tensor(2 * MiB)
        with self.saver.region(tag="w", enable_cpu_backup=True):
            b = self.tensor(MiB)
        with self.saver.region(tag="w", enable_cpu_backup=True, cpu_backup_backend="mmap"):
            c = self.tensor(MiB)
        with self.saver.region(tag="kv"):
            d = self.tensor(MiB)
        pools = self.saver._impl._mem_pools
        self.assertEqual(set(pools), {("w", True, False, "pinned", 0), ("w", True, False, "mmap", 0),
                                      ("kv", False, False, "", 0)})
        self.assertTrue(self.in_pool(a, pools["w", True, False, "pinned", 0]) and
                        self.in_pool(b, pools["w", True, False, "pinned", 0]), "one pool per key")
        self.assertTrue(self.in_pool(c, pools["w", True, False, "mmap", 0]))
        data = {p: self.fill(p, n) for p, n in ((a, 2 * MiB), (b, MiB), (c, MiB), (d, MiB))}
        self.saver.pause("w")
        self.assertEqual((self.mapped(a), self.mapped(c), self.mapped(d)), (False, False, True))
        self.assertEqual(self.saver.get_cpu_backup(FakeTensor(a, 2 * MiB)).tobytes(), data[a])
        self.saver.pause()
        self.assertIsNone(self.saver.get_cpu_backup(FakeTensor(d, MiB)), "kv has no backup")
        self.saver.resume()
        self.assertEqual([ctypes.string_at(p, n) for p, n in ((a, 2 * MiB), (b, MiB), (c, MiB))],
                         [data[a], data[b], data[c]])
        self.assertIsNone(self.saver.get_cpu_backup(FakeTensor(a, 2 * MiB)))
        for p in (a, b, c, d):
            self.free(p)

    def test_get_cpu_backup(self):
        with self.saver.region(enable_cpu_backup=True):
            a = self.tensor(MiB)
        data = self.fill(a, MiB)
        self.saver.pause()
        view = self.saver.get_cpu_backup(FakeTensor(a, MiB), zero_copy=True)
        self.assertEqual(view.data_ptr(), elastic.cpu_backup(a, MiB), "zero_copy: the host copy itself")
        copy = self.saver.get_cpu_backup(FakeTensor(a, MiB))
        self.assertNotEqual(copy.data_ptr(), view.data_ptr())
        self.assertEqual(copy.tobytes(), data)
        with self.assertRaisesRegex(ValueError, "contiguous"):
            self.saver.get_cpu_backup(FakeTensor(a, MiB, contiguous=False))
        self.saver.resume()
        self.free(a)

    def test_retain_cpu_backup_property_and_environment(self):
        self.assertIs(self.saver.retain_cpu_backup, False)
        self.saver.retain_cpu_backup = True
        self.assertIs(elastic.backup_retention(), True)
        self.assertIs(self.saver.retain_cpu_backup, True)
        self.saver.retain_cpu_backup = False
        with env(TMS_RETAIN_CPU_BACKUP="1"):
            self.assertIs(memory_saver.TorchMemorySaver().retain_cpu_backup, True, "read at first use")
        with env(TMS_RETAIN_CPU_BACKUP="0"):
            self.assertIs(memory_saver.TorchMemorySaver().retain_cpu_backup, False)
        with env(TMS_RETAIN_CPU_BACKUP="maybe"):
            with self.assertRaisesRegex(ValueError, "TMS_RETAIN_CPU_BACKUP='maybe'"):
                memory_saver.TorchMemorySaver().retain_cpu_backup

    def test_backup_backend_from_the_environment_and_regions(self):
        with env(TMS_INIT_CPU_BACKUP_BACKEND="mmap"):
            saver = memory_saver.TorchMemorySaver()
            cdll = saver._impl._binary_wrapper.cdll
            self.assertEqual(cdll.tms_get_cpu_backup_backend(), b"mmap")
            with saver.region(enable_cpu_backup=True):
                self.assertEqual(cdll.tms_get_cpu_backup_backend(), b"mmap")
                with saver.region(tag="p", enable_cpu_backup=True, cpu_backup_backend="pinned"):
                    self.assertEqual(cdll.tms_get_cpu_backup_backend(), b"pinned")
                    with saver.region(tag="q", enable_cpu_backup=True):
                        pass  # the enclosing region's backend, as torch_memory_saver resolves it
            self.assertEqual(set(saver._mem_pools), {("default", True, False, "mmap", 0),
                                                     ("p", True, False, "pinned", 0), ("q", True, False, "pinned", 0)})
        with env(TMS_INIT_CPU_BACKUP_BACKEND="disk"):
            with self.assertRaisesRegex(ValueError, "TMS_INIT_CPU_BACKUP_BACKEND='disk'"):
                memory_saver.TorchMemorySaver().pause()

    def test_arguments_and_accepted_settings(self):
        with self.assertRaisesRegex(ValueError, "requires enable_cpu_backup=True"):
            with self.saver.region(cpu_backup_backend="mmap"):
                pass
        with self.assertRaisesRegex(ValueError, "mutually exclusive"):
            with self.saver.region(enable_cpu_backup=True, enable_disk_backup=True):
                pass
        self.assertEqual(self.saver._mem_pools, {}, "nothing made for refused arguments")
        self.saver.hook_mode = "preload"
        self.saver.hook_mode = "torch"
        with self.assertRaisesRegex(ValueError, "hook_mode"):
            self.saver.hook_mode = "ld_preload"
        with self.assertRaises(AttributeError):
            self.saver.hook_mode
        with self.assertWarnsRegex(UserWarning, "ignores memory_margin_bytes"):
            self.saver.memory_margin_bytes = 1 << 30
        self.assertIs(self.saver.enabled, True)
        with memory_saver.configure_subprocess():
            pass
        self.assertIsInstance(memory_saver.torch_memory_saver, memory_saver.TorchMemorySaver)

    def test_xsalloc_must_be_torchs_allocator(self):
        xsalloc_torch._installed = None
        with self.assertRaisesRegex(RuntimeError, r"python -m xsalloc\.run.*xsalloc\.torch\.use\(\)"):
            with self.saver.region():
                pass
        xsalloc_torch._installed = "the pluggable allocator"
        xsalloc_torch._adapter_module = None
        with self.assertRaisesRegex(RuntimeError, "MemPool.*adapter"):
            with self.saver.cuda_graph(types.SimpleNamespace()):
                pass

    def test_cuda_graph_tags_the_graphs_pool(self):
        g = types.SimpleNamespace()
        with self.saver.cuda_graph(g, tag="graph"):
            p = self.tensor(8 * MiB)  # the graph's intermediate, freed inside the capture
            self.free(p)
            out = self.tensor(MiB)
        self.assertEqual(elastic.live_blocks(0, g.pool_id), [(out, MiB)])
        self.assertEqual(g.pool_id[0], 0, "a handle from graph_pool_handle()")
        self.saver.pause("graph")
        self.assertEqual(elastic.paused_pools(), {(0, g.pool_id)})
        self.assertFalse(self.mapped(out) or self.mapped(p + 6 * MiB), "its free memory too")
        self.saver.resume("graph")
        self.assertTrue(self.mapped(out))
        # (No stream captures here, so the pool's free pages stay dropped; with a real capture they come
        # back: the C pause tests, and torch_memory_saver's cuda_graph example on a GPU.)
        g2 = types.SimpleNamespace()
        with self.saver.cuda_graph(g2, pool=g.pool_id, tag="graph"):  # a shared pool keeps its tag
            pass
        with self.assertRaises(xsalloc.XsallocError):
            with self.saver.cuda_graph(types.SimpleNamespace(), pool=g.pool_id, tag="other"):
                pass
        self.free(out)
        for _ in range(3):  # the three graphs' uses of the pool, as their destructors drop them
            self.lib.check(self.lib.cdll.xsa_mempool_release(0, _lib.MempoolId(*g.pool_id)), "releasePool")

    def test_resume_out_of_memory_is_torchs_error_and_recoverable(self):
        with self.saver.region(tag="w", enable_cpu_backup=True):
            a = self.tensor(64 * MiB)
        data = self.fill(a, 64 * MiB)
        self.saver.pause("w")
        hog = self.malloc(224 * MiB)
        with self.assertRaises(self.torch.OutOfMemoryError) as cm:
            self.saver.resume("w")
        self.assertIsInstance(cm.exception, xsalloc.XsallocError)
        self.assertEqual(cm.exception.status, "XSA_ERROR_OUT_OF_MEMORY")
        self.free(hog)
        self.saver.resume("w")
        self.assertEqual(ctypes.string_at(a, 64 * MiB), data)
        self.free(a)

    def test_disable_routes_to_an_untagged_pool(self):
        with self.saver.region(tag="w"):
            with self.saver.disable():
                p = self.tensor(MiB)
        self.saver.pause("w")
        try:
            self.assertTrue(self.mapped(p), "allocated in disable(): not paused")
        finally:
            self.saver.resume("w")
            self.free(p)


class VllmShapeTest(SaverCase):
    def test_sleep_backs_up_the_offload_tags_and_drops_the_others(self):
        with self.saver.use_memory_pool(tag=memory_saver.WEIGHTS):
            w = self.tensor(4 * MiB)
        with self.saver.use_memory_pool(tag=memory_saver.KV_CACHE):
            kv = self.tensor(8 * MiB)
        with self.saver.region(tag="other"):  # not the allocator's: sleep leaves it alone
            other = self.tensor(MiB)
        data = self.fill(w, 4 * MiB)
        cached = self.malloc(2 * MiB)
        self.free(cached)
        self.saver.sleep()  # level 1: offload_tags=("weights",)
        self.assertEqual((self.mapped(w), self.mapped(kv), self.mapped(other)), (False, False, True))
        self.assertIsNotNone(elastic.cpu_backup(w, 4 * MiB))
        self.assertIsNone(elastic.cpu_backup(kv, 8 * MiB))
        self.assertEqual(self.stat("reserved_bytes.all.current"), 2 * MiB, "the free cache went back too")
        self.saver.wake_up(tags=["kv_cache"])
        self.assertEqual((self.mapped(w), self.mapped(kv)), (False, True))
        self.saver.wake_up()
        self.assertEqual(ctypes.string_at(w, 4 * MiB), data)
        self.saver.sleep(offload_tags=())  # level 2: nothing kept
        self.assertIsNone(elastic.cpu_backup(w, 4 * MiB))
        self.saver.wake_up()
        self.saver.sleep(offload_tags="kv_cache")
        self.assertIsNone(elastic.cpu_backup(w, 4 * MiB))
        self.assertIsNotNone(elastic.cpu_backup(kv, 8 * MiB))
        self.saver.wake_up()
        for p in (w, kv, other):
            self.free(p)


class CompatibilitySurfaceTest(SaverCase):
    def test_what_torch_memory_savers_tests_read(self):
        impl = self.saver._impl
        self.assertIs(impl, self.saver._impl)
        self.saver._ensure_initialized()
        self.assertEqual(impl._binary_wrapper.cdll.tms_get_cpu_backup_backend(), b"pinned")
        with self.assertRaisesRegex(AttributeError, "tms_pause.*compatibility surface"):
            impl._binary_wrapper.cdll.tms_pause
        with self.saver.region(tag="r", enable_cpu_backup=True):
            t = self.tensor(MiB)
        key = ("r", True, False, "pinned", 0)
        pool = impl._mem_pools.pop(key)
        self.assertNotIn(key, self.saver._mem_pools, "the saver's own dict")
        with impl._with_region_config(tag="r2", enable_cpu_backup=True, cpu_backup_backend="mmap"):
            self.assertEqual(impl._binary_wrapper.cdll.tms_get_cpu_backup_backend(), b"mmap")
            c = self.malloc(MiB)  # the C path, tagged by the region configuration
        self.assertEqual(impl._binary_wrapper.cdll.tms_get_cpu_backup_backend(), b"pinned")
        data = self.fill(c, MiB)
        self.saver.pause("r2")
        self.assertEqual(ctypes.string_at(elastic.cpu_backup(c, MiB), MiB), data)
        self.saver.resume("r2")
        with self.assertRaisesRegex(NotImplementedError, "disk backup"):
            with impl._with_region_config(tag="d", enable_cpu_backup=False, enable_disk_backup=True):
                pass
        del pool
        for p in (t, c):
            self.free(p)

    def test_cuda_runtime_functions_come_from_torchs_libcudart(self):
        _tms_compat.cuda_runtime.cache_clear()
        try:
            fn = self.saver._impl._binary_wrapper.cdll.cudaHostGetFlags
        except AttributeError as e:
            self.assertIn("libcudart.so.13", str(e), "named after torch.version.cuda")
        else:
            self.assertTrue(callable(fn))
        finally:
            _tms_compat.cuda_runtime.cache_clear()


class DiskBackupTest(SaverCase):
    def setUp(self):
        super().setUp()
        self.dir = self.enterContext(tempfile.TemporaryDirectory())
        self.saver.set_disk_backup_dir(self.dir)

    def files(self):
        return {f: os.path.getsize(os.path.join(self.dir, f)) for f in os.listdir(self.dir)}

    def test_blocks_go_to_files_and_come_back(self):
        big, small = 13 * MiB // 4 + 12345, 7
        with env(TMS_DISK_BACKUP_CHUNK_MB="1"):  # the staging buffer: 1 MiB, so the big block takes 4 chunks
            with self.saver.region(enable_disk_backup=True):
                a, b = self.tensor(big), self.tensor(small)
            with self.saver.region(enable_disk_backup=False):
                c = self.tensor(MiB)
            data_a, data_b = self.fill(a, big), self.fill(b, small)
            sizes = set()
            for _ in range(3):
                self.saver.pause()
                self.assertFalse(self.mapped(a) or self.mapped(c))
                self.assertIsNone(elastic.cpu_backup(a, big), "no host copy")
                files = self.files()
                self.assertEqual(sorted(files.values()), [small, big], "a file per live block, its requested bytes")
                sizes.add(tuple(sorted(files.values())))
                self.saver.pause()  # paused already: nothing read or written
                self.assertEqual(self.files(), files)
                self.saver.resume()
                self.assertEqual((ctypes.string_at(a, big), ctypes.string_at(b, small)), (data_a, data_b))
                self.assertEqual(self.files(), {}, "deleted at resume")
            self.assertEqual(len(sizes), 1)
            self.assertEqual(self.saver._disk._staging[0].n, MiB, "staged through $TMS_DISK_BACKUP_CHUNK_MB")
        for p in (a, b, c):
            self.free(p)

    def test_freed_while_paused_is_not_written_back_and_oom_keeps_the_files(self):
        with self.saver.region(tag="d", enable_disk_backup=True):
            a, b = self.tensor(64 * MiB), self.tensor(MiB)
        data_a = self.fill(a, 64 * MiB)
        self.fill(b, MiB)
        self.saver.pause("d")
        self.free(b)
        hog = self.malloc(224 * MiB)
        with self.assertRaises(self.torch.OutOfMemoryError):
            self.saver.resume("d")
        self.assertEqual(len(self.files()), 2, "still paused: the files stay")
        self.free(hog)
        read, disk_read = [], self.saver._disk._read
        self.saver._disk._read = lambda torch, device, ptr, n, path: (read.append(ptr), disk_read(torch, device, ptr, n, path))
        self.saver.resume("d")
        self.assertEqual(read, [a], "b was freed while paused: its file is not read back")
        self.assertEqual(ctypes.string_at(a, 64 * MiB), data_a)
        self.assertEqual(self.files(), {})
        self.free(a)


@contextlib.contextmanager
def env(**values):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


if __name__ == "__main__":
    warnings.simplefilter("default")
    unittest.main()
