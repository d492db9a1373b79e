"""The tests every kind runs through its intermediates accessor and readout (DESIGN §3, §5),
on a tiny perturbed timm VOLO (volo_d2_224's heads) opened through vitviz: knocking heads out
(an outlooker's, a transformer block's, a class block's), the multi-layer plan, the
logits-only pass, a layer past the last refused, the branches counting the same blocks, and
the feature views. The logit lens is not among them: a VOLO has none (its head reads the CLS
its class blocks make)."""

from __future__ import annotations

import pytest
import torch
from kind_input_fixtures import input_fixtures
from test_features_kinds import (  # noqa: F401 - collected here with this module's fixtures
    test_analyses_keep_the_accessors_block_outputs,
    test_high_norm_flags_and_prefix_norms,
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
from volo_helpers import SIZE, save_folder, tiny_timm_volo

from vitviz.checkpoints import load_checkpoint

pytest.importorskip("timm")


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    model = tiny_timm_volo(seed=8, name="volo_d2_224")
    return load_checkpoint(save_folder(model, tmp_path_factory.mktemp("volo") / "volo"))


opened, analysis = input_fixtures(SIZE)


def test_the_readout_has_no_logit_lens(loaded) -> None:
    readout = loaded.kind.readout(loaded.model)
    with pytest.raises(ValueError, match="no logit lens"):
        readout.logits(torch.zeros(1, 0, 64), torch.zeros(1, 16, 64))
