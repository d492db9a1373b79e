"""The LeViT kind's intermediates accessor (DESIGN §3) on tiny perturbed timm levit_128s opened
through vitviz, in the Linear and the conv layout: every layer's block output on its grid (a
subsample block's on the new grid) equals timm's; every head's output, through the projection,
is timm's attention branch; a zeroed head is its projection's columns zeroed; a head replaced
by itself changes nothing; bad replacements are refused; the readout of the last block is the
model's logits; gradients reach blocks and heads."""

from __future__ import annotations

import intermediates_checks as checks
import pytest
import torch
from levit_helpers import SIZE, save_folder, timm_layers, tiny_timm_levit

from vitviz.checkpoints import load_checkpoint

timm = pytest.importorskip("timm")

GRIDS = [(4, 4), (2, 2), (2, 2), (2, 2), (1, 1), (1, 1)]  # per layer: its output's grid


@pytest.fixture(scope="module", params=[False, True], ids=["linear", "conv"])
def opened(request, tmp_path_factory):
    ref = tiny_timm_levit(conv=request.param, seed=21)
    loaded = load_checkpoint(save_folder(ref, tmp_path_factory.mktemp("levit") / "levit"))
    return checks.opened_case(ref, loaded, SIZE)


def _timm_outputs(ref, x) -> tuple[list, list]:
    """timm's blocks' outputs and attention branches (the attention modules' outputs), each on
    the grid as (B, C, h, w)."""
    modules = []
    for stage in ref.stages:
        if hasattr(stage.downsample, "attn_downsample"):
            modules.append(stage.downsample)
        modules += list(stage.blocks)

    def grid(b):
        def on_grid(t):
            if t.ndim == 4:
                return t
            return t.transpose(1, 2).reshape(t.shape[0], t.shape[2], *GRIDS[b])

        return on_grid

    layers = list(zip(modules, timm_layers(ref), strict=True))
    taps = {
        "block": [(block, grid(b)) for b, (block, _) in enumerate(layers)],
        "branch": [(attn, grid(b)) for b, (_, attn) in enumerate(layers)],
    }
    with checks.recording(taps) as got, torch.no_grad():
        ref(x)
    return got["block"], got["branch"]


def test_blocks_equal_timms(opened) -> None:
    ref, _, x, inter = opened
    want, _ = _timm_outputs(ref, x)
    assert len(inter.blocks) == len(want) == 6
    for b, (got, w) in enumerate(zip(inter.blocks, want, strict=True)):
        assert tuple(got.shape) == tuple(w.shape) and tuple(got.shape[-2:]) == GRIDS[b]
        assert float((got - w).abs().max()) / float(w.abs().max()) < 1e-5, b
        assert inter.block_grids[b].grid == GRIDS[b] and inter.block_prefix[b].shape[1] == 0


def test_heads_through_the_projection_are_the_attention_branch(opened) -> None:
    ref, loaded, x, inter = opened
    _, want = _timm_outputs(ref, x)
    conv = loaded.model.config.conv
    for b, (heads, proj, w) in enumerate(zip(inter.heads, inter.projections, want, strict=True)):
        B, H, N, d = heads.shape
        assert GRIDS[b][0] * GRIDS[b][1] == N and loaded.model.config.layer_heads[b] == H
        merged = heads.transpose(1, 2).reshape(B, N, H * d)
        if conv:
            merged = merged.transpose(1, 2).reshape(B, H * d, *GRIDS[b])
        with torch.no_grad():
            got = proj(merged)
        if not conv:
            got = got.transpose(1, 2).reshape(B, -1, *GRIDS[b])
        assert float((got - w).abs().max()) / float(w.abs().max()) < 1e-5, b


def _zero_head(layer: int, head: int):
    def zero(model) -> None:
        attn = model.blocks[layer].attn
        w = attn.proj.ln.linear.weight  # (D, heads·e) or (D, heads·e, 1, 1)
        checks.zero_columns(w, head, attn.value_dim)  # Hardswish(0) = 0: the head's columns read 0

    return zero


def test_a_zeroed_head_is_its_projection_columns_zeroed(opened) -> None:
    _, loaded, x, inter = opened
    for layer, head in ((1, 2), (3, 1)):  # the subsample of stage 1, a block of stage 1
        checks.check_zeroed_head(loaded, x, inter, layer, head, _zero_head(layer, head))
    checks.check_replaced_by_itself(loaded, x, inter, 4, 0)


def test_bad_replacements_are_refused(opened) -> None:
    _, loaded, x, _ = opened
    checks.check_bad_replacements(loaded, x, 6, 4, 6)


def test_the_readout_of_the_last_block_is_the_logits_and_gradients_flow(opened) -> None:
    _, loaded, x, _ = opened
    checks.check_readout_and_gradients(
        loaded, x, lambda inter: [inter.blocks[0], inter.heads[1], inter.heads[3]]
    )
