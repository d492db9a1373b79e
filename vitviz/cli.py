"""vitviz-cli: the headless twin of the window (explain, info).

Exit status: 0 all done; 1 some inputs failed (the others were still written); 2 nothing could
be done (bad arguments, unreadable checkpoint, no device).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vitviz.console import say as _say
from vitviz.errors import VitvizError

if TYPE_CHECKING:
    from vitviz.imaging.preprocess import Preprocessing

EXIT_OK, EXIT_PARTIAL, EXIT_FAILED = 0, 1, 2


ASSUMPTION_PREFIXES = ("assumed", "recognised as")


class CliError(Exception):
    """A user mistake the CLI reports in one line and exits 2 for."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vitviz-cli", description="Look inside Vision Transformers, headless."
    )
    sub = parser.add_subparsers(dest="command", required=True)

    ex = sub.add_parser("explain", help="analyse images: .npz of every number + overlay PNGs")
    ex.add_argument(
        "images",
        nargs="+",
        type=Path,
        help="image files (PNG, JPEG, BMP, GIF, TIFF, WebP, PPM/PGM/PBM, ICO) or folders of them",
    )
    ex.add_argument(
        "--checkpoint",
        type=Path,
        help="checkpoint file (with --model-code: the model's state dict, optional; default: "
        "the model opened last in the window, else the shipped model)",
    )
    ex.add_argument("--config", type=Path, help="JSON with model settings the weights lack")
    _add_arch_options(ex)
    ex.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N | mps")
    ex.add_argument(
        "--class",
        dest="target_class",
        type=int,
        default=None,
        help="class index to explain (default: the top prediction)",
    )
    ex.add_argument("--fusion", default="mean", choices=("mean", "max", "min"))
    ex.add_argument("--discard", type=float, default=0.0, help="rollout discard ratio in [0, 1)")
    ex.add_argument("--start-layer", type=int, default=0)
    _explain_cli().add_method_options(
        ex, "default: today's maps only; each NAME adds npz key map_<name> and <stem>_<name>.png"
    )
    ex.add_argument("--colormap", default="viridis")
    ex.add_argument(
        "--bare",
        action="store_true",
        help="map PNGs without title and colour bar (the overlay alone, at the image's size)",
    )
    ex.add_argument("--out", type=Path, default=Path("vitviz-out"), help="output folder")
    ex.add_argument(
        "--full-size",
        action="store_true",
        help="decode images and write overlays at their full size (default: at most 4096 px "
        "on the long side)",
    )
    _add_model_code_options(ex)
    __import__("vitviz.batch_cli", fromlist=["add_batch_options"]).add_batch_options(ex)
    ex.set_defaults(func=cmd_explain)

    info = sub.add_parser("info", help="what a checkpoint holds: family, config, classes")
    info.add_argument(
        "checkpoint",
        type=Path,
        nargs="?",
        help="checkpoint file (with --model-code: the model's state dict, optional)",
    )
    info.add_argument("--config", type=Path, help="JSON with model settings the weights lack")
    _add_arch_options(info)
    info.add_argument("--json", action="store_true", help="print JSON instead of text")
    _add_model_code_options(info)
    info.set_defaults(func=cmd_info)

    # Commands of their own subsystems (each module adds its sub-parser).
    # -- more commands --
    conv = sub.add_parser("convert", help="write any supported checkpoint as a vitviz .safetensors")
    conv.add_argument("source", type=Path, help="checkpoint file or model folder")
    conv.add_argument("target", type=Path, help="output .safetensors file")
    conv.add_argument("--config", type=Path, help="JSON with model settings the weights lack")
    _add_arch_options(conv)
    conv.set_defaults(func=cmd_convert)
    __import__("vitviz.verify_cli", fromlist=["add_parser"]).add_parser(sub)
    __import__("vitviz.training.command", fromlist=["add_parser"]).add_parser(sub)
    _explain_cli().add_parser(sub)
    __import__("vitviz.faithfulness_cli", fromlist=["add_parser"]).add_parser(sub)
    __import__("vitviz.stats_cli", fromlist=["add_parser"]).add_parser(sub)
    return parser


def _explain_cli() -> Any:
    """vitviz.explain_cli: the method table's options and the ``methods`` command."""
    return __import__("vitviz.explain_cli", fromlist=["add_parser"])


def _add_model_code_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model-code",
        metavar="FILE.py:NAME",
        help="open a model written in a Python file (it runs with your rights): its "
        "class or factory NAME; --config may give image_size, mean, std, patch_size, "
        "num_prefix_tokens, class_names",
    )
    p.add_argument(
        "--model-args",
        metavar="JSON",
        help="keyword arguments of NAME as a JSON object (or @file.json), e.g. '{\"dim\": 64}'",
    )


