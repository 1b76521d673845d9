#!/usr/bin/env python3
"""Compares two result files of bench/run.py workload by workload and exits
1 if hakmem regressed beyond the threshold in any of them.

The primary measure is hakmem's ratio to a reference peer measured in the
same run (default glibc), so a slower or faster machine cancels out; the
absolute change of hakmem's own median is shown beside it for information.
Time, peak RSS and each workload's own metric (rss_after_free_kb,
requests_per_s) are compared. A workload missing from the new run counts as
a regression; a new run without hakmem is an error.

    python3 bench/compare.py [OLD.json [NEW.json]] [--threshold 0.10] [--ref glibc]

OLD defaults to bench/baselines/baseline.json, NEW to the newest file in
bench/results/.
"""
import argparse
import json
import sys
from pathlib import Path

from benchlib import BENCH_DIR

MEASURES = [("time", "time_s"), ("rss", "rss_kb")]
# A workload's own metric, and whether more of it is better.
HIGHER_IS_BETTER = {"requests_per_s": True, "rss_after_free_kb": False}


def load(path):
    return json.loads(Path(path).read_text())


def newest_result():
    files = sorted((BENCH_DIR / "results").glob("*.json"), key=lambda p: p.stat().st_mtime)
    if not files:
        sys.exit("compare.py: no results in bench/results/; run `make bench` first")
    return files[-1]


def value(median, measure):
    """A median's time_s / rss_kb, or one of its workload metrics."""
    return median[measure] if measure in median else median.get("metrics", {}).get(measure)


def hakmem_ratio(result, workload, ref, measure):
    """hakmem / ref for one measure, oriented so that above 1 is worse for
    hakmem; None when either is missing, failed or zero."""
    m = result["medians"].get(workload, {})
    hak, peer = m.get("hakmem"), m.get(ref)
    if not hak or not peer or hak["failed"] or peer["failed"]:
        return None
    h, p = value(hak, measure), value(peer, measure)
    if not h or not p:
        return None
    return p / h if HIGHER_IS_BETTER.get(measure) else h / p


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("old", nargs="?", default=str(BENCH_DIR / "baselines" / "baseline.json"))
    ap.add_argument("new", nargs="?")
    ap.add_argument("--threshold", type=float, default=0.10,
                    help="relative worsening counted as a regression (default 0.10 = 10%%)")
    ap.add_argument("--ref", default="glibc", help="peer that hakmem's ratio is taken to (default glibc)")
    args = ap.parse_args()
    if not Path(args.old).exists():
        sys.exit(f"compare.py: {args.old} not found (make a baseline with `bench/run.py --save-baseline`)")
    old, new = load(args.old), load(args.new or newest_result())
    if "hakmem" not in new["allocators"]:
        sys.exit("compare.py: the new run has no hakmem results: nothing to compare")
    print(f"old: {args.old} ({old['commit']}, {old['mode']})\nnew: {args.new or newest_result()} "
          f"({new['commit']}, {new['mode']})")
    if old["mode"] != new["mode"]:
        print("warning: comparing a quick run with a full one; sizes differ, ratios may too")
    print(f"hakmem / {args.ref} in each run; change = new / old; regression if change > {1 + args.threshold:.2f}\n")
    print(f"  {'workload':<15} {'measure':<17} {'old ratio':>9} {'new ratio':>9} {'change':>7} "
          f"{'hakmem abs change':>18}  verdict")

    regressions = []
    new_names = {w["name"] for w in new["workloads"]}
    for w in (w["name"] for w in old["workloads"] if w["name"] not in new_names):
        print(f"  {w:<15} {'-':<17} {'':>9} {'MISSING':>9} {'':>7} {'':>18}  REGRESSION (not run)")
        regressions.append(f"{w} missing")
    old_names = {w["name"] for w in old["workloads"]}
    for spec in (w for w in new["workloads"] if w["name"] in old_names):
        w = spec["name"]
        new_hak = new["medians"][w].get("hakmem", {})
        if new_hak.get("failed"):
            old_failed = old["medians"][w].get("hakmem", {}).get("failed")
            verdict = "still FAIL" if old_failed else "REGRESSION (now FAIL)"
            print(f"  {w:<15} {'-':<17} {'':>9} {'FAIL':>9} {'':>7} {'':>18}  {verdict}")
            regressions.append(w)
            continue
        measures = MEASURES + ([(spec["metric"], spec["metric"])] if spec.get("metric") else [])
        for measure, key in measures:
            r_old, r_new = hakmem_ratio(old, w, args.ref, key), hakmem_ratio(new, w, args.ref, key)
            if r_old is None or r_new is None:
                print(f"  {w:<15} {measure:<17} {'n/a':>9} {'n/a':>9}")
                continue
            change = r_new / r_old
            absolute = value(new_hak, key) / value(old["medians"][w]["hakmem"], key)
            if change > 1 + args.threshold:
                verdict = "REGRESSION"
                regressions.append(f"{w} {measure}")
            elif change < 1 - args.threshold:
                verdict = "improved"
            else:
                verdict = "ok"
            print(f"  {w:<15} {measure:<17} {r_old:9.3f} {r_new:9.3f} {change:7.3f} {absolute:18.3f}  {verdict}")

    if regressions:
        print(f"\n{len(regressions)} regression(s) beyond {args.threshold:.0%}: {', '.join(regressions)}")
        return 1
    print(f"\nno regression beyond {args.threshold:.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
