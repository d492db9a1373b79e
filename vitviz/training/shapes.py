"""Synthetic shapes: ten classes of one object on a cluttered background, with object masks.

Every image holds one shape (circle, square, triangle, star, cross, ring, hexagon, diamond,
heart, arrow) at a random position, size, rotation and colour over a smooth random colour
field crossed by faint lines, plus pixel noise. Shapes are rasterised on a supersampled grid by
vectorised inside-tests (batched torch ops, no per-image Python work), so edges are smooth; the
mask is the pixels at least half covered by the object. Deterministic per seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

SHAPE_NAMES = (
    "circle",
    "square",
    "triangle",
    "star",
    "cross",
    "ring",
    "hexagon",
    "diamond",
    "heart",
    "arrow",
)
# User images are fitted whole (squashed to a square): objects may touch any edge of the canvas.
SHAPES_RESIZE = "squash"

_CHUNK = 256  # images rasterised at once (bounds memory; part of what a seed means)
_SUPERSAMPLE = 2  # k × k samples per pixel
_RADIUS = (0.20, 0.34)  # object radius as a share of the image side
_LINES = 3  # faint clutter lines per image
_NOISE = 0.03  # pixel noise standard deviation (intensity 0..1)
_FIELD = 0.12  # strength of the smooth background colour field

# -- inside tests in the object's own frame: (u, v) in units of the object radius ------------


def _regular_polygon(u: Tensor, v: Tensor, sides: int, apothem: float) -> Tensor:
    inside = torch.ones_like(u, dtype=torch.bool)
    for k in range(sides):
        a = 2 * math.pi * k / sides + math.pi / sides  # edge normal directions
        inside &= u * math.cos(a) + v * math.sin(a) <= apothem
    return inside


def _circle(u: Tensor, v: Tensor) -> Tensor:
    return u * u + v * v <= 0.85**2


def _square(u: Tensor, v: Tensor) -> Tensor:
    return torch.maximum(u.abs(), v.abs()) <= 0.68


def _triangle(u: Tensor, v: Tensor) -> Tensor:
    return _regular_polygon(u, v, 3, 0.5)  # circumradius 1


def _star(u: Tensor, v: Tensor, outer: float = 1.0, inner: float = 0.42) -> Tensor:
    """Five-pointed star: fold the angle into one half-spike, test against its edge."""
    sector = 2 * math.pi / 5
    phi = torch.atan2(v, u).remainder(sector) - sector / 2  # (-π/5, π/5], 0 at a spike tip
    rho = torch.sqrt(u * u + v * v)
    px, py = rho * torch.cos(phi), rho * torch.sin(phi).abs()
    bx, by = inner * math.cos(sector / 2), inner * math.sin(sector / 2)  # the inner vertex
    dx, dy = bx - outer, by  # edge from the tip (outer, 0) to the inner vertex
    return dx * py - dy * (px - outer) >= 0


def _cross(u: Tensor, v: Tensor) -> Tensor:
    au, av = u.abs(), v.abs()
    return ((au <= 0.26) & (av <= 0.92)) | ((av <= 0.26) & (au <= 0.92))


def _ring(u: Tensor, v: Tensor) -> Tensor:
    r2 = u * u + v * v
    return (r2 <= 0.92**2) & (r2 >= 0.52**2)


def _hexagon(u: Tensor, v: Tensor) -> Tensor:
    return _regular_polygon(u, v, 6, 0.92 * math.cos(math.pi / 6))


def _diamond(u: Tensor, v: Tensor) -> Tensor:
    return u.abs() / 0.55 + v.abs() / 0.95 <= 1.0


def _heart(u: Tensor, v: Tensor) -> Tensor:
    x, y = u * 1.25, v * 1.25 + 0.1
    return (x * x + y * y - 1) ** 3 - x * x * y**3 <= 0


def _arrow(u: Tensor, v: Tensor) -> Tensor:
    shaft = (u >= -0.9) & (u <= 0.15) & (v.abs() <= 0.17)
    head = (u >= 0.15) & (u <= 0.95) & (v.abs() <= 0.55 * (0.95 - u) / 0.8)
    return shaft | head


_INSIDE: tuple[Callable[[Tensor, Tensor], Tensor], ...] = (
    _circle,
    _square,
    _triangle,
    _star,
    _cross,
    _ring,
    _hexagon,
    _diamond,
    _heart,
    _arrow,
)

# -- per-image parameters -------------------------------------------------------------------


def _parameters(n: int, size: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Label, geometry and colours of every image, drawn up front (float32 arrays)."""
    labels = rng.permutation(np.arange(n) % len(SHAPE_NAMES))
    radius = rng.uniform(*_RADIUS, n) * size
    cx = rng.uniform(radius, size - radius)
    cy = rng.uniform(radius, size - radius)
    angle = rng.uniform(0, 2 * math.pi, n)
    # Object lighter than the background in every channel, or darker in every channel (edges
    # of either polarity, as in photos); hues random. Every channel differs by 0.3-0.45.
    lighter = rng.random((n, 1)) < 0.5
    base = np.where(lighter, rng.uniform(0.05, 0.5, (n, 3)), rng.uniform(0.5, 0.95, (n, 3)))
    delta = rng.uniform(0.3, 0.45, (n, 3))
    colour = np.where(lighter, base + delta, base - delta)
    lines = rng.uniform(0, size, (n, _LINES, 4))  # x0, y0, x1, y1
    line_colour = np.clip(base[:, None, :] + rng.uniform(-0.25, 0.25, (n, _LINES, 3)), 0, 1)
    out = dict(
        radius=radius,
        cx=cx,
        cy=cy,
        angle=angle,
        base=base,
        colour=colour,
        lines=lines,
        line_colour=line_colour,
    )
    params = {k: v.astype(np.float32) for k, v in out.items()}
    params["labels"] = labels.astype(np.int64)
    return params


