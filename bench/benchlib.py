"""Shared pieces of the hakmem benchmark tools (run.py, compare.py, instr.py):
allocator discovery, running one process under an allocator, statistics and
the ratio bands of the report."""
import math
import os
import re
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import mimalloc3

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent

# (name, Debian package, shared object) of each peer allocator; mimalloc3
# comes from PyPI instead (mimalloc3.py).
PEERS = [
    ("mimalloc", "libmimalloc2.0", "libmimalloc.so.2"),
    ("mimalloc3", None, mimalloc3.SONAME),
    ("jemalloc", "libjemalloc2", "libjemalloc.so.2"),
    ("tcmalloc", "libtcmalloc-minimal4", "libtcmalloc_minimal.so.4"),
]
ALLOCATOR_ORDER = ["glibc", "hakmem"] + [name for name, _, _ in PEERS]

# Environment variables that tune an allocator: removed from every run's
# environment (names ending in "_" are prefixes). launch.c scrubs the same
# list again in the child, so a caller's setting cannot reach a workload.
SCRUBBED = ["HAKMEM_", "MIMALLOC_", "TCMALLOC_", "JEMALLOC_", "MALLOC_", "LD_PRELOAD", "GLIBC_TUNABLES",
            "_RJEM_MALLOC_CONF"]


def scrubbed(name):
    return any(name.startswith(s) if s.endswith("_") else name == s for s in SCRUBBED)


def clean_env():
    """os.environ without the scrubbed variables, and the names removed."""
    removed = sorted(k for k in os.environ if scrubbed(k))
    return {k: v for k, v in os.environ.items() if not scrubbed(k)}, removed


def run_helper(argv, **kwargs):
    """subprocess.run for a helper process (a load client such as
    redis-benchmark, dpkg, git): with the scrubbed environment, so a
    caller's LD_PRELOAD or allocator tuning cannot reach it. Workloads
    themselves go through Launched."""
    return subprocess.run([str(a) for a in argv], env=clean_env()[0], **kwargs)


@dataclass
class Allocator:
    name: str
    preload: str  # path for LD_PRELOAD, "" for glibc
    version: str = ""


def find_library(package, soname):
    """Path of soname as installed by package (dpkg -L), else from ldconfig."""
    try:
        files = run_helper(["dpkg", "-L", package], capture_output=True, text=True).stdout.split()
        for f in files:
            if f.endswith("/" + soname) and os.path.exists(f):
                return f
    except FileNotFoundError:
        pass  # not a dpkg system
    cache = run_helper(["ldconfig", "-p"], capture_output=True, text=True).stdout
    for line in cache.splitlines():
        if line.strip().startswith(soname + " ") and "=>" in line:
            return line.split("=>")[1].strip()
    return None


# hakmem's hardened variant: measured only when asked for (instr.py, run.py
# --allocators), against hakmem rather than as a peer.
SECURE = "hakmem-secure"


def find_allocators(build_dir, note=print, hakmem_version=None, secure=False):
    """The allocators available here, in report order; notes the missing.
    hakmem's version is hakmem_version (run.py passes the commit it records
    for the run), else the commit of the build's source tree. With secure,
    hakmem-secure follows hakmem."""
    found = [Allocator("glibc", "", package_version("libc6"))]
    version = hakmem_version or git_commit(source_dir(build_dir))
    libs = [("hakmem", "libhakmem.so")] + ([(SECURE, "libhakmem-secure.so")] if secure else [])
    for name, lib in libs:
        path = Path(build_dir) / lib
        if path.exists():
            found.append(Allocator(name, str(path), version))
        else:
            note(f"note: {path} not found (run `make build`); {name} is left out")
    for name, package, soname in PEERS:
        if package is None:
            path, version, source = mimalloc3.path(), mimalloc3.VERSION, "PyPI cmeel-mimalloc"
        else:
            path, version, source = find_library(package, soname), package_version(package), f"package {package}"
        if path:
            found.append(Allocator(name, path, version))
        else:
            note(f"note: {name} ({soname}, {source}) not installed; left out (`make bench-deps`)")
    return found


