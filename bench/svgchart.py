"""Writes the run report's chart as a standalone SVG (no plotting library):
for every workload, one horizontal bar per allocator of its median time and
peak RSS divided by glibc's, in two panels side by side."""
import math
from xml.sax.saxutils import escape

COLORS = {"glibc": "#8c8c8c", "hakmem": "#d62728", "mimalloc": "#1f77b4",
          "mimalloc3": "#17becf", "jemalloc": "#2ca02c", "tcmalloc": "#9467bd"}
FALLBACK_COLORS = ["#ff7f0e", "#bcbd22", "#e377c2"]
BAR, GAP, GROUP_GAP = 11, 2, 14
LABEL_W, PANEL_W, PANEL_GAP, MARGIN = 120, 380, 70, 20
TOP = 92
CLIP = 3.0  # bars longer than CLIP x glibc are cut and marked


def write(path, result):
    allocs = list(result["allocators"])
    colors = {a: COLORS.get(a) or FALLBACK_COLORS[i % len(FALLBACK_COLORS)] for i, a in enumerate(allocs)}
    workloads = [w["name"] for w in result["workloads"]]
    medians = result["medians"]
    group_h = len(allocs) * (BAR + GAP) + GROUP_GAP
    height = TOP + len(workloads) * group_h + 40
    width = MARGIN + LABEL_W + 2 * PANEL_W + PANEL_GAP + MARGIN
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'font-family="DejaVu Sans, Arial, sans-serif" font-size="11">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{MARGIN}" y="24" font-size="15" font-weight="bold">hakmem benchmark '
           f'{escape(result["commit"])} ({result["mode"]}, {result["repeats"]} runs, medians)</text>',
           f'<text x="{MARGIN}" y="42" fill="#444">Normalised to glibc = 1.0 (dashed line); '
           f'shorter is better. Bars past {CLIP:g}x are cut (value shown).</text>']
    # Legend.
    x = MARGIN
    for a in allocs:
        out.append(f'<rect x="{x}" y="54" width="12" height="12" fill="{colors[a]}"/>'
                   f'<text x="{x + 16}" y="64">{escape(a)}</text>')
        x += 24 + 7 * len(a) + 16

    panels = [("time", "wall time / glibc", lambda m: m.get("time_s")),
              ("rss", "peak RSS / glibc", lambda m: m.get("rss_kb"))]
    for p, (_, title, value) in enumerate(panels):
        x0 = MARGIN + LABEL_W + p * (PANEL_W + PANEL_GAP)
        ratios = []
        for w in workloads:
            base = medians[w].get("glibc", {})
            for a in allocs:
                m = medians[w].get(a)
                if m and not m["failed"] and not base.get("failed") and value(base):
                    ratios.append(value(m) / value(base))
        top = min(CLIP, max(ratios + [1.0]))
        top = math.ceil(top * 2) / 2  # axis ends on a multiple of 0.5
        scale = (PANEL_W - 40) / top
        y_end = TOP + len(workloads) * group_h - GROUP_GAP
        out.append(f'<text x="{x0}" y="{TOP - 12}" font-size="13" font-weight="bold">{title}</text>')
        for i in range(int(top * 2) + 1):  # grid every 0.5
            gx = x0 + i * 0.5 * scale
            dash = ' stroke-dasharray="4,3" stroke="#333"' if i == 2 else ' stroke="#ddd"'
            out.append(f'<line x1="{gx:.1f}" y1="{TOP - 4}" x2="{gx:.1f}" y2="{y_end + 4}"{dash}/>'
                       f'<text x="{gx:.1f}" y="{y_end + 18}" text-anchor="middle" fill="#444">{i * 0.5:g}</text>')
        for g, w in enumerate(workloads):
            gy = TOP + g * group_h
            if p == 0:
                mid = gy + len(allocs) * (BAR + GAP) / 2 + 4
                out.append(f'<text x="{x0 - 8}" y="{mid:.1f}" text-anchor="end" font-weight="bold">{escape(w)}</text>')
            base = medians[w].get("glibc", {})
            for k, a in enumerate(allocs):
                by = gy + k * (BAR + GAP)
                m = medians[w].get(a)
                if not m:
                    continue
                if m["failed"]:
                    out.append(f'<text x="{x0 + 3}" y="{by + BAR - 2}" fill="#d62728" font-weight="bold">FAIL ({escape(a)})</text>')
                    continue
                if base.get("failed") or not value(base):
                    out.append(f'<text x="{x0 + 3}" y="{by + BAR - 2}" fill="#888">n/a (glibc failed)</text>')
                    continue
                r = value(m) / value(base)
                bw = min(r, top) * scale
                out.append(f'<rect x="{x0}" y="{by}" width="{bw:.1f}" height="{BAR}" fill="{colors[a]}">'
                           f'<title>{escape(w)} {escape(a)}: {r:.3f}</title></rect>')
                label = f"{r:.2f}" + (" (cut)" if r > top else "")
                out.append(f'<text x="{x0 + bw + 3:.1f}" y="{by + BAR - 2}" font-size="9" fill="#333" '
                           f'stroke="white" stroke-width="3" paint-order="stroke">{label}</text>')
    out.append("</svg>")
    path.write_text("\n".join(out) + "\n")
