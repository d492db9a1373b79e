"""Draw the vitviz icon: a 4 × 4 patch grid coloured like an attention map (SVG + PNG sizes).

python packaging/make_icons.py   # writes resources/icons/vitviz.svg and vitviz-<N>.png
"""

from __future__ import annotations

from pathlib import Path

from PIL import Image, ImageDraw

from vitviz.imaging.colormaps import lookup_table

ICONS = Path(__file__).resolve().parent.parent / "resources" / "icons"
SIZES = (16, 24, 32, 48, 64, 128, 256, 512)
# Attention-like values over a 4 × 4 grid: a bright object in the upper middle.
VALUES = (
    (0.10, 0.35, 0.45, 0.15),
    (0.30, 0.90, 1.00, 0.40),
    (0.20, 0.70, 0.80, 0.30),
    (0.05, 0.20, 0.25, 0.10),
)
VIEW = 64  # SVG view box
MARGIN, GAP, RADIUS = 6, 2, 10


def cells() -> list[tuple[float, float, float, tuple[int, int, int]]]:
    """(x, y, side, rgb) of each patch in the 64-unit view box."""
    lut = lookup_table("viridis", 256)
    side = (VIEW - 2 * MARGIN - 3 * GAP) / 4
    out = []
    for r, row in enumerate(VALUES):
        for c, v in enumerate(row):
            rgb = tuple(int(x) for x in lut[round(v * 255)])
            out.append((MARGIN + c * (side + GAP), MARGIN + r * (side + GAP), side, rgb))
    return out


def svg() -> str:
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {VIEW} {VIEW}" '
        f'width="{VIEW}" height="{VIEW}">',
        f'<rect width="{VIEW}" height="{VIEW}" rx="{RADIUS}" fill="#1e1e2a"/>',
    ]
    for x, y, s, (r, g, b) in cells():
        parts.append(
            f'<rect x="{x:.2f}" y="{y:.2f}" width="{s:.2f}" height="{s:.2f}" rx="1.5" '
            f'fill="#{r:02x}{g:02x}{b:02x}"/>'
        )
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def png(size: int) -> Image.Image:
    k = 4  # draw 4× larger, then downsample for smooth edges
    scale = size * k / VIEW
    image = Image.new("RGBA", (size * k, size * k), (0, 0, 0, 0))
    draw = ImageDraw.Draw(image)
    draw.rounded_rectangle(
        (0, 0, size * k - 1, size * k - 1), radius=RADIUS * scale, fill=(30, 30, 42, 255)
    )
    for x, y, s, rgb in cells():
        draw.rounded_rectangle(
            (x * scale, y * scale, (x + s) * scale, (y + s) * scale),
            radius=1.5 * scale,
            fill=(*rgb, 255),
        )
    return image.resize((size, size), Image.Resampling.LANCZOS)


def main() -> None:
    ICONS.mkdir(parents=True, exist_ok=True)
    (ICONS / "vitviz.svg").write_text(svg())
    for size in SIZES:
        png(size).save(ICONS / f"vitviz-{size}.png", optimize=True)


if __name__ == "__main__":
    main()