def package_version(package):
    try:
        q = run_helper(["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True)
        return q.stdout.strip() if q.returncode == 0 else "unknown"
    except FileNotFoundError:
        return "unknown"  # not a dpkg system


def cmake_cache(build_dir, name):
    """A variable of the build directory's CMakeCache.txt, or None."""
    try:
        m = re.search(rf"^{name}:\w+=(.*)$", (Path(build_dir) / "CMakeCache.txt").read_text(), re.M)
        return m.group(1) if m else None
    except OSError:
        return None


def build_type(build_dir):
    """CMAKE_BUILD_TYPE of the build directory hakmem came from."""
    return cmake_cache(build_dir, "CMAKE_BUILD_TYPE") or "unknown"


def source_dir(build_dir):
    """The source tree the build directory was configured from, else this
    checkout."""
    src = cmake_cache(build_dir, "CMAKE_HOME_DIRECTORY")
    return Path(src) if src and Path(src).is_dir() else ROOT


# What libhakmem.so is built from, relative to the source tree.
LIBRARY_SOURCES = ["src", "include", "CMakeLists.txt"]


def stale_build(build_dir, source):
    """Whether build_dir's libhakmem.so is older than the newest file it is
    built from (it was not rebuilt after an edit), and that file:
    (stale, path relative to source); (False, None) without a library."""
    lib = Path(build_dir) / "libhakmem.so"
    if not lib.exists():
        return False, None
    files = []
    for part in LIBRARY_SOURCES:
        p = Path(source) / part
        files += [f for f in p.rglob("*") if f.is_file() and not f.name.startswith(".")] if p.is_dir() \
            else [p] if p.is_file() else []
    if not files:
        return False, None
    newest = max(files, key=lambda f: f.stat().st_mtime)
    return newest.stat().st_mtime > lib.stat().st_mtime, str(newest.relative_to(source))


def load_average():
    try:
        return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]
    except OSError:
        return None


def glibc_path():
    """libc.so.6, for preloading glibc's malloc over one a program links in."""
    return find_library("libc6", "libc.so.6") or "libc.so.6"


@dataclass
class Outcome:
    status: str        # "ok", "fail" (non-zero exit) or "timeout"
    exit_code: int
    wall_s: float
    maxrss_kb: int
    metrics: dict      # numbers the program reported, e.g. rss_after_free_kb
    stderr: str
    stdout: str = ""


class Launched:
    """A process started through the `launch` helper (see launch.c), which
    reports the wall time, peak RSS and exit status of the program alone."""

    def __init__(self, launcher, argv, preload, env=None, stdout=subprocess.PIPE):
        fd, self.report = tempfile.mkstemp(prefix="hakmem-bench-")
        os.close(fd)
        self.proc = subprocess.Popen([str(launcher), self.report, preload] + [str(a) for a in argv],
                                     stdout=stdout, stderr=subprocess.PIPE, text=True,
                                     env={**clean_env()[0], **(env or {})}, start_new_session=True)

    def stop(self):
        """Asks the program to exit (SIGTERM, forwarded by the launcher)."""
        self.proc.send_signal(signal.SIGTERM)

    def _kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it finished just now

    def wait(self, timeout):
        timer = threading.Timer(timeout, self._kill)
        timer.start()
        try:
            out, err = self.proc.communicate()
        finally:
            timer.cancel()
        fields = dict(kv.split("=", 1) for kv in Path(self.report).read_text().split())
        os.unlink(self.report)
        metrics = parse_metrics(out or "")
        if not fields:  # the launcher itself was killed
            return Outcome("timeout", -1, float(timeout), 0, metrics, err or "", out or "")
        code = int(fields["exit"])
        return Outcome("ok" if code == 0 else "fail", code, float(fields["wall_s"]),
                       int(fields["maxrss_kb"]), metrics, err or "", out or "")


def parse_metrics(text):
    """Numeric key=value tokens a workload printed (e.g. rss_after_free_kb)."""
    metrics = {}
    for token in text.split():
        key, sep, value = token.partition("=")
        if sep:
            try:
                metrics[key] = float(value)
            except ValueError:
                pass
    return metrics


def geomean(values):
    values = list(values)
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values else None


def median(values):
    values = list(values)
    return statistics.median(values) if values else None


def band(ratio, better="faster"):
    """Band of hakmem's ratio to a peer (lower is better), as in a regression
    report: better < 0.95 <= OK <= 1.05 < marginal <= 1.25 < regression."""
    if ratio is None:
        return ""
    if ratio < 0.95:
        return better
    if ratio <= 1.05:
        return "OK"
    if ratio <= 1.25:
        return "marginal"
    return "regression"


def machine_info():
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": model, "cores": os.cpu_count(), "kernel": platform.release(),
            "python": platform.python_version()}


def git_commit(root=ROOT):
    """HEAD's short hash of the checkout at root, with "-dirty" if any file
    differs from it, untracked files included; result files (bench/results/)
    do not count, since runs leave them there untracked."""
    def git(*args):
        return run_helper(["git", "-C", str(root)] + list(args), capture_output=True, text=True)
    head = git("rev-parse", "--short", "HEAD")
    commit = head.stdout.strip() if head.returncode == 0 else "nocommit"
    changed = [line for line in git("status", "--porcelain", "--untracked-files=all").stdout.splitlines()
               if not line[3:].startswith("bench/results/")]
    return commit + ("-dirty" if changed else "")


def progress(text):
    """One self-overwriting status line on stderr (plain lines if not a tty)."""
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K" + text)
    else:
        sys.stderr.write(text + "\n")
    sys.stderr.flush()


def progress_done():
    if sys.stderr.isatty():
        sys.stderr.write("\r\033[K")
        sys.stderr.flush()


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def now_stamp():
    return time.strftime("%Y%m%d-%H%M%S")
