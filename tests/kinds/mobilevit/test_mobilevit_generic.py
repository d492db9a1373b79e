"""The tests every kind runs through its intermediates accessor (DESIGN §3, §5), on a tiny
perturbed timm MobileViT opened through vitviz: knocking heads out (``head_effects`` equals a
single-head pass of the accessor, the multi-layer plan, a head replaced on some rows, blocks
counted the same by the attention and MLP branches) and the analysis keeping the accessor's
block outputs. A MobileViT's layers have no readout (the fold, projection and fusion stand
between them and the head): no logit lens or token norms."""

from __future__ import annotations

import pytest
import torch
from kind_input_fixtures import input_fixtures
from mobilevit_helpers import BARE_SETTINGS, SIZE, save_bare, tiny_timm_mobilevit
from test_features_kinds import (  # noqa: F401 - collected here with this module's fixtures
    test_analyses_keep_the_accessors_block_outputs,
)
from test_interventions_kinds import (  # noqa: F401 - collected here with this module's fixtures
    test_a_head_replaced_on_some_rows_leaves_the_others_as_they_compute,
    test_a_layer_past_the_last_is_refused_in_one_line,
    test_a_logits_only_pass_keeps_nothing_else,
    test_attention_and_mlp_branches_count_the_same_blocks,
    test_head_effects_equal_a_single_head_pass,
    test_the_multi_layer_plan_gives_the_single_head_passes,
)

from vitviz.checkpoints import load_checkpoint

pytest.importorskip("timm")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    model = tiny_timm_mobilevit(seed=12)
    return load_checkpoint(save_bare(model, tmp_path_factory.mktemp("mvit") / "m.pth",
                                     BARE_SETTINGS))  # fmt: skip


opened, analysis = input_fixtures(SIZE)


def test_the_accessors_blocks_are_the_layers_outputs_on_the_pixel_grid(opened) -> None:
    """A layer's (B·P, N, C) tokens are put back pixel by pixel: pixel (ny·p + oy, nx·p + ox)
    is patch (ny, nx) of offset (oy, ox)'s sequence."""
    loaded, x = opened
    model = loaded.model
    kept = []
    handle = model.blocks[0].register_forward_hook(lambda _m, _i, o: kept.append(o[0]))
    with torch.no_grad():
        inter = loaded.kind.intermediates(model, x[None])
    handle.remove()
    tokens, grid = kept[0], inter.blocks[0][0]  # (4, 16, C), (C, 8, 8)
    for oy, ox, ny, nx in ((0, 1, 2, 3), (1, 0, 3, 0), (1, 1, 1, 2)):
        want = tokens[oy * 2 + ox, ny * 4 + nx]
        torch.testing.assert_close(grid[:, ny * 2 + oy, nx * 2 + ox], want)
    assert loaded.kind.intermediates(model, x[None]).heads[0].shape == (1, 2, 64, 8)
