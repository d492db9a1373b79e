"""timm's relative-position ViTs (``vision_transformer_relpos``: ``vit_relpos_*``,
``vit_srelpos_*``): no absolute positions; each layer's attention adds a bias from an MLP on
log-spaced relative offsets (timm ``RelPosMlp``), or from one MLP shared by every layer, or a
table (``rel_pos_type='bias'``); no CLS (mean pool through fc_norm or the final norm), a CLS
token (zero bias to and from it), or both (clsgap). Logits and attention against timm's eager
forward, bare and folder; relevance and gradient rollout through the MLP bias against float64
references from their definitions; transformer attribution offered; the
residual post-norm (rpn) blocks, here and in timm's plain ViT."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from timm.models import save_for_hf
from zoo_helpers import (
    LOGIT_ATOL,
    assert_attention,
    assert_attribution_offered,
    assert_close,
    assert_timm_relevance_maps,
    images,
    ours,
    randomize_,
    timm_reference,
)

from vitviz.blocks.position_bias import MlpPositionBias
from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.pipeline.analysis import analyze

TINY = dict(pretrained=False, img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4,
            num_classes=3)  # fmt: skip
BARE = {"heads": 4, "image_size": 32, "activation": "gelu"}  # what a bare file can't say
CASES = {
    "mlp": ("vit_relpos_small_patch16_224", {}),
    "shared": ("vit_srelpos_small_patch16_224", {}),
    "cls": ("vit_relpos_medium_patch16_cls_224", {}),
    "clsgap": ("vit_relpos_base_patch16_clsgap_224", {}),
    "table": ("vit_relpos_small_patch16_224", {"rel_pos_type": "bias"}),
    "table-cls": ("vit_relpos_medium_patch16_cls_224", {"rel_pos_type": "bias"}),
}


def tiny(name: str, seed: int = 0, **options) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = timm.create_model(name, **{**TINY, **options})
    return randomize_(model, seed=seed).eval()


def test_the_mlp_bias_is_timms(tmp_path: Path) -> None:
    """The MLP on log offsets, read through the offset index, zero-padded for a CLS token."""
    from timm.layers import RelPosMlp

    for grid, prefix in (((4, 4), 0), ((3, 5), 1)):
        torch.manual_seed(1)
        theirs = RelPosMlp(window_size=grid, num_heads=3, hidden_dim=8, prefix_tokens=prefix)
        randomize_(theirs, seed=1)
        mine = MlpPositionBias(3, 8, grid, prefix)
        mine.load_state_dict({k.removeprefix("mlp."): v for k, v in theirs.state_dict().items()})
        torch.testing.assert_close(mine(), theirs.get_bias()[0], rtol=0, atol=1e-6)


@pytest.mark.parametrize("case", list(CASES))
def test_timm_relpos_opens_exactly_bare_and_folder(tmp_path: Path, case: str) -> None:
    from zoo_helpers import timm_reference

    name, options = CASES[case]
    model = tiny(name, **options)
    save_for_hf(model, tmp_path / "folder", safe_serialization=True)
    torch.save(model.state_dict(), tmp_path / "bare.pth")
    x = images(2, 32, 32)
    ref_logits, ref_attn = timm_reference(model, x)
    theirs = model.shared_rel_pos or model.blocks[0].attn.rel_pos
    hidden = theirs.mlp.fc1.out_features if hasattr(theirs, "mlp") else 0  # 0: a table
    assert (hidden == 0) == case.startswith("table")
    for path, settings in ((tmp_path / "folder", None), (tmp_path / "bare.pth", BARE)):
        loaded = load_checkpoint(path, settings)
        cfg = loaded.config
        assert cfg.rel_pos_bias and cfg.pos_embed == "none"
        assert cfg.rel_pos_mlp == hidden and cfg.rel_pos_shared == (case == "shared")
        # a bare file of no timm name too: timm's VisionTransformerRelPos built with it
        assert any(n.startswith("checked against timm") for n in loaded.notes), loaded.notes
        logits, attn = ours(loaded, x)
        assert_close("logits", ref_logits, logits, LOGIT_ATOL)
        assert_attention(ref_attn, attn)


@pytest.mark.parametrize("name", ["vit_base_patch16_rpn_224", "vit_relpos_small_patch16_rpn_224"])
def test_timm_residual_post_norm_vits_open_exactly(tmp_path: Path, name: str) -> None:
    """timm's ResPostBlock / ResPostRelPosBlock (x + norm1(attn(x))), folder and bare: the
    attention reads unnormalised tokens, so float32 rounding shows any difference of order;
    vitviz keeps timm's (its patch tokens in the patch embedding's memory layout), and the
    numbers are timm's."""
    model = tiny(name, seed=4)
    save_for_hf(model, tmp_path / "rpn", safe_serialization=True)
    torch.save(model.state_dict(), tmp_path / "rpn.pth")
    x = images(1, 32, 32, seed=4)
    ref_logits, ref_attn = timm_reference(model, x)
    for path in (tmp_path / "rpn", tmp_path / "rpn.pth"):
        loaded = load_checkpoint(path, None if path.is_dir() else {"arch": name, **BARE})
        assert loaded.config.res_post_norm
        assert any(n.startswith("checked against timm") for n in loaded.notes), loaded.notes
        logits, attn = ours(loaded, x)
        assert_close("logits", ref_logits, logits, LOGIT_ATOL)
        assert_attention(ref_attn, attn)


