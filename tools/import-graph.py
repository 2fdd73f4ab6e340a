#!/usr/bin/env python3
"""Prints the import graph between the files of a crate's src/ and its cycles.

An edge `a.rs -> b.rs` means a.rs names an item of b.rs: in a `use` of
`crate::`, `super::`, `self::` (or a child module of a mod.rs/lib.rs), or
in such a path written inline in code. A path through a module that only
re-exports the item (`pub use x::Item;` in a mod.rs) counts as an edge to
the file that defines it, and the `pub use` itself is no edge (unless
`--reexport-edges`): a facade passes items through and makes no cycle.
Comments and string literals are skipped, and so is test-only code
(`#[cfg(test)] mod x { .. }` and files declared by `#[cfg(test)] mod x;`)
unless `--tests` is given.

Cycles are the strongly connected components of more than one file
(Tarjan). `--check` exits with 1 if there is one, for CI.

Usage:
    tools/import-graph.py [--src src] [--under scheduler] [--tests]
                          [--reexport-edges] [--levels] [--dot] [--check]
"""

import argparse
import os
import re
import sys


def module_files(src):
    """Maps module paths (tuples) to files under `src` (lib.rs is ())."""
    mods = {}
    for dirpath, _, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        base = () if rel == "." else tuple(rel.split(os.sep))
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            if f in ("lib.rs", "main.rs") and base == ():
                mods[()] = path
            elif f == "mod.rs":
                mods[base] = path
            else:
                mods[base + (f[:-3],)] = path
    # `#[path = "f.rs"] mod name;` puts a file under another name.
    for mod, path in list(mods.items()):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        for m in PATH_ATTR.finditer(text):
            target = os.path.normpath(os.path.join(os.path.dirname(path), m.group(1)))
            for other, p in list(mods.items()):
                if os.path.normpath(p) == target:
                    del mods[other]
            mods[mod + (m.group(2),)] = target
    return mods


PATH_ATTR = re.compile(
    r'#\[path\s*=\s*"([^"]+)"\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;'
)


