"""What the library check builds for a bare timm ViT no timm name has (DESIGN §4 "Like with
like"): timm's VisionTransformer with an attention pool, timm's VisionTransformerRelPos for a
relative-position ViT, or a note naming the setting their
keywords can't give."""

from __future__ import annotations

from pathlib import Path

import timm
import torch
from zoo_helpers import randomize_

from vitviz.blocks import ViTConfig
from vitviz.checkpoints import load_checkpoint
from vitviz.kinds.vit.families.timm_check_args import common_reference

SMALL = dict(image_size=32, patch_size=8, dim=32, depth=2, heads=4, num_classes=3)


def test_a_bare_relpos_vit_is_checked_against_timms_relpos_class(tmp_path: Path) -> None:
    """A relpos ViT's bare file no timm name has (and one of residual post-norm blocks, which
    its settings say) is checked against timm's VisionTransformerRelPos built as read."""
    bare = {"heads": 4, "image_size": 32, "activation": "gelu"}
    for name, given in (
        ("vit_relpos_small_patch16_224", {}),
        ("vit_relpos_small_patch16_rpn_224", {"res_post_norm": True}),
    ):
        torch.manual_seed(3)
        model = timm.create_model(
            name, pretrained=False, img_size=32, patch_size=8, embed_dim=32, depth=2,
            num_heads=4, num_classes=3,
        )  # fmt: skip
        torch.save(randomize_(model, seed=3).state_dict(), tmp_path / f"{name}.pth")
        loaded = load_checkpoint(tmp_path / f"{name}.pth", {**bare, **given})
        checked = [n for n in loaded.notes if n.startswith("checked against timm")]
        assert checked and "VisionTransformerRelPos" in checked[0], loaded.notes
        x = torch.randn(1, 3, 32, 32)
        with torch.no_grad():
            torch.testing.assert_close(loaded.model(x), model(x), rtol=0, atol=1e-4)


def test_what_timm_cant_build_is_named() -> None:
    pool = ViTConfig(**SMALL, global_pool="map", class_token=False, pool_heads=2)
    assert "attention pool of 2 heads" in common_reference(pool).unexpressible
    same = ViTConfig(**SMALL, global_pool="map", class_token=False, pool_heads=4)
    assert common_reference(same).unexpressible == ""
    relpos = dict(SMALL, rel_pos_bias=True, rel_pos_mlp=16, pos_embed="none")
    plain = common_reference(ViTConfig(**relpos, class_token=False, global_pool="avg"))
    assert plain.unexpressible == "" and plain.shown_as == "VisionTransformerRelPos"
    registers = ViTConfig(**relpos, class_token=False, global_pool="avg", num_register_tokens=1)
    assert "register tokens" in common_reference(registers).unexpressible
