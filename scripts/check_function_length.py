#!/usr/bin/env python3
"""Fails when a function in the library or in apps/ is longer than the limit (80 lines by default).

A function that does not fit a screen is read by scrolling, and is usually several steps that
want names of their own (ARCHITECTURE.md, "Programs read top to bottom"). This check measures
every function body defined in the library layers (sim, core, kernels, io, nn, optim, data,
logging, amp, ckpt, dist) and in apps/: from the first line of its signature to its closing brace,
lambdas and local classes inside it included. tests/, bench/, examples/ and fuzz/ are not held to
it.

    scripts/check_function_length.py [--root DIR] [--limit N] [--allow FILE] [--list N]

Exceptions are named in the allow file (scripts/function_length_allow.txt), one per line:
`path function-name  why`; only where a function is long by nature (a table, a list of cases that
reads best in one place). An exception that no longer matches a long function is reported too,
so the file does not go stale. Exit 0 when every function fits; 1 naming each that does not, as
file:line, its name and its length.

The parser is a small scanner, not a compiler: comments, string and character literals and
preprocessor lines are blanked, then braces are matched. A brace block is a function body when
the text before it (since the last `;`, `{` or `}` at its level) has a parameter list and is not
a class, namespace, enum, initializer or control statement, and it opens at namespace or class
scope.
"""
import argparse
import os
import re
import sys

from repo_files import report, source_files, table_lines

LAYERS = ["sim", "core", "kernels", "io", "nn", "optim", "data", "logging", "amp", "ckpt", "dist", "apps"]
EXTENSIONS = (".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh")
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else|try|return)\b")
TYPE_INTRO = re.compile(r"\b(class|struct|union|enum|namespace)\b")
NAME_BEFORE_PARAMS = re.compile(r"((?:operator\s*(?:\(\)|[^\s(]+)|~?[A-Za-z_]\w*)(?:\s*<[^()]*>)?)\s*\($")


