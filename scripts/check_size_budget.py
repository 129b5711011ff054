#!/usr/bin/env python3
"""Prints the lines of code per layer and fails when a layer has grown past its budget.

Growth is a decision, not drift: scripts/size_budget.txt records how many lines each top-level
folder may hold (C++/CUDA sources and headers, ops.def, CMake files, scripts); a change that needs
more raises the number there, in the same commit, where a reviewer sees it. The table printed
every run (lines, budget, headroom) is the size of the house at a glance.

    scripts/check_size_budget.py [--root DIR] [--budget FILE]

Counts every file git tracks (every file under the root when it is not a git checkout) whose name
ends in .h .hpp .cpp .cc .cu .cuh .def .py .sh .cmake or is CMakeLists.txt, by its first path
component. Exit 0 within budget, 1 naming each folder over it (and each folder the budget file
does not name, so a new folder is a decision too).
"""
import argparse
import os
import subprocess
import sys

EXTENSIONS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".def", ".py", ".sh", ".cmake")


def tracked_files(root):
    r = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, text=True)
    if r.returncode == 0:
        return [f for f in r.stdout.split("\0") if f]
    out = []
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "build")) and d != "gpu-bundle"]
        out += [os.path.relpath(os.path.join(dirpath, f), root) for f in files]
    return out


def count_lines(root):
    per = {}
    for f in tracked_files(root):
        if "/" not in f or not (f.endswith(EXTENSIONS) or os.path.basename(f) == "CMakeLists.txt"):
            continue
        path = os.path.join(root, f)
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as fh:
            n = fh.read().count(b"\n")
        top = f.split("/", 1)[0]
        per[top] = per.get(top, 0) + n
    return per


def read_budget(path):
    budget = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = line.split()
            if len(parts) != 2 or not parts[1].isdigit():
                raise SystemExit(f"{path}:{lineno}: expected 'folder lines', got '{line}'")
            budget[parts[0]] = int(parts[1])
    return budget


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(here))
    ap.add_argument("--budget", default=os.path.join(here, "size_budget.txt"))
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    per = count_lines(root)
    budget = read_budget(args.budget)
    problems = []
    print(f"{'folder':<10} {'lines':>7} {'budget':>7} {'headroom':>8}")
    for top in sorted(set(per) | set(budget)):
        n, b = per.get(top, 0), budget.get(top)
        print(f"{top:<10} {n:>7} {b if b is not None else '-':>7} {'' if b is None else b - n:>8}")
        if b is None:
            problems.append(f"{top}/ has {n} lines and no budget in {args.budget}: add a line '{top} <lines>'")
        elif n > b:
            problems.append(f"{top}/ has {n} lines, {n - b} over its budget of {b} ({args.budget}): raise the "
                            "budget in this commit if the growth is meant, else make the change smaller")
    total = sum(per.values())
    print(f"{'total':<10} {total:>7} {sum(budget.values()):>7}")
    for p in problems:
        print(p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
