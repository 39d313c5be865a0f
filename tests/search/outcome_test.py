"""How the driver reads a rung's end (label search): a run stopped by the worker's SIGTERM, at any
moment of its life, is resumable, never a failed trial; a run that fails on its own is classed."""
import signal
import sys
import unittest

sys.path.insert(0, sys.argv.pop(1))
from frugal_search.program import RungRun, failure_of  # noqa: E402


class StoppedMidRung(unittest.TestCase):
    def test_every_way_a_trial_stops_on_sigterm_resumes(self):
        # Killed before it caught signals; exit 143 from a stage that ends at once; exit 0 after a
        # checkpoint or before training started (no value at the rung's end in either case).
        for code in (-signal.SIGTERM, 128 + signal.SIGTERM):
            self.assertTrue(RungRun(code, 1.0, "").stopped_mid_rung(reached_target=False), code)
            self.assertTrue(RungRun(code, 1.0, "").stopped_mid_rung(reached_target=True), code)
        self.assertTrue(RungRun(0, 1.0, "frugal_minimal: SIGTERM while starting the fit: stopped before training started").stopped_mid_rung(False))

    def test_a_rung_that_ended_or_failed_on_its_own_is_not_a_stop(self):
        self.assertFalse(RungRun(0, 1.0, "").stopped_mid_rung(reached_target=True))  # it paused at its rung
        for code in (1, 2, -signal.SIGKILL, -signal.SIGSEGV, 128 + signal.SIGKILL):
            self.assertFalse(RungRun(code, 1.0, "").stopped_mid_rung(reached_target=False), code)

    def test_failures_are_classed(self):
        self.assertEqual(failure_of(RungRun(-signal.SIGKILL, 1.0, "step 3"))[0], "killed")
        self.assertEqual(failure_of(RungRun(2, 1.0, "prog: trainer.lr: not a number"))[0], "config")
        self.assertEqual(failure_of(RungRun(1, 1.0, "CUDA out of memory. Tried to allocate"))[0], "oom")
        self.assertEqual(failure_of(RungRun(1, 1.0, "error: the loss is nan at step 4"))[0], "nonfinite")
        self.assertEqual(failure_of(RungRun(1, 1.0, "boom"))[1], "exit 1: boom")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
