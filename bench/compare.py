#!/usr/bin/env python3
"""Compares two result files of bench/run.py and exits non-zero unless the
new run is complete, comparable with the old one and shows no regression
of hakmem.

It fails closed (exit 2, listing every problem) when the runs cannot be
compared in full: a quick run against a full one, runs of different
repeats, an allocator or workload present in one run only, a (workload,
allocator) with fewer runs than its result's repeats, an unknown --ref, a
workload run with other arguments, a FAIL in either run (any allocator,
any workload, or the verification pass of a compared allocator), or a
measure (time, peak RSS, heap RSS, a workload's own metric) missing from
any run.

Each workload is judged on hakmem's ratio to its peers measured in the
same run, round by round: the runner runs every allocator once per round,
so the ratio of hakmem's run to a peer's run of the same round cancels
machine speed and drift. Per round the median of hakmem's ratios to every
peer both runs have is taken (one peer's own change then moves no verdict),
or with --ref NAME the ratio to that one peer. The median of those paired
ratios is compared, new / old. The threshold is each workload's own noise:
the larger of --threshold (10%) and the spread (max - min) / median of its
paired ratios in either run. Besides, the geometric mean of the changes
over all workloads must stay within --geomean-threshold (5%) for time, peak
RSS and heap RSS, so a uniform small slowdown cannot pass. A regression
exits 1. run.py's baseline check uses the same judge() and regressions().

    python3 bench/compare.py [OLD.json [NEW.json]] [--threshold 0.10]
                             [--geomean-threshold 0.05] [--ref peers|NAME]

OLD defaults to bench/baselines/baseline.json, NEW to the newest file in
bench/results/.
"""
import argparse
import json
import statistics
import sys
from pathlib import Path

from benchlib import BENCH_DIR, geomean

# Measures every workload has: name -> key in a raw run.
BASE_MEASURES = {"time": "time_s", "rss": "maxrss_kb", "heap_rss": "heap_rss_kb"}
GEOMEAN_MEASURES = ["time", "rss", "heap_rss"]
# A workload's own metric, and whether more of it is better (else less is).
HIGHER_IS_BETTER = {"requests_per_s"}
# Defaults of the gates, shared with run.py's baseline check.
THRESHOLD = 0.10           # least worsening of one workload (raised to its spread)
GEOMEAN_THRESHOLD = 0.05   # least worsening of the geometric mean over the workloads
PEERS = "peers"            # the default reference: every peer both runs have (paired_ratios)


def load(path):
    return json.loads(Path(path).read_text())


def newest_result():
    files = sorted((BENCH_DIR / "results").glob("*.json"), key=lambda p: p.stat().st_mtime)
    if not files:
        sys.exit("compare.py: no results in bench/results/; run `make bench` first")
    return files[-1]


def workload_metrics(result):
    """{workload: [its own metrics]}; older results name one as "metric"."""
    out = {}
    for w in result.get("workloads", []):
        metrics = w.get("metrics")
        if metrics is None:
            metrics = [w["metric"]] if w.get("metric") else []
        out[w["name"]] = list(metrics)
    return out


def workload_argv(result):
    """{workload: the program and arguments it ran with, or None}."""
    return {w["name"]: w.get("argv") for w in result.get("workloads", [])}


def run_value(run, measure):
    """One raw run's value of a measure, or None if the run lacks it."""
    if measure == "time":
        # time_s is the timed part (wall time unless the workload reports
        # its own); results from before it existed only have wall_s.
        return run.get("time_s", run.get("wall_s"))
    if measure in BASE_MEASURES:
        return run.get(BASE_MEASURES[measure])
    return run.get("metrics", {}).get(measure)


def runs_of(result, workload, allocator):
    return [r for r in result.get("runs", []) if r["workload"] == workload and r["allocator"] == allocator]