def test_residual_post_norm_blocks_say_what_they_lack(photo_files) -> None:
    """vitviz's own ViT with residual post-norm blocks: its norm1 normalises the attention's
    output, so the CAM family's Grad-CAM reads the last block's output at ``auto`` and token
    Grad-CAM of the fixed definition (norm1's output as the tokens) is refused with the reason
    (DESIGN §5); transformer attribution is offered."""
    from vitviz.blocks import VisionTransformer, ViTConfig
    from vitviz.checkpoints import LoadedModel
    from vitviz.checkpoints.native import default_preprocessing
    from vitviz.explain.gradcam import token_gradcam

    cfg = ViTConfig(image_size=32, patch_size=8, dim=32, depth=2, heads=4, num_classes=3,
                    res_post_norm=True)  # fmt: skip
    torch.manual_seed(0)
    model = VisionTransformer(cfg).eval()
    loaded = LoadedModel(model, [f"c{i}" for i in range(3)], default_preprocessing(cfg), "vitviz")
    a = analyze(loaded, photo_files["chelsea"])
    assert get_method("gradcam").unavailable(a) is None
    assert loaded.kind.cam_layers(model).auto == "1.output"
    with pytest.raises(ValueError, match="last block is post-norm"):
        token_gradcam(model, a.input[None], 0)
    assert_attribution_offered(a)


@pytest.mark.parametrize("case", ["cls", "shared"])
def test_relevance_and_gradient_rollout_through_the_mlp_bias(
    tmp_path: Path, photo_files, case: str
) -> None:
    """Float64 references from the definitions (DESIGN §5) on timm's own attention, with its
    autograd: relevance R = I + Σ Ā_l R, Ā_l = E_h[(∇A ⊙ A)⁺], the query's row min-max scaled;
    gradient rollout's chain of rownorm((E_h[∇A ⊙ A])⁺ + I), scaled to max 1. The query is
    the CLS token, or without one the mean of the patch queries' rows."""
    name, options = CASES[case]
    model = tiny(name, seed=2, **options)
    save_for_hf(model, tmp_path / "folder", safe_serialization=True)
    loaded = load_checkpoint(tmp_path / "folder")
    a = analyze(loaded, photo_files["chelsea"], gradients=True)
    target = a.top_class
    assert_timm_relevance_maps(a, model, target, atol=1e-5)
    assert_attribution_offered(a, target)