def _coverage(p: dict[str, Tensor], size: int, k: int) -> Tensor:
    """Share of each pixel covered by the image's object: (B, S, S) float32 in [0, 1]."""
    B = p["labels"].shape[0]
    axis = (torch.arange(size * k, dtype=torch.float32) + 0.5) / k  # sample positions
    inside = torch.empty(B, size * k, size * k, dtype=torch.bool)
    for c, fn in enumerate(_INSIDE):  # one batched test per class, on its images only
        idx = (p["labels"] == c).nonzero().flatten()
        if not idx.numel():
            continue
        m = idx.numel()
        dx = axis.view(1, 1, -1) - p["cx"][idx].view(m, 1, 1)  # (m, 1, Sk)
        dy = axis.view(1, -1, 1) - p["cy"][idx].view(m, 1, 1)  # (m, Sk, 1)
        scale = 1.0 / p["radius"][idx].view(m, 1, 1)
        cos = torch.cos(p["angle"][idx]).view(m, 1, 1) * scale
        sin = torch.sin(p["angle"][idx]).view(m, 1, 1) * scale
        u = dx * cos + dy * sin  # (m, Sk, Sk): the object's frame, radius 1
        v = dy * cos - dx * sin
        inside[idx] = fn(u, v)
    return inside.view(B, size, k, size, k).sum(dim=(2, 4), dtype=torch.float32) / (k * k)


def _lines_alpha(lines: Tensor, size: int) -> Tensor:
    """Antialiased 1-px segments: (B, L, 4) endpoints -> (B, L, S, S) alpha."""
    B, L, _ = lines.shape
    axis = torch.arange(size, dtype=torch.float32) + 0.5
    x0, y0, x1, y1 = (lines[..., i].view(B, L, 1, 1) for i in range(4))
    ex, ey = x1 - x0, y1 - y0
    qx = axis.view(1, 1, 1, -1) - x0  # (B, L, 1, S): pixel relative to the start
    qy = axis.view(1, 1, -1, 1) - y0  # (B, L, S, 1)
    t = ((qx * ex + qy * ey) / (ex * ex + ey * ey + 1e-6)).clamp_(0, 1)  # (B, L, S, S)
    dist = torch.hypot(qx - t * ex, qy - t * ey)
    return dist.neg_().add_(1.0).clamp_(0, 1)


def _upsample_matrix(n: int, size: int) -> Tensor:
    """(size, n) matrix of 1-D bicubic upsampling from n to size samples (F.interpolate's)."""
    eye = torch.eye(n).view(n, 1, n, 1)
    w = F.interpolate(eye, size=(size, 1), mode="bicubic", align_corners=False)  # (n, 1, S, 1)
    return w.view(n, size).T.contiguous()


def _background(p: dict[str, Tensor], size: int, g: torch.Generator) -> Tensor:
    """Smooth colour field around the base colour, crossed by faint lines: (B, 3, S, S)."""
    B = p["base"].shape[0]
    low = torch.randn(B, 3, 4, 4, generator=g) * _FIELD
    w = _upsample_matrix(4, size)  # (S, 4): bicubic upsampling is separable, so two matmuls
    field = torch.einsum("yi,bcij,xj->bcyx", w, low, w)  # (B, 3, S, S)
    bg = field.add_(p["base"].view(B, 3, 1, 1))
    alpha = _lines_alpha(p["lines"], size)  # (B, L, S, S)
    # Lines over the field in one pass (where lines cross, their colours mix).
    total = alpha.sum(dim=1, keepdim=True)  # (B, 1, S, S)
    paint = torch.einsum("blhw,blc->bchw", alpha, p["line_colour"])  # (B, 3, S, S)
    cover = total.clamp(max=1.0)
    return bg * (1 - cover) + paint * (cover / total.clamp_min(1e-6))


def _render_chunk(p: dict[str, Tensor], size: int, g: torch.Generator) -> tuple[Tensor, Tensor]:
    B = p["labels"].shape[0]
    alpha = _coverage(p, size, _SUPERSAMPLE)  # (B, S, S)
    bg = _background(p, size, g)
    a = alpha[:, None]  # (B, 1, S, S)
    img = bg * (1 - a) + p["colour"].view(B, 3, 1, 1) * a
    img = img + torch.randn(img.shape, generator=g) * _NOISE
    pixels = (img.clamp(0, 1) * 255).round().to(torch.uint8)
    return pixels, alpha >= 0.5


def make_shapes(n: int, image_size: int = 64, seed: int = 0) -> tuple[Tensor, Tensor, Tensor]:
    """``n`` shape images, balanced over the ten classes (exactly when n is a multiple of 10).

    Returns images (n, 3, S, S) uint8, labels (n,) int64 (index into SHAPE_NAMES) and object
    masks (n, S, S) bool. The same (n, image_size, seed) always gives the same images.
    """
    if n < 0 or image_size < 4:
        raise ValueError(f"need n >= 0 and image_size >= 4 (got n={n}, image_size={image_size})")
    rng = np.random.default_rng(seed)
    params = _parameters(n, image_size, rng)
    images = torch.empty(n, 3, image_size, image_size, dtype=torch.uint8)
    masks = torch.empty(n, image_size, image_size, dtype=torch.bool)
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        chunk = {k: torch.from_numpy(v[start:stop]) for k, v in params.items()}
        g = torch.Generator().manual_seed(int(rng.integers(2**62)))
        images[start:stop], masks[start:stop] = _render_chunk(chunk, image_size, g)
    return images, torch.from_numpy(params["labels"]), masks
