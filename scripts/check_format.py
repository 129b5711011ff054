#!/usr/bin/env python3
"""Checks that every C++/CUDA file of the repository is formatted with its .clang-format.

ember's style is the repository's .clang-format (clang-format 14, Debian's `clang-format`). The
whole tree was formatted in one commit (listed in .git-blame-ignore-revs, so `git blame` skips
it); since then every file is held to it, so an editor's format-on-save changes nothing. This check
runs `clang-format --dry-run --Werror` over every tracked .h/.hpp/.cpp/.cc/.cu/.cuh file (every
such file under the root when it is not a git checkout) and fails naming each file that
clang-format would change, with the first lines of the change.

  scripts/check_format.py [--root DIR]   exit 0 when every file is formatted, 1 naming those that
                                         are not, 77 when it cannot run (no clang-format)
  scripts/check_format.py --fix          formats the files that are not (clang-format -i)
  scripts/check_format.py --self-test    exit 0 only if the check fails on a badly formatted file
                                         and passes once it is formatted (a temporary tree; the
                                         ctest entry that shows the check can fail)
"""
import argparse
import contextlib
import difflib
import io
import os
import shutil
import subprocess
import sys
import tempfile

EXTENSIONS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
SKIP_DIRS = {".git", "__pycache__"}
SKIP = 77  # ctest's SKIP_RETURN_CODE for this entry


def clang_format_binary():
    for name in ("clang-format-14", "clang-format"):
        path = shutil.which(name)
        if path:
            return path
    return None


def source_files(root):
    """The repository's C++/CUDA files, relative to root: git's tracked files, else a walk that
    leaves out build trees (any top-level folder starting with "build") and the bundle."""
    r = subprocess.run(["git", "-C", root, "ls-files", "-z"], capture_output=True, text=True)
    if r.returncode == 0:
        files = [f for f in r.stdout.split("\0") if f.endswith(EXTENSIONS)]
        return sorted(f for f in files if os.path.exists(os.path.join(root, f)))
    out = []
    for dirpath, dirs, names in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not (rel_dir == "." and (d.startswith("build") or
                                                                                          d == "gpu-bundle"))]
        out += [os.path.normpath(os.path.join(rel_dir, n)) for n in names if n.endswith(EXTENSIONS)]
    return sorted(out)


def unformatted(root, clang_format):
    """Yields (file, diff of its first changed lines) for each file clang-format would change."""
    files = source_files(root)
    for i in range(0, len(files), 64):
        batch = files[i:i + 64]
        r = subprocess.run([clang_format, "--dry-run", "--Werror", *batch], cwd=root, capture_output=True, text=True)
        if r.returncode == 0:
            continue
        for f in batch:  # the batch has at least one; find which, with the diff
            with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
                before = fh.read()
            after = subprocess.run([clang_format, f], cwd=root, capture_output=True, text=True).stdout
            if after != before:
                diff = difflib.unified_diff(before.splitlines(), after.splitlines(), f, f + " (formatted)", lineterm="")
                yield f, "\n".join(list(diff)[:24])


def check(root, fix=False):
    clang_format = clang_format_binary()
    if clang_format is None:
        print("check_format: clang-format is not installed (Debian package clang-format)", file=sys.stderr)
        return SKIP
    bad = list(unformatted(root, clang_format))
    if not bad:
        print(f"check_format: all {len(source_files(root))} C++/CUDA files are formatted")
        return 0
    if fix:
        subprocess.run([clang_format, "-i", *[f for f, _ in bad]], cwd=root, check=True)
        print(f"check_format: formatted {len(bad)} file(s): {', '.join(f for f, _ in bad)}")
        return 0
    for _, diff in bad:
        print(diff)
    print(f"check_format: {len(bad)} file(s) not formatted with .clang-format: {', '.join(f for f, _ in bad)}; "
          f"run `scripts/check_format.py --fix` (or clang-format -i on them)", file=sys.stderr)
    return 1


def quiet_check(root):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return check(root)


def self_test(root):
    """A tree with one badly formatted file: the check must fail, then pass once it is formatted."""
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(os.path.join(root, ".clang-format"), tmp)
        with open(os.path.join(tmp, "good.cpp"), "w") as f:
            f.write("int f(int x) { return x; }\n")
        with open(os.path.join(tmp, "bad.cu"), "w") as f:
            f.write("int   g( int x ){return x;}\n")
        if quiet_check(tmp) != 1:
            print("self-test: a badly formatted file was not reported", file=sys.stderr)
            return 1
        with open(os.path.join(tmp, "bad.cu"), "w") as f:
            f.write("int g(int x) { return x; }\n")
        if quiet_check(tmp) != 0:
            print("self-test: a formatted tree was reported", file=sys.stderr)
            return 1
    print("self-test: the check fails on a badly formatted file and passes once it is formatted")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--fix", action="store_true", help="format the files that are not")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    if args.self_test:
        if clang_format_binary() is None:
            print("self-test: clang-format is not installed", file=sys.stderr)
            return SKIP
        return self_test(root)
    return check(root, fix=args.fix)


if __name__ == "__main__":
    sys.exit(main())
