"""A vision transformer vitviz knows and does not model is refused by name, in one line, in
every form a user has it: a timm folder (its architecture), a bare timm state dict (its
tensors) and a transformers folder (its model_type); never as an unknown layout."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from timm.models import save_for_hf

from vitviz.checkpoints import CheckpointError, load_checkpoint

TIMM = {
    "vit_dwee_patch16_reg1_gap_256": "differential attention",
    "vit_dpwee_patch16_reg1_gap_256": "differential attention",
}
TRANSFORMERS = {
    "cvt": "CvT",
    "mobilevitv2": "MobileViTV2",
}


def _refusal(path: Path) -> str:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    text = str(info.value)
    assert "\n" not in text and "does not recognise" not in text, text
    return text


@pytest.mark.parametrize("name", list(TIMM))
def test_a_bare_timm_state_dict_is_refused_by_name(tmp_path: Path, name: str) -> None:
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False, num_classes=5)
    zero = torch.zeros(())  # timm's keys and shapes, one stored number: a refusal reads no values
    torch.save({k: zero.expand(v.shape) for k, v in model.state_dict().items()}, tmp_path / "m.pth")
    assert TIMM[name] in _refusal(tmp_path / "m.pth")


@pytest.mark.parametrize("name", list(TIMM))
def test_a_timm_folder_is_refused_by_its_architecture(tmp_path: Path, name: str) -> None:
    """Its name and the part vitviz lacks, in words (not timm's class name alone)."""
    model = timm.create_model(name, pretrained=False, num_classes=5)
    save_for_hf(model, tmp_path / name, safe_serialization=True)
    text = _refusal(tmp_path / name)
    assert text.startswith(f"{name}: {name} has") and TIMM[name] in text, text


@pytest.mark.parametrize("model_type", list(TRANSFORMERS))
def test_a_transformers_folder_is_refused_by_its_model_type(tmp_path: Path, model_type: str):
    import transformers as tr
    from transformers.models.auto import modeling_auto

    name = modeling_auto.MODEL_FOR_IMAGE_CLASSIFICATION_MAPPING_NAMES[model_type]
    cls = getattr(tr, name[0] if isinstance(name, tuple) else name)
    torch.manual_seed(0)
    cls(tr.CONFIG_MAPPING[model_type](num_labels=3)).save_pretrained(tmp_path / "m")
    assert TRANSFORMERS[model_type] in _refusal(tmp_path / "m")


def test_a_siglip2_classifier_is_refused_by_name(tmp_path: Path) -> None:
    import transformers as tr

    vision = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64)
    config = tr.Siglip2Config(vision_config=vision, num_labels=3)
    tr.Siglip2ForImageClassification(config).save_pretrained(tmp_path / "m")
    assert "SigLIP 2" in _refusal(tmp_path / "m")


def test_a_bare_sam_is_not_named_for_a_key_it_shares_with_another_architecture(
    tmp_path: Path,
) -> None:
    """SAM's blocks have MViTv2's ``attn.rel_pos_h`` too; a file of timm's ViT layout is named
    only by a part that is its own (differential attention's lambdas). (At 64 px its tensors
    are no timm name's: the file's layout alone speaks.)"""
    name = "samvit_base_patch16_224"
    with torch.device("meta"):
        model = timm.create_model(name, pretrained=False, num_classes=5, img_size=64)
    zero = torch.zeros(())
    torch.save({k: zero.expand(v.shape) for k, v in model.state_dict().items()}, tmp_path / "m.pth")
    text = _refusal(tmp_path / "m.pth")
    assert "MViTv2" not in text, text