def rounds_problem(runs, repeats):
    """What is wrong with the rounds of one (workload, allocator)'s runs
    (each of rounds 1..repeats exactly once), or None."""
    if repeats is None:
        return None  # reported once for the whole result
    seen = [r.get("rep") for r in runs]
    if len(seen) == repeats and set(seen) == set(range(1, repeats + 1)):
        return None
    missing = sorted(set(range(1, repeats + 1)) - set(seen))
    twice = sorted({x for x in seen if seen.count(x) > 1}, key=str)
    other = sorted({x for x in seen if x not in range(1, repeats + 1)}, key=str)
    why = ([f"round(s) {', '.join(map(str, missing))} missing"] if missing else []) \
        + ([f"round(s) {', '.join(map(str, twice))} more than once"] if twice else []) \
        + ([f"round(s) {', '.join(map(str, other))} outside 1..{repeats}"] if other else [])
    return f"has {len(seen)} run(s) for {repeats} rounds ({'; '.join(why)})"


def problems(old, new, ref, labels=("OLD", "NEW")):
    """Everything that keeps the two runs from being compared in full, as
    sentences; empty if they can be."""
    found = []
    sides = list(zip(labels, (old, new)))
    if old.get("mode") != new.get("mode"):
        found.append(f"{labels[0]} is a {old.get('mode')} run and {labels[1]} a {new.get('mode')} run: "
                     "sizes differ, so ratios are not comparable")
    allocs = {label: set(r.get("allocators", {})) for label, r in sides}
    for label, r in sides:
        for name in ("hakmem",) + (() if ref == PEERS else (ref,)):
            if name not in allocs[label]:
                what = "unknown --ref" if name == ref and name != "hakmem" else "no"
                found.append(f"{label} has {what} {name} (its allocators: {', '.join(sorted(allocs[label]))})")
    if ref == PEERS and not reference_peers(old, new, ref):
        found.append("the runs have no peer of hakmem in common")
    for a in sorted(allocs[labels[0]] ^ allocs[labels[1]]):
        missing_in = labels[1] if a in allocs[labels[0]] else labels[0]
        found.append(f"allocator {a} is absent from {missing_in}")

    specs = {label: workload_metrics(r) for label, r in sides}
    names = {label: set(specs[label]) for label, _ in sides}
    for w in sorted(names[labels[0]] ^ names[labels[1]]):
        missing_in = labels[1] if w in names[labels[0]] else labels[0]
        found.append(f"workload {w} is absent from {missing_in}")

    for label, r in sides:
        verify = r.get("verify")
        if verify is None:
            found.append(f"{label} has no verification pass record (made before the pass existed)")
            continue
        for a, v in sorted(verify.items()):
            # A peer run.py left out for failing the pass is not compared (if
            # only one run left it out, the allocator check above says so).
            if v.get("status") != "ok" and a in allocs[label]:
                found.append(f"{label}: verification pass FAILed under {a}: {v.get('stderr', '').strip()[-200:]}")

    # Every (workload, allocator) must have one run per round: a median
    # and a spread of fewer runs (one of five kept, or 2 rounds against 5)
    # are not the same statistic.
    reps = {label: r.get("repeats") for label, r in sides}
    for label, _ in sides:
        if not isinstance(reps[label], int) or reps[label] < 1:
            found.append(f"{label} does not record its repeats (rounds per workload): {reps[label]!r}")
            reps[label] = None
    if None not in reps.values() and reps[labels[0]] != reps[labels[1]]:
        found.append(f"{labels[0]} ran {reps[labels[0]]} rounds per workload and {labels[1]} {reps[labels[1]]}: "
                     "medians and spreads over different numbers of runs are not comparable")

    common = sorted(names[labels[0]] & names[labels[1]])
    argvs = {label: workload_argv(r) for label, r in sides}
    for label, _ in sides:
        if any(argvs[label].get(w) is None for w in common):
            found.append(f"{label} does not record the workloads' arguments (made before they were recorded)")
    for w in common:
        a_old, a_new = argvs[labels[0]].get(w), argvs[labels[1]].get(w)
        if a_old is not None and a_new is not None and a_old != a_new:
            found.append(f"workload {w} ran with other arguments: {labels[0]} {a_old}, {labels[1]} {a_new}")
    missing = {}  # (label, measure) -> workloads lacking it
    for label, r in sides:
        for w in common:
            measures = list(BASE_MEASURES) + sorted(set(specs[labels[0]][w]) | set(specs[labels[1]][w]))
            for a in sorted(allocs[label]):
                mine = runs_of(r, w, a)
                if not mine:
                    found.append(f"{label}: {w} has no runs under {a}")
                    continue
                incomplete = rounds_problem(mine, reps[label])
                if incomplete:
                    found.append(f"{label}: {w} under {a} {incomplete}")
                failed = [x for x in mine if x.get("status") != "ok"]
                if failed:
                    found.append(f"{label}: {w} FAILed under {a} ({len(failed)} of {len(mine)} runs, "
                                 f"{failed[0].get('status')}, exit {failed[0].get('exit_code')})")
                    continue
                for m in measures:
                    if any(run_value(x, m) is None for x in mine):
                        missing.setdefault((label, m), set()).add(w)
    for (label, m), ws in sorted(missing.items()):
        which = "every common workload" if len(ws) == len(common) else ", ".join(sorted(ws))
        found.append(f"{label} lacks the measure {m} in {which}")
    return found


