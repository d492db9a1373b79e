"""What the tokens carry (DESIGN §5): token norms and high-norm tokens, cosine similarity to a
query token, the PCA of the final tokens as colours, the logit lens and the head similarity of
two models. Pure torch over the intermediates accessor's tensors (``kindapi.Intermediates``, or
the block outputs an analysis kept, ``kindapi.BlockOutputs``) and a kind's ``Readout``: written
once for every kind."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from vitviz.kindapi.intermediates import BlockOutputs, Intermediates, Readout

Blocks = Intermediates | BlockOutputs  # what the views read: blocks, block_prefix, logits

HIGH_NORM_MADS = 4.0  # a token is high-norm above median + 4 · MAD of the patches' norms


def block_index(layer: int, count: int) -> int:
    """A block parameter (−1: the last) as an index into ``count`` blocks; ValueError outside."""
    index = count + layer if layer < 0 else layer
    if not 0 <= index < count:
        raise ValueError(f"layer {layer} is out of range: this model has blocks 0..{count - 1}")
    return index


def block_tokens(inter: Blocks, layer: int, item: int = 0) -> tuple[Tensor, Tensor]:
    """Block ``layer``'s output of batch item ``item``: prefix (P, C) and patches (h·w, C)
    row-major."""
    i = block_index(layer, len(inter.blocks))
    grid = inter.blocks[i][item]  # (C, h, w)
    return inter.block_prefix[i][item], grid.flatten(1).transpose(0, 1)


def token_norms(inter: Blocks, layer: int, item: int = 0) -> tuple[Tensor, Tensor]:
    """‖t_l‖₂ of block ``layer``: the patches' on the block's grid (h, w) and the prefix
    tokens' (P,)."""
    i = block_index(layer, len(inter.blocks))
    prefix, patches = block_tokens(inter, i, item)
    h, w = inter.blocks[i].shape[-2:]
    return patches.norm(dim=-1).reshape(h, w), prefix.norm(dim=-1)


def high_norm_mask(norms: Tensor, mads: float = HIGH_NORM_MADS) -> Tensor:
    """Bool mask of the high-norm tokens: norm > median + ``mads`` · MAD over ``norms`` (any
    shape; the median interpolates between the two middle values of an even count)."""
    flat = norms.flatten().double()
    median = flat.quantile(0.5)
    mad = (flat - median).abs().quantile(0.5)
    return norms.double() > median + mads * mad


def query_token(
    inter: Blocks,
    layer: int,
    cell: tuple[int, int] | None,
    grid: tuple[int, int],
    item: int = 0,
) -> Tensor:
    """The query token (C,) of block ``layer``: the patch under ``cell`` of the clickable
    ``grid`` (taken to the block's own grid by its centre), or without a cell the CLS (the
    first prefix token), the mean patch token where the block has no prefix."""
    prefix, patches = block_tokens(inter, layer, item)
    if cell is None:
        return prefix[0] if prefix.shape[0] else patches.mean(dim=0)
    i = block_index(layer, len(inter.blocks))
    h, w = inter.blocks[i].shape[-2:]
    r, c = cell
    if not (0 <= r < grid[0] and 0 <= c < grid[1]):
        raise ValueError(f"query cell {cell} is outside the {grid[0]}×{grid[1]} grid")
    return patches[int(cell_tokens((int(h), int(w)), grid)[r, c])]


def cell_tokens(block_grid: tuple[int, int], grid: tuple[int, int]) -> Tensor:
    """(gh, gw) long: the row-major token of a block's (h, w) grid under the centre of each cell
    of the clickable ``grid`` (gh, gw), the token ``query_token`` reads for that cell."""
    h, w = block_grid
    rows = ((torch.arange(grid[0], dtype=torch.float64) + 0.5) * h / grid[0]).long()
    cols = ((torch.arange(grid[1], dtype=torch.float64) + 0.5) * w / grid[1]).long()
    return rows[:, None] * w + cols[None, :]


def similarity_table(inter: Blocks, layer: int, item: int = 0) -> Tensor:
    """(T, h, w): row t the cosine similarity of block ``layer``'s patch token t with every
    patch token (``similarity`` of that token as the query, up to float32 rounding)."""
    i = block_index(layer, len(inter.blocks))
    _, patches = block_tokens(inter, i, item)
    h, w = inter.blocks[i].shape[-2:]
    unit = patches / patches.norm(dim=-1, keepdim=True).clamp_min(1e-12)
    return (unit @ unit.T).reshape(-1, h, w)


def similarity(inter: Blocks, layer: int, query: Tensor, item: int = 0) -> Tensor:
    """Cosine similarity (h, w) of ``query`` (C,) with every patch token of block ``layer``."""
    i = block_index(layer, len(inter.blocks))
    _, patches = block_tokens(inter, i, item)
    h, w = inter.blocks[i].shape[-2:]
    return F.cosine_similarity(patches, query[None], dim=-1, eps=1e-12).reshape(h, w)


def _components(x: Tensor, count: int = 3) -> Tensor:
    """The first ``count`` principal directions (count, C) of the rows of centred ``x``,
    each signed so that its entry of largest magnitude is positive; zero rows where x has
    fewer components."""
    _, _, vh = torch.linalg.svd(x, full_matrices=False)
    vh = vh[:count]
    big = vh.abs().argmax(dim=1)
    signs = torch.sign(vh.gather(1, big[:, None]))
    signs[signs == 0] = 1
    vh = vh * signs
    if vh.shape[0] < count:
        vh = torch.cat([vh, vh.new_zeros(count - vh.shape[0], vh.shape[1])])
    return vh


