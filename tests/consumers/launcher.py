#!/usr/bin/env python3
"""Checks the hakmem launcher: launcher.py INSTALLED_LAUNCHER BUILD_LAUNCHER VERSION

Both launchers find their library (the installed one under its prefix, the
build tree's beside itself); the options become HAKMEM_* variables and the
library is put ahead of an existing LD_PRELOAD; --secure preloads the
hardened variant; bad options fail with a message; and a Python program run with --stats=json works and leaves one
JSON report on stderr whose counts show the program's allocations."""
import json
import os
import shutil
import subprocess
import sys
import tempfile

INSTALLED, BUILD, VERSION = sys.argv[1:4]
# pyenv and friends install a shell shim: launch the real interpreter.
PYTHON = os.path.realpath(sys.executable)
ENV = {k: v for k, v in os.environ.items() if not k.startswith("HAKMEM_") and k != "LD_PRELOAD"}


def check(cond, message):
    if not cond:
        sys.exit(f"FAIL: {message}")


def run(*args, env=None, expect=0):
    proc = subprocess.run(list(args), env=dict(ENV, **(env or {})), capture_output=True, text=True, timeout=60)
    check(proc.returncode == expect,
          f"{' '.join(args)} exited {proc.returncode}, expected {expect}\n{proc.stdout}\n{proc.stderr}")
    return proc


def library_of(launcher, *options):
    out = run(launcher, *options, "--version").stdout.splitlines()
    check(out[0] == f"hakmem {VERSION}", f"{launcher} --version: {out}")
    check(out[1].startswith("library: "), f"{launcher} --version: {out}")
    library = out[1][len("library: "):]
    check(os.path.isfile(library), f"{launcher}: library {library} does not exist")
    return library


installed_lib = library_of(INSTALLED)
prefix = os.path.dirname(os.path.dirname(os.path.realpath(INSTALLED)))
check(os.path.realpath(installed_lib).startswith(prefix + os.sep),
      f"installed launcher uses {installed_lib}, not the library under {prefix}")
build_lib = library_of(BUILD)
check(os.path.dirname(build_lib) == os.path.dirname(os.path.realpath(BUILD)),
      f"build-tree launcher uses {build_lib}, not the library beside it")
secure_lib = library_of(INSTALLED, "--secure")
check(os.path.basename(secure_lib) == "libhakmem-secure.so." + VERSION.split(".")[0]
      and os.path.dirname(secure_lib) == os.path.dirname(installed_lib),
      f"--secure uses {secure_lib}, not libhakmem-secure beside {installed_lib}")
print(f"ok   --version; libraries: {installed_lib}, {build_lib}, {secure_lib}")

check("usage: hakmem" in run(INSTALLED, "--help").stdout, "--help prints no usage")
for args, message in [(["--bogus", "true"], "unknown option '--bogus'"),
                      (["--purge=sometimes", "true"], "invalid value 'sometimes' for --purge"),
                      (["--arenas=0", "true"], "invalid value '0' for --arenas"),
                      (["--arenas=00", "true"], "invalid value '00' for --arenas"),
                      (["--arenas=9", "true"], "invalid value '9' for --arenas"),
                      (["--purge-delay=-5", "true"], "invalid value '-5' for --purge-delay"),
                      (["--huge-cache=99999999999999999999g", "true"], "for --huge-cache"),
                      (["--huge-cache=lots", "true"], "invalid value 'lots' for --huge-cache"),
                      (["--purge-delay", "5", "true"], "needs the form --name=value"),
                      (["--stats=json"], "no program to run")]:
    err = run(INSTALLED, *args, expect=2).stderr
    check(message in err, f"hakmem {' '.join(args)}: stderr {err!r} lacks {message!r}")
run(INSTALLED, "--", "/nonexistent/program", expect=127)
# Moved under a path with a space (or a colon), the library cannot be
# preloaded (LD_PRELOAD has no quoting): the launcher says so and runs
# nothing, rather than the program on the C library's malloc.
with tempfile.TemporaryDirectory(prefix="hakmem moved ") as moved:
    tree = os.path.join(moved, "tree")
    shutil.copytree(prefix, tree, symlinks=True)
    launcher = os.path.join(tree, os.path.relpath(os.path.realpath(INSTALLED), prefix))
    err = run(launcher, "true", expect=127).stderr
    check("cannot preload" in err, f"launcher under {moved!r}: stderr {err!r}")
