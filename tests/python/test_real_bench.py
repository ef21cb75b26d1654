"""benchmarks/gpu/real_bench.py's parent side without torch or a GPU.

Design: the argument checks, the launch plan and the table are pure
Python and are tested directly. The parent loop (launching, a failing
child, a timeout, the budget, the lag file, the results file and the
table written at the end) runs for real, with child_command pointed at a
stand-in child script that behaves according to its allocator's name:
it writes a result (and a lag file when given one), fails with a message,
hangs, or writes a result and then crashes. The child itself runs in this
process against test_xsalloc's stand-in for torch and a stand-in workload
that allocates through the function pointers torch would call, on the
simulated driver (skipped without XSALLOC_LIBRARY): the allocator's
environment is set before the workload runs, and under xsalloc the lag
probe counts those calls.
"""

import contextlib
import io
import json
import os
import sys
import tempfile
import textwrap
import types
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "gpu"))
import real_bench  # noqa: E402
from test_xsalloc import TORCH_FREE, TORCH_MALLOC, fake_torch, module_as, stand_in_pluggable  # noqa: E402

FAKE_CHILD = textwrap.dedent('''
    import argparse, json, sys, time
    p = argparse.ArgumentParser()
    for a in ("--workload", "--alloc", "--steps", "--out", "--conf", "--lag"):
        p.add_argument(a)
    p.add_argument("--profile", action="store_true")
    a = p.parse_args(sys.argv[2:])
    if a.alloc == "bad":
        print("warming up")
        print("real_bench child: gpt2 under bad failed: OutOfMemoryError: Tried to allocate 2.00 GiB", file=sys.stderr)
        print("a warning printed at exit", file=sys.stderr)
        sys.exit(3)
    if a.alloc == "slow":
        time.sleep(30)
    if a.alloc == "sleepy":
        time.sleep(1)
    res = {"kind": "result", "workload": a.workload, "alloc": a.alloc, "xsalloc": a.alloc not in
           ("native", "expandable", "async"), "steps": int(a.steps), "wall_s": 2.0 if a.alloc == "native" else 3.0,
           "steady_s": 1.5 if a.alloc == "native" else 2.4, "impl": "fake", "peak_allocated": 10e9, "peak_reserved": 12e9 if a.alloc == "native" else 10.1e9,
           "device": "FakeGPU", "torch": "0.0", "conf": a.conf or ""}
    if res["xsalloc"]:
        res["xsalloc_stats"] = {"num_pages_recycled": 7, "num_pages_mapped": 100}
    if a.profile:
        res["first_profile"] = {"wall_ms": 500.0, "gpu_busy_ms": 400.0, "gpu_idle_ms": 90.0, "gaps_over_1ms": 3,
                                "idle_during": [["cpu_op:aten::empty", 50.0]], "self_cpu": [["aten::mm", 12, 8.0]],
                                "api": [["cuMemSetAccess", 250, 86.5]]}
    json.dump(res, open(a.out, "w"))
    if a.lag:
        json.dump({"probes": 10, "p10": 1, "p50": 4, "p90": 30, "p99": 60, "max": 64, "mean": 9.5,
                   "hist": {"1": 3}, "calls": 170, "every": 16, "pending": 0, "skipped": 0, "error": None},
                  open(a.lag, "w"))
    if a.alloc == "crashy":
        print("Segmentation fault at exit", file=sys.stderr)
        sys.exit(139)
''')


