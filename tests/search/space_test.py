"""The search space's grammar (flags and TOML), its checks naming the key, and its grid (label search)."""
import sys
import tomllib
import unittest

sys.path.insert(0, sys.argv.pop(1))
from frugal_search import space as sp  # noqa: E402
from frugal_search.errors import SearchError  # noqa: E402


class Space(unittest.TestCase):
    def test_flags(self):
        lr = sp.parse_flag("optimizer.lr=1e-4:1e-1:log")
        self.assertTrue(lr.log and not lr.integer and lr.low == 1e-4)
        width = sp.parse_flag("model.hidden=32:256")
        self.assertTrue(width.integer)
        self.assertEqual(sp.parse_flag("model.variant=resnet18,resnet34").choices, ("resnet18", "resnet34"))
        depth = sp.parse_flag("model.depth=2,3 if model.variant=resnet18")
        self.assertEqual(depth.when, (("model.variant", ("resnet18",)),))

    def test_errors_name_the_key(self):
        for flag, words in [("optimizer.lr=1e-4:abc", "optimizer.lr"), ("model.x=5:1", "empty"), ("model.x=0:1:log", "lower bound > 0"),
                            ("model.x=a,a", "twice"), ("lr=1:2", "not a configuration key"), ("model.x=1:2:cubic", "unknown range option"),
                            ("model.x", "not KEY=SPEC"), ("model.x=1:2:step=0.5", "integer step")]:
            with self.assertRaises(SearchError) as e:
                sp.parse_flag(flag)
            self.assertIn(words, str(e.exception), flag)
        with self.assertRaises(SearchError) as e:
            sp.build([sp.parse_flag("model.depth=2,3 if model.variant=resnet18")])
        self.assertIn("model.variant, which must be a key of the space given before it", str(e.exception))
        with self.assertRaises(SearchError) as e:
            sp.build([sp.parse_flag("model.variant=a,b"), sp.parse_flag("model.depth=2,3 if model.variant=c")])
        self.assertIn("never takes c", str(e.exception))
        with self.assertRaises(SearchError):
            sp.build([sp.parse_flag("model.a=1:2"), sp.parse_flag("model.a=3:4")])

    def test_toml_and_grid(self):
        table = tomllib.loads('''
[space]
"model.variant" = ["small", "large"]
"optimizer.lr" = "1e-3:1e-1:log"
"model.depth" = { values = [2, 3], when = { "model.variant" = ["large"] } }
"model.width" = { range = [8, 64], log = true }
''')["space"]
        space = sp.build(sp.parse_table(table, "s.toml"))
        grid = space.grid(points=3)
        # small: 3 lr x 3 width; large: 3 lr x 2 depth x 3 width
        self.assertEqual(len(grid), 9 + 18)
        self.assertTrue(all("model.depth" not in g for g in grid if g["model.variant"] == "small"))
        self.assertEqual(sorted({g["optimizer.lr"] for g in grid}), ["0.001", "0.01", "0.1"])
        self.assertEqual(sorted({g["model.width"] for g in grid}, key=int), ["8", "23", "64"])
        with self.assertRaises(SearchError) as e:
            sp.parse_table({"model.x": {"range": [1], "log": True}}, "s.toml")
        self.assertIn("s.toml: space key model.x: 'range' must be [LOW, HIGH]", str(e.exception))
        with self.assertRaises(SearchError):
            sp.parse_table({"model.x": 3}, "s.toml")


if __name__ == "__main__":
    unittest.main(argv=sys.argv[:1])
