"""``vitviz-cli info``: what a checkpoint holds (family, config, classes, preprocessing)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitviz.cli.common import (
    EXIT_OK,
    SubParsers,
    add_arch_options,
    add_model_code_options,
    load_for,
)
from vitviz.cli.shared_options import add_config_option

if TYPE_CHECKING:
    from vitviz.imaging.preprocess import Preprocessing


def add_parser(subparsers: SubParsers) -> None:
    """Register ``info`` on the CLI's sub-parsers."""
    info = subparsers.add_parser("info", help="what a checkpoint holds: family, config, classes")
    info.add_argument(
        "checkpoint",
        type=Path,
        nargs="?",
        help="checkpoint file (with --model-code: the model's state dict, optional)",
    )
    add_config_option(info)
    add_arch_options(info)
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_model_code_options(info)
    info.set_defaults(func=cmd_info)


def describe(loaded: Any) -> dict[str, Any]:
    """JSON-able summary of a LoadedModel."""
    cfg = loaded.model.config
    return {
        "name": loaded.known_name,
        "architecture_name": loaded.architecture_name,
        "path": str(loaded.path) if loaded.path else None,
        "family": loaded.family,
        "config": cfg.to_dict(),
        "num_classes": cfg.num_classes,
        "class_names": loaded.class_names[:10],
        "preprocessing": loaded.preprocessing.to_dict(),
        "num_parameters": sum(p.numel() for p in loaded.model.parameters()),
        "provenance": loaded.provenance,
        "notes": loaded.notes,
        "dropped": [n.removeprefix("dropped ") for n in loaded.notes if n.startswith("dropped ")],
    }


def crop_text(prep: Preprocessing) -> str:
    """crop_pct to three decimals, with the crop it makes: "crop_pct 0.966 (the 224×224
    centre of 232×232)" (224/232 is 0.9655172413793104)."""
    text = f"crop_pct {prep.crop_pct:.3f}".rstrip("0").rstrip(".")
    if prep.resize == "crop" and prep.crop_pct < 1:
        (th, tw), (ch, cw) = prep.image_size, prep.cover_size()
        text += f" (the {th}×{tw} centre of {ch}×{cw})"
    return text


def cmd_info(args: argparse.Namespace) -> int:
    from vitviz.imaging.preprocess import Preprocessing

    loaded = load_for(args)
    d = describe(loaded)
    if args.json:
        print(json.dumps(d, indent=2, default=str))
        return EXIT_OK
    cfg = loaded.model.config  # its attributes: a kind's config may derive the patch size
    prep = d["preprocessing"]
    names = ", ".join(d["class_names"]) + (" …" if d["num_classes"] > 10 else "")
    lines = [
        f"model:          {d['name']} · {d['architecture_name']}",
        f"file:           {d['path']}",
        f"family:         {d['family']}",
        f"architecture:   {loaded.kind.architecture(loaded.model)}, patch {cfg.patch_size}, "
        f"image {cfg.image_size[0]}×{cfg.image_size[1]}, "
        f"{d['num_parameters']:,} parameters",
        f"parts:          {'; '.join(loaded.kind.parts(loaded.model))}",
        f"classes:        {d['num_classes']} ({names})",
        f"preprocessing:  {prep['resize']} to {prep['image_size'][0]}×{prep['image_size'][1]}, "
        f"{crop_text(Preprocessing.from_dict(prep))}, mean {prep['mean']}, std {prep['std']}, "
        f"{prep['interpolation']}",
    ]
    if d["provenance"]:
        from vitviz.core.tree_text import tree_lines

        lines += ["provenance:", *tree_lines(d["provenance"], depth=1)]
    lines += [
        f"dropped:        {n.removeprefix('dropped ')}"
        if n.startswith("dropped ")
        else f"note:           {n}"
        for n in d["notes"]
    ]
    print("\n".join(lines))
    return EXIT_OK
