#!/usr/bin/env python3
"""Checks hakmem's statistics: runs tests/test_stats (known work across
threads) with HAKMEM_STATS set, parses its JSON snapshots and the report at
exit, and checks the counts add up; also the text report and the warning for
an unknown HAKMEM_* variable.  Usage: stats_report.py <test_stats binary>"""
import json
import os
import re
import subprocess
import sys

SIZE_CLASS, N = 6144, 3000   # as in test_stats.c
KiB, MiB = 1 << 10, 1 << 20
LARGE_SIZE, HUGE_SIZE = 3 * MiB, 40 * MiB   # test_stats.c's large and huge block
LARGE_BLOCKS = 2  # test_stats.c's: malloc's, and the one aligned to 1 MiB (a 64 KiB span on its alignment)
HUGE_BLOCKS = 2   # test_stats.c's: malloc's, and the giant one


def run(binary, **env):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("HAKMEM_")}
    full_env.update(env)
    proc = subprocess.run([binary], env=full_env, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        sys.exit(f"FAIL: {binary} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def snapshots(stdout):
    snaps = {}
    for line in stdout.splitlines():
        if line.startswith("snapshot "):
            _, name, payload = line.split(" ", 2)
            snaps[name] = json.loads(payload)
    return snaps


def by_size(snap):
    return {c["size"]: c for c in snap["classes"]}


def check(cond, message):
    if not cond:
        sys.exit(f"FAIL: {message}")


def delta(a, b, size, field):
    return by_size(b).get(size, {}).get(field, 0) - by_size(a).get(size, {}).get(field, 0)


def counted_run(binary):
    proc = run(binary, HAKMEM_STATS="json")
    snaps = snapshots(proc.stdout)
    check(set(snaps) == {"start", "held", "freed"}, f"snapshots {sorted(snaps)}")
    start, held, freed = snaps["start"], snaps["held"], snaps["freed"]
    for name, snap in snaps.items():
        check(snap["counted"] is True, f"{name}: calls counted")
        for c in snap["classes"]:
            check(c["live"] == c["allocs"] - c["frees"], f"{name}: class {c['size']}: live = allocs - frees")
            check(min(v for v in c.values() if isinstance(v, int)) >= 0, f"{name}: class {c['size']}: negative")
    check(delta(start, held, SIZE_CLASS, "allocs") == N, "allocs of the test class")
    check(delta(start, held, SIZE_CLASS, "frees") == N // 4, "local frees of the thread")
    check(delta(start, held, SIZE_CLASS, "remote_frees") == 0, "no remote frees yet")
    check(delta(start, held, SIZE_CLASS, "live") == N - N // 4, "live while held")
    check(delta(held, freed, SIZE_CLASS, "frees") == N - N // 4, "frees by main")
    check(delta(held, freed, SIZE_CLASS, "remote_frees") == N - N // 4, "main's frees are cross-thread")
    check(delta(start, freed, SIZE_CLASS, "live") == 0, "nothing of the test class left live")
    # Class 0: the blocks beyond the classes, large and huge together.
    beyond = LARGE_BLOCKS + HUGE_BLOCKS
    check(delta(start, held, 0, "allocs") == beyond and delta(held, freed, 0, "frees") == beyond,
          f"the large and huge blocks: allocs +{delta(start, held, 0, 'allocs')}, frees +{delta(held, freed, 0, 'frees')}")
    check(delta(start, held, 0, "live") == beyond, "class 0 live: the large and the huge blocks")
    large_and_huge_apart(start, held, freed)
    check(held["live_bytes"] >= start["live_bytes"] + (N - N // 4) * 6000 + LARGE_SIZE + HUGE_SIZE, "memory held")
    # main's heap, and the worker's gone: it exited before "held".
    check(held["heaps"] == freed["heaps"] >= 1, f"live heaps {held['heaps']}, {freed['heaps']}")
    for key in ("segments", "committed", "committed_peak", "purged", "rss", "huge_cache_hits"):
        check(key in freed and freed[key] >= 0, f"total {key}")
    check(freed["committed_peak"] >= held["committed"] and freed["rss"] > 0, "peak and rss")
    # HAKMEM_STATS=json also writes one JSON object at exit (the last stderr line).
    at_exit = json.loads(proc.stderr.strip().splitlines()[-1])
    check(at_exit["counted"] and by_size(at_exit)[SIZE_CLASS]["allocs"] == by_size(freed)[SIZE_CLASS]["allocs"],
          "report at exit")
    check("hakmem statistics" in proc.stderr, "malloc_stats() printed the text report")
    text_counts_large_and_huge_apart(proc.stderr, held)


def large_and_huge_apart(start, held, freed):
    """The large blocks (spans, exactly their size: 3 MiB is 48 slices, the
    aligned one a slice) are counted in large_*, the huge ones (their
    mappings, header included) in huge_*, neither in the other (a 3 MiB and
    a 40 MiB block once showed as huge_blocks 2), the giant one too (once in
    neither)."""
    def d(key, a=start, b=held):
        return b[key] - a[key]
    check(d("large_blocks") == LARGE_BLOCKS,
          f"large_blocks {start['large_blocks']} -> {held['large_blocks']}, want +{LARGE_BLOCKS}")
    check(d("large_bytes") == LARGE_SIZE + 64 * KiB, f"large_bytes +{d('large_bytes')}, want +{LARGE_SIZE + 64 * KiB}")
    check(d("huge_blocks") == HUGE_BLOCKS, f"huge_blocks {start['huge_blocks']} -> {held['huge_blocks']}, want +{HUGE_BLOCKS}")
    check(HUGE_SIZE <= d("huge_bytes") < HUGE_SIZE + 64 * MiB, f"huge_bytes +{d('huge_bytes')}, want about +{HUGE_SIZE}")
    for key in ("large_blocks", "large_bytes", "huge_blocks", "huge_bytes"):
        check(freed[key] == start[key], f"{key} after the frees: {freed[key]}, at the start {start[key]}")


def text_counts_large_and_huge_apart(stderr, held):
    """The text report printed after "report held" has a large line and a
    huge line with the figures of the "held" snapshot taken just before."""
    after = stderr.split("report held\n", 1)
    check(len(after) == 2, "the text report while the blocks are held")
    large = re.search(r"^large: (\d+) blocks, (\d+) KiB$", after[1], re.M)
    huge = re.search(r"^huge: (\d+) blocks, (\d+) KiB;", after[1], re.M)
    check(large is not None and huge is not None, f"large and huge lines in: {after[1][:2000]}")
    check((int(large[1]), int(large[2])) == (held["large_blocks"], held["large_bytes"] >> 10),
          f"text {large[0]!r}, JSON {held['large_blocks']} blocks, {held['large_bytes']} bytes")
    check((int(huge[1]), int(huge[2])) == (held["huge_blocks"], held["huge_bytes"] >> 10),
          f"text {huge[0]!r}, JSON {held['huge_blocks']} blocks, {held['huge_bytes']} bytes")


def uncounted_run(binary):
    proc = run(binary)
    snaps = snapshots(proc.stdout)
    held = snaps["held"]
    check(held["counted"] is False, "calls not counted without HAKMEM_STATS")
    check(by_size(held)[SIZE_CLASS]["live"] >= N - N // 4, "live blocks from the span walk")
    large_and_huge_apart(snaps["start"], held, snaps["freed"])


def text_report_and_warnings(binary):
    proc = run(binary, HAKMEM_STATS="1", HAKMEM_VERBOSE="1", HAKMEM_NOT_AN_OPTION="1")
    for needle in ("hakmem statistics", "heaps:", "segments:", "large:", "huge:", "memory:",
                   "unknown option HAKMEM_NOT_AN_OPTION"):
        check(needle in proc.stderr, f"stderr has {needle!r}")


def option_value_bounds(binary):
    """A size option takes any value that fits a long once scaled: up to
    LONG_MAX >> 30 with a 'g', LONG_MAX plain (plain values above
    LONG_MAX >> 30 were once refused); one more is refused with the
    warning, not wrapped to a negative size; so is a negative size (once
    taken as no bound), but a purge delay of -1 ("never")."""
    def accepted(option, value):
        proc = run(binary, **{option: value})
        return f"ignoring {option}={value} (not a valid value)" not in proc.stderr
    for value in (str((2**63 - 1) >> 30) + "g", str(2**63 - 1), "9999999999", "64m"):
        check(accepted("HAKMEM_HUGE_CACHE", value), f"HAKMEM_HUGE_CACHE={value} accepted")
    for value in (str(((2**63 - 1) >> 30) + 1) + "g", str(2**63), "-1", "-64m"):
        check(not accepted("HAKMEM_HUGE_CACHE", value), f"HAKMEM_HUGE_CACHE={value} refused")
    check(accepted("HAKMEM_PURGE_DELAY", "-1"), "HAKMEM_PURGE_DELAY=-1 accepted")
    check(not accepted("HAKMEM_PURGE_DELAY", "-2"), "HAKMEM_PURGE_DELAY=-2 refused")
    # Only sizes take a suffix, a switch takes 0 or 1, and arenas 0 to 8
    # (values beyond were taken without a word: 2 as 1, 64 arenas as 8).
    check(not accepted("HAKMEM_PURGE_DELAY", "5k"), "HAKMEM_PURGE_DELAY=5k refused")
    for option in ("HAKMEM_BACKGROUND", "HAKMEM_HUGE_PAGES", "HAKMEM_ZERO_ON_FREE", "HAKMEM_VERBOSE"):
        check(accepted(option, "0") and accepted(option, "1"), f"{option}=0 and 1 accepted")
        for value in ("2", "1k", "-1"):
            check(not accepted(option, value), f"{option}={value} refused")
    check(accepted("HAKMEM_ARENAS", "8") and not accepted("HAKMEM_ARENAS", "9"), "HAKMEM_ARENAS: 8 accepted, 9 refused")
    # A warning cut to the message buffer still ends its line.
    long = "x" * 700
    proc = run(binary, HAKMEM_HUGE_CACHE=long)
    warning = [line for line in proc.stderr.splitlines() if line.startswith("hakmem: warning: ignoring HAKMEM_HUGE_CACHE")]
    check(len(warning) == 1 and len(warning[0]) < 600, f"the cut warning is a line of its own: {proc.stderr[:900]!r}")


def main():
    binary = sys.argv[1]
    for case in (counted_run, uncounted_run, text_report_and_warnings, option_value_bounds):
        case(binary)
        print(f"ok   {case.__name__}")


if __name__ == "__main__":
    main()
