#!/usr/bin/env python3
"""Check the folder layout's dependency rules: layers, cycles, and a README per folder.

The project is layered: a file may include its own top-level folder or a folder at a
strictly lower level, never one beside or above it, and no set of components may include
each other in a cycle. A rule that only lives in review comments erodes one include at a
time; this script makes each break a test failure naming the file, the line and the rule.

Usage: check-layout.py [--root DIR]   (default: the repository holding this script)
Exit 0 no violations, 1 violations (one `path:line: message` line each), 2 bad usage.
"""
import argparse
import os
import posixpath
import re
import sys

# The layers, bottom up. Folders on one level may not include each other.
LEVELS = {
    "common": 1,
    "model": 2,
    "allreduce": 3, "server": 3, "launch": 3,
    "strategies": 4,
    "worker": 5,
    "experiments": 6,
    "bench": 7, "teach": 7,
    "apps": 8,
}
# Narrower rules, replacing "any lower level": path prefixes the folder may include besides
# itself. launch/ starts processes and must stay free of training code; the parameter-server
# shard links the optimizer to apply updates, never the model.
ONLY = {
    "launch": ["common/"],
    "server": ["common/", "model/optimizer/"],
}
# Sub-folders with a target of their own and a narrower rule than their folder's: the optimizer
# is what the shard links, so it may not reach into the rest of model/ (nor CUDA through it),
# only the CPU kernels its update runs on, which reach nothing but common/.
SUBFOLDER_ONLY = {
    "model/optimizer": ["common/", "model/kernels/"],
    "model/kernels": ["common/"],
}
SOURCE_EXTENSIONS = {".h", ".hpp", ".cpp", ".cc", ".cu", ".cuh"}
SKIP_ANYWHERE = {".git", "__pycache__"}
# Only quoted includes: angle brackets name system headers.
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def allowed_prefixes(folder):
    """What a file under layered `folder` may include (besides its own folder), in order."""
    if folder in ONLY:
        return ONLY[folder]
    return [f + "/" for f, level in sorted(LEVELS.items(), key=lambda kv: kv[1])
            if level < LEVELS[folder]]


def source_files(root):
    """Every source file under root, as a repository-relative posix path, sorted."""
    found = []
    for here, dirs, files in os.walk(root):
        rel = os.path.relpath(here, root)
        # Build folders (/build*/ in .gitignore) live at the top and hold generated copies.
        dirs[:] = [d for d in dirs if d not in SKIP_ANYWHERE
                   and not (rel == "." and d.startswith("build"))]
        for name in files:
            if os.path.splitext(name)[1] in SOURCE_EXTENSIONS:
                found.append(posixpath.normpath(posixpath.join(rel.replace(os.sep, "/"), name)))
    return sorted(found)


def strong_components(graph):
    """Tarjan's algorithm without recursion: a deep include chain must not hit the limit."""
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    members = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        members.add(member)
                        if member == node:
                            break
                    result.append(members)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph.get(child, ())))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return result


def shortest_cycle(graph, members):
    """A shortest cycle through the smallest member, staying inside the component."""
    first = min(members)
    parent, frontier = {first: None}, [first]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child == first:
                    path = [node]
                    while parent[path[-1]] is not None:
                        path.append(parent[path[-1]])
                    return list(reversed(path)) + [first]
                if child in members and child not in parent:
                    parent[child] = node
                    following.append(child)
        frontier = following
    return [first, first]  # unreachable for a strong component of 2+ members


def check(root):
    """Return (violations as (path, line, message), files scanned, includes resolved)."""
    top = {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d))
           and d not in SKIP_ANYWHERE and not d.startswith("build")}
    violations, includes = [], 0
    # Component (path without extension: a.h + a.cpp are one) -> included component -> first
    # file:line that includes it, to show where each edge of a cycle comes from.
    graph = {}
    files = source_files(root)
    for path in files:
        folder = path.split("/")[0]
        component = os.path.splitext(path)[0]
        graph.setdefault(component, {})
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
        for number, text in enumerate(lines, 1):
            match = INCLUDE.match(text)
            if not match:
                continue
            target = posixpath.normpath(match.group(1))
            # Includes are written from the root; anything else ("nccl.h", "doctest/...")
            # comes from a system package and is not ours to check.
            if target.split("/")[0] not in top:
                continue
            includes += 1
            if not os.path.isfile(os.path.join(root, target)):
                violations.append((path, number, f"includes {target}, which does not exist"))
                continue
            other = os.path.splitext(target)[0]
            if other != component:
                graph[component].setdefault(other, f"{path}:{number}")
            sub = next((s for s in SUBFOLDER_ONLY if path.startswith(s + "/")), None)
            if sub and not target.startswith(sub + "/"):
                if not any(target.startswith(prefix) for prefix in SUBFOLDER_ONLY[sub]):
                    rule = f"{sub}/ may include only {', '.join(SUBFOLDER_ONLY[sub])}"
                    violations.append((path, number, f"includes {target}: {rule}"))
                continue
            if folder not in LEVELS or target.startswith(folder + "/"):
                continue  # tests/, fuzz/ and the like may include anything
            allowed = allowed_prefixes(folder)
            if not any(target.startswith(prefix) for prefix in allowed):
                rule = (f"{folder}/ may include only {', '.join(allowed)}" if allowed
                        else f"{folder}/ is the bottom layer: it may include only itself")
                violations.append((path, number, f"includes {target}: {rule}"))
    for members in strong_components(graph):
        if len(members) < 2:
            continue
        cycle = shortest_cycle(graph, members)
        edges = [graph[a][b] for a, b in zip(cycle, cycle[1:])]
        where, line = edges[0].rsplit(":", 1)
        message = (f"component cycle: {' -> '.join(cycle)} "
                   f"(included at {', '.join(edges)})")
        rest = sorted(members - set(cycle))
        if rest:
            message += f"; the same cycle set also holds {', '.join(rest)}"
        violations.append((where, int(line), message))
    for folder in sorted(LEVELS):
        if folder in top and not os.path.isfile(os.path.join(root, folder, "README.md")):
            violations.append((f"{folder}/", 0, "no README.md saying what the folder holds "
                               "and what it may include"))
    return violations, len(files), includes


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.dirname(os.path.dirname(
        os.path.abspath(__file__))), help="the repository root (default: %(default)s)")
    args = parser.parse_args()
    if not os.path.isdir(args.root):
        print(f"check-layout: --root {args.root} is not a directory", file=sys.stderr)
        return 2
    violations, files, includes = check(args.root)
    for path, line, message in sorted(violations):
        print(f"{path}:{line}: {message}" if line else f"{path}: {message}")
    if violations:
        print(f"check-layout: {len(violations)} violation(s)")
        return 1
    print(f"check-layout: {files} files, {includes} includes, no violations")
    return 0


if __name__ == "__main__":
    sys.exit(main())
