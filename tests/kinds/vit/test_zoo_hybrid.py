"""timm hybrid ViTs (stems): a ResNetV2 (weight-standardised convs + GroupNorm) or a
ResNet-D (deep stem, avg-down, BatchNorm in eval mode) before a Conv2d projection to the
tokens, or MobileCLIP's convolutional stem without one, as a bare state dict and as timm's
folder; logits and attention against timm's eager
forward on random weights (BatchNorm running statistics randomised too), the token grid in image
coordinates, every map method on the tokens, relevance and gradient rollout against float64
references from their definitions and transformer attribution against the transcription of the
authors' propagation (it stops at the tokens: the stem is not in its relevance chain)."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from test_explain_attribution import RefViT, authors_generate_lrp
from timm.models import save_for_hf
from torch import nn
from zoo_helpers import (
    LOGIT_ATOL,
    assert_attention,
    assert_close,
    assert_timm_relevance_maps,
    ours,
    randomize_,
    randomize_stem_,
    timm_reference,
)

from vitviz.blocks.config import ViTConfig
from vitviz.blocks.stem_config import StemConfig
from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.explain import transformer_attribution
from vitviz.explain.methods import get_method, method_names
from vitviz.pipeline.analysis import analyze

TINY = dict(pretrained=False, embed_dim=32, depth=2, num_heads=4, num_classes=3)
# (timm name, its options, image side, token stride, bare state dict recognised by its tensors)
CASES = {
    "r-stem": ("vit_tiny_r_s16_p8_224", dict(TINY, patch_size=2), 32, 8),  # stem only, p 2
    "r26": ("vit_small_r26_s32_224", TINY, 64, 32),  # ResNetV2 (2, 2, 2, 2)
    "resnet50d-s16": ("vit_small_resnet50d_s16_224", TINY, 32, 16),  # ResNet-D (3, 4, 6)
}


def tiny_hybrid(case: str, seed: int = 0) -> tuple[nn.Module, int]:
    name, options, side, _ = CASES[case]
    torch.manual_seed(seed)
    model = timm.create_model(name, img_size=side, **options)
    model = randomize_(model, seed=seed, noise_dtype=torch.float32)
    return randomize_stem_(model, seed), side


def images(b: int, side: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(b, 3, side, side, generator=torch.Generator().manual_seed(1000 + seed))


@pytest.mark.parametrize("case", list(CASES))
def test_timm_hybrid_state_dict_and_folder_open_exactly(tmp_path: Path, case: str) -> None:
    model, side = tiny_hybrid(case)
    stride = CASES[case][3]
    x = images(2, side)
    ref_logits, ref_attn = timm_reference(model, x)
    assert ref_logits.isfinite().all() and ref_logits.std() > 0.01  # a network that computes
    torch.save(model.state_dict(), tmp_path / "bare.pth")
    save_for_hf(model, tmp_path / "folder", safe_serialization=True)
    for path, given in ((tmp_path / "bare.pth", {"heads": 4}), (tmp_path / "folder", None)):
        loaded = load_checkpoint(path, config=given)
        cfg = loaded.config
        assert loaded.family == "timm-hybrid" and cfg.patch_embed == "hybrid"
        assert cfg.patch_size == stride and cfg.grid_size == (side // stride, side // stride)
        assert cfg.heads == 4 and cfg.image_size == (side, side)
        logits, attn = ours(loaded, x)
        assert_close("logits", ref_logits, logits, LOGIT_ATOL)
        assert_attention(ref_attn, attn)
    assert any("checked against timm" in n for n in loaded.notes), loaded.notes


def test_the_stem_config_round_trips_and_names_itself() -> None:
    stem = StemConfig("resnetv2", (3, 4, 9), 64, (256, 512, 1024), 1)
    cfg = ViTConfig(image_size=64, patch_size=16, dim=32, depth=1, heads=4,
                    patch_embed="hybrid", stem=stem)  # fmt: skip
    again = ViTConfig.from_dict(cfg.to_dict())
    assert again == cfg and isinstance(again.stem, StemConfig) and again.stem.layers == (3, 4, 9)
    assert stem.words() == "ResNetV2 (R50) stem, stride 16, then a 1×1 projection"
    with pytest.raises(ValueError, match="stem's stride 16"):
        cfg.replace(patch_size=32)
    with pytest.raises(ValueError, match="go together"):
        cfg.replace(patch_embed="conv")


def test_a_recognised_bare_hybrid_uses_its_timm_settings(tmp_path: Path) -> None:
    """A bare dict whose tensors are one timm name's (the tiny R+ViT at its own widths): its
    heads come from the name, and the load-time library check runs on it."""
    torch.manual_seed(1)
    model = timm.create_model("vit_tiny_r_s16_p8_224", pretrained=False, img_size=64)
    randomize_stem_(randomize_(model, seed=1, noise_dtype=torch.float32), 1)
    path = tmp_path / "r_ti.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path)
    assert loaded.config.heads == 3 and loaded.config.stem.kind == "resnetv2"
    notes = " ".join(loaded.notes)
    assert "recognised as timm's vit_tiny_r_s16_p8_224" in notes
    assert "checked against timm" in notes


def test_a_backbone_with_other_tensors_is_refused_in_one_line(tmp_path: Path) -> None:
    model, _ = tiny_hybrid("r26")
    state = model.state_dict()
    state["patch_embed.backbone.stages.0.blocks.0.extra.weight"] = torch.zeros(3)
    torch.save(state, tmp_path / "odd.pth")
    with pytest.raises(CheckpointError, match="can't express") as info:
        load_checkpoint(tmp_path / "odd.pth", config={"heads": 4})
    assert "\n" not in str(info.value)
    del state["patch_embed.backbone.stages.0.blocks.0.extra.weight"]
    del state["patch_embed.backbone.stages.1.blocks.0.downsample.norm.bias"]
    torch.save(state, tmp_path / "short.pth")
    with pytest.raises(CheckpointError, match="missing"):
        load_checkpoint(tmp_path / "short.pth", config={"heads": 4})


def test_mobileclips_stem_opens_exactly(tmp_path: Path) -> None:
    """vit_base_mci_224: three unpadded convs (BatchNorm + GELU between), no projection, a
    position table without the CLS entry; bare (its assumptions said) and as timm's folder."""
    torch.manual_seed(2)
    model = timm.create_model("vit_base_mci_224", pretrained=False, img_size=32, depth=1,
                              num_classes=3)  # fmt: skip
    randomize_stem_(randomize_(model, seed=2, noise_dtype=torch.float32), 2)
    x = images(1, 32, seed=2)
    ref_logits, ref_attn = timm_reference(model, x)
    save_for_hf(model, tmp_path / "mci", safe_serialization=True)
    torch.save(model.state_dict(), tmp_path / "mci.pth")
    for path in (tmp_path / "mci", tmp_path / "mci.pth"):
        loaded = load_checkpoint(path)
        cfg = loaded.config
        assert cfg.stem.kind == "convstem" and cfg.no_embed_class and cfg.grid_size == (2, 2)
        assert cfg.stem.words() == "MobileCLIP's convolutional stem, stride 16, no projection"
        logits, attn = ours(loaded, x)
        assert_close("logits", ref_logits, logits, LOGIT_ATOL)
        assert_attention(ref_attn, attn)


