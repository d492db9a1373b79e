"""ModelCodeSpec: which file, which class or function, its arguments, weights and settings.

Nothing here runs the user's file or imports torch: the window builds a spec on the GUI thread
(``scan_names`` reads the file's top-level names with ``ast``), the engine thread loads it.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vitviz.kindapi.sides import ModelCodeSide
from vitviz.modelcode.errors import ModelCodeError

# The settings every model from code takes; each kind's model-code side adds the ones it reads
# (``ModelCodeSide.settings``, e.g. a Swin's window layout), see ``setting_keys``.
SETTING_KEYS = (
    "image_size",
    "mean",
    "std",
    "patch_size",
    "num_prefix_tokens",
    "class_names",
)


def kind_setting_readers() -> dict[str, ModelCodeSide]:
    """Setting name -> the model-code side of the kind that reads it (the registry's kinds)."""
    from vitviz.kindapi import all_kinds

    sides = [kind.model_code for kind in all_kinds() if kind.model_code is not None]
    return {name: side for side in sides for name in side.settings}


def setting_keys() -> tuple[str, ...]:
    """Every setting a spec accepts: the shared ones, then the kinds'."""
    return SETTING_KEYS + tuple(kind_setting_readers())


@dataclass(frozen=True)
class ModelCodeSpec:
    """Everything needed to open a model written in a Python file.

    ``args`` are the keyword arguments of the class or factory ``name``. The settings that are
    None are found from the model (patch size, prefix tokens) or its arguments (image size);
    mean and std (one number, or three) default to 0.5.
    """

    file: Path
    name: str
    args: dict[str, Any] = field(default_factory=dict)
    checkpoint: Path | None = None  # a state dict, read with vitviz's safe reader
    class_names: tuple[str, ...] | None = None
    class_names_file: Path | None = None  # one name a line, or a JSON list
    image_size: tuple[int, int] | None = None
    mean: tuple[float, ...] | None = None  # one number, or one per channel
    std: tuple[float, ...] | None = None
    patch_size: int | None = None
    num_prefix_tokens: int | None = None
    # the settings a kind reads (checked by it), e.g. a Swin's window layout per block
    kind_settings: dict[str, object] = field(default_factory=dict)

    @property
    def target(self) -> str:
        """'FILE.py:NAME', as the CLI takes it."""
        return f"{self.file}:{self.name}"


@dataclass(frozen=True)
class NameInfo:
    """A top-level class or function of a model file, found without running it."""

    name: str
    kind: str  # "class" | "function"
    is_module: bool  # a class deriving from something called Module (nn.Module, ...)
    line: int


def parse_target(text: str) -> tuple[Path, str]:
    """'path/model.py:ViT' -> (Path('path/model.py'), 'ViT')."""
    file, sep, name = text.rpartition(":")
    if not sep or not file or not all(part.isidentifier() for part in name.split(".")):
        raise ModelCodeError(
            f"--model-code {text!r}: give the file and the model's class or function as "
            "FILE.py:NAME, e.g. model.py:ViT"
        )
    return Path(file), name


def parse_args_text(text: str | None) -> dict[str, Any]:
    """JSON object text (or '@file.json') -> constructor keyword arguments."""
    if text is None or not text.strip():
        return {}
    text = text.strip()
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text(encoding="utf-8")
        except OSError as exc:
            raise ModelCodeError(f"model arguments: can't read {text[1:]} ({exc})") from exc
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ModelCodeError(f"model arguments are not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ModelCodeError(
            'model arguments must be a JSON object of keyword arguments, e.g. {"dim": 64}; '
            f"got a {type(value).__name__}"
        )
    return value


def _size(value: Any) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return (value, value)
    if (
        isinstance(value, (list, tuple))
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value)
    ):
        return (int(value[0]), int(value[1]))
    raise ModelCodeError(f"image_size must be a positive int or [height, width], got {value!r}")


