"""Draw patch maps over images: upsampling, colouring, blending, head grids, atomic PNG export."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from vitviz.imaging.colormaps import apply_colormap
from vitviz.imaging.geometry import PatchGeometry

__all__ = ["DIM", "head_grid_image", "overlay_on_image", "save_png", "upsample_map"]

#: Brightness factor for the parts of the source image the model did not see.
DIM = 0.4


def _sample(map_: np.ndarray, rows: np.ndarray, cols: np.ndarray, smooth: bool) -> np.ndarray:
    """Sample a (gh, gw) map at fractional grid positions.

    rows: (h,) and cols: (w,) in patch units (0 = top/left edge of the grid). Nearest takes the
    patch that contains the point; bilinear interpolates between patch centres (edges clamped).
    Returns (h, w) float32.
    """
    gh, gw = map_.shape
    m = map_.astype(np.float32, copy=False)
    if not smooth:
        r = np.clip(np.floor(rows).astype(np.intp), 0, gh - 1)
        c = np.clip(np.floor(cols).astype(np.intp), 0, gw - 1)
        return m[r[:, None], c[None, :]]
    ry = np.clip(rows - 0.5, 0.0, gh - 1.0)
    cx = np.clip(cols - 0.5, 0.0, gw - 1.0)
    r0 = np.floor(ry).astype(np.intp)
    c0 = np.floor(cx).astype(np.intp)
    r1 = np.minimum(r0 + 1, gh - 1)
    c1 = np.minimum(c0 + 1, gw - 1)
    fy = (ry - r0).astype(np.float32)[:, None]
    fx = (cx - c0).astype(np.float32)[None, :]
    top = m[r0[:, None], c0[None, :]] * (1 - fx) + m[r0[:, None], c1[None, :]] * fx
    bottom = m[r1[:, None], c0[None, :]] * (1 - fx) + m[r1[:, None], c1[None, :]] * fx
    return (top * (1 - fy) + bottom * fy).astype(np.float32)


def upsample_map(map_: np.ndarray, size: tuple[int, int], smooth: bool = False) -> np.ndarray:
    """(gh, gw) map -> (H, W) float32.

    Nearest (default): pixel (y, x) takes the patch whose box [r·H/gh, (r+1)·H/gh) contains its
    centre, so blocks line up with the patch boxes even when H is not a multiple of gh.
    ``smooth=True``: bilinear between patch centres (like ``align_corners=False``).
    """
    m = np.asarray(map_)
    if m.ndim != 2:
        raise ValueError(f"expected a (gh, gw) map, got shape {m.shape}")
    h, w = size
    gh, gw = m.shape
    rows = (np.arange(h) + 0.5) * (gh / h)
    cols = (np.arange(w) + 0.5) * (gw / w)
    return _sample(m, rows, cols, smooth)


def _levels(map_: np.ndarray, levels: tuple[float, float] | None) -> tuple[float, float]:
    if levels is not None:
        return float(levels[0]), float(levels[1])
    finite = map_[np.isfinite(map_)]
    if finite.size == 0:
        return 0.0, 1.0
    return float(finite.min()), float(finite.max())


def _normalise(values: np.ndarray, levels: tuple[float, float]) -> np.ndarray:
    """Scale to [0, 1] by levels and clip; NaN stays NaN; an empty range gives 0."""
    lo, hi = levels
    span = hi - lo
    if span <= 0:
        return np.where(np.isnan(values), np.nan, 0.0).astype(np.float32)
    return np.clip((values - lo) / span, 0.0, 1.0).astype(np.float32)


def _as_rgb_array(image: Image.Image | np.ndarray) -> np.ndarray:
    if isinstance(image, Image.Image):
        return np.asarray(image.convert("RGB") if image.mode != "RGB" else image)
    arr = np.asarray(image)
    if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
        raise ValueError(f"expected an (H, W, 3) uint8 image, got {arr.dtype} {arr.shape}")
    return arr


def _blend(base: np.ndarray, values: np.ndarray, colormap: str, opacity: float) -> np.ndarray:
    """Alpha-blend coloured ``values`` (h, w) in [0, 1] (NaN: no colour) over base (h, w, 3)."""
    colours = apply_colormap(values, colormap).astype(np.float32)
    a = np.where(np.isnan(values), 0.0, float(opacity)).astype(np.float32)[..., None]
    out = base.astype(np.float32) * (1 - a) + colours * a
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def _source_map(
    map_: np.ndarray, geometry: PatchGeometry, size: tuple[int, int], smooth: bool
) -> np.ndarray:
    """Map values at every source pixel (h0, w0); NaN where no patch covers the pixel."""
    h0, w0 = size
    sx, sy = geometry.scale
    p = geometry.patch_size
    gh, gw = geometry.grid
    # Pixel centres in input coordinates, then in patch units.
    rows = ((np.arange(h0) + 0.5 - geometry.region[1]) / sy) / p
    cols = ((np.arange(w0) + 0.5 - geometry.region[0]) / sx) / p
    values = _sample(map_, rows, cols, smooth)
    inside = ((rows >= 0) & (rows < gh))[:, None] & ((cols >= 0) & (cols < gw))[None, :]
    return np.where(inside, values, np.nan).astype(np.float32)


def overlay_on_image(
    image: Image.Image | np.ndarray,
    map_: np.ndarray,
    *,
    geometry: PatchGeometry | None = None,
    colormap: str = "viridis",
    opacity: float = 0.6,
    levels: tuple[float, float] | None = None,
    smooth: bool = False,
) -> Image.Image:
    """Colour a (gh, gw) map and blend it over an image; returns an RGB image of the image's size.

    ``levels`` (lo, hi) sets the colour scale (default: the map's min..max; values outside are
    clipped; NaN is left uncoloured). Without ``geometry`` the map covers the whole image. With
    ``geometry`` the image must be the original source image (``geometry.source_size``): the map
    is drawn over the part the model saw at the source's full resolution, and the rest is dimmed.
    """
    base = _as_rgb_array(image)
    m = np.asarray(map_, dtype=np.float32)
    if m.ndim != 2:
        raise ValueError(f"expected a (gh, gw) map, got shape {m.shape}")
    if not 0.0 <= opacity <= 1.0:
        raise ValueError(f"opacity must be in [0, 1], got {opacity}")
    norm = _normalise(m, _levels(m, levels))
    h, w = base.shape[:2]
    if geometry is None:
        return Image.fromarray(_blend(base, upsample_map(norm, (h, w), smooth), colormap, opacity))
    if geometry.grid != m.shape:
        raise ValueError(f"map shape {m.shape} does not match the patch grid {geometry.grid}")
    if (h, w) != geometry.source_size:
        raise ValueError(
            f"the image is {h}×{w} but the geometry's source is "
            f"{geometry.source_size[0]}×{geometry.source_size[1]}; pass the original image, "
            "or geometry=None to draw over the model input"
        )
    values = _source_map(norm, geometry, (h, w), smooth)
    seen = ~np.isnan(values)
    dimmed = np.where(seen[..., None], base, np.rint(base * DIM)).astype(np.uint8)
    return Image.fromarray(_blend(dimmed, values, colormap, opacity))


def _font() -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    return ImageFont.load_default()


def _text_size(draw: ImageDraw.ImageDraw, text: str, font) -> tuple[int, int]:
    _left, _top, right, bottom = draw.textbbox((0, 0), text, font=font)
    return int(np.ceil(right)), int(np.ceil(bottom))


def head_grid_image(
    maps: np.ndarray,
    base: np.ndarray,
    *,
    colormap: str = "viridis",
    opacity: float = 0.6,
    levels: tuple[float, float] | None = None,
    tile_width: int = 96,
    gap: int = 2,
    row_labels: bool = True,
) -> Image.Image:
    """Layer × head grid of overlays: rows = layers, columns = heads, one shared colour scale.

    maps: (L, H, gh, gw); base: (h, w, 3) uint8 (e.g. the model input pixels). Tiles are
    ``tile_width`` wide with the base image's aspect ratio, ``gap`` pixels apart on a white
    background. ``levels`` default: min..max over all maps. With ``row_labels`` rows are labelled
    "L1".. on the left and columns "H1".. on top (PIL's default font).
    """
    stack = np.asarray(maps, dtype=np.float32)
    if stack.ndim != 4:
        raise ValueError(f"expected maps of shape (layers, heads, gh, gw), got {stack.shape}")
    base_arr = _as_rgb_array(base)
    n_layers, n_heads = stack.shape[:2]
    shared = _levels(stack, levels)
    bh, bw = base_arr.shape[:2]
    tw = max(1, int(tile_width))
    th = max(1, round(tw * bh / bw))
    thumb = np.asarray(Image.fromarray(base_arr).resize((tw, th), Image.Resampling.LANCZOS))

    font = _font()
    probe = ImageDraw.Draw(Image.new("RGB", (1, 1)))
    left_margin = top_margin = 0
    if row_labels:
        pad = 4
        widest = max(_text_size(probe, f"L{n_layers}", font)[0], 1)
        tallest = max(_text_size(probe, f"H{n_heads}", font)[1], 1)
        left_margin = widest + 2 * pad
        top_margin = tallest + 2 * pad

    width = left_margin + n_heads * tw + (n_heads - 1) * gap
    height = top_margin + n_layers * th + (n_layers - 1) * gap
    canvas = Image.new("RGB", (width, height), (255, 255, 255))
    for layer in range(n_layers):
        y = top_margin + layer * (th + gap)
        for head in range(n_heads):
            x = left_margin + head * (tw + gap)
            tile = overlay_on_image(
                thumb, stack[layer, head], colormap=colormap, opacity=opacity, levels=shared
            )
            canvas.paste(tile, (x, y))

    if row_labels:
        draw = ImageDraw.Draw(canvas)
        for layer in range(n_layers):
            text = f"L{layer + 1}"
            tw_text, th_text = _text_size(draw, text, font)
            y = top_margin + layer * (th + gap) + (th - th_text) // 2
            draw.text((left_margin - tw_text - 4, y), text, fill=(0, 0, 0), font=font)
        for head in range(n_heads):
            text = f"H{head + 1}"
            tw_text, th_text = _text_size(draw, text, font)
            x = left_margin + head * (tw + gap) + (tw - tw_text) // 2
            draw.text((x, (top_margin - th_text) // 2), text, fill=(0, 0, 0), font=font)
    return canvas


def save_png(image: Image.Image | np.ndarray, path: str | os.PathLike) -> Path:
    """Write ``image`` as PNG at ``path`` atomically (temporary file in the same folder, then
    ``os.replace``): a failed write never leaves a half-written file. Returns the path."""
    target = Path(path)
    picture = image if isinstance(image, Image.Image) else Image.fromarray(np.asarray(image))
    tmp = target.with_name(f".{target.name}.{uuid.uuid4().hex[:12]}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o666)
    try:
        with os.fdopen(fd, "wb") as stream:
            picture.save(stream, format="PNG")
            stream.flush()
            os.fsync(stream.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return target
