"""Blocks of several parallel branches (timm's ParallelThingsBlock, vitviz.blocks.branches) on
the ViT kind's accessor and analysis: each layer's heads are its branches' side by side, read
at each branch's own output projection (DESIGN §3). The library comparison of the logits and
attention: tests/kinds/vit/test_timm_block_parts.py; transformer attribution's rules in float64:
tests/explain/test_explain_attribution_parts.py."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import timm
import torch
from timm.models import save_for_hf
from zoo_helpers import images, randomize_

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kindapi import kind_of
from vitviz.pipeline.analysis import analyze

ARGS = dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2)
H = 2  # heads of one branch; a layer has 2 branches


@pytest.fixture(scope="module")
def opened(tmp_path_factory: pytest.TempPathFactory) -> tuple[object, torch.nn.Module]:
    torch.manual_seed(0)
    name = "vit_small_patch16_18x2_224"
    model = randomize_(timm.create_model(name, num_classes=5, **ARGS)).eval()
    folder: Path = tmp_path_factory.mktemp("branches")
    save_for_hf(model, folder, model_args=ARGS, safe_serialization=True)
    return load_checkpoint(folder), model


def _run(loaded, x, model=None, **kw):
    with torch.no_grad():
        return kind_of(loaded).intermediates(model or loaded.model, x, **kw)


def test_blocks_equal_timms_and_each_layer_has_every_branchs_heads(opened) -> None:
    loaded, library = opened
    x = images(2, 32, 32).double()
    out = _run(loaded, x, copy.deepcopy(loaded.model).double())
    with torch.no_grad():
        theirs = (
            copy.deepcopy(library)
            .double()
            .forward_intermediates(x, return_prefix_tokens=True, intermediates_only=True)
        )
    for ours, ours_prefix, (patches, prefix) in zip(
        out.blocks, out.block_prefix, theirs, strict=True
    ):
        torch.testing.assert_close(ours, patches, rtol=1e-9, atol=1e-9)
        torch.testing.assert_close(ours_prefix, prefix, rtol=1e-9, atol=1e-9)
    assert [tuple(h.shape) for h in out.heads] == [(2, 2 * H, 17, 16)] * 2


def test_a_zeroed_head_of_the_second_branch_is_its_own_projection_columns_zeroed(opened) -> None:
    loaded, _ = opened
    x = images(2, 32, 32, seed=1)
    plain = _run(loaded, x)
    head = H + 1  # the second branch's second head
    ablated = _run(loaded, x, replace={(1, head): None})
    assert not ablated.heads[1][:, head].any() and ablated.heads[1][:, :head].any()
    by_hand = copy.deepcopy(loaded.model)
    with torch.no_grad():
        by_hand.blocks[1].attns[1].attn.proj.weight[:, 16:32] = 0.0
    reference = _run(loaded, x, by_hand)
    torch.testing.assert_close(ablated.logits, reference.logits, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(ablated.logits, plain.logits)
    same = _run(loaded, x, replace={(0, head): plain.heads[0][:, head]})
    torch.testing.assert_close(same.logits, plain.logits, rtol=0, atol=1e-6)
    with pytest.raises(ValueError, match="heads 0–3"):
        _run(loaded, x, replace={(0, 2 * H): None})


def test_the_analysis_shows_every_branchs_heads_and_gradcam_reads_the_blocks_output(
    opened, photo_files
) -> None:
    """A block of several branches has a norm per branch, no norm1: Grad-CAM's ``auto`` reads
    the last block's output, a named norm1 is refused in one line (DESIGN §5)."""
    loaded, _ = opened
    analysis = analyze(loaded, photo_files["chelsea"])
    kind = kind_of(loaded)
    assert [r.heads for r in kind.layer_rows(analysis)] == [2 * H, 2 * H]
    assert get_method("gradcam").unavailable(analysis) is None
    assert kind.cam_layers(loaded.model).auto == "1.output"
    torch.testing.assert_close(
        get_method("gradcam")(analysis),
        get_method("gradcam")(analysis, params={"layer": "-1.output"}),
        rtol=0,
        atol=0,
    )
    with pytest.raises(ValueError, match=r"block 1 of this .* has no norm1"):
        get_method("gradcam")(analysis, params={"layer": "-1.norm1"})
