"""The method table's feature maps (DESIGN §5: ``token-norm``, ``similarity``, ``pca``) and the
per-analysis numbers every explain writes (``logit_lens``, ``token_norms``), on every kind
through its readout and the block outputs its analysis kept (``analysis_blocks``), or where it
kept none its intermediates accessor's pass: one extra forward pass per analysis, kept while
the analysis lives."""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from vitviz.explain.features import (
    block_index,
    block_tokens,
    cell_tokens,
    high_norm_mask,
    logit_lens,
    pca_rgb,
    query_token,
    similarity,
    similarity_table,
    token_norm_table,
    token_norms,
)
from vitviz.kindapi import BlockOutputs, Intermediates, Readout, get_kind

_PASSES: dict[int, tuple[weakref.ref, Intermediates | BlockOutputs]] = {}
_KEPT = 4  # analyses whose pass is kept (the window's current one and a compare's two)


def _model(analysis: Any) -> Any:
    loaded = getattr(analysis, "loaded", None)
    if loaded is None:
        raise ValueError("the feature maps need the model itself, and this analysis has none")
    return loaded.model


def model_readout(analysis: Any) -> Readout:
    """The kind's ``Readout`` of ``analysis``'s model, taking tokens on any device to the
    model's and handing the result back on theirs (the window may move the model after an
    analysis)."""
    model = _model(analysis)
    readout = get_kind(analysis.kind).readout(model)
    device = next(model.parameters()).device

    def norm(x: Tensor) -> Tensor:
        return readout.norm(x.to(device)).to(x.device)

    def logits(prefix: Tensor, patches: Tensor) -> Tensor:
        return readout.logits(prefix.to(device), patches.to(device)).to(patches.device)

    return Readout(norm, logits, readout.width)


def feature_pass(analysis: Any) -> Intermediates | BlockOutputs:
    """The block outputs of ``analysis``'s input (batch of one): those its own forward pass
    kept (the kind's ``analysis_blocks``), else the intermediates accessor's pass through its
    model without gradients, computed once per analysis object."""
    _model(analysis)
    kept = get_kind(analysis.kind).analysis_blocks(analysis)
    if kept is not None:
        return kept
    key = id(analysis)
    hit = _PASSES.get(key)
    if hit is not None and hit[0]() is analysis:
        return hit[1]
    model = _model(analysis)
    device = next(model.parameters()).device
    with torch.no_grad():
        inter = get_kind(analysis.kind).intermediates(model, analysis.input[None].to(device))
    inter = dataclasses.replace(  # a kind's accessor may keep its graph (a Swin's): not here
        inter,
        logits=inter.logits.detach(),
        blocks=tuple(b.detach() for b in inter.blocks),
        block_prefix=tuple(p.detach() for p in inter.block_prefix),
        heads=tuple(h.detach() for h in inter.heads),
    )
    for k in [k for k, (ref, _) in _PASSES.items() if ref() is None]:
        del _PASSES[k]
    while len(_PASSES) >= _KEPT:
        del _PASSES[next(iter(_PASSES))]
    with contextlib.suppress(TypeError):  # an analysis without weak references: not kept
        _PASSES[key] = (weakref.ref(analysis), inter)
    return inter


def _grid(analysis: Any) -> tuple[int, int]:
    grid = get_kind(analysis.kind).token_geometry(analysis).grid
    return int(grid[0]), int(grid[1])


def token_norm_method(
    analysis: Any, query: object, target_class: int | None, params: Mapping[str, Any]
) -> Tensor:
    """The table's ``token-norm``: ‖t_l‖₂ over block ``layer``'s grid."""
    grid, _ = token_norms(feature_pass(analysis), int(params["layer"]))
    return grid.float().cpu()


def similarity_method(
    analysis: Any,
    query: tuple[int, int] | None,
    target_class: int | None,
    params: Mapping[str, Any],
) -> Tensor:
    """The table's ``similarity``: cosine of the query token (CLS, mean, or the clicked
    patch) with every patch token of block ``layer``."""
    inter, layer = feature_pass(analysis), int(params["layer"])
    q = query_token(inter, layer, query, _grid(analysis))
    return similarity(inter, layer, q).float().cpu()


