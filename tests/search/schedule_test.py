"""Successive halving's arithmetic against worked examples (label search): rungs, Hyperband's
brackets and trial counts (Li et al., JMLR 2018, Table 1: R = 81, eta = 3), the budget of
synchronous halving against a grid, and ASHA's promotion and stopping rules."""
import sys
import unittest

sys.path.insert(0, sys.argv.pop(1))
from frugal_search import schedule  # noqa: E402


class Rungs(unittest.TestCase):
    def test_levels(self):
        r = schedule.Rungs(1, 81, 3)
        self.assertEqual(r.levels(0), [1, 3, 9, 27, 81])
        self.assertEqual(r.levels(2), [9, 27, 81])
        self.assertEqual(r.max_bracket, 4)
        self.assertEqual(schedule.Rungs(2, 50, 3).levels(0), [2, 6, 18, 50])  # the last rung is the full budget
        self.assertEqual(r.next_level(3), 9)
        self.assertIsNone(r.next_level(81))
        with self.assertRaises(ValueError):
            schedule.Rungs(5, 4, 3)

    def test_hyperband_table(self):
        # Li et al. Table 1: s = 4..0 -> n = 81, 34, 15, 8, 5 trials starting at r = 1, 3, 9, 27, 81.
        r = schedule.Rungs(1, 81, 3)
        self.assertEqual(schedule.hyperband_trials(r), [81, 34, 15, 8, 5])
        self.assertEqual([r.levels(b)[0] for b in range(5)], [1, 3, 9, 27, 81])
        counts = [0] * 5
        for i in range(143):  # one full Hyperband iteration
            counts[schedule.bracket_for(i, r, True)] += 1
        self.assertEqual(counts, [81, 34, 15, 8, 5])
        self.assertEqual({schedule.bracket_for(i, r, False) for i in range(20)}, {0})

    def test_budget_against_a_grid(self):
        # 27 configurations, rungs 1, 3, 9, 27: 27x1 + 9x2 + 3x6 + 1x18 = 81 units against the grid's 729: 1/9.
        r = schedule.Rungs(1, 27, 3)
        self.assertEqual(schedule.synchronous_halving_cost(27, r), 81)
        self.assertEqual(schedule.grid_cost(27, 27), 729)
        self.assertEqual(schedule.synchronous_halving_cost(81, schedule.Rungs(1, 81, 3)), 297)

    def test_promotion_and_stopping(self):
        values = [0.9, 0.5, 0.7, 0.6, 0.8, 0.4]  # losses at a rung: floor(6/3) = 2 go on
        promoted = [v for v in values if schedule.promotable(v, values, 3, minimize=True)]
        self.assertEqual(sorted(promoted), [0.4, 0.5])
        self.assertFalse(schedule.promotable(0.1, [0.1, 0.2], 3, minimize=True))  # fewer than eta: nobody yet
        self.assertTrue(schedule.promotable(0.9, [0.9, 0.5, 0.7], 3, minimize=False))  # accuracies: the highest
        self.assertTrue(schedule.continues(5.0, [5.0, 1.0], 3, minimize=True))  # too few to judge: on
        self.assertFalse(schedule.continues(5.0, [5.0, 1.0, 2.0], 3, minimize=True))
        self.assertTrue(schedule.continues(1.0, [5.0, 1.0, 2.0], 3, minimize=True))


class CostAware(unittest.TestCase):
    def test_pareto_rank_promotes_the_cheap_and_the_accurate(self):
        # (accuracy to maximise, cost to minimise) at a rung: the front is the accurate and the cheap.
        points = [[0.95, 9.0], [0.80, 1.0], [0.90, 5.0], [0.85, 6.0], [0.70, 8.0], [0.60, 2.0]]
        directions = [False, True]
        self.assertEqual(schedule.pareto_ranks([(-a, c) for a, c in points]), [0, 0, 0, 1, 2, 1])
        keep = [p for p in points if schedule.promotable(p, points, 3, directions, keep=0.5)]
        self.assertEqual(keep, [[0.95, 9.0], [0.80, 1.0], [0.90, 5.0]])  # the first front: half of 6
        self.assertEqual(schedule.top_count(27, 3, keep=0.2), 5)
        self.assertTrue(schedule.continues([0.6, 2.0], points, 3, directions, keep=0.84))  # 5 of 6: the second front too
        self.assertFalse(schedule.continues([0.7, 8.0], points, 3, directions, keep=0.84))


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
