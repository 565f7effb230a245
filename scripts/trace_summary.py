#!/usr/bin/env python3
"""Summarizes a timeline written by tools/cuda_trace (CSV: kind, start_ns, end_ns, correlation_id,
graph_id, grid_x, grid_y, block_x, dyn_smem_bytes, bytes, name; kind K kernel, M memcpy, S memset,
A runtime API call).

The kernels of one cudaGraphLaunch share a correlation id; the launches whose kernel count is the
most common one above --min-kernels are taken as the steady decode tokens (the first --skip are
dropped). Per kernel position in the token: the median duration (end - start) and the median
critical-path step (end_i - max(end_0..end_{i-1})), which sum to the token's span; then the same
steps summed per kernel name. Last, the gap between two steady tokens (the last kernel's end to the
next token's first kernel start: the GPU runs no graph kernel then) and what fills it: per runtime
API call and per GPU operation outside the graphs, the median count and median time inside a gap.

    scripts/trace_summary.py cuda_trace.csv [--skip 4] [--min-kernels 40] [--positions]
"""
import argparse
import csv
import re
import statistics
from collections import Counter, defaultdict


def short(name):
    name = re.sub(r"^void ", "", name)
    name = name.replace("(anonymous namespace)::", "")
    name = re.sub(r"minfer::cuda::(mm::)?", "", name)
    name = name.replace("(minfer::TensorType)", "T")
    return name


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--skip", type=int, default=4)
    ap.add_argument("--min-kernels", type=int, default=40)
    ap.add_argument("--positions", action="store_true", help="print every kernel position")
    args = ap.parse_args()
    groups = defaultdict(list)
    others = []  # (start, end, kind, name): API calls and GPU work outside graph launches
    with open(args.csv) as f:
        for r in csv.DictReader(f):
            kind = r.get("kind", "K")
            if kind != "K" or int(r["graph_id"]) == 0:
                label = r["name"] if kind == "A" else f"gpu: {short(r['name'])}"
                if kind == "M":
                    label += f" {r['bytes']} B"
                others.append((int(r["start_ns"]), int(r["end_ns"]), kind, label))
                continue
            groups[int(r["correlation_id"])].append(
                (int(r["start_ns"]), int(r["end_ns"]), short(r["name"]), int(r["grid_x"]) * int(r["grid_y"]),
                 int(r["block_x"])))
    sizes = Counter(len(g) for g in groups.values() if len(g) >= args.min_kernels)
    if not sizes:
        print("no graph launch with at least", args.min_kernels, "kernels")
        return
    n_k = sizes.most_common(1)[0][0]
    tokens = [sorted(groups[c]) for c in sorted(groups) if len(groups[c]) == n_k][args.skip:]
    print(f"{len(tokens)} graph launches of {n_k} kernels (skipped the first {args.skip})")
    spans = [t[-1][1] - t[0][0] for t in tokens]
    starts = [t[0][0] for t in tokens]
    periods = [b - a for a, b in zip(starts, starts[1:])]
    print(f"token span (first start .. last end): median {statistics.median(spans) / 1e3:.1f} us")
    if periods:
        print(f"launch period (start to next start): median {statistics.median(periods) / 1e3:.1f} us")
    dur = [[] for _ in range(n_k)]
    crit = [[] for _ in range(n_k)]
    for t in tokens:
        last_end = t[0][0]
        for i, (s, e, _, _, _) in enumerate(t):
            dur[i].append(e - s)
            crit[i].append(max(0, e - last_end))
            last_end = max(last_end, e)
    names = [f"{tokens[0][i][2]} grid {tokens[0][i][3]} x {tokens[0][i][4]}" for i in range(n_k)]
    if args.positions:
        print(f"{'pos':>4} {'dur us':>8} {'step us':>8}  kernel")
        for i in range(n_k):
            print(f"{i:4d} {statistics.median(dur[i]) / 1e3:8.2f} {statistics.median(crit[i]) / 1e3:8.2f}  {names[i]}")
    per = defaultdict(lambda: [0, 0.0, 0.0])
    for i in range(n_k):
        p = per[names[i]]
        p[0] += 1
        p[1] += statistics.median(crit[i])
        p[2] += statistics.median(dur[i])
    total = sum(p[1] for p in per.values())
    print(f"\n{'count':>5} {'steps us':>9} {'share':>6} {'step/each':>9} {'dur/each':>9}  kernel (per token)")
    for name, (c, cs, ds) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        print(f"{c:5d} {cs / 1e3:9.1f} {100 * cs / total:5.1f}% {cs / c / 1e3:9.2f} {ds / c / 1e3:9.2f}  {name}")
    print(f"{'':5} {total / 1e3:9.1f}  sum of median steps")
    gap_report(tokens, others)


def gap_report(tokens, others):
    """What the host and the GPU do between one steady token's last kernel and the next's first."""
    windows = [(a[-1][1], b[0][0]) for a, b in zip(tokens, tokens[1:]) if b[0][0] > a[-1][1]]
    if not windows or not others:
        return
    others.sort()
    starts = [o[0] for o in others]
    import bisect
    per_gap = []  # one {name: [count, ns inside the gap]} per gap
    for w0, w1 in windows:
        seen = defaultdict(lambda: [0, 0])
        lo = bisect.bisect_left(starts, w0 - 5_000_000)  # calls that began up to 5 ms before
        for s0, e0, _, name in others[lo:bisect.bisect_right(starts, w1)]:
            inside = min(e0, w1) - max(s0, w0)
            if inside <= 0:
                continue
            seen[name][0] += 1
            seen[name][1] += inside
        per_gap.append(seen)
    names = set().union(*per_gap)
    per = {n: ([g[n][0] if n in g else 0 for g in per_gap], [g[n][1] if n in g else 0 for g in per_gap])
           for n in names}
    gaps = [w1 - w0 for w0, w1 in windows]
    print(f"\ngap between tokens (last kernel end .. next first kernel start): median {statistics.median(gaps) / 1e3:.1f} us"
          f" over {len(gaps)} gaps")
    print(f"{'count':>5} {'us in gap':>9}  host API call or GPU work outside the graphs (medians per gap)")
    rows = [(statistics.median(t), statistics.median(c), n) for n, (c, t) in per.items()]
    for t, c, n in sorted(rows, reverse=True):
        if t > 0 or c > 0:
            print(f"{c:5.0f} {t / 1e3:9.1f}  {n}")


if __name__ == "__main__":
    main()
