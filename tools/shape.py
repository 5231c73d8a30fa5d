#!/usr/bin/env python3
"""Checks the code's shape (issue 14): no non-test function over 80 lines
in any crate or the module, and no import cycle between the files of core/
and daemon/ (or uvm/, units/, ctl/, sim/, runtime/).

A function is measured from its `fn` line to its closing brace. Test code
(each item under `#[cfg(test)]`, a file that is a `#[cfg(test)] mod`, and
tests/ folders) is not measured. An import edge is a `crate::x` or `super::x` path in non-test
code; a parent's `mod child;` is not an edge, so a part reaching back to
its own parent (`super::Engine`) is not a cycle.

Prints the longest function of each crate; exits 1 on a violation.
"""
import glob
import os
import re
import sys

MAX_LINES = 80
CRATES = {
    "core": "core/src",
    "sim": "sim/src",
    "uapi": "uapi/src",
    "uvm": "uvm/src",
    "units": "units/src",
    "daemon": "daemon/src",
    "ctl": "ctl/src",
    "runtime": "runtime/src",
    "kmod": "kmod",
}
ACYCLIC = ["core", "daemon", "uvm", "units", "ctl", "sim", "runtime"]
FN = re.compile(r'^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+"C"\s+)?fn\s+(\w+)')


def non_test(path):
    """The file's text with every `#[cfg(test)]` item blanked (lines kept).

    The item is the next one after the attribute (and any attributes that
    follow it): one line if it ends in `;` (`mod tests;`), else up to the
    brace that closes it, so code after a test module is still measured.
    """
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() != "#[cfg(test)]":
            out.append(lines[i])
            i += 1
            continue
        j = i + 1
        while j < len(lines) and lines[j].strip().startswith("#["):
            j += 1
        depth, opened = 0, False
        while j < len(lines):
            text = code_only(lines[j])
            depth += text.count("{") - text.count("}")
            opened = opened or "{" in text
            if (opened and depth <= 0) or (not opened and text.rstrip().endswith(";")):
                break
            j += 1
        out.extend([""] * (j + 1 - i))
        i = j + 1
    return "\n".join(out)


TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*((?:#\[[^\]]*\]\s*)*)mod\s+(\w+)\s*;")


def test_files(root):
    """Files that are test modules of their parent (`#[cfg(test)] mod x;`)."""
    found = set()
    for path in glob.glob(root + "/**/*.rs", recursive=True):
        with open(path, encoding="utf-8") as f:
            src = f.read()
        name = os.path.basename(path)
        base = os.path.dirname(path)
        if name not in ("mod.rs", "lib.rs", "main.rs"):
            base = os.path.join(base, name[:-3])
        for attrs, mod in TEST_MOD.findall(src):
            explicit = re.search(r'path\s*=\s*"([^"]+)"', attrs)
            if explicit:
                found.add(os.path.normpath(os.path.join(os.path.dirname(path), explicit.group(1))))
                continue
            for cand in (os.path.join(base, mod + ".rs"), os.path.join(base, mod, "mod.rs")):
                found.add(os.path.normpath(cand))
    return found


def code_only(line):
    """The line without string and char literals or a trailing comment."""
    line = re.sub(r'"(\\.|[^"\\])*"', '""', line)
    line = re.sub(r"'(\\.|[^'\\])'", "''", line)
    return line.split("//")[0]


def functions(path):
    """(name, first line, length) of each function in the non-test code."""
    lines = non_test(path).splitlines()
    out = []
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        depth, parens, opened = 0, 0, False
        for j in range(i, len(lines)):
            text = code_only(lines[j])
            parens += text.count("(") + text.count("[") - text.count(")") - text.count("]")
            if not opened and parens == 0 and text.rstrip().endswith(";"):
                break  # a declaration (trait or extern), no body
            depth += text.count("{") - text.count("}")
            opened = opened or "{" in text
            if opened and depth <= 0:
                out.append((m.group(7), i + 1, j - i + 1))
                break
    return out


def module_name(root, path):
    rel = os.path.relpath(path, root)[:-3]
    if rel.endswith("/mod"):
        rel = rel[:-4]
    return rel.replace("/", "::")


def import_graph(root):
    tests = test_files(root)
    files = [f for f in glob.glob(root + "/**/*.rs", recursive=True) if os.path.normpath(f) not in tests]
    mods = {module_name(root, f): f for f in files}
    graph = {m: set() for m in mods}
    for m, f in mods.items():
        src = non_test(f)
        for path in re.findall(r"crate::([a-z_0-9]+(?:::[a-z_0-9]+)*)", src):
            parts = path.split("::")
            for k in range(len(parts), 0, -1):
                t = "::".join(parts[:k])
                if t in mods and t != m:
                    graph[m].add(t)
                    break
        parent = m.rsplit("::", 1)[0] if "::" in m else None
        for name in re.findall(r"super::([a-z_0-9]+)", src):
            if parent is None:
                continue
            t = parent + "::" + name if parent + "::" + name in mods else parent
            if t != m and not m.startswith(t + "::"):
                graph[m].add(t)
    for root_file in ("lib", "main"):
        graph.pop(root_file, None)
        for targets in graph.values():
            targets.discard(root_file)
    return graph


def cycles(graph):
    """Strongly connected components of more than one file (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in list(graph):
        if v not in index:
            visit(v)
    return found


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    bad = 0
    for crate, root in CRATES.items():
        longest = ("-", "", 0, 0)
        tests = test_files(root)
        for path in sorted(glob.glob(root + "/**/*.rs", recursive=True)):
            if os.path.normpath(path) in tests:
                continue
            for name, line, n in functions(path):
                if n > MAX_LINES:
                    print(f"shape: {path}:{line}: fn {name} is {n} lines (at most {MAX_LINES})")
                    bad += 1
                if n > longest[3]:
                    longest = (name, path, line, n)
        print(f"shape: {crate}: longest fn {longest[0]} ({longest[1]}:{longest[2]}), {longest[3]} lines")
    for crate in ACYCLIC:
        found = cycles(import_graph(CRATES[crate]))
        for c in found:
            print(f"shape: {crate}: import cycle between {', '.join(c)}")
            bad += 1
        if not found:
            print(f"shape: {crate}: no import cycle")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
