"""One of torch_memory_saver's own examples, unchanged, with torch_memory_saver
resolved to xsalloc.memory_saver (tests/gpu/run_tms_examples.sh runs it).

    python -m xsalloc.run tests/gpu/checks/tms_example.py EXAMPLES_DIR MODULE FUNCTION HOOK_MODE

EXAMPLES_DIR is torch_memory_saver's test/examples; the package
torch_memory_saver on PYTHONPATH is the harness's shim. Runs
MODULE.FUNCTION(hook_mode=HOOK_MODE) in this process, as
torch_memory_saver's test_examples.py runs it in a spawned one, and prints
"TMS-EXAMPLE-OK" when it returns; an assertion of the example fails the
process with its traceback.
"""
import importlib
import sys

examples, module, function, hook_mode = sys.argv[1:5]
sys.path.insert(0, examples)

import torch_memory_saver  # noqa: E402  (the shim)
import xsalloc.torch  # noqa: E402

saver = torch_memory_saver.torch_memory_saver
assert type(saver).__module__ == "xsalloc.memory_saver", f"torch_memory_saver is {type(saver).__module__}'s"
assert xsalloc.torch.adapter_in_use(), "xsalloc is not torch's allocator through its adapter"
getattr(importlib.import_module(module), function)(hook_mode=hook_mode)
print(f"TMS-EXAMPLE-OK {module}.{function}({hook_mode})", flush=True)
