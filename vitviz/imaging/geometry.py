"""Where the model's patches lie: in the model input and in the original image.

Coordinates are float pixels, x to the right and y down, with (0, 0) the top-left corner of the
top-left pixel (so pixel (i, j) covers [i, i+1) × [j, j+1)). Sizes are (H, W); boxes are
(left, top, right, bottom). Grids may be non-square; nothing here assumes 14 × 14.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PatchGeometry"]


@dataclass(frozen=True)
class PatchGeometry:
    """Patch grid of one model input and how it maps onto the source image.

    ``region`` is the part of the source image (in source pixels) that the input shows; the
    input stretches it to ``input_size`` with independent x and y scales.
    """

    input_size: tuple[int, int]
    patch_size: int
    source_size: tuple[int, int]
    region: tuple[float, float, float, float]

    def __post_init__(self) -> None:
        h, w = self.input_size
        if h < 1 or w < 1:
            raise ValueError(f"input_size must be positive, got {self.input_size}")
        if self.patch_size < 1:
            raise ValueError(f"patch_size must be positive, got {self.patch_size}")
        if self.patch_size > min(h, w):
            raise ValueError(f"patch_size {self.patch_size} is larger than the input {h}×{w}")
        sh, sw = self.source_size
        if sh < 1 or sw < 1:
            raise ValueError(f"source_size must be positive, got {self.source_size}")
        left, top, right, bottom = self.region
        if not (right > left and bottom > top):
            raise ValueError(f"region must have positive width and height, got {self.region}")
        object.__setattr__(self, "input_size", (int(h), int(w)))
        object.__setattr__(self, "source_size", (int(sh), int(sw)))
        object.__setattr__(self, "region", tuple(float(v) for v in self.region))

    @classmethod
    def identity(cls, size: tuple[int, int], patch_size: int) -> PatchGeometry:
        """Geometry of an input that is the source image itself (no resize, no crop)."""
        h, w = size
        return cls((h, w), patch_size, (h, w), (0.0, 0.0, float(w), float(h)))

    # ------------------------------------------------------------------ grid

    @property
    def grid(self) -> tuple[int, int]:
        """(gh, gw): patch rows and columns."""
        return self.input_size[0] // self.patch_size, self.input_size[1] // self.patch_size

    @property
    def num_patches(self) -> int:
        gh, gw = self.grid
        return gh * gw

    def _check_cell(self, row: int, col: int) -> None:
        gh, gw = self.grid
        if not (0 <= row < gh and 0 <= col < gw):
            raise IndexError(f"patch ({row}, {col}) is outside the {gh}×{gw} grid")

    def patch_index(self, row: int, col: int) -> int:
        """Row-major index of the patch at (row, col)."""
        self._check_cell(row, col)
        return row * self.grid[1] + col

    def row_col(self, index: int) -> tuple[int, int]:
        """(row, col) of the patch with row-major ``index``."""
        if not 0 <= index < self.num_patches:
            raise IndexError(f"patch index {index} is outside 0..{self.num_patches - 1}")
        return divmod(int(index), self.grid[1])

    def token_index(self, row: int, col: int, num_prefix_tokens: int) -> int:
        """Token position of the patch when ``num_prefix_tokens`` (CLS, ...) come first."""
        if num_prefix_tokens < 0:
            raise ValueError(f"num_prefix_tokens must be >= 0, got {num_prefix_tokens}")
        return num_prefix_tokens + self.patch_index(row, col)

    # ------------------------------------------------------------------ coordinates

    @property
    def scale(self) -> tuple[float, float]:
        """(sx, sy): source pixels per input pixel along x and y."""
        left, top, right, bottom = self.region
        return (right - left) / self.input_size[1], (bottom - top) / self.input_size[0]

    def input_to_source(self, x: float, y: float) -> tuple[float, float]:
        """Input pixel coordinates -> source pixel coordinates."""
        sx, sy = self.scale
        return self.region[0] + x * sx, self.region[1] + y * sy

    def source_to_input(self, x: float, y: float) -> tuple[float, float]:
        """Source pixel coordinates -> input pixel coordinates."""
        sx, sy = self.scale
        return (x - self.region[0]) / sx, (y - self.region[1]) / sy

    def patch_at_input(self, x: float, y: float) -> tuple[int, int] | None:
        """(row, col) of the patch under input point (x, y), or None outside the grid."""
        gh, gw = self.grid
        p = self.patch_size
        if not (0 <= x < gw * p and 0 <= y < gh * p):
            return None
        return int(y // p), int(x // p)

    def patch_at_source(self, x: float, y: float) -> tuple[int, int] | None:
        """(row, col) of the patch under source point (x, y); None where the model saw nothing."""
        return self.patch_at_input(*self.source_to_input(x, y))

    def patch_box_input(self, row: int, col: int) -> tuple[int, int, int, int]:
        """(left, top, right, bottom) of a patch in input pixels."""
        self._check_cell(row, col)
        p = self.patch_size
        return col * p, row * p, (col + 1) * p, (row + 1) * p

    def patch_box_source(self, row: int, col: int) -> tuple[float, float, float, float]:
        """(left, top, right, bottom) of a patch in source pixels."""
        left, top, right, bottom = self.patch_box_input(row, col)
        x0, y0 = self.input_to_source(left, top)
        x1, y1 = self.input_to_source(right, bottom)
        return x0, y0, x1, y1

    def covered_region(self) -> tuple[float, float, float, float]:
        """Source box covered by the whole patch grid (equals ``region`` when H, W divide by p)."""
        gh, gw = self.grid
        x1, y1 = self.input_to_source(gw * self.patch_size, gh * self.patch_size)
        return self.region[0], self.region[1], x1, y1
