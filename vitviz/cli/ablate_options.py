"""``--ablate L.H`` / ``L.*`` / ``L.attn`` / ``L.mlp`` and ``--ablation zero|mean`` of ``vitviz-cli
explain``: heads (or a block's attention or MLP branch) knocked out, every number and map then the
intervened model's (DESIGN §5, "Interventions"). Layers and heads are counted from 0."""

from __future__ import annotations

import argparse
import functools
import re
from collections.abc import Callable, Iterator
from typing import Any

from vitviz.cli.common import CliError
from vitviz.core.console import say

_SPEC = re.compile(r"^(\d+)\.(\d+|\*|attn|mlp)$")


def add_ablate_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--ablate",
        action="append",
        metavar="L.H",
        help="knock head H of layer L out (0-based, repeatable; L.* every head of layer L, "
        "L.attn the whole attention branch of block L, L.mlp its MLP branch): the numbers "
        "and maps are the intervened model's",
    )
    p.add_argument(
        "--ablation",
        default="zero",
        choices=("zero", "mean"),
        help="a knocked-out head's output becomes 0, or its mean over the image's tokens",
    )


def parse_ablate(
    specs: list[str] | None,
) -> tuple[list[tuple[int, int | None]], list[int], list[int]]:
    """(heads, branches, mlps) of the --ablate values: (layer, head) with head None for
    ``L.*``, the layers of ``L.attn`` and the blocks of ``L.mlp``; CliError naming a value that
    is none of these."""
    heads: list[tuple[int, int | None]] = []
    branches: list[int] = []
    mlps: list[int] = []
    for spec in specs or []:
        match = _SPEC.match(spec.strip())
        if match is None:
            raise CliError(f"--ablate {spec!r}: use L.H, L.*, L.attn or L.mlp (0-based), e.g. 3.7")
        layer, head = int(match[1]), match[2]
        if head == "attn":
            branches.append(layer)
        elif head == "mlp":
            mlps.append(layer)
        else:
            heads.append((layer, None if head == "*" else int(head)))
    return heads, branches, mlps


def ablated_analyses(args: argparse.Namespace, loaded: Any) -> Callable[..., Iterator[Any]] | None:
    """What ``explain_many`` analyses images with under --ablate (None: no --ablate); the
    heads checked against the model on the first image, one line saying what is knocked out."""
    heads, branches, mlps = parse_ablate(getattr(args, "ablate", None))
    if not heads and not branches and not mlps:
        return None
    from vitviz.core.errors import VitvizError
    from vitviz.pipeline.ablated_batch import iter_ablated, layout_for

    images = args.expanded_images
    try:
        layout = layout_for(loaded, images)
        for layer, head in heads:
            if head is None:
                layout.check_layer(layer, f"--ablate {layer}.*")
        chosen = [
            (layer, h) for layer, head in heads
            for h in (range(layout.heads[layer]) if head is None else [head])
        ]  # fmt: skip
        layout.check_heads(chosen)
        for block in branches:
            layout.attention_layer(block, f"--ablate {block}.attn")
        for block in mlps:
            layout.check_mlp(block)
    except VitvizError as exc:
        raise CliError(str(exc)) from exc
    words = [f"{layer}.{h}" for layer, h in sorted(set(chosen))]
    words += [f"{layer}.attn" for layer in sorted(set(branches))]
    words += [f"{block}.mlp" for block in sorted(set(mlps))]
    say(f"vitviz-cli: knocked out ({args.ablation}): {', '.join(words)}; every number and map "
        "is the intervened model's")  # fmt: skip
    return functools.partial(
        _run,
        heads=chosen,
        ablation=args.ablation,
        branches=branches,
        mlps=mlps,
        iterate=iter_ablated,
    )


def _run(
    loaded: Any, images: Any, *, heads, ablation, branches, mlps, iterate, **options
) -> Iterator:
    return iterate(loaded, images, heads, ablation, branches, mlps, **options)
