#!/usr/bin/env python3
"""Runs every benchmark workload under every allocator and reports hakmem
against its peers. See bench/README.md.

    python3 bench/run.py [--quick] [--repeats N] [--only NAME,...]
                         [--build DIR] [--save-baseline]
"""
import argparse
import json
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path

import benchlib
import redisload
import svgchart
from benchlib import BENCH_DIR, ROOT, fmt

RESULTS_DIR = BENCH_DIR / "results"
BASELINE = BENCH_DIR / "baselines" / "baseline.json"


@dataclass
class Workload:
    name: str
    about: str        # what it does and which hakmem path it exercises
    full: list        # program (in build/bench, or a .py in bench/) and arguments
    quick: list       # the same, sized for --quick
    metric: str = ""  # an extra number the workload prints as metric=value
    env: dict = field(default_factory=dict)
    redis: bool = False  # full/quick hold the request count instead


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
    Workload("memreturn", "256 MiB (quick: 64) of 16 B-4 KiB blocks freed, then small work: memory returned to the OS",
             ["memreturn", "--total=256M", "--work=4M"],
             ["memreturn", "--total=64M", "--work=1M"],
             metric="rss_after_free_kb"),
    Workload("python", "CPython (PYTHONMALLOC=malloc) dict/list/string churn: a real program's size mix",
             ["pyalloc.py", "--rounds=6", "--items=30000"],
             ["pyalloc.py", "--rounds=2", "--items=15000"],
             env={"PYTHONMALLOC": "malloc"}),
    Workload("redis", "redis-server under redis-benchmark (9 commands, 256 B values) on loopback",
             [20000], [5000], metric="requests_per_s", redis=True),
]


def program_argv(spec, bench_bin):
    program, args = spec[0], spec[1:]
    if program.endswith(".py"):
        return [sys.executable, str(BENCH_DIR / program)] + args
    return [str(bench_bin / program)] + args


def run_once(workload, alloc, quick, launcher, bench_bin, timeout):
    preload = alloc.preload
    if workload.redis:
        if alloc.name == "glibc":
            preload = benchlib.glibc_path()
        return redisload.run(launcher, preload, (workload.quick if quick else workload.full)[0], timeout)
    argv = program_argv(workload.quick if quick else workload.full, bench_bin)
    return benchlib.Launched(launcher, argv, preload, env=workload.env).wait(timeout)


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
        times = [r["wall_s"] for r in mine]
        metrics = {k: benchlib.median(r["metrics"][k] for r in mine)
                   for k in mine[0]["metrics"] if all(k in r["metrics"] for r in mine)}
        result[alloc] = {"failed": 0, "time_s": benchlib.median(times),
                         "spread": (max(times) - min(times)) / benchlib.median(times),
                         "rss_kb": benchlib.median(r["maxrss_kb"] for r in mine), "metrics": metrics}
    return result


def ratios_to_peers(medians, metric):
    """hakmem / peer for time, peak RSS and the workload's extra metric."""
    hak = medians.get("hakmem")
    if not hak or hak["failed"]:
        return {}
    out = {}
    for peer, m in medians.items():
        if peer == "hakmem" or m["failed"]:
            continue
        r = {"time": hak["time_s"] / m["time_s"], "rss": hak["rss_kb"] / m["rss_kb"]}
        if metric and m["metrics"].get(metric) and metric in hak["metrics"]:
            r[metric] = hak["metrics"][metric] / m["metrics"][metric]
        out[peer] = r
    return out


def print_table(workload, medians, ratios, repeats):
    print(f"\n{workload.name}: {workload.about}  ({repeats} runs, medians)")
    extra = workload.metric
    header = f"  {'allocator':<10} {'time s':>8} {'spread':>7} {'peak RSS MiB':>13}"
    if extra:
        header += f" {extra:>18}"
    header += f"   {'hakmem time ratio':<22} {'hakmem RSS ratio':<22}"
    print(header)
    for alloc, m in medians.items():
        if m["failed"]:
            print(f"  {alloc:<10} {'FAIL':>8}   ({m['failed']} of {repeats} runs {m['status']}, "
                  f"exit {m['exit_code']})")
            continue
        line = f"  {alloc:<10} {m['time_s']:8.3f} {m['spread'] * 100:6.1f}% {m['rss_kb'] / 1024:13.1f}"
        if extra:
            line += f" {fmt(m['metrics'].get(extra), '18.0f')}"
        r = ratios.get(alloc)
        if r:
            line += f"   {r['time']:5.2f} {benchlib.band(r['time']):<16} {r['rss']:5.2f} {benchlib.band(r['rss'], 'smaller'):<16}"
        print(line)


