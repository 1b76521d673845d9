#!/usr/bin/env python3
"""Runs every benchmark workload under every allocator and reports hakmem
against its peers. See bench/README.md.

    python3 bench/run.py [--quick] [--repeats N] [--only NAME,...]
                         [--allocators NAME,...] [--seed N] [--build DIR]
                         [--save-baseline] [--baseline FILE] [--no-baseline-check]
                         [--keep-unverified]
"""
import argparse
import json
import random
import shutil
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import benchlib
import compare
import redisload
import sqlload
import svgchart
from benchlib import BENCH_DIR, ROOT, fmt

RESULTS_DIR = BENCH_DIR / "results"
BASELINE = BENCH_DIR / "baselines" / "baseline.json"
# Heap RSS (peak minus the allocator's do-nothing footprint) is floored here,
# so a workload with almost no heap cannot make a huge ratio out of a few pages.
HEAP_FLOOR_KB = 1024
FOOTPRINT_RUNS = 3
# The do-nothing program each kind of workload program is measured against:
# one that links libstdc++ has it mapped under every allocator (idle_cxx.cc).
FOOTPRINT_PROGRAMS = {"c": "idle", "c++": "idle_cxx"}
MEMRETURN_METRICS = ("rss_after_free_kb", "rss_after_free_100ms_kb", "rss_after_free_1s_kb",
                     "rss_after_free_5s_kb")


@dataclass
class Workload:
    name: str
    about: str        # what it does and which hakmem path it exercises
    full: list        # program (in build/bench, or a .py in bench/) and arguments
    quick: list       # the same, sized for --quick
    metrics: tuple = ()  # extra numbers the workload prints as name=value
    env: dict = field(default_factory=dict)
    redis: bool = False   # full/quick hold the request count instead
    sqlite: bool = False  # full/quick hold the row count instead
    time_metric: str = ""  # a number the program prints to use as its time instead of wall time
    footprint: str = "c"   # the do-nothing program its heap RSS is taken against (FOOTPRINT_PROGRAMS)


def larson_threads(n, total_ops, rounds=20):
    return ["larson", f"--threads={n}", "--min=8", "--max=4096", f"--rounds={rounds}",
            f"--ops={total_ops // (n * rounds)}"]


