#!/usr/bin/env python3
"""bench_ops on the CPU: every timed case gets a latency floor (Note [latency floor] in
bench/bench_ops.cpp) and --plot draws it beside the case's times.

  check_floor.py BENCH_OPS_BINARY WORKDIR
Runs the MNIST-sized cross_entropy cases, then checks the JSON file's rooflines and floors and the
SVG's rows (one per case: a floor mark and a circle for ember's best variant), and its roofline
panel (each case with FLOPs at its intensity, the floor above ember's point, under the roof)."""
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

binary, work = sys.argv[1], sys.argv[2]
os.makedirs(work, exist_ok=True)
js, svg = os.path.join(work, "floor.json"), os.path.join(work, "floor.svg")
cmd = [binary, "--device", "cpu", "--op", "cross_entropy,cross_entropy_with_grad", "--case", r"10\] f32$", "--quick",
       "--json", js, "--plot", svg]
run = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
errors = []
if run.returncode != 0:
    errors.append(f"bench_ops exited {run.returncode}")
if "floor_us" not in run.stdout or "%floor" not in run.stdout:
    errors.append("the table has no floor_us / %floor columns")
if "launch" not in run.stdout:
    errors.append("the rooflines line does not give the launch overhead")
doc = json.load(open(js))
for key in ("copy_gbps", "f32_peak_tflops", "launch_us"):
    if not doc.get(key, 0) > 0:
        errors.append(f"{key} = {doc.get(key)} in the JSON file, expected > 0")
results = [r for r in doc["results"] if r["ok"]]
if len(results) != 4:  # 2 ops x 2 cases x the CPU variant
    errors.append(f"{len(results)} timed results, expected 4")
for r in results:
    floor, t = r["floor_us"], r["median_us"]
    # the floor: the launch plus the bytes at the copy bandwidth (these cases have no GEMM FLOPs
    # worth counting), never more than the case took (a little noise allowed)
    if not floor >= doc["launch_us"]:
        errors.append(f"{r['op']} {r['case']}: floor {floor} us below the launch overhead {doc['launch_us']} us")
    if not 0 < r["pct_floor"] <= 150:
        errors.append(f"{r['op']} {r['case']}: %floor {r['pct_floor']} (floor {floor} us, time {t} us)")
    if abs(r["pct_floor"] - 100 * floor / t) > 0.01 * r["pct_floor"]:
        errors.append(f"{r['op']} {r['case']}: %floor {r['pct_floor']} is not floor / time")
# the table prints the same floor and %floor on the case's line, to 0.01 us and 0.1%. The JSON file
# holds 6 significant digits, so its value rounded again may differ from the table's in the last
# place (3.224996 prints 3.22, its 3.225 rounds to 3.23): compare the numbers, within half a place.
header = next((l.split() for l in run.stdout.splitlines() if l.startswith("op ") and "%floor" in l), [])
for r in results:
    lines = [l for l in run.stdout.splitlines() if l.startswith(r["op"] + " ") and r["case"] in l]
    if len(lines) != 1 or "floor_us" not in header:
        errors.append(f"{r['op']} {r['case']}: no single table line under a floor_us header: {lines}")
        continue
    # the columns from the right: floor_us, %floor, x_vendor, then "checked vs" (its words)
    checked = r["checked"].split()
    cols = lines[0].split()[: len(lines[0].split()) - len(checked)]
    shown = cols[-3:-1]
    try:
        ok = abs(float(shown[0]) - r["floor_us"]) <= 0.0051 and abs(float(shown[1]) - r["pct_floor"]) <= 0.051
    except ValueError:
        ok = False
    if not ok:
        errors.append(f"{r['op']} {r['case']}: the table's line shows floor and %floor {shown}, the JSON file "
                      f"{r['floor_us']} and {r['pct_floor']}: {lines[0]}")
root = ET.parse(svg).getroot()
ns = "{http://www.w3.org/2000/svg}"
labels = [t.text for t in root.iter(ns + "text") if t.text and t.text.startswith("cross_entropy")]
floors = [e for e in root.iter(ns + "line") if e.get("class") == "floor"]
circles = [e for e in root.iter(ns + "circle") if e.get("class") == "ember"]
if len(labels) != 4 or len(floors) != 4 or len(circles) != 4:
    errors.append(f"the plot has {len(labels)} case labels, {len(floors)} floors and {len(circles)} ember marks, expected 4 each")
# the roofline panel: every case with FLOPs at its intensity, its floor above ember's point (the
# floor is the most a kernel could reach), under the f32 GEMM peak's roof
with_flops = [r for r in results if r["tflops"] > 0 and r["gbps"] > 0]
roofs = [e for e in root.iter(ns + "polyline") if e.get("class") == "roof"]
roof_floors = [e for e in root.iter(ns + "line") if e.get("class") == "roof-floor"]
roof_embers = [e for e in root.iter(ns + "circle") if e.get("class") == "roof-ember"]
if len(roofs) != 1:  # the CPU has one GEMM peak (f32)
    errors.append(f"the roofline panel has {len(roofs)} roofs, expected 1")
if len(roof_floors) != len(with_flops) or len(roof_embers) != len(with_flops) or not with_flops:
    errors.append(f"the roofline panel has {len(roof_floors)} floors and {len(roof_embers)} ember marks for "
                  f"{len(with_flops)} cases with FLOPs")
for f, e in zip(roof_floors, roof_embers):
    if abs(float(f.get("x1")) + 6 - float(e.get("cx"))) > 0.01 or not float(f.get("y1")) <= float(e.get("cy")):
        errors.append(f"a case's floor ({f.get('x1')}, {f.get('y1')}) is not above its ember mark "
                      f"({e.get('cx')}, {e.get('cy')}) at the same intensity")
# the errors first: a CI log that keeps only the start of a test's output still shows them
for e in errors:
    print("check_floor:", e)
print(run.stdout[-3000:], run.stderr[-2000:])
sys.exit(1 if errors else 0)
