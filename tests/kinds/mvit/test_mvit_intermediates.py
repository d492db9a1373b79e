"""The MViTv2 kind's intermediates accessor (DESIGN §3) on a tiny perturbed timm MViTv2 with a
CLS token opened through vitviz: every block's patches on its query grid and its CLS equal
timm's blocks' outputs; every head's output is softmax(q·kᵀ + bias)·v plus the pooled queries
(residual pooling, DESIGN §5), read from timm's own pooled q and v, and through the projection
is timm's attention branch; a zeroed head is its projection's columns zeroed; a head replaced
by itself changes nothing; bad replacements are refused; the readout of the last block is the
model's logits; gradients reach blocks, the CLS and heads."""

from __future__ import annotations

import intermediates_checks as checks
import pytest
import torch
from mvit_helpers import SIZE, Softmaxes, save_bare, tiny_timm_mvit

from vitviz.checkpoints import load_checkpoint

timm = pytest.importorskip("timm")

GRIDS = [(16, 16), (8, 8), (8, 8), (4, 4), (2, 2)]  # per block: its queries'
P = 1


@pytest.fixture(scope="module")
def opened(tmp_path_factory):
    ref = tiny_timm_mvit(cls=True, seed=21)
    loaded = load_checkpoint(save_bare(ref, tmp_path_factory.mktemp("mvit") / "mvit.pth"))
    return checks.opened_case(ref, loaded, SIZE)


def _blocks(ref) -> list:
    return [b for s in ref.stages for b in s.blocks]


def _timm_run(ref, x) -> dict[str, list]:
    """timm's blocks' outputs, attention branches, probabilities, pooled q and v."""
    blocks = _blocks(ref)
    taps = {
        "block": [(b, lambda o: o[0]) for b in blocks],
        "branch": [(b.attn, lambda o: o[0]) for b in blocks],
        "q": [(b.attn.norm_q, lambda o: o) for b in blocks],
        "v": [(b.attn.norm_v, lambda o: o) for b in blocks],
    }
    with checks.recording(taps) as got, torch.no_grad(), Softmaxes() as mode:
        ref(x)
    got["attn"] = mode.out
    return got


def test_blocks_and_the_cls_equal_timms(opened) -> None:
    ref, _, x, inter = opened
    want = _timm_run(ref, x)["block"]
    checks.check_blocks_and_prefix(inter, want, GRIDS, P)


def test_a_head_is_its_attention_times_v_plus_its_pooled_queries(opened) -> None:
    ref, _, x, inter = opened
    run = _timm_run(ref, x)
    for b, heads in enumerate(inter.heads):
        want = run["attn"][b] @ run["v"][b] + run["q"][b]  # (B, heads, P + Nq, d)
        assert heads.shape == want.shape and heads.shape[2] == P + GRIDS[b][0] * GRIDS[b][1]
        assert float((heads - want).abs().max()) / float(want.abs().max()) < 1e-5, b
        without = run["attn"][b] @ run["v"][b]
        assert float((heads - without).abs().max()) > 1e-2  # the pooled queries are in it


def test_heads_through_the_projection_are_the_attention_branch(opened) -> None:
    ref, _, x, inter = opened
    want = _timm_run(ref, x)["branch"]
    checks.check_heads_through_projection(inter, want)


def test_a_zeroed_head_is_its_projection_columns_zeroed(opened) -> None:
    _, loaded, x, inter = opened
    checks.check_zeroed_head(loaded, x, inter, 3, 2, checks.zero_attn_head(3, 2))
    checks.check_replaced_by_itself(loaded, x, inter, 4, 0)


def test_bad_replacements_are_refused(opened) -> None:
    _, loaded, x, _ = opened
    checks.check_bad_replacements(loaded, x, 5, 4, 8)


def test_the_readout_of_the_last_block_is_the_logits_and_gradients_flow(opened) -> None:
    _, loaded, x, _ = opened
    checks.check_readout_and_gradients(
        loaded, x, lambda inter: [inter.blocks[0], inter.block_prefix[1], inter.heads[2]]
    )
