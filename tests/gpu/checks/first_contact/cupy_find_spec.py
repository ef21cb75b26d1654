"""importlib.util.find_spec("cupy") before "import cupy" (what many libraries
do to test for CuPy): CuPy's allocator must still be xsalloc's."""
import importlib.util
import json

spec = importlib.util.find_spec("cupy")
import cupy  # noqa: E402

a = cupy.ones(1 << 20, dtype=cupy.float32)
alloc = cupy.cuda.get_allocator()
print("PROBE " + json.dumps({"found": spec is not None, "allocator": getattr(alloc, "__module__", str(alloc)),
                             "sum": float(a.sum())}), flush=True)
