#!/usr/bin/env python3
"""Turns bench_ops --json output (and optionally bench/torch_ops.py --json output) into the
markdown table kept in docs/perf.md: per op and case, the best ember variant, the vendor variant,
PyTorch, and the roofline percentages measured in the same run."""
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
        print("usage: bench_table.py bench_ops.json [torch_ops.json]", file=sys.stderr)
        return 2
    ours = load(sys.argv[1])
    if ours is None:
        print(f"bench_table: cannot read {sys.argv[1]}", file=sys.stderr)
        return 1
    torch = load(sys.argv[2]) if len(sys.argv) > 2 else None
    torch_us = {}
    if torch:
        for r in torch.get("results", []):
            torch_us[(r.get("op"), r.get("case"), r.get("dtype"))] = r.get("time_us") or r.get("median_us")
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
