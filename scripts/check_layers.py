#!/usr/bin/env python3
"""Fails when a library source includes a header of a higher layer (docs/architecture.md, "Layers").

Each top-level library directory is a layer; a file may include headers of its own directory and of
the directories in lower tiers, never of its tier's siblings or anything above. CMake links the
layers as separate static libraries in the same order (ember_core <- ember_kernels <- ember_train
<- ember_dist), so an upward include is the first step of a call that would no longer link.

    scripts/check_layers.py [--root DIR]   # DIR: the tree to scan (default: this repository)

Prints one line per upward include (file:line, the included path, the layers that file may
include) and exits 1; prints "layer check: OK ..." and exits 0 when there is none. Only quoted
includes whose first path component is a top-level directory of the tree (or ember.h) are checked;
same-directory includes ("foo.h") and system headers (<...>) are not. apps/, tests/, bench/,
examples/ and fuzz/ are above every layer and are not scanned.
"""
import argparse
import os
import re
import sys

from repo_files import source_files

# Lowest first. A directory may include its own headers and those of every lower tier. Siblings in
# one tier are independent of each other: nn/ does not include optim/ or data/, and so on.
TIERS = [
    ["sim"],                                # the simulator (EMBER_CUDA_SIM builds): CUDA runtime, PTX, libraries
    ["core"],                               # tensor, autograd, CUDA runtime layer
    ["kernels"],                            # ops, registry and runner, GEMM engines
    ["io"],                                 # safetensors, atomic files, the state_dict types
    ["nn", "optim", "data", "logging"],     # modules, optimizers, datasets and loader, logging
    ["amp"],                                # GradScaler (steps an optim::Optimizer)
    ["ckpt"],                               # training checkpoints (nn + optim + amp + io)
    ["dist"],                               # process groups, DDP, SyncBatchNorm
]

# Finer rules inside a layer: (directory, directories it may not include, why).
INNER_RULES = [
    ("kernels/common", ["kernels/ops", "kernels/gemm"],
     "kernels/common/ holds what every op uses; an op's header belongs to the op"),
]

# A layer whose headers above it may include only these (the rest is its own business): the
# simulator is reached through the CUDA runtime API it implements, its controls and the device
# built-ins kernel code is compiled against (the mbarrier ones apart, for the few kernels using them).
PUBLIC_HEADERS = {
    "sim": ["sim/sim.h", "sim/device_api.h", "sim/mbarrier_api.h", "sim/cluster_api.h"],
}

SOURCE_EXTENSIONS = (".h", ".cpp", ".cu", ".cuh", ".def")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def tier_of(layer):
    for i, tier in enumerate(TIERS):
        if layer in tier:
            return i
    return None


def allowed_for(layer):
    t = tier_of(layer)
    return [layer] + [d for tier in TIERS[:t] for d in tier]


def scan(root):
    """Yields (file, line number, included path, message) for every upward include under root."""
    top_dirs = {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))}
    for layer in [d for tier in TIERS for d in tier]:
        layer_dir = os.path.join(root, layer)
        if not os.path.isdir(layer_dir):
            continue
        allowed = allowed_for(layer)
        for path, rel in source_files(root, layer, SOURCE_EXTENSIONS):
            with open(path, encoding="utf-8", errors="replace") as f:
                for lineno, line in enumerate(f, 1):
                    m = INCLUDE_RE.match(line)
                    if not m:
                        continue
                    inc = m.group(1)
                    first = inc.split("/", 1)[0]
                    if "/" not in inc:
                        if inc == "ember.h":
                            yield rel, lineno, inc, (f"ember.h is the umbrella over every layer; {layer}/ may "
                                                     f"include only {', '.join(d + '/' for d in allowed)}")
                        continue  # same-directory include
                    if first not in top_dirs and tier_of(first) is None:
                        continue  # not a path of this tree (e.g. a third-party "gloo/..." header)
                    if first not in allowed:
                        where = (f"layer {tier_of(first)}, {'a sibling' if tier_of(first) == tier_of(layer) else 'above'}"
                                 if tier_of(first) is not None else "not a library layer")
                        yield rel, lineno, inc, (f"{layer}/ (layer {tier_of(layer)}) may include only "
                                                 f"{', '.join(d + '/' for d in allowed)}; {first}/ is {where}")
                        continue
                    if first != layer and first in PUBLIC_HEADERS and inc not in PUBLIC_HEADERS[first]:
                        yield rel, lineno, inc, (f"a private header: {first}/ is included from other layers "
                                                 f"only through {', '.join(PUBLIC_HEADERS[first])}")
                        continue
                    for inner, forbidden, why in INNER_RULES:
                        if rel.startswith(inner + "/") and any(inc.startswith(fb + "/") for fb in forbidden):
                            yield rel, lineno, inc, (f"{inner}/ may not include {', '.join(fb + '/' for fb in forbidden)}"
                                                     f" ({why})")


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--root", default=os.path.dirname(here), help="the tree to scan (default: this repository)")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    violations = list(scan(root))
    for rel, lineno, inc, msg in violations:
        kind = "include" if msg.startswith("a private header") else "upward include"
        print(f'{rel}:{lineno}: {kind} "{inc}": {msg}')
    if violations:
        order = " < ".join("{" + ", ".join(t) + "}" if len(t) > 1 else t[0] for t in TIERS)
        print(f"layer check: {len(violations)} include(s) against the layers in {root}. The layers, lowest first: {order} "
              "(docs/architecture.md, \"Layers\"). Move the declaration down or the caller up.", file=sys.stderr)
        return 1
    print(f"layer check: OK ({root})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