WORKLOADS = [
    Workload("larson-1k", "Larson server, 2 threads, 8 B-1 KiB, arrays handed between threads: small classes, some cross-thread frees",
             ["larson", "--threads=2", "--max=1024", "--rounds=200", "--ops=50000"],
             ["larson", "--threads=2", "--max=1024", "--rounds=40", "--ops=25000"]),
    Workload("larson-32k", "Larson server, 2 threads, 8 B-32 KiB: small classes and small/medium pages",
             ["larson", "--threads=2", "--max=32768", "--rounds=100", "--ops=20000"],
             ["larson", "--threads=2", "--max=32768", "--rounds=30", "--ops=10000"]),
    Workload("mixed-small", "random alloc/free, 8 B-1 KiB, ~400 live: small-class direct lookup, local free list",
             ["randmix", "--min=8", "--max=1024", "--slots=800", "--ops=20M"],
             ["randmix", "--min=8", "--max=1024", "--slots=800", "--ops=5M"]),
    Workload("mid-1t", "random alloc/free, 1-8 KiB, 1 thread: size-classed small pages",
             ["randmix", "--min=1024", "--max=8192", "--slots=2000", "--ops=8M"],
             ["randmix", "--min=1024", "--max=8192", "--slots=2000", "--ops=2M"]),
    Workload("mid-2t", "random alloc/free, 1-8 KiB, 2 threads: per-thread small pages in parallel",
             ["randmix", "--threads=2", "--min=1024", "--max=8192", "--slots=2000", "--ops=6M"],
             ["randmix", "--threads=2", "--min=1024", "--max=8192", "--slots=2000", "--ops=1536K"]),
    Workload("prodcon", "producer/consumer, 16-512 B: every free cross-thread (atomic page list, pulled by the producer)",
             ["prodcon", "--pairs=1", "--objects=12M"],
             ["prodcon", "--pairs=1", "--objects=3M"]),
    Workload("threadchurn", "waves of 4 short-lived threads hand blocks to 2 survivors: heap setup/teardown, frees into abandoned pages",
             ["threadchurn", "--waves=400"],
             ["threadchurn", "--waves=100"]),
    Workload("falseshare", "8 B objects from one thread written by 2: cache-line placement, cross-thread free",
             ["falseshare", "--threads=2", "--size=8", "--rounds=3000"],
             ["falseshare", "--threads=2", "--size=8", "--rounds=800"]),
    Workload("realloc-step", "64 strings grown by 1-64 B appends to 64 KiB: realloc within and across small/medium classes",
             ["realloc", "--step=64", "--max=64K", "--rounds=20"],
             ["realloc", "--step=64", "--max=64K", "--rounds=5"]),
    Workload("realloc-double", "64 vectors doubled to 1 MiB: realloc through every size class",
             ["realloc", "--step=0", "--max=1M", "--rounds=15"],
             ["realloc", "--step=0", "--max=1M", "--rounds=4"]),
    Workload("large", "64 KiB-32 MiB blocks, 8 live: medium pages and large blocks (arena spans)",
             ["large", "--ops=800"],
             ["large", "--ops=200"]),
    Workload("memreturn", "128 MiB (quick: 64) of 16 B-4 KiB blocks freed, small work, then RSS at once and after 0.1, 1 and 5 s idle: memory returned to the OS",
             ["memreturn", "--total=128M", "--work=2M"],
             ["memreturn", "--total=64M", "--work=1M"],
             metrics=MEMRETURN_METRICS, time_metric="work_s"),
    Workload("python", "CPython (PYTHONMALLOC=malloc) dict/list/string churn: a real program's size mix",
             ["pyalloc.py", "--rounds=6", "--items=30000"],
             ["pyalloc.py", "--rounds=2", "--items=15000"],
             env={"PYTHONMALLOC": "malloc"}),
    Workload("redis", "redis-server under redis-benchmark (9 commands, 256 B values) on loopback",
             [20000], [5000], metrics=("requests_per_s",), redis=True, footprint="c++"),
    Workload("threads-4", "Larson server, 4 threads on 2 cores, 8 B-4 KiB, arrays handed on: over-subscription, cross-thread frees",
             larson_threads(4, 8 << 20), larson_threads(4, 2 << 20)),
    Workload("threads-8", "the same with 8 threads", larson_threads(8, 8 << 20), larson_threads(8, 2 << 20)),
    Workload("threads-16", "the same with 16 threads", larson_threads(16, 8 << 20), larson_threads(16, 2 << 20)),
    Workload("mpmc", "3 producers -> 2 consumers through one queue, 16 B-16 KiB: every free cross-thread, from several threads per page",
             ["mpmc", "--producers=3", "--consumers=2", "--objects=2M"],
             ["mpmc", "--producers=3", "--consumers=2", "--objects=500K"]),
    Workload("exchange", "4 threads in rounds each free the blocks another allocated (8 B-16 KiB) while allocating: remote-free heavy",
             ["exchange", "--threads=4", "--blocks=2000", "--rounds=300"],
             ["exchange", "--threads=4", "--blocks=2000", "--rounds=75"]),
    Workload("respawn", "generations of 4 threads, each freeing the long-lived blocks its exited predecessor left: abandoned heaps, RSS",
             ["respawn", "--threads=4", "--generations=120"],
             ["respawn", "--threads=4", "--generations=30"]),
    Workload("bigchurn", "20 live calloc'd blocks of 5-25 MiB, one replaced per op, each ~20 times (quick: 3): large spans, reuse vs fresh zero pages",
             ["bigchurn", "--ops=400"],
             ["bigchurn", "--ops=60"]),
    Workload("realloc-huge", "4 buffers grown by x1.3 reallocs from 256 KiB to 80 MiB (quick: 48): medium -> large -> huge moves",
             ["realloc", "--step=0", "--buffers=4", "--start=256K", "--factor=130", "--max=80M", "--rounds=2"],
             ["realloc", "--step=0", "--buffers=4", "--start=256K", "--factor=130", "--max=48M", "--rounds=1"]),
    Workload("alignmix", "malloc / calloc (every byte checked zero) / posix_memalign, aligned_alloc, memalign to 64 KiB, 8 B-32 KiB",
             ["alignmix", "--ops=4M"],
             ["alignmix", "--ops=1M"]),
    Workload("sizeddel", "C++ Larson server, 2 threads, operator new / sized operator delete(p, n), 8 B-1 KiB",
             ["sizeddel", "--rounds=400"],
             ["sizeddel", "--rounds=100"], footprint="c++"),
    Workload("leak", "random alloc/free of 16 B-16 KiB where 1 in 32 blocks is leaked, to 96 MiB (quick: 32): memory pinned by never-freed blocks",
             ["leak", "--leak=96M", "--leak_every=32"],
             ["leak", "--leak=32M", "--leak_every=32"]),
    Workload("workerpool", "16 producers each keep 4096 blocks of 592 B and hand every replaced one to a reclaimer that only frees: cross-thread frees from a thread with no heap, steady RSS per live byte",
             ["workerpool", "--producers=16", "--slots=4096", "--size=592", "--ops=200K"],
             ["workerpool", "--producers=16", "--slots=4096", "--size=592", "--ops=50K"],
             metrics=("rss_per_live",)),
    Workload("manythreads", "1000 live threads each holding 10 blocks of 16 B-3 KiB (quick: 250): what a thread that keeps a few blocks costs in RSS",
             ["manythreads", "--threads=1000", "--blocks=10"],
             ["manythreads", "--threads=250", "--blocks=10"],
             metrics=("rss_held_kb", "rss_per_live")),
    Workload("sqlite", "sqlite3 shell, in-memory database: generated table, index, update, delete, sort, group; output checked",
             [80000], [20000], sqlite=True),
]


