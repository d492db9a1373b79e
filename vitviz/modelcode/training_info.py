"""What a training script saved beside the weights that says how the model was built: its config
(a dict, or the run's argparse.Namespace where the checkpoint reader admits one), the
architecture's name (``arch``) and the epoch.

``read_training_info`` takes them from the checkpoint object (the top level, as training scripts
save them); ``constructor_args`` hands the config or the architecture to the file's constructor
where it needs one that ``--model-args`` did not give, and says so for the model info. Nothing
here runs anything from the file: the values are plain data read by the safe reader.
"""

from __future__ import annotations

import argparse
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

CONFIG_KEYS = ("config", "cfg", "model_config", "hparams", "hyper_parameters", "args")
ARCH_KEYS = ("arch", "architecture", "model_name")
EPOCH_KEYS = ("epoch",)
CONFIG_PARAMS = ("config", "cfg", "model_config", "conf", "hparams", "args", "opt", "params")
ARCH_PARAMS = ("arch", "architecture", "model_name", "variant", "name")
_PLAIN = (str, int, float, bool, type(None), list, tuple, dict)


@dataclass
class TrainingInfo:
    """The checkpoint's config, architecture name and epoch (None where it holds none)."""

    config: dict[str, Any] | None = None
    config_key: str = ""
    arch: str | None = None
    arch_key: str = ""
    epoch: int | None = None
    notes: list[str] = field(default_factory=list)


def _as_config(value: Any) -> dict[str, Any] | None:
    """A dict of plain values with string keys (a Namespace's attributes), else None."""
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if not isinstance(value, Mapping) or not value:
        return None
    if not all(isinstance(k, str) and isinstance(v, _PLAIN) for k, v in value.items()):
        return None
    return dict(value)


def read_training_info(obj: Any) -> TrainingInfo:
    """The config, ``arch`` and ``epoch`` at the top level of checkpoint ``obj``."""
    info = TrainingInfo()
    if not isinstance(obj, Mapping):
        return info
    for key in CONFIG_KEYS:
        config = _as_config(obj.get(key))
        if config is not None:
            info.config, info.config_key = config, key
            break
    for key in ARCH_KEYS:
        value = obj.get(key)
        if isinstance(value, str) and value.strip():
            info.arch, info.arch_key = value.strip(), key
            info.notes.append(f"architecture {info.arch!r} named in the checkpoint's {key!r}")
            break
    for key in EPOCH_KEYS:
        value = obj.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            info.epoch = value
            info.notes.append(f"epoch {value} (the checkpoint's {key!r})")
            break
    return info


def _needed(factory: Callable[..., Any], given: Mapping[str, Any]) -> list[inspect.Parameter]:
    """The constructor's parameters without a default that ``given`` leaves out."""
    try:
        params = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):
        return []
    return [
        p
        for p in params
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.name not in given
    ]


def needs_more(factory: Callable[..., Any], args: Mapping[str, Any]) -> bool:
    """Whether the constructor needs a parameter ``args`` leave out (the checkpoint may say it)."""
    return bool(_needed(factory, args))


def _takes_plain(p: inspect.Parameter) -> bool:
    """No annotation, or a dict-like one: a config class (a dataclass) can't be made from a
    dict without running its code, which is left to the user's factory."""
    a = p.annotation
    if a is p.empty:
        return True
    text = a if isinstance(a, str) else getattr(a, "__name__", "")
    return text.split("[")[0] in ("dict", "Dict", "Mapping", "Any", "str")


def constructor_args(
    factory: Callable[..., Any], args: Mapping[str, Any], info: TrainingInfo | None
) -> tuple[dict[str, Any], list[str]]:
    """``args`` with the checkpoint's config (or architecture name) for a parameter the
    constructor needs and ``args`` don't give, and the notes saying so."""
    out, notes = dict(args), []
    if info is None:
        return out, notes
    for p in _needed(factory, args):
        if p.name in CONFIG_PARAMS and info.config is not None and _takes_plain(p):
            out[p.name] = dict(info.config)
            keys = ", ".join(sorted(info.config)[:8]) + (" …" if len(info.config) > 8 else "")
            notes.append(
                f"the constructor's {p.name!r} is the checkpoint's {info.config_key!r} ({keys})"
            )
        elif p.name in ARCH_PARAMS and info.arch is not None:
            out[p.name] = info.arch
            notes.append(f"the constructor's {p.name!r} is the checkpoint's {info.arch_key!r}")
    return out, notes
