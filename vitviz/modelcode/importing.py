"""Import a user's model file as its author wrote it, find the model in it and build it."""

from __future__ import annotations

import hashlib
import importlib.util
import inspect
import os
import re
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


def _forget_siblings(folder: Path) -> None:
    """Drop cached modules named like a file of ``folder`` that were imported from a folder
    not on sys.path (an earlier model's ``model.py``), so ``from model import ViT`` in this
    folder imports this folder's file, as it is now."""
    on_path = {os.path.realpath(p) for p in sys.path if p}
    for name, module in list(sys.modules.items()):
        where = getattr(module, "__file__", None)
        if "." in name or not where:
            continue
        if not ((folder / f"{name}.py").is_file() or (folder / name / "__init__.py").is_file()):
            continue
        home = os.path.dirname(where)
        if os.path.basename(where) == "__init__.py":
            home = os.path.dirname(home)
        if os.path.realpath(home) not in on_path:
            sys.modules.pop(name, None)


@contextmanager
def _folder_on_path(folder: Path) -> Iterator[None]:
    """The file's folder on sys.path while it imports, so it can import its sibling files."""
    entry = str(folder)
    _forget_siblings(folder)
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
                f"{file.name} has no class or function named {name!r}; give one it defines as "
                f"--model-code {file.name}:NAME. It defines: {listed}"
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


def parameter_names(factory: Callable[..., Any]) -> set[str]:
    """The names the constructor or factory takes (empty when it has no signature)."""
    try:
        return set(inspect.signature(factory).parameters)
    except (TypeError, ValueError):
        return set()


def effective_args(factory: Callable[..., Any], args: dict[str, Any]) -> dict[str, Any]:
    """``args`` completed with the signature's defaults (where the image size often is)."""
    try:
        bound = inspect.signature(factory).bind(**args)
    except (TypeError, ValueError):
        return dict(args)
    bound.apply_defaults()
    return {**bound.arguments, **args}


_CONFIG_NAMES = re.compile(
    r"(config|cfg|conf|args|opt|opts|hparams|hp|params|settings|options|model_config)",
    re.IGNORECASE,
)
_PLAIN_TYPES = {"int", "float", "str", "bool", "list", "dict", "tuple", "Any", "None"}


def config_parameter(factory: Callable[..., Any]) -> tuple[str, str] | None:
    """(parameter, its annotation or '') of a constructor that takes a config object: a
    parameter named like ``config`` / ``cfg`` / ``args``, or annotated with a class."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return None
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        annotation = p.annotation
        text = getattr(annotation, "__name__", annotation if isinstance(annotation, str) else "")
        text = text if isinstance(text, str) else ""
        is_class = bool(text) and text[0].isupper() and text not in _PLAIN_TYPES
        if _CONFIG_NAMES.fullmatch(p.name) or (is_class and p.annotation is not p.empty):
            return p.name, text if is_class else ""
    return None


def factory_hint(name: str, parameter: tuple[str, str]) -> str:
    """How to open a constructor that takes a config object: a two-line factory function."""
    param, annotation = parameter
    made = f"{annotation}(...)" if annotation else "your config"
    return (
        f"{name} takes a config object ({param}), which JSON arguments can't make: write a "
        f"two-line factory in a file beside it, def make_model(): return {name}({made}), and "
        "open that with --model-code factory.py:make_model"
    )


def _global_hint(exc: Exception, name: str) -> str:
    """For a constructor that reads a global the training script sets (NameError)."""
    if not isinstance(exc, NameError) or not getattr(exc, "name", None):
        return ""
    return (
        f"; {name} reads the global {exc.name!r}, which the file does not define when imported "
        f"(a script sets it): write a two-line factory that sets it first, def make_model(): "
        f"model.{exc.name} = ...; return model.{name}(...), and open factory.py:make_model"
    )


def _missing_hint(factory: Callable[..., Any], args: dict[str, Any]) -> str:
    """'; give them in --model-args '{"dim": …}'' for required parameters not given."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return ""
    missing = [
        p.name
        for p in params
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.name not in args
    ]
    if not missing:
        return ""
    shown = ", ".join(f'"{m}": …' for m in missing)
    return f"; give {'it' if len(missing) == 1 else 'them'} in --model-args '{{{shown}}}'"


def build_module(
    factory: Callable[..., Any], name: str, args: dict[str, Any], file: Path
) -> nn.Module:
    """Call ``factory(**args)``; the result must be an nn.Module."""
    config = config_parameter(factory)
    try:
        inspect.signature(factory).bind(**args)
    except TypeError as exc:
        hint = f"; {factory_hint(name, config)}" if config else _missing_hint(factory, args)
        raise ModelCodeError(
            f"the arguments {args} don't fit {signature_text(factory, name)}: {exc}{hint}"
        ) from exc
    except ValueError:
        pass  # no signature to check (a builtin); the call below says what is wrong
    try:
        model = factory(**args)
    except Exception as exc:
        hint = f"; {factory_hint(name, config)}" if config else _global_hint(exc, name)
        raise ModelCodeError(
            f"building {name} with {args} failed: {describe_exception(exc, file)}{hint}"
        ) from exc
    if not isinstance(model, nn.Module):
        raise ModelCodeError(
            f"{name}(...) returned a {type(model).__name__}, not a torch nn.Module"
        )
    return model
