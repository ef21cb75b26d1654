"""benchmarks/gpu/colocate_report.py's checks on made-up results (no torch, no GPU).

Design: one passing set of results (xsalloc, tms, none) is built, and each
test plants one fault in a copy of it (memory left while paused, a loss
that differs, slow backup, a slower pause than TMS's, graph memory not
freed, a missing variant) and expects exactly that check to fail.
"""

import contextlib
import copy
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "gpu"))
import colocate_report  # noqa: E402

GiB = 1 << 30


def result(label, saver, graph_paused=0.0, kv_left=0.0, graph_left=0.0):
    """A run's RESULT: 3 cycles; `*_left` MiB stay on the device after a generator pause."""
    phases = [{"cycle": 0, "phase": "generator_paused", "device_mib": 1600 + kv_left + graph_left,
               "live_unpaused_mib": 1600, "reserved_mib": 1600}]
    times = []
    for c in (1, 2, 3):
        phases += [
            {"cycle": c, "phase": "train", "device_mib": 12000, "live_unpaused_mib": 3100, "reserved_mib": 12000},
            {"cycle": c, "phase": "trainer_paused", "device_mib": 1610 + kv_left + graph_left,
             "live_unpaused_mib": 1600, "reserved_mib": 1600},
            {"cycle": c, "phase": "generate", "device_mib": 5000 + graph_paused + graph_left,
             "live_unpaused_mib": 4800, "reserved_mib": 5000},
            {"cycle": c, "phase": "generator_paused", "device_mib": 1600 + kv_left + graph_left,
             "live_unpaused_mib": 1600, "reserved_mib": 1600},
        ]
        if saver == "xsalloc":
            for p in phases[-4:]:
                p["paused_mib"] = {"trainer": 1500, "kv_cache": 3200, "graph": graph_paused}
        times.append({"cycle": c, "resume_trainer_s": 0.06, "pause_trainer_s": 0.5 if c == 1 else 0.07,
                      "backup_bytes": int(1.5 * GiB), "pause_kv_s": 0.004, "resume_kv_s": 0.02,
                      "pause_graph_s": 0.001 if saver == "xsalloc" else None,
                      "resume_graph_s": 0.002 if saver == "xsalloc" else None})
        if saver == "xsalloc":
            report = {"wait_s": 0.001, "copy_s": 0.0, "map_s": 0.0025 + c / 1e4, "copied_bytes": 0, "pages": 1600,
                      "pools": 1}
            times[-1]["steps"] = {"pause_kv_cache": report, "resume_kv_cache": dict(report, wait_s=0.0)}
    return {"label": label, "saver": saver, "device": "NVIDIA H100", "conf": "", "context_mib": 520.0,
            "losses": ["0x1.2p+3", "0x1.1p+3"], "tokens_sha256": "ab" * 32, "pinned_copy_gib_s": 24.0,
            "phases": phases, "times": times}


def passing():
    return {"xsalloc": result("xsalloc", "xsalloc", graph_paused=300.0),
            "tms": result("tms", "tms", graph_left=300.0), "none": result("none", "none", kv_left=3200.0)}


class ColocateReportTest(unittest.TestCase):
    def report(self, runs):
        """(exit status, PASS lines, FAIL lines) of the report over these results, written as files."""
        with tempfile.TemporaryDirectory() as d:
            paths = []
            for name, rec in runs.items():
                paths.append(os.path.join(d, name + ".json"))
                with open(paths[-1], "w") as f:
                    f.write(json.dumps(rec) + "\n")
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                status = colocate_report.main(paths)
        lines = out.getvalue().splitlines()
        return (status, [x for x in lines if x.startswith("PASS")], [x for x in lines if x.startswith("FAIL")],
                out.getvalue())

    def test_a_passing_run(self):
        status, passed, failed, text = self.report(passing())
        self.assertEqual((status, failed), (0, []), text)
        self.assertEqual(len(passed), 8, text)
        self.assertIn("graph memory paused", text)
        self.assertIn("backup GiB/s", text)
        # xsalloc's own steps, the median of cycles 2 and 3 (the map step 2.7 and 2.8 ms)
        self.assertIn("INFO [xsalloc] pause kv_cache steps (ms, median): wait 1.00, copy 0.00, unmap or map 2.75; "
                      "1600 pages in 1 pools; measured 4.00", text)
        self.assertIn("INFO [xsalloc] resume kv_cache steps (ms, median): wait 0.00", text)
        self.assertNotIn("INFO [tms] pause kv_cache steps", text)

    def planted(self, edit, expect):
        runs = copy.deepcopy(passing())
        edit(runs)
        status, _, failed, text = self.report(runs)
        self.assertEqual(status, 1, text)
        self.assertEqual(len(failed), 1, text)
        self.assertIn(expect, failed[0])

    def test_memory_left_while_paused(self):
        def edit(runs):
            runs["xsalloc"]["phases"][2]["device_mib"] += 65  # cycle 1, trainer paused
        self.planted(edit, "device memory while paused")

    def test_repeats_are_samples_of_the_comparison(self):
        def edit(runs):  # one slow pause a cycle, but the cycles' four repeats are fast: the median passes
            for t in runs["xsalloc"]["times"]:
                t.update(pause_kv_s=0.009, pause_kv_more_s=[0.004] * 4, resume_kv_more_s=[0.02] * 4)
        runs = copy.deepcopy(passing())
        edit(runs)
        status, _, failed, text = self.report(runs)
        self.assertEqual((status, failed), (0, []), text)
        for t in runs["xsalloc"]["times"]:
            t["pause_kv_more_s"] = [0.009] * 4  # now most samples are slow
        status, _, failed, text = self.report(runs)
        self.assertEqual(len(failed), 1, text)
        self.assertIn("pause kv (no backup) 0.0090 s", failed[0])

    def test_losses_and_tokens_differ(self):
        self.planted(lambda runs: runs["xsalloc"]["losses"].__setitem__(1, "0x1.1000000000001p+3"), "losses")
        self.planted(lambda runs: runs["xsalloc"].__setitem__("tokens_sha256", "cd" * 32), "tokens")

    def test_slow_backup(self):
        def edit(runs):
            for t in runs["xsalloc"]["times"][1:]:
                t["pause_trainer_s"] = 0.1  # 15 GiB/s against 24
        self.planted(edit, "backup")

    def test_slower_than_tms(self):
        def edit(runs):
            for t in runs["xsalloc"]["times"]:
                t["resume_kv_s"] = 0.03
        self.planted(edit, "resume kv")

    def test_graph_memory_not_freed(self):
        def edit(runs):
            for p in runs["xsalloc"]["phases"]:
                if p["phase"] == "generate":
                    p["device_mib"] -= 200  # freed 200 MiB less than it paused as graph memory
        self.planted(edit, "generator pause frees")

    def test_a_missing_variant(self):
        runs = passing()
        del runs["tms"]
        status, _, failed, text = self.report(runs)
        self.assertEqual(status, 1)
        self.assertEqual(failed, ["FAIL no 'tms' result: the comparisons with torch_memory_saver cannot be made"])


if __name__ == "__main__":
    unittest.main()
