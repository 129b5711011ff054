#!/usr/bin/env python3
"""Checks that a Note name identifies one note: defined once, and every citation names a defined one.

ember explains its invariants and decisions in Notes: a comment paragraph that starts with
`Note [name]:` (right after the comment marker) defines one; `Note [name]` anywhere else cites
it, in source comments and in docs/*.md and README.md. A comment that starts with the note's
name counts as a definition even without the colon, so a citation never reads like one. Two notes with one name leave a reader with two
texts for one reference; a citation of a note that does not exist (renamed, deleted) points at
nothing. This reports both, as file:line.

  scripts/check_notes.py [--root DIR]          exit 1 and one line per problem
  scripts/check_notes.py --root DIR --expect-problems P ...
                                               exit 0 only if exactly the problems P are found,
                                               each "defined twice: NAME" or "not defined: NAME"
                                               (the ctest entry that shows the check can fail)
"""
import argparse
import os
import re
import sys

from repo_files import report

SOURCES = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh", ".def", ".inc", ".py", ".sh", ".cmake")
DOCS = (".md",)
SKIP_DIRS = {".git", "__pycache__"}
# The fixture of the check's own test defines and cites wrongly on purpose; this file describes
# the syntax with made-up names.
EXCLUDE = ["tests/notes", "scripts/check_notes.py"]

NOTE = re.compile(r"Note \[([^\]\n]+)\]")
# Where a comment's text starts with a note's name: at the start of a line or after code.
COMMENT_NOTE = re.compile(r"(?:^\s*|\s)(?://+|/\*+|#+)\s*Note \[([^\]\n]+)\](:?)|^\s*\*\s*Note \[([^\]\n]+)\](:?)")
COMMENT_LINE = re.compile(r"^\s*(?://|/\*|\*|#)")


def files(root, exclude):
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("build")
                             and os.path.normpath(os.path.join(rel_dir, d)) not in exclude)
        for name in sorted(filenames):
            rel = os.path.normpath(os.path.join(rel_dir, name))
            if (name.endswith(SOURCES + DOCS) or name == "CMakeLists.txt") and rel not in exclude:
                yield rel


def scan(root, exclude):
    """Returns ({name: [where defined]}, {name: [where cited]})."""
    defined, cited = {}, {}
    for rel in files(root, exclude):
        is_doc = rel.endswith(DOCS)
        previous_is_comment = False
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f, 1):
                # A definition, or what reads like one: "Note [x]:" opening a comment, or a comment
                # block whose first line opens with "Note [x]". A wrapped line that starts with a
                # citation, or a citation after code without the colon, is a citation.
                d = None if is_doc else COMMENT_NOTE.search(line)
                name = None
                if d:
                    name, colon = (d.group(1), d.group(2)) if d.group(1) else (d.group(3), d.group(4))
                    whole_line = COMMENT_LINE.match(line) is not None
                    if not (colon or (whole_line and not previous_is_comment)):
                        name = None
                if name:
                    defined.setdefault(name, []).append(f"{rel}:{n}")
                for m in NOTE.finditer(line):
                    if name and m.group(1) == name and m.start() == line.index("Note [" + name):
                        continue  # the definition itself
                    cited.setdefault(m.group(1), []).append(f"{rel}:{n}")
                previous_is_comment = COMMENT_LINE.match(line) is not None or "//" in line
    return defined, cited


def problems(defined, cited):
    out = []
    for name, where in sorted(defined.items()):
        if len(where) > 1:
            out.append((f"defined twice: {name}", ", ".join(where)))
    for name, where in sorted(cited.items()):
        if name not in defined:
            out.append((f"not defined: {name}", ", ".join(where)))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("--expect-problems", nargs="*", default=None)
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    exclude = [] if args.expect_problems is not None else [os.path.normpath(e) for e in EXCLUDE]
    defined, cited = scan(root, exclude)
    found = problems(defined, cited)
    if args.expect_problems is not None:
        got = sorted(p for p, _ in found)
        want = sorted(args.expect_problems)
        if got != want:
            print(f"check_notes: expected exactly {want}, found {got}")
            return 1
        print(f"check_notes: found exactly the {len(want)} expected problem(s)")
        return 0
    return report([f"{what} ({where})" for what, where in found], None,
                  f"check_notes: {len(defined)} notes, each defined once; {sum(len(v) for v in cited.values())} "
                  "citations, all of defined notes")


if __name__ == "__main__":
    sys.exit(main())
