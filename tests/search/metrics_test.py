"""What the driver reads back from a trial's metrics.jsonl (label search): rates are the median of
the log windows, so one stalled window does not reorder configurations of equal speed; peaks are
maxima; a damaged line is named, a line cut by a kill at the end is not."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, sys.argv.pop(1))
from frugal_search.program import read_metrics  # noqa: E402


def write(folder, records, tail=""):
    with open(os.path.join(folder, "metrics.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")
        f.write(tail)


class Metrics(unittest.TestCase):
    def test_a_stalled_window_does_not_move_the_rate(self):
        with tempfile.TemporaryDirectory() as d:
            rates = [1000.0, 1010.0, 990.0, 100.0, 1005.0]  # one window stalled 10x
            write(d, [{"event": "train", "step": i, "samples_per_s": r, "peak_memory_mb": 10.0 + i} for i, r in enumerate(rates)])
            m = read_metrics(d)
            self.assertEqual(m.summary("samples_per_s"), 1000.0)  # the mean would say 821
            self.assertEqual(m.summary("peak_memory_mb"), 14.0)
            self.assertIsNone(m.summary("mfu"))

    def test_damaged_lines(self):
        with tempfile.TemporaryDirectory() as d:
            write(d, [{"event": "validation", "epoch": 0, "accuracy": 0.5}], tail='not json\n[1, 2]\n{"event": "valid')
            m = read_metrics(d)
            self.assertEqual(m.value_at("accuracy", "epochs", 1), 0.5)
            self.assertEqual(len(m.problems), 2, m.problems)  # the cut last line is not a problem
            self.assertIn("metrics.jsonl:2: not JSON", m.problems[0])
            self.assertIn("metrics.jsonl:3: not a JSON object", m.problems[1])


if __name__ == "__main__":
    unittest.main()