class ArgumentTest(unittest.TestCase):
    def parse_error(self, argv):
        """The message argparse prints for argv, which must be refused with status 2."""
        err = io.StringIO()
        with contextlib.redirect_stderr(err), self.assertRaises(SystemExit) as cm:
            real_bench.parse_run_args(argv)
        self.assertEqual(cm.exception.code, 2)
        return err.getvalue()

    def test_defaults(self):
        args, workloads, allocs, steps = real_bench.parse_run_args([])
        self.assertEqual(workloads, ["gpt2", "resnet", "llama_gen", "multistream"])
        self.assertEqual(allocs, [("native", None, False), ("expandable", None, False), ("async", None, False),
                                  ("xsalloc", None, True)])
        self.assertEqual(steps, {"gpt2": 24, "resnet": 24, "llama_gen": 5, "multistream": 24})
        self.assertEqual((args.runs, args.timeout, args.budget_s, args.no_lag), (3, 240, 420, False))

    def test_variants_steps_and_lists(self):
        _, workloads, allocs, steps = real_bench.parse_run_args(
            ["--workloads", "resnet,gpt2", "--allocs", "native,norecycle", "--xsalloc-conf",
             "norecycle=page_recycling:False", "--xsalloc-conf", "tight=page_recycling_headroom:0",
             "--steps", "gpt2=3", "--steps-llama-gen", "2", "--steps-resnet", "7"])
        self.assertEqual(workloads, ["resnet", "gpt2"])
        self.assertEqual(allocs, [("native", None, False), ("norecycle", "page_recycling:False", True),
                                  ("tight", "page_recycling_headroom:0", True)])
        self.assertEqual(steps, {"gpt2": 3, "resnet": 7, "llama_gen": 2, "multistream": 24})
        self.assertEqual(real_bench.parse_run_args(["--steps-llama_gen", "4"])[3]["llama_gen"], 4)

    def test_refusals_say_what_is_accepted(self):
        self.assertIn("the workloads are gpt2, resnet, llama_gen, multistream",
                      self.parse_error(["--workloads", "bert"]))
        self.assertIn("unknown ['fancy']", self.parse_error(["--allocs", "native,fancy"]))
        self.assertIn("expected NAME=CONF", self.parse_error(["--xsalloc-conf", "nothing"]))
        self.assertIn("expected NAME=CONF", self.parse_error(["--xsalloc-conf", "a b=x:1"]))
        self.assertIn("is taken", self.parse_error(["--xsalloc-conf", "native=page_recycling:False"]))
        self.assertIn("is taken", self.parse_error(["--xsalloc-conf", "a=x:1", "--xsalloc-conf", "a=y:1"]))
        self.assertIn("expected W=N", self.parse_error(["--steps", "gpt2=0"]))
        self.assertIn("expected W=N", self.parse_error(["--steps", "bert=3"]))
        self.assertIn("at least 1", self.parse_error(["--runs", "0"]))

    def test_plan_rotates_the_allocators_each_run(self):
        self.assertEqual(real_bench.plan(2, ["w1", "w2"], ["a", "b", "c"]), [
            (1, "w1", "a"), (1, "w1", "b"), (1, "w1", "c"), (1, "w2", "a"), (1, "w2", "b"), (1, "w2", "c"),
            (2, "w1", "b"), (2, "w1", "c"), (2, "w1", "a"), (2, "w2", "b"), (2, "w2", "c"), (2, "w2", "a")])


def result(run, workload, alloc, reserved, allocated, wall, **extra):
    r = {"kind": "result", "run": run, "workload": workload, "alloc": alloc, "status": "ok", "wall_s": wall,
         "steady_s": wall * 0.75,
         "peak_reserved": reserved, "peak_allocated": allocated, "device": "H100", "torch": "2.11.0",
         "xsalloc": alloc.startswith("xs"), "impl": "transformers"}
    r.update(extra)
    return r


