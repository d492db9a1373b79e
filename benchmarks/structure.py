"""How vitviz's source is laid out, counted: the numbers the model-kind redesign is judged by.

Prints one table: import circles, imports from a lower layer up to a higher one (the layer map
is ``tests/import_graph.py``'s ``VITVIZ_LAYERS``), lines outside a kind's own files that name
the Swin kind, ``swin_*`` modules, loose top-level modules of ``vitviz/`` (those that are no
entry point) and uses of ``Any``. Then the circles, upward imports and loose modules themselves.
Nothing is timed; exit 0 always.

    .venv/bin/python benchmarks/structure.py [--package vitviz]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from _common import REPO_ROOT, parser, print_table

sys.path.insert(0, str(REPO_ROOT / "tests"))
from import_graph import VITVIZ_LAYERS, circles, import_graph, upward_imports

# A line that asks which kind it holds: is_swin, isinstance(.., Swin..), a swin_ module or name.
KIND_BRANCH = re.compile(r"\bis_swin\b|isinstance\([^)]*Swin|\bswin_\w+")
ANY = re.compile(r"\bAny\b")
# The modules that stay at the top of the package: its __init__, ``python -m vitviz``, the
# window's entry point (gui-script), the installed self-test and the Qt-dependency check (run
# as ``python -m vitviz.qt_deps`` by packaging/install.sh). Anything else belongs in a package.
ENTRY_POINTS = ("__init__", "__main__", "app", "selftest", "qt_deps")


def kind_files(package: Path) -> set[Path]:
    """Files that belong to one kind: ``swin_*`` modules and anything under ``kinds/``."""
    return set(package.rglob("swin_*.py")) | set((package / "kinds").rglob("*.py"))


def main() -> int:
    p = parser(__doc__.splitlines()[0])  # --quick etc. are accepted and change nothing here
    p.add_argument("--package", default="vitviz", help="the package folder under the repository")
    args = p.parse_args()
    package = REPO_ROOT / args.package
    files = [f for f in sorted(package.rglob("*.py")) if "__pycache__" not in f.parts]
    graph = import_graph(package)
    found_circles = circles(graph)
    upward = upward_imports(graph, VITVIZ_LAYERS)
    own = kind_files(package)
    branch_lines: dict[Path, int] = {}
    any_uses = 0
    for f in files:
        text = f.read_text(encoding="utf-8")
        any_uses += len(ANY.findall(text))
        if f in own:
            continue
        hits = sum(1 for line in text.splitlines() if KIND_BRANCH.search(line))
        if hits:
            branch_lines[f] = hits
    loose = [f for f in package.glob("*.py") if f.stem not in ENTRY_POINTS]
    rows = [
        ("import circles", len(found_circles)),
        ("upward imports", len(upward)),
        ("lines naming the Swin kind outside its own modules", sum(branch_lines.values())),
        ("  ... in how many modules", len(branch_lines)),
        ("swin_* modules", len(list(package.rglob("swin_*.py")))),
        ("loose top-level modules", len(loose)),
        ("uses of Any", any_uses),
        ("modules", len(graph)),
    ]
    print_table(["count", "value"], [(name, str(value)) for name, value in rows])
    for circle in found_circles:
        print("circle:", " <-> ".join(circle))
    for module, line, target in upward:
        print(f"upward: {module}:{line} imports {target}")
    for f in sorted(loose):
        print(f"loose: {f.relative_to(REPO_ROOT)}")
    top = sorted(branch_lines.items(), key=lambda kv: -kv[1])[:10]
    for f, n in top:
        print(f"kind branches: {f.relative_to(REPO_ROOT)} {n}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
