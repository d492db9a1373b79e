"""The intermediates accessor of a SwinV2-CR against timm's own blocks (every block's output on
its grid, every head's output before the projection, un-shifted and un-padded), then the tests
every kind runs through its accessor and readout (knock-outs, logits-only passes, the feature
views), run here with a tiny perturbed timm swinv2_cr_tiny_ns_224 on a padded, shifted map."""

from __future__ import annotations

import pytest
import torch
from kind_input_fixtures import input_fixtures
from swin_helpers import tiny_timm_swin_cr
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
from timm.models import save_for_hf

from vitviz.checkpoints import load_checkpoint
from vitviz.kinds.swin.intermediates import window_order

SIZE = (60, 52)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    ref = tiny_timm_swin_cr(SIZE, name="swinv2_cr_tiny_ns_224", seed=12)
    folder = tmp_path_factory.mktemp("cr") / "cr"
    save_for_hf(ref, folder)
    return ref, load_checkpoint(folder)


@pytest.fixture(scope="module")
def loaded(reference):
    return reference[1]


opened, analysis = input_fixtures(SIZE)


def test_blocks_and_heads_are_timms(reference):
    ref, loaded = reference
    x = torch.randn(2, 3, *SIZE, generator=torch.Generator().manual_seed(4))
    blocks = [b for stage in ref.stages for b in stage.blocks]
    outs, heads = [], []
    handles = [b.register_forward_hook(lambda _m, _i, o: outs.append(o)) for b in blocks]
    handles += [
        b.attn.proj.register_forward_pre_hook(lambda _m, a: heads.append(a[0])) for b in blocks
    ]
    try:
        with torch.no_grad():
            logits = ref(x)
    finally:
        for h in handles:
            h.remove()
    with torch.no_grad():
        got = loaded.kind.intermediates(loaded.model, x)
    assert float((got.logits - logits).abs().max()) < 1e-4 * float(logits.abs().max())
    assert len(got.blocks) == len(outs) == 4
    for b, (theirs, ours, grid) in enumerate(zip(outs, got.blocks, got.block_grids, strict=True)):
        assert tuple(ours.shape[-2:]) == tuple(grid.grid) == tuple(theirs.shape[1:3])
        assert float((ours - theirs.permute(0, 3, 1, 2)).abs().max()) < 1e-4, f"block {b}"
    for b, (theirs, ours) in enumerate(zip(heads, got.heads, strict=True)):
        layout = loaded.model.blocks[b].layout(tuple(got.head_grids[b].grid))
        windows = theirs.reshape(2, layout.num_windows, layout.window_area, -1)
        on_grid = window_order(layout).gather(windows)  # (B, N, C) row-major
        H, W = layout.grid
        heads_count = ours.shape[1]
        want = on_grid.reshape(2, H * W, heads_count, -1).transpose(1, 2)  # (B, heads, N, d)
        assert ours.shape == want.shape
        assert float((ours - want).abs().max()) < 1e-5, f"heads of block {b}"
