"""python -m xsalloc.run SCRIPT [ARGS...] | -m MODULE [ARGS...]: an unchanged program on xsalloc.

    python -m xsalloc.run train.py --epochs 3
    python -m xsalloc.run -m mypackage.train --epochs 3
    torchrun --nproc_per_node 8 -m xsalloc.run train.py --epochs 3

Design: before the program runs, xsalloc becomes PyTorch's CUDA allocator
(xsalloc.torch.use(), which touches no CUDA) when torch can be imported,
and CuPy's when the program, or anything it imports, first imports cupy: a
finder first on sys.meta_path hands out cupy's own spec with its loader
wrapped, so that xsalloc.cupy.use() runs right after cupy's module code and
before the import returns; a find_spec that imports nothing leaves it in
place. Settings come from the environment (PyTorch's PYTORCH_ALLOC_CONF,
else PYTORCH_CUDA_ALLOC_CONF, with XSALLOC_CONF over it key by key). If
xsalloc cannot become the allocator (xsalloc.torch.AdapterUnavailableError,
a malformed setting), the reason and what to do are printed and the exit
status is 1, before the program starts: never a silent fallback.

Where this process surely has no GPU, known without initialising CUDA
(CUDA_VISIBLE_DEVICES empty or -1, no libcuda.so.1 to load), one notice
says so and the program runs as python runs it, on the frameworks' own
allocators.

The processes the program starts (multiprocessing's and
torch.multiprocessing's spawn, torchrun's workers, subprocesses) run
xsalloc/_child/sitecustomize.py at start-up: its directory goes first on
PYTHONPATH, with XSALLOC_RUN_CHILDREN=1, and it sets the same import hooks
for torch and cupy (install_on_import), so those processes are on xsalloc
from their first CUDA use. Forked children share the parent's state.

A script runs as `python SCRIPT ARGS` runs it: sys.argv is [SCRIPT,
ARGS...] as given, it is the module __main__ (sys.modules too) with the
globals the interpreter gives a script (__file__ absolute, a
SourceFileLoader, no __spec__), sys.path[0] is its directory with symbolic
links resolved (nothing is added under python -P), SystemExit is its exit
status, and an uncaught exception is printed by sys.excepthook from the
program's first frame on (none of this module's; a SyntaxError with none)
before exit status 1. A KeyboardInterrupt or SystemExit propagates as it
is, so the interpreter ends the process as it would have. runpy.run_path is
not used: it sets sys.argv[0] to the path it runs, and Python gives a
script __file__ absolute but sys.argv[0] as typed. A module runs as
`python -m MODULE ARGS` runs it: runpy's own lookup (the same messages for
a missing module or a package without __main__), then its code in a fresh
__main__ with the globals python -m gives (__spec__, __file__, __package__),
sys.argv[0] the module's file.
"""

import builtins
import ctypes
import importlib.abc
import importlib.machinery
import importlib.util
import io
import os
import sys
import types

USAGE = ("usage: python -m xsalloc.run SCRIPT [ARGS...] | -m MODULE [ARGS...]   "
         "(runs the program as 'python SCRIPT ARGS' or 'python -m MODULE ARGS' would, on xsalloc)")
ENV_CHILDREN = "XSALLOC_RUN_CHILDREN"
CHILD_HOOK_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_child")


class _LoaderThenUse(importlib.abc.Loader):
    """The module's own loader, then `use` once the module's code has run."""

    def __init__(self, loader, finder):
        self.loader, self.finder = loader, finder

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = self.loader  # the module keeps its own loader (importlib.resources reads it)
        if getattr(module, "__spec__", None) is not None:
            module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        self.finder.remove()
        self.finder.use()

    def __getattr__(self, name):
        return getattr(self.loader, name)


class _UseOnImport(importlib.abc.MetaPathFinder):
    """Finds `name` the usual way while it is not imported, its loader wrapped so that `use` runs
    right after the module's code. It stays first on sys.meta_path until that import happens."""

    def __init__(self, name, use):
        self.name, self.use, self.searching = name, use, False

    def find_spec(self, name, path, target=None):
        if name != self.name or self.searching:
            return None
        self.searching = True  # not while the real finders look
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self.searching = False
        if spec is not None and spec.loader is not None:
            spec.loader = _LoaderThenUse(spec.loader, self)
        return spec

    def remove(self):
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def _use_torch():
    import xsalloc.torch

    xsalloc.torch.use()


