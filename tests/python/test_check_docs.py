"""tools/check_docs.py on a small tree of its own: consistent, it passes;
with one breach of each kind planted (a configuration key missing from
docs/configuration.md, an XSA_API function and a public Python function
named in no document, a path and a Bazel target the docs name that do not
exist), it reports each, and nothing else. The real tree is checked by
./x test itself.
"""

import importlib.util
import os
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.util.spec_from_file_location("check_docs", os.path.join(HERE, "..", "..", "tools", "check_docs.py"))
check_docs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_docs)

TREE = {
    ".gitignore": "/generated/\n",
    "BUILD": "",
    "api/config.c": 'static const struct k keys[] = {\n    {"expandable_segments", K_EXPANDABLE_SEGMENTS, X, true},\n'
                    '    {"page_recycling", K_PAGE_RECYCLING, X, true},\n};\n',
    "include/xsalloc/xsalloc.h": "XSA_API xsa_status xsa_malloc(void **ptr, size_t size);\n"
                                 "XSA_API const char *xsa_last_error(void);\n",
    "python/xsalloc/__init__.py": '__all__ = ["XsallocError"]\n\ndef memory_stats(device=0):\n    pass\n\n'
                                  "def _private():\n    pass\n",
    "python/xsalloc/run.py": "def main():\n    pass\n",
    "tests/BUILD": 'xsa_test(name = "api_test", srcs = ["api/api_test.c"])\n',
    "tests/api/api_test.c": "",
    "README.md": "`xsa_malloc` and `xsa_last_error`; see [docs](docs/configuration.md).\n",
    "docs/configuration.md": "Keys: `expandable_segments`, `page_recycling`. Python: `memory_stats`, "
                             "`XsallocError`. Tests: `//tests:api_test`, `tests/api/api_test.c`, "
                             "`generated/plot.svg`.\n",
}


class CheckDocsTest(unittest.TestCase):
    def tree(self, changes=()):
        tmp = tempfile.TemporaryDirectory()
        self.addCleanup(tmp.cleanup)
        files = dict(TREE)
        for path, text in changes:
            files[path] = text
        for path, text in files.items():
            full = os.path.join(tmp.name, path)
            os.makedirs(os.path.dirname(full), exist_ok=True)
            with open(full, "w") as f:
                f.write(textwrap.dedent(text))
        return tmp.name

    def test_a_consistent_tree_passes(self):
        self.assertEqual(check_docs.check(self.tree()), [])

    def test_each_planted_breach_is_reported(self):
        root = self.tree([
            ("api/config.c", TREE["api/config.c"].replace("};", '    {"new_key", K_NEW_KEY, X, true},\n};')),
            ("include/xsalloc/xsalloc.h", TREE["include/xsalloc/xsalloc.h"] + "XSA_API xsa_status xsa_undocumented(void);\n"),
            ("python/xsalloc/__init__.py", TREE["python/xsalloc/__init__.py"] + "def undocumented_helper():\n    pass\n"),
            ("docs/extra.md", "See `tests/api/gone_test.c`, [the log](missing.md) and `//tests:gone_test`.\n"),
        ])
        self.assertEqual(sorted(check_docs.check(root)), sorted([
            "docs/configuration.md: no word of the key 'new_key' (api/config.c's table)",
            "include/xsalloc/xsalloc.h: xsa_undocumented is in no document (README.md, docs/*.md)",
            "python/xsalloc/__init__.py: undocumented_helper is in no document (README.md, docs/*.md) nor in "
            "tools/check_docs.py's INTERNAL",
            "docs/extra.md: names tests/api/gone_test.c, which does not exist",
            "docs/extra.md: names missing.md, which does not exist",
            "docs/extra.md: names //tests:gone_test, which tests/BUILD does not declare",
        ]))


if __name__ == "__main__":
    unittest.main()
