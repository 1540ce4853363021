#!/usr/bin/env python3
"""Kernels stand below the op frontends (docs/extending.md, issue 28): no
file under kernels/ includes the ops frontend (ddp/tensor/ops.h), an
autograd header (ddp/autograd/...) or a layer above the tensor layer
(ddp/nn/..., ddp/optim/..., ddp/parallel/...). The exceptions still in the
tree would be listed below, each with the headers it may include; the
check fails on a new violation and on an exception that no longer needs
its entry, so the list can only shrink (it is empty now).

    python3 tests/docs/check_kernel_includes.py [--root DIR]
"""
import argparse
import os
import re
import sys

UPWARD = re.compile(r'^\s*#\s*include\s+"(ddp/(?:tensor/ops\.h|autograd/[^"]+|nn/[^"]+|'
                    r'optim/[^"]+|parallel/[^"]+|amp/[^"]+))"', re.M)

# Files allowed an upward include, each with the headers it may include.
# Empty: every kernel, the cuDNN wrappers' fallbacks included, is built from
# the Tensor's own methods, the Backend and the registry. Keep it so.
ALLOWED = {}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))))
    root = p.parse_args().root
    found = {}
    for dirpath, _, files in os.walk(os.path.join(root, "kernels")):
        for name in sorted(files):
            if not name.endswith((".cpp", ".cu", ".h", ".cuh")):
                continue
            path = os.path.join(dirpath, name)
            rel = os.path.relpath(path, root)
            with open(path, encoding="utf-8") as f:
                headers = set(UPWARD.findall(f.read()))
            if headers:
                found[rel] = headers
    errors = []
    for rel, headers in sorted(found.items()):
        extra = headers - ALLOWED.get(rel, set())
        for h in sorted(extra):
            errors.append(f"{rel}: includes {h}, a header above the kernels (docs/extending.md)")
    for rel, allowed in sorted(ALLOWED.items()):
        unused = allowed - found.get(rel, set())
        for h in sorted(unused):
            errors.append(f"{rel}: no longer includes {h}; remove it from ALLOWED in {__file__}")
    for e in errors:
        print(e)
    print(f"checked kernels/: {len(found)} file(s) include upward, "
          f"{sum(len(v) for v in ALLOWED.values())} allowed includes; {len(errors)} offence(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