def _minmax(values: Tensor) -> Tensor:
    """Each column scaled to [0, 1] over the rows (a constant column: 0)."""
    lo, hi = values.min(dim=0).values, values.max(dim=0).values
    return (values - lo) / (hi - lo).clamp_min(torch.finfo(values.dtype).tiny)


def pca_rgb(
    features: Sequence[Tensor], grids: Sequence[tuple[int, int]], foreground: float = 0.0
) -> list[Tensor]:
    """The first three principal components of the patch tokens ``features`` (N_i, C) of one
    or more images, fitted jointly, as colours: (h, w, 3) float32 in [0, 1] per image.

    Centred over every token given; each component's sign makes the largest-magnitude entry of
    its direction positive; each channel min-max scaled over every token shown. ``foreground``
    > 0: the first component (min-max scaled) above it marks the foreground; the PCA is fitted
    again over the foreground tokens alone and the background is black (0)."""
    x = torch.cat([f.double() for f in features])
    x = x - x.mean(dim=0)
    pcs = x @ _components(x).T  # (M, 3)
    keep = torch.ones(x.shape[0], dtype=torch.bool)
    if foreground > 0:
        keep = _minmax(pcs[:, :1])[:, 0] > foreground
        if keep.any():
            fg = x[keep] - x[keep].mean(dim=0)
            pcs = torch.zeros_like(pcs)
            pcs[keep] = fg @ _components(fg).T
    colours = torch.zeros_like(pcs)
    if keep.any():
        colours[keep] = _minmax(pcs[keep])
    out, start = [], 0
    for h, w in grids:
        out.append(colours[start : start + h * w].reshape(h, w, 3).float())
        start += h * w
    return out


def logit_lens(
    inter: Blocks,
    readout: Readout,
    probabilities: Callable[[Tensor], Tensor],
    item: int = 0,
) -> Tensor:
    """(L, classes) float32: ``probabilities(readout.logits(t_l))`` for every block l (the final
    norm and head applied to the block's tokens: the CLS, or the mean token without one);
    NaN rows for a block whose width is not the head's."""
    rows = []
    classes = inter.logits.shape[-1]
    for i in range(len(inter.blocks)):
        prefix, patches = block_tokens(inter, i, item)
        if patches.shape[-1] != readout.width:
            rows.append(inter.logits.new_full((classes,), float("nan")))
            continue
        logits = readout.logits(prefix[None], patches[None])
        rows.append(probabilities(logits)[0])
    return torch.stack(rows).float() if rows else inter.logits.new_zeros(0, classes)


def token_norm_table(inter: Blocks, item: int = 0) -> Tensor:
    """(L, N) float32: every block's token norms, prefix first then its grid row-major, NaN
    after a block's last token (a stage of a smaller grid)."""
    rows = []
    for i in range(len(inter.blocks)):
        grid, prefix = token_norms(inter, i, item)
        rows.append(torch.cat([prefix, grid.flatten()]).float())
    n = max((r.numel() for r in rows), default=0)
    out = torch.full((len(rows), n), float("nan"))
    for i, r in enumerate(rows):
        out[i, : r.numel()] = r.cpu()
    return out


def _cosines(a: Tensor, b: Tensor) -> Tensor:
    """Cosine over the last axis of two stacks of maps, NaN where either is all NaN or zero."""
    a, b = a.double(), b.double()
    dot = (a * b).sum(-1)
    norm = a.norm(dim=-1) * b.norm(dim=-1)
    return torch.where(norm > 0, dot / norm, torch.full_like(dot, float("nan")))


def head_similarity(maps_a: Tensor, maps_b: Tensor) -> Tensor:
    """Cosine similarity of two models' query attention over the patches.

    ``maps_a`` (L, H, h, w), ``maps_b`` (L', H', h', w') (NaN heads a layer lacks). Same
    shapes: (L, H), per layer and head. Otherwise (L, 1): per layer of A after averaging the
    heads, against B's layer at the same relative depth (round(l·(L'−1)/(L−1))), B's map
    resampled bilinearly to A's grid where the grids differ."""
    if maps_a.shape == maps_b.shape:
        a = torch.nan_to_num(maps_a.flatten(2))
        b = torch.nan_to_num(maps_b.flatten(2))
        out = _cosines(a, b)
        missing = maps_a.isnan().flatten(2).all(-1) | maps_b.isnan().flatten(2).all(-1)
        return out.masked_fill(missing, float("nan")).float()
    La, Lb = maps_a.shape[0], maps_b.shape[0]
    mean_a = maps_a.double().nanmean(dim=1)  # (L, h, w)
    mean_b = maps_b.double().nanmean(dim=1)
    if mean_b.shape[-2:] != mean_a.shape[-2:]:
        mean_b = F.interpolate(mean_b[None], size=mean_a.shape[-2:], mode="bilinear",
                               align_corners=False)[0]  # fmt: skip
    rows = [round(la * (Lb - 1) / (La - 1)) if La > 1 else Lb - 1 for la in range(La)]
    return _cosines(mean_a.flatten(1), mean_b[rows].flatten(1))[:, None].float()
