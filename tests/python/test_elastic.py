"""xsalloc.elastic (pausing and resuming tagged memory) on the simulated driver, through ctypes.

Design: the package's framework-free layer is driven as CuPy and C users
drive it: a tag region around xsa_malloc, or a memory pool tagged as
torch's MemPool is, then pause and resume. The simulated driver's device
memory is host memory mapped at the device addresses (PROT_NONE once
unmapped), so the tests write bytes before a pause, check that the pages
are really gone while paused (xsa_sim_page_access), and read the bytes
back at the same address after resume. Two simulated devices of 256 MiB
each, so that an out-of-memory at resume is reachable; after each test:
the allocator's invariants on both devices and no simulated-GPU violation
(a use-after-unmap would be one). Needs XSALLOC_LIBRARY and XSA_DRIVER=sim.
"""

import contextlib
import ctypes
import os
import threading
import unittest

import xsalloc
import xsalloc.elastic as elastic
from xsalloc import _lib
from test_xsalloc import STREAM2, TORCH_MALLOC

MiB = 1 << 20


class SimConfig(ctypes.Structure):
    """xsa_sim_config (include/xsalloc/sim.h)."""
    _fields_ = [("devices", ctypes.c_int), ("capacity", ctypes.c_size_t), ("granularity", ctypes.c_size_t),
                ("eager_events", ctypes.c_int), ("vmm_supported", ctypes.c_int),
                ("fd_handles_supported", ctypes.c_int), ("peer", (ctypes.c_ubyte * 8) * 8)]


class SimViolations(ctypes.Structure):
    """xsa_sim_violations."""
    _fields_ = [("unmapped_in_use", ctypes.c_uint64), ("races", ctypes.c_uint64), ("bad_launches", ctypes.c_uint64),
                ("failed_captures", ctypes.c_uint64), ("first", ctypes.c_char * 512)]


def route(lib, device, pool_id):
    """Routes the device's allocations to the pool until end_route, as torch's adapter does for
    use_mem_pool and graph capture (xsa_begin_allocate_to_pool; no filter: every stream)."""
    fn = lib.cdll.xsa_begin_allocate_to_pool
    fn.argtypes = [ctypes.c_int, _lib.MempoolId, ctypes.c_void_p, ctypes.c_void_p]
    lib.check(fn(device, _lib.MempoolId(*pool_id), None, None), "xsa_begin_allocate_to_pool")


def end_route(lib, device, pool_id):
    fn = lib.cdll.xsa_end_allocate_to_pool
    fn.argtypes = [ctypes.c_int, _lib.MempoolId]
    lib.check(fn(device, _lib.MempoolId(*pool_id)), "xsa_end_allocate_to_pool")


def configure_sim(lib, devices=1, capacity=None):
    """Shuts xsalloc down and configures the simulated driver (default: its defaults)."""
    c = lib.cdll
    c.xsa_shutdown()
    cfg = SimConfig()
    c.xsa_sim_default_config(ctypes.byref(cfg))
    cfg.devices = devices
    if capacity is not None:
        cfg.capacity = capacity
    st = c.xsa_sim_configure(ctypes.byref(cfg))
    if st != 0:
        raise AssertionError(f"xsa_sim_configure: {st}")


class ElasticSimCase(unittest.TestCase):
    """Two simulated devices of 256 MiB; xsalloc initialised with `conf`."""

    conf = ""
    devices = 2

    def setUp(self):
        self.lib = _lib.load()
        self.addCleanup(configure_sim, self.lib)  # the default simulated driver the other tests expect
        configure_sim(self.lib, devices=self.devices, capacity=256 * MiB)
        self.lib.check(self.lib.cdll.xsa_use_driver(b"sim"), "xsa_use_driver")
        self.lib.init(self.conf)
        self.addCleanup(elastic.set_backup_retention, False)  # first: it is process-wide

    def tearDown(self):
        c = self.lib.cdll
        for d in range(self.devices):
            self.lib.check(c.xsa_check_invariants(d), f"xsa_check_invariants({d})")
        v = SimViolations()
        c.xsa_sim_get_violations(ctypes.byref(v))
        self.assertEqual((v.unmapped_in_use, v.bad_launches), (0, 0), v.first.decode())

    def malloc(self, size, device=0, stream=None):
        p = ctypes.c_void_p()
        self.lib.check(self.lib.cdll.xsa_malloc(ctypes.byref(p), size, device, stream), f"xsa_malloc({size})")
        return p.value

    def free(self, p):
        self.lib.check(self.lib.cdll.xsa_free(p), "xsa_free")

    def fill(self, p, n):
        """Writes n random bytes at device address p; returns them."""
        data = os.urandom(n)
        ctypes.memmove(p, data, n)
        return data

    def mapped(self, p):
        """True when the page holding p is mapped with access granted (simulated driver)."""
        return self.lib.cdll.xsa_sim_page_access(ctypes.c_uint64(p)) != 0

    def stat(self, key, device=0):
        return xsalloc.memory_stats(device)[key]


