"""benchmarks/gpu/walltime.py's parent and child without torch or a GPU.

Design: the parent loop (run()) runs for real, with the real start_child
and finish_child, but walltime's subprocess.Popen is a stand-in that
"runs" a child at once: it writes the child's result file, or a failure
on its stderr file, or hangs until killed, as each test scripts by launch
index; walltime's clock is a fake one that only time.sleep advances, so
--budget-s and --timeout are exact and nothing sleeps. nvidia-smi is a
stand-in (gpus_here) for check_machine (the tables: test_walltime_table.py).
child() runs in this process against a stand-in torch, imported through
a finder that charges the import to a fake CPU clock and records the
environment torch saw: its CUDA events read a GPU clock that each step
of a stand-in workload advances by a scripted time. xsalloc's use(),
driver_calls() and torch.memory_stats() are stood in for on the real
package's modules; one test uses the real library on the simulated
driver instead (skipped without XSALLOC_LIBRARY), so the keys the child
reads are the library's own.
"""

import contextlib
import ctypes
import importlib.abc
import importlib.util
import io
import json
import os
import subprocess
import sys
import tempfile
import types
import unittest
from unittest import mock

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "gpu"))
import walltime  # noqa: E402
import xsalloc  # noqa: E402
import xsalloc.torch  # noqa: E402

CONF_VARS = ("PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF", "XSALLOC_CONF", "XSALLOC_LAG_PROBE")


def row(rnd, workload, alloc, ms, device="H100", **extra):
    """An ok run as finish_child appends it."""
    r = {"round": rnd, "workload": workload, "alloc": alloc, "status": "ok", "median_step_s": ms / 1e3,
         "device": device, "peak_reserved": 110, "peak_allocated": 100}
    r.update(extra)
    return r


def failed(rnd, workload, alloc, error):
    return {"round": rnd, "workload": workload, "alloc": alloc, "status": "failed", "error": error}


def write_rows(path, rows):
    with open(path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)


class FakeProc:
    def __init__(self, returncode):
        self.returncode, self.killed = returncode, False

    def poll(self):
        return self.returncode

    def kill(self):
        self.killed, self.returncode = True, -9

    def wait(self):
        return self.returncode


class RunFixture(unittest.TestCase):
    """run() with stand-ins for the clock, the children and nvidia-smi (no tests of its own)."""

    def setUp(self):
        d = tempfile.TemporaryDirectory()
        self.addCleanup(d.cleanup)
        self.dir, self.results = d.name, os.path.join(d.name, "r.jsonl")
        self.now = 0.0
        self.launched = []  # (workload, alloc, CUDA_VISIBLE_DEVICES, command) a launch
        self.procs = []
        self.outcome = lambda n, alloc: "ok"  # what the n-th child launched does
        fake_time = types.SimpleNamespace(monotonic=lambda: self.now, sleep=self.sleep)
        fake_subprocess = types.SimpleNamespace(Popen=self.popen, DEVNULL=subprocess.DEVNULL)
        for name, value in (("time", fake_time), ("subprocess", fake_subprocess), ("gpus_here", lambda: None)):
            patcher = mock.patch.object(walltime, name, value)
            patcher.start()
            self.addCleanup(patcher.stop)

    def sleep(self, seconds):
        self.now += seconds
        self.assertLess(self.now, 600, "run() goes on past every budget and timeout")

    def popen(self, cmd, stdout, stderr, env):
        w, a, out = (cmd[cmd.index(flag) + 1] for flag in ("--workload", "--alloc", "--out"))
        outcome = self.outcome(len(self.launched), a)
        self.launched.append((w, a, env.get("CUDA_VISIBLE_DEVICES"), cmd))
        returncode = {"ok": 0, "fail": 1, "silent": 1, "hang": None, "noresult": 0}[outcome]
        if outcome == "ok":
            res = {"workload": w, "alloc": a, "median_step_s": 0.01, "device": "FakeGPU",
                   "peak_reserved": 3, "peak_allocated": 2}
            if "--cpus" in cmd:  # the child names the CPUs it ran on
                res["cpus"] = cmd[cmd.index("--cpus") + 1]
            if "--alternate" in cmd:  # the n-th launch's decay / off ratio: 1.00n
                res["alternate"] = {"block": int(cmd[cmd.index("--alternate") + 1]),
                                    "ratio": 1 + len(self.launched) / 1000}
            with open(out, "w") as f:
                json.dump(res, f)
        if outcome == "fail":
            stderr.write("loading the model\nRuntimeError: boom\n")
        self.procs.append(FakeProc(returncode))
        return self.procs[-1]

    def run_walltime(self, *argv):
        """walltime.py run with the results file here: (what it printed, the results file's rows)."""
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            walltime.main(["run", "--results", self.results, *argv])
        return printed.getvalue(), walltime.load(self.results)


