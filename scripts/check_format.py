#!/usr/bin/env python3
"""Checks that every C++/CUDA line changed since the repository adopted .clang-format is formatted.

ember's style is the repository's .clang-format (clang-format 14, Debian's `clang-format`). The
tree was not reformatted in one sweep, which would bury history under whitespace; instead each
change formats the lines it touches. This check holds that promise for every change since
.clang-format was added: it runs `git clang-format --diff BASE` (BASE: the commit that added
.clang-format), which formats only the lines that differ from BASE, and fails with the diff when
clang-format would change any of them.

  scripts/check_format.py [--root DIR]     exit 0 when formatted, 1 with the diff, 77 when it
                                           cannot run (no git history, no clang-format)
  scripts/check_format.py --self-test      exit 0 only if the check fails on a badly formatted
                                           change and passes once it is formatted (a temporary
                                           repository; the ctest entry that shows it can fail)

To format your change before committing: `git clang-format $(scripts/check_format.py --base)`.
"""
import argparse
import contextlib
import io
import os
import shutil
import subprocess
import sys
import tempfile

EXTENSIONS = "h,hpp,cpp,cc,cu,cuh"
SKIP = 77  # ctest's SKIP_RETURN_CODE for this entry


def git(root, *args, check=True):
    return subprocess.run(["git", "-C", root, *args], check=check, capture_output=True, text=True)


def tool(name_versions):
    for name in name_versions:
        path = shutil.which(name)
        if path:
            return path
    return None


def base_commit(root):
    """The commit that added .clang-format, or None without that history (a shallow clone)."""
    r = git(root, "log", "--diff-filter=A", "--format=%H", "--", ".clang-format", check=False)
    commits = r.stdout.split()
    return commits[-1] if r.returncode == 0 and commits else None


def check(root):
    if git(root, "rev-parse", "--git-dir", check=False).returncode != 0:
        print(f"check_format: {root} is not a git repository; nothing to compare with", file=sys.stderr)
        return SKIP
    clang_format = tool(["clang-format-14", "clang-format"])
    git_clang_format = tool(["git-clang-format-14", "git-clang-format"])
    if clang_format is None or git_clang_format is None:
        print("check_format: clang-format is not installed (Debian package clang-format)", file=sys.stderr)
        return SKIP
    base = base_commit(root)
    if base is None:
        print("check_format: no commit adds .clang-format in this history (a shallow clone?)", file=sys.stderr)
        return SKIP
    r = subprocess.run([sys.executable, git_clang_format, "--binary", clang_format, "--extensions", EXTENSIONS,
                        "--diff", base], cwd=root, capture_output=True, text=True)
    out = r.stdout.strip()
    if r.returncode not in (0, 1) or r.stderr.strip():
        print(f"check_format: git clang-format failed (exit {r.returncode}): {r.stderr.strip()}", file=sys.stderr)
        return 1
    if out == "" or out.startswith("no modified files") or "did not modify any files" in out:
        print(f"check_format: every line changed since {base[:12]} is formatted")
        return 0
    print(out)
    print(f"check_format: the lines above, changed since {base[:12]} (which added .clang-format), are not "
          f"formatted; run `git clang-format {base[:12]}`", file=sys.stderr)
    return 1


def quiet_check(root):
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        return check(root)


def self_test(root):
    """A repository whose second commit adds a badly formatted line: the check must fail, then pass."""
    with tempfile.TemporaryDirectory() as tmp:
        env_root = os.path.join(tmp, "repo")
        os.mkdir(env_root)
        shutil.copy(os.path.join(root, ".clang-format"), env_root)
        with open(os.path.join(env_root, "old.cpp"), "w") as f:
            f.write("int  untouched ( ) ;\n")  # unformatted, but older than .clang-format's commit
        for cmd in (["init", "-q"], ["add", "."]):
            git(env_root, *cmd)
        git(env_root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "style")
        with open(os.path.join(env_root, "new.cpp"), "w") as f:
            f.write("int   f( int x ){return x;}\n")
        git(env_root, "add", "new.cpp")
        git(env_root, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "change")
        if quiet_check(env_root) != 1:
            print("self-test: a badly formatted new line was not reported", file=sys.stderr)
            return 1
        with open(os.path.join(env_root, "new.cpp"), "w") as f:
            f.write("int f(int x) { return x; }\n")
        if quiet_check(env_root) != 0:
            print("self-test: the formatted change (old.cpp untouched) was reported", file=sys.stderr)
            return 1
    print("self-test: the check fails on a badly formatted change and passes once it is formatted")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("--base", action="store_true", help="print the commit that added .clang-format")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    if args.base:
        base = base_commit(root)
        print(base or "")
        return 0 if base else 1
    if args.self_test:
        if tool(["clang-format-14", "clang-format"]) is None:
            print("self-test: clang-format is not installed", file=sys.stderr)
            return SKIP
        return self_test(root)
    return check(root)


if __name__ == "__main__":
    sys.exit(main())