def reference_peers(old, new, ref):
    """The allocators hakmem's runs are paired with: `ref`, or for PEERS
    every allocator but hakmem's variants that both runs have."""
    if ref != PEERS:
        return [ref]
    common = set(old.get("allocators", {})) & set(new.get("allocators", {}))
    return sorted(a for a in common if not a.startswith("hakmem"))


def reference_name(ref):
    """How reports name the reference."""
    return "its peers (the median of its ratios to each)" if ref == PEERS else ref


def by_round(result, workload, alloc, measure):
    """An allocator's value of the measure per round, of its successful runs."""
    return {r["rep"]: run_value(r, measure) for r in runs_of(result, workload, alloc) if r.get("status") == "ok"}


def complete_peers(old, new, workload, refs, measure):
    """The peers of `refs` with a value in every round hakmem has one, in
    both runs: a peer that failed or lacks the measure somewhere is left out
    of the workload's reference rather than taking those rounds with it
    (which could hide hakmem's regression; compare.py's problems() names
    the failure either way)."""
    def complete(result, ref):
        hak, peer = by_round(result, workload, "hakmem", measure), by_round(result, workload, ref, measure)
        return all(peer.get(rnd) is not None and peer[rnd] > 0 for rnd, h in hak.items() if h is not None and h > 0)
    return [ref for ref in refs if complete(old, ref) and complete(new, ref)]


def paired_ratios(result, workload, refs, measure):
    """hakmem's ratio to the reference per round (runs paired by their round
    number), oriented so that above 1 is worse for hakmem: to the one peer
    of `refs`, or the median of its ratios to each (so that one peer's own
    change, such as glibc's Larson with sized deletes taking 0.68 s in one
    session and 1.6 s in another, moves no verdict). A round any of them
    lacks is left out."""
    hak = by_round(result, workload, "hakmem", measure)
    peers = [by_round(result, workload, ref, measure) for ref in refs]
    out = []
    for rnd in sorted(hak):
        h, ps = hak[rnd], [peer.get(rnd) for peer in peers]
        if h is None or h <= 0 or not ps or any(p is None or p <= 0 for p in ps):
            continue
        out.append(statistics.median(p / h if measure in HIGHER_IS_BETTER else h / p for p in ps))
    return out


def noise(ratios):
    med = statistics.median(ratios)
    return (max(ratios) - min(ratios)) / med


