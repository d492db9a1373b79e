"""Synthetic shapes: deterministic per seed, balanced, masks that match the drawn objects."""

from __future__ import annotations

import torch

from vitviz.training.shapes import SHAPE_NAMES, make_shapes


def test_shapes_are_deterministic_per_seed() -> None:
    a = make_shapes(30, 32, seed=5)
    b = make_shapes(30, 32, seed=5)
    c = make_shapes(30, 32, seed=6)
    for x, y in zip(a, b, strict=True):
        assert torch.equal(x, y)
    assert not torch.equal(a[0], c[0])


def test_shapes_types_and_ten_balanced_classes() -> None:
    images, labels, masks = make_shapes(100, 40, seed=1)
    assert images.shape == (100, 3, 40, 40) and images.dtype == torch.uint8
    assert labels.shape == (100,) and labels.dtype == torch.int64
    assert masks.shape == (100, 40, 40) and masks.dtype == torch.bool
    assert len(SHAPE_NAMES) == 10
    assert labels.bincount(minlength=10).tolist() == [10] * 10
    assert int(images.min()) < 30 and int(images.max()) > 225  # full range used


def test_masks_mark_the_objects() -> None:
    images, _, masks = make_shapes(100, 48, seed=2)
    area = masks.flatten(1).float().mean(dim=1)  # share of the image per object
    assert (area > 0.01).all() and (area < 0.5).all()
    x = images.float() / 255
    m = masks[:, None].float()
    inside = (x * m).sum(dim=(2, 3)) / m.sum(dim=(2, 3))  # (n, 3) mean object colour
    outside = (x * (1 - m)).sum(dim=(2, 3)) / (1 - m).sum(dim=(2, 3))
    # Every channel of the object is 0.3-0.45 away from the background's base colour.
    assert ((inside - outside).abs().amin(dim=1) > 0.12).all()
    # Pixels just outside the mask (a 2-px ring around it) look like background, not object.
    grown = torch.nn.functional.max_pool2d(m, 5, stride=1, padding=2)
    ring = grown - m
    near = (x * ring).sum(dim=(2, 3)) / ring.sum(dim=(2, 3)).clamp_min(1)
    assert ((near - inside).abs().amax(dim=1) > 0.12).float().mean() > 0.95


def test_masks_have_each_shapes_own_area() -> None:
    """Mean mask area relative to the object's radius² differs by class as the shapes do:
    the ring has a hole, the circle is full, the arrow is thin."""
    _, labels, masks = make_shapes(400, 48, seed=3)
    area = masks.flatten(1).float().sum(dim=1)
    mean_area = {SHAPE_NAMES[c]: float(area[labels == c].mean()) for c in range(10)}
    assert mean_area["circle"] > mean_area["ring"]
    assert mean_area["circle"] > mean_area["arrow"]
    assert mean_area["hexagon"] > mean_area["triangle"]
    assert mean_area["square"] > mean_area["cross"]