def _use_cupy():
    import xsalloc.cupy

    xsalloc.cupy.use()


def install_on_import():
    """xsalloc as torch's allocator as soon as torch is imported, and CuPy's as soon as cupy is
    (what the children's start-up hook calls)."""
    for name, use in (("cupy", _use_cupy), ("torch", _use_torch)):
        if name in sys.modules:
            use()
        else:
            sys.meta_path.insert(0, _UseOnImport(name, use))


def install():
    """xsalloc as torch's allocator now (if torch is importable) and as CuPy's once cupy is imported."""
    sys.meta_path.insert(0, _UseOnImport("cupy", _use_cupy))
    if importlib.util.find_spec("torch") is not None:
        _use_torch()


def children_too():
    """The processes this one starts run the start-up hook (xsalloc/_child/sitecustomize.py)."""
    os.environ[ENV_CHILDREN] = "1"
    path = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = CHILD_HOOK_DIR + (os.pathsep + path if path else "")


def no_gpu():
    """Why this process surely has no GPU, found without initialising CUDA; None when it may
    have one ($XSA_DRIVER, which tests set, is taken at its word)."""
    if os.environ.get("XSA_DRIVER"):
        return None
    cvd = os.environ.get("CUDA_VISIBLE_DEVICES")
    if cvd is not None and (not cvd.strip() or cvd.strip().startswith("-1")):
        return f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU"
    try:
        ctypes.CDLL("libcuda.so.1")  # loading initialises nothing
    except OSError:
        return "there is no CUDA driver (libcuda.so.1) here"
    return None


def _run_main(make_code, main):
    """Runs make_code()'s code in the module main (already sys.modules['__main__']), ending as
    python would."""
    try:
        exec(make_code(), main.__dict__)
    except Exception as e:  # a SyntaxError too: then no frame is the program's, as python prints it
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_globals is not main.__dict__:
            tb = tb.tb_next  # this module's frames: python SCRIPT has none of them
        sys.excepthook(type(e), e.with_traceback(tb), tb)  # the hook prints e.__traceback__
        sys.exit(1)


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
    _run_main(lambda: compile(source, abspath, "exec", dont_inherit=True), main)


def run_module(name, args):
    """Runs module `name` as __main__ with sys.argv [its file] + args, as python -m does."""
    import runpy

    try:  # python -m's own lookup, with its messages
        name, spec, code = runpy._get_module_details(name, runpy._Error)
    except runpy._Error as e:
        sys.exit(f"{sys.executable}: {e}")
    main = types.ModuleType("__main__")
    main.__dict__.update(__file__=spec.origin, __cached__=spec.cached, __doc__=None, __loader__=spec.loader,
                         __package__=spec.parent, __spec__=spec, __builtins__=builtins, __annotations__={})
    sys.argv[:] = [spec.origin] + list(args)
    sys.modules["__main__"] = main
    _run_main(lambda: code, main)


def main():
    argv = sys.argv[1:]
    module = len(argv) >= 2 and argv[0] == "-m"
    if not argv or (argv[0].startswith("-") and not module):
        print(USAGE, file=sys.stderr)
        sys.exit(2)
    why = no_gpu()
    if why:
        print(f"xsalloc.run: {why}: the program runs as python runs it, without xsalloc (on PyTorch's and "
              "CuPy's own allocators)", file=sys.stderr)
    else:
        try:
            install()
        except (RuntimeError, ImportError) as e:  # AdapterUnavailableError, XsallocError, a missing library
            print(f"xsalloc.run: xsalloc cannot become the allocator, so the program does not start: {e}",
                  file=sys.stderr)
            sys.exit(1)
        children_too()
    if module:
        run_module(argv[1], argv[2:])
    else:
        run_script(argv[0], argv[1:])


if __name__ == "__main__":
    main()
