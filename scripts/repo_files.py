"""What the repository checks share: walking a layer's source files, reading a table file and
reporting what a check found.

Imported by scripts/check_function_length.py, scripts/check_layers.py, scripts/check_notes.py and
scripts/kernel_resources.py (a script's own directory is on sys.path when it runs).
"""
import os
import sys


def source_files(root, base, extensions):
    """Yields (path, rel) for every file under root/base whose name ends with one of extensions,
    in sorted order; rel is the path relative to root with '/' separators."""
    for dirpath, _, files in sorted(os.walk(os.path.join(root, base))):
        for name in sorted(files):
            if name.endswith(extensions):
                path = os.path.join(dirpath, name)
                yield path, os.path.relpath(path, root).replace(os.sep, "/")


def table_lines(path):
    """Yields (line number, stripped text) of the lines of a table file that are neither blank nor a
    '#' comment; nothing when the file does not exist."""
    if not path or not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            text = line.strip()
            if text and not text.startswith("#"):
                yield lineno, text


def report(problems, failure, success):
    """Prints each problem on stdout, then `failure` (if any) on stderr, and returns the exit code 1;
    with no problem, prints `success` and returns 0."""
    for p in problems:
        print(p)
    if problems:
        if failure:
            print(failure, file=sys.stderr)
        return 1
    print(success)
    return 0
