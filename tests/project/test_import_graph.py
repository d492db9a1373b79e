"""tests/import_graph.py finds circles and upward imports (on small packages written here)."""

from __future__ import annotations

from pathlib import Path

from import_graph import circles, import_graph, upward_imports


def write_package(root: Path, files: dict[str, str]) -> Path:
    package = root / "pkg"
    for name, text in files.items():
        path = package / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return package


def test_edges_resolve_relative_lazy_and_type_checking_imports(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "low.py": "import math\n",
            "mid/__init__.py": "from . import inner\n",
            "mid/inner.py": "from ..low import thing\n",
            "high.py": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.mid import x\n"
                "def f():\n    import pkg.low\n"
            ),
        },
    )
    graph = import_graph(package)
    assert graph["pkg.mid.inner"] == {"pkg.low": 1}
    assert graph["pkg.mid"] == {"pkg.mid.inner": 1}
    assert set(graph["pkg.high"]) == {"pkg.mid", "pkg.low"}
    assert graph["pkg.low"] == {}


def test_circles_are_found_and_a_chain_is_not_one(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "a.py": "from pkg import b\n",
            "b.py": "def f():\n    from pkg.c import g\n",
            "c.py": "import pkg.a\n",
            "d.py": "import pkg.a\n",
        },
    )
    assert circles(import_graph(package)) == [["pkg.a", "pkg.b", "pkg.c"]]
    (package / "c.py").write_text("import math\n", encoding="utf-8")
    assert circles(import_graph(package)) == []


def test_upward_imports_are_found_by_layer(tmp_path: Path) -> None:
    package = write_package(
        tmp_path,
        {
            "__init__.py": "",
            "core/__init__.py": "",
            "core/math.py": "from pkg.ui.widgets import w\n",
            "ui/__init__.py": "",
            "ui/widgets.py": "from pkg.core import math\n",
        },
    )
    layers = {"pkg.core": 0, "pkg.ui": 1}
    assert upward_imports(import_graph(package), layers) == [("pkg.core.math", 1, "pkg.ui.widgets")]
