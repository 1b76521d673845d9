#!/usr/bin/env python3
"""The runner's own conditions (bench/run.py and its helpers), without any
peer allocator or built program: helper processes such as the redis load
client get the scrubbed environment, not the caller's LD_PRELOAD or
allocator tuning; the commit is taken once for the build measured, and a
library older than its sources is noticed."""
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path
from unittest import mock

BENCH = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BENCH))
import benchlib  # noqa: E402
import redisload  # noqa: E402
import run  # noqa: E402

# What a caller may have set; none of it may reach a helper.
CALLER = {"LD_PRELOAD": "/nonexistent/libcaller.so", "MALLOC_CONF": "narenas:1", "HAKMEM_VERBOSE": "1",
          "MIMALLOC_SHOW_STATS": "1", "GLIBC_TUNABLES": "glibc.malloc.tcache_count=0",
          "BENCH_TEST_KEEP": "kept"}
DUMP_ENV = [sys.executable, "-c", "import json, os; print(json.dumps(dict(os.environ)))"]


class HelpersGetTheScrubbedEnvironment(unittest.TestCase):
    def assertScrubbed(self, env):
        leaked = sorted(k for k in env if benchlib.scrubbed(k))
        self.assertEqual(leaked, [], f"reached the helper: {leaked}")
        self.assertEqual(env.get("BENCH_TEST_KEEP"), "kept")  # other variables stay

    def test_run_helper(self):
        with mock.patch.dict(os.environ, CALLER):
            out = benchlib.run_helper(DUMP_ENV, capture_output=True, text=True, check=True).stdout
        self.assertScrubbed(json.loads(out))

    def test_redis_benchmark(self):
        """redisload starts redis-benchmark (the load client whose numbers
        are reported) with the scrubbed environment. The server is faked;
        a fake redis-benchmark on PATH records its environment."""
        class FakeServer:
            def __init__(self, *args, **kwargs):
                self.proc = mock.Mock(**{"poll.return_value": None})

            def stop(self):
                self.proc.poll.return_value = 0

            def wait(self, timeout):
                return benchlib.Outcome("ok", 0, 1.0, 4096, {}, "")

        with tempfile.TemporaryDirectory() as d:
            dump = Path(d) / "env.json"
            fake = Path(d) / "redis-benchmark"
            fake.write_text(f"#!{sys.executable}\nimport json, os\n"
                            f"open({str(dump)!r}, 'w').write(json.dumps(dict(os.environ)))\n"
                            "print('\"test\",\"rps\"')\nprint('\"SET\",\"1000.00\"')\n")
            fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
            env = dict(CALLER, PATH=f"{d}{os.pathsep}{os.environ.get('PATH', '')}")
            with mock.patch.dict(os.environ, env), mock.patch.object(redisload, "Launched", FakeServer), \
                    mock.patch.object(redisload, "wait_ready", return_value=True), \
                    mock.patch.object(redisload, "verify", return_value=None):
                outcome = redisload.run("launch", "", 100, timeout=30)
            self.assertEqual(outcome.status, "ok", outcome.stderr)
            self.assertEqual(outcome.metrics.get("requests_per_s"), 1000.0)
            self.assertScrubbed(json.loads(dump.read_text()))

    def test_no_process_started_around_benchlib(self):
        """The runner's modules start processes only through benchlib
        (Launched for what is measured, run_helper for the rest), both of
        which scrub the environment; sqlload.py only writes the script that
        run.py hands to Launched."""
        for name in ("run.py", "redisload.py", "sqlload.py", "compare.py", "svgchart.py"):
            text = (BENCH / name).read_text()
            for call in ("subprocess.run(", "subprocess.Popen(", "check_output(", "check_call(",
                         "os.system(", "os.exec", "os.spawn", "os.popen("):
                self.assertNotIn(call, text, f"{name} starts a process with {call}")


