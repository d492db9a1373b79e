"""Imports point down the layers (DESIGN §2.7): no import circle and no upward import anywhere
in vitviz (the layer map is ``tests/import_graph.py``'s), and the command line is one package:
``vitviz/cli/``'s sub-command modules import ``vitviz.cli.common`` and lower
layers, never the package itself or its ``parser``; only ``parser`` (and the package's
``__init__`` / ``__main__``) import them."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from import_graph import VITVIZ_LAYERS, circles, import_graph, layer_of, upward_imports

import vitviz

PACKAGE_DIR = Path(vitviz.__file__).resolve().parent
CLI = "vitviz.cli"
TOP = ("__init__.py", "__main__.py", "parser.py")  # may import the sub-command modules


@pytest.fixture(scope="module")
def graph() -> dict[str, dict[str, int]]:
    """vitviz's import graph, read once for this module's tests (none of them changes it)."""
    return import_graph(PACKAGE_DIR)


def cli_circles(
    package_dir: Path, graph: dict[str, dict[str, int]] | None = None
) -> list[list[str]]:
    """The import circles of the package (of ``graph`` when given: the package's, read
    already) with a member in vitviz.cli."""
    return [
        c
        for c in circles(import_graph(package_dir) if graph is None else graph)
        if any(m == CLI or m.startswith(CLI + ".") for m in c)
    ]


def package_imports(cli_dir: Path) -> list[str]:
    """'file:line name' for each import of the vitviz.cli package itself (not of one of its
    modules) in a sub-command module: the import graph counts those as no edge at all."""
    modules = {p.stem for p in cli_dir.glob("*.py")}
    found = []
    for path in sorted(cli_dir.glob("*.py")):
        if path.name in TOP:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name == CLI]
            elif isinstance(node, ast.ImportFrom) and (
                (node.module == CLI and not node.level) or (node.level == 1 and not node.module)
            ):
                names = [f"{CLI}.{a.name}" for a in node.names if a.name not in modules]
            found += [f"{path.name}:{node.lineno} {name}" for name in names]
    return found


def test_the_cli_is_a_package_of_sub_command_modules(graph: dict[str, dict[str, int]]) -> None:
    assert (PACKAGE_DIR / "cli").is_dir() and not (PACKAGE_DIR / "cli.py").exists()
    for command in ("explain", "info", "convert", "verify", "methods", "faithfulness", "stats"):
        assert f"{CLI}.{command}" in graph[f"{CLI}.parser"], command
        assert f"{CLI}.parser" not in graph[f"{CLI}.{command}"], command
    assert f"{CLI}.common" in graph[f"{CLI}.explain"]


def test_no_import_circle_has_a_member_in_the_cli(graph: dict[str, dict[str, int]]) -> None:
    assert cli_circles(PACKAGE_DIR, graph) == []
    assert package_imports(PACKAGE_DIR / "cli") == []


def test_a_circle_through_the_cli_is_caught(tmp_path: Path) -> None:
    """The same checks on a copy of vitviz/cli with a sub-command that imports its parser
    (a lazy import, as the old cli.py <-> explain_cli circle was), and one importing the package."""
    copy = tmp_path / "vitviz"
    shutil.copytree(PACKAGE_DIR / "cli", copy / "cli")
    (copy / "__init__.py").write_text("", encoding="utf-8")
    assert cli_circles(copy) == []
    stats = copy / "cli" / "stats.py"
    text = stats.read_text(encoding="utf-8")
    stats.write_text(text + "\n\ndef _late():\n    from vitviz.cli.parser import main\n")
    assert cli_circles(copy) == [[f"{CLI}.parser", f"{CLI}.stats"]]
    stats.write_text(text + "\n\ndef _late():\n    from vitviz.cli import main\n")
    assert cli_circles(copy) == []  # no edge in the graph: the package check finds it
    assert package_imports(copy / "cli") == [f"stats.py:{text.count(chr(10)) + 4} {CLI}.main"]


def test_no_import_circle_and_no_upward_import(graph: dict[str, dict[str, int]]) -> None:
    """DESIGN §2.7 over the whole package: imports only point down the layers
    (``VITVIZ_LAYERS``), and no set of modules imports itself round."""
    assert circles(graph) == []
    assert upward_imports(graph, VITVIZ_LAYERS) == []
    unranked = [m for m in graph if m != "vitviz" and layer_of(m, VITVIZ_LAYERS) is None]
    assert unranked == []  # every module has a layer (the package's __init__ is the top)


def test_the_layer_map_ranks_whole_packages() -> None:
    """One rank per top-level package (DESIGN §2): adding a module or a kind edits no rank
    line, and no module is ranked apart from its package."""
    top = {p.stem for p in PACKAGE_DIR.glob("*.py")} | {
        p.parent.name for p in PACKAGE_DIR.glob("*/__init__.py")
    }
    names = [name.removeprefix("vitviz.") for name in VITVIZ_LAYERS]
    assert all("." not in name for name in names), names
    assert set(names) <= top


def test_no_shared_module_imports_a_kind_package(graph: dict[str, dict[str, int]]) -> None:
    """The kinds are plug-ins (DESIGN §3): outside ``vitviz/kinds/`` nothing imports one of
    them; the registry finds them by the package names it lists."""
    found = [
        f"{module} -> {target}"
        for module, edges in graph.items()
        if not module.startswith("vitviz.kinds") and module != "vitviz"
        for target in edges
        if target.startswith("vitviz.kinds.")
    ]
    assert found == []