def _load_for(args: argparse.Namespace) -> Any:
    """The model of --model-code, else of the checkpoint argument."""
    if args.model_code is None:
        if args.model_args is not None:
            raise CliError("--model-args needs --model-code FILE.py:NAME")
        if args.checkpoint is None:
            raise CliError("give a checkpoint (or --model-code FILE.py:NAME)")
        return _load(args.checkpoint, args.config, args)
    from vitviz.modelcode import (
        ModelCodeError,
        load_model_code,
        make_spec,
        parse_args_text,
        parse_target,
    )

    try:
        file, name = parse_target(args.model_code)
        arguments = parse_args_text(args.model_args)
        spec = make_spec(file, name, arguments, args.checkpoint, _read_config(args.config))
        return load_model_code(spec)
    except ModelCodeError as exc:
        raise CliError(str(exc)) from exc


def _add_arch_options(p: argparse.ArgumentParser) -> None:
    """--arch and --heads: what a bare state dict's weights can't say."""
    p.add_argument(
        "--arch",
        metavar="NAME",
        help="the timm architecture of the weights (a timm model name, e.g. "
        "vit_base_patch16_clip_224): its heads, norm eps, activation and pooling",
    )
    p.add_argument("--heads", type=int, metavar="N", help="attention heads per layer")


def _load(path: Path, config_path: Path | None, args: argparse.Namespace | None = None) -> Any:
    from vitviz.checkpoints import CheckpointError, load_checkpoint

    config = _with_arch_options(_read_config(config_path), args)
    try:
        return load_checkpoint(path, config=config)
    except CheckpointError as exc:
        raise CliError(str(exc)) from exc


def _with_arch_options(
    config: dict[str, Any] | None, args: argparse.Namespace | None
) -> dict[str, Any] | None:
    """--arch / --heads over the --config settings."""
    given = {
        key: value for key in ("arch", "heads") if (value := getattr(args, key, None)) is not None
    }
    if not given:
        return config
    if "heads" in given and given["heads"] < 1:
        raise CliError(f"--heads must be at least 1, got {given['heads']}")
    return {**(config or {}), **given}


def _read_config(config_path: Path | None) -> dict[str, Any] | None:
    """--config FILE: a JSON object of model settings (they win over <checkpoint>.vitviz.json)."""
    if config_path is None:
        return None
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError) as exc:
        raise CliError(f"--config {config_path}: not a readable JSON file ({exc})") from exc
    if not isinstance(config, dict):
        raise CliError(f'--config {config_path}: must hold a JSON object, e.g. {{"heads": 4}}')
    return config


def cmd_explain(args: argparse.Namespace) -> int:
    from vitviz.devices import resolve_device
    from vitviz.imaging.colormaps import COLORMAPS
    from vitviz.imaging.reduction import OVERLAY_MAX_SIDE

    if not 0.0 <= args.discard < 1.0:
        raise CliError(f"--discard must be in [0, 1), got {args.discard}")
    if args.colormap not in COLORMAPS:
        raise CliError(f"--colormap must be one of {', '.join(COLORMAPS)}")
    try:
        device = resolve_device(args.device)
    except ValueError as exc:
        raise CliError(str(exc)) from exc
    if args.checkpoint is None and args.model_code is None and args.model_args is None:
        args.checkpoint = _default_checkpoint()
    loaded = _load_for(args)
    for note in loaded.notes:  # what the weights could not say comes first
        if note.startswith(ASSUMPTION_PREFIXES):
            _say(f"vitviz-cli: {note}")
    if getattr(loaded.model, "model_kind", None) == "swin":
        from vitviz.swin_cli import explain_swin

        if args.layers is not None:
            raise CliError("--layers applies to ViT models; a Swin's analysis keeps every block")
        return explain_swin(args, loaded, device)
    loaded.model.to(device)
    cfg = loaded.model.config
    if args.target_class is not None and not 0 <= args.target_class < cfg.num_classes:
        raise CliError(
            f"--class {args.target_class} is out of range: the model has "
            f"{cfg.num_classes} classes (0..{cfg.num_classes - 1})"
        )
    if not 0 <= args.start_layer < cfg.depth:
        raise CliError(
            f"--start-layer {args.start_layer} is out of range: the model has "
            f"{cfg.depth} layers (0..{cfg.depth - 1})"
        )
    batch_cli = __import__("vitviz.batch_cli", fromlist=["explain_many"])
    args.kept_layers = batch_cli.layers_option(args.layers, int(cfg.depth))
    settings = _explain_cli().map_settings(args, loaded)
    try:
        args.out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CliError(
            f"--out {args.out}: cannot create the output folder ({exc.strerror or exc})"
        ) from exc
    max_side = None if args.full_size else OVERLAY_MAX_SIDE
    return batch_cli.explain_many(args, loaded, settings, max_side)  # batches, a writer thread


