#!/usr/bin/env python3
"""Per-kernel resources of the nvcc build for sm_90, as ptxas reported them, against the checked-in
table bench/model/kernel_resources_sm90.txt.

    scripts/kernel_resources.py --build DIR --write   # regenerate the table from the build DIR
    scripts/kernel_resources.py --build DIR --check   # fail if the build and the table differ, or
                                                      # on a spill or stack frame not allowed

The nvcc build compiles every library .cu with --resource-usage and keeps ptxas's report beside
the object as <object>.resource-usage.txt (cmake/kernel_resources.cmake). The toolkit on the build
machines has no cuobjdump (cuobjdump --dump-resource-usage would read the same numbers from the
cubin); ptxas prints them while compiling. Names are demangled with c++filt, which gives the same
form as the simulator's reports (abi::__cxa_demangle of the host compiler's symbols): nvcc's
anonymous namespaces (_GLOBAL__N__<hash>_<file>) demangle to "(anonymous namespace)" like g++'s.

--check fails, naming the kernel and the counter, when:
  - a kernel's registers, static shared memory, stack frame or spills differ from the table, or a
    kernel is new or gone (the table must stay current: rerun with --write and commit it);
  - a kernel spills (spill stores or loads > 0) or has a stack frame (local memory), unless
    bench/model/kernel_resources_allow.txt allows that counter up to a bound, with a reason.
Occupancy claims (blocks per SM that a kernel's comment promises) are checked against the table by
the C++ model's test (tests/test_gpu_model.cpp, bench/model/kernel_claims.txt), so the rules of
the occupancy calculation live in one place (bench/model/gpu_model.cpp).
"""
import argparse
import os
import re
import subprocess
import sys

from repo_files import table_lines

ARCH = "sm_90"
# the Hopper-only objects (*_sm90a.cu) are compiled for the arch-specific sm_90a: same table
ARCHES = (ARCH, ARCH + "a")
COUNTERS = ["registers", "static_shared", "stack_frame", "spill_stores", "spill_loads"]
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_TABLE = os.path.join(REPO, "bench", "model", "kernel_resources_sm90.txt")
DEFAULT_ALLOW = os.path.join(REPO, "bench", "model", "kernel_resources_allow.txt")

