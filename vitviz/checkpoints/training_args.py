"""What a training checkpoint says of its model besides the weights, in timm's words.

timm's ``train.py`` saves ``{"epoch", "arch", "state_dict", "args", ...}`` where ``args`` is the
run's ``argparse.Namespace`` (``model``, ``num_classes``, ``img_size``, ``input_size``, ``gp``,
``in_chans``, ``model_kwargs``, ``mean``, ``std``, ...) and writes ``args.yaml`` beside it. Other
trainers keep a ``config``, ``model_args`` or Lightning's ``hparams`` / ``hyper_parameters``.
``training_config`` turns the first of them that names a timm model into the config a timm
folder's config.json would be (``architecture``, ``model_args``, ``pretrained_cfg``), so the
file opens as that folder would: the name and every setting the run gave come from the file.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# Where a trainer keeps its run's settings, in the order they are read.
SETTINGS_KEYS = ("args", "config", "hparams", "hyper_parameters", "cfg")
NAME_KEYS = ("model", "model_name", "architecture", "arch")
KWARGS_KEYS = ("model_kwargs", "model_args")
# timm train.py's argument -> timm.create_model's keyword.
ARG_NAMES = {"num_classes": "num_classes", "in_chans": "in_chans", "gp": "global_pool"}
DIRECT = ("num_classes", "in_chans", "global_pool")
PREP_KEYS = ("mean", "std", "interpolation", "crop_pct", "crop_mode")
YAML_NAME = "args.yaml"


def plain(value: Any) -> Any:
    """``value`` with every argparse.Namespace (timm's ``args``) made a dict."""
    if isinstance(value, argparse.Namespace):
        return {k: plain(v) for k, v in vars(value).items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value


def training_config(
    extra: Mapping[str, Any], path: Path | None, is_name: Any
) -> tuple[dict[str, Any], str] | None:
    """(a timm-folder-like config, where it was read) from a training checkpoint's entries
    (``extra``: its non-tensor entries) or, failing that, ``args.yaml`` beside ``path``; None
    when neither names a timm model. ``is_name(str) -> bool``: whether timm (or vitviz's table
    of it) knows a model name; a name it doesn't know (timm's fallback ``arch``, the class name
    ``visiontransformer``) names nothing."""
    for key in SETTINGS_KEYS:
        found = _from_settings(extra.get(key), is_name)
        if found is not None:
            return found, f"the {key!r} entry of the training checkpoint"
    arch = extra.get("arch")
    if isinstance(arch, str) and is_name(arch):
        args = {k: extra[k] for k in KWARGS_KEYS if isinstance(extra.get(k), dict)}
        found = _from_settings({"model": arch, **args}, is_name)
        if found is not None:
            return found, "the 'arch' entry of the training checkpoint"
    if path is not None and not path.is_dir():
        beside = _read_yaml(path.parent / YAML_NAME)
        found = _from_settings(beside, is_name)
        if found is not None:
            return found, f"{YAML_NAME} beside it"
    return None


def _from_settings(settings: Any, is_name: Any) -> dict[str, Any] | None:
    if not isinstance(settings, Mapping):
        return None
    whole = isinstance(settings.get("architecture"), str) and isinstance(
        settings.get("model_args", {}), dict
    )  # a timm config.json kept whole
    if whole and is_name(settings["architecture"]):
        return {
            "architecture": settings["architecture"],
            "model_args": dict(settings.get("model_args") or {}),
            "pretrained_cfg": dict(settings.get("pretrained_cfg") or {}),
        }
    name = next(
        (settings[k] for k in NAME_KEYS if isinstance(settings.get(k), str) and settings[k]),
        None,
    )
    if name is None or not is_name(name):
        return None
    args: dict[str, Any] = {}
    for theirs, ours in ARG_NAMES.items():
        if settings.get(theirs) is not None:
            args[ours] = settings[theirs]
    for key in DIRECT:
        if settings.get(key) is not None:
            args.setdefault(key, settings[key])
    for key in KWARGS_KEYS:
        if isinstance(settings.get(key), Mapping):
            args.update(settings[key])
    # train.py builds the model without its img_size (that comes from model_kwargs): the run's
    # input_size / img_size are the images it was fed, which is the preprocessing
    pretrained = {k: settings[k] for k in PREP_KEYS if settings.get(k) is not None}
    size = settings.get("input_size")
    side = settings.get("img_size")
    if isinstance(size, (list, tuple)) and len(size) == 3:
        args.setdefault("in_chans", size[0])
        pretrained["input_size"] = list(size)
    elif isinstance(side, int) and not isinstance(side, bool):
        pretrained["input_size"] = [args.get("in_chans", 3), side, side]
    return {"architecture": name, "model_args": args, "pretrained_cfg": pretrained}


def _read_yaml(path: Path) -> dict[str, Any] | None:
    """``args.yaml`` (timm writes it with yaml.safe_dump) read with yaml.safe_load: data only,
    no object tags. None when it is missing, unreadable or PyYAML is not installed."""
    if not path.is_file():
        return None
    try:
        import yaml
    except ImportError:
        return None
    try:
        value = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return None
    return value if isinstance(value, dict) else None