def program_argv(spec, bench_bin):
    program, args = spec[0], spec[1:]
    if program.endswith(".py"):
        return [sys.executable, str(BENCH_DIR / program)] + args
    return [str(bench_bin / program)] + args


@dataclass
class Context:
    launcher: Path
    bench_bin: Path
    timeout: float
    quick: bool
    scratch: str     # directory for generated inputs
    footprint: dict  # kind (FOOTPRINT_PROGRAMS) -> allocator -> do-nothing peak RSS, KiB


def run_once(workload, alloc, ctx):
    preload = alloc.preload
    size = workload.quick if ctx.quick else workload.full
    if workload.redis:
        if alloc.name == "glibc":
            preload = benchlib.glibc_path()
        return redisload.run(ctx.launcher, preload, size[0], ctx.timeout)
    if workload.sqlite:
        argv, expected = sqlload.prepare(ctx.scratch, size[0])
        o = benchlib.Launched(ctx.launcher, argv, preload).wait(ctx.timeout)
        if o.status == "ok" and o.stdout != expected:
            o.status, o.exit_code = "fail", -1
            o.stderr = f"sqlite3 printed:\n{o.stdout[-400:]}\nexpected:\n{expected[-400:]}\n" + o.stderr
        return o
    return benchlib.Launched(ctx.launcher, program_argv(size, ctx.bench_bin), preload, env=workload.env).wait(ctx.timeout)


def record(workload, alloc, rnd, position, o, ctx):
    """One raw run as stored in the result file."""
    time_s = o.wall_s
    if workload.time_metric and o.status == "ok":
        time_s = o.metrics.get(workload.time_metric)
        if time_s is None:
            o.status, o.exit_code = "fail", -1
            o.stderr = f"the program printed no {workload.time_metric}=\n" + o.stderr
    run = {"workload": workload.name, "allocator": alloc.name, "rep": rnd, "position": position,
           "status": o.status, "exit_code": o.exit_code, "wall_s": o.wall_s, "time_s": time_s,
           "maxrss_kb": o.maxrss_kb, "metrics": o.metrics, "stderr": o.stderr[-2000:]}
    if o.status == "ok":
        run["heap_rss_kb"] = max(o.maxrss_kb - ctx.footprint[workload.footprint][alloc.name], HEAP_FLOOR_KB)
    return run


def measure(workload, allocators, repeats, rng, ctx):
    """One unmeasured warm-up run, then `repeats` rounds, each running every
    allocator once in an order shuffled for that round. Returns the raw
    runs, the orders and the warm-up's allocator."""
    orders = [[a.name for a in rng.sample(allocators, len(allocators))] for _ in range(repeats)]
    by_name = {a.name: a for a in allocators}
    warmup = by_name[orders[0][0]]
    benchlib.progress(f"{workload.name}: warm-up ({warmup.name})")
    run_once(workload, warmup, ctx)
    runs = []
    for rnd, order in enumerate(orders, 1):
        for position, name in enumerate(order):
            benchlib.progress(f"{workload.name}: {name}, round {rnd} of {repeats}")
            o = run_once(workload, by_name[name], ctx)
            run = record(workload, by_name[name], rnd, position, o, ctx)
            runs.append(run)
            if run["status"] != "ok":
                benchlib.progress_done()
                print(f"FAIL {workload.name} under {name} (round {rnd}): {run['status']}, exit {run['exit_code']}\n"
                      f"  {run['stderr'].strip()[-500:]}", file=sys.stderr)
    benchlib.progress_done()
    return runs, orders, warmup.name


