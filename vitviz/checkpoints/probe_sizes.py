"""The input sizes the library check runs at: the model's own, and each size vitviz analyses
that is not it (DESIGN §4: the size analysed is the size checked).

A Hugging Face folder is analysed at its image processor's crop (a DINOv2 of config size 518
cropped to 224), a sidecar's ``preprocessing.image_size`` at that size: the position table is
then resampled, by vitviz's rule, which must be the library's. ``resize: "fit"`` gives each
aspect ratio its own size; the check runs at those of a square, a 3:4 and a 4:3 image.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from vitviz.imaging import Preprocessing
from vitviz.imaging.preprocess import fit_size

Size = tuple[int, int]
# (H, W) of the source images whose "fit" sizes are checked: square, portrait, landscape
FIT_SHAPES: tuple[Size, ...] = ((1, 1), (4, 3), (3, 4))


def analysed_sizes(prep: Preprocessing | None, patch_size: int) -> tuple[list[Size], str]:
    """The input sizes (H, W) ``prep`` gives a model of ``patch_size``, and what stays unchecked
    in words ("" when every size it gives is in the list)."""
    if prep is None:
        return [], ""
    if prep.resize != "fit":
        return [(int(prep.image_size[0]), int(prep.image_size[1]))], ""
    sizes = _unique(fit_size(shape, prep.image_size, patch_size) for shape in FIT_SHAPES)
    said = (
        "resize 'fit' gives each aspect ratio its own input size: those of square, 3:4 and 4:3 "
        "images checked, the others (the same resampling rule) not each"
    )
    return sizes, said


def probe_sizes(native: Sequence[int], analysed: Sequence[Size]) -> list[Size]:
    """The model's own ``native`` (H, W) first, then each analysed size that is not it."""
    own = (int(native[0]), int(native[1]))
    return _unique([own, *((int(h), int(w)) for h, w in analysed)])


def size_words(size: Sequence[int]) -> str:
    """(28, 56) -> "28×56"."""
    return f"{int(size[0])}×{int(size[1])}"


def _unique(sizes: Iterable[Size]) -> list[Size]:
    out: list[Size] = []
    for size in sizes:
        if size not in out:
            out.append(size)
    return out
