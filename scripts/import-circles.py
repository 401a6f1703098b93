#!/usr/bin/env python3
"""Import circles between the modules of each crate (docs/architecture.md).

Usage: scripts/import-circles.py [-v] [CRATE_DIR ...]
       (default: every crate under host/; -v shows the edges of each circle)

One node per module file (lib.rs, a.rs, a/mod.rs, a/b.rs). A module A uses a
module B when A names something B defines through a `crate::`, `super::`,
`self::` or child-module path, in a `use` or inline. A path is followed through
`use` bindings (`pub use` re-exports, `use x as y`) to the module that defines
the item, so a crate root that re-exports its surface is not a hub; a `pub use`
by itself forwards and is not a use. Test code (`#[cfg(test)]` modules, inline
or in their own file) is left out: it may reach anywhere.

A circle is a strongly connected component of more than one node, looked for
twice: between files, and between sibling subtrees (`api/*` stands for api/mod.rs
and everything under it), which catches a circle that runs through a directory
module as a whole. Exits 1 when there is any.
"""

import re
import sys
from pathlib import Path

ITEM = re.compile(r"\b(?:fn|struct|enum|trait|type|const|static|union|macro_rules!)\s+([A-Za-z_]\w*)")
MOD_DECL = re.compile(r"((?:#\[[^\]]*\]\s*)*)(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*([;{])")
USE = re.compile(r"\b(pub(?:\([^)]*\))?\s+)?use\s+([^;]+);")
INLINE = re.compile(r"\b(crate|super|self)((?:\s*::\s*\w+)+)")
RAW = re.compile(r'b?r(#*)"')
CHAR = re.compile(r"'(?:\\[^']*|[^'\\])'")
TEST_MOD = re.compile(r"#\[cfg\(test\)\]\s*(?:#\[[^\]]*\]\s*)*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")


