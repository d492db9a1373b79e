"""The tests are grouped as the code is: a folder per vitviz package (``tests/kinds/<kind>/`` per
kind package) and ``tests/project/`` for what holds for the repository as a whole."""

from __future__ import annotations

from pathlib import Path

import tomllib

import vitviz

TESTS = Path(__file__).resolve().parents[1]
REPO = TESTS.parent
PACKAGE = Path(vitviz.__file__).resolve().parent


def _test_folders() -> set[Path]:
    return {p.parent for p in TESTS.rglob("test_*.py") if "__pycache__" not in p.parts}


def test_no_test_module_sits_loose_in_tests() -> None:
    assert sorted(p.name for p in TESTS.glob("test_*.py")) == []


def test_each_test_folder_mirrors_a_package() -> None:
    """``tests/<package>/`` for a package of vitviz, ``tests/kinds/<kind>/`` for a kind's."""
    packages = {p.parent.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("__init__.py")}
    wrong = [
        f.relative_to(TESTS).as_posix()
        for f in _test_folders()
        if f.relative_to(TESTS).as_posix() not in packages | {"project"}
    ]
    assert wrong == []


def test_every_test_folder_is_on_the_test_path() -> None:
    """A test module imports another's reference implementation by name (pytest's pythonpath)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    listed = {REPO / p for p in config["tool"]["pytest"]["ini_options"]["pythonpath"]}
    assert sorted(f.relative_to(REPO).as_posix() for f in _test_folders() - listed) == []