def strip_comments_and_strings(text):
    """The code with comments, strings and char literals blanked out."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 10]) and (
            i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")
        ):
            hashes = re.match(r'r(#*)"', text[i:]).group(1)
            end = text.find('"' + hashes, i + 2 + len(hashes))
            i = n if end < 0 else end + 1 + len(hashes)
            out.append('""')
        elif c == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif c == "'" and re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|[^\\'])'", text[i:i + 12]):
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|[^\\'])'", text[i:i + 12])
            i += len(m.group(0))
            out.append("' '")
        else:
            out.append(c)
            i += 1
    return "".join(out)


CFG_TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*([;{])")


def remove_test_modules(code):
    """The code without `#[cfg(test)] mod x { .. }` blocks; the names of
    `#[cfg(test)] mod x;` files; the blocks removed, as (x, body)."""
    test_children, blocks = set(), []
    while True:
        m = CFG_TEST_MOD.search(code)
        if not m:
            return code, test_children, blocks
        if m.group(2) == ";":
            test_children.add(m.group(1))
            code = code[:m.start()] + code[m.end():]
            continue
        depth, i = 1, m.end()
        while i < len(code) and depth:
            depth += {"{": 1, "}": -1}.get(code[i], 0)
            i += 1
        blocks.append((m.group(1), code[m.end():i - 1]))
        code = code[:m.start()] + code[i:]


def expand_use_tree(tree):
    """`a::{b, c::{d as e, self}}` -> [(['a','b'], None), (['a','c','d'], 'e'),
    (['a','c'], None)]: each imported path with its alias."""
    tree = re.sub(r"\s+as\s+", "@", tree.strip())
    tree = re.sub(r"\s+", "", tree)
    results = []

    def walk(prefix, s):
        parts, depth, cur = [], 0, ""
        for ch in s:
            depth += {"{": 1, "}": -1}.get(ch, 0)
            if ch == "," and depth == 0:
                parts.append(cur)
                cur = ""
            else:
                cur += ch
        if cur:
            parts.append(cur)
        for part in parts:
            brace = part.find("{")
            if brace >= 0:
                head = [p for p in part[:brace].split("::") if p]
                walk(prefix + head, part[brace + 1:part.rfind("}")])
                continue
            part, _, alias = part.partition("@")
            segs = [p for p in part.split("::") if p]
            if segs and segs[-1] == "self":
                segs = segs[:-1]
            if prefix + segs:
                results.append((prefix + segs, alias or None))

    walk([], tree)
    return results


USE = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
PATH = re.compile(r"(?<![\w:])((?:crate|super|self|[a-z_][a-z0-9_]*)(?:\s*::\s*[A-Za-z_*][A-Za-z0-9_]*)+)")
MOD_DECL = re.compile(r"(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")


class Crate:
    def __init__(self, src, tests, reexport_edges=False):
        self.src = src
        self.reexport_edges = reexport_edges
        self.mods = module_files(src)
        self.code = {}
        self.inline = {}
        self.children = {}
        excluded = set()
        for mod, path in sorted(self.mods.items(), key=lambda kv: len(kv[0])):
            if any(mod[:k] in excluded for k in range(len(mod) + 1)):
                excluded.add(mod)
                continue
            with open(path, encoding="utf-8") as f:
                code = strip_comments_and_strings(f.read())
            # `#[path = ".."]` test files (search_tests.rs) are found by name.
            code = re.sub(r"#\[path\s*=\s*[^\]]*\]", "", code)
            code, test_children, blocks = remove_test_modules(code)
            # Read as the inline module they are (`super::` is this file).
            self.inline[mod] = [(mod + (name,), body) for name, body in blocks] if tests else []
            if not tests:
                for child in test_children:
                    excluded.add(mod + (child,))
            self.code[mod] = code
            self.children[mod] = set(MOD_DECL.findall(code)) | {
                m[-1] for m in self.mods if len(m) == len(mod) + 1 and m[:-1] == mod
            }
        for mod in excluded:
            self.code.pop(mod, None)
        self.reexports = {mod: self._reexports(mod) for mod in self.code}

    def _absolute(self, mod, segs):
        """The path `segs` written in module `mod`, from the crate root."""
        out = list(mod)
        first = True
        for i, s in enumerate(segs):
            if s == "crate" and first:
                out = []
            elif s == "super":
                out = out[:-1]
            elif s == "self" and first:
                pass
            else:
                if first and s not in self.children.get(mod, ()):
                    return None  # an external crate or a local item
                return out + list(segs[i:])
            first = False
        return out

    def _reexports(self, mod):
        table = {}
        for m in USE.finditer(self.code[mod]):
            if not m.group(1):
                continue
            for segs, alias in expand_use_tree(m.group(2)):
                target = self._absolute(mod, segs)
                if target and segs[-1] != "*":
                    table[alias or segs[-1]] = target
        return table

    def resolve(self, path, depth=0):
        """The module (tuple) that defines what the absolute path names."""
        mod = ()
        for i, seg in enumerate(path):
            if mod + (seg,) in self.code:
                mod = mod + (seg,)
                continue
            target = self.reexports.get(mod, {}).get(seg)
            if target and depth < 8 and tuple(target) != mod + (seg,):
                return self.resolve(list(target) + list(path[i + 1:]), depth + 1)
            return mod
        return mod

    def edges(self):
        graph = {mod: set() for mod in self.code}
        for mod, code in self.code.items():
            chunks = [(mod, code)] + self.inline.get(mod, [])
            for dep in self._deps(chunks):
                if dep != mod and dep in self.code:
                    graph[mod].add(dep)
        return graph

    def _deps(self, chunks):
        """The modules the code of `chunks` ((module, code) pairs) names."""
        for mod, code in chunks:
            paths = []
            for m in USE.finditer(code):
                # A re-export passes items through (its users are given
                # an edge to the defining file instead), unless asked.
                if not m.group(1) or self.reexport_edges:
                    paths += [segs for segs, _ in expand_use_tree(m.group(2))]
            rest = USE.sub(" ", code)
            for m in PATH.finditer(rest):
                paths.append(re.sub(r"\s+", "", m.group(1)).split("::"))
            for segs in paths:
                target = self._absolute(mod, segs)
                if target is not None:
                    yield self.resolve([s for s in target if s != "*"])


def tarjan(graph):
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
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
            out.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--src", default="src", help="the crate's source root")
    ap.add_argument("--under", help="only files under this module (e.g. scheduler)")
    ap.add_argument("--tests", action="store_true", help="include test-only code")
    ap.add_argument(
        "--reexport-edges", action="store_true", help="count `pub use` as an edge of the facade"
    )
    ap.add_argument(
        "--levels", action="store_true", help="print the files by layer (0: imports none of the others shown)"
    )
    ap.add_argument("--dot", action="store_true", help="print Graphviz instead")
    ap.add_argument("--check", action="store_true", help="exit 1 if there is a cycle")
    args = ap.parse_args()

    crate = Crate(args.src, args.tests, args.reexport_edges)
    graph = crate.edges()
    under = tuple(args.under.split("::")) if args.under else ()

    def name(mod):
        return os.path.relpath(crate.mods[mod], os.path.dirname(os.path.abspath(args.src)))

    def shown(mod):
        return mod[:len(under)] == under

    if args.dot:
        print("digraph imports {")
        for mod in sorted(graph, key=name):
            for dep in sorted(graph[mod], key=name):
                if shown(mod):
                    print(f'  "{name(mod)}" -> "{name(dep)}";')
        print("}")
    else:
        for mod in sorted(graph, key=name):
            if shown(mod):
                deps = ", ".join(name(d) for d in sorted(graph[mod], key=name))
                print(f"{name(mod)} -> {deps or '(nothing in the crate)'}")
    cycles = [c for c in tarjan(graph) if len(c) > 1 and any(shown(m) for m in c)]
    out = sys.stderr if args.dot else sys.stdout
    print(f"\ncycles (strongly connected components of more than one file): {len(cycles)}", file=out)
    for comp in cycles:
        print("  " + " <-> ".join(name(m) for m in comp), file=out)
    if args.levels and not cycles:
        level = {}

        def level_of(mod):
            if mod not in level:
                deps = [d for d in graph[mod] if shown(d)]
                level[mod] = 1 + max(map(level_of, deps)) if deps else 0
            return level[mod]

        print("\nlayers (each file imports only files of lower layers):", file=out)
        shown_mods = [m for m in graph if shown(m)]
        for n in range(max(map(level_of, shown_mods), default=-1) + 1):
            files = sorted(name(m) for m in shown_mods if level_of(m) == n)
            print(f"  {n}: " + ", ".join(files), file=out)
    if args.check and cycles:
        sys.exit(1)


if __name__ == "__main__":
    main()