class ParentTest(RunFixture):
    def test_plan_launches_the_missing_and_failed_runs_rotated(self):
        before = [row(1, "resnet", a, 10, device="FakeGPU") for a in ("native", "expandable", "xsalloc")] + [
            row(2, "gpt2_200", "expandable", 10, device="FakeGPU"),
            failed(1, "gpt2_200", "xsalloc", "timed out after 240 s"),
            failed(2, "resnet", "native", "RuntimeError: boom")]
        write_rows(self.results, before)
        printed, rows = self.run_walltime("--rounds", "3", "--workloads", "resnet,gpt2_200",
                                          "--allocs", "native,expandable,xsalloc")
        # Round r, workload i (of the order given): the allocators shifted by (r + i) % 3.
        expected = [(1, "gpt2_200", "xsalloc"), (1, "gpt2_200", "native"), (1, "gpt2_200", "expandable"),
                    (2, "resnet", "xsalloc"), (2, "resnet", "native"), (2, "resnet", "expandable"),
                    (2, "gpt2_200", "native"), (2, "gpt2_200", "xsalloc"),
                    (3, "resnet", "native"), (3, "resnet", "expandable"), (3, "resnet", "xsalloc"),
                    (3, "gpt2_200", "expandable"), (3, "gpt2_200", "xsalloc"), (3, "gpt2_200", "native")]
        self.assertEqual([(w, a) for w, a, _, _ in self.launched], [(w, a) for _, w, a in expected])
        self.assertEqual(rows[:len(before)], before)
        new = rows[len(before):]
        self.assertEqual([(r["round"], r["workload"], r["alloc"]) for r in new], expected)
        for r in new:
            self.assertEqual((r["status"], r["median_step_s"], r["device"], r["child_s"]), ("ok", 0.01, "FakeGPU", 0.2))
            self.assertNotIn("gpu", r)
        cmd = self.launched[0][3]
        out = cmd[-1]
        self.assertEqual(cmd[:-1], [sys.executable, os.path.abspath(walltime.__file__), "child", "--workload",
                                    "gpt2_200", "--alloc", "xsalloc", "--out"])
        self.assertEqual(os.path.dirname(out), self.dir)
        self.assertEqual(self.launched[0][2], os.environ.get("CUDA_VISIBLE_DEVICES"), "one GPU: the default device")
        self.assertEqual(os.listdir(self.dir), ["r.jsonl"], "the children's result and stderr files are removed")
        self.assertIn("walltime [   0s] round 1 gpt2_200   xsalloc        ", printed)
        self.assertIn("    10.00 ms a step", printed)
        self.assertIn("| gpt2_200   |", printed, "the table of the whole file comes last")
        self.assertIn("2 failed runs, e.g. resnet native: RuntimeError: boom", printed)

    def test_without_allocs_every_allocator_but_the_roomy_one_runs(self):
        _, rows = self.run_walltime("--rounds", "1", "--workloads", "resnet")
        self.assertEqual(sorted(r["alloc"] for r in rows), sorted(set(walltime.ALLOCS) - set(walltime.ON_REQUEST)))
        self.assertEqual(walltime.ON_REQUEST, ("xsalloc_roomy",))
        _, rows = self.run_walltime("--rounds", "1", "--workloads", "resnet", "--allocs", "xsalloc_roomy")
        self.assertIn("xsalloc_roomy", [r["alloc"] for r in rows], "asked for, it runs")

    def test_budget_stops_launching_and_the_next_call_goes_on(self):
        # Each child ends at once; each turn of the loop sleeps 0.2 s: launches at 0, 0.2 and 0.4 s.
        printed, rows = self.run_walltime("--rounds", "3", "--workloads", "resnet", "--allocs", "native,xsalloc",
                                          "--budget-s", "0.5")
        self.assertEqual([(r["round"], r["alloc"]) for r in rows], [(1, "xsalloc"), (1, "native"), (2, "native")])
        self.assertIn("walltime: budget of 0.5 s spent: 3 runs not launched (run again with the same --results to go on)",
                      printed)
        printed, rows = self.run_walltime("--rounds", "3", "--workloads", "resnet", "--allocs", "native,xsalloc")
        self.assertEqual([(r["round"], r["alloc"]) for r in rows[3:]], [(2, "xsalloc"), (3, "xsalloc"), (3, "native")])
        self.assertNotIn("budget", printed)
        self.assertEqual(len(self.launched), 6)
        calls = [r["call"] for r in rows]  # each run names the call that launched it: two calls, two names
        self.assertEqual(len(set(calls[:3])), 1)
        self.assertEqual(len(set(calls[3:])), 1)
        self.assertNotEqual(calls[0], calls[3])
        self.assertRegex(calls[0], r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}\+00:00$")

    def test_failed_runs_are_recorded_and_a_streak_stops_launching(self):
        script = ["fail", "hang", "silent", "ok", "noresult", "fail", "fail", "fail"]
        self.outcome = lambda n, alloc: script[n]
        printed, rows = self.run_walltime("--rounds", "3", "--workloads", "moe", "--allocs", "native,expandable,xsalloc",
                                          "--timeout", "1.1")
        self.assertEqual(len(self.launched), 8, "the ok fourth run restarts the count: 4 failures in a row after it")
        self.assertEqual([r["status"] for r in rows], ["failed"] * 3 + ["ok"] + ["failed"] * 4)
        self.assertEqual([r.get("error") for r in rows],
                         ["RuntimeError: boom", "timed out after 1.1 s", "no output", None, "no result",
                          "RuntimeError: boom", "RuntimeError: boom", "RuntimeError: boom"])
        self.assertTrue(self.procs[1].killed)
        self.assertEqual(rows[1]["child_s"], 1.2)
        self.assertIn("FAILED: timed out after 1.1 s", printed)
        self.assertIn("walltime: 4 runs failed in a row: 1 runs not launched", printed)
        self.assertEqual(os.listdir(self.dir), ["r.jsonl"])

    def test_failures_in_a_row_allowed_are_twice_the_gpus(self):
        self.outcome = lambda n, alloc: "fail"
        printed, rows = self.run_walltime("--rounds", "4", "--workloads", "moe", "--allocs", "native,expandable,xsalloc",
                                          "--gpus", "5")
        self.assertEqual(len(self.launched), 10)
        self.assertEqual(len(rows), 10)
        self.assertIn("walltime: 10 runs failed in a row: 2 runs not launched", printed)

    def test_gpus_run_side_by_side_on_gpus_that_change(self):
        _, rows = self.run_walltime("--rounds", "2", "--workloads", "resnet", "--allocs", "native,expandable",
                                    "--gpus", "2")
        self.assertEqual([(w, a, gpu) for w, a, gpu, _ in self.launched],
                         [("resnet", "expandable", "0"), ("resnet", "native", "1"),
                          ("resnet", "native", "0"), ("resnet", "expandable", "1")])
        self.assertEqual([(r["round"], r["alloc"], r["gpu"]) for r in rows],
                         [(1, "expandable", 0), (1, "native", 1), (2, "native", 0), (2, "expandable", 1)])

    def test_a_refused_machine_launches_nothing(self):
        write_rows(self.results, [row(1, "resnet", "native", 10, device="NVIDIA H200")])
        with mock.patch.object(walltime, "gpus_here", lambda: ["NVIDIA H100 80GB HBM3"]):
            with self.assertRaises(SystemExit):
                self.run_walltime("--rounds", "1", "--workloads", "resnet", "--allocs", "native,expandable")
        self.assertEqual(self.launched, [])