def judge(old, new, ref, threshold=THRESHOLD, geomean_threshold=GEOMEAN_THRESHOLD, workloads=None):
    """Rows of (workload, measure, old ratio, new ratio, change, allowed,
    verdict) for every workload and measure both runs have, and the
    geometric-mean rows. Verdicts: "ok", "improved", "REGRESSION"."""
    specs_old, specs_new = workload_metrics(old), workload_metrics(new)
    names = [w for w in specs_new if w in specs_old and (workloads is None or w in workloads)]
    refs = reference_peers(old, new, ref)
    rows, changes = [], {m: [] for m in GEOMEAN_MEASURES}
    for w in names:
        for m in list(BASE_MEASURES) + sorted(set(specs_old[w]) & set(specs_new[w])):
            present = complete_peers(old, new, w, refs, m) if ref == PEERS else refs
            r_old, r_new = paired_ratios(old, w, present, m), paired_ratios(new, w, present, m)
            if not r_old or not r_new:
                continue
            med_old, med_new = statistics.median(r_old), statistics.median(r_new)
            change = med_new / med_old
            allowed = max(threshold, noise(r_old), noise(r_new))
            verdict = "REGRESSION" if change > 1 + allowed else "improved" if change < 1 / (1 + allowed) else "ok"
            rows.append((w, m, med_old, med_new, change, allowed, verdict))
            if m in changes:
                changes[m].append(change)
    geo = []
    for m, values in changes.items():
        if values:
            g = geomean(values)
            verdict = "REGRESSION" if g > 1 + geomean_threshold else "improved" if g < 1 - geomean_threshold else "ok"
            geo.append((m, g, len(values), verdict))
    return rows, geo


def print_judgement(rows, geo, geomean_threshold):
    print(f"  {'workload':<15} {'measure':<24} {'old ratio':>9} {'new ratio':>9} {'change':>7} {'allowed':>8}  verdict")
    for w, m, r_old, r_new, change, allowed, verdict in rows:
        print(f"  {w:<15} {m:<24} {r_old:9.3f} {r_new:9.3f} {change:7.3f} {'+' + format(allowed, '.0%'):>8}  {verdict}")
    print(f"\n  geometric mean of the changes (allowed +{geomean_threshold:.0%}):")
    for m, g, n, verdict in geo:
        print(f"  {m:<15} {g:7.3f} over {n} workloads  {verdict}")


def regressions(rows, geo):
    """The regressions in judge()'s verdicts, single workloads and the
    geometric means alike; any of them fails the comparison (compare.py
    exits 1, run.py's baseline check too)."""
    return ([f"{w} {m} x{change:.3f}" for w, m, _, _, change, _, v in rows if v == "REGRESSION"]
            + [f"geomean {m} x{g:.3f}" for m, g, _, v in geo if v == "REGRESSION"])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", nargs="?", default=str(BENCH_DIR / "baselines" / "baseline.json"))
    ap.add_argument("new", nargs="?")
    ap.add_argument("--threshold", type=float, default=THRESHOLD,
                    help=f"least worsening of a workload counted as a regression (default {THRESHOLD}); "
                         "raised to the workload's measured spread")
    ap.add_argument("--geomean-threshold", type=float, default=GEOMEAN_THRESHOLD,
                    help="worsening of the geometric mean over all workloads counted as a regression "
                         f"(default {GEOMEAN_THRESHOLD})")
    ap.add_argument("--ref", default=PEERS,
                    help=f"peer that hakmem's ratio is taken to (default {PEERS}: the median of its ratios "
                         "to every peer both runs have)")
    args = ap.parse_args(argv)
    new_path = args.new or newest_result()
    for path in (args.old, new_path):
        if not Path(path).exists():
            print(f"compare.py: {path} not found (make a baseline with `bench/run.py --save-baseline`)")
            return 2
    old, new = load(args.old), load(new_path)
    print(f"OLD: {args.old} ({old.get('commit')}, {old.get('mode')})\n"
          f"NEW: {new_path} ({new.get('commit')}, {new.get('mode')})")
    print(f"hakmem / {reference_name(args.ref)} paired by round; change = new / old of the median ratio; "
          f"a regression if change > 1 + allowed (the larger of {args.threshold:.0%} and the spread of the runs)\n")

    rows, geo = judge(old, new, args.ref, args.threshold, args.geomean_threshold)
    print_judgement(rows, geo, args.geomean_threshold)
    found = regressions(rows, geo)
    if found:
        print(f"\n{len(found)} regression(s): {', '.join(found)}")
    blockers = problems(old, new, args.ref)
    if blockers:
        print(f"\nINCOMPLETE: the runs cannot be compared in full ({len(blockers)} problem(s)):")
        for b in blockers:
            print(f"  - {b}")
        return 2
    if found:
        return 1
    print("\nno regression")
    return 0


if __name__ == "__main__":
    sys.exit(main())
