"""benchmarks/gpu/walltime.py's tables (walltime.py table) without torch or a GPU.

Design: each test writes a hand-made results file (test_walltime's row
and failed make its lines as the parent appends them), prints the table
of it, and compares the printed blocks with figures worked out by hand
in the test's comments.
"""

import contextlib
import io
import os
import statistics
import tempfile
import unittest

from test_walltime import failed, row, walltime, write_rows  # also puts benchmarks/gpu on sys.path

import walltime_stats  # noqa: E402


class TableTest(unittest.TestCase):
    def table(self, rows):
        """`walltime.py table` of rows: its text a device (the failed runs' line with the last one)."""
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.jsonl")
            write_rows(path, rows)
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                walltime.main(["table", path])
        return printed.getvalue().split("\nMedian step time after warm-up, median of the runs' medians")[1:]

    @staticmethod
    def blocks(section):
        """A device's text as {first line: the lines under it}, blocks being what blank lines part."""
        return {b.splitlines()[0]: b.splitlines()[1:] for b in section.strip("\n").split("\n\n")}

    @staticmethod
    def cells(line):
        return [c.strip() for c in line.split("|")[1:-1]]

    def test_tables_ratios_start_up_peaks_and_failures(self):
        ms = {"native": (10, 12, 11), "expandable": (9, 14, 12), "xsalloc": (11, 12),  # its round 3 failed
              "xsalloc_off": (10, 11, 10.5), "xsalloc_helper": (10.8, 11.0, 11.2), "xsalloc_decay": (9.9, 11.0, 10.45)}
        setup = {"native": (20, 30, 25), "xsalloc": (40, 50)}
        rows = []
        for a, times in ms.items():
            for i, t in enumerate(times):
                extra = {"setup_s": setup[a][i]} if a in setup else {}
                if a == "native":
                    extra["peak_reserved"] = (150, 130, 140)[i]
                rows.append(row(i + 1, "resnet", a, t, **extra))
        rows += [row(1, "gpt2_200", "native", 100, setup_s=7.0), row(1, "gpt2_200", "expandable", 104),
                 row(1, "gpt2_200", "xsalloc", 101.2), row(1, "gpt2_200", "xsalloc_decay", 103),
                 row(1, "moe", "xsalloc", 50, peak_allocated=0),
                 failed(1, "gpt2_200", "native", "timed out after 240 s"),
                 row(1, "resnet", "native", 20, device="H200"),
                 failed(3, "resnet", "xsalloc", "RuntimeError: boom")]
        h100, h200 = self.table(rows)
        self.assertTrue(h100.startswith(" [min-max] (n runs); H100\n"))
        self.assertTrue(h200.startswith(" [min-max] (n runs); H200\n"))

        blocks = self.blocks(h100)
        table = blocks[" [min-max] (n runs); H100"]
        self.assertEqual(self.cells(table[0]), ["workload"] + list(ms))
        self.assertEqual(self.cells(table[2]), ["gpt2_200", "100.00 ms [100.0-100.0] (1)", "104.00 ms [104.0-104.0] (1)",
                                                "101.20 ms [101.2-101.2] (1)", "-", "-", "103.00 ms [103.0-103.0] (1)"])
        self.assertEqual(self.cells(table[3]), ["resnet", "11.00 ms [10.0-12.0] (3)", "12.00 ms [9.0-14.0] (3)",
                                                "11.50 ms [11.0-12.0] (2)", "10.50 ms [10.0-11.0] (3)",
                                                "11.00 ms [10.8-11.2] (3)", "10.45 ms [9.9-11.0] (3)"])
        self.assertEqual(self.cells(table[4]), ["moe", "-", "-", "50.00 ms [50.0-50.0] (1)", "-", "-", "-"])
        self.assertEqual(len(table), 5)
        # gpt2_200: torch's best is 100 ms. resnet: native's 11.00 ms, xsalloc_off's 10.50 ms. (!): above 1.02 either way.
        self.assertEqual(blocks["xsalloc against the fastest of torch native and expandable, and against xsalloc_off "
                                "(> 1.02: flagged)"], [
            "  gpt2_200   xsalloc 1.012x torch; xsalloc_decay 1.030x torch (!)",
            "  resnet     xsalloc 1.045x torch, 1.095x off (!); xsalloc_helper 1.000x torch, 1.048x off (!); "
            "xsalloc_decay 0.950x torch, 0.995x off; xsalloc_off 0.955x torch",
            "  moe        xsalloc"])
        # Round by round, resnet: torch's best 9, 12, 11 ms and xsalloc_off's 10, 11, 10.5 ms. xsalloc:
        # 11/9, 12/12 and 11/10, 12/11; helper: 10.8/9, 11/12, 11.2/11 and 10.8/10, 11/11, 11.2/10.5;
        # decay: 9.9/9, 11/12, 10.45/11 and 9.9/10, 11/11, 10.45/10.5; off: 10/9, 11/12, 10.5/11.
        self.assertEqual(blocks["The same, round by round: the median of each round's ratio [min-max] (n rounds)"], [
            "  gpt2_200   xsalloc 1.012x torch [1.012-1.012] (1); xsalloc_decay 1.030x torch [1.030-1.030] (1)",
            "  resnet     xsalloc 1.111x torch [1.000-1.222] (2), 1.095x off [1.091-1.100] (2); "
            "xsalloc_helper 1.018x torch [0.917-1.200] (3), 1.067x off [1.000-1.080] (3); "
            "xsalloc_decay 0.950x torch [0.917-1.100] (3), 0.995x off [0.990-1.000] (3); "
            "xsalloc_off 0.955x torch [0.917-1.111] (3)"])
        # expandable / native: gpt2_200 104/100; resnet 9/10, 14/12, 12/11.
        self.assertEqual(blocks["The method's own spread: torch expandable / native, round by round, median [min-max] "
                                "(n rounds)"], ["  gpt2_200   1.040 [1.040-1.040] (1)",
                                                "  resnet     1.091 [0.900-1.167] (3)"])
        self.assertIn("Start-up, median seconds from a run's process start to its first step: gpt2_200 7.0, resnet 30.0",
                      blocks)
        self.assertEqual(blocks["Peak reserved / peak allocated, median of the runs [min-max]"], [
            "  gpt2_200   " + "; ".join(f"{a} 1.100 [1.100-1.100]" for a in ("native", "expandable", "xsalloc",
                                                                           "xsalloc_decay")),
            "  resnet     native 1.400 [1.300-1.500]; " + "; ".join(f"{a} 1.100 [1.100-1.100]" for a in list(ms)[1:]),
            "  moe        "])  # no peak allocated: no ratio

        blocks = self.blocks(h200)
        table = blocks[" [min-max] (n runs); H200"]
        self.assertEqual([self.cells(table[0]), self.cells(table[2])],
                         [["workload", "native"], ["resnet", "20.00 ms [20.0-20.0] (1)"]])
        self.assertEqual(len(table), 3)
        self.assertEqual(list(blocks)[1:], [
            "xsalloc against the fastest of torch native and expandable, and against xsalloc_off (> 1.02: flagged)",
            "Peak reserved / peak allocated, median of the runs [min-max]",
            "2 failed runs, e.g. resnet xsalloc: RuntimeError: boom"])
        self.assertEqual(blocks["Peak reserved / peak allocated, median of the runs [min-max]"],
                         ["  resnet     native 1.100 [1.100-1.100]"])

    def test_against_each_torch_allocator_and_what_the_faster_pick_does(self):
        rows = [row(1, "resnet", "native", 10), row(1, "resnet", "expandable", 11), row(1, "resnet", "xsalloc_decay", 11),
                row(2, "resnet", "native", 12), row(2, "resnet", "expandable", 9),
                row(2, "resnet", "xsalloc_decay", 10.8),
                row(3, "resnet", "native", 10), row(3, "resnet", "xsalloc_decay", 50),  # expandable missing: left out
                row(1, "moe", "native", 10), row(1, "moe", "xsalloc_decay", 11)]  # no expandable at all: no line
        blocks = self.blocks(self.table(rows)[0])
        # decay / native 1.1 and 0.9, / expandable 1.0 and 1.2; the pick (10 + 11) / 2 / 10 and (12 + 9) / 2 / 9.
        self.assertEqual(blocks["Against each torch allocator apart, round by round, median (n rounds); the pick: a "
                                "round's mean of torch's two over the faster, median [min-max] (n rounds)"], [
            "  resnet     xsalloc_decay 1.000x native (2), 1.100x expandable (2); the pick 1.108 [1.050-1.167] (2)"])

    def test_paired_geometric_means_and_their_intervals(self):
        rows = [row(1, "resnet", "xsalloc_off", 10), row(1, "resnet", "xsalloc_decay", 11),
                row(2, "resnet", "xsalloc_off", 20), row(2, "resnet", "xsalloc_decay", 22),
                row(1, "gpt2_200", "xsalloc_off", 10), row(1, "gpt2_200", "xsalloc_decay", 12),
                row(2, "gpt2_200", "xsalloc_off", 12), row(2, "gpt2_200", "xsalloc_decay", 10),
                row(3, "gpt2_200", "xsalloc_decay", 10),  # no off in round 3: no pair
                row(1, "gpt2_200", "native", 10), row(1, "gpt2_200", "expandable", 10),
                row(2, "gpt2_200", "native", 10), row(2, "gpt2_200", "expandable", 12)]
        blocks = self.blocks(self.table(rows)[0])
        # resnet: 1.1 twice, no spread. gpt2_200: 1.2 and 1/1.2, geometric mean 1; a redraw takes both high or both
        # low a quarter of the time each, so the 95% interval is their ends. All: (1.1^2 x 1)^(1/4) = 1.049,
        # between (1.1/1.2)^(1/2) and (1.1 x 1.2)^(1/2). Expandable / native: 1 and 1.2 in gpt2_200.
        self.assertEqual(blocks["Paired, round by round: the geometric mean of the rounds' ratios [95% bootstrap "
                                "interval] (rounds above 1 / rounds); all: every workload's rounds together"], [
            "  gpt2_200   xsalloc_decay / off 1.000 [0.833-1.200] (1/2); expandable / native 1.095 [1.000-1.200] (1/2)",
            "  resnet     xsalloc_decay / off 1.100 [1.100-1.100] (2/2)",
            "  all        xsalloc_decay / off 1.049 [0.957-1.149] (3/4); expandable / native 1.095 [1.000-1.200] (1/2)"])
        # torch alone: nothing of xsalloc to judge, no block
        blocks = self.blocks(self.table(rows[-4:])[0])
        self.assertFalse([b for b in blocks if b.startswith("Paired")])

    def test_paired_call_by_call(self):
        def r(rnd, alloc, ms, call, w="gpt2_200"):
            return row(rnd, w, alloc, ms, call=call)
        rows = [r(1, "xsalloc_off", 10, "A"), r(1, "xsalloc_decay", 11, "A"),
                r(2, "xsalloc_decay", 9, "A"), r(2, "xsalloc_off", 10, "A"),
                r(3, "xsalloc_off", 10, "A"),  # round 3 split: it counts in B, the call that finished it
                r(3, "xsalloc_decay", 12, "B"), r(4, "xsalloc_decay", 10, "B"), r(4, "xsalloc_off", 12, "B"),
                r(5, "xsalloc_decay", 10, "0"), r(5, "xsalloc_off", 10, "0"),  # named lower, written last: last
                # resnet: decay / off in A, helper / off in B: one call a pair, no line
                r(1, "xsalloc_decay", 11, "A", "resnet"), r(1, "xsalloc_off", 10, "A", "resnet"),
                r(2, "xsalloc_helper", 10, "B", "resnet"), r(2, "xsalloc_off", 10, "B", "resnet")]
        head = ("Paired, call by call: the geometric mean of the rounds' ratios of each walltime.py run call, in the "
                "calls' order (n rounds)")
        # A: 1.1 and 0.9, geometric mean 0.995; B: 1.2 and 10/12, geometric mean 1; the third: 1.
        self.assertEqual(self.blocks(self.table(rows)[0])[head],
                         ["  gpt2_200   xsalloc_decay / off 0.995 (2), 1.000 (2), 1.000 (1)"])
        for x in rows:
            del x["call"]  # runs from before calls were named: no block
        self.assertNotIn(head, self.blocks(self.table(rows)[0]))

    def test_paired_refuses_nothing_and_its_interval_holds_the_mean(self):
        with self.assertRaises(ValueError):
            walltime_stats.paired([[], []])
        ratios = [1.01, 0.97, 1.08, 1.02, 0.99, 1.05, 1.03, 0.96]
        g, low, high, above, n = walltime_stats.paired([ratios])
        self.assertAlmostEqual(g, statistics.geometric_mean(ratios))
        self.assertTrue(min(ratios) < low < g < high < max(ratios), (low, g, high))
        self.assertEqual((above, n), (5, 8))
        self.assertEqual(walltime_stats.paired([ratios]), walltime_stats.paired([ratios]))  # seeded: one reading

    def test_xsallocs_time_on_the_allocating_threads(self):
        def steps(driver_us, wait_us=None, helper_us=0):
            d = {"driver_us": driver_us, "helper_driver_us": helper_us}
            if wait_us is not None:
                d["device_lock_wait_us"] = wait_us
            return {"steps": 100, "xsalloc_steps": d}
        rows = [row(1, "resnet", "native", 10), row(1, "resnet", "expandable", 11),
                row(1, "resnet", "xsalloc_off", 10, **steps(30000)), row(2, "resnet", "xsalloc_off", 12, **steps(50000)),
                row(3, "resnet", "xsalloc_off", 14, **steps(40000)),
                row(1, "resnet", "xsalloc_decay", 11, **steps(45000, 5000, 20000)),
                row(2, "resnet", "xsalloc_decay", 12, **steps(60000, 10000, 40000),
                    # after 25 steps of warm-up, 75 of 0.2 ms and 1 of 5 ms: median 0.2 ms
                    step_driver_us=[9000] * 25 + [200] * 74 + [5000]),
                # step times that do not cover every step: left out of the after-warm-up figure
                row(4, "resnet", "xsalloc_decay", 12, **steps(50000, 10000, 30000), step_driver_us=[1, 2]),
                # a run from before driver calls were timed: left out
                row(3, "resnet", "xsalloc_decay", 30, steps=100, xsalloc_steps={"mem_map": 4}),
                row(1, "moe", "xsalloc_off", 20)]
        blocks = self.blocks(self.table(rows)[0])
        # off: 0.3, 0.5, 0.4 ms a step; decay: (45 + 5) / 100 = 0.5, (60 + 10) / 100 = 0.7 and (50 + 10) / 100
        # = 0.6, helper 0.2, 0.4 and 0.3; decay's extra: (0.6 - 0.4) / off's median step 12 ms = 1.67%.
        self.assertEqual(blocks["xsalloc on the allocating threads: driver calls and lock waits, ms a step over all "
                                "steps, median [min-max] (n runs); after warm-up: the driver calls' median step, "
                                "median of the runs; over off: the extra in % of off's median step"], [
            "  resnet     xsalloc_decay 0.600 [0.500-0.700] (3), after warm-up 0.200 (1), helper 0.300; "
            "xsalloc_off 0.400 [0.300-0.500] (3) (over off: xsalloc_decay +1.67%)"])

    def test_only_failed_runs(self):
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "r.jsonl")
            write_rows(path, [failed(1, "moe", "xsalloc", "no result")])
            printed = io.StringIO()
            with contextlib.redirect_stdout(printed):
                walltime.table(path)
        self.assertEqual(printed.getvalue(), "walltime: no results\n\n1 failed runs, e.g. moe xsalloc: no result\n")


if __name__ == "__main__":
    unittest.main()
