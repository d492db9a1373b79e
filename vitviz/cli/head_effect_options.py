"""What the head-effect commands (``ablate``, ``patch``) share: their options around the
command's own, and opening the model they measure."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vitviz.cli.common import add_arch_options, add_prompt_options, load_for
from vitviz.cli.shared_options import (
    add_batch_size_option,
    add_config_option,
    add_device_option,
    add_out_option,
    check_batch_size,
    device_of,
)


def add_model_options(p: argparse.ArgumentParser) -> None:
    """--checkpoint (one, required), --config and --arch / --heads / --offline."""
    p.add_argument("--checkpoint", type=Path, required=True, help="checkpoint file")
    add_config_option(p)
    add_arch_options(p)


def add_run_options(p: argparse.ArgumentParser, out: str) -> None:
    """--class, --out (default ``out``), --device, --batch-size (heads per pass) and the
    prompt options."""
    p.add_argument(
        "--class", dest="target_class", type=int, default=None, help="class (default: the top)"
    )
    add_out_option(p, out)
    add_device_option(p)
    add_batch_size_option(p, "heads per forward pass")
    add_prompt_options(p)


def open_model(args: argparse.Namespace) -> Any:
    """The checkpoint on --device in eval mode."""
    check_batch_size(args)
    device = device_of(args)
    loaded = load_for(args)
    loaded.model.to(device).eval()
    return loaded
