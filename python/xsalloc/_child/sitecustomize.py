"""xsalloc's start-up hook for the processes that a `python -m xsalloc.run`
program starts (multiprocessing's and torch.multiprocessing's spawn,
torchrun's workers, subprocesses).

Design: xsalloc.run puts this file's directory first on PYTHONPATH and sets
XSALLOC_RUN_CHILDREN=1, and every Python interpreter those processes start
imports `sitecustomize` at start-up (the site module does; python -S or -I
does not). With the variable set, this one makes xsalloc torch's allocator
as soon as torch is imported and CuPy's as soon as cupy is
(xsalloc.run.install_on_import), as the launcher did in the parent; torch
itself is not imported here, so a child that never imports it pays
nothing. xsalloc is imported from where this file lies if the child's path
does not have it. Then the sitecustomize this one stands in front of, if
any, runs as it would have.
"""
import importlib.machinery
import importlib.util
import os
import sys


def _install():
    if not os.environ.get("XSALLOC_RUN_CHILDREN"):
        return
    here_pkg_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        import xsalloc.run
    except ImportError:
        sys.path.insert(0, here_pkg_parent)
        try:
            import xsalloc.run
        finally:
            sys.path.remove(here_pkg_parent)
    xsalloc.run.install_on_import()


def _chain():
    """Runs the next sitecustomize on sys.path, as sys.modules['sitecustomize']."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if os.path.abspath(p or ".") != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["sitecustomize"] = module
    spec.loader.exec_module(module)


_install()
_chain()
