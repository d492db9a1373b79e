"""The CrossViT's intermediates accessor (DESIGN §3) against timm's own model: its ViT blocks'
outputs are timm's ``forward_intermediates`` (each branch's patches after each multi-scale
block, NCHW), with their CLS; its heads are every attention layer's, a cross-attention layer's
its one CLS query; a head zeroed there is its projection's columns zeroed; no logit lens; a bad
replacement is refused and leaves no hook."""

from __future__ import annotations

import copy

import pytest
import torch
from crossvit_helpers import DIMS, GRIDS, HEADS, LAYERS, SIZE, save_folder, tiny_timm_crossvit
from zoo_helpers import images

from vitviz.checkpoints import load_checkpoint

timm = pytest.importorskip("timm")


@pytest.fixture(scope="module")
def case(tmp_path_factory):
    ref = tiny_timm_crossvit(seed=5)
    loaded = load_checkpoint(save_folder(ref, tmp_path_factory.mktemp("cv") / "crossvit"))
    x = images(2, SIZE, SIZE, seed=3)
    with torch.no_grad():
        inter = loaded.kind.intermediates(loaded.model, x)
    return ref, loaded, x, inter


def test_the_blocks_are_timms_intermediates_on_each_branchs_grid(case) -> None:
    ref, _loaded, x, inter = case
    with torch.no_grad():
        want = ref.forward_intermediates(x, intermediates_only=True)  # branch-major
    branches = [b for how, b in LAYERS if how == "self"]
    assert len(inter.blocks) == len(inter.block_prefix) == len(branches) == 5
    # the last block of each branch in each multi-scale block: timm's feature (b · 2 + k)
    last = {(k, b): j for j, (k, b) in enumerate(zip([0, 0, 0, 1, 1], branches, strict=True))}
    for (k, b), j in last.items():
        torch.testing.assert_close(inter.blocks[j], want[b * 2 + k], rtol=1e-5, atol=1e-5)
    for j, b in enumerate(branches):
        assert tuple(inter.blocks[j].shape) == (2, DIMS[b], *GRIDS[b])
        assert tuple(inter.block_prefix[j].shape) == (2, 1, DIMS[b])
        assert inter.block_grids[j].grid == GRIDS[b] and inter.block_grids[j].num_prefix_tokens == 1


def test_every_attention_layer_has_its_heads(case) -> None:
    _ref, _loaded, _x, inter = case
    assert len(inter.heads) == len(inter.projections) == len(LAYERS)
    for i, (how, b) in enumerate(LAYERS):
        owner = b if how == "self" else 1 - b
        heads = HEADS[b]  # a cross layer attends at its key branch's width, with its heads
        tokens = 1 if how == "cross" else 1 + GRIDS[b][0] * GRIDS[b][1]
        width = DIMS[b] if how == "self" else DIMS[1 - owner]
        assert tuple(inter.heads[i].shape) == (2, heads, tokens, width // heads), i
        assert inter.head_grids[i].num_prefix_tokens == 1


@pytest.mark.parametrize("layer", [3, 8])
def test_a_zeroed_cross_attention_head_is_its_projections_columns_zeroed(case, layer) -> None:
    _ref, loaded, x, _inter = case
    model = loaded.model
    head = 1
    with torch.no_grad():
        got = loaded.kind.intermediates(model, x, replace={(layer, head): None}).logits
        cut = copy.deepcopy(model)
        proj = cut.blocks[layer // 5].fusion[LAYERS[layer][1] ^ 1].attn.proj
        d = proj.in_features // HEADS[LAYERS[layer][1]]
        proj.weight[:, head * d : (head + 1) * d] = 0
        want = cut(x)
        full = model(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert not torch.allclose(got, full)


def test_a_crossvit_has_no_logit_lens(case) -> None:
    from vitviz.explain.feature_methods import feature_arrays
    from vitviz.pipeline.analysis import analyze

    _ref, loaded, x, _inter = case
    a = analyze(loaded, x[0])
    arrays = feature_arrays(a)
    assert "logit_lens" not in arrays and arrays["token_norms"].shape[0] == 5
    with pytest.raises(ValueError, match="mean of both branches' heads"):
        loaded.kind.readout(loaded.model).logits(torch.zeros(1, 1, 48), torch.zeros(1, 49, 48))


def test_a_replacement_of_another_shape_is_refused_and_leaves_no_hook(case) -> None:
    _ref, loaded, x, _inter = case
    with pytest.raises(ValueError, match=r"\(B, N, head_dim\)"):
        loaded.kind.intermediates(loaded.model, x, replace={(3, 0): torch.zeros(2, 50, 12)})
    with pytest.raises(ValueError, match="out of range"):
        loaded.kind.intermediates(loaded.model, x, replace={(9, 0): None})
    hooks = [m._forward_pre_hooks or m._forward_hooks for m in loaded.model.modules()]
    assert not any(hooks)
