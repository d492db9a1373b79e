"""The tests every kind runs through its intermediates accessor and readout (DESIGN §3, §5), on a
tiny perturbed timm MViTv2 (no CLS token: the head reads the mean of the last block's patches)
opened through vitviz: knocking heads out (``head_effects`` equals a single-head pass of the
accessor; the kind's analysis with the head knocked out gives those logits) and the feature
views (maps on a block's grid, the logit lens of the last block is the model's prediction,
high-norm flags). The test functions are the shared ones, run here with an MViTv2's fixtures."""

from __future__ import annotations

import pytest
from kind_input_fixtures import input_fixtures
from mvit_helpers import SIZE, save_bare, tiny_timm_mvit
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

from vitviz.checkpoints import load_checkpoint

pytest.importorskip("timm")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    model = tiny_timm_mvit(cls=False, seed=8)
    return load_checkpoint(save_bare(model, tmp_path_factory.mktemp("mvit") / "mvit.pth"))


opened, analysis = input_fixtures(SIZE)
