#!/usr/bin/env python3
"""Checks the layout rules of issue 28 over the C/C++ sources; exit 1 with
one line per breach.

  python3 tools/check_layout.py [ROOT]      # ROOT: the checkout (default: this file's)

1. No circle of files. The graph's nodes are modules: a .c/.cpp file and
   the header of the same path (pool/pool.c + pool/pool.h) are one module,
   since a file calls through its header. Edges: each #include "..." of a
   project file, and each call of a non-static function to the file that
   defines it (a name defined in more than one file, as tests' fakes are,
   gives no edge). A strongly connected component of more than one module
   is a circle.
2. Layers: no file of a lower folder includes a header of a higher one.
   From the bottom: include/xsalloc/types.h (the types shared below the
   API), vmm/ and sim/ (with include/xsalloc/sim.h), pool/, api/ (with
   xsalloc.h and pytorch.h), python/ and trace/, benchmarks/, fuzz/ and
   tests/ (which may include anything).
3. No source file (.c .h .cpp .py .sh) is past 800 lines.
4. A header declares the functions of its own module only: each function
   a header outside include/ and tests/ declares is defined in the .c/.cpp
   of its path (a header with no such file, as pool/state.h, declares
   none that any file defines).

Design: a small C scanner, not a compiler: comments, strings and
preprocessor lines are blanked, then function definitions are found at
brace depth 0 (a name, its parameter list, then "{"), and calls inside
bodies as identifiers followed by "(" (not members, not the caller's own
function pointers). Good enough for this tree's style;
a macro that hides a call hides its edge.
"""

import os
import re
import sys

MAX_LINES = 800
SOURCE_EXT = (".c", ".h", ".cpp")
LENGTH_EXT = SOURCE_EXT + (".py", ".sh")
SKIP_DIRS = {".git", ".carry", "build", "dist", "shared"}

# Lower rank: lower layer. A file may include headers of its own rank or below.
RANKS = {
    "include": 0,
    "vmm": 1,
    "sim": 1,
    "pool": 2,
    "api": 3,
    "python": 4,
    "trace": 4,
    "benchmarks": 5,
    "fuzz": 6,
    "tests": 6,
}

# The public headers belong to the layer that implements them: types.h
# (types only) is below everything, sim.h is the simulator's, xsalloc.h and
# pytorch.h the API's.
FILE_RANKS = {
    os.path.join("include", "xsalloc", "types.h"): 0,
    os.path.join("include", "xsalloc", "sim.h"): 1,
    os.path.join("include", "xsalloc", "xsalloc.h"): 3,
    os.path.join("include", "xsalloc", "pytorch.h"): 3,
}

KEYWORDS = {"if", "for", "while", "switch", "return", "sizeof", "case", "do", "else", "_Static_assert",
            "__attribute__", "defined", "_Alignof", "alignof", "typeof", "__typeof__", "catch", "decltype",
            "static_assert", "noexcept", "alignas", "_Generic", "__builtin_expect", "new", "delete"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
IDENT_CALL = re.compile(r"(?<!\.)(?<!->)\b([A-Za-z_]\w*)\s*\(")  # not a member: s.f( or p->f(


def source_files(root):
    for dirpath, dirs, files in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith("bazel-") and not d.startswith(".")]
        for f in files:
            if f.endswith(LENGTH_EXT):
                yield os.path.normpath(os.path.join(rel, f))


def blank(text):
    """Comments, string and char literals and preprocessor lines as spaces (newlines kept)."""
    out, i, n = [], 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c in " \t":
            out.append(c)
            i += 1
            continue
        if line_start and c == "#":  # a preprocessor line, with its continuations
            j = i
            while j < n and text[j] != "\n":
                j += 2 if text[j] == "\\" and j + 1 < n else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
            continue
        line_start = c == "\n"
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (j + 1 - i))
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def functions(code):
    """(defined non-static names, called names) of blanked code."""
    defined, called = set(), set()
    depth, i, n = 0, 0, len(code)
    head_start = 0  # where the current top-level declaration began
    while i < n:
        c = code[i]
        if c == "{":
            if depth == 0:
                head = code[head_start:i]
                m = re.search(r"\b([A-Za-z_]\w*)\s*\(([^()]|\([^()]*\))*\)\s*(const\s*)?(override\s*)?$", head)
                if m and m.group(1) not in KEYWORDS and not re.search(r"\b(static|inline)\b", head[:m.start()]):
                    if not re.search(r"[=]", head[:m.start()]):
                        defined.add(m.group(1))
                body_start = i
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                for name in IDENT_CALL.findall(code[body_start:i]):
                    if name not in KEYWORDS:
                        called.add(name)
                head_start = i + 1
        elif c == ";" and depth == 0:
            head_start = i + 1
        i += 1
    return defined, called


