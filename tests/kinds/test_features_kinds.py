"""Every kind answers the feature maps through its intermediates accessor and readout (DESIGN
§5): ViT, CaiT, XCiT, CLIP, Swin and the pyramids (PVT v2, Hiera) opened from tiny library
checkpoints. The maps lie on a block's own grid; the logit lens of the last block is the
model's own prediction (the readout is the network's own head); the npz gets both arrays."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kinds.test_intermediates_token import BUILDERS
from kinds.test_staged_intermediates import SIZE, _folder, _hiera, _pyramid, _swin

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.feature_methods import feature_arrays, feature_pass, high_norm_tokens
from vitviz.explain.methods import get_method
from vitviz.pipeline.analysis import analyze

KINDS = ["vit", "cait", "xcit", "clip", "swin", "pvt-v2", "hiera"]


def _loaded(name: str, root):
    if name in BUILDERS:
        return BUILDERS[name](root).loaded
    if name == "swin":
        return load_checkpoint(_swin(root, 1, (SIZE, SIZE))[1])
    model = _hiera() if name == "hiera" else _pyramid("pvt_v2_b0", 1, depths=(1, 2, 1, 1))
    return load_checkpoint(_folder(model, root, name, (SIZE, SIZE)))


@pytest.fixture(scope="module", params=KINDS)
def analysis(request, tmp_path_factory):
    loaded = _loaded(request.param, tmp_path_factory.mktemp(request.param))
    image = np.random.default_rng(3).integers(0, 255, (SIZE, SIZE, 3), dtype=np.uint8)
    return analyze(loaded, image)


def test_maps_lie_on_a_blocks_grid(analysis) -> None:
    inter = feature_pass(analysis)
    grids = {tuple(b.shape[-2:]) for b in inter.blocks}
    for name, params in (("token-norm", {}), ("token-norm", {"layer": 0}), ("similarity", {})):
        out = get_method(name)(analysis, None, None, params)
        assert tuple(out.shape) in grids and torch.isfinite(out).all()
    clicked = get_method("similarity")(analysis, (0, 1), None, {"layer": -1})
    assert float(clicked.max()) == pytest.approx(1.0, abs=1e-5)  # the query with itself
    pca = get_method("pca")(analysis, None, None, {})
    assert tuple(pca.shape) == (*inter.blocks[-1].shape[-2:], 3)
    assert float(pca.min()) == 0.0 and float(pca.max()) == pytest.approx(1.0)


def test_logit_lens_ends_at_the_models_prediction(analysis) -> None:
    arrays = feature_arrays(analysis)
    lens, norms = arrays["logit_lens"], arrays["token_norms"]
    inter = feature_pass(analysis)
    assert lens.shape == (len(inter.blocks), analysis.probs.numel())
    np.testing.assert_allclose(lens[-1], analysis.probs.numpy(), rtol=1e-4, atol=1e-6)
    assert norms.shape[0] == len(inter.blocks)
    assert np.isfinite(norms[:, : inter.blocks[-1][0, 0].numel()]).all()


def test_high_norm_flags_and_prefix_norms(analysis) -> None:
    shown = high_norm_tokens(analysis)
    inter = feature_pass(analysis)
    assert shown["high"].shape == shown["norms"].shape == tuple(inter.blocks[-1].shape[-2:])
    assert shown["prefix"].shape == (inter.block_prefix[-1].shape[1],)


# their blocks differ by stage: the accessor's pass makes them
KEEP_NONE = {"cait", "xcit", "convit"}


def test_analyses_keep_the_accessors_block_outputs(analysis) -> None:
    """Every kind's analysis but CaiT's and XCiT's keeps its own pass's block outputs
    (``analysis_blocks``; Swin and the pyramids too): the accessor's values and grids."""
    from vitviz.kindapi import get_kind

    kind = get_kind(analysis.kind)
    kept = kind.analysis_blocks(analysis)
    if kind.name in KEEP_NONE:
        assert kept is None
        return
    assert kept is not None
    with torch.no_grad():
        inter = kind.intermediates(analysis.loaded.model, analysis.input[None])
    assert len(kept.blocks) == len(inter.blocks)
    for a, b in zip(kept.blocks + kept.block_prefix, inter.blocks + inter.block_prefix,
                    strict=True):  # fmt: skip
        assert a.shape == b.shape and not a.requires_grad
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    for a, b in zip(kept.block_grids, inter.block_grids, strict=True):
        assert a.grid == b.grid and a.token_pixels == b.token_pixels
        assert (a.windows is None) == (b.windows is None)
        if a.windows is not None:
            np.testing.assert_array_equal(a.windows, b.windows)
    torch.testing.assert_close(kept.logits, inter.logits, rtol=1e-5, atol=1e-6)


def test_the_windows_similarity_table_holds_every_clicked_patchs_map(analysis) -> None:
    """The Features tab looks a click up in ``similarity_rows``: each clickable cell's row is
    the ``similarity`` map of that cell as the query, on the block's own grid."""
    from vitviz.explain.feature_methods import similarity_rows

    for layer in (0, -1):
        rows = similarity_rows(analysis, layer)
        assert rows is not None
        table, cells = rows
        gh, gw = cells.shape
        for cell in ((0, 0), (gh - 1, gw - 1), (gh // 2, gw // 3)):
            want = get_method("similarity")(analysis, cell, None, {"layer": layer}).numpy()
            np.testing.assert_allclose(table[cells[cell]], want, atol=2e-6)
