"""PyTorch's own CUDA tests (test/test_cuda.py) under one allocator, one test
at a time, each outcome appended to a JSON-lines file as it happens.

Design: a test that kills the process (an illegal address poisons the CUDA
context; torch may then abort) must not take the rest of the run with it,
so this process writes "started" before each test and its outcome after;
run_torch_suite.sh starts it again without the tests already done and
names the test that was started and never finished a crash. A test that
hangs is ended by faulthandler's watchdog (it exits the process even from
inside a CUDA call) and reads the same way.

The file is newer than the installed wheel: names it imports that the
wheel lacks get stand-ins (flags False, decorators that return the
function) and `expecttest`, if missing, a module whose TestCase is
unittest's. Tests that need the real thing then fail under torch's
allocator as well, which is why outcomes are compared allocator against
allocator, never against "all pass".

Modes (the allocator is chosen before anything touches CUDA):
  torch             torch's allocator, its defaults
  torch_expandable  torch's allocator with expandable_segments:True
  default           xsalloc, its defaults (expandable, page recycling,
                    decay and the helper thread)
  norec             xsalloc, page_recycling:False
  classic           xsalloc, expandable_segments:False
  decay             xsalloc, helper_thread:True,page_decay_ms:500 (the
                    defaults written out: the run that turned them on)
  off               xsalloc, helper_thread:False (decay and the helper off)
In the expandable modes (torch_expandable, default, norec, decay, off) the tests'
`expandable_segments` property is True, as PyTorch's own
test_cuda_expandable_segments.py sets it.

  python torch_suite.py --file test_cuda.py --mode M --out M.jsonl [-k PATTERN ...] [--classes C ...]
  python torch_suite.py --table DIR   (one row per test, one column per DIR/*.jsonl, totals)
"""

import argparse
import ast
import faulthandler
import fnmatch
import json
import os
import sys
import time
import types
import unittest

XSALLOC_CONF = {
    "default": "",
    "norec": "page_recycling:False",
    "classic": "expandable_segments:False",
    "decay": "helper_thread:True,page_decay_ms:500",
    "off": "helper_thread:False",
}
EXPANDABLE_MODES = ("torch_expandable", "default", "norec", "decay", "off")
MODES = ("torch", "torch_expandable", "default", "norec", "classic", "decay", "off")
CLASSES = ("TestCuda", "TestMemPool", "TestBlockStateAbsorption", "TestCudaOptims")


def choose_allocator(mode):
    """Before torch touches CUDA: the allocator of the mode."""
    os.environ.pop("PYTORCH_CUDA_ALLOC_CONF", None)
    os.environ.pop("PYTORCH_ALLOC_CONF", None)
    if mode == "torch_expandable":
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = "expandable_segments:True"
    if mode in XSALLOC_CONF:
        import xsalloc.torch

        xsalloc.torch.use(conf=XSALLOC_CONF[mode])
        if not xsalloc.torch.adapter_in_use():
            sys.exit("xsalloc's torch adapter is not in use: the suite would test the pluggable path")


def stand_in(name):
    """A stand-in for a name the wheel lacks: flags are False, anything else
    behaves as a decorator (with or without arguments) returning the function."""
    if name.isupper():
        return False

    def decorator(*args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return lambda f: f

    return decorator


def shim_imports(path):
    """Gives every name the file imports from torch modules a stand-in
    where the installed torch lacks it; returns the names shimmed."""
    import importlib

    try:
        import expecttest  # noqa: F401
    except ImportError:
        mod = types.ModuleType("expecttest")
        mod.TestCase = unittest.TestCase
        sys.modules["expecttest"] = mod
    shimmed = []
    tree = ast.parse(open(path).read(), path)
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom) or not node.module or not node.module.startswith("torch"):
            continue
        try:
            mod = importlib.import_module(node.module)
        except ImportError:
            continue
        for alias in node.names:
            if alias.name != "*" and not hasattr(mod, alias.name):
                setattr(mod, alias.name, stand_in(alias.name))
                shimmed.append(f"{node.module}.{alias.name}")
    return shimmed