class AlternateRunTest(RunFixture):
    def test_one_child_a_workload_switching_with_its_block(self):
        printed, rows = self.run_walltime("--alternate", "--rounds", "2")
        workloads = list(walltime.ALTERNATE_BLOCK)
        self.assertEqual([(w, a) for w, a, _, _ in self.launched], [(w, "xsalloc_off") for w in workloads] * 2)
        for w, _, _, cmd in self.launched:
            self.assertEqual(cmd[-2:], ["--alternate", str(walltime.ALTERNATE_BLOCK[w])])
        self.assertEqual([r["alternate"]["ratio"] for r in rows], [1 + (i + 1) / 1000 for i in range(10)])
        self.assertIn("round 1 gpt2_200   xsalloc_off       10.00 ms a step, decay / off 1.001 inside the run",
                      printed)
        # Ratios 1.001 and 1.006 (gpt2_200), ..., 1.005 and 1.010 (moe): the medians of two (1.0035 is
        # 1.00349... in binary, 1.0075 is 1.00749...).
        self.assertIn("xsalloc_decay / xsalloc_off inside one process (child --alternate), median [min-max] "
                      "(n runs); FakeGPU", printed)
        self.assertIn("  gpt2_200   1.003 [1.001-1.006] (2), blocks of 10 steps", printed)
        self.assertIn("  moe        1.007 [1.005-1.010] (2), blocks of 4 steps", printed)
        self.assertNotIn("Median step time", printed, "no allocator table of these runs")

    def test_runs_with_and_without_it_keep_files_of_their_own(self):
        write_rows(self.results, [row(1, "resnet", "native", 10)])
        with self.assertRaisesRegex(SystemExit, "holds runs without --alternate: they go in results files of"):
            self.run_walltime("--alternate")
        write_rows(self.results, [row(1, "resnet", "xsalloc_off", 10, alternate={"block": 4, "ratio": 1.0})])
        with self.assertRaisesRegex(SystemExit, "holds runs with --alternate"):
            self.run_walltime()
        with self.assertRaisesRegex(SystemExit, "--alternate runs gpt2_200, resnet, loader_24, loader_200, moe only"):
            self.run_walltime("--alternate", "--workloads", "llama_gen")
        self.assertEqual(self.launched, [])


