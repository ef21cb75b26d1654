#!/usr/bin/env python3
"""Checks that the documentation says what the code has (issue 34); exit 1
with one line per breach.

  python3 tools/check_docs.py [ROOT]      # ROOT: the checkout (default: this file's)

1. Every key of the configuration parser's table (api/config.c, keys[])
   is named in docs/configuration.md.
2. Every XSA_API function (include/xsalloc/*.h) and every public Python
   name (a module-level def or class without a leading underscore, or a
   name in __all__, of the public modules python/xsalloc/__init__.py,
   torch.py, cupy.py, run.py, elastic.py and memory_saver.py) is named
   somewhere in README.md or
   docs/*.md, or listed in INTERNAL below with the reason it is not.
3. Every path of the tree the documentation names exists: relative
   markdown links, and words in backticks that begin with a top-level
   folder of the tree (`tests/gpu/run_first_contact.sh`), paths that
   .gitignore's anchored patterns match (generated) and the log of past
   measurements (docs/results-log.md, history) aside; and every Bazel
   label it names (//pkg:name) is a target declared in pkg/BUILD or a
   file of pkg.

Design: plain text scanning, as tools/check_layout.py does for the
sources: a name counts as documented when it appears as a whole word.
./x test runs it before the Bazel tests; //tests:python_test plants one
breach of each kind in a small tree and expects each to be reported
(tests/python/test_check_docs.py).
"""

import ast
import fnmatch
import glob
import os
import re
import sys

# Public by their spelling, documented nowhere on purpose: what else uses them.
INTERNAL = {
    # xsalloc.run's steps: the launcher's own, and the children's start-up hook's.
    "install": "xsalloc.run's step, run by main()",
    "install_on_import": "xsalloc.run's step, run by the children's start-up hook (python/xsalloc/_child)",
    "children_too": "xsalloc.run's step, run by main()",
    "no_gpu": "xsalloc.run's step, run by main()",
    "run_script": "xsalloc.run's step, run by main()",
    "run_module": "xsalloc.run's step, run by main()",
    "main": "xsalloc.run's entry point: python -m xsalloc.run",
}

PUBLIC_MODULES = ("__init__.py", "torch.py", "cupy.py", "run.py", "elastic.py", "memory_saver.py")
XSA_API = re.compile(r"XSA_API\s+[^;(]*?\b(xsa_\w+)\s*\(")
CONFIG_KEY = re.compile(r'^\s*\{"([a-z0-9_]+)",\s*K_[A-Z0-9_]+', re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")
BACKTICKS = re.compile(r"`([^`\n]+)`")
LABEL = re.compile(r"(?<![\w/])//([\w/.+-]*):([\w/.+-]+)")
PLACEHOLDER = re.compile(r"[*?{}<>$\[\]|]|\.\.\.")  # globs, variables, elisions
# A log records what the tree held then: its paths are history, not claims.
HISTORY = ("docs/results-log.md",)


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def doc_files(root):
    return [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md")))


def public_python_names(root):
    """{name: module file} for the public modules' public names."""
    names = {}
    for mod in PUBLIC_MODULES:
        path = os.path.join(root, "python", "xsalloc", mod)
        if not os.path.exists(path):
            continue
        tree = ast.parse(read(path))
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                names[node.name] = mod
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                for elt in getattr(node.value, "elts", []):
                    if isinstance(elt, ast.Constant) and isinstance(elt.value, str):
                        names.setdefault(elt.value, mod)
    return names


def ignored(root):
    """The patterns .gitignore anchors at the root (generated: what they match need not exist)."""
    path = os.path.join(root, ".gitignore")
    lines = read(path).splitlines() if os.path.exists(path) else []
    return [line.strip().strip("/") for line in lines if line.strip().startswith("/")]


def generated(path, patterns):
    parts = path.split(os.sep)
    return any(fnmatch.fnmatch(os.sep.join(parts[:len(p.split("/"))]), p) for p in patterns)


def named_paths(root, doc):
    """The tree paths a document names: (path relative to root, as written)."""
    text = read(doc)
    tops = {d for d in os.listdir(root) if os.path.isdir(os.path.join(root, d)) and not d.startswith(".")}
    for target in LINK.findall(text):
        target = target.split("#")[0]
        if not target or re.match(r"[a-z]+:", target):
            continue
        full = os.path.normpath(os.path.join(os.path.dirname(doc), target))
        yield os.path.relpath(full, root), target
    for span in BACKTICKS.findall(text):
        for word in span.split():
            word = word.rstrip(".,;:)").lstrip("(")
            head = word.split("/")[0]
            if "/" in word and head in tops and not PLACEHOLDER.search(word) and "//" not in word:
                yield os.path.normpath(word), word


def build_targets(root, pkg):
    path = os.path.join(root, pkg, "BUILD")
    return set(re.findall(r'\bname\s*=\s*"([^"]+)"', read(path))) if os.path.exists(path) else None


def check(root):
    problems = []
    docs = {d: read(d) for d in doc_files(root) if os.path.exists(d)}
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", "\n".join(docs.values())))

    config_doc = os.path.join(root, "docs", "configuration.md")
    config_text = docs.get(config_doc, "")
    for key in CONFIG_KEY.findall(read(os.path.join(root, "api", "config.c"))):
        if not re.search(r"\b" + key + r"\b", config_text):
            problems.append(f"docs/configuration.md: no word of the key '{key}' (api/config.c's table)")

    for header in sorted(glob.glob(os.path.join(root, "include", "xsalloc", "*.h"))):
        for fn in XSA_API.findall(read(header)):
            if fn not in words and fn not in INTERNAL:
                problems.append(f"{os.path.relpath(header, root)}: {fn} is in no document (README.md, docs/*.md)")
    for name, mod in sorted(public_python_names(root).items()):
        if name not in words and name not in INTERNAL:
            problems.append(f"python/xsalloc/{mod}: {name} is in no document (README.md, docs/*.md) nor in "
                            "tools/check_docs.py's INTERNAL")

    patterns = ignored(root)
    for doc in docs:
        rel_doc = os.path.relpath(doc, root)
        if rel_doc in HISTORY:
            continue
        for path, written in named_paths(root, doc):
            if generated(path, patterns):
                continue
            if not os.path.exists(os.path.join(root, path)):
                problems.append(f"{rel_doc}: names {written}, which does not exist")
        for pkg, name in LABEL.findall(docs[doc]):
            if name.isupper():  # //tests:NAME, a placeholder
                continue
            declared = build_targets(root, pkg)
            if declared is None:
                problems.append(f"{rel_doc}: names //{pkg}:{name}, but {pkg}/BUILD does not exist")
            elif name not in declared and not os.path.exists(os.path.join(root, pkg, name)):
                problems.append(f"{rel_doc}: names //{pkg}:{name}, which {pkg}/BUILD does not declare")
    return problems


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
    problems = check(root)
    for p in problems:
        print("check_docs: " + p)
    if problems:
        return 1
    print("check_docs: every configuration key, XSA_API function and public Python name documented; every "
          "path and Bazel target the docs name exists")
    return 0


if __name__ == "__main__":
    sys.exit(main())
