"""The model options the zoo needs (post-norm, no final norm, partial position prefix, resampling
variants, attention width != dim, pooling over every token, linear patch embedding): the capture
path equals the fused path, defaults are unchanged, and configs round-trip."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from zoo_helpers import images, max_diff, randomize_

from vitviz.blocks import VisionTransformer, ViTConfig
from vitviz.blocks.posembed import resample_grid_embedding

BASE = dict(image_size=32, patch_size=8, num_classes=5, dim=32, depth=2, heads=4)
OPTIONS = {
    "post-norm-relu": dict(norm_first=False, activation="relu", norm_eps=1e-5),
    "no-final-norm": dict(norm_first=False, final_norm=False),
    "registers-cls-pos-only": dict(
        num_register_tokens=3, pos_embed_prefix=1, pos_embed_interp="bicubic_antialias"
    ),
    "offset-resampling": dict(pos_embed_interp="bicubic_offset", layer_scale_init=0.5),
    "attn-head-dim": dict(attn_head_dim=24, qkv_bias=False),
    "avg-all-tokens": dict(global_pool="avg", pool_include_prefix=True, fc_norm=True),
    "linear-patches": dict(patch_embed="linear", patch_norm_pre=True, patch_norm_post=True),
}


@pytest.mark.parametrize("name", list(OPTIONS))
@pytest.mark.parametrize("size", [(32, 32), (40, 24)])
def test_capture_path_equals_fused_path(name: str, size: tuple[int, int]) -> None:
    config = ViTConfig(**BASE, **OPTIONS[name])
    assert ViTConfig.from_dict(config.to_dict()) == config
    torch.manual_seed(0)
    model = randomize_(VisionTransformer(config))
    x = images(2, *size)
    with torch.no_grad():
        fused = model(x)
        out = model.forward_explained(x, capture_attention=True)
    assert max_diff(fused, out.logits) < 1e-5
    n = config.num_prefix_tokens + (size[0] // 8) * (size[1] // 8)
    assert out.attentions[0].shape == (2, 4, n, n)


def test_defaults_give_the_same_state_dict_names() -> None:
    keys = set(VisionTransformer(ViTConfig(**BASE)).state_dict())
    assert "patch_embed.norm.weight" not in keys and "patch_embed.proj.weight" in keys
    assert ViTConfig(**BASE).num_pos_prefix_tokens == 1


def test_partial_prefix_positions_and_post_norm_by_hand() -> None:
    """CLS gets its table entry, registers none; post-norm = norm(x + f(x))."""
    config = ViTConfig(
        **{**BASE, "depth": 1}, num_register_tokens=2, pos_embed_prefix=1, norm_first=False
    )
    torch.manual_seed(1)
    model = randomize_(VisionTransformer(config), seed=1)
    x = images(1, 32, 32)
    tokens, _ = model.embed(x)
    pos = model.pos_embed
    assert torch.allclose(tokens[:, 0], (model.cls_token + pos[:, :1])[:, 0])
    assert torch.equal(tokens[:, 1:3], model.reg_token)
    block = model.blocks[0]
    with torch.no_grad():
        h = block.norm1(tokens + block.attn(tokens)[0])
        expected = block.norm2(h + block.mlp(h))
        assert max_diff(block(tokens)[0], expected) < 1e-6


def test_offset_resampling_matches_the_scale_factor_formula() -> None:
    table = torch.randn(1, 16, 8)
    got = resample_grid_embedding(table, (4, 4), (6, 3), method="bicubic_offset")
    grid = table.reshape(1, 4, 4, 8).permute(0, 3, 1, 2)
    want = F.interpolate(grid, scale_factor=(6.1 / 4, 3.1 / 4), mode="bicubic")
    assert torch.equal(got, want.permute(0, 2, 3, 1).reshape(1, 18, 8))


@pytest.mark.parametrize(
    "bad",
    [
        dict(pos_embed_prefix=2),
        dict(patch_norm_pre=True),
        dict(pos_embed_interp="nearest"),
        dict(patch_embed="mlp"),
        dict(no_embed_class=True, pos_embed_prefix=1),
    ],
)
def test_invalid_options_are_refused(bad: dict) -> None:
    with pytest.raises(ValueError, match="Invalid ViT config"):
        ViTConfig(**BASE, **bad)