RE_ENTRY = re.compile(r"^ptxas info\s*: Compiling entry function '([^']+)' for '(sm_\w+)'")
RE_PROPS = re.compile(r"^ptxas info\s*: Function properties for (\S+)")
RE_FRAME = re.compile(r"^\s*(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
RE_USED = re.compile(r"^ptxas info\s*: Used (\d+) registers")
RE_SMEM = re.compile(r"(\d+) bytes smem")


class Error(Exception):
    pass


def parse_report(path):
    """Entries of one ptxas report: {mangled name: {counter: value}} for ARCH only."""
    kernels = {}
    entry = None   # (mangled, arch) of the entry function being compiled
    props = None   # name of the last "Function properties for"
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            m = RE_ENTRY.match(line)
            if m:
                entry = (m.group(1), m.group(2))
                if entry[1] in ARCHES:
                    kernels[entry[0]] = {}
                continue
            m = RE_PROPS.match(line)
            if m:
                props = m.group(1)
                continue
            m = RE_FRAME.match(line)
            if m:
                # Non-entry functions (calls ptxas did not inline) get properties too; only the
                # kernel's own line is kept.
                if entry and entry[1] in ARCHES and props == entry[0]:
                    k = kernels[entry[0]]
                    k["stack_frame"], k["spill_stores"], k["spill_loads"] = (int(g) for g in m.groups())
                continue
            m = RE_USED.match(line)
            if m and entry and entry[1] in ARCHES:
                k = kernels[entry[0]]
                k["registers"] = int(m.group(1))
                s = RE_SMEM.search(line)
                k["static_shared"] = int(s.group(1)) if s else 0
                entry = None  # the "Used" line closes the entry
    for name, k in kernels.items():
        missing = [c for c in COUNTERS if c not in k]
        if missing:
            raise Error(f"{path}: ptxas report for {name} lacks {', '.join(missing)} (unexpected ptxas output format)")
    return kernels


def collect(build):
    """All kernels of the build's reports: {mangled: counters}. A template instantiated in two
    objects is compiled twice with the same flags; the larger number of each counter is kept."""
    reports = []
    for root, _, files in os.walk(build):
        reports += [os.path.join(root, f) for f in files if f.endswith(".resource-usage.txt")]
    # A source removed from the tree leaves its object and report behind; with Ninja the build
    # file names every current object, so only their reports count.
    ninja = os.path.join(build, "build.ninja")
    if os.path.exists(ninja):
        with open(ninja, encoding="utf-8", errors="replace") as f:
            text = f.read()
        reports = [r for r in reports if os.path.relpath(r[:-len(".resource-usage.txt")], build) in text]
    if not reports:
        raise Error(f"{build}: no *.resource-usage.txt reports; is it an nvcc build (EMBER_CUDA=ON) configured "
                    "with EMBER_KERNEL_RESOURCES=ON (cmake/kernel_resources.cmake), and built?")
    kernels = {}
    for path in sorted(reports):
        for name, k in parse_report(path).items():
            if name in kernels:
                kernels[name] = {c: max(kernels[name][c], k[c]) for c in COUNTERS}
            else:
                kernels[name] = k
    if not kernels:
        raise Error(f"{build}: the reports name no {ARCH} kernels (CMAKE_CUDA_ARCHITECTURES must include 90)")
    return kernels


def demangle(names):
    out = subprocess.run(["c++filt"], input="\n".join(names) + "\n", capture_output=True, text=True, check=True)
    demangled = out.stdout.splitlines()
    if len(demangled) != len(names):
        raise Error("c++filt returned a different number of names than it was given")
    return demangled


def build_table(build):
    mangled = collect(build)
    names = sorted(mangled)
    table = {}
    for m, d in zip(names, demangle(names)):
        if d in table:
            raise Error(f"two kernels demangle to the same name: {d}")
        table[d] = mangled[m]
    return table


def nvcc_version(build):
    """The build's CUDA compiler's version line, from its CMakeCache.txt."""
    cache = os.path.join(build, "CMakeCache.txt")
    nvcc = None
    if os.path.exists(cache):
        with open(cache, encoding="utf-8") as f:
            for line in f:
                if line.startswith("CMAKE_CUDA_COMPILER:"):
                    nvcc = line.split("=", 1)[1].strip()
    if not nvcc:
        return "unknown nvcc"
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown nvcc"
    lines = [l for l in out.splitlines() if l.startswith("Cuda compilation tools")]
    return lines[0] if lines else "unknown nvcc"


def format_table(table, version):
    lines = [
        f"# Per-kernel resources of ember's {ARCH} build, as ptxas reported them (--resource-usage).",
        "# Generated by: scripts/kernel_resources.py --build <nvcc build> --write",
        f"# Compiler: {version}",
        "# Read by bench/model/gpu_model.cpp (load_kernel_resources); checked against every nvcc build",
        "# by the ctest entry \"model: kernel resources of the sm_90 build match ...\".",
        "# Columns: registers per thread, static shared memory (bytes), stack frame (bytes per thread),",
        "# spill stores (bytes), spill loads (bytes), the demangled kernel name.",
        "#",
        f"# {'regs':>4} {'smem':>6} {'stack':>5} {'st':>4} {'ld':>4}  kernel",
    ]
    for name in sorted(table):
        k = table[name]
        lines.append(f"{k['registers']:>6} {k['static_shared']:>6} {k['stack_frame']:>5} "
                     f"{k['spill_stores']:>4} {k['spill_loads']:>4}  {name}")
    return "\n".join(lines) + "\n"


def read_table(path):
    """The checked-in table: {name: counters} and the compiler line of its header."""
    table, version = {}, None
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            s = line.strip()
            if s.startswith("# Compiler:"):
                version = s[len("# Compiler:"):].strip()
            if not s or s.startswith("#"):
                continue
            parts = s.split(None, 5)
            if len(parts) < 6 or not all(p.isdigit() for p in parts[:5]):
                raise Error(f"{path}:{n}: expected 5 numbers and a kernel name")
            table[parts[5]] = dict(zip(COUNTERS, (int(p) for p in parts[:5])))
    return table, version


def glob_regex(pattern):
    """A kernel pattern of the allow-list: '*' matches any run of characters, everything else is
    literal (demangled names are full of regex and fnmatch metacharacters: ()[]*&)."""
    return re.compile("^" + ".*".join(re.escape(part) for part in pattern.split("*")) + "$")


def read_allow(path):
    """Allowances, one per line: "<counter> <= <bytes> | <kernel pattern> | <reason>", where counter
    is stack_frame, spill_stores or spill_loads and the pattern is a demangled name with '*'
    wildcards. Returns [(line, counter, bound, pattern, regex)]."""
    allow = []
    for n, s in table_lines(path):
        parts = [p.strip() for p in s.split(" | ")]
        m = re.fullmatch(r"(stack_frame|spill_stores|spill_loads)\s*<=\s*(\d+)", parts[0])
        if len(parts) != 3 or not m or not parts[1] or not parts[2]:
            raise Error(f"{path}:{n}: expected \"<stack_frame|spill_stores|spill_loads> <= <bytes> | <kernel pattern> | <reason>\"")
        allow.append((n, m.group(1), int(m.group(2)), parts[1], glob_regex(parts[1])))
    return allow


def check(build_table_, table_path, allow_path, build_version):
    table, table_version = read_table(table_path)
    allow = read_allow(allow_path)
    problems = []
    for name in sorted(set(build_table_) | set(table)):
        b, t = build_table_.get(name), table.get(name)
        if t is None:
            problems.append(f"{name}: new kernel, not in the table")
        elif b is None:
            problems.append(f"{name}: in the table but not in the build")
        else:
            for c in COUNTERS:
                if b[c] != t[c]:
                    problems.append(f"{name}: {c} {t[c]} in the table, {b[c]} in the build")
    stale = bool(problems)
    # Another nvcc allocates registers differently: then the table cannot match exactly, and a
    # mismatch is reported, not failed; the spill and stack-frame gate below still applies.
    other_compiler = bool(table_version) and table_version != build_version
    notes = []
    if stale and other_compiler:
        notes, problems = problems, []
    allow_rel = os.path.relpath(allow_path, REPO)
    used = set()
    for name in sorted(build_table_):
        b = build_table_[name]
        for c in ("spill_stores", "spill_loads", "stack_frame"):
            if b[c] == 0:
                continue
            rules = [a for a in allow if a[1] == c and a[4].match(name)]
            used.update(a[0] for a in rules)
            if not rules:
                what = "spills to local memory" if c != "stack_frame" else "has a stack frame (local memory)"
                problems.append(f"{name}: {c} = {b[c]} bytes: the kernel {what}; not allowed "
                                f"(fix it, or allow it with a reason in {allow_rel})")
            elif b[c] > max(a[2] for a in rules):
                problems.append(f"{name}: {c} = {b[c]} bytes, above the {max(a[2] for a in rules)} allowed in "
                                f"{allow_rel}:{rules[0][0]}")
    for (n, c, _, pattern, _) in allow:
        if n not in used:
            (notes if other_compiler else problems).append(f"{allow_rel}:{n}: allows {c} for {pattern}, which no kernel of the build needs (remove the line)")
    for p in notes:
        print(f"kernel resources: note: {p}")
    if notes:
        print(f"kernel resources: note: the table was made with {table_version}, this build with {build_version}: "
              f"differences are listed, not failed (the spill gate still applies)")
    if problems:
        for p in problems:
            print(f"kernel resources: {p}")
        if stale:
            hint = "; the table was made with " + table_version if table_version and table_version != build_version else ""
            print(f"kernel resources: the table is stale: regenerate it with scripts/kernel_resources.py "
                  f"--build <nvcc build> --write and commit it (build: {build_version}{hint})")
        return 1
    if notes:
        print(f"kernel resources: OK ({len(build_table_)} {ARCH} kernels; no spill or stack frame beyond the allowances)")
        return 0
    print(f"kernel resources: OK ({len(build_table_)} {ARCH} kernels match {os.path.relpath(table_path, REPO)}; "
          f"no spill or stack frame beyond the allowances)")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="the nvcc build directory (or any folder of *.resource-usage.txt)")
    mode = ap.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="regenerate the table")
    mode.add_argument("--check", action="store_true", help="compare the build with the table and enforce the gate")
    ap.add_argument("--table", default=DEFAULT_TABLE)
    ap.add_argument("--allow", default=DEFAULT_ALLOW)
    args = ap.parse_args()
    try:
        table = build_table(args.build)
        version = nvcc_version(args.build)
        if args.write:
            with open(args.table, "w", encoding="utf-8") as f:
                f.write(format_table(table, version))
            print(f"kernel resources: wrote {len(table)} {ARCH} kernels to {args.table}")
            return 0
        return check(table, args.table, args.allow, version)
    except (Error, OSError, subprocess.CalledProcessError) as e:
        print(f"kernel resources: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
