"""vitviz's Hiera network (``vitviz.kinds.pyramid.hiera_network``, not yet a checkpoint family)
against timm's eager forward on random perturbed weights: logits within 1e-4 relative (fused and
capture paths), every block's attention within 1e-5 in timm's own layout (mask units, unrolled
order; timm's probabilities taken by the load-time check's hook on its ``qkv``); the unrolled
order against timm's own ``Unroll``."""

from __future__ import annotations

import pytest
import torch
from zoo_helpers import max_diff, randomize_

from vitviz.checkpoints.library_check import timm_forward
from vitviz.kinds.pyramid.hiera_config import HieraConfig
from vitviz.kinds.pyramid.hiera_network import HieraViT, unrolled_order

timm = pytest.importorskip("timm")

SIZE = 64


def _pair(stages: tuple[int, ...], abswin: bool) -> tuple[torch.nn.Module, HieraViT]:
    extra = dict(abs_win_pos_embed=True, global_pos_size=(4, 4)) if abswin else {}
    theirs = timm.create_model(
        "hiera_tiny_224", img_size=SIZE, embed_dim=16, num_heads=1, stages=stages,
        num_classes=5, **extra,
    )  # fmt: skip
    randomize_(theirs, seed=len(stages) + sum(stages))
    cfg = HieraConfig(
        image_size=(SIZE, SIZE), num_classes=5, dims=(16, 32, 64, 128), depths=stages,
        heads=(1, 2, 4, 8), mlp_hidden_dims=(64, 128, 256, 512), abs_win_pos=abswin,
        global_pos_size=(4, 4),
    )  # fmt: skip
    mine = HieraViT(cfg).eval()
    mine.load_state_dict(theirs.state_dict(), strict=True)
    return theirs, mine


@pytest.mark.parametrize(
    ("stages", "abswin"), [((1, 2, 1, 1), False), ((1, 1, 2, 1), True)], ids=["rel", "abswin"]
)
def test_logits_and_attention_exact(stages, abswin) -> None:
    theirs, mine = _pair(stages, abswin)
    x = torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(0))
    ref_logits, ref_attn = timm_forward(theirs, x)
    with torch.no_grad():
        fused = mine(x)
        out = mine.forward_explained(x)
    scale = float(ref_logits.abs().max())
    assert max_diff(fused, ref_logits) / scale <= 1e-4
    assert max_diff(out.logits, ref_logits) / scale <= 1e-4
    assert len(ref_attn) == len(out.attentions) == sum(stages)
    grid0 = (SIZE // 4, SIZE // 4)
    laid = [mine.library_layout(b, a, grid0) for b, a in enumerate(out.attentions)]
    assert [a.shape for a in laid] == [a.shape for a in ref_attn]
    assert max(max_diff(a, b) for a, b in zip(laid, ref_attn, strict=True)) <= 1e-5
    # rows are probabilities over the keys of the query's mask unit (zero outside)
    first = out.attentions[0][0, 0]
    assert torch.allclose(first.sum(-1), torch.ones(first.shape[0]), atol=1e-5)
    assert (first[0].reshape(16, 16)[8:, :] == 0).all() and (
        first[0].reshape(16, 16)[:, 8:] == 0
    ).all()
    assert out.stage_grids == [(16, 16), (8, 8), (4, 4), (2, 2)]


def test_unrolled_order_is_timms() -> None:
    theirs, _ = _pair((1, 1, 1, 1), False)
    grid = torch.arange(16 * 16, dtype=torch.float32).reshape(1, 256, 1)
    theirs_order = theirs.unroll(grid).reshape(-1).long()
    assert torch.equal(unrolled_order((16, 16), (2, 2), 3), theirs_order)
    assert not torch.equal(theirs_order, torch.arange(256))