def footprints(allocators, ctx):
    """Each allocator's do-nothing peak RSS (median of a few idle runs), per
    kind of program (FOOTPRINT_PROGRAMS)."""
    out = {kind: {} for kind in FOOTPRINT_PROGRAMS}
    for kind, program in FOOTPRINT_PROGRAMS.items():
        for alloc in allocators:
            benchlib.progress(f"footprint ({kind}): {alloc.name}")
            sizes = []
            for _ in range(FOOTPRINT_RUNS):
                o = benchlib.Launched(ctx.launcher, [ctx.bench_bin / program], alloc.preload).wait(ctx.timeout)
                if o.status != "ok":
                    sys.exit(f"run.py: the do-nothing program {program} failed under {alloc.name}: "
                             f"{o.stderr.strip()[-300:]}")
                sizes.append(o.maxrss_kb)
            out[kind][alloc.name] = benchlib.median(sizes)
    benchlib.progress_done()
    return out


def verification(allocators, ctx):
    """The unmeasured verification pass (verify.c) under each allocator."""
    out = {}
    for alloc in allocators:
        benchlib.progress(f"verification pass: {alloc.name}")
        o = benchlib.Launched(ctx.launcher, [ctx.bench_bin / "verify"], alloc.preload).wait(ctx.timeout)
        out[alloc.name] = {"status": o.status, "exit_code": o.exit_code, "stderr": o.stderr[-2000:]}
        if o.status != "ok":
            benchlib.progress_done()
            print(f"FAIL verification pass under {alloc.name}: {o.status}, exit {o.exit_code}\n"
                  f"  {o.stderr.strip()[-500:]}", file=sys.stderr)
    benchlib.progress_done()
    return out


def summarise(runs, allocators):
    """Medians per allocator; an allocator with any failed run is FAIL."""
    result = {}
    for alloc in allocators:
        mine = [r for r in runs if r["allocator"] == alloc]
        if not mine:
            continue
        failed = [r for r in mine if r["status"] != "ok"]
        if failed:
            result[alloc] = {"failed": len(failed), "status": failed[0]["status"],
                             "exit_code": failed[0]["exit_code"]}
            continue
        times = [r["time_s"] for r in mine]
        metrics = {k: benchlib.median(r["metrics"][k] for r in mine)
                   for k in mine[0]["metrics"] if all(k in r["metrics"] for r in mine)}
        result[alloc] = {"failed": 0, "time_s": benchlib.median(times),
                         "spread": (max(times) - min(times)) / benchlib.median(times),
                         "rss_kb": benchlib.median(r["maxrss_kb"] for r in mine),
                         "heap_rss_kb": benchlib.median(r["heap_rss_kb"] for r in mine), "metrics": metrics}
    return result


# Report measures: name -> key in a median.
MEASURES = {"time": "time_s", "rss": "rss_kb", "heap_rss": "heap_rss_kb"}


def ratios_to_peers(medians, metrics):
    """hakmem / peer for time, peak RSS, heap RSS and the workload's metrics."""
    hak = medians.get("hakmem")
    if not hak or hak["failed"]:
        return {}
    out = {}
    for peer, m in medians.items():
        if peer in ("hakmem", benchlib.SECURE) or m["failed"]:
            continue
        r = {name: hak[key] / m[key] for name, key in MEASURES.items()}
        for metric in metrics:
            if m["metrics"].get(metric) and metric in hak["metrics"]:
                r[metric] = hak["metrics"][metric] / m["metrics"][metric]
        out[peer] = r
    return out


def best_peer(medians):
    """Per measure, the peer with the lowest median and hakmem / it. For
    time, also the larger of the two allocators' run-to-run spreads, and
    whether the ratio's distance from 1 lies within it (noise: either side
    could lead on a rerun)."""
    hak = medians.get("hakmem")
    if not hak or hak["failed"]:
        return {}
    out = {}
    for name, key in MEASURES.items():
        peers = [(m[key], peer) for peer, m in medians.items()
                 if peer not in ("hakmem", benchlib.SECURE) and not m["failed"]]
        if peers:
            value, peer = min(peers)
            out[name] = {"peer": peer, "ratio": hak[key] / value}
            if name == "time" and "spread" in hak and "spread" in medians[peer]:
                spread = max(hak["spread"], medians[peer]["spread"])
                out[name].update(spread=spread, noise=abs(hak[key] / value - 1) <= spread)
    return out


