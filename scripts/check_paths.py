#!/usr/bin/env python3
"""Checks that every repository path named in the docs and in source comments exists.

Comments and docs that point at files are how a reader finds their way around; a renamed or
deleted file leaves them pointing at nothing. This scans
  - docs/*.md and README.md (all of the text: prose and code blocks),
  - the comments of the source files (C/C++/CUDA // and /* */ comments, # comments of Python,
    shell and CMake files),
for tokens that start with a top-level directory of the repository (core/, kernels/, docs/, ...)
and either end in a known extension or name a directory (a trailing /), and reports each one that
does not exist, as file:line. Templates are resolved like a reader would:
  - `kernels/ops/<op>.h` (anything in <...>) names no particular file: skipped;
  - `tests/*_gpu.{cpp,cu}`: the braces expand, each alternative must match at least one file
    (* and ? glob; `kernels/ops/softmax.*` means "the softmax files");
  - `tests/foo.{h,cpp}` therefore needs both tests/foo.h and tests/foo.cpp.

  scripts/check_paths.py [--root DIR]            exit 1 and one line per missing path
  scripts/check_paths.py --root DIR --expect-missing P ...
                                                 exit 0 only if exactly the paths P are missing
                                                 (the ctest entry that shows the check can fail)
"""
import argparse
import fnmatch
import os
import re
import sys

TOP_DIRS = ["core", "kernels", "nn", "optim", "data", "amp", "io", "ckpt", "logging", "dist", "apps", "bench",
            "tests", "docs", "scripts", "examples", "fuzz", "cmake"]
EXTENSIONS = (".h", ".cpp", ".cu", ".cuh", ".md", ".py", ".sh", ".def", ".txt", ".cmake")
C_LIKE = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".def", ".inc")
HASH_COMMENTS = (".py", ".sh", ".cmake")
SKIP_DIRS = {".git", "__pycache__"}
# The fixture of the check's own test names missing paths on purpose.
EXCLUDE = ["tests/paths"]
# Made-up files that docs name on purpose: docs/contributing.md walks through adding an op "frob".
EXAMPLES = ["kernels/ops/frob.", "tests/op_samples/frob_", "bench/op_shapes/frob_", "bench/lab/frob_"]

# A path: a top-level directory, then path characters, <placeholders>, {a,b} alternatives and globs.
# Not preceded by a path character, so URLs (github.com/x/docs/...) and ../docs/... do not match.
PATH_RE = re.compile(r"(?<![\w./\-<>{}$@])(?:" + "|".join(TOP_DIRS) +
                     r")/(?:[\w.\-*?/]|<[^<>\s]*>|\{[^{}\s]*\})*")


def comment_lines(path, text):
    """Yields (line number, comment text) for the comments of a source file."""
    ext = os.path.splitext(path)[1]
    name = os.path.basename(path)
    if ext in C_LIKE:
        yield from c_comments(text)
    elif ext in HASH_COMMENTS or name == "CMakeLists.txt" or (ext == "" and text.startswith("#!")):
        yield from hash_comments(text)


def c_comments(text):
    """// and /* */ comments; quotes are skipped so "http://..." in a string is not a comment."""
    in_block = False
    for no, line in enumerate(text.splitlines(), 1):
        out = []
        i, n = 0, len(line)
        quote = None
        while i < n:
            c = line[i]
            if in_block:
                end = line.find("*/", i)
                if end < 0:
                    out.append(line[i:])
                    break
                out.append(line[i:end])
                in_block = False
                i = end + 2
            elif quote:
                if c == "\\":
                    i += 2
                    continue
                if c == quote:
                    quote = None
                i += 1
            elif c in "\"'":
                # a digit separator (1'000) is not a character literal
                if c == "'" and i > 0 and line[i - 1].isalnum() and i + 1 < n and line[i + 1].isalnum():
                    i += 1
                    continue
                quote = c
                i += 1
            elif line.startswith("//", i):
                out.append(line[i + 2:])
                break
            elif line.startswith("/*", i):
                in_block = True
                i += 2
            else:
                i += 1
        if out:
            yield no, " ".join(out)


