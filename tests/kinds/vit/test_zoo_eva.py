"""timm Eva (rotary positions): EVA-02 (axial RoPE with ref_feat_shape, SwiGLU, sub-LN,
q/k/v separate or fused with q/v biases), timm's RoPE ViTs (axial, mixed with learnt per-layer
frequencies, registers with mean pooling, with an absolute table too), DINOv3 (centred RoPE,
rotate-half, 4 registers), as bare state dicts named with ``arch`` and as timm's folders;
logits and attention against timm's eager forward; the rotary tables against timm's own;
relevance and gradient rollout through the rotary attention and SwiGLU against float64
references from their definitions; transformer attribution offered (its rules: test_explain_
attribution_parts.py)."""

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
)
from zoo_helpers import timm_reference as reference

from vitviz.blocks import ViTConfig
from vitviz.blocks.rotary import Rotary
from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.pipeline.analysis import analyze

TINY = dict(pretrained=False, img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=4,
            num_classes=3)  # fmt: skip
CASES = {  # id: (timm name, options beyond TINY, what vitviz must read)
    "eva02": ("eva02_tiny_patch14_224", {}, dict(rope="axial", swiglu=True)),
    "eva02-sub-ln": ("eva02_base_patch16_clip_224", {},
                     dict(rope="axial", swiglu=True, mlp_norm=True, attn_norm=True)),
    "eva02-qkv-fused-sub-ln": ("eva02_tiny_patch14_224", {"scale_mlp": True},
                               dict(rope="axial", mlp_norm=True)),
    "rope-axial": ("vit_small_patch16_rope_224", {}, dict(rope="axial", rope_xy=True)),
    "rope-mixed": ("vit_small_patch16_rope_mixed_224", {}, dict(rope="mixed")),
    "rope-ape": ("vit_small_patch16_rope_ape_224", {}, dict(rope="axial", pos_embed="learned")),
    "rope-reg1-gap": ("vit_base_patch16_rope_reg1_gap_256", {},
                      dict(rope="axial", class_token=False, num_register_tokens=1)),
    "dinov3": ("vit_small_patch16_dinov3", {}, dict(rope="dinov3", rope_half=True,
                                                    num_register_tokens=4, qkv_bias=False)),
    "dinov3-qkvb": ("vit_small_patch16_dinov3_qkvb", {}, dict(rope="dinov3", qkv_bias=True)),
    "eva02-qk-norm": ("eva02_tiny_patch14_224", {"qk_norm": True}, dict(qk_norm=True)),
}  # fmt: skip


def tiny(name: str, seed: int = 0, **options) -> torch.nn.Module:
    torch.manual_seed(seed)
    return randomize_(timm.create_model(name, **{**TINY, **options}), seed=seed)


def check_exact(model: torch.nn.Module, loaded, seed: int) -> None:
    x = images(2, 32, 32, seed=seed)
    ref_logits, ref_attn = reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL * float(ref_logits.abs().max()))
    assert_attention(ref_attn, attn)


@pytest.mark.parametrize("case", sorted(CASES))
def test_timm_eva_folder_opens_exactly(tmp_path: Path, case: str) -> None:
    name, options, expect = CASES[case]
    model = tiny(name, seed=1, **options)
    save_for_hf(model, tmp_path / case, safe_serialization=True)
    loaded = load_checkpoint(tmp_path / case)
    assert loaded.family == "timm-eva"
    for key, value in expect.items():
        assert getattr(loaded.config, key) == value, key
    assert any("checked against timm" in n for n in loaded.notes), loaded.notes
    check_exact(model, loaded, seed=1)


@pytest.mark.parametrize("case", ["eva02", "rope-mixed", "rope-reg1-gap", "dinov3"])
def test_timm_eva_bare_state_dict_named_with_arch(tmp_path: Path, case: str) -> None:
    name, options, expect = CASES[case]
    model = tiny(name, seed=2, **options)
    path = tmp_path / f"{case}.pth"
    torch.save(model.state_dict(), path)
    size = list(model.patch_embed.img_size)  # a rotary ViT's size is not in its tensors
    loaded = load_checkpoint(path, {"arch": name, "heads": 4, "image_size": size})
    assert loaded.family == "timm-eva" and loaded.config.rope == expect["rope"]
    check_exact(model, loaded, seed=2)