def secure_ratios(medians):
    """hakmem-secure / hakmem per measure (above 1: the hardening's cost),
    or {} if either is missing or failed."""
    hak, sec = medians.get("hakmem"), medians.get(benchlib.SECURE)
    if not hak or not sec or hak["failed"] or sec["failed"]:
        return {}
    return {name: sec[key] / hak[key] for name, key in MEASURES.items()}


def print_secure(by_workload):
    """The per-workload hakmem-secure / hakmem ratios and their geomeans."""
    rows = {w: r for w, r in by_workload.items() if r}
    if not rows:
        return
    print(f"\n{benchlib.SECURE} / hakmem per workload (medians; above 1: the hardening's cost)")
    print(f"  {'workload':<15} {'time':>6} {'peak RSS':>9} {'heap RSS':>9}")
    geo = {m: benchlib.geomean(r[m] for r in rows.values()) for m in MEASURES}
    for w, r in list(rows.items()) + [("geomean", geo)]:
        print(f"  {w:<15} {r['time']:6.3f} {r['rss']:9.3f} {r['heap_rss']:9.3f}")


def mib(kb):
    return None if kb is None else kb / 1024


def print_table(workload, medians, ratios, repeats):
    print(f"\n{workload.name}: {workload.about}  ({repeats} runs, medians)")
    header = f"  {'allocator':<13} {'time s':>8} {'spread':>7} {'peak MiB':>9} {'heap MiB':>9}"
    for metric in workload.metrics:
        header += f" {metric.removesuffix('_kb').removeprefix('rss_after_free') or 'after free':>12}"
    header += f"   {'hakmem time ratio':<18} {'peak RSS ratio':<18} {'heap RSS ratio':<18}"
    print(header)
    for alloc, m in medians.items():
        if m["failed"]:
            print(f"  {alloc:<13} {'FAIL':>8}   ({m['failed']} of {repeats} runs {m['status']}, "
                  f"exit {m['exit_code']})")
            continue
        line = (f"  {alloc:<13} {m['time_s']:8.3f} {m['spread'] * 100:6.1f}% {mib(m['rss_kb']):9.1f}"
                f" {mib(m['heap_rss_kb']):9.1f}")
        for metric in workload.metrics:
            v = m["metrics"].get(metric)
            line += f" {fmt(mib(v) if metric.endswith('_kb') else v, '12.1f')}"
        r = ratios.get(alloc)
        if r:
            line += (f"   {r['time']:5.2f} {benchlib.band(r['time']):<12} {r['rss']:5.2f} "
                     f"{benchlib.band(r['rss'], 'smaller'):<12} {r['heap_rss']:5.2f} "
                     f"{benchlib.band(r['heap_rss'], 'smaller'):<12}")
        print(line)


def summary(ratios_by_workload, best_by_workload, peers):
    """Geometric means of hakmem's ratios to each peer and to the best peer
    of each workload, and the workloads where hakmem is > 1.05x the best."""
    out = {"peers": {}, "best_peer": {}, "behind_best": {}}
    for peer in peers:
        rows = [r[peer] for r in ratios_by_workload.values() if peer in r]
        if rows:
            out["peers"][peer] = {m: benchlib.geomean(r[m] for r in rows) for m in MEASURES}
            out["peers"][peer]["workloads"] = len(rows)
    for m in MEASURES:
        rows = {w: b[m] for w, b in best_by_workload.items() if m in b}
        if rows:
            out["best_peer"][m] = benchlib.geomean(r["ratio"] for r in rows.values())
            out["behind_best"][m] = {w: r for w, r in rows.items() if r["ratio"] > 1.05}
    out["best_peer"]["workloads"] = len(best_by_workload)
    return out


