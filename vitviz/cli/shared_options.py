"""The options several sub-commands define alike, each written once: --config, a repeatable
--checkpoint, --out, --device (and reading it), --batch-size N and a listing's --json /
--markdown."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from vitviz.cli.common import CliError, add_hub_options


def add_config_option(p: argparse.ArgumentParser) -> None:
    """``--config FILE.json``: model settings the weights lack."""
    p.add_argument("--config", type=Path, help="JSON with model settings the weights lack")


def add_checkpoints_options(p: argparse.ArgumentParser, help: str) -> None:
    """``--checkpoint`` given once per model (``args.checkpoints``), --config and --offline."""
    p.add_argument(
        "--checkpoint",
        dest="checkpoints",
        type=Path,
        action="append",
        required=True,
        help=help,
    )
    add_config_option(p)
    add_hub_options(p)


def add_out_option(p: argparse.ArgumentParser, default: str) -> None:
    """``--out DIR``: the output folder, ``default`` when not given."""
    p.add_argument(
        "--out",
        type=Path,
        default=Path(default),
        help="output folder (default: %(default)s)",
    )


def add_device_option(p: argparse.ArgumentParser) -> None:
    """``--device``: where the model runs (default auto)."""
    p.add_argument("--device", default="auto", help="auto | cpu | cuda | cuda:N | mps")


def add_batch_size_option(p: argparse.ArgumentParser, what: str) -> None:
    """``--batch-size N`` (default None): how many ``what`` one forward pass takes."""
    p.add_argument("--batch-size", type=int, default=None, metavar="N", help=what)


def check_batch_size(args: argparse.Namespace) -> None:
    """CliError unless --batch-size is unset or at least 1."""
    if args.batch_size is not None and args.batch_size < 1:
        raise CliError(f"--batch-size must be at least 1, got {args.batch_size}")


def device_of(args: argparse.Namespace) -> Any:
    """The torch.device --device names; CliError with the reason when it is not here."""
    from vitviz.core.devices import resolve_device

    try:
        return resolve_device(args.device)
    except ValueError as exc:
        raise CliError(str(exc)) from exc


def add_listing_options(p: argparse.ArgumentParser, doc: str) -> None:
    """A listing's form, one at most: ``--json``, or ``--markdown`` (``doc``'s table)."""
    form = p.add_mutually_exclusive_group()
    form.add_argument("--json", action="store_true", help="print JSON instead of text")
    form.add_argument("--markdown", action="store_true", help=f"print the Markdown table of {doc}")
