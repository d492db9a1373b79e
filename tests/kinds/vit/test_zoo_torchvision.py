"""torchvision ViT state dicts open with torchvision's logits, attention, classes, transforms."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torchvision.models import ViT_B_16_Weights
from torchvision.models.vision_transformer import VisionTransformer as TorchvisionViT
from zoo_helpers import (
    LOGIT_ATOL,
    assert_attention,
    assert_close,
    capture_inputs,
    images,
    mha_attention,
    ours,
    randomize_,
)

from vitviz.checkpoints import CheckpointError, load_checkpoint

CASES = {  # name: (image, patch, layers, heads, dim, mlp, classes, representation)
    "b16-like-4-heads": (32, 8, 2, 4, 32, 64, 7, None),
    "2-heads-pre-logits": (48, 16, 3, 2, 48, 96, 5, 24),
    "imagenet-1000": (32, 16, 2, 4, 64, 128, 1000, None),
}


def _torchvision(case: str, seed: int = 0) -> TorchvisionViT:
    size, patch, layers, heads, dim, mlp, classes, rep = CASES[case]
    torch.manual_seed(seed)
    model = TorchvisionViT(
        image_size=size,
        patch_size=patch,
        num_layers=layers,
        num_heads=heads,
        hidden_dim=dim,
        mlp_dim=mlp,
        num_classes=classes,
        representation_size=rep,
    )
    return randomize_(model, seed)


def _reference(model: TorchvisionViT, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    blocks = list(model.encoder.layers)
    inputs, handles = capture_inputs([b.self_attention for b in blocks])
    with torch.no_grad():
        logits = model(x)
    for h in handles:
        h.remove()
    attn = [mha_attention(b.self_attention, xi) for b, xi in zip(blocks, inputs, strict=True)]
    return logits, attn


@pytest.mark.parametrize("case", list(CASES))
def test_torchvision_logits_attention_and_transforms(tmp_path: Path, case: str) -> None:
    model = _torchvision(case)
    size, _, _, heads, *_ = CASES[case]
    path = tmp_path / "vit.pth"
    torch.save(model.state_dict(), path)
    path.with_name("vit.pth.vitviz.json").write_text(f'{{"heads": {heads}}}')
    loaded = load_checkpoint(path)
    assert loaded.family == "torchvision"
    x = images(2, size, size)
    ref_logits, ref_attn = _reference(model, x)
    logits, attn = ours(loaded, x)
    assert_close("logits", ref_logits, logits, LOGIT_ATOL)
    assert_attention(ref_attn, attn)
    prep = loaded.preprocessing
    assert prep.image_size == (size, size)
    assert prep.mean == pytest.approx((0.485, 0.456, 0.406))
    assert prep.std == pytest.approx((0.229, 0.224, 0.225))
    if CASES[case][6] == 1000:
        assert loaded.class_names == list(ViT_B_16_Weights.IMAGENET1K_V1.meta["categories"])
    else:
        assert loaded.class_names[0] == "class 0"


def test_torchvision_vit_b_16_names_and_224_transforms(tmp_path: Path) -> None:
    """The real vit_b_16 shape on the meta device: heads known, Resize 256 / CenterCrop 224."""
    from torchvision.models import vit_b_16

    with torch.device("meta"):
        model = vit_b_16()
    state = {k: torch.zeros(v.shape) for k, v in model.state_dict().items()}
    path = tmp_path / "vit_b_16.pth"
    torch.save(state, path)
    loaded = load_checkpoint(path)
    cfg = loaded.config
    assert (cfg.dim, cfg.depth, cfg.heads, cfg.patch_size, cfg.image_size) == (
        768,
        12,
        12,
        16,
        (224, 224),
    )
    prep = loaded.preprocessing
    transforms = ViT_B_16_Weights.IMAGENET1K_V1.transforms()
    assert prep.image_size == (transforms.crop_size[0],) * 2
    assert int(prep.image_size[0] / prep.crop_pct) == transforms.resize_size[0]
    assert prep.interpolation == transforms.interpolation.value
    assert list(prep.mean) == pytest.approx(list(transforms.mean))
    assert loaded.class_names[:2] == ["tench", "goldfish"]
    assert any("heads 12 assumed" in n for n in loaded.notes)


def test_torchvision_legacy_mlp_names(tmp_path: Path) -> None:
    model = _torchvision("b16-like-4-heads")
    sd = {}
    for k, v in model.state_dict().items():
        sd[k.replace("mlp.0.", "mlp.linear_1.").replace("mlp.3.", "mlp.linear_2.")] = v
    assert any("linear_1" in k for k in sd)
    path = tmp_path / "old.pth"
    torch.save(sd, path)
    loaded = load_checkpoint(path, config={"heads": 4})
    x = images(1, 32, 32)
    assert_close("logits", _reference(model, x)[0], ours(loaded, x)[0], LOGIT_ATOL)


def test_torchvision_unknown_width_asks_for_heads(tmp_path: Path) -> None:
    path = tmp_path / "custom.pth"
    torch.save(_torchvision("b16-like-4-heads").state_dict(), path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    msg = str(info.value)
    assert "custom.pth looks like a torchvision ViT" in msg
    assert "the weights don't say: heads." in msg
    assert "custom.pth.vitviz.json" in msg
