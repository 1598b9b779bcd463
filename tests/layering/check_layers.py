#!/usr/bin/env python3
"""The house rule, checked from the includes: every #include "x/..." of a source file points to
its own folder or a lower one, and the file-level include graph has no cycle.

Order (lower first): tensor < ops < comm < runtime/<wing> < models < launch, and inside runtime
  common < {io, observe, data} < nn < optim < {parallel, pipeline} < setup < plan < {train, generate}
Wings of the same rank do not include each other. Prints every violation; exit 1 if any.
Usage: check_layers.py SOURCE_DIR"""
import os
import re
import sys

TOP = {"tensor": 0, "ops": 1, "comm": 2, "runtime": 3, "models": 4, "launch": 5}
WING = {"common": 0, "io": 1, "observe": 1, "data": 1, "nn": 2, "optim": 3, "parallel": 4, "pipeline": 4, "setup": 5, "plan": 6,
        "train": 7, "generate": 7}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def place(path):
    """(rank tuple, name) of a repository path, or None outside the layered folders."""
    parts = path.split("/")
    if parts[0] not in TOP:
        return None
    if parts[0] == "runtime":
        if len(parts) < 3 or parts[1] not in WING:
            return ((TOP["runtime"], -1), "runtime/" + (parts[1] if len(parts) > 2 else "(root)"))
        return ((TOP["runtime"], WING[parts[1]]), "runtime/" + parts[1])
    return ((TOP[parts[0]], 0), parts[0])


def main(root):
    problems = []
    graph = {}
    for top in TOP:
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for f in files:
                if not f.endswith((".h", ".cpp", ".cu", ".cuh")):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, f), root).replace(os.sep, "/")
                me = place(rel)
                if me[0][1] == -1:
                    problems.append(f"{rel}: runtime/ files live in a wing folder ({', '.join(WING)})")
                text = open(os.path.join(dirpath, f), encoding="utf-8", errors="replace").read()
                deps = []
                for inc in INCLUDE.findall(text):
                    if not os.path.exists(os.path.join(root, inc)):
                        if "/" in inc and inc.split("/")[0] in TOP:
                            problems.append(f"{rel}: includes {inc}, which does not exist")
                        continue
                    deps.append(inc)
                    other = place(inc)
                    if other is None or other[1] == me[1]:
                        continue
                    if other[0] > me[0] or (other[0][0] == me[0][0] and other[0] == me[0]):
                        problems.append(f"{rel} ({me[1]}) includes {inc} ({other[1]}): an upward or sideways arrow")
                graph[rel] = deps
    # cycles between files (depth-first search, colours)
    colour = {}

    def visit(node, stack):
        colour[node] = 1
        stack.append(node)
        for dep in graph.get(node, []):
            if colour.get(dep) == 1:
                problems.append("include cycle: " + " -> ".join(stack[stack.index(dep):] + [dep]))
            elif colour.get(dep) is None:
                visit(dep, stack)
        stack.pop()
        colour[node] = 2

    for node in sorted(graph):
        if colour.get(node) is None:
            visit(node, [])
    for p in problems:
        print(p)
    print(f"checked {len(graph)} files: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
