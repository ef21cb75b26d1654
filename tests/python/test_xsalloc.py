"""The Python package against libxsalloc.so on the simulated driver, no GPU.

Design: the C entry points are called the way PyTorch and CuPy call them:
through raw function pointers taken from the library (CFUNCTYPE over the
addresses the package hands to torch's CUDAPluggableAllocator), and through
the package's own ctypes layer. Neither torch nor CuPy is needed: their
absence is simulated with sys.modules[name] = None, and use() is driven
against small stand-ins with the same attributes, which record what the
package asks of them. The simulated driver's memory is host memory, so
blocks handed out are written and read back. Each test starts from
xsa_shutdown + xsa_init on the simulated driver. Needs XSALLOC_LIBRARY and
XSA_DRIVER=sim (tests/python/python_test.sh sets both).
"""

import contextlib
import ctypes
import gc
import os
import subprocess
import sys
import tempfile
import types
import unittest

import fake_site
import xsalloc
import xsalloc.cupy
import xsalloc.torch
from xsalloc import _lib

MiB = 1 << 20
STREAM2 = 0x2000  # an opaque stream handle for the simulated driver

# Signatures torch's CUDAPluggableAllocator calls through (c10 CUDAPluggableAllocator.h).
TORCH_MALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)
TORCH_FREE = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_ssize_t, ctypes.c_int, ctypes.c_void_p)
TORCH_RECORD_STREAM = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
TORCH_RESET = ctypes.CFUNCTYPE(None)
TORCH_FRACTION = ctypes.CFUNCTYPE(None, ctypes.c_double, ctypes.c_int)
TORCH_BASE_ALLOC = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t))


class MempoolId(ctypes.Structure):
    """PyTorch's MempoolId_t, a pair of unsigned 64-bit integers passed by value."""
    _fields_ = [("first", ctypes.c_uint64), ("second", ctypes.c_uint64)]


TORCH_BEGIN_POOL = ctypes.CFUNCTYPE(None, ctypes.c_int, MempoolId, ctypes.c_void_p)
TORCH_POOL_CALL = ctypes.CFUNCTYPE(None, ctypes.c_int, MempoolId)

# torch.cuda.memory_stats()'s keys (PyTorch 2.x, Module.cpp memoryStats).
TORCH_KEYS = (
    {f"{a}.{p}.{m}"
     for a in ("allocation", "segment", "active", "inactive_split", "allocated_bytes", "reserved_bytes",
               "active_bytes", "inactive_split_bytes", "requested_bytes")
     for p in ("all", "small_pool", "large_pool")
     for m in ("current", "peak", "allocated", "freed")}
    | {f"{a}.{m}" for a in ("oversize_allocations", "oversize_segments")
       for m in ("current", "peak", "allocated", "freed")}
    | {"num_alloc_retries", "num_ooms", "num_sync_all_streams", "num_device_alloc", "num_device_free",
       "max_split_size"}
)


@contextlib.contextmanager
def captured_stderr():
    """What C code writes on fd 2 inside the block, as a one-item list filled on exit."""
    out = []
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            f.seek(0)
            out.append(f.read().decode())


class SimTestCase(unittest.TestCase):
    conf = "max_split_size_mb:64"

    def setUp(self):
        self.lib = _lib.load()
        c = self.lib.cdll
        c.xsa_shutdown()
        self.lib.check(c.xsa_use_driver(b"sim"), "xsa_use_driver")
        self.lib.init(self.conf)
        self.assertEqual(self.lib.driver_name(), "sim")

    def tearDown(self):
        self.lib.check(self.lib.cdll.xsa_check_invariants(0), "xsa_check_invariants")

    def fn(self, proto, name):
        return proto(self.lib.address(name))

    def stat(self, key):
        return xsalloc.memory_stats(0)[key]


