"""Attention computed one image and one head at a time: the order of the loops over a batch.

The probing pass (one image) groups its (N, N) softmaxes into layers × heads by the modules
holding them (``vitviz.modelcode.heads``). Over a batch the loops may run image by image or
head by head; ``matrix_plan`` runs two images together under each order and keeps the one that
gives each image the attention it gets alone (which also shows the images don't mix).
"""

from __future__ import annotations

import torch
from torch import nn

from vitviz.modelcode.adapter import run_captured
from vitviz.modelcode.assembly import HeadPlan, MatrixPlan
from vitviz.modelcode.errors import ModelCodeError
from vitviz.modelcode.layout import PatchLayout


def matrix_plan(
    inner: nn.Module, layout: PatchLayout, plan: HeadPlan, tokens: int, name: str
) -> MatrixPlan:
    """The MatrixPlan of (N, N) softmaxes grouped (on one image) by ``plan``: each layer's
    heads in a row in the order computed, and the order over a batch (image by image or head
    by head) the one that gives each of two images its attention when run alone."""
    by_layer: dict[int, list[tuple[int, int]]] = {}
    for record, (layer, head, _) in plan.spots.items():
        by_layer.setdefault(layer, []).append((record, head))
    rows = [sorted(by_layer[layer]) for layer in sorted(by_layer)]
    flat = [r for row in rows for r, _ in row]
    in_order = all(h == i for row in rows for i, (_, h) in enumerate(row))
    if flat != list(range(flat[0], flat[0] + len(flat))):
        in_order = False
    heads = len(rows[0])
    if not in_order:
        raise ModelCodeError(
            f"{name} computes attention one image and one head at a time, and its heads are "
            "not computed layer by layer in their order: vitviz can't tell them apart"
        )
    device = next(inner.parameters(), torch.zeros(0)).device
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, layout.in_channels, *layout.image_size, generator=g).to(device)
    with torch.no_grad():
        alone = [_attention_of(inner, x[i : i + 1], MatrixPlan(heads, tokens)) for i in (0, 1)]
        for by_image in (True, False):
            candidate = MatrixPlan(heads, tokens, by_image)
            both = _attention_of(inner, x, candidate)
            same = len(both) == len(alone[0]) == len(alone[1]) > 0 and all(
                torch.allclose(both[layer][i], alone[i][layer][0], atol=1e-5, rtol=1e-4)
                for i in (0, 1)
                for layer in range(len(both))
            )
            if same:
                return candidate
    raise ModelCodeError(
        f"{name} computes attention one image and one head at a time, and on a batch of 2 "
        "images neither order (image by image, head by head) gives each image the attention "
        "it gets alone: compute it batched, as one softmax over (B, heads, N, N) scores"
    )


def _attention_of(inner: nn.Module, x: torch.Tensor, plan: MatrixPlan) -> list[torch.Tensor]:
    """The L × (B, H, N, N) layers a pass on ``x`` assembles by ``plan``."""
    run = run_captured(inner, x, hidden_states=False, matrices=plan)
    return [a for a in run.log.attentions if a.shape[-1] == plan.tokens]