def hash_comments(text):
    for no, line in enumerate(text.splitlines(), 1):
        quote = None
        for i, c in enumerate(line):
            if quote:
                if c == quote:
                    quote = None
            elif c in "\"'":
                quote = c
            elif c == "#" and (i == 0 or line[i - 1] in " \t"):
                if not line.startswith("#!"):
                    yield no, line[i + 1:]
                break


def expand_braces(token):
    m = re.search(r"\{([^{}]*)\}", token)
    if not m:
        return [token]
    out = []
    for alt in m.group(1).split(","):
        out.extend(expand_braces(token[:m.start()] + alt + token[m.end():]))
    return out


class Repo:
    def __init__(self, root):
        self.root = root
        self.files = set()
        self.dirs = set()
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS and not d.startswith("build")]
            rel = os.path.relpath(dirpath, root).replace(os.sep, "/")
            rel = "" if rel == "." else rel + "/"
            for d in dirnames:
                self.dirs.add(rel + d)
            for f in filenames:
                self.files.add(rel + f)

    def exists(self, path):
        path = path.rstrip("/")
        if any(c in path for c in "*?["):
            return any(fnmatch.fnmatchcase(p, path) for p in self.files | self.dirs)
        return path in self.files or path in self.dirs


def candidate(token):
    """The path a token names, or None when it names no particular file."""
    token = token.rstrip(".,:;")
    if any(token.startswith(e) for e in EXAMPLES):
        return None
    if "<" in token or ">" in token:
        return None  # a template (ops/<op>.h): no particular file
    if token.endswith("/"):
        return token
    base = token.rsplit("/", 1)[-1]
    if re.search(r"\.(?:\*|\{[^{}]*\})$", token) or any(base.endswith(e) for e in EXTENSIONS):
        return token
    if re.search(r"\*$", token):
        return token  # a directory's files (apps/mnist_train/*)
    return None  # no extension and no trailing /: a word (data/labels), not a claim about a file


def tokens(text):
    for m in PATH_RE.finditer(text):
        path = candidate(m.group(0))
        if path:
            yield path


def scanned_files(repo):
    docs = sorted(p for p in repo.files if re.fullmatch(r"docs/[^/]+\.md", p))
    if "README.md" in repo.files:
        docs.append("README.md")
    sources = []
    for p in sorted(repo.files):
        if any(p == e or p.startswith(e + "/") for e in EXCLUDE):
            continue
        if "/" in p and p.split("/", 1)[0] not in TOP_DIRS:
            continue  # not ember's sources (an in-tree build directory, a virtual environment)
        ext = os.path.splitext(p)[1]
        if ext in C_LIKE or ext in HASH_COMMENTS or os.path.basename(p) == "CMakeLists.txt":
            sources.append(p)
        elif ext == "" and p.startswith("scripts/"):
            sources.append(p)
    return docs, sources


def check(root):
    repo = Repo(root)
    missing = []  # (file, line, path)
    docs, sources = scanned_files(repo)

    def visit(rel, lines):
        for no, text in lines:
            for path in tokens(text):
                if not all(repo.exists(p) for p in expand_braces(path)):
                    missing.append((rel, no, path))

    for rel in docs:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            visit(rel, enumerate(f.read().splitlines(), 1))
    for rel in sources:
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            visit(rel, comment_lines(rel, f.read()))
    return missing


ROOT_DEFAULT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=ROOT_DEFAULT, help="the repository to check (default: this one)")
    ap.add_argument("--expect-missing", nargs="+", metavar="PATH",
                    help="succeed only if exactly these paths are reported missing")
    args = ap.parse_args()
    root = os.path.normpath(os.path.abspath(args.root))
    missing = check(root)
    for rel, no, path in missing:
        print(f"{rel}:{no}: '{path}' does not exist in the repository")
    if args.expect_missing is not None:
        got, want = {p for _, _, p in missing}, set(args.expect_missing)
        sys.stdout.flush()
        if got != want:
            print(f"check_paths: expected exactly {sorted(want)} to be reported missing, got {sorted(got)}",
                  file=sys.stderr)
            return 1
        print(f"check_paths: the missing paths were found ({len(missing)} reports), as expected")
        return 0
    if missing:
        sys.stdout.flush()
        print(f"check_paths: {len(missing)} reference(s) to paths that do not exist; fix the path or reword the "
              "comment (docs/*.md, README.md and source comments are checked)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