class PinTest(RunFixture):
    def test_pinned_children_run_on_their_gpus_cpus(self):
        local = {0: "0-15,32-47", 1: "16-31"}
        with mock.patch.object(walltime, "gpu_cpus", local.get):
            printed, rows = self.run_walltime("--pin", "--gpus", "2", "--rounds", "1", "--workloads", "resnet",
                                              "--allocs", "native,xsalloc")
        self.assertEqual([(a, gpu, cmd[cmd.index("--cpus") + 1]) for _, a, gpu, cmd in self.launched],
                         [("xsalloc", "0", "0-15,32-47"), ("native", "1", "16-31")])
        self.assertEqual({(r["gpu"], r["cpus"]) for r in rows}, {(0, "0-15,32-47"), (1, "16-31")})
        # One GPU: the default device's CPUs.
        os.remove(self.results)
        with mock.patch.object(walltime, "gpu_cpus", local.get):
            self.run_walltime("--pin", "--rounds", "1", "--workloads", "moe", "--allocs", "native")
        self.assertEqual(self.launched[-1][3][-2:], ["--cpus", "0-15,32-47"])

    def test_pinning_refused_where_a_gpus_cpus_are_unknown(self):
        with mock.patch.object(walltime, "gpu_cpus", {0: "0-15"}.get):
            with self.assertRaisesRegex(SystemExit, r"--pin: the CPUs local to GPU\(s\) \[1\] are unknown"):
                self.run_walltime("--pin", "--gpus", "2")
        self.assertEqual(self.launched, [])

    def test_pinned_and_unpinned_runs_keep_files_of_their_own(self):
        write_rows(self.results, [row(1, "resnet", "native", 10)])
        with mock.patch.object(walltime, "gpu_cpus", lambda gpu: "0-7"):
            with self.assertRaisesRegex(SystemExit, "holds runs without --pin: they go in results files of their own"):
                self.run_walltime("--pin")
            write_rows(self.results, [row(1, "resnet", "native", 10, cpus="0-7")])
            with self.assertRaisesRegex(SystemExit, "holds runs with --pin"):
                self.run_walltime()
        self.assertEqual(self.launched, [])