MAX_TABLE = 2**21  # entries (8 MiB of float32) of a similarity table handed to the window


def similarity_rows(analysis: Any, layer: int) -> tuple[np.ndarray, np.ndarray] | None:
    """Every clicked patch's ``similarity`` of block ``layer`` at once, for the window to look
    up: (T, h, w) float32 rows (``similarity_table``) and (gh, gw) int32, the row of each cell
    of the clickable grid; None where the table would exceed ``MAX_TABLE`` entries."""
    inter = feature_pass(analysis)
    i = block_index(layer, len(inter.blocks))
    h, w = (int(n) for n in inter.blocks[i].shape[-2:])
    if (h * w) ** 2 > MAX_TABLE:
        return None
    with torch.no_grad():
        table = similarity_table(inter, i).float().cpu().numpy()
    cells = cell_tokens((h, w), _grid(analysis)).numpy().astype(np.int32)
    return table, cells


def final_patches(analysis: Any) -> tuple[Tensor, tuple[int, int]]:
    """f = final_norm(t_L)'s patch tokens (N, C) of ``analysis`` and the last block's grid."""
    inter = feature_pass(analysis)
    readout = model_readout(analysis)
    _, patches = block_tokens(inter, -1)
    with torch.no_grad():
        normed = readout.norm(patches)
    h, w = inter.blocks[-1].shape[-2:]
    return normed, (int(h), int(w))


def pca_method(
    analysis: Any, query: object, target_class: int | None, params: Mapping[str, Any]
) -> Tensor:
    """The table's ``pca``: (h, w, 3) colours of the first three principal components."""
    features, grid = final_patches(analysis)
    return pca_rgb([features], [grid], float(params["foreground"]))[0].cpu()


def joint_pca(analyses: Sequence[Any], foreground: float = 0.0) -> list[np.ndarray]:
    """The PCA colours of several analyses fitted jointly (DINOv2's figure): (h, w, 3) each."""
    pairs = [final_patches(a) for a in analyses]
    maps = pca_rgb([f for f, _ in pairs], [g for _, g in pairs], foreground)
    return [m.cpu().numpy() for m in maps]


def high_norm_tokens(analysis: Any, layer: int = -1) -> dict[str, np.ndarray]:
    """Block ``layer``'s token norms: ``norms`` (h, w), ``high`` (h, w) bool (median + 4·MAD),
    ``prefix`` (P,) the prefix and register tokens' norms."""
    grid, prefix = token_norms(feature_pass(analysis), layer)
    return {
        "norms": grid.float().cpu().numpy(),
        "high": high_norm_mask(grid).cpu().numpy(),
        "prefix": prefix.float().cpu().numpy(),
    }


def analysis_logit_lens(analysis: Any) -> Tensor:
    """(L, classes): the logit lens of ``analysis`` (the kind's probabilities)."""
    kind, model = get_kind(analysis.kind), _model(analysis)
    readout, device = model_readout(analysis), next(model.parameters()).device
    with torch.no_grad():
        return logit_lens(
            feature_pass(analysis),
            readout,
            lambda z: kind.probabilities(model, z.to(device)).to(z.device),
        )


def feature_arrays(analysis: Any) -> dict[str, np.ndarray]:
    """The npz's ``logit_lens`` (L, classes) and ``token_norms`` (L, N) of ``analysis``; {}
    for a model vitviz can't take apart (a network from the user's code)."""
    try:
        inter = feature_pass(analysis)
    except ValueError:
        return {}
    out = {"token_norms": token_norm_table(inter).numpy().astype(np.float32)}
    with contextlib.suppress(ValueError):  # a model without a readout: no logit lens
        out["logit_lens"] = analysis_logit_lens(analysis).cpu().numpy().astype(np.float32)
    return dict(sorted(out.items()))
