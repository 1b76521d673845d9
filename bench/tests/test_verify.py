#!/usr/bin/env python3
"""The verification pass (bench/verify.c) passes under glibc and FAILs
under an allocator whose 1-8 KiB blocks overlap the next block by 32 bytes
(overlap_shim.c), which the workloads' sparse stamps let through.

    test_verify.py LAUNCH VERIFY OVERLAP_SHIM"""
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

LAUNCH, VERIFY, SHIM = sys.argv[1:4] if len(sys.argv) >= 4 else (None, None, None)


def launch(preload):
    with tempfile.NamedTemporaryFile(prefix="hakmem-test-verify-") as report:
        run = subprocess.run([LAUNCH, report.name, preload, VERIFY, "--blocks=3000"],
                             capture_output=True, text=True, timeout=120)
        return run, Path(report.name).read_text()


class VerificationPass(unittest.TestCase):
    def test_passes_under_glibc(self):
        run, report = launch("")
        self.assertEqual(run.returncode, 0, run.stderr)
        self.assertIn("exit=0", report)
        self.assertIn("verified_blocks=3000", run.stdout)

    def test_overlapping_blocks_fail(self):
        run, report = launch(SHIM)
        self.assertEqual(run.returncode, 2, f"stdout: {run.stdout}\nstderr: {run.stderr}")
        self.assertIn("exit=2", report)
        self.assertIn("overlaps another block", run.stderr)


if __name__ == "__main__":
    if LAUNCH is None:
        sys.exit(__doc__)
    unittest.main(argv=sys.argv[:1])