def strip(text):
    """The code of `text`: comments out, string and char literals emptied."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("//", i):
            i = text.find("\n", i)
            i = n if i < 0 else i
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    i += 1
        elif (raw := RAW.match(text, i)) and not (i and (text[i - 1].isalnum() or text[i - 1] == "_")):
            end = text.find('"' + raw.group(1), raw.end())
            i = n if end < 0 else end + 1 + len(raw.group(1))
            out.append('""')
        elif text[i] == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
            i += 1
            out.append('""')
        elif text[i] == "'" and (lit := CHAR.match(text, i)):
            i = lit.end()
            out.append("' '")
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def cut_test_blocks(text):
    """`text` without its inline `#[cfg(test)] mod x { ... }` blocks."""
    out, i = [], 0
    for m in TEST_MOD.finditer(text):
        if m.start() < i:
            continue
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        out.append(text[i : m.start()])
        i = j
    out.append(text[i:])
    return "".join(out)


def expand(tree):
    """`a::{b, c::{d as e}}` -> [(["a", "b"], "b"), (["a", "c", "d"], "e")]."""
    tree = " ".join(tree.split())
    if "{" not in tree:
        path, _, alias = tree.partition(" as ")
        segs = [s.strip() for s in path.split("::") if s.strip()]
        return [(segs, alias.strip() or segs[-1])] if segs else []
    head, rest = tree.split("{", 1)
    body = rest[: rest.rfind("}")]
    parts, depth, cur = [], 0, ""
    for ch in body:
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
            continue
        depth += {"{": 1, "}": -1}.get(ch, 0)
        cur += ch
    parts.append(cur)
    prefix = [s.strip() for s in head.split("::") if s.strip()]
    return [(prefix + p, name) for part in parts if part.strip() for p, name in expand(part)]


class Crate:
    """The modules of one crate, read from its files."""

    def __init__(self, src):
        self.src = src
        self.mods = {}  # module path (tuple of names) -> what the file holds
        root = src / "lib.rs" if (src / "lib.rs").exists() else src / "main.rs"
        self.load((), root, test=False)

    def load(self, path, file, test):
        raw = file.read_text()
        text = cut_test_blocks(strip(raw))
        info = {"file": file, "test": test, "children": {}, "bindings": {}, "text": text}
        self.mods[path] = info
        info["items"] = set(ITEM.findall(text))
        base = file.parent if file.name in ("lib.rs", "main.rs", "mod.rs") else file.with_suffix("")
        for m in MOD_DECL.finditer(text):
            attrs, name, kind = m.groups()
            if kind == "{":
                continue  # an inline module is part of this file
            # `#[path = "..."]` is read from the file as written (`strip` empties strings).
            at = re.search(r'#\[path\s*=\s*"([^"]*)"\][^;{]*?\bmod\s+' + name + r"\s*;", raw)
            candidates = [file.parent / at.group(1)] if at else [base / f"{name}.rs", base / name / "mod.rs"]
            for candidate in candidates:
                if candidate.exists():
                    info["children"][name] = path + (name,)
                    self.load(path + (name,), candidate, test or "cfg(test)" in attrs)
                    break
        for m in USE.finditer(text):
            for segs, name in expand(m.group(2)):
                info["bindings"][name] = segs

    def start(self, here, segs):
        """Where a path written in module `here` starts, or None (another crate)."""
        if not segs:
            return None
        if segs[0] == "crate":
            return (), segs[1:]
        if segs[0] == "self":
            return here, segs[1:]
        if segs[0] == "super":
            cur = here
            while segs and segs[0] == "super":
                cur, segs = cur[:-1], segs[1:]
            return cur, segs
        if segs[0] in self.mods[here]["children"]:
            return here, segs
        return None

    def resolve(self, cur, segs, seen=None):
        """The module that defines what `segs` names, read from module `cur`."""
        seen = seen if seen is not None else set()
        for i, seg in enumerate(segs):
            info = self.mods[cur]
            if seg in info["children"]:
                cur = info["children"][seg]
            elif seg in info["items"] or seg in ("*", "self"):
                return cur
            elif seg in info["bindings"] and (cur, seg) not in seen:
                seen.add((cur, seg))
                begun = self.start(cur, info["bindings"][seg])
                return cur if begun is None else self.resolve(begun[0], begun[1] + segs[i + 1 :], seen)
            else:
                return cur
        return cur

    def edges(self):
        """Module -> {module it uses: the first path that shows it}."""
        out = {p: {} for p, m in self.mods.items() if not m["test"]}
        for here, info in self.mods.items():
            if info["test"]:
                continue
            paths = [
                segs
                for m in USE.finditer(info["text"])
                if not m.group(1)  # a re-export forwards; what uses it is the edge
                for segs, _ in expand(m.group(2))
            ]
            code = USE.sub(";", info["text"])
            paths += [[m.group(1)] + [s.strip() for s in m.group(2).split("::") if s.strip()] for m in INLINE.finditer(code)]
            for segs in paths:
                begun = self.start(here, segs)
                if begun is None:
                    continue
                target = self.resolve(*begun)
                if target != here and target in out:
                    out[here].setdefault(target, "::".join(segs))
        return out

    def name(self, path, tree=False):
        """The module's file; with `tree`, the module and its children (`api/*`)."""
        if tree and self.mods[path]["children"]:
            return "/".join(path) + "/*"
        return str(self.mods[path]["file"].relative_to(self.src))


def subtrees(files):
    """The same uses between sibling subtrees: `a/x.rs -> b.rs` is `a/* -> b`."""
    out = {}
    for a, targets in files.items():
        for b, why in targets.items():
            k = 0
            while k < min(len(a), len(b)) and a[k] == b[k]:
                k += 1
            if k < len(a) and k < len(b) and (len(a) > k + 1 or len(b) > k + 1):
                out.setdefault(a[: k + 1], {}).setdefault(b[: k + 1], why)
                out.setdefault(b[: k + 1], {})
    return out


def circles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, stack, on, found = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    return found


def main(args):
    verbose = "-v" in args
    root = Path(__file__).resolve().parent.parent
    dirs = [Path(a) for a in args if a != "-v"]
    crates = dirs or sorted(p.parent for p in (root / "host").glob("*/Cargo.toml"))
    count = 0
    for crate in crates:
        if not (crate / "src").is_dir():
            continue
        c = Crate(crate / "src")
        files = c.edges()
        for graph, tree in ((files, False), (subtrees(files), True)):
            for component in circles(graph):
                count += 1
                print(f"{crate.name}: " + " <-> ".join(sorted(c.name(p, tree) for p in component)))
                for a in sorted(component) if verbose else []:
                    for b, why in sorted(graph[a].items()):
                        if b in component:
                            print(f"    {c.name(a, tree)} -> {c.name(b, tree)}  ({why})")
    print(f"{count} import circle(s)")
    return 1 if count else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