class CheckMachineTest(unittest.TestCase):
    H100 = "NVIDIA H100 80GB HBM3"

    def check(self, names, gpus, rows):
        """check_machine with nvidia-smi naming `names` and a results file of `rows`."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.jsonl")
            write_rows(path, rows)
            with mock.patch.object(walltime, "gpus_here", lambda: names):
                return walltime.check_machine(types.SimpleNamespace(gpus=gpus, results=path))

    def test_more_gpus_than_the_machine_has_are_refused(self):
        with self.assertRaises(SystemExit) as cm:
            self.check([self.H100] * 2, 3, [])
        self.assertIn("--gpus 3 but this machine has 2 GPU(s)", str(cm.exception))
        self.check([self.H100] * 2, 2, [])

    def test_results_from_another_card_are_refused(self):
        rows = [row(1, "resnet", "native", 10, device=self.H100), row(2, "resnet", "native", 10, device="NVIDIA H200")]
        with self.assertRaises(SystemExit) as cm:
            self.check([self.H100], 1, rows)
        self.assertIn("holds runs on ['NVIDIA H100 80GB HBM3', 'NVIDIA H200'], this machine has NVIDIA H100 80GB HBM3",
                      str(cm.exception))

    def test_the_same_card_is_accepted(self):
        rows = [row(1, "resnet", "native", 10, device=self.H100),
                dict(failed(1, "resnet", "xsalloc", "boom"), device="NVIDIA H200")]  # only ok runs count
        self.assertIsNone(self.check([self.H100, self.H100], 2, rows))
        self.assertIsNone(self.check([self.H100], 1, []))

    def test_without_nvidia_smi_nothing_is_checked(self):
        self.assertIsNone(self.check(None, 8, [row(1, "resnet", "native", 10, device="NVIDIA H200")]))

    def test_gpu_cpus_reads_the_gpus_numa_node_from_sysfs(self):
        with tempfile.TemporaryDirectory() as sysfs:
            for bus, cpus in (("0000:19:00.0", "0-15,32-47\n"), ("0000:9a:00.0", "16-31\n")):
                os.makedirs(os.path.join(sysfs, bus))
                with open(os.path.join(sysfs, bus, "local_cpulist"), "w") as f:
                    f.write(cpus)
            smi = types.SimpleNamespace(
                run=lambda *a, **kw: types.SimpleNamespace(stdout="00000000:19:00.0\n00000000:9A:00.0\n00000000:AB:00.0\n"),
                TimeoutExpired=subprocess.TimeoutExpired)
            with mock.patch.object(walltime, "subprocess", smi), mock.patch.object(walltime, "SYSFS_PCI", sysfs):
                with mock.patch.dict(os.environ):
                    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                    self.assertEqual([walltime.gpu_cpus(g) for g in range(4)], ["0-15,32-47", "16-31", None, None])
                with mock.patch.dict(os.environ, CUDA_VISIBLE_DEVICES="1"):
                    self.assertEqual(walltime.gpu_cpus(0), "16-31")
        self.assertEqual(walltime.parse_cpus("0-2,5,8-9"), {0, 1, 2, 5, 8, 9})

    def test_gpus_here_applies_cuda_visible_devices(self):
        smi = types.SimpleNamespace(run=lambda *a, **kw: types.SimpleNamespace(stdout="A\nB\n\nC\n"),
                                    TimeoutExpired=subprocess.TimeoutExpired)
        with mock.patch.object(walltime, "subprocess", smi), mock.patch.dict(os.environ, CUDA_VISIBLE_DEVICES="2,0,7"):
            self.assertEqual(walltime.gpus_here(), ["C", "A"])

        def missing(*a, **kw):
            raise FileNotFoundError("nvidia-smi")

        smi = types.SimpleNamespace(run=missing, TimeoutExpired=subprocess.TimeoutExpired)
        with mock.patch.object(walltime, "subprocess", smi):
            self.assertIsNone(walltime.gpus_here())


class TorchImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds 'torch' as `module`; importing it calls on_import (the import's time, the environment it sees)."""

    def __init__(self, module, on_import):
        self.module, self.on_import = module, on_import

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if name == "torch" else None

    def create_module(self, spec):
        return self.module

    def exec_module(self, module):
        self.on_import()


