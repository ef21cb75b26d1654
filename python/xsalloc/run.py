"""python -m xsalloc.run SCRIPT [ARGS...]: an unchanged script on xsalloc.

    python -m xsalloc.run train.py --epochs 3
    torchrun --nproc_per_node 8 -m xsalloc.run train.py --epochs 3

Design: before the script runs, xsalloc becomes PyTorch's CUDA allocator
(xsalloc.torch.use()) when torch can be imported, and CuPy's when the
script, or anything it imports, first imports cupy: a finder first on
sys.meta_path hands out cupy's own spec with its loader wrapped, so that
xsalloc.cupy.use() runs right after cupy's module code and before the import
returns. Settings come from the environment (XSALLOC_CONF, else
PYTORCH_ALLOC_CONF, else PYTORCH_CUDA_ALLOC_CONF).

The script then runs as `python SCRIPT ARGS` runs it: sys.argv is
[SCRIPT, ARGS...] as given, it is the module __main__ (sys.modules too) with
the globals the interpreter gives a script (__file__ absolute, a
SourceFileLoader, no __spec__), sys.path[0] is its directory with symbolic
links resolved (nothing is added under python -P), SystemExit is its exit
status, and an uncaught exception is printed by sys.excepthook from the
script's first frame on (none of this module's; a SyntaxError with none)
before exit status 1. A KeyboardInterrupt or SystemExit propagates as it is,
so the interpreter ends the process as it would have. runpy.run_path is not
used: it sets sys.argv[0] to the path it runs, and Python gives a script
__file__ absolute but sys.argv[0] as typed. Processes started with
multiprocessing's spawn method import the script again without this module,
so they keep torch's own allocator unless they call xsalloc.torch.use().
"""

import builtins
import importlib.abc
import importlib.machinery
import importlib.util
import io
import os
import sys
import types

USAGE = "usage: python -m xsalloc.run SCRIPT [ARGS...]   (runs SCRIPT as 'python SCRIPT ARGS' would, on xsalloc)"


class _LoaderThenUse(importlib.abc.Loader):
    """cupy's own loader, then xsalloc.cupy.use() once cupy's module code has run."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        self.loader.exec_module(module)
        import xsalloc.cupy

        xsalloc.cupy.use()


class _CupyFinder(importlib.abc.MetaPathFinder):
    """Finds cupy the usual way the first time it is imported, wrapping its loader."""

    def find_spec(self, name, path, target=None):
        if name != "cupy":
            return None
        sys.meta_path.remove(self)  # once, and not while the real finders look
        spec = importlib.util.find_spec("cupy")
        if spec is not None and spec.loader is not None:
            spec.loader = _LoaderThenUse(spec.loader)
        return spec


def install():
    """xsalloc as torch's allocator now (if torch is importable) and as CuPy's once cupy is imported."""
    sys.meta_path.insert(0, _CupyFinder())
    if importlib.util.find_spec("torch") is not None:
        import xsalloc.torch

        xsalloc.torch.use()


def run_script(path, args):
    """Runs the script at `path` as __main__ with sys.argv [path] + args, as the interpreter runs one."""
    abspath = os.path.abspath(path)
    try:
        with io.open_code(abspath) as f:
            source = f.read()
    except OSError as e:
        print(f"xsalloc.run: can't open file {abspath!r}: [Errno {e.errno}] {e.strerror}", file=sys.stderr)
        sys.exit(2)  # python's status for a script it cannot open
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=abspath, __cached__=None, __builtins__=builtins, __annotations__={},
                         __loader__=importlib.machinery.SourceFileLoader("__main__", abspath))
    sys.argv[:] = [path] + list(args)
    if not getattr(sys.flags, "safe_path", False):  # python -P adds neither the script's directory nor ours
        sys.path[0] = os.path.dirname(os.path.realpath(abspath))
    sys.modules["__main__"] = main
    try:
        exec(compile(source, abspath, "exec", dont_inherit=True), main.__dict__)
    except Exception as e:  # a SyntaxError too: then no frame is the script's, as python prints it
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_globals is not main.__dict__:
            tb = tb.tb_next  # this module's frames: python SCRIPT has none of them
        sys.excepthook(type(e), e.with_traceback(tb), tb)  # the hook prints e.__traceback__
        sys.exit(1)


def main():
    if len(sys.argv) < 2 or sys.argv[1].startswith("-"):
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    install()
    run_script(sys.argv[1], sys.argv[2:])


if __name__ == "__main__":
    main()