def load_suite(path, mode):
    """The file's module, loaded as test_cuda (not __main__: run_tests stays out)."""
    from torch.testing._internal import common_utils

    if hasattr(common_utils, "parse_cmd_line_args"):
        argv, sys.argv = sys.argv, [sys.argv[0]]
        common_utils.parse_cmd_line_args()
        sys.argv = argv
    module = types.ModuleType("test_cuda")
    module.__file__ = os.path.abspath(path)
    sys.modules["test_cuda"] = module
    exec(compile(open(path).read(), path, "exec"), module.__dict__)
    if mode in EXPANDABLE_MODES:
        for cls in ("TestCuda", "TestBlockStateAbsorption"):
            if cls in module.__dict__:
                module.__dict__[cls].expandable_segments = property(lambda self: True)
    return module


def selected_tests(module, classes, patterns):
    """(id, test) for every test of the classes (and the CUDA classes
    instantiated from them, e.g. TestCudaOptimsCUDA) matching a pattern."""
    loader = unittest.TestLoader()
    out = []
    for name, obj in sorted(vars(module).items()):
        if not (isinstance(obj, type) and issubclass(obj, unittest.TestCase)):
            continue
        if not any(name in (c, c + "CUDA") for c in classes):
            continue
        for test in loader.loadTestsFromTestCase(obj):
            tid = f"{name}.{test._testMethodName}"
            if not patterns or any(fnmatch.fnmatchcase(tid, f"*{p}*") for p in patterns):
                out.append((tid, test))
    return out


class Recorder(unittest.TestResult):
    """Keeps the one test's outcome and the last line of its failure."""

    def __init__(self, test):
        super().__init__()
        self.test = test
        self.outcome, self.detail = "pass", ""

    def _set(self, outcome, err=None, reason=""):
        self.outcome = outcome
        if err is not None:
            lines = [l for l in self._exc_info_to_string(err, self.test).strip().splitlines() if l.strip()]
            self.detail = lines[-1][:300] if lines else ""
        else:
            self.detail = str(reason)[:300]

    def addFailure(self, test, err):
        self._set("fail", err)

    def addError(self, test, err):
        self._set("error", err)

    def addSkip(self, test, reason):
        self._set("skip", reason=reason)

    def addExpectedFailure(self, test, err):
        self._set("xfail", err)

    def addUnexpectedSuccess(self, test):
        self._set("xpass")

    def addSubTest(self, test, subtest, err):
        if err is not None and self.outcome == "pass":
            self._set("fail" if issubclass(err[0], test.failureException) else "error", err)


def done_tests(out):
    """Tests with a record: an outcome, or a start the process never finished (a crash)."""
    if not os.path.exists(out):
        return set()
    return {json.loads(line)["test"] for line in open(out)}


def run(args):
    faulthandler.enable()  # a crash's Python stack goes to the log
    choose_allocator(args.mode)
    shimmed = shim_imports(args.file)
    module = load_suite(args.file, args.mode)
    done = done_tests(args.out)
    tests = [(tid, t) for tid, t in selected_tests(module, args.classes, args.k) if tid not in done]
    if args.only:
        wanted = set(args.only)
        tests = [(tid, t) for tid, t in tests if tid in wanted]
    if not done:
        print(f"{args.mode}: {len(tests)} tests; stand-ins for {', '.join(shimmed) or 'nothing'}", flush=True)
    with open(args.out, "a") as out:

        def write(rec):
            out.write(json.dumps(rec) + "\n")
            out.flush()
            os.fsync(out.fileno())

        for tid, test in tests:
            write({"test": tid, "outcome": "started"})
            faulthandler.dump_traceback_later(args.timeout, exit=True)
            start = time.monotonic()
            result = Recorder(test)
            test.run(result)
            faulthandler.cancel_dump_traceback_later()
            write({"test": tid, "outcome": result.outcome, "detail": result.detail,
                   "seconds": round(time.monotonic() - start, 2)})
            if result.shouldStop:
                # torch's TestCase stops the run once the CUDA context is
                # lost (an illegal address): a new process goes on.
                sys.exit(f"{tid}: torch stopped the run (CUDA context lost?)")


