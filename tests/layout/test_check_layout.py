"""scripts/check-layout.py catches each kind of layout violation, and passes a clean tree.

A checker that always says "no violations" would keep layout.rules_hold green forever, so
each rule gets a tiny planted tree that breaks it, and the test asserts the exit status and
that the output names the offending file and the rule.
"""
import os
import subprocess
import sys
import tempfile
import unittest

CHECKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                       "check-layout.py")
LAYERED = ["common", "model", "allreduce", "server", "launch", "strategies", "worker",
           "experiments", "bench", "teach", "apps"]


def run_checker(files, no_readme=()):
    """Write `files` ({path: text}) under a fresh root, with a README.md in each layered folder
    the tree uses (except those in no_readme), run the checker; return (exit status, stdout)."""
    with tempfile.TemporaryDirectory() as root:
        for path, text in files.items():
            os.makedirs(os.path.join(root, os.path.dirname(path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        for folder in LAYERED:
            if os.path.isdir(os.path.join(root, folder)) and folder not in no_readme:
                with open(os.path.join(root, folder, "README.md"), "w") as f:
                    f.write(f"# {folder}/\n")
        done = subprocess.run([sys.executable, CHECKER, "--root", root], capture_output=True,
                              text=True, timeout=60)
        return done.returncode, done.stdout + done.stderr


def inc(*targets):
    """Source text including each target (quoted), one per line after a comment line."""
    return "// planted\n" + "".join(f'#include "{t}"\n' for t in targets)


# A clean chain through every level the layout uses most, top to bottom.
CLEAN = {
    "apps/main.cpp": inc("experiments/run.h"),
    "experiments/run.h": inc("worker/loop.h", "common/error.h"),
    "worker/loop.h": inc("strategies/strategy.h"),
    "strategies/strategy.h": inc("server/shard.h", "allreduce/ring.h", "launch/spawn.h",
                                 "model/mlp.h"),
    "server/shard.h": inc("model/optimizer/sgd.h", "common/error.h"),
    "server/shard.cpp": inc("server/shard.h"),
    "allreduce/ring.h": inc("model/mlp.h"),
    "launch/spawn.h": inc("common/error.h"),
    "model/mlp.h": inc("model/optimizer/sgd.h"),
    "model/optimizer/sgd.h": inc("common/error.h"),
    "common/error.h": "#pragma once\n",
    "common/error.cpp": inc("common/error.h"),
}


class CheckLayoutTest(unittest.TestCase):
    def assert_fails(self, files, *expected, no_readme=()):
        status, out = run_checker(files, no_readme)
        self.assertEqual(status, 1, out)
        for text in expected:
            self.assertIn(text, out)
        self.assertIn("violation(s)", out.splitlines()[-1])
        return out

    def assert_passes(self, files):
        status, out = run_checker(files)
        self.assertEqual(status, 0, out)
        self.assertIn("no violations", out)
        return out

    def test_clean_tree_across_levels_passes(self):
        out = self.assert_passes(CLEAN)
        self.assertIn(f"{len(CLEAN)} files", out)

    def test_upward_include_fails(self):
        out = self.assert_fails({"common/a.cpp": inc("common/c.h", "model/b.h"),
                                 "common/c.h": "", "model/b.h": ""},
                                "common/a.cpp:3: includes model/b.h",
                                "common/ is the bottom layer")
        self.assertIn("check-layout: 1 violation(s)", out)

    def test_same_level_include_fails(self):
        self.assert_fails({"server/x.cpp": inc("allreduce/y.h"), "allreduce/y.h": ""},
                          "server/x.cpp:2: includes allreduce/y.h",
                          "server/ may include only common/, model/optimizer/")
        self.assert_fails({"bench/x.cpp": inc("teach/y.h"), "teach/y.h": ""},
                          "bench/x.cpp:2: includes teach/y.h", "bench/ may include only")

    def test_server_may_include_the_optimizer_but_not_the_model(self):
        out = self.assert_fails({"server/shard.cpp": inc("model/optimizer/sgd.h", "model/mlp.h"),
                                 "model/optimizer/sgd.h": "", "model/mlp.h": ""},
                                "server/shard.cpp:3: includes model/mlp.h",
                                "server/ may include only common/, model/optimizer/")
        self.assertNotIn("sgd.h", out)
        self.assertIn("check-layout: 1 violation(s)", out)
        self.assert_passes({"server/shard.cpp": inc("model/optimizer/sgd.h"),
                            "model/optimizer/sgd.h": ""})

    def test_the_optimizer_may_not_include_the_rest_of_model(self):
        self.assert_fails({"model/optimizer/sgd.cpp": inc("common/e.h", "model/mlp.h"),
                           "common/e.h": "", "model/mlp.h": ""},
                          "model/optimizer/sgd.cpp:3: includes model/mlp.h",
                          "model/optimizer/ may include only common/")
        self.assert_passes({"model/optimizer/sgd.cpp": inc("common/e.h", "model/optimizer/o.h"),
                            "model/optimizer/o.h": "", "common/e.h": "",
                            "model/mlp.cpp": inc("model/optimizer/o.h")})

    def test_launch_may_include_only_common(self):
        self.assert_fails({"launch/spawn.cpp": inc("common/e.h", "model/x.h"),
                           "common/e.h": "", "model/x.h": ""},
                          "launch/spawn.cpp:3: includes model/x.h",
                          "launch/ may include only common/")

    def test_component_cycle_in_one_folder_fails(self):
        out = self.assert_fails({"allreduce/a.h": inc("allreduce/b.h"),
                                 "allreduce/b.h": "",
                                 "allreduce/b.cpp": inc("allreduce/b.h", "allreduce/a.h")},
                                "component cycle",
                                "allreduce/a -> allreduce/b -> allreduce/a",
                                "allreduce/a.h:2", "allreduce/b.cpp:3")
        self.assertIn("check-layout: 1 violation(s)", out)  # one cycle, reported once

    def test_cycle_in_tests_fails_and_deep_chains_do_not_recurse(self):
        # 3000 components in one chain closed into a loop: a recursive search would overflow.
        n = 3000
        files = {f"tests/c{i}.h": inc(f"tests/c{(i + 1) % n}.h") for i in range(n)}
        self.assert_fails(files, "component cycle: tests/c0 -> tests/c1 -> tests/c2 ->",
                          "tests/c2999 -> tests/c0")

    def test_a_file_and_its_own_header_are_no_cycle(self):
        self.assert_passes({"common/a.h": "", "common/a.cpp": inc("common/a.h"),
                            "common/a.cu": inc("common/a.h")})

    def test_include_of_missing_project_file_fails(self):
        self.assert_fails({"tests/t.cpp": inc("common/gone.h"), "common/e.h": ""},
                          "tests/t.cpp:2: includes common/gone.h, which does not exist")

    def test_missing_readme_fails_naming_the_folder(self):
        self.assert_fails({"common/e.h": "", "model/m.h": inc("common/e.h")},
                          "common/: no README.md", no_readme=("common",))

    def test_system_and_angle_bracket_includes_are_ignored(self):
        self.assert_passes({"common/e.cpp": inc("doctest/doctest.h", "nccl.h")
                            + "#include <model/mlp.h>\n#include <vector>\n"})

    def test_tests_may_include_anything(self):
        self.assert_passes({"tests/t.cpp": inc("apps/cli.h", "common/e.h"),
                            "apps/cli.h": "", "common/e.h": ""})

    def test_build_folders_are_skipped(self):
        self.assert_passes({"build-asan/gen.cpp": inc("common/gone.h"), "common/e.h": ""})

    def test_root_that_is_not_a_directory_exits_2(self):
        done = subprocess.run([sys.executable, CHECKER, "--root", "/nonexistent/layout-root"],
                              capture_output=True, text=True, timeout=60)
        self.assertEqual(done.returncode, 2)
        self.assertIn("not a directory", done.stderr)


if __name__ == "__main__":
    unittest.main()
