"""``vitviz-cli convert``: any supported checkpoint written as a vitviz .safetensors."""

from __future__ import annotations

import argparse
from pathlib import Path

from vitviz.cli.common import (
    EXIT_OK,
    CliError,
    SubParsers,
    add_arch_options,
    heads_flag_advice,
    read_config,
    resolve_checkpoint,
    with_arch_options,
)
from vitviz.cli.shared_options import add_config_option
from vitviz.core.console import say


def add_parser(subparsers: SubParsers) -> None:
    """Register ``convert`` on the CLI's sub-parsers."""
    conv = subparsers.add_parser(
        "convert", help="write any supported checkpoint as a vitviz .safetensors"
    )
    conv.add_argument("source", type=Path, help="checkpoint file or model folder")
    conv.add_argument("target", type=Path, help="output .safetensors file")
    add_config_option(conv)
    add_arch_options(conv)
    conv.set_defaults(func=cmd_convert)


def cmd_convert(args: argparse.Namespace) -> int:
    from vitviz.checkpoints import CheckpointError, convert_checkpoint

    if args.target.suffix.lower() != ".safetensors":
        raise CliError(f"the output must be a .safetensors file, got {args.target.name}")
    config = with_arch_options(read_config(args.config), args)
    try:
        source = resolve_checkpoint(args.source, args)
        loaded = convert_checkpoint(source, args.target, config=config)
    except CheckpointError as exc:
        raise CliError(str(exc) + heads_flag_advice(exc, args)) from exc
    cfg = loaded.model.config
    say(
        f"{args.source.name} ({loaded.family}, dim {cfg.dim}, depth {cfg.depth}, heads "
        f"{cfg.heads}, {cfg.num_classes} classes) -> {args.target}"
    )
    for note in loaded.notes:
        say(
            f"  {'dropped:' if note.startswith('dropped ') else 'note:'} "
            f"{note.removeprefix('dropped ')}"
        )
    return EXIT_OK