def blank_out(text):
    """Comments, literals and preprocessor lines replaced by spaces, newlines kept."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a preprocessor line, with its continuations
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            line_start = False
            continue
        line_start = c == "\n"
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append("".join("\n" if ch == "\n" else " " for ch in text[i:end]))
            i = end
            continue
        m = re.match(r'R"([^(]*)\(', text[i:i + 20]) if c == "R" and (i == 0 or not text[i - 1].isalnum()) else None
        if m:  # raw string literal
            close = ")" + m.group(1) + '"'
            end = text.find(close, i + len(m.group(0)))
            end = n if end < 0 else end + len(close)
            out.append('"' + "".join("\n" if ch == "\n" else " " for ch in text[i + 1:end - 1]) + '"')
            i = end
            continue
        if c == '"' or (c == "'" and not (i > 0 and (text[i - 1].isalnum()))):  # not a digit separator
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (min(j, n) - i - 1) + (c if j < n else ""))
            i = j + 1
            continue
        out.append(c)
        i += 1
    return "".join(out)


def functions(text):
    """Yields (name, first line, last line) of every function body at namespace or class scope."""
    src = blank_out(text)
    stack = []  # kinds of the open blocks: "ns", "class", "func", "other"
    head_start = 0  # offset where the text before the next block begins
    line_of = [0] * (len(src) + 1)
    line = 1
    for k, ch in enumerate(src):
        line_of[k] = line
        if ch == "\n":
            line += 1
    line_of[len(src)] = line
    starts = []
    for k, ch in enumerate(src):
        if ch == ";":
            if not stack or stack[-1] in ("ns", "class"):
                head_start = k + 1
        elif ch == "{":
            head = src[head_start:k]
            inside_func = any(s == "func" for s in stack)
            kind = "other"
            if not inside_func:
                kind = classify(head)
            stack.append(kind)
            if kind == "func":
                first = head_start + len(head) - len(head.lstrip())
                starts.append((first, k, head))
            head_start = k + 1
        elif ch == "}":
            if not stack:
                continue
            kind = stack.pop()
            if kind == "func":
                first, _, head = starts.pop()
                yield name_of(head), line_of[first], line_of[k]
            if not stack or stack[-1] in ("ns", "class"):
                head_start = k + 1


def classify(head):
    h = " ".join(head.split())
    if not h:
        return "other"
    if re.search(r"\bnamespace\b", h) or h.startswith('extern " "') or h.startswith("extern \"C\""):
        return "ns"
    if re.match(r'^extern\s*"\s*"\s*$', h):
        return "ns"
    if TYPE_INTRO.search(h) and "(" not in h.split("{")[0].split(":")[0]:
        return "class"
    if CONTROL.match(h) or "(" not in h:
        return "other"
    # `= {`, `= f({...`: an initializer, not a body
    depth = 0
    for c in h:
        if c in "(<[":
            depth += 1
        elif c in ")>]":
            depth -= 1
        elif c == "=" and depth <= 0:
            return "other"
    return "func" if ")" in h else "other"


def name_of(head):
    h = " ".join(head.split())
    # attributes with parentheses of their own come before the name
    h = re.sub(r"__launch_bounds__\s*\([^()]*\)|__attribute__\s*\(\(.*?\)\)|\[\[.*?\]\]", " ", h)
    # the name is what stands before the parameter list: the first '(' at angle depth 0
    depth = 0
    for i, c in enumerate(h):
        if c == "<":
            depth += 1
        elif c == ">":
            depth = max(0, depth - 1)
        elif c == "(" and depth == 0:
            m = NAME_BEFORE_PARAMS.search(h[:i + 1])
            if m:
                return m.group(1).replace(" ", "")
            break
    return h[:40]


def scan(root, limit):
    for layer in LAYERS:
        base = os.path.join(root, layer)
        if not os.path.isdir(base):
            continue
        for path, rel in source_files(root, layer, EXTENSIONS):
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for name, first, last in functions(text):
                n = last - first + 1
                if n > limit:
                    yield rel, first, name, n


def read_allow(path):
    allow = {}
    for lineno, line in table_lines(path):
        parts = line.split(None, 2)
        if len(parts) < 3:
            raise SystemExit(f"{path}:{lineno}: expected 'path function-name why', got '{line}'")
        allow[(parts[0], parts[1])] = lineno
    return allow


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.dirname(here))
    ap.add_argument("--limit", type=int, default=80)
    ap.add_argument("--allow", default=os.path.join(here, "function_length_allow.txt"))
    ap.add_argument("--list", type=int, default=0, help="print the N longest functions and exit 0")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    if args.list:
        rows = sorted(scan(root, 0), key=lambda r: -r[3])[:args.list]
        for rel, line, name, n in rows:
            print(f"{n:5d}  {rel}:{line}  {name}")
        return 0
    allow = read_allow(args.allow)
    long_ones = list(scan(root, args.limit))
    bad = [r for r in long_ones if (r[0], r[2]) not in allow]
    used = {(r[0], r[2]) for r in long_ones}
    stale = [(k, line) for k, line in allow.items() if k not in used]
    problems = [f"{rel}:{line}: {name} is {n} lines, over the limit of {args.limit}" for rel, line, name, n in bad]
    problems += [f"{args.allow}:{line}: the exception for {rel} {name} matches no function over {args.limit} lines; "
                 "remove it" for (rel, name), line in stale]
    return report(problems,
                  f"function length: {len(bad)} function(s) over {args.limit} lines, {len(stale)} stale exception(s). "
                  "Split long functions into named steps (a table long by nature may be named in "
                  f"{args.allow}).",
                  f"function length: every function in {', '.join(LAYERS)} fits in {args.limit} lines "
                  f"({len(long_ones)} named exception(s))")


if __name__ == "__main__":
    sys.exit(main())
