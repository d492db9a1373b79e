"""The TNT kind's intermediates accessor (DESIGN §3) on a tiny perturbed timm TNT opened through
vitviz: every block's patch tokens on the patch grid and its CLS equal timm's blocks' outputs;
every outer head's output is softmax(q·kᵀ / √d)·v, read from timm's own outer attention and v,
and through the projection is timm's outer attention branch; a zeroed head is its projection's
columns zeroed; a head replaced by itself changes nothing; bad replacements are refused; the
readout of the last block is the model's logits; gradients reach blocks, the CLS and heads."""

from __future__ import annotations

import intermediates_checks as checks
import pytest
import torch
from tnt_helpers import SETTINGS, SIZE, Softmaxes, save_bare, tiny_timm_tnt

from vitviz.checkpoints import load_checkpoint

timm = pytest.importorskip("timm")

GRID, HEADS, D = (4, 4), 4, 8


@pytest.fixture(scope="module", params=[False, True], ids=["current", "legacy"])
def opened(request, tmp_path_factory):
    ref = tiny_timm_tnt(legacy=request.param, seed=21)
    path = tmp_path_factory.mktemp("tnt") / "tnt.pth"
    loaded = load_checkpoint(save_bare(ref, path, SETTINGS))
    return checks.opened_case(ref, loaded, SIZE)


def _timm_run(ref, x) -> dict[str, list]:
    """timm's blocks' patch tokens, outer attention branches, outer probabilities and v."""
    taps = {
        "block": [(b, lambda o: o[1]) for b in ref.blocks],
        "branch": [(b.attn_out, lambda o: o) for b in ref.blocks],
        "v": [(b.attn_out.v, lambda o: o) for b in ref.blocks],
    }
    with checks.recording(taps) as got, torch.no_grad(), Softmaxes() as mode:
        ref(x)
    got["attn"] = mode.out[1::2]
    return got


def test_blocks_and_the_cls_equal_timms(opened) -> None:
    ref, _, x, inter = opened
    want = _timm_run(ref, x)["block"]
    checks.check_blocks_and_prefix(inter, want, [GRID, GRID], 1)
    for b, grid_out in enumerate(inter.blocks):
        assert tuple(grid_out.shape) == (2, 32, *GRID) and inter.block_grids[b].token_pixels == 8


def test_a_head_is_its_outer_attention_times_v(opened) -> None:
    ref, _, x, inter = opened
    run = _timm_run(ref, x)
    for b, heads in enumerate(inter.heads):
        v = run["v"][b].reshape(2, 17, HEADS, D).transpose(1, 2)
        want = run["attn"][b] @ v  # (B, heads, 1 + N, d)
        assert heads.shape == want.shape == (2, HEADS, 17, D)
        assert float((heads - want).abs().max()) / float(want.abs().max()) < 1e-5, b


def test_heads_through_the_projection_are_the_attention_branch(opened) -> None:
    ref, _, x, inter = opened
    want = _timm_run(ref, x)["branch"]
    checks.check_heads_through_projection(inter, want)


def test_a_zeroed_head_is_its_projection_columns_zeroed(opened) -> None:
    _, loaded, x, inter = opened

    def zero(model) -> None:
        checks.zero_columns(model.blocks[1].attn_out.proj.weight, 2, D)

    checks.check_zeroed_head(loaded, x, inter, 1, 2, zero)
    checks.check_replaced_by_itself(loaded, x, inter, 0, 3)


def test_bad_replacements_are_refused(opened) -> None:
    _, loaded, x, _ = opened
    checks.check_bad_replacements(loaded, x, 2, 1, 4)


def test_the_readout_of_the_last_block_is_the_logits_and_gradients_flow(opened) -> None:
    _, loaded, x, _ = opened
    checks.check_readout_and_gradients(
        loaded, x, lambda inter: [inter.blocks[0], inter.block_prefix[0], inter.heads[1]]
    )