PROTOTYPE = re.compile(r"(?<![\w*(])\s*\b([A-Za-z_]\w*)\s*\(([^()]|\([^()]*\))*\)\s*;")


def prototypes(code):
    """Names of the functions a blanked header declares at depth 0."""
    flat, depth = [], 0
    for c in code:
        depth += c == "{"
        flat.append(c if depth == 0 else " ")
        depth -= c == "}"
    names = set()
    for stmt in "".join(flat).split(";"):
        stmt = stmt.strip()
        if not stmt or stmt.startswith("typedef") or "(*" in stmt.replace(" ", ""):
            continue
        m = re.search(r"\b([A-Za-z_]\w*)\s*\(([^()]|\([^()]*\))*\)\s*$", stmt)
        if m and m.group(1) not in KEYWORDS and "=" not in stmt:
            names.add(m.group(1))
    return names


def resolve(root, src, inc):
    for base in (root, os.path.join(root, "include"), os.path.join(root, os.path.dirname(src))):
        p = os.path.normpath(os.path.join(base, inc))
        if os.path.isfile(p):
            return os.path.relpath(p, root)
    return None


def module(path):
    return os.path.splitext(path)[0]


def layer(path):
    return FILE_RANKS.get(path, RANKS.get(path.split(os.sep)[0]))


def sccs(graph):
    """Tarjan's strongly connected components (iterative)."""
    index, low, on, stack, out, counter = {}, {}, set(), [], [], [0]
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = counter[0]
        counter[0] += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = counter[0]
                    counter[0] += 1
                    stack.append(nxt)
                    on.add(nxt)
                    work.append((nxt, iter(graph.get(nxt, ()))))
                elif nxt in on:
                    low[v] = min(low[v], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def check(root):
    problems = []
    files = sorted(source_files(root))
    texts = {}
    for f in files:
        with open(os.path.join(root, f), encoding="utf-8", errors="replace") as fh:
            texts[f] = fh.read()
        lines = texts[f].count("\n")
        if lines > MAX_LINES:
            problems.append(f"{f}: {lines} lines (at most {MAX_LINES})")

    sources = [f for f in files if f.endswith(SOURCE_EXT)]
    graph = {module(f): set() for f in sources}
    why = {}  # (from module, to module) -> a reason, for the report
    definers, calls = {}, {}
    for f in sources:
        for inc in INCLUDE.findall(texts[f]):
            target = resolve(root, f, inc)
            if not target:
                continue  # a system or generated header
            a, b = module(f), module(target)
            if a != b:
                graph[a].add(b)
                why.setdefault((a, b), f"{f} includes {target}")
            la, lb = layer(f), layer(target)
            if la is not None and lb is not None and lb > la:
                problems.append(f"{f}: includes {target}, a layer above it")
        if f.endswith((".c", ".cpp")):
            code = blank(texts[f])
            defined, called = functions(code)
            for name in defined:
                definers.setdefault(name, set()).add(f)
            # A function pointer of the caller's own ("(*release)(...)") is
            # no call of another file's function of that name.
            calls[f] = {c for c in called if not re.search(r"\(\s*\*\s*" + c + r"\s*\)", code)}
    for f, called in calls.items():
        for name in called:
            where = definers.get(name, ())
            if len(where) != 1:
                continue
            (target,) = where
            a, b = module(f), module(target)
            if a != b:
                graph[a].add(b)
                why.setdefault((a, b), f"{f} calls {name} ({target})")
    for h in sources:
        if not h.endswith(".h") or h.split(os.sep)[0] in ("include", "tests"):
            continue
        own = {module(h) + ext for ext in (".c", ".cpp")}
        for name in sorted(prototypes(blank(texts[h]))):
            where = definers.get(name, set())
            if where and not where & own:
                problems.append(f"{h}: declares {name}, which {', '.join(sorted(where))} defines")
    for comp in sccs(graph):
        if len(comp) > 1:
            members = set(comp)
            edges = sorted(why[(a, b)] for a in comp for b in graph[a] if b in members)
            problems.append(f"circle of {len(comp)} modules: {', '.join(sorted(comp))}: " + "; ".join(edges))
    return problems, len(sources)


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    problems, n = check(root)
    for p in problems:
        print("check_layout: " + p)
    if problems:
        return 1
    print(f"check_layout: {n} C/C++ files: no circle, no upward include, none past {MAX_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