class ChildTest(unittest.TestCase):
    # GPU milliseconds of each step (warm-up: max(2, n // 4) steps), CPU milliseconds of each.
    GPU_MS = {4: [100, 50, 10, 20], 12: [100, 50, 40, 10, 12, 11, 13, 9, 14, 10, 11, 12],
              # --alternate 2: blocks off, decay, decay, off, off, decay, decay, off; warm-up 4 steps; a
              # block's first step 50 ms (the switch), its second 10 ms under off and 12 under decay
              16: [100] * 4 + [50, 12, 50, 10, 50, 10, 50, 12, 50, 12, 50, 10]}
    CPU_MS = {4: [1, 2, 3, 4], 12: [1] * 12, 16: [1] * 16}

    def setUp(self):
        self.cpu, self.gpu = 0.0, 0.0  # seconds, milliseconds
        self.env_at_import, self.used = None, []
        self.calls, self.pages = {}, {}  # the stand-ins' xsalloc driver calls and page statistics
        self.step_extra = None
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        # Set, so that the child is seen to drop them; the lag probe's in the
        # temporary directory, as the library writes that file at its shutdown.
        env = {v: "x" for v in CONF_VARS}
        env["XSALLOC_LAG_PROBE"] = os.path.join(self.dir.name, "lag.json")
        for patcher in (mock.patch.dict(os.environ, env),
                        mock.patch.dict(sys.modules), mock.patch.object(sys, "path", list(sys.path)),
                        mock.patch.object(sys, "meta_path", list(sys.meta_path)),
                        mock.patch.object(walltime, "time", types.SimpleNamespace(perf_counter=lambda: self.cpu)),
                        mock.patch.object(xsalloc.torch, "use", self.use),
                        mock.patch.dict(walltime.WORKLOADS, four=("stand_in", 4), twelve=("stand_in", 12),
                                        sixteen=("stand_in", 16))):
            patcher.start()
            self.addCleanup(patcher.stop)
        sys.modules.pop("torch", None)
        sys.meta_path.insert(0, TorchImport(self.torch(), self.import_torch))
        workloads = types.ModuleType("real_workloads")
        workloads.stand_in = self.workload
        sys.modules["real_workloads"] = workloads
        self.workloads = workloads

    def torch(self):
        test = self

        class Event:
            def __init__(self, enable_timing=False):
                test.assertTrue(enable_timing)

            def record(self):
                self.ms = test.gpu

            def elapsed_time(self, end):
                return end.ms - self.ms

        torch = types.ModuleType("torch")
        torch.cuda = types.SimpleNamespace(Event=Event, synchronize=lambda: None, get_device_name=lambda: "FakeGPU",
                                           max_memory_reserved=lambda: 300, max_memory_allocated=lambda: 200,
                                           is_initialized=lambda: False)
        return torch

    def import_torch(self):
        self.cpu += 2.004
        self.env_at_import = {v: os.environ.get(v) for v in CONF_VARS}

    def use(self, conf=None):
        self.used.append(conf)
        self.cpu += 0.5

    def xsalloc_did(self, calls=0, unmaps=0):
        """The stand-ins' counts move: `calls` mem_map and mem_create calls (2.5 us each, the allocating thread's)
        and pages mapped, `unmaps` mem_unmap calls (10 us each, the helper's) and pages unmapped."""
        for entry, n, us, helper in (("mem_map", calls, 2.5, False), ("mem_create", calls, 2.5, False),
                                     ("mem_unmap", unmaps, 10.0, True)):
            if n:
                c = self.calls.setdefault(entry, [0, 0.0, 0, 0.0])
                c[0], c[1] = c[0] + n, c[1] + us * n
                if helper:
                    c[2], c[3] = c[2] + n, c[3] + us * n
        self.pages["num_pages_mapped"] += calls
        self.pages["num_pages_unmapped"] += unmaps
        self.pages["num_device_lock_waits"] += unmaps  # an unmap's round kept a call waiting
        self.pages["device_lock_wait_us"] += 250 * unmaps
        self.pages["allocated_bytes.all.current"] += calls << 20

    def workload(self, n):
        """real_workloads' function: builds (5 s, and the GPU's 500 ms), runs n steps through timed_steps."""
        self.cpu += 5.008
        self.gpu += 500
        self.xsalloc_did(calls=10)

        def step(i):
            self.gpu += self.GPU_MS[n][i]
            self.cpu += self.CPU_MS[n][i] / 1e3
            if self.step_extra:
                self.step_extra(i)

        res = self.workloads.timed_steps(n, step)
        self.xsalloc_did(calls=100)  # after the steps: not theirs
        return {**res, "impl": "stand-in"}

    def stand_in_xsalloc(self, **more):
        """xsalloc's driver calls and statistics from the stand-ins' counts (and `more` of its functions)."""
        self.timing = []
        patchers = [mock.patch.object(xsalloc, "driver_calls", lambda: {k: list(v) for k, v in self.calls.items()}),
                    mock.patch.object(xsalloc, "time_driver_calls", self.timing.append),
                    mock.patch.object(xsalloc.torch, "memory_stats", lambda device=None: dict(self.pages))]
        patchers += [mock.patch.object(xsalloc, name, fn) for name, fn in more.items()]
        for patcher in patchers:
            patcher.start()
            self.addCleanup(patcher.stop)

    def run_child(self, alloc, workload="four", alternate=None, cpus=None):
        self.calls = {"init": [1, 0.0, 0, 0.0], "mem_map": [5, 12.5, 0, 0.0], "mem_create": [5, 40.0, 1, 8.0]}
        self.pages = {"num_pages_mapped": 5, "num_pages_unmapped": 0, "num_pages_recycled": 2,
                      "num_device_lock_waits": 3, "device_lock_wait_us": 900, "allocated_bytes.all.current": 0}
        out = os.path.join(self.dir.name, "r.json")
        walltime.child(types.SimpleNamespace(workload=workload, alloc=alloc, out=out, alternate=alternate, cpus=cpus))
        with open(out) as f:
            return json.load(f)

    def test_native_child_times_the_steps_after_warm_up(self):
        res = self.run_child("native")
        self.assertEqual(self.env_at_import, dict.fromkeys(CONF_VARS))
        self.assertEqual(os.environ["HF_HUB_OFFLINE"], "1")
        self.assertEqual(self.used, [])
        self.assertAlmostEqual(res.pop("median_step_s"), 0.015)  # steps 3 and 4: the first 2 are warm-up
        self.assertAlmostEqual(res.pop("wall_s"), 0.010)
        self.assertIsInstance(res.pop("threads_cpu_s"), list)  # this process's threads: test_child_times_each_thread
        self.assertEqual(res, {"workload": "four", "alloc": "native", "steps": 4, "impl": "stand-in",
                               "device": "FakeGPU", "peak_reserved": 300, "peak_allocated": 200,
                               "import_s": 2.0, "setup_s": 7.01,
                               "step_s": [0.1, 0.05, 0.01, 0.02], "cpu_end_s": [0.001, 0.003, 0.006, 0.01]})

    def test_child_times_each_thread_during_the_steps(self):
        pid, seen = os.getpid(), []
        before = {pid: ("python3", 1.0), 77: ("xsa-helper", 0.5), 78: ("idle", 0.2)}
        after = {pid: ("python3", 3.5), 77: ("xsa-helper", 0.75), 78: ("idle", 0.205), 79: ("cuda-EvtHandlr", 0.02)}
        with mock.patch.object(walltime, "thread_cpu", lambda: seen.append(1) or (after if len(seen) > 1 else before)):
            res = self.run_child("native")
        self.assertEqual(len(seen), 2)  # before the first step and after the last
        # the steps' thread is "main"; threads under 10 ms are left out; one that started counts from 0
        self.assertEqual(res["threads_cpu_s"], [["main", 2.5], ["xsa-helper", 0.25], ["cuda-EvtHandlr", 0.02]])

    def test_thread_cpu_reads_this_process(self):
        threads = walltime.thread_cpu()
        self.assertIn(os.getpid(), threads)
        self.assertTrue(all(isinstance(name, str) and cpu >= 0 for name, cpu in threads.values()))

    def test_child_pins_itself_before_torch_is_imported(self):
        pinned = []
        with mock.patch.object(os, "sched_setaffinity", lambda pid, cpus: pinned.append((pid, cpus,
                                                                                          self.env_at_import))):
            res = self.run_child("native", cpus="0-2,8")
        self.assertEqual(pinned, [(0, {0, 1, 2, 8}, None)])  # torch not yet imported
        self.assertEqual(res["cpus"], "0-2,8")
        self.assertNotIn("cpus", self.run_child("native"))

    def test_warm_up_is_a_quarter_of_the_steps(self):
        res = self.run_child("expandable", "twelve")
        self.assertAlmostEqual(res["median_step_s"], 0.011)  # the median of the last 9: 3 are warm-up
        self.assertEqual(res["step_s"], [t / 1e3 for t in self.GPU_MS[12]])
        self.assertEqual(self.env_at_import, dict.fromkeys(CONF_VARS) | {
            "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
        self.assertNotIn("xsalloc_steps", res)

    def test_xsalloc_child_counts_what_xsalloc_did_during_the_steps(self):
        self.stand_in_xsalloc()
        self.step_extra = lambda i: self.xsalloc_did(calls=1, unmaps=1 if i == 2 else 0)
        res = self.run_child("xsalloc")
        self.assertEqual(self.used, [None])
        self.assertEqual(self.env_at_import, dict.fromkeys(CONF_VARS))
        self.assertEqual(res["setup_s"], 7.51, "use() is start-up")
        self.assertEqual(res["import_s"], 2.0)
        # Only the keys that changed; none of init or num_pages_recycled; no byte statistics. Driver time:
        # 4 maps and 4 creates of 2.5 us on the allocating thread, 1 unmap of 10 us on the helper's.
        self.assertEqual(res["xsalloc_steps"], {"mem_map": 4, "mem_create": 4, "mem_unmap": 1,
                                                "driver_us": 20, "helper_driver_us": 10,
                                                "num_pages_mapped": 4, "num_pages_unmapped": 1,
                                                "num_device_lock_waits": 1, "device_lock_wait_us": 250})
        self.assertEqual(self.timing, [True], "timed from before the steps")
        self.assertEqual(res["step_driver_us"], [5, 5, 5, 5], "a map and a create a step, the helper's unmap apart")
        self.assertAlmostEqual(res["median_step_s"], 0.015)
        for alloc, conf in (("xsalloc_off", "helper_thread:False"),
                            ("xsalloc_decay", "helper_thread:True,page_decay_ms:500"),
                            ("xsalloc_helper", "helper_thread:True,page_decay_ms:0"),
                            ("xsalloc_roomy", "helper_thread:False,page_recycling_headroom:0.08")):
            self.used = []
            self.assertEqual(self.run_child(alloc)["xsalloc_steps"]["mem_map"], 4)
            self.assertEqual(self.used, [conf])
            self.assertEqual(self.env_at_import, dict.fromkeys(CONF_VARS), "use(conf) is xsalloc's configuration")

    def test_alternate_switches_settings_abba_and_compares_the_modes(self):
        settings = []
        self.stand_in_xsalloc(set_allocator_settings=settings.append)
        res = self.run_child("xsalloc_off", "sixteen", alternate=2)
        off, decay = walltime.ALLOCS["xsalloc_off"][1], walltime.ALLOCS["xsalloc_decay"][1]
        self.assertEqual(settings, [off, decay, decay, off, off, decay, decay, off], "one switch a block, ABBA")
        alt = res["alternate"]
        self.assertEqual(alt["modes"], [m for m in ("xsalloc_off", "xsalloc_decay", "xsalloc_decay", "xsalloc_off",
                                                    "xsalloc_off", "xsalloc_decay", "xsalloc_decay", "xsalloc_off")
                                        for _ in range(2)])
        # Without warm-up and the blocks' first steps: off 10 ms, decay 12 ms.
        self.assertEqual(alt["median_s"], {"xsalloc_off": 0.01, "xsalloc_decay": 0.012})
        self.assertAlmostEqual(alt["ratio"], 1.2)
        self.assertEqual(alt["block"], 2)
        self.assertNotIn("alternate", self.run_child("xsalloc_off", "sixteen"), "only when asked")

    def test_alternate_needs_xsalloc(self):
        for alloc, n in (("native", 2), ("xsalloc_off", 0)):
            with self.assertRaisesRegex(SystemExit, f"--alternate {n} needs an xsalloc allocator"):
                self.run_child(alloc, "sixteen", alternate=n)

    @unittest.skipUnless(os.environ.get("XSALLOC_LIBRARY"), "needs XSALLOC_LIBRARY (tests/python/python_test.sh sets it)")
    def test_xsalloc_counts_come_from_the_library(self):
        from xsalloc import _lib

        lib = _lib.load()
        lib.cdll.xsa_shutdown()
        lib.check(lib.cdll.xsa_use_driver(b"sim"), "xsa_use_driver")
        self.addCleanup(lib.cdll.xsa_shutdown)
        # xsalloc_off's settings, which the stand-in use() does not give the library, whatever its defaults.
        lib.check(lib.cdll.xsa_init(walltime.ALLOCS["xsalloc_off"][1].encode()), "xsa_init")

        def step(_):  # 64 MiB mapped, freed, and its pages unmapped
            ptr = ctypes.c_void_p()
            lib.check(lib.cdll.xsa_malloc(ctypes.byref(ptr), ctypes.c_size_t(64 << 20), 0, None), "xsa_malloc")
            lib.check(lib.cdll.xsa_free(ptr), "xsa_free")
            xsalloc.empty_cache()

        self.step_extra = step
        steps = self.run_child("xsalloc_off")["xsalloc_steps"]
        self.assertNotIn("init", steps, "xsalloc started before the steps")
        self.assertGreater(steps["mem_map"], 0)
        self.assertGreater(steps["num_pages_mapped"], 0)
        self.assertEqual(steps["num_pages_unmapped"], steps["num_pages_mapped"])
        self.assertEqual(steps["mem_create"], steps["num_pages_mapped"])
        self.assertNotIn("num_device_lock_waits", steps, "one thread, the helper off: nobody waited")
        self.assertGreater(steps["driver_us"], 0, "timed, on the allocating thread")
        self.assertEqual(steps["helper_driver_us"], 0, "the helper off")
        # The library takes both modes' settings at run time, between steps that allocate.
        alt = self.run_child("xsalloc_off", "sixteen", alternate=2)["alternate"]
        self.assertEqual(set(alt["median_s"]), set(walltime.AB_MODES))


if __name__ == "__main__":
    unittest.main()
