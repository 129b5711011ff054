#!/usr/bin/env python3
"""Turns bench_ops --json output (and optionally bench/torch_ops.py --json output) into the
markdown table kept in docs/perf.md: per op and case, the best ember variant, the vendor variant,
PyTorch, and the roofline percentages measured in the same run.

    bench_table.py FILE...   each FILE either bench_ops's ({"results": [...]}) or torch_ops.py's
                             ({"meta": ..., "rows": [...]}); the GPU runner's stage 4 passes one
                             bench_ops file per step and torch_ops.py's last"""
import json
import sys


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def main():
    if len(sys.argv) < 2:
        print("usage: bench_table.py bench_ops.json... [torch_ops.json]", file=sys.stderr)
        return 2
    ours = {"results": []}
    torch_us = {}
    read = 0
    for path in sys.argv[1:]:
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
    vendor_names = ("cublas", "cublaslt", "cudnn")
    rows = {}
    for r in ours["results"]:
        if not r.get("ok"):
            continue
        key = (r["op"], r["case"], r["dtype"])
        slot = rows.setdefault(key, {"ours": None, "vendor": None})
        is_vendor = any(r["variant"].startswith(v) for v in vendor_names)
        which = "vendor" if is_vendor else "ours"
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