def print_summary(summ, best_by_workload, total_workloads):
    print("\nSummary: geometric mean of hakmem / peer over the workloads (< 1: hakmem faster / smaller)")
    if not summ["peers"]:
        print("  (no ratios: no peer measured, or hakmem missing or failed everywhere)")
        return
    print(f"  {'peer':<10} {'time':<17} {'peak RSS':<17} {'heap RSS':<17} workloads")
    rows = list(summ["peers"].items()) + [("best peer", summ["best_peer"])]
    for peer, s in rows:
        print(f"  {peer:<10} {s['time']:5.3f} {benchlib.band(s['time']):<11} {s['rss']:5.3f} "
              f"{benchlib.band(s['rss'], 'smaller'):<11} {s['heap_rss']:5.3f} "
              f"{benchlib.band(s['heap_rss'], 'smaller'):<11} {s['workloads']} of {total_workloads}")
    print("\nhakmem / best peer per workload (the peer with the lowest median of that measure)")
    print(f"  {'workload':<15} {'time':<22} {'peak RSS':<22} {'heap RSS':<22}")
    for w, b in best_by_workload.items():
        cells = [f"{b[m]['ratio']:5.2f} {b[m]['peer']:<16}" for m in MEASURES]
        print(f"  {w:<15} " + " ".join(cells))
    for m, label in (("time", "time"), ("rss", "peak RSS"), ("heap_rss", "heap RSS")):
        behind = summ["behind_best"].get(m, {})
        names = ", ".join(f"{w} {r['ratio']:.2f}x {r['peer']}"
                          + (f" (within the {r['spread']:.0%} spread: noise)" if r.get("noise") else "")
                          for w, r in behind.items()) or "none"
        print(f"hakmem > 1.05x the best peer in {label}: {names}")


def check_baseline(baseline, result, workloads, allocators, repeats, rng, ctx):
    """Judges each workload against the baseline like compare.py; a flagged
    workload is measured again and counts only if the re-run is flagged
    too; a geometric mean flagged as a regression counts as it is. Returns
    the record stored in the result (None if no check); its "regressions"
    fail the run."""
    if not baseline.exists():
        print(f"\nno baseline ({baseline}): no regression check")
        return None
    base = compare.load(baseline)
    if base.get("mode") != result["mode"]:
        print(f"\nthe baseline is a {base.get('mode')} run and this a {result['mode']} one: no regression check")
        return None
    if base.get("repeats") != result["repeats"]:
        # As compare.py: medians and spreads of other numbers of runs differ.
        print(f"\nthe baseline ran {base.get('repeats')} rounds per workload and this run {result['repeats']}: "
              "no regression check")
        return None
    # Only workloads that ran with the same arguments (sizes) as in the baseline.
    base_argv, argv = compare.workload_argv(base), compare.workload_argv(result)
    names = [w.name for w in workloads if base_argv.get(w.name) is not None and base_argv[w.name] == argv[w.name]]
    rows, geo = compare.judge(base, result, compare.PEERS, workloads=names)
    flagged = sorted({row[0] for row in rows if row[-1] == "REGRESSION"})
    compared = sorted({row[0] for row in rows})
    print(f"\nAgainst the baseline ({base.get('commit')}; hakmem / {compare.reference_name(compare.PEERS)} paired by round, "
          f"threshold the larger of {compare.THRESHOLD:.0%} and the spread, "
          f"geometric mean +{compare.GEOMEAN_THRESHOLD:.0%}): {len(compared)} workloads compared"
          + (f"; not comparable (absent from the baseline, other arguments, or no data of hakmem and its peers): "
             f"{', '.join(w.name for w in workloads if w.name not in compared)}" if len(compared) < len(workloads) else ""))
    rerun = {}
    for name in flagged:
        print(f"  {name}: flagged ({', '.join(f'{r[1]} x{r[4]:.3f}' for r in rows if r[0] == name and r[-1] == 'REGRESSION')}); "
              "re-running to confirm")
        w = next(x for x in workloads if x.name == name)
        rerun[name], _, _ = measure(w, allocators, repeats, rng, ctx)
    if not flagged:
        print("  no workload flagged")
    # The verdict, as compare.py's: the re-run of a flagged workload takes
    # the place of its first run, so it counts only if the re-run is flagged
    # too; the geometric mean over all compared workloads counts as it is
    # (a uniform slowdown flags no single workload).
    final = dict(result, runs=[r for r in result["runs"] if r["workload"] not in rerun]
                 + [r for runs in rerun.values() for r in runs])
    rows, geo = compare.judge(base, final, compare.PEERS, workloads=names)
    confirmed = sorted({row[0] for row in rows if row[-1] == "REGRESSION"})
    for name in flagged:
        still = [r for r in rows if r[0] == name and r[-1] == "REGRESSION"]
        print(f"  {name}: " + ("CONFIRMED regression: " + ", ".join(f"{r[1]} x{r[4]:.3f}" for r in still)
                               if still else "not confirmed by the re-run (noise)"))
    for m, g, n, verdict in geo:
        print(f"  geomean change {m:<9} {g:6.3f} over {n} workloads  {verdict}"
              + (" (with the re-runs)" if rerun else ""))
    found = compare.regressions(rows, geo)
    print(f"  regression(s): {', '.join(found)}" if found else "  no regression")
    return {"baseline": base.get("commit"), "compared": compared, "flagged": flagged, "confirmed": confirmed,
            "geomean": [{"measure": m, "change": g, "workloads": n, "verdict": v} for m, g, n, v in geo],
            "regressions": found, "rerun_runs": rerun}