class TorchEntryPointTest(SimTestCase):
    def test_malloc_free_and_empty_cache_through_function_pointers(self):
        malloc = self.fn(TORCH_MALLOC, "xsa_torch_malloc")
        free = self.fn(TORCH_FREE, "xsa_torch_free")
        p = malloc(3 * MiB, 0, None)
        self.assertTrue(p)
        ctypes.memset(p, 0x5A, 3 * MiB)  # really mapped memory
        self.assertEqual(ctypes.string_at(p + 3 * MiB - 4, 4), b"\x5a" * 4)
        self.assertEqual(self.stat("allocated_bytes.all.current"), 3 * MiB)
        self.assertEqual(self.stat("requested_bytes.large_pool.current"), 3 * MiB)
        free(p, 3 * MiB, 0, None)
        self.assertEqual(self.stat("allocated_bytes.all.current"), 0)
        self.assertGreaterEqual(self.stat("reserved_bytes.all.current"), 3 * MiB)  # cached
        self.fn(TORCH_RESET, "xsa_torch_empty_cache")()
        self.assertEqual(self.stat("reserved_bytes.all.current"), 0)

    def test_driver_calls_counted_and_timed(self):
        xsalloc.time_driver_calls(True)
        before = xsalloc.driver_calls()
        malloc = self.fn(TORCH_MALLOC, "xsa_torch_malloc")
        p = malloc(5 * MiB, 0, None)  # a growth: new pages created and mapped
        after = xsalloc.driver_calls()
        xsalloc.time_driver_calls(False)
        self.fn(TORCH_FREE, "xsa_torch_free")(p, 5 * MiB, 0, None)
        created = after["mem_create"][0] - before.get("mem_create", [0, 0.0])[0]
        self.assertGreaterEqual(created, 1)
        self.assertGreater(after["mem_map"][1], before.get("mem_map", [0, 0.0])[1])  # microseconds went up

    def test_size_zero_is_null_without_a_message(self):
        with captured_stderr() as err:
            p = self.fn(TORCH_MALLOC, "xsa_torch_malloc")(0, 0, None)
            self.fn(TORCH_FREE, "xsa_torch_free")(None, 0, 0, None)
        self.assertIsNone(p)
        self.assertEqual(err[0], "")

    def test_out_of_memory_returns_null_and_says_why(self):
        self.fn(TORCH_FRACTION, "xsa_torch_set_memory_fraction")(0.001, 0)  # ~82 MiB of 80 GiB
        with captured_stderr() as err:
            p = self.fn(TORCH_MALLOC, "xsa_torch_malloc")(1 << 30, 0, None)
        self.assertIsNone(p)
        self.assertIn("xsalloc: xsa_torch_malloc failed (XSA_ERROR_OUT_OF_MEMORY)", err[0])
        self.assertEqual(self.stat("num_ooms"), 1)
        self.assertTrue(self.fn(TORCH_MALLOC, "xsa_torch_malloc")(MiB, 0, None), "usable after the OOM")
        self.lib.cdll.xsa_empty_cache()

    def test_bad_calls_print_and_return(self):
        with captured_stderr() as err:
            self.assertIsNone(self.fn(TORCH_MALLOC, "xsa_torch_malloc")(-1, 0, None))
            self.assertIsNone(self.fn(TORCH_MALLOC, "xsa_torch_malloc")(MiB, 7, None))
            self.fn(TORCH_FREE, "xsa_torch_free")(0x1234, 8, 0, None)
            self.fn(TORCH_RECORD_STREAM, "xsa_torch_record_stream")(0x1234, STREAM2)
            self.fn(TORCH_FRACTION, "xsa_torch_set_memory_fraction")(1.5, 0)
        lines = err[0].splitlines()
        self.assertEqual(len(lines), 5, err[0])
        self.assertIn("negative size -1", lines[0])
        self.assertIn("XSA_ERROR_INVALID_DEVICE", lines[1])
        self.assertIn("xsa_torch_free failed (XSA_ERROR_INVALID_POINTER)", lines[2])
        self.assertIn("xsa_torch_record_stream failed (XSA_ERROR_INVALID_POINTER)", lines[3])
        self.assertIn("xsa_torch_set_memory_fraction failed (XSA_ERROR_INVALID_VALUE)", lines[4])

    def test_record_stream_defers_the_free_until_the_stream_is_done(self):
        # PyTorch's contract alone: with page recycling, a miss at the memory
        # bound is served by the pending block itself, its stream waiting for
        # STREAM2 on the GPU (pool/recycle.c; //tests:recycle_test checks that).
        self.lib.cdll.xsa_shutdown()
        self.lib.init(self.conf + ",page_recycling:False")
        malloc = self.fn(TORCH_MALLOC, "xsa_torch_malloc")
        p = malloc(2 * MiB, 0, None)
        self.fn(TORCH_RECORD_STREAM, "xsa_torch_record_stream")(p, STREAM2)
        self.fn(TORCH_FREE, "xsa_torch_free")(p, 2 * MiB, 0, None)
        self.assertEqual(self.stat("allocated_bytes.all.current"), 0)
        self.assertEqual(self.stat("active_bytes.all.current"), 2 * MiB, "pending on STREAM2")
        self.assertNotEqual(malloc(2 * MiB, 0, None), p, "not reusable while STREAM2 may use it")
        self.lib.cdll.xsa_sim_complete_all()
        self.assertEqual(malloc(2 * MiB, 0, None), p, "reused once STREAM2 is done")

    def test_base_allocation(self):
        base_alloc = self.fn(TORCH_BASE_ALLOC, "xsa_torch_base_alloc")
        malloc = self.fn(TORCH_MALLOC, "xsa_torch_malloc")
        a, b = malloc(4 * MiB, 0, None), malloc(4 * MiB, 0, None)
        size = ctypes.c_size_t(0)
        base = base_alloc(b, ctypes.byref(size))
        self.assertTrue(base <= a < base + size.value and base <= b < base + size.value, "one expandable segment")
        with captured_stderr() as err:
            self.assertIsNone(base_alloc(b + 16, ctypes.byref(size)))
        self.assertEqual(size.value, 0)
        self.assertIn("XSA_ERROR_INVALID_POINTER", err[0])