print("ok   --help and rejected options")

# Every option reaches the program's environment, and the preload comes
# first with the caller's own LD_PRELOAD kept after it.
show_env = ("import json, os; print(json.dumps({k: v for k, v in os.environ.items()"
            " if k.startswith('HAKMEM_') or k == 'LD_PRELOAD'}))")
proc = run(INSTALLED, "--purge-delay=0", "--purge=free", "--arenas=2", "--huge-cache=64m", "--background=1",
           "--verbose", "--stats", "--", PYTHON, "-c", show_env, env={"LD_PRELOAD": "libm.so.6"})
seen = json.loads(proc.stdout)
expected = {"HAKMEM_PURGE_DELAY": "0", "HAKMEM_PURGE": "free", "HAKMEM_ARENAS": "2", "HAKMEM_HUGE_CACHE": "64m",
            "HAKMEM_BACKGROUND": "1", "HAKMEM_VERBOSE": "1", "HAKMEM_STATS": "1",
            "LD_PRELOAD": f"{installed_lib} libm.so.6"}
check(seen == expected, f"environment under the launcher: {seen}, expected {expected}")
check("hakmem: ready" in proc.stderr, f"HAKMEM_VERBOSE had no effect: stderr {proc.stderr!r}")
check("hakmem statistics" in proc.stderr, f"HAKMEM_STATS had no effect: stderr {proc.stderr!r}")
print("ok   options become HAKMEM_* variables, LD_PRELOAD kept after hakmem")

# --secure preloads the hardened variant, which stops a one-byte overflow
# that the default build's size-class slack lets pass. The byte is flipped,
# not set: past a 24-byte request lies the secure canary's keyed trailer,
# which holds any fixed value once in 256 runs.
overflow = ("import ctypes\n"
            "libc = ctypes.CDLL(None)\n"
            "libc.malloc.restype = ctypes.c_void_p\n"
            "p = libc.malloc(24)\n"
            "ctypes.c_ubyte.from_address(p + 24).value ^= 0xFF\n"
            "libc.free(ctypes.c_void_p(p))\n"
            "print('survived')\n")
check(run(INSTALLED, "--", PYTHON, "-c", overflow).stdout == "survived\n", "the default build stopped the overflow")
proc = run(INSTALLED, "--secure", "--", PYTHON, "-c", overflow, expect=-6)
check("heap overflow" in proc.stderr and "survived" not in proc.stdout,
      f"--secure did not stop a one-byte overflow: {proc.stdout!r} {proc.stderr!r}")
print("ok   --secure preloads libhakmem-secure, which stops a one-byte overflow")

# A real program under hakmem with --stats=json: its output intact, and one
# JSON report on stderr counting its 20000 blocks of 1000 bytes (past
# Python's own small-object allocator, so they come from malloc).
program = ("import hashlib\n"
           "blocks = [bytes([i % 251]) * 1000 for i in range(20000)]\n"
           "print(len(blocks), hashlib.sha256(b''.join(blocks)).hexdigest())\n")
proc = run(BUILD, "--stats=json", "--", PYTHON, "-c", program)
plain = run(PYTHON, "-c", program)
check(proc.stdout == plain.stdout, f"output under hakmem {proc.stdout!r}, without {plain.stdout!r}")
reports = [line for line in proc.stderr.splitlines() if line.startswith("{")]
check(len(reports) == 1, f"expected one JSON report on stderr, got {len(reports)}: {proc.stderr!r}")
report = json.loads(reports[0])
check(report["counted"] is True, "calls not counted under --stats=json")
classes = report["classes"]
check(all(c["allocs"] >= c["frees"] for c in classes), f"more frees than allocations: {classes}")
big = sum(c["allocs"] for c in classes if 1000 <= c["size"] <= 1200)
check(big >= 20000, f"only {big} allocations of 1000-1200 bytes counted, expected >= 20000")
check(report["committed_peak"] >= 20000 * 1000, f"peak committed {report['committed_peak']} < 20 MB of blocks")
total = sum(c["allocs"] for c in classes)
print(f"ok   python under --stats=json: {total} allocations counted, {big} of 1000-1200 bytes")