class PauseResumeTest(ElasticSimCase):
    def test_backup_restores_the_bytes_at_the_same_address(self):
        with elastic.region("w", enable_cpu_backup=True):
            p = self.malloc(3 * MiB)
        data = self.fill(p, 3 * MiB)
        reserved = self.stat("reserved_bytes.all.current")
        elastic.pause("w")
        self.assertFalse(self.mapped(p), "the pages are released")
        self.assertEqual(elastic.paused_bytes(0, "w"), 4 * MiB, "3 MiB on two 2 MiB pages")
        self.assertEqual(elastic.paused_bytes(0), 4 * MiB)
        self.assertEqual(elastic.paused_bytes(0, "other"), 0)
        self.assertEqual(elastic.paused_bytes(1, "w"), 0)
        self.assertEqual(self.stat("reserved_bytes.all.current"), reserved - 4 * MiB)
        self.assertEqual(self.stat("allocated_bytes.all.current"), 0, "paused bytes leave allocated_bytes")
        self.assertEqual(self.stat("paused_bytes.current"), 4 * MiB)
        host = elastic.cpu_backup(p, 3 * MiB)
        self.assertIsNotNone(host)
        self.assertEqual(ctypes.string_at(host, 3 * MiB), data)
        self.assertEqual(elastic.cpu_backup(p + MiB, MiB), host + MiB, "a range inside the allocation")
        report = elastic.last_report(0)
        self.assertEqual((report["pools"], report["pages"], report["copied_bytes"]), (1, 2, 3 * MiB))
        self.assertGreater(report["copy_s"], 0)
        elastic.pause("w")  # pausing a paused tag does nothing
        self.assertEqual(elastic.last_report(0), report, "a pause that did nothing leaves the report")
        elastic.resume("w")
        self.assertEqual(elastic.last_report(0, resume=True)["pages"], 2)
        self.assertTrue(self.mapped(p))
        self.assertEqual(ctypes.string_at(p, 3 * MiB), data)
        self.assertEqual(elastic.paused_bytes(0), 0)
        self.assertEqual(self.stat("allocated_bytes.all.current"), 3 * MiB)
        self.assertEqual(self.stat("paused_bytes.peak"), 4 * MiB)
        self.assertIsNone(elastic.cpu_backup(p, 3 * MiB), "no retention: the host copy is released")
        self.free(p)

    def test_discard_keeps_the_address_and_pause_flags_override_the_tag(self):
        with elastic.region("kv"):
            p = self.malloc(2 * MiB)
        self.fill(p, 2 * MiB)
        elastic.pause("kv")
        self.assertFalse(self.mapped(p))
        self.assertIsNone(elastic.cpu_backup(p, 2 * MiB), "no backup without the flag")
        elastic.resume("kv")
        self.assertTrue(self.mapped(p))
        data = self.fill(p, 2 * MiB)
        elastic.pause("kv", backup=True)  # XSA_PAUSE_BACKUP: backed up whatever the tag says
        self.assertEqual(ctypes.string_at(elastic.cpu_backup(p, 2 * MiB), 2 * MiB), data)
        elastic.resume()
        self.assertEqual(ctypes.string_at(p, 2 * MiB), data)
        with elastic.region("w", enable_cpu_backup=True):
            q = self.malloc(MiB)
        elastic.pause(backup=False)  # XSA_PAUSE_DISCARD: nothing backed up, every tag
        self.assertIsNone(elastic.cpu_backup(q, MiB))
        self.assertFalse(self.mapped(p) or self.mapped(q))
        elastic.resume()
        self.free(p)
        self.free(q)

    def test_untagged_memory_and_other_tags_stay(self):
        plain = self.malloc(2 * MiB)
        with elastic.region("a"):
            a = self.malloc(2 * MiB)
        with elastic.region("b"):
            b = self.malloc(2 * MiB)
        elastic.pause("a")
        self.assertEqual((self.mapped(plain), self.mapped(a), self.mapped(b)), (True, False, True))
        elastic.pause()  # tag None: every tagged pool
        self.assertEqual((self.mapped(plain), self.mapped(b)), (True, False))
        elastic.resume("b")
        self.assertEqual((self.mapped(a), self.mapped(b)), (False, True))
        elastic.resume()
        for p in (plain, a, b):
            self.free(p)

    def test_allocating_in_a_paused_tag_is_an_error_naming_it(self):
        with elastic.region("weights"):
            p = self.malloc(MiB)
        elastic.pause("weights")
        with elastic.region("weights"):
            with self.assertRaises(xsalloc.XsallocError) as cm:
                self.malloc(MiB)
        self.assertEqual(cm.exception.status, "XSA_ERROR_INVALID_VALUE")
        self.assertIn("is paused", str(cm.exception))
        self.assertIn("resume it before allocating in it", str(cm.exception))
        q = self.malloc(MiB)  # outside the region: untagged, it works
        elastic.resume("weights")
        with elastic.region("weights"):
            self.free(self.malloc(MiB))
        self.free(p)
        self.free(q)

    def test_the_refusal_names_the_tag(self):
        with elastic.region("weights"):
            p = self.malloc(MiB)
        elastic.pause("weights")
        try:
            with elastic.region("weights"):
                with self.assertRaises(xsalloc.XsallocError) as cm:
                    self.malloc(MiB)
            self.assertIn("'weights'", str(cm.exception))
        finally:
            elastic.resume("weights")
            self.free(p)

    def test_free_while_paused_works_and_releases_the_backup(self):
        with elastic.region("w", enable_cpu_backup=True):
            p = self.malloc(4 * MiB)
            q = self.malloc(MiB)
        self.fill(p, 4 * MiB)
        data = self.fill(q, MiB)
        elastic.pause("w")
        self.free(p)
        with self.assertRaises(xsalloc.XsallocError) as cm:
            elastic.cpu_backup(p, 4 * MiB)
        self.assertEqual(cm.exception.status, "XSA_ERROR_INVALID_POINTER")
        elastic.resume("w")
        self.assertEqual(ctypes.string_at(q, MiB), data)
        self.assertEqual(self.stat("allocated_bytes.all.current"), MiB)
        self.free(q)

    def test_pause_waits_for_work_still_running_on_another_stream(self):
        with elastic.region("w", enable_cpu_backup=True):
            p = self.malloc(2 * MiB)
        data = self.fill(p, 2 * MiB)
        self.assertEqual(self.lib.cdll.xsa_sim_launch(ctypes.c_void_p(STREAM2), ctypes.c_uint64(p), ctypes.c_size_t(2 * MiB)), 0)
        self.lib.check(self.lib.cdll.xsa_record_stream(p, STREAM2), "xsa_record_stream")
        elastic.pause("w")  # tearDown: no unmapped_in_use violation
        self.assertFalse(self.mapped(p))
        elastic.resume("w")
        self.assertEqual(ctypes.string_at(p, 2 * MiB), data)
        self.free(p)

    def test_every_device(self):
        with elastic.region("t", enable_cpu_backup=True):
            p0, p1 = self.malloc(2 * MiB, device=0), self.malloc(2 * MiB, device=1)
        d0, d1 = self.fill(p0, 2 * MiB), self.fill(p1, 2 * MiB)
        elastic.pause("t")
        self.assertEqual((elastic.paused_bytes(0, "t"), elastic.paused_bytes(1, "t")), (2 * MiB, 2 * MiB))
        self.assertEqual(self.stat("paused_bytes.current", device=1), 2 * MiB)
        elastic.resume("t")
        self.assertEqual((ctypes.string_at(p0, 2 * MiB), ctypes.string_at(p1, 2 * MiB)), (d0, d1))
        self.free(p0)
        self.free(p1)

    def test_regions_nest_and_belong_to_their_thread(self):
        other = []
        with elastic.region("outer"):
            with elastic.region("inner"):
                inner = self.malloc(MiB)
                t = threading.Thread(target=lambda: other.append(self.malloc(MiB)))
                t.start()
                t.join()
            outer = self.malloc(MiB)
        elastic.pause("inner")
        self.assertEqual((self.mapped(inner), self.mapped(outer), self.mapped(other[0])), (False, True, True))
        elastic.pause("outer")
        self.assertEqual((self.mapped(outer), self.mapped(other[0])), (False, True), "the thread's was untagged")
        elastic.resume()
        for p in (inner, outer, other[0]):
            self.free(p)


