"""The tests every kind runs through its intermediates accessor and readout (DESIGN §3, §5), on
a tiny perturbed timm ConViT opened through vitviz: knocking heads out (``head_effects`` equals
a single-head pass of the accessor; the analysis with the head knocked out gives those logits),
logits-only passes and the feature views; and its accessor against timm's own blocks (a GPSA
block's output is the patches alone, a plain block's [CLS, patches])."""

from __future__ import annotations

import pytest
import torch
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
from test_zoo_convit import S, tiny_convit

from vitviz.checkpoints import load_checkpoint

SIZE = 32


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    model = tiny_convit(seed=8)
    path = tmp_path_factory.mktemp("convit") / "convit.pth"
    torch.save(model.state_dict(), path)
    return model, load_checkpoint(path)


@pytest.fixture(scope="module")
def loaded(reference):
    return reference[1]


opened, analysis = input_fixtures(SIZE)


def test_blocks_and_heads_are_timms(reference):
    ref, loaded = reference
    x = torch.randn(2, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(4))
    outs, heads = [], []
    handles = [b.register_forward_hook(lambda _m, _i, o: outs.append(o)) for b in ref.blocks]
    handles += [
        b.attn.proj.register_forward_pre_hook(lambda _m, a: heads.append(a[0])) for b in ref.blocks
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
    for b, (theirs, ours) in enumerate(zip(outs, got.blocks, strict=True)):
        prefix = 0 if b < S else 1
        assert got.block_prefix[b].shape[1] == prefix
        grid = theirs[:, prefix:].transpose(1, 2).reshape(ours.shape)
        assert float((ours - grid).abs().max()) < 1e-5, f"block {b}"
        if prefix:
            assert float((got.block_prefix[b] - theirs[:, :1]).abs().max()) < 1e-5
    for b, (theirs, ours) in enumerate(zip(heads, got.heads, strict=True)):
        B, N, _ = theirs.shape
        want = theirs.reshape(B, N, ours.shape[1], -1).transpose(1, 2)  # (B, heads, N, d)
        assert ours.shape == want.shape and float((ours - want).abs().max()) < 1e-5, b
