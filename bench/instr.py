#!/usr/bin/env python3
"""Instructions per malloc/free pair on the fast path (make bench-instr).

Runs bench/fastpath (modes single and batch) under valgrind's callgrind for
glibc, hakmem, its hardened variant (hakmem-secure) and each peer, twice per
mode: with a small and a large pair count. (Ir(large) - Ir(small)) / (large
- small) cancels start-up and teardown, leaving the per-pair cost. Callgrind, unlike memcheck, does not
replace malloc, so the preloaded allocator is the one measured. Two counts per pair: the whole
loop, and the allocator's own share: the whole less the instructions of the driver's executable
(its loop, its checks, the calls' PLT jumps). The driver calls nothing but malloc and free in
the loop. (Counting the allocator's library instead misses tcmalloc, whose malloc and free
callgrind cannot place in a file.)

    python3 bench/instr.py [--pairs 1000000] [--small 10000] [--build DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import benchlib
from benchlib import ROOT

MODES = {"single": "one 32 B block malloc'd and freed",
         "batch": "1000 live blocks of 16-512 B, then all freed"}


def object_instructions(out, name):
    """Instructions callgrind counted in functions of the object file `name`
    (a file name): each function's own cost lines, not the inclusive cost of
    its calls."""
    names, current, total, after_call = {}, None, 0, False
    for line in Path(out).read_text().splitlines():
        if line.startswith(("ob=", "cob=")):   # "(id) path" the first time, "(id)" after
            ref, _, path = line.partition("=")[2].partition(" ")
            if path:
                names[ref] = os.path.basename(path)
            if line.startswith("ob="):
                current = names.get(ref, ref)
        elif line.startswith("calls="):
            after_call = True
        elif line[:1].isdigit() or line[:1] in ("+", "-", "*"):
            if not after_call and current == name:
                total += int(line.split()[1])
            after_call = False
    return total


def instructions(fastpath, alloc, mode, pairs):
    """Instructions (callgrind Ir) of one fastpath run: (all, the allocator's)."""
    fd, out = tempfile.mkstemp(prefix="hakmem-callgrind-")
    os.close(fd)
    try:
        # No allocator tuning and no caller's preload: only the one under test.
        env = benchlib.clean_env()[0]
        if alloc.preload:
            env["LD_PRELOAD"] = alloc.preload
        run = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
                              str(fastpath), f"--mode={mode}", f"--pairs={pairs}"],
                             env=env, capture_output=True, text=True)
        if run.returncode != 0:
            raise RuntimeError(f"{alloc.name} {mode}: exit {run.returncode}\n{run.stderr[-1500:]}")
        for line in Path(out).read_text().splitlines():
            if line.startswith("summary:") or line.startswith("totals:"):
                total = int(line.split()[1])
                return total, total - object_instructions(out, fastpath.name)
        raise RuntimeError(f"{alloc.name} {mode}: no summary line in callgrind output")
    finally:
        os.unlink(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pairs", type=int, default=1_000_000)
    ap.add_argument("--small", type=int, default=10_000, help="pair count of the baseline run")
    ap.add_argument("--build", default=str(ROOT / "build"))
    args = ap.parse_args()
    fastpath = Path(args.build) / "bench" / "fastpath"
    if not fastpath.exists():
        sys.exit(f"instr.py: {fastpath} not found; build the workloads first (`make build`)")
    allocators = benchlib.find_allocators(args.build, note=lambda s: print(s, file=sys.stderr), secure=True)

    per_pair, failures = {}, []
    for mode in MODES:
        for alloc in allocators:
            benchlib.progress(f"callgrind: {mode}, {alloc.name}")
            try:
                big = instructions(fastpath, alloc, mode, args.pairs)
                small = instructions(fastpath, alloc, mode, args.small)
                per_pair[mode, alloc.name] = [(b - s) / (args.pairs - args.small) for b, s in zip(big, small)]
            except RuntimeError as e:
                failures.append(str(e))
    benchlib.progress_done()

    print(f"Instructions per malloc/free pair (callgrind Ir, ({args.pairs} - {args.small} pairs) difference):")
    print("the whole loop / the allocator's share (the loop less the driver's own instructions)")
    names = [a.name for a in allocators]
    widths = [max(11, len(n)) for n in names]
    print(f"  {'mode':<8} " + " ".join(f"{n:>{w}}" for n, w in zip(names, widths)) + "   what")
    for mode, what in MODES.items():
        cells = [per_pair.get((mode, n)) for n in names]
        print(f"  {mode:<8} " + " ".join(f"{'FAIL' if c is None else f'{c[0]:.1f} / {c[1]:.1f}':>{w}}"
                                         for c, w in zip(cells, widths)) + f"   {what}")
    for f in failures:
        print(f"\nFAIL {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