def _default_checkpoint() -> Path:
    """explain without --checkpoint: the model used last in the window, else the shipped one;
    one line on stderr says which and how to choose another."""
    from vitviz.last_model import choose_model

    choice = choose_model()
    if choice is None:
        raise CliError("give a checkpoint (or --model-code FILE.py:NAME)")
    _say(
        f"vitviz-cli: no --checkpoint: using {choice.path} ({choice.why}); "
        "choose another with --checkpoint FILE"
    )
    return choice.path


def describe(loaded: Any) -> dict[str, Any]:
    """JSON-able summary of a LoadedModel."""
    cfg = loaded.model.config
    return {
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


def cmd_convert(args: argparse.Namespace) -> int:
    from vitviz.checkpoints import CheckpointError, convert_checkpoint

    if args.target.suffix.lower() != ".safetensors":
        raise CliError(f"the output must be a .safetensors file, got {args.target.name}")
    config = _with_arch_options(_read_config(args.config), args)
    try:
        loaded = convert_checkpoint(args.source, args.target, config=config)
    except CheckpointError as exc:
        raise CliError(str(exc)) from exc
    cfg = loaded.model.config
    _say(
        f"{args.source.name} ({loaded.family}, dim {cfg.dim}, depth {cfg.depth}, heads "
        f"{cfg.heads}, {cfg.num_classes} classes) -> {args.target}"
    )
    for note in loaded.notes:
        _say(
            f"  {'dropped:' if note.startswith('dropped ') else 'note:'} "
            f"{note.removeprefix('dropped ')}"
        )
    return EXIT_OK


def _architecture(cfg: dict) -> str:
    """A ViT's width, depth and heads, or a Swin's stages (widths, depths, heads, windows)."""
    if "depths" in cfg:
        v = cfg.get("version", 1)
        return (
            f"Swin{' V2' if v == 2 else ''}, widths {'-'.join(map(str, cfg['dims']))}, "
            f"depths {'-'.join(map(str, cfg['depths']))}, "
            f"heads {'-'.join(map(str, cfg['heads']))}, "
            f"windows {'-'.join(map(str, cfg['window_sizes']))}"
        )
    return f"dim {cfg['dim']}, depth {cfg['depth']}, heads {cfg['heads']}"


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

    d = describe(_load_for(args))
    if args.json:
        print(json.dumps(d, indent=2, default=str))
        return EXIT_OK
    cfg = d["config"]
    prep = d["preprocessing"]
    names = ", ".join(d["class_names"]) + (" …" if d["num_classes"] > 10 else "")
    lines = [
        f"file:           {d['path']}",
        f"family:         {d['family']}",
        f"architecture:   {_architecture(cfg)}, patch {cfg['patch_size']}, "
        f"image {cfg['image_size'][0]}×{cfg['image_size'][1]}, "
        f"{d['num_parameters']:,} parameters",
        f"classes:        {d['num_classes']} ({names})",
        f"preprocessing:  {prep['resize']} to {prep['image_size'][0]}×{prep['image_size'][1]}, "
        f"{crop_text(Preprocessing.from_dict(prep))}, mean {prep['mean']}, std {prep['std']}, "
        f"{prep['interpolation']}",
    ]
    if d["provenance"]:
        from vitviz.tree_text import tree_lines

        lines += ["provenance:", *tree_lines(d["provenance"], depth=1)]
    lines += [
        f"dropped:        {n.removeprefix('dropped ')}"
        if n.startswith("dropped ")
        else f"note:           {n}"
        for n in d["notes"]
    ]
    print("\n".join(lines))
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (CliError, VitvizError) as exc:  # a user's input that can't be used: one line
        _say(f"vitviz-cli: {exc}")
        return EXIT_FAILED
    except KeyboardInterrupt:
        _say("vitviz-cli: interrupted")
        return 130
    except BrokenPipeError:  # e.g. `vitviz-cli info … | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_FAILED


if __name__ == "__main__":  # python -m vitviz.cli: run the imported module, whose CliError the
    # subcommands raise (this file run as __main__ is a second module with a second CliError)
    from vitviz.cli import main as cli_main

    sys.exit(cli_main())