def outcomes(path):
    """test -> (outcome, detail); a test started and never finished is a
    crash. PATH.confirm (tests run again alone, after a parallel run) wins."""
    res = {}
    if os.path.exists(path + ".confirm"):
        res = outcomes(path + ".confirm")
        confirmed = dict(res)
    else:
        confirmed = {}
    for line in open(path):
        rec = json.loads(line)
        if rec["outcome"] == "started":
            res.setdefault(rec["test"], ("crash", "the process died during the test"))
        else:
            res[rec["test"]] = (rec["outcome"], rec.get("detail", ""))
    res.update(confirmed)
    return res


PASSING = ("pass", "skip", "xfail")


def to_confirm(folder, mode, reference="torch"):
    """Prints the tests of `mode` worth running again alone: for the
    reference, those that did not pass; for another mode, the reference's
    passes that it did not pass."""
    ref = outcomes(os.path.join(folder, f"{reference}.jsonl"))
    res = outcomes(os.path.join(folder, f"{mode}.jsonl"))
    if mode == reference:
        tests = [t for t, (o, _) in res.items() if o not in PASSING]
    else:
        tests = [t for t, (o, _) in ref.items() if o == "pass" and res.get(t, ("-",))[0] != "pass"]
    print(" ".join(sorted(tests)))


def table(folder, reference="torch"):
    """One row per test whose outcome differs between the modes, then the
    totals: tests, passes, and the reference's passes that each mode keeps."""
    modes = [m for m in MODES if os.path.exists(os.path.join(folder, f"{m}.jsonl"))]
    res = {m: outcomes(os.path.join(folder, f"{m}.jsonl")) for m in modes}
    tests = sorted(set().union(*(r.keys() for r in res.values())))
    width = max([len(t) for t in tests] + [4])
    print(f"{'test':<{width}}  " + "  ".join(f"{m:>16}" for m in modes))
    for t in tests:
        row = [res[m].get(t, ("-", ""))[0] for m in modes]
        if len(set(row)) > 1:
            print(f"{t:<{width}}  " + "  ".join(f"{o:>16}" for o in row))
    ref = res.get(reference, {})
    ref_pass = {t for t, (o, _) in ref.items() if o == "pass"}
    print(f"{'total (' + str(len(tests)) + ' tests)':<{width}}  " +
          "  ".join(f"{sum(o == 'pass' for o, _ in res[m].values()):>10} pass" for m in modes))
    print(f"{'of ' + reference + chr(39) + 's ' + str(len(ref_pass)) + ' passes':<{width}}  " +
          "  ".join(f"{sum(res[m].get(t, ('-',))[0] == 'pass' for t in ref_pass):>10} kept" for m in modes))
    for m in modes:
        lost = sorted(t for t in ref_pass if res[m].get(t, ("-",))[0] != "pass")
        for t in lost:
            o, d = res[m].get(t, ("missing", ""))
            print(f"  {m}: {t}: {o}: {d}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--file")
    ap.add_argument("--mode", choices=MODES)
    ap.add_argument("--out")
    ap.add_argument("--classes", nargs="+", default=list(CLASSES))
    ap.add_argument("-k", action="append", default=[])
    ap.add_argument("--only", nargs="+", help="these test ids alone")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds a test may take")
    ap.add_argument("--table")
    ap.add_argument("--reference", default="torch")
    ap.add_argument("--to-confirm", metavar="DIR", help="print the tests of --mode to run again alone")
    args = ap.parse_args()
    if args.table:
        table(args.table, args.reference)
    elif args.to_confirm:
        to_confirm(args.to_confirm, args.mode, args.reference)
    else:
        run(args)


if __name__ == "__main__":
    main()