def test_a_bare_rotary_state_dict_without_a_name_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "eva.pth"
    torch.save(tiny("eva02_tiny_patch14_224").state_dict(), path)
    with pytest.raises(CheckpointError, match=r"--arch"):
        load_checkpoint(path)


def test_a_bare_state_dict_with_sub_ln_named_as_eva02_tiny_is_refused(tmp_path: Path) -> None:
    """The named architecture has no sub-LN, the weights have: another architecture."""
    path = tmp_path / "eva.pth"
    torch.save(tiny("eva02_tiny_patch14_224", scale_mlp=True).state_dict(), path)
    with pytest.raises(CheckpointError, match="not that architecture"):
        load_checkpoint(path, {"arch": "eva02_tiny_patch14_224", "heads": 4})


@pytest.mark.parametrize(
    "options, part",
    [({"dynamic_img_pad": True}, "pads the image"), ({"use_post_norm": True}, "post-norm")],
    ids=["padding-patch-embed", "post-norm"],  # an Eva's attention pool (MAP): test_zoo_pe_core.py
)  # fmt: skip
def test_parts_vitviz_does_not_model_are_refused_by_name(tmp_path: Path, options, part) -> None:
    save_for_hf(tiny("eva02_tiny_patch14_224", **options), tmp_path / "m", safe_serialization=True)
    with pytest.raises(CheckpointError, match=part):
        load_checkpoint(tmp_path / "m")


def test_the_rotary_tables_are_timms() -> None:
    """vitviz's sin/cos tables equal timm's for each kind, at a grid other than the reference
    one (EVA's rescaling) and a non-square one."""
    from timm.layers.pos_embed_sincos import create_rope_embed

    for kind, args, cfg in (
        ("cat", dict(in_pixels=False, ref_feat_shape=(16, 16), temperature=10000.0),
         dict(rope="axial", rope_ref_grid=(16, 16))),
        ("cat", dict(in_pixels=False, grid_indexing="xy", temperature=100.0),
         dict(rope="axial", rope_xy=True, rope_temperature=100.0)),
        ("dinov3", dict(temperature=100.0, rotate_half=True),
         dict(rope="dinov3", rope_half=True, rope_temperature=100.0)),
    ):  # fmt: skip
        theirs = create_rope_embed(kind, dim=64, num_heads=4, feat_shape=[3, 5], **args)
        config = ViTConfig(image_size=(24, 40), patch_size=8, dim=64, heads=4, depth=1, **cfg)
        sin, cos = Rotary(config).tables((3, 5), torch.zeros(1))[0]
        want_sin, want_cos = theirs.get_embed().chunk(2, -1)
        torch.testing.assert_close(sin[0, 0], want_sin, atol=2e-6, rtol=0)
        torch.testing.assert_close(cos[0, 0], want_cos, atol=2e-6, rtol=0)


def test_another_input_size_follows_the_rotary_formula(tmp_path: Path) -> None:
    """DINOv3 takes any size in timm (dynamic_img_size): vitviz at 48×32 equals timm there."""
    model = tiny("vit_small_patch16_dinov3", seed=3)
    save_for_hf(model, tmp_path / "d3", safe_serialization=True)
    loaded = load_checkpoint(tmp_path / "d3")
    x = images(1, 48, 32, seed=3)
    ref_logits, ref_attn = reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL * float(ref_logits.abs().max()))
    assert_attention(ref_attn, attn)


def test_relevance_and_gradient_rollout_through_rope_and_swiglu(tmp_path: Path, photo_files):
    """Float64 references from the definitions (DESIGN §5) on timm's own EVA-02 attention, with
    its autograd: relevance R = I + Σ Ā_l R, Ā_l = E_h[(∇A ⊙ A)⁺]; gradient rollout's chain.
    Transformer attribution is offered through the rotary positions and the SwiGLU gate."""
    model = tiny("eva02_tiny_patch14_224", seed=4, global_pool="token")
    save_for_hf(model, tmp_path / "eva", safe_serialization=True)
    loaded = load_checkpoint(tmp_path / "eva")
    a = analyze(loaded, photo_files["chelsea"], gradients=True)
    target = a.top_class
    assert_timm_relevance_maps(a, model, target, atol=1e-6)
    assert_attribution_offered(a, target)