def _per_channel(name: str, value: Any) -> tuple[float, ...]:
    """One number (any channel count) or three (R, G, B) -> a tuple of 1 or 3 floats."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value]
    if (
        isinstance(value, (list, tuple))
        and len(value) in (1, 3)
        and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value)
    ):
        return tuple(float(v) for v in value)
    raise ModelCodeError(
        f"{name} must be three numbers (R, G, B) or one (grayscale), got {value!r}"
    )


def _count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    raise ModelCodeError(f"{name} must be a whole number ≥ {minimum}, got {value!r}")


def make_spec(
    file: str | Path,
    name: str,
    args: Mapping[str, Any] | None = None,
    checkpoint: str | Path | None = None,
    settings: Mapping[str, Any] | None = None,
) -> ModelCodeSpec:
    """A checked spec; ``settings`` may hold the keys of ``setting_keys()`` (a kind's are
    checked by its ``ModelCodeSide.parse_setting``).

    ``class_names`` in settings is a list of names or the path of a names file.
    """
    settings = dict(settings or {})
    readers = kind_setting_readers()
    unknown = sorted(set(settings) - set(SETTING_KEYS) - set(readers))
    if unknown:
        raise ModelCodeError(
            f"unknown model-code settings {unknown}; accepted: {', '.join(setting_keys())}"
        )
    kind_settings: dict[str, object] = {}
    for key, reader in readers.items():
        if settings.get(key) is not None:
            try:
                kind_settings[key] = reader.parse_setting(key, settings[key])
            except ValueError as exc:
                raise ModelCodeError(str(exc)) from exc
    names = settings.get("class_names")
    names_file = None
    if isinstance(names, str):
        names_file, names = Path(names), None
    elif names is not None:
        if not isinstance(names, (list, tuple)):
            raise ModelCodeError("class_names must be a list of names or a file path")
        names = tuple(str(n) for n in names)
    get = settings.get
    return ModelCodeSpec(
        file=Path(file),
        name=name,
        args=dict(args or {}),
        checkpoint=Path(checkpoint) if checkpoint else None,
        class_names=names,
        class_names_file=names_file,
        image_size=_size(get("image_size")) if get("image_size") is not None else None,
        mean=_per_channel("mean", get("mean")) if get("mean") is not None else None,
        std=_per_channel("std", get("std")) if get("std") is not None else None,
        patch_size=_count("patch_size", get("patch_size"), 1) if get("patch_size") else None,
        num_prefix_tokens=(
            _count("num_prefix_tokens", get("num_prefix_tokens"), 0)
            if get("num_prefix_tokens") is not None
            else None
        ),
        kind_settings=kind_settings,
    )


def read_class_names(path: Path) -> list[str]:
    """Class names from a text file (one a line) or a JSON list / {index: name} object."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ModelCodeError(f"class names: can't read {path.name} ({exc})") from exc
    if path.suffix.lower() == ".json":
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ModelCodeError(f"class names: {path.name} is not valid JSON ({exc})") from exc
        if isinstance(value, dict):
            try:
                by_index = {int(k): str(v) for k, v in value.items()}
            except ValueError as exc:
                raise ModelCodeError(f"class names: {path.name} keys must be indices") from exc
            return [by_index.get(i, f"class {i}") for i in range(max(by_index, default=-1) + 1)]
        if isinstance(value, list):
            return [str(v) for v in value]
        raise ModelCodeError(f"class names: {path.name} must hold a JSON list of names")
    return [line.strip() for line in text.splitlines() if line.strip()]


def _is_module_class(node: ast.ClassDef) -> bool:
    for base in node.bases:
        name = base.attr if isinstance(base, ast.Attribute) else getattr(base, "id", "")
        if name.endswith("Module"):
            return True
    return False


def scan_names(file: str | Path) -> list[NameInfo]:
    """Top-level classes and functions of ``file``, read with ``ast`` (nothing runs).

    Returns [] when the file can't be read or parsed (the loader reports that properly).
    """
    try:
        tree = ast.parse(Path(file).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return []
    found = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            found.append(NameInfo(node.name, "class", _is_module_class(node), node.lineno))
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found.append(NameInfo(node.name, "function", False, node.lineno))
    return found


def guess_model_name(names: list[NameInfo]) -> str | None:
    """The most likely model: the last nn.Module class (tutorials define it after its parts)."""
    modules = [n for n in names if n.is_module]
    if modules:
        return modules[-1].name
    return names[-1].name if names else None