class TableTest(unittest.TestCase):
    def test_medians_ranges_failures_lag_and_budget(self):
        lag = {"probes": 9, "p50": 5, "p90": 40, "p99": 80, "max": 100, "calls": 200, "pending": 1, "skipped": 0,
               "error": None}
        rows = [
            {"kind": "meta", "steps": {"gpt2": 24}, "allocs": {"native": None, "xsalloc": None}},
            result(1, "gpt2", "xsalloc", 10.1e9, 10e9, 3.0, xsalloc_stats={"num_pages_recycled": 4,
                                                                           "num_pages_mapped": 50}, lag=lag),
            result(1, "gpt2", "native", 16e9, 10e9, 2.0),
            result(2, "gpt2", "native", 15e9, 10e9, 4.0),
            result(3, "gpt2", "native", 14e9, 10e9, 3.0),
            result(2, "gpt2", "xsalloc", 10.3e9, 10e9, 5.0, xsalloc_stats={"num_pages_recycled": 6,
                                                                           "num_pages_mapped": 70},
                   lag=dict(lag, p50=7, max=300)),
            {"kind": "result", "run": 3, "workload": "gpt2", "alloc": "xsalloc", "status": "failed",
             "xsalloc": True, "error": "exit 1: boom", "log": "/x/r3.log"},
            {"kind": "result", "run": 1, "workload": "resnet", "alloc": "native", "status": "failed",
             "xsalloc": False, "error": "timed out after 240 s: step 3"},
            {"kind": "skipped", "count": 5, "planned": 12, "budget_s": 420},
        ]
        text = real_bench.table(rows)
        self.assertIn("Device: H100, torch 2.11.0", text)
        self.assertIn("native: unset, xsalloc: unset", text)
        self.assertIn("| gpt2 | native | 3 | 1.500 | 1.400-1.600 | 15.00 | 10.00 | 3.00 | 1.000x | 2.25 | 1.000x |  |  |", text)
        self.assertIn("| gpt2 | xsalloc | 2 (1 failed) | 1.020 | 1.010-1.030 | 10.20 | 10.00 | 4.00 | 1.333x | 3.00 | 1.333x | 5 | 60 |",
                      text)
        self.assertIn("| resnet | native | 0 (1 failed) | failed: timed out after 240 s: step 3 |", text)
        self.assertIn("| gpt2 | xsalloc | 2 | 200 | 9 | 6 | 40 | 80 | 300 | 1 | 0 |", text)
        self.assertIn("Failed: run 3 gpt2 xsalloc: exit 1: boom (log: /x/r3.log)", text)
        self.assertIn("Budget of 420 s spent: 5 of 12 planned children not run.", text)
        # native rows come before xsalloc's whatever the order run
        self.assertLess(text.index("| gpt2 | native |"), text.index("| gpt2 | xsalloc | 2 (1"))

    def test_driver_time_table_and_differences(self):
        self.assertEqual(real_bench.calls_between({"mem_map": [3, 10.0]}, {"mem_map": [5, 30.0], "mem_create": [2, 8.0]}),
                         {"mem_map": [2, 20.0], "mem_create": [2, 8.0]})
        calls = {"first": {"mem_create": [10, 3000.0], "mem_map": [10, 500.0]}, "steady": {"mem_map": [2, 100.0]}}
        rows = [result(1, "gpt2", "xsalloc", 10e9, 10e9, 3.0, driver_calls=calls), result(1, "gpt2", "native", 16e9, 10e9, 2.0)]
        text = real_bench.table(rows)
        self.assertIn("| gpt2 | xsalloc | 1 | 3.5 (20) | 0.1 (2) | mem_create 3.0 ms / 10, mem_map 0.5 ms / 10 |", text)
        self.assertNotIn("| gpt2 | native | 1 | 3.5", text)

    def test_gpu_idle_time_and_what_ran_then(self):
        self.assertEqual(real_bench.union_us([(10, 20), (0, 5), (12, 30), (40, 41)]), (26.0, [(5, 10), (30, 40)]))
        events = [{"cat": "kernel", "name": "k", "ts": 0, "dur": 1000}, {"cat": "gpu_memcpy", "name": "c", "ts": 500, "dur": 1500},
                  {"cat": "kernel", "name": "k", "ts": 5000, "dur": 1000},  # idle 2000-5000 us
                  {"cat": "cpu_op", "name": "aten::empty", "ts": 1500, "dur": 2000},  # 1,500 us of it while idle
                  {"cat": "cpu_op", "name": "aten::empty", "ts": 4500, "dur": 1000},  # 500 us
                  {"cat": "cuda_driver", "name": "cuMemSetAccess", "ts": 2500, "dur": 100},
                  {"cat": "cuda_driver", "name": "cuMemSetAccess", "ts": 900, "dur": 50},
                  {"cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 200, "dur": 30},
                  {"cat": "cpu_op", "name": "aten::mm", "ts": 100, "dur": 800},  # never while idle
                  {"cat": "user_annotation", "name": "step", "ts": 0, "dur": 9000}]
        got = real_bench.idle_summary(events, 0.0065, [["aten::mm", 1, 0.8]])
        self.assertEqual(got, {"wall_ms": 6.5, "gpu_busy_ms": 3.0, "gpu_idle_ms": 3.0, "gaps_over_1ms": 1,
                               "idle_during": [["cpu_op:aten::empty", 2.0], ["cuda_driver:cuMemSetAccess", 0.1]],
                               "api": [["cuMemSetAccess", 2, 0.15], ["cudaLaunchKernel", 1, 0.03]],
                               "self_cpu": [["aten::mm", 1, 0.8]]})

    def test_missing_statistics_and_lag_are_said(self):
        rows = [result(1, "resnet", "async", None, 5e9, 1.0),
                result(1, "resnet", "xsalloc", 5e9, 5e9, 1.0, lag=None, lag_error="no lag probe data in /x")]
        text = real_bench.table(rows)
        self.assertIn("| resnet | async | 1 | n/a | n/a | n/a | 5.00 | 1.00 | 1.000x | 0.75 | 1.000x |", text)
        self.assertIn("| resnet | xsalloc | 1 | no data: no lag probe data in /x |", text)

    def test_bad_results_line_names_the_line(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.jsonl")
            with open(path, "w") as f:
                f.write('{"kind": "meta"}\n\nnot json\n')
            with self.assertRaises(SystemExit) as cm:
                real_bench.load_rows(path)
            self.assertIn("r.jsonl:3: not a JSON line", str(cm.exception))


class ParentTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        fake = os.path.join(self.dir.name, "fake_child.py")
        with open(fake, "w") as f:
            f.write(FAKE_CHILD)
        real = real_bench.child_command

        def fake_command(*args):
            cmd = real(*args)
            self.assertEqual(cmd[1:3], [os.path.abspath(real_bench.__file__), "child"])
            return [sys.executable, fake] + cmd[2:]

        real_bench.child_command = fake_command
        self.addCleanup(setattr, real_bench, "child_command", real)

    def run_parent(self, argv):
        out = os.path.join(self.dir.name, "out")
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            status = real_bench.main(argv + ["--out", out])
        rows = real_bench.load_rows(os.path.join(out, "real_results.jsonl"))
        with open(os.path.join(out, "real_table.txt")) as f:
            table = f.read()
        return status, rows, printed.getvalue(), table

    def test_failures_are_reported_and_the_others_run(self):
        status, rows, printed, table = self.run_parent(
            ["--runs", "2", "--workloads", "gpt2", "--allocs", "native,bad,slow,crashy",
             "--xsalloc-conf", "bad=x:1", "--xsalloc-conf", "slow=x:1", "--xsalloc-conf", "crashy=x:1",
             "--timeout", "10", "--steps-gpt2", "3"])  # 10 s: a loaded CI machine starts a child slowly
        self.assertEqual(status, 1)
        results = [r for r in rows if r["kind"] == "result"]
        self.assertEqual([(r["run"], r["alloc"]) for r in results],
                         [(1, "native"), (1, "bad"), (1, "slow"), (1, "crashy"),
                          (2, "bad"), (2, "slow"), (2, "crashy"), (2, "native")])
        by = {(r["run"], r["alloc"]): r for r in results}
        self.assertEqual(by[1, "native"]["status"], "ok")
        self.assertEqual(by[1, "native"]["steps"], 3)
        self.assertNotIn("lag", by[1, "native"])
        self.assertEqual(by[1, "bad"]["error"],
                         "exit 3: real_bench child: gpt2 under bad failed: OutOfMemoryError: Tried to allocate 2.00 GiB")
        self.assertTrue(by[1, "slow"]["error"].startswith("timed out after 10 s"))
        self.assertEqual(by[1, "crashy"]["status"], "ok")  # measured, then crashed: kept, and said
        self.assertEqual(by[1, "crashy"]["exit_error"], "exit 139: Segmentation fault at exit")
        self.assertEqual(by[1, "crashy"]["lag"]["p50"], 4)
        self.assertEqual(by[1, "crashy"]["conf"], "x:1")
        self.assertIn("2/8 run 1 gpt2 bad: FAILED after", printed)
        self.assertIn("lag p50 4 calls; then exit 139", printed)
        self.assertIn("| gpt2 | native | 2 | 1.200 | 1.200-1.200 | 12.00 | 10.00 | 2.00 | 1.000x | 1.50 | 1.000x |", table)
        self.assertIn("| gpt2 | bad | 0 (2 failed) | failed: exit 3: real_bench child: gpt2 under bad failed: ", table)
        self.assertIn("| gpt2 | crashy | 2 | 170 | 10 | 4 | 30 | 60 | 64 | 0 | 0 |", table)
        self.assertIn(table, printed)

    def test_budget_stops_launching(self):
        status, rows, printed, table = self.run_parent(
            ["--runs", "3", "--workloads", "resnet", "--allocs", "sleepy", "--xsalloc-conf", "sleepy=x:1",
             "--budget-s", "0.5"])
        self.assertEqual(status, 0)
        self.assertEqual(len([r for r in rows if r["kind"] == "result"]), 1)
        self.assertEqual([r for r in rows if r["kind"] == "skipped"][0]["count"], 2)
        self.assertIn("Budget of 0.5 s spent: 2 of 3 planned children not run.", table)

    def test_no_lag_passes_no_file(self):
        _, rows, _, table = self.run_parent(["--runs", "1", "--workloads", "resnet", "--allocs", "xsalloc",
                                             "--no-lag"])
        r = [r for r in rows if r["kind"] == "result"][0]
        self.assertEqual((r["status"], "lag" in r), ("ok", False))
        self.assertNotIn("GPU lag", table)

    def test_profile_reaches_the_children_and_the_table(self):
        _, rows, _, table = self.run_parent(["--runs", "2", "--workloads", "gpt2", "--allocs", "native,xsalloc",
                                             "--no-lag", "--profile"])
        self.assertEqual(sum(1 for r in rows if r.get("first_profile")), 4)
        self.assertIn("| gpt2 | native | 2 | 500 | 400 | 90 (3) | cpu_op:aten::empty 50.0 | aten::mm 8.0 (12) | cuMemSetAccess 86.5 (250) |", table)
        _, rows, _, table = self.run_parent(["--runs", "1", "--workloads", "gpt2", "--allocs", "native"])
        self.assertNotIn("first_profile", rows[-1])
        self.assertNotIn("torch.profiler", table)

    def test_table_command_reprints(self):
        _, _, _, table = self.run_parent(["--runs", "1", "--workloads", "resnet", "--allocs", "native"])
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            real_bench.main(["table", os.path.join(self.dir.name, "out", "real_results.jsonl")])
        self.assertEqual(printed.getvalue(), table)


@unittest.skipUnless(os.environ.get("XSALLOC_LIBRARY"), "needs XSALLOC_LIBRARY (tests/python/python_test.sh sets it)")
class ChildTest(unittest.TestCase):
    def setUp(self):
        import xsalloc.torch
        from xsalloc import _lib

        self.lib = _lib.load()
        self.lib.cdll.xsa_shutdown()
        self.lib.check(self.lib.cdll.xsa_use_driver(b"sim"), "xsa_use_driver")
        self.lib.cdll.xsa_sim_set_eager_events(1)  # the child's own init must read XSALLOC_LAG_PROBE
        self.dir = tempfile.TemporaryDirectory()
        saved_env = dict(os.environ)

        def restore():
            os.environ.clear()
            os.environ.update(saved_env)
            xsalloc.torch._installed = None
            self.lib.cdll.xsa_shutdown()
            self.lib.cdll.xsa_sim_set_eager_events(0)  # the simulated driver's default, which other tests expect
            self.dir.cleanup()

        self.addCleanup(restore)
        os.environ.update(PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True", XSALLOC_CONF="max_split_size_mb:x",
                          PYTORCH_ALLOC_CONF="max_split_size_mb:y")

    def run_child(self, alloc, steps, conf=None):
        """child() on a stand-in torch; returns (its JSON, the environment the workload saw)."""
        torch = fake_torch()
        mem = torch.cuda.memory
        torch.__version__ = "fake"
        torch.cuda.mem_get_info = lambda: (70e9, 80e9)
        torch.cuda.get_device_name = lambda: "FakeGPU"
        torch.cuda.get_allocator_backend = lambda: "pluggable"
        seen = {}

        def peak(key):
            stats = mem.memory_stats_as_nested_dict  # xsalloc's once use() ran
            if stats:
                return stats()[key]["all"]["peak"]
            if alloc == "async" and key == "reserved_bytes":
                raise RuntimeError("not supported by this backend")
            return 123

        torch.cuda.max_memory_allocated = lambda: peak("allocated_bytes")
        torch.cuda.max_memory_reserved = lambda: peak("reserved_bytes")

        def resnet(n):
            seen.update(os.environ)
            if mem.installed:
                malloc, free = TORCH_MALLOC(mem.installed.fns[0]), TORCH_FREE(mem.installed.fns[1])
                for _ in range(n):
                    free(malloc(1 << 20, 0, None), 1 << 20, 0, None)
            return {"wall_s": 0.5, "steady_s": 0.4, "impl": "stand-in"}

        out, lag = os.path.join(self.dir.name, "r.json"), os.path.join(self.dir.name, "r.lag.json")
        args = types.SimpleNamespace(workload="resnet", alloc=alloc, steps=steps, out=out, conf=conf, lag=lag,
                                     profile=False)
        workloads = types.SimpleNamespace(resnet=resnet, first_profile=None)
        os.environ["XSALLOC_TORCH_ADAPTER"] = "0"  # the stand-in torch: the pluggable path, its functions the library's
        with module_as("torch", torch), module_as("real_workloads", workloads), stand_in_pluggable():
            real_bench.child(args)
        with open(out) as f:
            return json.load(f), seen

    def test_xsalloc_child_measures_and_probes(self):
        res, env = self.run_child("xsalloc", 40)
        self.assertNotIn("PYTORCH_CUDA_ALLOC_CONF", env)
        self.assertNotIn("PYTORCH_ALLOC_CONF", env)
        self.assertNotIn("XSALLOC_CONF", env, "the default configuration")
        self.assertEqual(env["XSALLOC_LAG_PROBE"], os.path.join(self.dir.name, "r.lag.json"))
        self.assertEqual((res["alloc"], res["xsalloc"], res["conf"], res["steps"]), ("xsalloc", True, "", 40))
        self.assertEqual((res["wall_s"], res["steady_s"], res["impl"], res["device"]), (0.5, 0.4, "stand-in", "FakeGPU"))
        self.assertEqual(res["peak_allocated"], 1 << 20)
        self.assertEqual(res["peak_reserved"], 2 << 20)
        self.assertEqual(res["device_used_end"], 10e9)
        self.assertEqual(res["xsalloc_stats"]["allocation.all.allocated"], 40)
        self.assertEqual(set(res["xsalloc_stats"]), set(real_bench.XSALLOC_STATS))
        self.lib.cdll.xsa_shutdown()  # the child's process exit writes the file
        with open(os.path.join(self.dir.name, "r.lag.json")) as f:
            lag = json.load(f)
        self.assertEqual((lag["calls"], lag["probes"], lag["p50"], lag["error"]), (80, 5, 1, None))

    def test_variant_conf_and_torch_allocators(self):
        res, _ = self.run_child("tight", 3, conf="page_recycling_headroom:0")
        self.assertEqual((res["alloc"], res["xsalloc"], res["conf"]), ("tight", True, "page_recycling_headroom:0"))
        self.lib.cdll.xsa_shutdown()
        import xsalloc.torch

        xsalloc.torch._installed = None
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            res, env = self.run_child("async", 3)
        self.assertEqual(env["PYTORCH_CUDA_ALLOC_CONF"], "backend:cudaMallocAsync")
        self.assertNotIn("PYTORCH_ALLOC_CONF", env, "torch would read it first")
        self.assertNotIn("XSALLOC_LAG_PROBE", env)
        self.assertEqual((res["xsalloc"], res["conf"]), (False, "backend:cudaMallocAsync"))
        self.assertNotIn("xsalloc_stats", res)
        self.assertEqual((res["peak_allocated"], res["peak_reserved"]), (123, None))  # a statistic it lacks
        self.assertIn("<lambda>() failed: RuntimeError: not supported by this backend", err.getvalue())
        res, env = self.run_child("native", 3)
        self.assertNotIn("PYTORCH_CUDA_ALLOC_CONF", env)

    def test_xsalloc_child_that_made_no_allocation_fails(self):
        with self.assertRaisesRegex(RuntimeError, "xsalloc made no allocation"):
            self.run_child("xsalloc", 0)


if __name__ == "__main__":
    unittest.main()
