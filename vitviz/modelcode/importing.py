"""Import a user's model file as its author wrote it, find the model in it and build it."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from types import ModuleType
from typing import Any

from torch import nn

from vitviz.modelcode.errors import ModelCodeError, describe_exception


def module_name_for(file: Path) -> str:
    """A module name for ``file`` that can't clash with real packages."""
    digest = hashlib.sha256(str(file.resolve()).encode()).hexdigest()[:12]
    stem = "".join(c if c.isalnum() else "_" for c in file.stem)
    return f"vitviz_modelcode_{stem}_{digest}"


@contextmanager
def _folder_on_path(folder: Path) -> Iterator[None]:
    """The file's folder on sys.path while it imports, so it can import its sibling files."""
    entry = str(folder)
    sys.path.insert(0, entry)
    try:
        yield
    finally:
        with suppress(ValueError):
            sys.path.remove(entry)


def import_model_file(file: str | Path) -> ModuleType:
    """Run ``file`` as a fresh module (edits since the last import are seen)."""
    path = Path(file).expanduser()
    if not path.is_file():
        why = "no such file" if not path.exists() else "not a file: give the model's .py file"
        raise ModelCodeError(f"{path}: {why}")
    path = path.resolve()
    name = module_name_for(path)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ModelCodeError(f"{path.name} can't be imported as Python (expected a .py file)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up while it runs
    try:
        with _folder_on_path(path.parent):
            spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # SystemExit: a file that calls sys.exit()
        sys.modules.pop(name, None)
        raise ModelCodeError(
            f"{path.name} could not be imported: {describe_exception(exc, path)}"
        ) from exc
    return module


def available_names(module: ModuleType) -> list[str]:
    """'ViT (class)', 'vit_tiny (function)': what the file itself defines, models first."""
    own = [
        (name, obj)
        for name, obj in vars(module).items()
        if not name.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and getattr(obj, "__module__", None) == module.__name__
    ]
    own.sort(key=lambda item: not (inspect.isclass(item[1]) and issubclass(item[1], nn.Module)))
    return [f"{n} ({'class' if inspect.isclass(o) else 'function'})" for n, o in own]


def find_factory(module: ModuleType, name: str, file: Path) -> Callable[..., Any]:
    """The class or function called ``name`` (dotted names reach into classes or objects)."""
    obj: Any = module
    for part in name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            listed = ", ".join(available_names(module)) or "none"
            raise ModelCodeError(
                f"{file.name} has no class or function named {name!r}. It defines: {listed}"
            )
    if not callable(obj):
        raise ModelCodeError(
            f"{name} in {file.name} is a {type(obj).__name__}, not a class or function that "
            "builds the model"
        )
    return obj


def signature_text(factory: Callable[..., Any], name: str) -> str:
    try:
        return f"{name}{inspect.signature(factory)}"
    except (TypeError, ValueError):
        return f"{name}(...)"


def effective_args(factory: Callable[..., Any], args: dict[str, Any]) -> dict[str, Any]:
    """``args`` completed with the signature's defaults (where the image size often is)."""
    try:
        bound = inspect.signature(factory).bind(**args)
    except (TypeError, ValueError):
        return dict(args)
    bound.apply_defaults()
    return {**bound.arguments, **args}


def build_module(
    factory: Callable[..., Any], name: str, args: dict[str, Any], file: Path
) -> nn.Module:
    """Call ``factory(**args)``; the result must be an nn.Module."""
    try:
        inspect.signature(factory).bind(**args)
    except TypeError as exc:
        raise ModelCodeError(
            f"the arguments {args} don't fit {signature_text(factory, name)}: {exc}"
        ) from exc
    except ValueError:
        pass  # no signature to check (a builtin); the call below says what is wrong
    try:
        model = factory(**args)
    except Exception as exc:
        raise ModelCodeError(
            f"building {name} with {args} failed: {describe_exception(exc, file)}"
        ) from exc
    if not isinstance(model, nn.Module):
        raise ModelCodeError(
            f"{name}(...) returned a {type(model).__name__}, not a torch nn.Module"
        )
    return model
