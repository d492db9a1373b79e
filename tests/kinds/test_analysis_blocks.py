"""The feature views read the block outputs a token-layout analysis's own forward pass kept
(the kind's ``analysis_blocks``, DESIGN §5): laid out as the intermediates accessor lays them
out, equal to its values, for one image and a batch's, and with no forward pass of their own."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from kinds.test_intermediates_token import BUILDERS

from vitviz.explain.feature_methods import feature_arrays
from vitviz.explain.features import logit_lens, query_token, similarity, token_norm_table
from vitviz.explain.methods import get_method
from vitviz.kindapi import get_kind
from vitviz.pipeline.analysis import analyze
from vitviz.pipeline.batch import iter_kind_analyses

KEPT = ["vit", "clip", "siglip-tower"]  # kinds whose analysis keeps its block outputs


def _image(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 255, (64, 64, 3), dtype=np.uint8)


@pytest.fixture(scope="module", params=KEPT)
def loaded(request, tmp_path_factory):
    return BUILDERS[request.param](tmp_path_factory.mktemp(request.param)).loaded


def _close(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.shape == b.shape
    torch.testing.assert_close(a.cpu().float(), b.cpu().float(), rtol=1e-5, atol=1e-5)


def test_kept_blocks_are_the_accessors_and_so_are_the_features(loaded) -> None:
    analysis = analyze(loaded, _image(0))
    kind = get_kind(analysis.kind)
    kept = kind.analysis_blocks(analysis)
    assert kept is not None
    with torch.no_grad():
        inter = kind.intermediates(loaded.model, analysis.input[None])
    assert len(kept.blocks) == len(inter.blocks) == len(kept.block_prefix)
    assert kept.block_grids == inter.block_grids
    assert kept.logits.shape == inter.logits.shape
    for a, b in zip(kept.blocks + kept.block_prefix, inter.blocks + inter.block_prefix,
                    strict=True):  # fmt: skip
        _close(a, b)
    arrays = feature_arrays(analysis)  # made from the kept blocks
    _close(torch.from_numpy(arrays["token_norms"]), token_norm_table(inter))
    if "logit_lens" in arrays:
        readout, model = kind.readout(loaded.model), loaded.model
        with torch.no_grad():
            lens = logit_lens(inter, readout, lambda z: kind.probabilities(model, z))
        _close(torch.from_numpy(arrays["logit_lens"]), lens)
    grid = tuple(int(n) for n in analysis.grid)
    got = get_method("similarity")(analysis, (1, 2), None, {"layer": 0})
    _close(got, similarity(inter, 0, query_token(inter, 0, (1, 2), grid)))


def test_a_batchs_analyses_keep_their_own_blocks(loaded) -> None:
    images = [_image(1), _image(2)]
    items = list(iter_kind_analyses(loaded, images, batch_size=2))
    kind = get_kind(loaded.kind.name)
    for item, image in zip(items, images, strict=True):
        assert item.analysis is not None
        batch = kind.analysis_blocks(item.analysis)
        alone = kind.analysis_blocks(analyze(loaded, image))
        assert batch is not None and alone is not None
        for a, b in zip(batch.blocks + batch.block_prefix, alone.blocks + alone.block_prefix,
                        strict=True):  # fmt: skip
            _close(a, b)


def test_a_vit_explains_its_features_without_another_forward_pass(tmp_path) -> None:
    loaded = BUILDERS["vit"](tmp_path).loaded
    passes = []
    hook = loaded.model.blocks[0].register_forward_hook(lambda *_: passes.append(1))
    try:
        analysis = analyze(loaded, _image(3))
        assert len(passes) == 1
        assert set(feature_arrays(analysis)) == {"logit_lens", "token_norms"}
        for name in ("token-norm", "similarity", "pca"):
            assert torch.isfinite(get_method(name)(analysis, None, None, {})).all()
    finally:
        hook.remove()
    assert len(passes) == 1  # the analysis's own pass, no accessor pass after it


def test_class_attention_kinds_keep_the_accessors_pass(tmp_path) -> None:
    loaded = BUILDERS["cait"](tmp_path).loaded
    analysis = analyze(loaded, _image(4))
    assert get_kind(analysis.kind).analysis_blocks(analysis) is None
    assert set(feature_arrays(analysis)) == {"logit_lens", "token_norms"}


def _staged(name: str):
    """A tiny vitviz Swin or Hiera (32 × 32, two stages) as a LoadedModel."""
    from vitviz.checkpoints import LoadedModel
    from vitviz.imaging import Preprocessing
    from vitviz.kinds.pyramid.hiera_config import HieraConfig
    from vitviz.kinds.pyramid.hiera_network import HieraViT
    from vitviz.kinds.swin.config import SwinConfig
    from vitviz.kinds.swin.network import SwinTransformer

    torch.manual_seed(5)
    if name == "swin":
        model = SwinTransformer(
            SwinConfig(image_size=(32, 32), num_classes=4, dims=(16, 32), depths=(2, 2),
                       heads=(2, 4), window_sizes=(4, 4))
        )  # fmt: skip
    else:
        model = HieraViT(
            HieraConfig(image_size=(32, 32), num_classes=4, dims=(16, 32), depths=(1, 1),
                        heads=(1, 2), mlp_hidden_dims=(32, 64), mask_unit_attn=(True, False),
                        mask_unit=(2, 2))
        )  # fmt: skip
    names = [f"class {i}" for i in range(4)]
    return LoadedModel(model.eval(), names, Preprocessing(image_size=(32, 32)), "vitviz")


@pytest.mark.parametrize("name", ["swin", "hiera"])
def test_a_staged_kind_explains_its_features_without_another_forward_pass(name: str) -> None:
    loaded = _staged(name)
    passes = []
    hook = loaded.model.blocks[0].register_forward_hook(lambda *_: passes.append(1))
    try:
        analysis = analyze(loaded, _image(5)[:32, :32], gradients=True)
        assert len(passes) == 1
        assert get_kind(analysis.kind).analysis_blocks(analysis) is not None
        assert set(feature_arrays(analysis)) == {"logit_lens", "token_norms"}
        for method in ("token-norm", "similarity", "pca"):
            assert torch.isfinite(get_method(method)(analysis, None, None, {})).all()
    finally:
        hook.remove()
    assert len(passes) == 1  # the analysis's own pass, no accessor pass after it
