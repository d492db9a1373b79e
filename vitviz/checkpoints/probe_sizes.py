"""The input sizes the library check runs at: the model's own, and each size vitviz analyses
that is not it (DESIGN §4: the size analysed is the size checked).

A Hugging Face folder is analysed at its image processor's crop (a DINOv2 of config size 518
cropped to 224), a sidecar's ``preprocessing.image_size`` at that size: the position table is
then resampled, by vitviz's rule, which must be the library's. ``resize: "fit"`` gives each
aspect ratio its own size (in multiples of the kind's ``input_stride``); the check runs at those
of a square, a 3:4 and a 4:3 image.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from vitviz.imaging import Preprocessing
from vitviz.imaging.preprocess import fit_size

Size = tuple[int, int]
# (H, W) of the source images whose "fit" sizes are checked: square, portrait, landscape
FIT_SHAPES: tuple[Size, ...] = ((1, 1), (4, 3), (3, 4))


def analysed_sizes(prep: Preprocessing | None, stride: int) -> list[Size]:
    """The input sizes (H, W) ``prep`` gives a model whose analysis takes multiples of
    ``stride`` (its kind's ``input_stride``): one, or for ``resize: "fit"`` those of a square,
    a 3:4 and a 4:3 image."""
    if prep is None:
        return []
    if prep.resize != "fit":
        return [(int(prep.image_size[0]), int(prep.image_size[1]))]
    return _unique(fit_size(shape, prep.image_size, stride) for shape in FIT_SHAPES)


def fit_words(prep: Preprocessing | None, stride: int, checked: Sequence[Size]) -> str:
    """What the check says of ``resize: "fit"`` (DESIGN §4), given the sizes it compared with
    the library (``checked``): which of the square, 3:4 and 4:3 images' sizes were, and that
    the other aspect ratios are not each; "" for any other resize."""
    if prep is None or prep.resize != "fit":
        return ""
    said = {(1, 1): "square", (4, 3): "3:4", (3, 4): "4:3"}
    sizes = {shape: fit_size(shape, prep.image_size, stride) for shape in FIT_SHAPES}
    done = [said[shape] for shape, size in sizes.items() if size in checked]
    left = [said[shape] for shape, size in sizes.items() if size not in checked]
    if not left:
        which = "those of square, 3:4 and 4:3 images checked"
    elif done:
        checked_of, not_of = " or ".join(done), " or ".join(left)
        which = f"the size of a {checked_of} image checked, of a {not_of} image not"
    else:
        which = "none checked (vitviz's model runs at those of square, 3:4 and 4:3 images)"
    return (
        f"resize 'fit' gives each aspect ratio its own input size: {which}, the other aspect "
        "ratios (the same rule) not each"
    )


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
