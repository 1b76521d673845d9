#!/usr/bin/env python3
"""The benchmark launcher (bench/launch.c): a run with no preload really
has no LD_PRELOAD, whatever the caller had; a run with one has exactly
that one; allocator tunables are scrubbed from the child's environment
(the same list as benchlib.SCRUBBED); the report carries the child's exit
status, wall time and peak RSS.

    test_launch.py LAUNCH"""
import json
import os
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

BENCH = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCH))
import benchlib  # noqa: E402

LAUNCH = sys.argv[1] if len(sys.argv) > 1 else None
DUMP_ENV = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]
TUNABLES = {"HAKMEM_VERBOSE": "1", "MALLOC_CONF": "narenas:1", "MALLOC_ARENA_MAX": "1",
            "MIMALLOC_SHOW_STATS": "1", "TCMALLOC_RELEASE_RATE": "0", "JEMALLOC_X": "1",
            "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0", "_RJEM_MALLOC_CONF": "x"}


def libc_path():
    """The libc this Python runs on: a library that is harmless to preload."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        path = line.split()[-1]
        if re.search(r"/libc[.-][^/]*so", path):
            return path
    raise RuntimeError("libc not found in /proc/self/maps")


def launch(preload, argv, extra_env):
    with tempfile.NamedTemporaryFile(prefix="hakmem-test-launch-") as report:
        run = subprocess.run([LAUNCH, report.name, preload] + argv, capture_output=True, text=True,
                             env={**os.environ, **extra_env}, timeout=60)
        fields = dict(kv.split("=", 1) for kv in Path(report.name).read_text().split())
        return run, fields


class Launcher(unittest.TestCase):
    def test_no_preload_means_none(self):
        # The caller's preload is a real library, so the launcher itself runs
        # with it; the child must not.
        run, _ = launch("", DUMP_ENV, {"LD_PRELOAD": libc_path()})
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertNotIn("LD_PRELOAD", json.loads(run.stdout))

    def test_preload_is_exactly_the_one_given(self):
        lib = libc_path()
        run, _ = launch(lib, DUMP_ENV, {"LD_PRELOAD": "/nonexistent/caller-preload.so"})
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertEqual(json.loads(run.stdout)["LD_PRELOAD"], lib)

    def test_allocator_tunables_scrubbed(self):
        run, _ = launch("", DUMP_ENV, {**TUNABLES, "HAKMEM_TEST_KEEP_OTHERS": "no", "BENCH_TEST_KEEP": "yes"})
        self.assertEqual(run.returncode, 0, run.stderr)
        env = json.loads(run.stdout)
        for name in list(TUNABLES) + ["HAKMEM_TEST_KEEP_OTHERS"]:
            self.assertNotIn(name, env)
        self.assertEqual(env.get("BENCH_TEST_KEEP"), "yes")  # everything else passes through

    def test_scrub_list_matches_benchlib(self):
        source = (BENCH / "launch.c").read_text()
        array = re.search(r"SCRUBBED\[\] = \{(.*?)\};", source, re.S).group(1)
        self.assertEqual(re.findall(r'"([^"]+)"', array), benchlib.SCRUBBED)
        for name in TUNABLES:
            self.assertTrue(benchlib.scrubbed(name), name)
        self.assertFalse(benchlib.scrubbed("PYTHONMALLOC"))

    def test_report_carries_exit_status_time_and_rss(self):
        run, fields = launch("", ["sh", "-c", "exit 3"], {})
        self.assertEqual(run.returncode, 3)
        self.assertEqual(fields["exit"], "3")
        self.assertGreaterEqual(float(fields["wall_s"]), 0.0)
        self.assertGreater(int(fields["maxrss_kb"]), 0)

    def test_peak_rss_is_the_childs_own(self):
        # 64 MiB touched by the child shows; a do-nothing child stays far below.
        grow = [sys.executable, "-c", "b = bytearray(64 << 20)"]
        _, big = launch("", grow, {})
        _, small = launch("", ["true"], {})
        self.assertGreater(int(big["maxrss_kb"]), 64 * 1024)
        self.assertLess(int(small["maxrss_kb"]), 16 * 1024)


if __name__ == "__main__":
    if LAUNCH is None:
        sys.exit(__doc__)
    unittest.main(argv=sys.argv[:1])
