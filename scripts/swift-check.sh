#!/usr/bin/env bash
# Checks the Swift package in bindings/swift without a Swift compiler (none
# exists on Linux CI machines here):
#   1. the committed generated bindings match the Rust API (scripts/bindings.sh --check);
#   2. every .swift file (generated and hand-written) parses with
#      tree-sitter-swift, with no ERROR or MISSING node;
#      tree-sitter-swift 0.7 rejects two valid constructs that uniffi
#      generates: an attribute alone inside `#if swift(>=5.8) … #endif`, and
#      the closure `{ () }`. In generated files only, those `#if`/`#endif`
#      lines are blanked and `{ () }` is read as `{ Void() }` before parsing
#      (same line numbers); hand-written files are parsed exactly as written;
#   3. the generated C header compiles as C with clang (it uses clang's
#      nullability qualifiers, as Swift's importer does).
# tree-sitter comes from PyPI into a venv under target/.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v python3 >/dev/null 2>&1; then
  echo "MISSING: python3 (needed for the tree-sitter Swift syntax check)" >&2
  exit 1
fi

if [ "${WAKEMETER_SKIP_BINDINGS_CHECK:-0}" != 1 ]; then
  scripts/bindings.sh --check
fi

venv="target/swift-check/venv"
if [ ! -x "$venv/bin/python" ] || ! "$venv/bin/python" -c 'import tree_sitter, tree_sitter_swift' 2>/dev/null; then
  echo "==> installing tree-sitter and tree-sitter-swift into $venv" >&2
  if ! python3 -m venv "$venv" >/dev/null 2>&1; then
    echo "MISSING: python3 venv module (e.g. apt-get install python3-venv)" >&2
    exit 1
  fi
  if ! "$venv/bin/pip" install -q --disable-pip-version-check "tree-sitter>=0.23,<0.27" "tree-sitter-swift>=0.7,<0.8"; then
    echo "MISSING: pip could not install tree-sitter and tree-sitter-swift from PyPI" >&2
    exit 1
  fi
fi

mapfile -t files < <(find bindings/swift -name '*.swift' -not -path '*/.build/*' | sort)
if [ "${#files[@]}" -eq 0 ]; then
  echo "no Swift files found under bindings/swift" >&2
  exit 1
fi

echo "==> tree-sitter-swift: ${#files[@]} files" >&2
"$venv/bin/python" - "${files[@]}" <<'PY'
import re
import sys

import tree_sitter_swift
from tree_sitter import Language, Parser

# `#if swift(...)` / attribute line / `#endif`: keep the attribute, blank the directives.
ATTRIBUTE_ONLY_IF = re.compile(r"^(#if swift\([^)]*\))(\n\s*@[^\n]*\n)(#endif)$", re.M)


def for_tree_sitter(path, text):
    """Works around the grammar's two gaps, in generated files only (see above)."""
    if "/Generated/" not in path:
        return text
    text = ATTRIBUTE_ONLY_IF.sub(lambda m: " " * len(m[1]) + m[2] + " " * len(m[3]), text)
    return text.replace("{ () }", "{ Void() }")


parser = Parser(Language(tree_sitter_swift.language()))
passed = failed = 0
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        tree = parser.parse(for_tree_sitter(path, f.read()).encode())
    problems = []
    stack = [tree.root_node]
    while stack:
        node = stack.pop()
        if node.is_error or node.is_missing:
            kind = "MISSING " + node.type if node.is_missing else "ERROR"
            problems.append(f"{path}:{node.start_point[0] + 1}:{node.start_point[1] + 1}: {kind}")
        elif node.has_error:
            stack.extend(node.children)
    if problems:
        failed += 1
        print(f"FAIL {path}")
        for p in sorted(problems)[:20]:
            print("  " + p)
    else:
        passed += 1
        print(f"ok   {path}")
print(f"swift-syntax: {passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
PY

# Both headers together, in module-map order, as Swift's importer reads them.
headers=(bindings/swift/Sources/WakemeterFFI/wakemeterFFI.h bindings/swift/Sources/WakemeterFFI/wakemeter_ffiFFI.h)
if command -v clang >/dev/null 2>&1; then
  echo "==> clang -fsyntax-only ${headers[*]}" >&2
  printf '#include "%s"\n' "${headers[@]}" |
    clang -fsyntax-only -std=c11 -Wall -Werror -Wno-pragma-once-outside-header -I. -x c -
  echo "ok   ${headers[*]} (C, clang)"
else
  echo "MISSING: clang, to check ${headers[*]} (e.g. apt-get install clang); skipped" >&2
fi