class StatsTest(SimTestCase):
    def test_keys_are_torchs_plus_page_counters_paused_bytes_and_lock_waits(self):
        keys = set(xsalloc.memory_stats(0))
        paused = {f"paused_bytes.{k}" for k in ("current", "peak", "allocated", "freed")}
        self.assertEqual(keys - TORCH_KEYS, {"num_pages_mapped", "num_pages_unmapped", "num_pages_recycled",
                                             "num_device_lock_waits", "device_lock_wait_us"} | paused)
        self.assertEqual(TORCH_KEYS - keys, set())
        self.assertEqual(list(xsalloc.memory_stats(0)), sorted(keys), "sorted like torch's")

    def test_values_follow_the_struct_layout(self):
        p = ctypes.c_void_p()
        self.lib.check(self.lib.cdll.xsa_ctx_malloc(ctypes.byref(p), 3 * MiB, 0, None), "malloc")
        s = xsalloc.memory_stats_as_nested_dict(0)
        self.assertEqual(s["max_split_size"], 64 * MiB)  # from conf; a layout slip would misplace it
        self.assertEqual(s["allocation"]["large_pool"]["current"], 1)
        self.assertEqual(s["allocation"]["small_pool"]["current"], 0)
        self.assertEqual(s["num_pages_mapped"], 2)  # 3 MiB on 2 MiB pages
        xsalloc.reset_peak_memory_stats(0)
        self.lib.check(self.lib.cdll.xsa_ctx_free(p), "free")
        s = xsalloc.memory_stats(0)
        self.assertEqual((s["allocated_bytes.all.current"], s["allocated_bytes.all.peak"]), (0, 3 * MiB))
        xsalloc.reset_peak_memory_stats(0)
        xsalloc.reset_accumulated_memory_stats(0)
        s = xsalloc.memory_stats(0)
        self.assertEqual((s["allocated_bytes.all.peak"], s["allocated_bytes.all.allocated"]), (0, 0))

    def test_summary_has_torchs_layout(self):
        p = self.fn(TORCH_MALLOC, "xsa_torch_malloc")(3 * MiB, 0, None)
        text = xsalloc.memory_summary(0)
        lines = text.splitlines()
        # The table, then where the settings came from.
        self.assertEqual(lines[-1], f'xsalloc settings from xsa_init: "{self.conf}"')
        lines = lines[:-1]
        self.assertTrue(all(len(line) == 77 for line in lines), [line for line in lines if len(line) != 77])
        self.assertIn("|        Metric         | Cur Usage  | Peak Usage | Tot Alloc  | Tot Freed  |", lines)
        self.assertIn("| Allocated memory      |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |", lines)
        self.assertIn("|       from large pool |   3072 KiB |   3072 KiB |   3072 KiB |      0 B   |", lines)
        self.assertIn("| Allocations           |       1    |       1    |       1    |       0    |", lines)
        self.assertEqual(len(xsalloc.memory_summary(0, abbreviated=True).splitlines()), len(lines) + 1 - 18)
        self.fn(TORCH_FREE, "xsa_torch_free")(p, 0, 0, None)

    def test_snapshot(self):
        p = self.fn(TORCH_MALLOC, "xsa_torch_malloc")(3 * MiB, 0, None)
        snap = xsalloc.snapshot()
        blocks = [b for seg in snap["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"]
        self.assertEqual([(b["address"], b["size"]) for b in blocks], [(p, 3 * MiB)])
        self.fn(TORCH_FREE, "xsa_torch_free")(p, 0, 0, None)

    def test_errors_become_exceptions_with_the_sentence(self):
        self.lib.cdll.xsa_shutdown()
        with self.assertRaises(xsalloc.XsallocError) as cm:
            self.lib.init("max_split_size_mb:lots")
        self.assertEqual(cm.exception.status, "XSA_ERROR_CONFIG")
        self.assertIn("max_split_size_mb", str(cm.exception))
        self.lib.init(self.conf)
        with self.assertRaisesRegex(xsalloc.XsallocError, "XSA_ERROR_INVALID_DEVICE"):
            xsalloc.memory_stats(5)


class ConfigSourceTest(unittest.TestCase):
    """Lazy initialisation in a fresh process, from the environment variables."""

    CODE = ("import xsalloc; print(xsalloc.memory_summary(0).splitlines()[-1]); "
            "s = xsalloc.snapshot()['allocator_settings']; print(s['conf_source'], s['max_split_size'])")

    def run_python(self, **conf_vars):
        env = {k: v for k, v in os.environ.items()
               if k not in ("XSALLOC_CONF", "PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF")}
        r = subprocess.run([sys.executable, "-c", self.CODE], env=dict(env, **conf_vars),
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout.splitlines(), r.stderr

    def test_pytorch_variables_are_read_and_named(self):
        out, err = self.run_python(PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:64")
        self.assertEqual(out, ['xsalloc settings from PYTORCH_CUDA_ALLOC_CONF: "max_split_size_mb:64"',
                               f"PYTORCH_CUDA_ALLOC_CONF {64 * MiB}"])
        self.assertEqual(err, "", "keys xsalloc honours are not mentioned")
        out, err = self.run_python(PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:64", PYTORCH_ALLOC_CONF="max_split_size_mb:32")
        self.assertEqual(out[1], f"PYTORCH_ALLOC_CONF {32 * MiB}")
        # XSALLOC_CONF layers over PyTorch's variable key by key.
        out, err = self.run_python(PYTORCH_ALLOC_CONF="max_split_size_mb:32", XSALLOC_CONF="")
        self.assertEqual(out, ['xsalloc settings from XSALLOC_CONF: "" over PYTORCH_ALLOC_CONF: "max_split_size_mb:32"',
                               f"XSALLOC_CONF {32 * MiB}"])
        out, err = self.run_python(PYTORCH_CUDA_ALLOC_CONF="max_split_size_mb:32", XSALLOC_CONF="max_split_size_mb:64")
        self.assertEqual(out[1], f"XSALLOC_CONF {64 * MiB}")
        out, err = self.run_python(XSALLOC_CONF="")
        self.assertEqual(out, ['xsalloc settings from XSALLOC_CONF: "" (all defaults)', "XSALLOC_CONF -1"])
        out, err = self.run_python()
        self.assertEqual(out[1], "none -1")

    def test_keys_xsalloc_cannot_honour_are_named_once(self):
        out, err = self.run_python(
            PYTORCH_ALLOC_CONF="release_lock_on_cudamalloc:True,max_split_size_mb:64,pinned_num_register_threads:8")
        self.assertEqual(out[1], f"PYTORCH_ALLOC_CONF {64 * MiB}")
        self.assertEqual(err.splitlines(), [
            "xsalloc: PYTORCH_ALLOC_CONF: ignoring release_lock_on_cudamalloc, pinned_num_register_threads "
            "(xsalloc cannot honour these PyTorch keys; docs/configuration.md says why)"])

    def test_refused_key_fails_naming_the_variable(self):
        env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="backend:cudaMallocAsync")
        env.pop("XSALLOC_CONF", None)
        env.pop("PYTORCH_ALLOC_CONF", None)
        r = subprocess.run([sys.executable, "-c", self.CODE], env=env, capture_output=True, text=True)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("XSA_ERROR_CONFIG: PYTORCH_CUDA_ALLOC_CONF: key 'backend' value 'cudaMallocAsync'", r.stderr)


class LibraryLoadingTest(unittest.TestCase):
    def run_python(self, library, code="import xsalloc; xsalloc.memory_stats(0)"):
        env = dict(os.environ, XSALLOC_LIBRARY=library)
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)

    def test_missing_library(self):
        r = self.run_python("/nonexistent/libxsalloc.so")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("LibraryNotFoundError", r.stderr)
        self.assertIn("/nonexistent/libxsalloc.so (no such file)", r.stderr)
        self.assertIn("XSALLOC_LIBRARY", r.stderr)

    def test_not_a_library(self):
        r = self.run_python(os.path.abspath(__file__))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("cannot load libxsalloc.so; tried " + os.path.abspath(__file__), r.stderr)

    def test_environment_library_loads(self):
        r = self.run_python(os.environ["XSALLOC_LIBRARY"], "import xsalloc; print(xsalloc.driver_name())")
        self.assertEqual((r.returncode, r.stdout.strip()), (0, "sim"), r.stderr)


@contextlib.contextmanager
def module_as(name, module):
    """sys.modules[name] = module inside the block (None: 'import name' fails)."""
    saved = sys.modules.get(name, ...)
    sys.modules[name] = module
    try:
        yield module
    finally:
        if saved is ...:
            del sys.modules[name]
        else:
            sys.modules[name] = saved


@contextlib.contextmanager
def stand_in_pluggable():
    """The pluggable path's functions as the library's own xsa_torch_malloc / xsa_torch_free: what
    pip install builds (pluggable_malloc.cpp, which raises torch's OOM) needs torch's headers."""
    saved = xsalloc._adapter.load_pluggable
    xsalloc._adapter.load_pluggable = lambda torch, lib: (lib.path, "xsa_torch_malloc", "xsa_torch_free")
    try:
        yield
    finally:
        xsalloc._adapter.load_pluggable = saved


def fake_torch(cuda_initialized=False):
    """A stand-in for torch with what xsalloc.torch touches, recording the calls."""
    torch = types.ModuleType("torch")
    torch.__version__ = "2.99.0+fake"
    torch.__file__ = __file__  # where pip packages lie beside it (the nvidia headers' search)
    torch.version = types.SimpleNamespace(cuda="13.0")
    cuda = types.SimpleNamespace(is_initialized=lambda: cuda_initialized,
                                 _get_device_index=lambda device, optional=False: 0 if device is None else int(device))
    memory = types.SimpleNamespace(installed=None, memory_stats_as_nested_dict=None)

    def change_current_allocator(allocator):
        memory.installed = allocator

    memory.CUDAPluggableAllocator = fake_site.classes()["CUDAPluggableAllocator"]
    memory.change_current_allocator = change_current_allocator
    cuda.memory = memory
    torch.cuda = cuda
    torch.accelerator = fake_accelerator()
    torch._C = fake_torch_C()
    # torch 2.11's: looks the setter up in torch._C at call time.
    memory._set_allocator_settings = lambda env: torch._C._accelerator_setAllocatorSettings(env)
    return torch


def fake_torch_C():
    """torch._C's settings setter, recording the strings it accepts and
    refusing keys it does not know (xsalloc's own among them) with ValueError,
    as torch 2.11's does."""
    C = types.SimpleNamespace(settings=[])

    def set_settings(env):
        for item in filter(None, (i.strip() for i in env.split(","))):
            if item.split(":")[0] in ("foo", "bar", "page_recycling"):
                raise ValueError(f"Unrecognized key '{item.split(':')[0]}' in Accelerator allocator config.")
        C.settings.append(env)
    C._accelerator_setAllocatorSettings = set_settings
    return C


# torch.accelerator's memory API as torch 2.11 has it (torch/accelerator/memory.py):
# the allocator c10 has registered, which torch's pluggable allocator never replaces.
ACCELERATOR_MEMORY = """
def memory_stats(device_index=None, /):
    return {}
def memory_allocated(device_index=None, /):
    return memory_stats(device_index).get("allocated_bytes.all.current", 0)
def max_memory_reserved(device_index=None, /):
    return memory_stats(device_index).get("reserved_bytes.all.peak", 0)
def reset_peak_memory_stats(device_index=None, /):
    pass
def reset_accumulated_memory_stats(device_index=None, /):
    pass
def empty_cache():
    pass
"""


def fake_accelerator():
    memory = types.ModuleType("torch.accelerator.memory")
    exec(ACCELERATOR_MEMORY, memory.__dict__)
    acc = types.SimpleNamespace(memory=memory)
    for name in ("memory_stats", "memory_allocated", "max_memory_reserved", "reset_peak_memory_stats",
                 "reset_accumulated_memory_stats", "empty_cache"):
        setattr(acc, name, getattr(memory, name))
    return acc


def fake_adapter_build(torch, built):
    """torch.utils.cpp_extension on the stand-in torch: load() records its arguments in `built` and
    gives a stand-in adapter module whose install() names itself torch's allocator."""
    module = types.SimpleNamespace(installs=0, syncs=0)

    def install():
        module.installs += 1
        torch.cuda.memory._get_current_allocator = lambda: "the adapter"

    module.install = install
    module.sync_torch_settings = lambda: setattr(module, "syncs", module.syncs + 1)

    def load(**kw):
        built.append(kw)
        return module
    torch.utils = types.SimpleNamespace(cpp_extension=types.SimpleNamespace(load=load))
    return module


class FakeTorchTest(SimTestCase):
    def setUp(self):
        super().setUp()
        self.cache = tempfile.TemporaryDirectory()
        self.addCleanup(self.cache.cleanup)
        os.environ["TORCH_EXTENSIONS_DIR"] = self.cache.name
        self.addCleanup(os.environ.pop, "TORCH_EXTENSIONS_DIR", None)

    def tearDown(self):
        xsalloc.torch._installed = None
        xsalloc.torch._adapter_module = None
        super().tearDown()

    def test_torch_missing(self):
        with module_as("torch", None):
            with self.assertRaisesRegex(ImportError, "xsalloc.torch needs PyTorch"):
                xsalloc.torch.use()

    def test_refuses_after_cuda_initialisation(self):
        with module_as("torch", fake_torch(cuda_initialized=True)) as torch:
            with self.assertRaisesRegex(RuntimeError, "must run before PyTorch initialises CUDA"):
                xsalloc.torch.use()
        self.assertIsNone(torch.cuda.memory.installed)

    def test_no_silent_fallback_when_the_adapter_cannot_be_had(self):
        for adapter in (None, True):
            with module_as("torch", fake_torch()) as torch:  # no torch.utils.cpp_extension: cannot build
                with self.assertRaises(xsalloc.torch.AdapterUnavailableError) as cm:
                    xsalloc.torch.use(adapter=adapter)
                self.assertIsNone(torch.cuda.memory.installed, "not the pluggable path either")
                self.assertFalse(xsalloc.torch.adapter_in_use())
            text = str(cm.exception)
            for what in ("the torch adapter cannot be used: pip install built no torch adapter here",
                         "No module named 'torch.utils'",  # what failed
                         "does not fall back to torch's CUDAPluggableAllocator unasked",
                         "pip install --no-build-isolation", "a C++ compiler, ninja",  # how to fix it
                         "python SCRIPT instead of python -m xsalloc.run SCRIPT",  # how to run without
                         "XSALLOC_TORCH_ADAPTER=0"):
                self.assertIn(what, text)

    def test_pluggable_path_refused_without_its_malloc(self):
        with module_as("torch", fake_torch()) as torch:
            with self.assertRaisesRegex(xsalloc.torch.AdapterUnavailableError,
                                        "needs its malloc, which raises torch.OutOfMemoryError"):
                xsalloc.torch.use(adapter=False)
            self.assertIsNone(torch.cuda.memory.installed)

    def test_adapter_is_built_once_c_plus_plus_only_and_installed(self):
        built = []
        with module_as("torch", fake_torch()) as torch:
            module = fake_adapter_build(torch, built)
            with module_as("torch.utils", torch.utils):
                self.assertEqual(xsalloc.torch.use(), "the adapter")
                self.assertTrue(xsalloc.torch.adapter_in_use())
            self.assertEqual((module.installs, module.syncs), (1, 1), "torch's settings told xsalloc's")
            self.assertTrue(torch._C._accelerator_setAllocatorSettings._xsalloc, "settings reach xsalloc")
            self.assertIsNone(torch.cuda.memory.installed, "not the pluggable path")
            self.assertIsNone(torch.cuda.memory.memory_stats_as_nested_dict, "torch's statistics left alone")
            torch.cuda.memory._set_allocator_settings("max_split_size_mb:64")
            self.assertEqual(module.syncs, 2, "told again after a change at run time")
        kw = built[0]
        self.assertEqual(sorted(os.path.basename(s) for s in kw["sources"]),
                         ["adapter.cpp", "contexts.cpp", "snapshot.cpp", "torch_settings.cpp"], "by job")
        self.assertTrue(all(os.path.exists(s) for s in kw["sources"]))
        self.assertFalse(kw["with_cuda"], "C++ only: no nvcc, no arch list, no CUDA")
        self.assertTrue(os.path.exists(os.path.join(kw["extra_include_paths"][0], "xsalloc", "pytorch.h")))
        self.assertTrue(any(os.path.exists(os.path.join(d, "cuda_runtime_api.h")) for d in kw["extra_include_paths"]))
        libdir = os.path.dirname(os.path.abspath(self.lib.path))
        self.assertIn(f"-Wl,-rpath,{libdir}", kw["extra_ldflags"])
        self.assertEqual(os.path.dirname(kw["build_directory"]), self.cache.name)
        self.assertEqual(os.path.basename(kw["build_directory"]), kw["name"])

    def test_use_installs_the_entry_points_and_hooks(self):
        with module_as("torch", fake_torch()) as torch, stand_in_pluggable():
            alloc = xsalloc.torch.use(adapter=False)
            self.assertIs(torch.cuda.memory.installed, alloc)
            self.assertIs(xsalloc.torch.use(), alloc, "idempotent")
            hooks = alloc.native.hooks
            self.assertEqual(set(hooks), set(_lib.TORCH_HOOKS))
            malloc, free = TORCH_MALLOC(alloc.fns[0]), TORCH_FREE(alloc.fns[1])
            p = malloc(5 * MiB, 0, None)
            TORCH_RECORD_STREAM(hooks["set_record_stream_fn"])(p, STREAM2)
            size = ctypes.c_size_t()
            self.assertTrue(TORCH_BASE_ALLOC(hooks["set_base_alloc_fn"])(p, ctypes.byref(size)))
            # torch.cuda.memory_stats() and friends now read xsalloc's statistics.
            nested = torch.cuda.memory.memory_stats_as_nested_dict(device=None)
            self.assertEqual(nested["allocated_bytes"]["all"]["current"], 5 * MiB)
            self.assertEqual(xsalloc.torch.memory_stats()["allocated_bytes.all.current"], 5 * MiB)
            free(p, 5 * MiB, 0, None)
            self.lib.cdll.xsa_sim_complete_all()
            TORCH_RESET(hooks["set_reset_fn"])()
            self.assertEqual(xsalloc.torch.memory_stats(0)["reserved_bytes.all.current"], 0)
            torch.cuda.reset_peak_memory_stats()
            self.assertEqual(xsalloc.torch.memory_stats(0)["reserved_bytes.all.peak"], 0)
            TORCH_FRACTION(hooks["set_memory_fraction_fn"])(0.001, 0)
            with captured_stderr():
                self.assertIsNone(malloc(1 << 30, 0, None))
            # A graph's pool: routed, ended and released without a complaint;
            # ending it twice is said on stderr.
            graph = MempoolId(1, 2)
            with captured_stderr() as err:
                TORCH_BEGIN_POOL(hooks["set_begin_allocate_to_pool"])(0, graph, None)
                TORCH_POOL_CALL(hooks["set_end_allocate_to_pool_fn"])(0, graph)
                TORCH_POOL_CALL(hooks["set_release_pool"])(0, graph)
            self.assertEqual(err[0], "")
            with captured_stderr() as err:
                TORCH_POOL_CALL(hooks["set_end_allocate_to_pool_fn"])(0, graph)
            self.assertIn("xsa_torch_end_allocate_to_pool failed", err[0])

    def test_pluggable_path_points_torch_accelerator_at_xsalloc(self):
        with module_as("torch", fake_torch()) as torch, stand_in_pluggable():
            alloc = xsalloc.torch.use(adapter=False)
            acc = torch.accelerator
            self.assertIn("active_bytes.all.current", acc.memory_stats(), "the name torch.accelerator re-exports too")
            self.assertEqual(acc.memory.memory_allocated(), 0)
            p = TORCH_MALLOC(alloc.fns[0])(3 * MiB, 0, None)
            self.assertEqual(acc.memory.memory_allocated(), 3 * MiB, "built on memory_stats, looked up at call time")
            self.assertEqual(acc.memory.memory_stats(0)["active_bytes.all.current"], 3 * MiB)
            TORCH_FREE(alloc.fns[1])(p, 3 * MiB, 0, None)
            self.assertEqual(self.stat("active_bytes.all.freed"), 3 * MiB)
            acc.memory.reset_accumulated_memory_stats(None)
            self.assertEqual(self.stat("active_bytes.all.freed"), 0)
            acc.memory.empty_cache()
            self.assertEqual(self.stat("reserved_bytes.all.current"), 0)
            acc.memory.reset_peak_memory_stats(0)
            self.assertEqual(acc.memory.max_memory_reserved(), 0)

    def test_settings_set_through_torch_reach_xsalloc(self):
        with module_as("torch", fake_torch()) as torch, stand_in_pluggable():
            alloc = xsalloc.torch.use(adapter=False)
            malloc, free = TORCH_MALLOC(alloc.fns[0]), TORCH_FREE(alloc.fns[1])
            torch.cuda.memory._set_allocator_settings("expandable_segments:False")
            self.assertEqual(torch._C.settings, ["expandable_segments:False"], "torch's setter ran first")
            p = malloc(MiB, 0, None)
            self.assertEqual(self.stat("segment.all.current"), 1, "a classic segment: the setting reached xsalloc")
            free(p, MiB, 0, None)
            self.assertIn('changed at run time by xsa_set_allocator_settings: "expandable_segments:False"',
                          xsalloc.memory_summary(0))
            # xsalloc refuses first (a key set when the pools were made; an unknown key): torch's
            # setter is not reached, so neither side changes.
            with self.assertRaisesRegex(xsalloc.XsallocError, "'per_process_memory_fraction' cannot change"):
                torch.cuda.memory._set_allocator_settings("per_process_memory_fraction:0.5")
            with self.assertRaisesRegex(xsalloc.XsallocError, "XSA_ERROR_CONFIG: unknown key 'foo'"):
                torch._C._accelerator_setAllocatorSettings("foo:1,bar:2")
            self.assertEqual(torch._C.settings, ["expandable_segments:False"], "torch kept neither")
            # torch refuses one xsalloc takes: xsalloc, asked first, changed nothing either.
            with self.assertRaisesRegex(ValueError, "Unrecognized key 'page_recycling'"):
                torch.cuda.memory._set_allocator_settings("page_recycling:False,max_split_size_mb:64")
            self.assertNotIn("page_recycling", xsalloc.memory_summary(0).splitlines()[-1])
            self.assertEqual(xsalloc.memory_stats(0)["max_split_size"], -1)
            xsalloc.torch.use()  # a second use() wraps nothing twice
            torch.cuda.memory._set_allocator_settings("expandable_segments:True")
            self.assertEqual(torch._C.settings[-1], "expandable_segments:True")
            p = malloc(3 * MiB, 0, None)
            self.assertEqual(self.stat("reserved_bytes.large_pool.current"), 4 * MiB, "two pages of a new expandable segment")
            free(p, 3 * MiB, 0, None)
            self.lib.cdll.xsa_empty_cache()

    def test_set_allocator_settings_errors(self):
        with self.assertRaises(xsalloc.XsallocError) as cm:
            xsalloc.set_allocator_settings("max_split_size_mb:abc")
        self.assertEqual(cm.exception.status, "XSA_ERROR_CONFIG")
        self.assertEqual(str(cm.exception).count("xsa_set_allocator_settings"), 1, "the function named once")
        self.assertIn("'max_split_size_mb' value 'abc'", str(cm.exception))
        with self.assertRaisesRegex(xsalloc.XsallocError, "XSA_ERROR_NOT_SUPPORTED: .*'peer_access'"):
            xsalloc.set_allocator_settings("peer_access:True")
        xsalloc.set_allocator_settings("roundup_power2_divisions:4")
        p = ctypes.c_void_p()
        self.lib.check(self.lib.cdll.xsa_ctx_malloc(ctypes.byref(p), 84 * MiB, 0, None), "malloc")
        self.assertEqual(self.stat("allocated_bytes.all.current"), 96 * MiB)
        self.lib.check(self.lib.cdll.xsa_ctx_free(p), "free")
        self.lib.cdll.xsa_empty_cache()

    def test_conf_on_a_second_use_is_refused(self):
        with module_as("torch", fake_torch()), stand_in_pluggable():
            xsalloc.torch.use(adapter=False)
            with self.assertRaisesRegex(RuntimeError, "already torch's allocator"):
                xsalloc.torch.use("max_split_size_mb:32")


def fake_cupy(stream_ptr=0):
    """A stand-in for cupy with what xsalloc.cupy touches."""
    cupy = types.ModuleType("cupy")

    shared = fake_site.classes()
    UnownedMemory, MemoryPointer, OutOfMemoryError = (shared[n] for n in ("UnownedMemory", "MemoryPointer",
                                                                          "OutOfMemoryError"))
    memory = types.SimpleNamespace(UnownedMemory=UnownedMemory, MemoryPointer=MemoryPointer,
                                   OutOfMemoryError=OutOfMemoryError)
    cuda = types.SimpleNamespace(memory=memory, allocator=None,
                                 runtime=types.SimpleNamespace(getDevice=lambda: 0),
                                 get_current_stream=lambda: types.SimpleNamespace(ptr=stream_ptr))
    cuda.set_allocator = lambda fn: setattr(cuda, "allocator", fn)
    cupy.cuda = cuda
    return cupy


class FakeCupyTest(SimTestCase):
    def test_cupy_missing(self):
        with module_as("cupy", None):
            with self.assertRaisesRegex(ImportError, "xsalloc.cupy needs CuPy"):
                xsalloc.cupy.use()

    def test_arrays_live_in_xsalloc_memory_and_return_on_gc(self):
        with module_as("cupy", fake_cupy(stream_ptr=STREAM2)) as cupy:
            xsalloc.cupy.use()
            mp = cupy.cuda.allocator(3 * MiB)
            ctypes.memset(mp.ptr, 1, 3 * MiB)
            self.assertEqual(self.stat("allocated_bytes.all.current"), 3 * MiB)
            base, size = ctypes.c_void_p(), ctypes.c_size_t()
            self.lib.check(self.lib.cdll.xsa_get_base_allocation(mp.ptr, ctypes.byref(base), ctypes.byref(size)), "base")
            del mp
            gc.collect()
            self.assertEqual(self.stat("allocated_bytes.all.current"), 0)
            self.assertEqual(cupy.cuda.allocator(0).ptr, 0)

    def test_out_of_memory_is_cupys_error_after_a_gc(self):
        with module_as("cupy", fake_cupy()) as cupy:
            xsalloc.cupy.use()
            self.lib.check(self.lib.cdll.xsa_set_memory_fraction(0.001, 0), "fraction")  # ~82 MiB
            held = cupy.cuda.allocator(60 * MiB)
            cycle = [cupy.cuda.allocator(20 * MiB)]
            cycle.append(cycle)  # unreachable only once collected: the retry after gc.collect() succeeds
            gc.disable()
            try:
                del cycle
                self.assertTrue(cupy.cuda.allocator(20 * MiB).ptr)
                with self.assertRaises(cupy.cuda.memory.OutOfMemoryError) as cm:
                    cupy.cuda.allocator(40 * MiB)
            finally:
                gc.enable()
            self.assertIn("CUDA out of memory. Tried to allocate 40.00 MiB. GPU 0 has a total capacity of",
                          str(cm.exception))
            del held
            gc.collect()


if __name__ == "__main__":
    unittest.main()
