#!/usr/bin/env python3
"""Turns bench_ops --json output (and optionally bench/torch_ops.py --json output) into the
markdown table kept in docs/perf.md: per op and case, the best ember variant, the vendor variant,
PyTorch, and the roofline percentages measured in the same run.

    bench_table.py FILE...   each FILE either bench_ops's ({"results": [...]}) or torch_ops.py's
                             ({"meta": ..., "rows": [...]}); the GPU runner's stage 4 passes one
                             bench_ops file per step and torch_ops.py's last
    bench_table.py --results OUT [--source TEXT] FILE...
                             writes instead the machine-readable results of the run
                             (bench/results/README.md): every variant bench_ops timed on the GPU,
                             a line each, and which won each case; TEXT (the machine, the commit,
                             the command) goes into its header"""
import json
import sys
import time

VENDOR_NAMES = ("cublas", "cublaslt", "cudnn", "dnnl")
RESULTS_COLUMNS = "op\tcase\tdtype\tvariant\tkind\tmedian_us\twinner"


def is_vendor(r):
    """bench_ops says so since it writes "vendor"; older files are judged by the variant's name."""
    if "vendor" in r:
        return bool(r["vendor"])
    return any(r["variant"].startswith(v) for v in VENDOR_NAMES)


def write_results(path, source, results):
    """bench/results/README.md's format: the GPU rows that ran and checked, the fastest of each
    (op, case, dtype) marked the winner."""
    rows = [r for r in results if r.get("ok") and r.get("median_us", 0) > 0 and str(r.get("device", "")).startswith("cuda")]
    best = {}
    for r in rows:
        key = (r["op"], r["case"], r["dtype"])
        if key not in best or r["median_us"] < best[key]["median_us"]:
            best[key] = r
    for r in rows:
        for f in ("op", "case", "dtype", "variant"):
            if "\t" in r[f] or "\n" in r[f]:
                raise ValueError(f"bench_table: a tab or newline in {f} '{r[f]}'")
    with open(path, "w") as f:
        f.write("# ember benchmark results, one GPU run (the format, and how to refresh bench/results/ with it:\n")
        f.write("# bench/results/README.md).\n#\n")
        for line in (source or "(no --source given: say where these numbers come from)").splitlines():
            f.write(f"# {line}\n")
        f.write(f"# Written by scripts/bench_table.py --results on {time.strftime('%Y-%m-%d', time.gmtime())} "
                "from bench_ops --json files.\n")
        f.write(RESULTS_COLUMNS + "\n")
        for r in sorted(rows, key=lambda r: (r["op"], r["case"], r["dtype"], r["median_us"])):
            key = (r["op"], r["case"], r["dtype"])
            f.write(f"{r['op']}\t{r['case']}\t{r['dtype']}\t{r['variant']}\t{'vendor' if is_vendor(r) else 'ember'}\t"
                    f"{r['median_us']:.6g}\t{'yes' if best[key] is r else 'no'}\n")
    return len(rows)


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    args = sys.argv[1:]
    results_out, source = None, None
    while args and args[0] in ("--results", "--source"):
        if len(args) < 2:
            print(f"bench_table: {args[0]} needs a value", file=sys.stderr)
            return 2
        if args[0] == "--results":
            results_out = args[1]
        else:
            source = args[1]
        args = args[2:]
    if not args:
        print("usage: bench_table.py [--results OUT [--source TEXT]] bench_ops.json... [torch_ops.json]", file=sys.stderr)
        return 2
    ours = {"results": []}
    torch_us = {}
    read = 0
    for path in args:
        data = load(path)
        if not isinstance(data, dict):
            print(f"bench_table: cannot read {path}", file=sys.stderr)
            continue
        read += 1
        if "rows" in data:  # torch_ops.py
            for r in data["rows"]:
                torch_us[(r.get("op"), r.get("case"), r.get("dtype"))] = r.get("time_us")
            continue
        ours["results"] += data.get("results", [])
        # the rooflines: each run measures its own; the first run's are shown
        for key in ("copy_gbps", "bf16_peak_tflops"):
            if not ours.get(key):
                ours[key] = data.get(key, 0)
    if read == 0:
        return 1
    if results_out:
        n = write_results(results_out, source, ours["results"])
        print(f"bench_table: {n} results lines written to {results_out}")
        return 0
    rows = {}
    for r in ours["results"]:
        if not r.get("ok"):
            continue
        key = (r["op"], r["case"], r["dtype"])
        slot = rows.setdefault(key, {"ours": None, "vendor": None})
        which = "vendor" if is_vendor(r) else "ours"
        if slot[which] is None or r["median_us"] < slot[which]["median_us"]:
            slot[which] = r
    print(f"copy bandwidth {ours.get('copy_gbps', 0):.0f} GB/s, bf16 GEMM peak {ours.get('bf16_peak_tflops', 0):.0f} TFLOP/s (measured in the same run)\n")
    print("| op | case | dtype | ember (variant) us | % copy BW | % bf16 peak | vendor us | ember/vendor speed | PyTorch us |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (op, case, dtype), slot in sorted(rows.items()):
        o, v = slot["ours"], slot["vendor"]
        t = torch_us.get((op, case, dtype))
        cells = [
            op, case, dtype,
            f"{o['median_us']:.2f} ({o['variant']})" if o else "-",
            f"{o['pct_copy_bw']:.0f}%" if o and o.get("pct_copy_bw") else "-",
            f"{o['pct_bf16_peak']:.0f}%" if o and o.get("pct_bf16_peak") else "-",
            f"{v['median_us']:.2f}" if v else "-",
            f"{v['median_us'] / o['median_us']:.2f}x" if o and v else "-",
            f"{t:.2f}" if t else "-",
        ]
        print("| " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