class OutOfMemoryAtResumeTest(ElasticSimCase):
    def test_out_of_memory_at_resume_is_raised_and_recoverable(self):
        with elastic.region("w", enable_cpu_backup=True):
            p = self.malloc(64 * MiB)
        data = self.fill(p, 64 * MiB)
        elastic.pause("w")
        hog = self.malloc(224 * MiB)  # 256 MiB device: the paused 64 MiB no longer fit
        with self.assertRaises(xsalloc.XsallocError) as cm:
            elastic.resume("w")
        self.assertEqual(cm.exception.status, "XSA_ERROR_OUT_OF_MEMORY")
        self.assertFalse(self.mapped(p), "still paused")
        self.assertEqual(elastic.paused_bytes(0, "w"), 64 * MiB)
        self.assertEqual(ctypes.string_at(elastic.cpu_backup(p, 64 * MiB), 64 * MiB), data, "backup kept")
        self.free(hog)
        elastic.resume("w")
        self.assertEqual(ctypes.string_at(p, 64 * MiB), data)
        self.free(p)


class RetentionTest(ElasticSimCase):
    def test_retained_copy_survives_resume_and_is_reused(self):
        self.assertFalse(elastic.backup_retention(), "off by default")
        with elastic.region("w", enable_cpu_backup=True):
            p = self.malloc(MiB)
        data = self.fill(p, MiB)
        elastic.set_backup_retention(True)
        self.assertTrue(elastic.backup_retention())
        elastic.pause("w")
        host = elastic.cpu_backup(p, MiB)
        elastic.resume("w")
        self.assertEqual(elastic.cpu_backup(p, MiB), host, "kept after resume")
        self.assertEqual(ctypes.string_at(host, MiB), data)
        elastic.set_backup_retention(False)
        self.assertEqual(elastic.cpu_backup(p, MiB), host, "retention is consulted at resume, not now")
        data = self.fill(p, MiB)
        elastic.pause("w")
        self.assertEqual(elastic.cpu_backup(p, MiB), host, "the same host copy, refreshed")
        self.assertEqual(ctypes.string_at(host, MiB), data)
        elastic.resume("w")
        self.assertIsNone(elastic.cpu_backup(p, MiB), "released at a resume without retention")
        self.assertEqual(ctypes.string_at(p, MiB), data)
        self.free(p)

    def test_mmap_backend(self):
        with elastic.region("m", enable_cpu_backup=True, cpu_backup_backend="mmap"):
            p = self.malloc(2 * MiB)
        data = self.fill(p, 2 * MiB)
        elastic.pause("m")
        self.assertEqual(ctypes.string_at(elastic.cpu_backup(p, 2 * MiB), 2 * MiB), data)
        elastic.resume("m")
        self.assertEqual(ctypes.string_at(p, 2 * MiB), data)
        self.free(p)


