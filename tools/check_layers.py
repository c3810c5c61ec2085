#!/usr/bin/env python3
"""Checks the two structural rules of the source tree (docs/ARCHITECTURE.md, "Layers"):

  1. Lower layers never include higher ones. The order is MOE_SUBDIRS in the top-level CMakeLists.txt
     (lowest first); a file under one of those folders may include project headers of its own folder
     or of an earlier one only.
  2. Every CMake target links what it includes: for each library, executable and test, the project
     library that owns each header its own sources include is the target itself or is named in the
     target's own target_link_libraries (moe_add_test LIBS), not only reached through another library.

A header belongs to the library that compiles the .cc of the same name; a header without one belongs
to the first library declared in its folder. Prints every violation (file, include, rule) and exits 1
if there is any.

Usage: tools/check_layers.py [SOURCE_DIR]
"""
import glob
import os
import re
import sys


def strip_comments(text):
    return re.sub(r"#[^\n]*", "", text)


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def project_includes(path):
    return re.findall(r'^\s*#include "([^"]+)"', read(path), re.M)


def layer_order(root):
    top = strip_comments(read(os.path.join(root, "CMakeLists.txt")))
    m = re.search(r"set\(MOE_SUBDIRS([^)]*)\)", top)
    if not m:
        sys.exit("check_layers: no set(MOE_SUBDIRS ...) in CMakeLists.txt")
    return m.group(1).split()


def cmake_targets(root):
    """name -> (folder, [sources]); name -> set of directly linked moe_* libraries."""
    targets, links = {}, {}
    for cm in sorted(glob.glob(os.path.join(root, "**", "CMakeLists.txt"), recursive=True)):
        folder = os.path.relpath(os.path.dirname(cm), root)
        if folder.split(os.sep)[0] in ("build", "build-asan") or folder.startswith("tests/data"):
            continue
        text = strip_comments(read(cm))
        # `set(name_sources a.cc b.cc)` lists used as add_library(x ${name_sources})
        lists = {m.group(1): m.group(2).split() for m in re.finditer(r"set\((\w+_sources)([^)]*)\)", text)}
        for m in re.finditer(r"list\(APPEND (\w+_sources)([^)]*)\)", text):
            lists.setdefault(m.group(1), []).extend(m.group(2).split())

        def sources(words):
            out = []
            for w in words:
                v = re.fullmatch(r"\$\{(\w+)\}", w)
                out.extend(lists.get(v.group(1), []) if v else [w])
            return [os.path.join(folder, s) for s in out if s.endswith((".cc", ".cu"))]

        for m in re.finditer(r"add_(?:library|executable)\((\w+)([^)]*)\)", text):
            targets[m.group(1)] = (folder, sources(m.group(2).split()))
        for m in re.finditer(r"target_sources\((\w+)\s+PRIVATE([^)]*)\)", text):
            targets[m.group(1)][1].extend(sources(m.group(2).split()))
        for m in re.finditer(r"moe_add_test\((\w+)\s+SOURCES(.*?)LIBS(.*?)(?:LABELS|TIMEOUT|\))", text, re.S):
            targets[m.group(1)] = (folder, sources(m.group(2).split()))
            links.setdefault(m.group(1), set()).update(w for w in m.group(3).split() if w.startswith("moe_"))
        for m in re.finditer(r"target_link_libraries\((\w+)([^)]*)\)", text):
            links.setdefault(m.group(1), set()).update(w for w in m.group(2).split() if w.startswith("moe_"))
        # foreach(lib moe_a moe_b) ... target_link_libraries(t PRIVATE ${lib}) ... endforeach()
        for m in re.finditer(r"foreach\((\w+)([^)]*)\)(.*?)endforeach\(\)", text, re.S):
            var, libs, body = m.group(1), m.group(2).split(), m.group(3)
            for t in re.finditer(r"target_link_libraries\((\w+)\s+\w+\s+\$\{" + var + r"\}\)", body):
                links.setdefault(t.group(1), set()).update(libs)
    return targets, links


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    order = layer_order(root)
    rank = {d: i for i, d in enumerate(order)}
    problems = []

    def layer_of(path):
        best = None
        for d in order:
            if path == d or path.startswith(d + "/"):
                if best is None or len(d) > len(best):
                    best = d
        return best

    # Rule 1: layers.
    for d in order:
        for path in sorted(glob.glob(os.path.join(root, d, "**", "*"), recursive=True)):
            if not path.endswith((".h", ".cc", ".cu")):
                continue
            rel = os.path.relpath(path, root)
            for inc in project_includes(path):
                dep = layer_of(inc)
                if dep is not None and rank[dep] > rank[d]:
                    problems.append(f"{rel}: includes {inc} (layer {dep} is above {d})")

    # Rule 2: links.
    targets, links = cmake_targets(root)
    owner = {}
    for name, (folder, srcs) in targets.items():
        if name.startswith("moe_"):
            for s in srcs:
                owner.setdefault(os.path.splitext(s)[0] + ".h", name)
    folder_lib = {}
    for name, (folder, srcs) in targets.items():
        if name.startswith("moe_"):
            folder_lib.setdefault(folder, name)
    for name, (folder, srcs) in sorted(targets.items()):
        mine = links.get(name, set()) | {name}
        for s in srcs:
            path = os.path.join(root, s)
            if not os.path.exists(path):
                problems.append(f"{s}: listed in target {name} but missing")
                continue
            for inc in project_includes(path):
                if inc.startswith("proto/"):
                    lib = "moe_proto"
                elif inc.startswith("tests/"):
                    continue  # test-only helpers (headers), no library
                else:
                    lib = owner.get(inc) or folder_lib.get(os.path.dirname(inc))
                if lib is not None and lib not in mine:
                    problems.append(f"{s}: includes {inc} of {lib}, which target {name} does not link")
    for p in problems:
        print(p)
    print(f"check_layers: {len(order)} layers, {len(targets)} targets, {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