class BuildMeasured(unittest.TestCase):
    def make_tree(self, d, lib_age, source_age):
        """A source tree with src/page.c and a build directory b/ whose
        libhakmem.so is lib_age seconds old and the source source_age."""
        src, build = Path(d) / "tree", Path(d) / "tree" / "b"
        (src / "src").mkdir(parents=True)
        build.mkdir()
        (src / "CMakeLists.txt").write_text("project(hakmem)\n")
        (src / "src" / "page.c").write_text("int x;\n")
        (build / "libhakmem.so.0.1.0").write_text("")
        (build / "libhakmem.so").symlink_to("libhakmem.so.0.1.0")
        (build / "CMakeCache.txt").write_text(f"CMAKE_BUILD_TYPE:STRING=Release\n"
                                              f"CMAKE_HOME_DIRECTORY:INTERNAL={src}\n")
        now = 1_800_000_000
        os.utime(src / "CMakeLists.txt", (now - 1000, now - 1000))
        os.utime(src / "src" / "page.c", (now - source_age, now - source_age))
        os.utime(build / "libhakmem.so.0.1.0", (now - lib_age, now - lib_age))
        return src, build

    def test_fresh_build(self):
        with tempfile.TemporaryDirectory() as d:
            src, build = self.make_tree(d, lib_age=10, source_age=100)
            self.assertEqual(benchlib.source_dir(build), src)
            self.assertEqual(benchlib.stale_build(build, src), (False, "src/page.c"))

    def test_library_older_than_a_source_file(self):
        with tempfile.TemporaryDirectory() as d:
            src, build = self.make_tree(d, lib_age=100, source_age=10)
            self.assertEqual(benchlib.stale_build(build, src), (True, "src/page.c"))

    def test_no_library(self):
        with tempfile.TemporaryDirectory() as d:
            src, build = self.make_tree(d, lib_age=100, source_age=10)
            (build / "libhakmem.so").unlink()
            self.assertEqual(benchlib.stale_build(build, src), (False, None))

    def test_source_dir_without_cache(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(benchlib.source_dir(d), benchlib.ROOT)

    def test_hakmem_version_is_the_commit_recorded(self):
        with tempfile.TemporaryDirectory() as d:
            _, build = self.make_tree(d, lib_age=10, source_age=100)
            found = benchlib.find_allocators(build, note=lambda s: None, hakmem_version="abc1234-dirty")
        self.assertEqual(next(a.version for a in found if a.name == "hakmem"), "abc1234-dirty")

    def test_secure_variant_only_when_asked(self):
        # hakmem-secure follows hakmem when asked for, and is no peer.
        with tempfile.TemporaryDirectory() as d:
            _, build = self.make_tree(d, lib_age=10, source_age=100)
            (build / "libhakmem-secure.so").write_text("")
            plain = [a.name for a in benchlib.find_allocators(build, note=lambda s: None)]
            both = [a.name for a in benchlib.find_allocators(build, note=lambda s: None, secure=True)]
        self.assertNotIn(benchlib.SECURE, plain)
        self.assertEqual(both[both.index("hakmem") + 1], benchlib.SECURE)
        med = {name: {"failed": 0, "time_s": t, "rss_kb": 100, "heap_rss_kb": 50}
               for name, t in (("glibc", 1.0), ("hakmem", 2.0), (benchlib.SECURE, 3.0))}
        self.assertEqual(list(run.ratios_to_peers(med, ())), ["glibc"])
        self.assertEqual(run.best_peer(med)["time"]["peer"], "glibc")
        self.assertEqual(run.secure_ratios(med), {"time": 1.5, "rss": 1.0, "heap_rss": 1.0})

    def test_best_peer_marks_time_ratios_within_the_spread(self):
        def med(hak_time, hak_spread, peer_spread):
            return {"hakmem": {"failed": 0, "time_s": hak_time, "spread": hak_spread, "rss_kb": 100, "heap_rss_kb": 50},
                    "glibc": {"failed": 0, "time_s": 1.0, "spread": peer_spread, "rss_kb": 100, "heap_rss_kb": 50}}
        best = run.best_peer(med(1.10, 0.04, 0.15))["time"]
        self.assertEqual((best["peer"], best["spread"], best["noise"]), ("glibc", 0.15, True))
        self.assertFalse(run.best_peer(med(1.10, 0.04, 0.06))["time"]["noise"])
        self.assertFalse(run.best_peer(med(0.80, 0.10, 0.10))["time"]["noise"])   # a lead beyond the spread
        self.assertNotIn("noise", run.best_peer(med(1.10, 0.04, 0.06))["rss"])

    def test_run_py_takes_the_commit_once(self):
        # At the start, for the result's commit, hakmem's version and the
        # conditions alike (it used to take it again at the end).
        text = (BENCH / "run.py").read_text()
        self.assertEqual(text.count("git_commit("), 1)
        self.assertIn("hakmem_version=commit", text)


class WorkloadSizes(unittest.TestCase):
    def test_bigchurn_is_repeated_churn(self):
        # 20 live blocks (bigchurn.c's default --slots): the full run
        # replaces each ~20 times, the quick one ~3 times, so the churn and
        # not the first fill of the slots is what is measured.
        w = next(x for x in run.WORKLOADS if x.name == "bigchurn")
        def ops(argv):
            self.assertFalse(any(a.startswith("--slots=") for a in argv))
            return int(next(a for a in argv if a.startswith("--ops=")).split("=")[1])
        self.assertGreaterEqual(ops(w.full) / 20, 20)
        self.assertGreaterEqual(ops(w.quick) / 20, 3)


def links_libstdcxx(path):
    """Whether a program loads libstdc++ at start, itself or through a
    library it needs (redis-server: through libjemalloc); None if that
    cannot be told here (no such program, or no ldd)."""
    if path is None or shutil.which("ldd") is None:
        return None
    out = subprocess.run(["ldd", path], capture_output=True, text=True).stdout
    return "libstdc++" in out


class WorkloadFootprints(unittest.TestCase):
    """A program that links libstdc++ has it mapped under every allocator,
    a C program only under the allocators that link it (jemalloc,
    tcmalloc): each workload's heap RSS is taken against the do-nothing
    program of its own kind (run.FOOTPRINT_PROGRAMS)."""

    def program_is_cxx(self, w):
        if w.redis:
            return links_libstdcxx(shutil.which("redis-server"))
        if w.sqlite:
            return links_libstdcxx(shutil.which("sqlite3"))
        program = w.full[0]
        if program.endswith(".py"):
            return links_libstdcxx(sys.executable)
        return (BENCH / f"{program}.cc").exists()

    def test_each_workload_against_its_kind(self):
        for w in run.WORKLOADS:
            with self.subTest(workload=w.name):
                self.assertIn(w.footprint, run.FOOTPRINT_PROGRAMS)
                cxx = self.program_is_cxx(w)
                if cxx is not None:
                    self.assertEqual(w.footprint, "c++" if cxx else "c")

    def test_the_do_nothing_programs_are_of_their_kind(self):
        self.assertFalse((BENCH / f"{run.FOOTPRINT_PROGRAMS['c']}.cc").exists())
        self.assertTrue((BENCH / f"{run.FOOTPRINT_PROGRAMS['c']}.c").exists())
        self.assertTrue((BENCH / f"{run.FOOTPRINT_PROGRAMS['c++']}.cc").exists())


if __name__ == "__main__":
    unittest.main()