def test_every_method_maps_the_token_grid(tmp_path: Path, photo_files) -> None:
    model, _ = tiny_hybrid("r-stem", seed=3)
    torch.save(model.state_dict(), tmp_path / "h.pth")
    loaded = load_checkpoint(tmp_path / "h.pth", config={"heads": 4})
    a = analyze(loaded, photo_files["chelsea"], gradients=True)
    assert a.grid == (4, 4) and a.patch_size == 8
    for name in method_names():
        method = get_method(name)
        if method.unavailable(a) is not None:
            continue
        m = method(a, None, a.top_class, {})
        shape = (4, 4, 3) if method.map_kind == "rgb" else (4, 4)
        assert m.shape == shape and m.isfinite().all(), name
    assert get_method("transformer-attribution").unavailable(a) is None
    assert get_method("gradcam").unavailable(a) is None


def test_relevance_and_gradient_rollout_equal_float64_references(
    tmp_path: Path, photo_files
) -> None:
    """DESIGN §5 on timm's own attention with its float64 autograd: relevance R = I + Σ Ā_l R,
    Ā_l = E_h[(∇A ⊙ A)⁺]; gradient rollout's chain of rownorm(E_h(∇A ⊙ A)⁺ + I)."""
    model, _ = tiny_hybrid("r-stem", seed=7)
    torch.save(model.state_dict(), tmp_path / "h.pth")
    loaded = load_checkpoint(tmp_path / "h.pth", config={"heads": 4})
    a = analyze(loaded, photo_files["chelsea"], gradients=True)
    target = a.top_class
    assert_timm_relevance_maps(a, model, target, atol=1e-6)