def exit_status(runs, verify, excluded, check):
    """1 if a run failed, hakmem's or a kept peer's verification pass
    failed, or the baseline check found a regression (a confirmed workload
    or a geometric mean, compare.regressions), else 0."""
    failed = (sum(1 for r in runs if r["status"] != "ok")
              + sum(1 for a, v in verify.items() if v["status"] != "ok" and a not in excluded))
    if failed:
        print(f"{failed} failed run(s)", file=sys.stderr)
    found = check["regressions"] if check else []
    if found:
        print(f"regression(s) against the baseline: {', '.join(found)}", file=sys.stderr)
    return 1 if failed or found else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 repeats, small sizes (~5 min)")
    ap.add_argument("--repeats", type=int, help="runs per workload and allocator (default 5, quick 2)")
    ap.add_argument("--only", help="comma-separated workload names")
    ap.add_argument("--allocators", help=f"comma-separated allocator names (default: all found but {benchlib.SECURE})")
    ap.add_argument("--seed", type=int, default=1, help="seed of the per-round allocator order (default 1)")
    ap.add_argument("--build", default=str(ROOT / "build"), help="CMake build directory (default build/)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds before a run counts as hung")
    ap.add_argument("--save-baseline", action="store_true", help=f"also copy the result to {BASELINE.relative_to(ROOT)}")
    ap.add_argument("--baseline", default=str(BASELINE), help=f"result to judge the run against (default {BASELINE.relative_to(ROOT)})")
    ap.add_argument("--no-baseline-check", action="store_true", help="do not judge the run against the baseline")
    ap.add_argument("--keep-unverified", action="store_true",
                    help="keep a peer that failed the verification pass (default: left out)")
    args = ap.parse_args()
    repeats = args.repeats or (2 if args.quick else 5)

    build = Path(args.build).resolve()
    bench_bin = build / "bench"
    launcher = bench_bin / "launch"
    if not launcher.exists():
        sys.exit(f"run.py: {launcher} not found; build the workloads first (`make build`)")
    # The commit is taken once, now: the build being measured (hakmem's
    # version and the result's commit are this one value).
    source = benchlib.source_dir(build)
    commit = benchlib.git_commit(source)
    stale, newest_source = benchlib.stale_build(build, source)
    stale_note = (f"warning: {build / 'libhakmem.so'} is older than {source / str(newest_source)}: the library "
                  f"measured is not built from the source of {commit}; rebuild it (`make build`)") if stale else ""
    if stale:
        print(stale_note, file=sys.stderr)
    allocators = benchlib.find_allocators(build, note=lambda s: print(s, file=sys.stderr), hakmem_version=commit,
                                          secure=benchlib.SECURE in (args.allocators or "").split(","))
    if args.allocators:
        wanted = args.allocators.split(",")
        unknown = set(wanted) - {a.name for a in allocators}
        if unknown:
            sys.exit(f"run.py: allocator(s) not available: {', '.join(sorted(unknown))}")
        allocators = [a for a in allocators if a.name in wanted]
    workloads = WORKLOADS
    if args.only:
        wanted = args.only.split(",")
        unknown = set(wanted) - {w.name for w in WORKLOADS}
        if unknown:
            sys.exit(f"run.py: unknown workload(s): {', '.join(sorted(unknown))}")
        workloads = [w for w in WORKLOADS if w.name in wanted]
    if any(w.redis for w in workloads) and not redisload.available():
        print("note: redis-server/redis-benchmark not installed; the redis workload is skipped "
              "(`make bench-deps`)", file=sys.stderr)
        workloads = [w for w in workloads if not w.redis]
    if any(w.sqlite for w in workloads) and not sqlload.available():
        print("note: sqlite3 not installed; the sqlite workload is skipped (`make bench-deps`)", file=sys.stderr)
        workloads = [w for w in workloads if not w.sqlite]

    rng = random.Random(args.seed)
    _, scrubbed_here = benchlib.clean_env()
    load_before = benchlib.load_average()
    scratch = tempfile.TemporaryDirectory(prefix="hakmem-bench-")
    ctx = Context(launcher, bench_bin, args.timeout, args.quick, scratch.name, {})
    ctx.footprint = footprints(allocators, ctx)
    verify = verification(allocators, ctx)
    # A peer that hands out wrong memory is no reference: it is left out
    # (hakmem and its variant never are: their failure is a FAIL of the run).
    excluded = {a.name: verify[a.name]["stderr"].strip()[-300:] for a in allocators
                if a.name not in ("hakmem", benchlib.SECURE) and verify[a.name]["status"] != "ok"
                and not args.keep_unverified}
    for name, why in excluded.items():
        print(f"note: {name} failed the verification pass and is left out of the comparison "
              f"(--keep-unverified keeps it): {why}", file=sys.stderr)
    allocators = [a for a in allocators if a.name not in excluded]
    ctx.footprint = {kind: {a.name: sizes[a.name] for a in allocators} for kind, sizes in ctx.footprint.items()}

    runs, medians, ratios, best, orders, warmups, secure = [], {}, {}, {}, {}, {}, {}
    for w in workloads:
        mine, orders[w.name], warmups[w.name] = measure(w, allocators, repeats, rng, ctx)
        runs += mine
        medians[w.name] = summarise(mine, [a.name for a in allocators])
        ratios[w.name] = ratios_to_peers(medians[w.name], w.metrics)
        best[w.name] = best_peer(medians[w.name])
        secure[w.name] = secure_ratios(medians[w.name])
        print_table(w, medians[w.name], ratios[w.name], repeats)

    peers = [a.name for a in allocators if a.name not in ("hakmem", benchlib.SECURE)]
    summ = summary(ratios, {w: b for w, b in best.items() if b}, peers)
    print_summary(summ, {w: b for w, b in best.items() if b}, len(workloads))
    print_secure(secure)
    for name, why in excluded.items():
        print(f"left out: {name}, which failed the verification pass: {why}")

    result = {"machine": benchlib.machine_info(), "commit": commit, "date": benchlib.now_stamp(),
              "mode": "quick" if args.quick else "full", "repeats": repeats,
              "allocators": {a.name: a.preload for a in allocators},
              "workloads": [{"name": w.name, "about": w.about, "metrics": list(w.metrics),
                             "argv": w.quick if args.quick else w.full, "env": w.env,
                             "time": w.time_metric or "wall"} for w in workloads],
              "verify": verify, "excluded": excluded, "footprint_kb": ctx.footprint,
              "runs": runs, "medians": medians, "ratios": ratios, "best_peer": best, "summary": summ,
              "secure_ratios": secure}
    check = None if args.no_baseline_check else check_baseline(Path(args.baseline), result, workloads, allocators, repeats, rng, ctx)
    result["baseline_check"] = check
    result["conditions"] = {
        "seed": args.seed, "orders": orders, "warmup": warmups,
        "scrubbed_patterns": benchlib.SCRUBBED, "scrubbed_from_caller": scrubbed_here,
        "env_set": {"LD_PRELOAD": "the allocator's library (none for glibc; libc.so.6 for redis)",
                    **{f"{w.name}": w.env for w in workloads if w.env}},
        "versions": {a.name: a.version for a in allocators},
        "hakmem": {"commit": commit, "source": str(source), "build_type": benchlib.build_type(build),
                   "library": next((a.preload for a in allocators if a.name == "hakmem"), None),
                   "newest_source": newest_source},
        "stale_build": stale,
        "heap_floor_kb": HEAP_FLOOR_KB, "timeout_s": args.timeout,
        "loadavg_before": load_before, "loadavg_after": benchlib.load_average()}
    scratch.cleanup()

    RESULTS_DIR.mkdir(exist_ok=True)
    stem = RESULTS_DIR / f"{benchlib.now_stamp()}-{commit}"
    json_path = stem.with_suffix(".json")
    json_path.write_text(json.dumps(result, indent=1) + "\n")
    svg_path = stem.with_suffix(".svg")
    svgchart.write(svg_path, result)
    print(f"\nload average before {load_before}, after {result['conditions']['loadavg_after']}")
    print(f"results: {json_path.relative_to(ROOT)}\nchart:   {svg_path.relative_to(ROOT)}")
    if stale:
        print(stale_note, file=sys.stderr)
    if args.save_baseline:
        BASELINE.parent.mkdir(exist_ok=True)
        shutil.copyfile(json_path, BASELINE)
        print(f"baseline: {BASELINE.relative_to(ROOT)}")
    return exit_status(runs, verify, excluded, check)


if __name__ == "__main__":
    sys.exit(main())