def test_the_model_info_names_the_parts(tmp_path: Path, capsys) -> None:
    from vitviz.cli import main

    model = tiny("eva02_base_patch16_clip_224", seed=5)
    save_for_hf(model, tmp_path / "e", safe_serialization=True)
    assert main(["info", str(tmp_path / "e")]) == 0
    out = capsys.readouterr().out
    parts = next(line for line in out.splitlines() if line.startswith("parts:"))
    words = (
        "rotary positions (EVA-02's",
        "SwiGLU MLP with a norm before fc2 (sub-LN)",
        "a norm on the heads' output before proj (sub-LN)",
        "a learnt position table",
    )
    for word in words:
        assert word in parts, parts


@pytest.mark.parametrize("gated", [False, True], ids=["gelu-mlp", "swiglu"])
def test_transformers_dinov3_folder_opens_exactly(tmp_path: Path, gated: bool) -> None:
    """DINOv3ViTModel (transformers): its output is the normed CLS token (pooler_output)."""
    import transformers as tr

    config = tr.DINOv3ViTConfig(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        image_size=32, patch_size=8, num_register_tokens=0 if gated else 2,
        use_gated_mlp=gated, hidden_act="silu" if gated else "gelu", key_bias=gated,
        attn_implementation="eager",
    )  # fmt: skip
    torch.manual_seed(6)
    model = randomize_(tr.DINOv3ViTModel(config), seed=6)
    model.save_pretrained(tmp_path / "d3")
    loaded = load_checkpoint(tmp_path / "d3")
    assert loaded.family == "huggingface-dinov3_vit" and loaded.config.rope == "dinov3"
    assert loaded.config.swiglu == gated
    x = images(2, 32, 32, seed=6)
    with torch.no_grad():
        ref = model(pixel_values=x, output_attentions=True)
    logits, attn = ours(loaded, x)
    assert_close("CLS", ref.pooler_output, logits, LOGIT_ATOL)
    assert_attention(list(ref.attentions), attn)


def test_vitvizs_own_format_keeps_the_rotary_settings(tmp_path: Path) -> None:
    """Saved in vitviz's format and opened again: the same config (rope_ref_grid a pair) and
    the same logits (mixed: the learnt frequencies travel as ``rope.freqs``)."""
    from vitviz.checkpoints.native import save_checkpoint

    for name in ("eva02_tiny_patch14_224", "vit_small_patch16_rope_mixed_224"):
        save_for_hf(tiny(name, seed=7), tmp_path / name, safe_serialization=True)
        loaded = load_checkpoint(tmp_path / name)
        again = load_checkpoint(save_checkpoint(loaded.model, tmp_path / f"{name}.safetensors"))
        assert again.config == loaded.config
        x = images(1, 32, 32, seed=7)
        with torch.no_grad():
            assert torch.equal(again.model(x), loaded.model(x))


def test_an_eva_laid_out_otherwise_by_another_timm_is_refused_not_guessed() -> None:
    """timm 1.0.29's RotaryEmbeddingCat has no ``rotate_half``: a setting vitviz can't read is
    refused in one line naming it (it was an AttributeError)."""
    from vitviz.kinds.vit.families.timm_eva_arch import EvaRefusalError, build_meta, describe_eva

    model = build_meta("eva02_tiny_patch14_224", {})
    if hasattr(model.rope, "rotate_half"):  # a timm before 1.0.31 has none: as it comes
        del model.rope.rotate_half
    with pytest.raises(EvaRefusalError, match="rotate_half"):
        describe_eva(model)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_fused_path_is_timms_fused_forward_to_the_bit(tmp_path: Path, case: str) -> None:
    """vitviz's fused path (scaled_dot_product_attention) runs timm's own forward's operations in
    its order (rotary turn, scale inside the kernel, sub-LN, LayerScale): the same float32
    logits, not merely close. timm's explicit path rounds otherwise (DESIGN §3: each path is
    compared with the library's same path)."""
    name, options, _ = CASES[case]
    model = tiny(name, seed=3, **options).eval()
    save_for_hf(model, tmp_path / case, safe_serialization=True)
    loaded = load_checkpoint(tmp_path / case)
    x = images(2, 32, 32, seed=3)
    assert all(b.attn.fused_attn for b in model.blocks)  # timm's default: its fused branch
    with torch.no_grad():
        theirs, mine = model(x), loaded.model(x)
    assert torch.equal(mine, theirs), float((mine - theirs).abs().max())