def summary(ratios_by_workload, peers):
    """Geometric mean of hakmem's ratios to each peer over the workloads."""
    out = {}
    for peer in peers:
        rows = [r[peer] for r in ratios_by_workload.values() if peer in r]
        if rows:
            out[peer] = {"time": benchlib.geomean(r["time"] for r in rows),
                         "rss": benchlib.geomean(r["rss"] for r in rows), "workloads": len(rows)}
    return out


def print_summary(summ, total_workloads):
    print(f"\nSummary: geometric mean of hakmem / peer over the workloads (< 1: hakmem faster / smaller)")
    if not summ:
        print("  (no ratios: hakmem missing or failed everywhere)")
        return
    print(f"  {'peer':<10} {'time':<17} {'peak RSS':<17} workloads")
    for peer, s in summ.items():
        print(f"  {peer:<10} {s['time']:5.3f} {benchlib.band(s['time']):<11} {s['rss']:5.3f} "
              f"{benchlib.band(s['rss'], 'smaller'):<11} {s['workloads']} of {total_workloads}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="smoke run: 2 repeats, small sizes (~3 min)")
    ap.add_argument("--repeats", type=int, help="runs per workload and allocator (default 5, quick 2)")
    ap.add_argument("--only", help="comma-separated workload names")
    ap.add_argument("--allocators", help="comma-separated allocator names (default: all found)")
    ap.add_argument("--build", default=str(ROOT / "build"), help="CMake build directory (default build/)")
    ap.add_argument("--timeout", type=float, default=120, help="seconds before a run counts as hung")
    ap.add_argument("--save-baseline", action="store_true", help=f"also copy the result to {BASELINE.relative_to(ROOT)}")
    args = ap.parse_args()
    repeats = args.repeats or (2 if args.quick else 5)

    build = Path(args.build)
    bench_bin = build / "bench"
    launcher = bench_bin / "launch"
    if not launcher.exists():
        sys.exit(f"run.py: {launcher} not found; build the workloads first (`make build`)")
    allocators = benchlib.find_allocators(build, note=lambda s: print(s, file=sys.stderr))
    if args.allocators:
        wanted = args.allocators.split(",")
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

    runs, medians, ratios = [], {}, {}
    for w in workloads:
        mine = []
        # Allocators interleaved (A B C D E A B C ...) so drift hits all alike.
        for rep in range(1, repeats + 1):
            for alloc in allocators:
                benchlib.progress(f"{w.name}: {alloc.name}, run {rep} of {repeats}")
                o = run_once(w, alloc, args.quick, launcher, bench_bin, args.timeout)
                mine.append({"workload": w.name, "allocator": alloc.name, "rep": rep, "status": o.status,
                             "exit_code": o.exit_code, "wall_s": o.wall_s, "maxrss_kb": o.maxrss_kb,
                             "metrics": o.metrics, "stderr": o.stderr[-2000:]})
                if o.status != "ok":
                    benchlib.progress_done()
                    print(f"FAIL {w.name} under {alloc.name} (run {rep}): {o.status}, exit {o.exit_code}\n"
                          f"  {o.stderr.strip()[-500:]}", file=sys.stderr)
        benchlib.progress_done()
        runs += mine
        medians[w.name] = summarise(mine, [a.name for a in allocators])
        ratios[w.name] = ratios_to_peers(medians[w.name], w.metric)
        print_table(w, medians[w.name], ratios[w.name], repeats)

    peers = [a.name for a in allocators if a.name != "hakmem"]
    summ = summary(ratios, peers)
    print_summary(summ, len(workloads))

    commit = benchlib.git_commit()
    RESULTS_DIR.mkdir(exist_ok=True)
    stem = RESULTS_DIR / f"{benchlib.now_stamp()}-{commit}"
    result = {"machine": benchlib.machine_info(), "commit": commit, "date": benchlib.now_stamp(),
              "mode": "quick" if args.quick else "full", "repeats": repeats,
              "allocators": {a.name: a.preload for a in allocators},
              "workloads": [{"name": w.name, "about": w.about, "metric": w.metric} for w in workloads],
              "runs": runs, "medians": medians, "ratios": ratios, "summary": summ}
    json_path = stem.with_suffix(".json")
    json_path.write_text(json.dumps(result, indent=1) + "\n")
    svg_path = stem.with_suffix(".svg")
    svgchart.write(svg_path, result)
    print(f"\nresults: {json_path.relative_to(ROOT)}\nchart:   {svg_path.relative_to(ROOT)}")
    if args.save_baseline:
        BASELINE.parent.mkdir(exist_ok=True)
        shutil.copyfile(json_path, BASELINE)
        print(f"baseline: {BASELINE.relative_to(ROOT)}")
    failed = sum(1 for r in runs if r["status"] != "ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