class TaggedPoolTest(ElasticSimCase):
    """A memory pool tagged as xsalloc.memory_saver tags torch's MemPools and graph pools."""

    def route(self, pool_id):
        route(self.lib, 0, pool_id)

    def end_route(self, pool_id):
        end_route(self.lib, 0, pool_id)

    def test_pool_tag_pause_snapshot_and_live_blocks(self):
        pool = (0, 41)
        self.lib.check(self.lib.cdll.xsa_mempool_create(0, _lib.MempoolId(*pool)), "create")
        elastic.set_tag(0, pool, "graph", enable_cpu_backup=True)
        elastic.set_tag(0, pool, "graph")  # the same tag again: the flags change (no backup now)
        with self.assertRaises(xsalloc.XsallocError) as cm:
            elastic.set_tag(0, pool, "other")
        self.assertEqual(cm.exception.status, "XSA_ERROR_INVALID_VALUE")
        self.route(pool)
        p = TORCH_MALLOC(self.lib.address("xsa_torch_malloc"))(3 * MiB, 0, None)
        self.end_route(pool)
        self.assertEqual(elastic.live_blocks(0, pool), [(p, 3 * MiB)])
        self.assertEqual(elastic.paused_pools(), set())
        elastic.pause("graph")
        self.assertEqual(elastic.paused_pools(), {(0, pool)})
        self.assertIsNone(elastic.cpu_backup(p, MiB), "the flags set last: no backup")
        elastic.resume("graph")
        self.assertEqual(elastic.paused_pools(), set())
        self.free(p)
        self.lib.check(self.lib.cdll.xsa_mempool_release(0, _lib.MempoolId(*pool)), "release")

    def test_a_pool_with_classic_segments_cannot_be_tagged(self):
        self.lib.cdll.xsa_shutdown()
        self.lib.init("expandable_segments:False")
        pool = (0, 42)
        self.lib.check(self.lib.cdll.xsa_mempool_create(0, _lib.MempoolId(*pool)), "create")
        self.route(pool)
        p = TORCH_MALLOC(self.lib.address("xsa_torch_malloc"))(MiB, 0, None)
        self.end_route(pool)
        with self.assertRaises(xsalloc.XsallocError) as cm:
            elastic.set_tag(0, pool, "late")
        self.assertEqual(cm.exception.status, "XSA_ERROR_NOT_SUPPORTED")
        fresh = (0, 43)  # tagged before its first allocation: expandable even here
        self.lib.check(self.lib.cdll.xsa_mempool_create(0, _lib.MempoolId(*fresh)), "create")
        elastic.set_tag(0, fresh, "early", enable_cpu_backup=True)
        self.route(fresh)
        q = TORCH_MALLOC(self.lib.address("xsa_torch_malloc"))(MiB, 0, None)
        self.end_route(fresh)
        data = self.fill(q, MiB)
        elastic.pause("early")
        self.assertFalse(self.mapped(q))
        elastic.resume("early")
        self.assertEqual(ctypes.string_at(q, MiB), data)
        for ptr in (p, q):
            self.free(ptr)
        for pid in (pool, fresh):
            self.lib.check(self.lib.cdll.xsa_mempool_release(0, _lib.MempoolId(*pid)), "release")


