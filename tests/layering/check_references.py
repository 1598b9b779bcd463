#!/usr/bin/env python3
"""Every path the repository's text names exists in the repository, and nothing points at
documents the repository does not carry (a design sketch or style guide kept beside it).

Scans source files, CMake files, scripts and docs for paths that start with one of the
project's folders (runtime/train/trainer.h, docs/design.md, launch/configs/demo.yaml, ...) and
checks each against the tree; wildcards, placeholders (<wing>, NNN) and build outputs are
skipped. Usage: check_references.py SOURCE_DIR. Prints each dangling reference; exit 1 if any."""
import os
import re
import sys

FOLDERS = "tensor|ops|comm|runtime|models|launch|tests|docs|third_party|cmake|\\.ci"
EXT = "h|cpp|cu|cuh|md|sh|py|yaml|txt|cmake|in|sbatch|json|bin|safetensors"
PATH = re.compile(r"(?<![\w./-])((?:" + FOLDERS + r")/[\w./-]*\.(?:" + EXT + r"))(?![\w/])")
FORBIDDEN = re.compile(r"\.\./shared|(?<![\w/])(?:DESIGN|STYLE)\.md")
TEXT = (".h", ".cpp", ".cu", ".cuh", ".md", ".sh", ".py", ".txt", ".cmake", ".yaml", ".in", ".sbatch")
SKIP_DIRS = {".git", "node_modules", "fixtures"}


def is_build_dir(path):
    return os.path.exists(os.path.join(path, "CMakeCache.txt"))


def main(root):
    problems = []
    checked = 0
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not is_build_dir(os.path.join(dirpath, d))]
        for f in files:
            if not (f.endswith(TEXT) or f in ("run", "CMakeLists.txt")):
                continue
            full = os.path.join(dirpath, f)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if rel == "tests/layering/check_references.py":
                continue
            text = open(full, encoding="utf-8", errors="replace").read()
            for n, line in enumerate(text.splitlines(), 1):
                if FORBIDDEN.search(line):
                    problems.append(f"{rel}:{n}: points outside the repository: {line.strip()[:100]}")
                for p in PATH.findall(line):
                    if any(c in p for c in "*<>") or "NNN" in p or p.startswith("tests/fixtures/"):
                        continue
                    checked += 1
                    if not os.path.exists(os.path.join(root, p.rstrip("."))):
                        problems.append(f"{rel}:{n}: names {p}, which the repository does not have")
    for p in problems:
        print(p)
    print(f"checked {checked} references: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
