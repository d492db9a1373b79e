"""The PiT kind's intermediates accessor (DESIGN §3) on a tiny perturbed timm pit_ti_distilled
opened through vitviz: every block's patches on its stage's grid and its prefix tokens equal
timm's blocks' outputs; every head's output, through the projection, is timm's attention
branch; a zeroed head is its projection's columns zeroed; a head replaced by itself changes
nothing; bad replacements are refused; the grids carry the prefix; the readout of the last
block is the model's logits; gradients reach blocks, prefixes and heads."""

from __future__ import annotations

import intermediates_checks as checks
import pytest
import torch
from pit_helpers import SIZE, save_folder, timm_blocks, tiny_timm_pit

from vitviz.checkpoints import load_checkpoint

timm = pytest.importorskip("timm")

GRIDS = [(5, 5), (3, 3), (3, 3), (2, 2)]  # per block
P = 2


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    ref = tiny_timm_pit(distilled=True, seed=21)
    loaded = load_checkpoint(save_folder(ref, tmp_path_factory.mktemp("pit") / "pit"))
    return checks.opened_case(ref, loaded, SIZE)


def _timm_outputs(ref, x) -> tuple[list, list]:
    """timm's blocks' outputs (B, P + N, C) and attention branches (B, P + N, C)."""
    blocks = timm_blocks(ref)
    taps = {
        "block": [(b, lambda o: o) for b in blocks],
        "branch": [(b.attn, lambda o: o) for b in blocks],
    }
    with checks.recording(taps) as got, torch.no_grad():
        ref(x)
    return got["block"], got["branch"]


def test_blocks_and_prefixes_equal_timms(opened) -> None:
    ref, _, x, inter = opened
    want, _ = _timm_outputs(ref, x)
    assert len(want) == 4
    checks.check_blocks_and_prefix(inter, want, GRIDS, P)


def test_heads_through_the_projection_are_the_attention_branch(opened) -> None:
    ref, _loaded, x, inter = opened
    _, want = _timm_outputs(ref, x)
    for b, heads in enumerate(inter.heads):
        N = heads.shape[2]
        assert P + GRIDS[b][0] * GRIDS[b][1] == N and inter.head_grids[b].num_prefix_tokens == P
    checks.check_heads_through_projection(inter, want)


def test_a_zeroed_head_is_its_projection_columns_zeroed(opened) -> None:
    _, loaded, x, inter = opened
    checks.check_zeroed_head(loaded, x, inter, 2, 1, checks.zero_attn_head(2, 1))
    checks.check_replaced_by_itself(loaded, x, inter, 3, 0)


def test_bad_replacements_are_refused(opened) -> None:
    _, loaded, x, _ = opened
    checks.check_bad_replacements(loaded, x, 4, 3, 4)


def test_the_readout_of_the_last_block_is_the_logits_and_gradients_flow(opened) -> None:
    _, loaded, x, _ = opened
    checks.check_readout_and_gradients(
        loaded, x, lambda inter: [inter.blocks[0], inter.block_prefix[1], inter.heads[2]]
    )
