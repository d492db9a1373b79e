"""The tests every kind runs through its intermediates accessor and readout (DESIGN §3, §5), on a
tiny perturbed transformers PVT v1 opened through vitviz: its last stage's blocks carry a CLS
token beside the grid (``block_prefix``). Knocking heads out (``head_effects`` equals a
single-head pass of the accessor) and the feature views (maps on a layer's grid, the logit lens
of the last layer is the model's prediction, the analysis keeping the accessor's block
outputs). The test functions are the shared ones, run here with a PVT v1's fixtures."""

from __future__ import annotations

import pytest
from kind_input_fixtures import input_fixtures
from test_features_kinds import (  # noqa: F401 - collected here with this module's fixtures
    test_analyses_keep_the_accessors_block_outputs,
    test_high_norm_flags_and_prefix_norms,
    test_logit_lens_ends_at_the_models_prediction,
    test_maps_lie_on_a_blocks_grid,
    test_the_windows_similarity_table_holds_every_clicked_patchs_map,
)
from test_interventions_kinds import (  # noqa: F401 - collected here with this module's fixtures
    test_a_head_replaced_on_some_rows_leaves_the_others_as_they_compute,
    test_a_layer_past_the_last_is_refused_in_one_line,
    test_a_logits_only_pass_keeps_nothing_else,
    test_attention_and_mlp_branches_count_the_same_blocks,
    test_head_effects_equal_a_single_head_pass,
    test_the_multi_layer_plan_gives_the_single_head_passes,
)
from test_pyramid_hf_pvt1 import saved_pvt1

from vitviz.checkpoints import load_checkpoint

pytest.importorskip("transformers")

SIZE = 64


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("pvt1") / "pvt"
    return load_checkpoint(saved_pvt1(folder, "PvtForImageClassification", seed=3)[1])


opened, analysis = input_fixtures(SIZE)


def test_the_last_stage_carries_its_cls_beside_the_grid(opened) -> None:
    from vitviz.kindapi import kind_of

    loaded, x = opened
    out = kind_of(loaded).intermediates(loaded.model, x[None])
    assert [p.shape[1] for p in out.block_prefix] == [0, 0, 0, 0, 1, 1]
    assert [g.num_prefix_tokens for g in out.block_grids] == [0, 0, 0, 0, 1, 1]
    assert tuple(out.blocks[-1].shape) == (1, 64, 2, 2)