def test_transformer_attribution_equals_the_authors_propagation_float64(tmp_path: Path) -> None:
    """The authors' transcription with the hybrid stem making its tokens: their relevance stops
    at the tokens (their patch embedding passes nothing on), so the stem adds no rule."""
    model, side = tiny_hybrid("r-stem", seed=5)
    torch.save(model.state_dict(), tmp_path / "h.pth")
    vit = load_checkpoint(tmp_path / "h.pth", config={"heads": 4}).model.double()
    ref = RefViT(vit.config).double()
    state = {k: v for k, v in vit.state_dict().items() if not k.startswith("patch_embed.")}
    missing, unexpected = ref.load_state_dict(state, strict=False)
    assert set(missing) == {"patch_embed.proj.weight", "patch_embed.proj.bias"} and not unexpected
    ref.patch_embed.proj = nn.Sequential(vit.patch_embed.backbone, vit.patch_embed.proj)
    ref.eval()
    x = images(1, side, seed=5).double()
    assert torch.allclose(ref(x), vit(x), atol=1e-10)  # the same network
    for target in (None, 1):
        theirs = authors_generate_lrp(ref, x, index=target)
        mine = transformer_attribution(vit, x, target)[0].flatten()
        assert torch.allclose(mine, theirs, atol=1e-9)
        assert theirs.std() > 0.05


def test_the_model_info_names_the_stem(tmp_path: Path, capsys) -> None:
    from vitviz.cli import main

    model, _ = tiny_hybrid("r-stem", seed=6)
    save_for_hf(model, tmp_path / "r", safe_serialization=True)
    assert main(["info", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    parts = next(line for line in out.splitlines() if line.startswith("parts:"))
    assert "ResNetV2 stem, stride 4, then a 2×2 projection" in parts, parts


def test_vitvizs_own_format_keeps_the_stem(tmp_path: Path) -> None:
    """The native file's config holds the stem (a nested dict in its metadata) and its
    BatchNorm statistics: it opens as the same network."""
    from vitviz.checkpoints.native import save_checkpoint

    model, side = tiny_hybrid("resnet50d-s16", seed=8)
    torch.save(model.state_dict(), tmp_path / "h.pth")
    loaded = load_checkpoint(tmp_path / "h.pth", config={"heads": 4})
    save_checkpoint(loaded.model, tmp_path / "own.safetensors", loaded.class_names)
    again = load_checkpoint(tmp_path / "own.safetensors")
    assert again.family == "vitviz" and again.config == loaded.config
    x = images(1, side, seed=8)
    with torch.no_grad():
        assert torch.equal(again.model(x), loaded.model(x))


def test_a_files_unaligned_view_is_copied_to_aligned_storage() -> None:
    """A safetensors view may start anywhere in the file's buffer; the convs then round
    otherwise than timm's own (aligned) weights. ``aligned`` copies only such a view."""
    from vitviz.kinds.vit.families.timm_hybrid import aligned

    buffer = torch.arange(200, dtype=torch.float32)
    view = buffer[3:131]
    assert view.data_ptr() % 64 != 0
    copy = aligned(view)
    assert copy.data_ptr() % 64 == 0 and torch.equal(copy, view)
    assert aligned(buffer) is buffer


def test_the_library_check_builds_the_files_vit_sizes(tmp_path: Path) -> None:
    """A hybrid of width 32 and depth 2 on timm's R26 backbone: named by --arch
    (vit_small_r26_s32_224, width 384, depth 12) timm's hybrid is built with the file's ViT
    sizes and checks it; unnamed, the note says why it was not checked (timm builds a hybrid's
    backbone from its name alone), never silence."""
    model, _ = tiny_hybrid("r26")
    path = tmp_path / "bare.pth"
    torch.save(model.state_dict(), path)
    loaded = load_checkpoint(path, config={"arch": "vit_small_r26_s32_224", "heads": 4})
    checked = [n for n in loaded.notes if "checked against timm" in n]
    assert len(checked) == 1 and checked[0].startswith("checked against timm"), loaded.notes
    assert "vit_small_r26_s32_224 with width 32, depth 2, 4 heads" in checked[0], checked[0]
    loaded = load_checkpoint(path, config={"heads": 4})
    unchecked = [n for n in loaded.notes if n.startswith("not checked against timm")]
    assert len(unchecked) == 1 and "backbone from its name" in unchecked[0], loaded.notes
