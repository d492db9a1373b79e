"""DESIGN §2.1: the core never imports Qt or pyqtgraph (checked by importing and by reading)."""

from __future__ import annotations

import ast
import json
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import vitviz

CORE = (
    "blocks",
    "kindapi",
    "kinds",  # every kind package: its network, analysis, families, engine data
    "checkpoints",
    "imaging",
    "explain",
    "pipeline",  # analyze, export, batches of any kind, memory, folder_stats
    "training",
    "cli",
    "modelcode",
    "core",  # devices, filekinds, resources and the other plain utilities
)
QT_ROOTS = ("PySide6", "PySide2", "PyQt5", "PyQt6", "pyqtgraph", "shiboken6", "shiboken2", "qtpy")
QT_PACKAGES_OF_VITVIZ = ("vitviz.ui", "vitviz.workers")  # the only places allowed to touch Qt

PACKAGE_DIR = Path(vitviz.__file__).resolve().parent
REPO_ROOT = PACKAGE_DIR.parent


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO_ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def core_files() -> list[Path]:
    """Every .py file of the core packages and modules that exist (namespace packages included)."""
    files: list[Path] = []
    for name in CORE:
        package = PACKAGE_DIR / name
        if package.is_dir():
            files.extend(p for p in sorted(package.rglob("*.py")) if "__pycache__" not in p.parts)
        module = PACKAGE_DIR / f"{name}.py"
        if module.is_file():
            files.append(module)
    return files


def core_modules() -> list[str]:
    """Core module names from the file walk and from pkgutil (regular packages)."""
    names = {module_name(p) for p in core_files()}
    for info in pkgutil.walk_packages(vitviz.__path__, prefix="vitviz."):
        if info.name.split(".")[1] in CORE:
            names.add(info.name)
    return sorted(names)


IMPORT_SCRIPT = """
import importlib, json, sys, traceback
errors = {}
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except Exception:
        errors[name] = traceback.format_exc(limit=3)
roots = set(json.loads(%r))
bad = sorted(m for m in sys.modules if m.split('.')[0] in roots)
print(json.dumps({"bad": bad, "errors": errors}))
"""


def import_in_fresh_process(modules: list[str], extra_path: Path | None = None) -> dict:
    env = dict(os.environ)
    paths = [str(REPO_ROOT)] + ([str(extra_path)] if extra_path else [])
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    env.pop("QT_API", None)
    script = IMPORT_SCRIPT % json.dumps(QT_ROOTS)
    done = subprocess.run(
        [sys.executable, "-c", script, *modules],
        capture_output=True,
        text=True,
        env=env,
        cwd=REPO_ROOT,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def forbidden_imports(path: Path) -> list[str]:
    """'file:line name' for every import of Qt (or of vitviz.ui / vitviz.workers) in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    this = module_name(path) if path.is_relative_to(REPO_ROOT) else path.stem
    package = this if path.name == "__init__.py" else this.rpartition(".")[0]
    found = []

    def check(name: str, node: ast.AST) -> None:
        root = name.split(".")[0]
        internal = any(name == p or name.startswith(p + ".") for p in QT_PACKAGES_OF_VITVIZ)
        if root in QT_ROOTS or internal:
            found.append(f"{path}:{node.lineno} {name}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                check(alias.name, node)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".") if package else []
                base = base[: len(base) - (node.level - 1)] if node.level > 1 else base
                name = ".".join([*base, node.module] if node.module else base)
            else:
                name = node.module or ""
            check(name, node)
            for alias in node.names:  # from vitviz import ui
                check(f"{name}.{alias.name}", node)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            if fname in ("import_module", "__import__") and literal:
                check(arg.value, node)
    return found


def test_core_walk_is_not_vacuous():
    modules = core_modules()
    for expected in ("vitviz.blocks.vit", "vitviz.kinds.swin.network", "vitviz.explain.rollout"):
        assert expected in modules
    assert all(m.split(".")[1] in CORE for m in modules)


def test_core_imports_no_qt_in_a_fresh_process():
    modules = core_modules()
    result = import_in_fresh_process(modules)
    assert result["errors"] == {}, "core modules failed to import:\n" + "\n".join(
        f"{k}:\n{v}" for k, v in result["errors"].items()
    )
    assert result["bad"] == [], f"importing the core pulled in Qt modules: {result['bad']}"


def test_core_source_has_no_qt_imports():
    files = core_files()
    assert files
    found = [hit for f in files for hit in forbidden_imports(f)]
    assert found == [], "core modules import Qt:\n" + "\n".join(found)


# -- the checks above really catch a Qt import ------------------------------------------------


def write_fake_core(tmp_path: Path) -> Path:
    pkg = tmp_path / "fakecore"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from .inner import f\n", encoding="utf-8")
    (pkg / "inner.py").write_text(
        "import math\n\n\ndef f():\n    return math.pi\n\n\nimport PySide6  # noqa\n",
        encoding="utf-8",
    )
    (pkg / "lazy.py").write_text(
        "def g():\n    from pyqtgraph.Qt import QtCore\n    return QtCore\n", encoding="utf-8"
    )
    (pkg / "dynamic.py").write_text(
        "import importlib\n\nqt = importlib.import_module('PyQt6.QtWidgets')\n", encoding="utf-8"
    )
    (pkg / "ui_user.py").write_text("from vitviz.workers import jobs\n", encoding="utf-8")
    (pkg / "clean.py").write_text("import torch\nfrom . import inner\n", encoding="utf-8")
    return pkg


def test_import_check_catches_a_qt_import(tmp_path):
    write_fake_core(tmp_path)
    result = import_in_fresh_process(["fakecore"], extra_path=tmp_path)
    assert result["errors"] == {}
    assert "PySide6" in result["bad"]


def test_static_check_catches_qt_imports(tmp_path):
    pkg = write_fake_core(tmp_path)
    assert any("PySide6" in hit for hit in forbidden_imports(pkg / "inner.py"))
    assert any("pyqtgraph" in hit for hit in forbidden_imports(pkg / "lazy.py"))
    assert any("PyQt6" in hit for hit in forbidden_imports(pkg / "dynamic.py"))
    assert any("vitviz.workers" in hit for hit in forbidden_imports(pkg / "ui_user.py"))
    assert forbidden_imports(pkg / "clean.py") == []


def test_every_user_error_is_a_vitviz_error_with_a_printable_message() -> None:
    """One base for what a user's input can cause: the CLI, the window and the fuzz suite tell
    vitviz's own refusals from bugs by it, and its message is always one printable line."""
    import vitviz
    from vitviz.checkpoints.errors import CheckpointError, MissingSettingsError
    from vitviz.imaging.loading import ImageLoadError
    from vitviz.modelcode.errors import ModelCodeError
    from vitviz.training.cifar import CifarError
    from vitviz.training.datasets import DatasetError
    from vitviz.training.validate import TrainingConfigError

    kinds = (
        CheckpointError,
        MissingSettingsError,
        ImageLoadError,
        ModelCodeError,
        CifarError,
        DatasetError,
        TrainingConfigError,
        vitviz.NotEnoughMemoryError,
        vitviz.NonFiniteError,
    )
    for kind in kinds:
        assert issubclass(kind, vitviz.VitvizError), kind
        extra = (None, 0) if kind is vitviz.NotEnoughMemoryError else ()
        error = kind("two\nlines\x1b[2J and \udcff.png: refused", *extra)
        text = str(error)
        assert "\n" not in text and "\x1b" not in text, (kind, text)
        assert text.encode("utf-8")  # printable on any UTF-8 stream
        assert "\\n" in text and "\\xff" in text