class ErrorTest(ElasticSimCase):
    devices = 1

    def test_errors_are_xsalloc_errors_with_the_c_sentence(self):
        with self.assertRaises(xsalloc.XsallocError) as cm:
            elastic.pause("t" * 64)  # tags are 1..63 bytes
        self.assertEqual(cm.exception.status, "XSA_ERROR_INVALID_VALUE")
        self.assertRegex(str(cm.exception), r"^xsa_pause\('t+'\): XSA_ERROR_INVALID_VALUE: \S")
        self.assertNotIn("no detail", str(cm.exception), "the C sentence")
        with self.assertRaises(xsalloc.XsallocError):
            with elastic.region(""):
                pass
        with self.assertRaises(xsalloc.XsallocError) as cm:
            elastic.cpu_backup(0x1234, 8)
        self.assertEqual(cm.exception.status, "XSA_ERROR_INVALID_POINTER")
        with elastic.region("w", enable_cpu_backup=True):
            p = self.malloc(MiB)
        elastic.pause("w")
        with self.assertRaises(xsalloc.XsallocError) as cm:
            elastic.cpu_backup(p, MiB + 1)  # past the allocation's end
        self.assertEqual(cm.exception.status, "XSA_ERROR_INVALID_VALUE")
        elastic.resume("w")
        self.free(p)
        self.assertNotEqual(self.lib.cdll.xsa_tag_region_end(), 0, "an end without a begin")
        with self.assertRaises(xsalloc.XsallocError) as cm:
            elastic.paused_bytes(5)
        self.assertEqual(cm.exception.status, "XSA_ERROR_INVALID_DEVICE")

    def test_regions_nest_sixteen_deep(self):
        with contextlib.ExitStack() as stack:
            for depth in range(16):
                stack.enter_context(elastic.region(f"t{depth}"))
            with self.assertRaises(xsalloc.XsallocError):
                stack.enter_context(elastic.region("t16"))
            p = self.malloc(MiB)
        elastic.pause("t15")
        self.assertFalse(self.mapped(p), "the innermost region's tag")
        elastic.resume("t15")
        self.free(p)

    def test_python_side_checks(self):
        with self.assertRaisesRegex(TypeError, "a tag is a str"):
            elastic.pause(b"bytes")
        with self.assertRaisesRegex(ValueError, "requires enable_cpu_backup=True"):
            elastic.tag_flags(False, "mmap")
        with self.assertRaisesRegex(ValueError, "'pinned' or 'mmap'"):
            elastic.tag_flags(True, "disk")
        self.assertEqual(elastic.tag_flags(True, "mmap"), elastic.TAG_CPU_BACKUP | elastic.TAG_BACKUP_MMAP)
        self.assertEqual(elastic.tag_flags(True), elastic.TAG_CPU_BACKUP)
        self.assertEqual(elastic.tag_flags(), 0)


if __name__ == "__main__":
    unittest.main()
