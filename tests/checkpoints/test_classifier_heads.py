"""A classifier in the file is used, never dropped (DESIGN §4, exact or refused).

Every reference is transformers' own model with every parameter perturbed (a zero-initialised
head would hide a head read wrong or not read at all).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers as tr
from zoo_helpers import LOGIT_ATOL, assert_attention, assert_close, images, ours, randomize_

from vitviz.checkpoints import CheckpointError, load_checkpoint

TOWER = dict(
    image_size=32, patch_size=8, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
    intermediate_size=96,
)  # fmt: skip
TEXT = dict(hidden_size=48, num_hidden_layers=1, num_attention_heads=3, intermediate_size=96)
LABELS = {0: "heron", 1: "kettle", 2: "anvil", 3: "tulip"}


def _classifier(kind: str, seed: int) -> torch.nn.Module:
    """transformers' SigLIP (with or without the tower's pool head) or CLIP classifier."""
    if kind == "clip":
        config = tr.CLIPConfig(vision_config=TOWER, text_config=TEXT, id2label=LABELS)
        cls: type = tr.CLIPForImageClassification
    else:
        vision = dict(TOWER, vision_use_head=kind == "siglip")
        config = tr.SiglipConfig(vision_config=vision, text_config=TEXT, id2label=LABELS)
        cls = tr.SiglipForImageClassification
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return randomize_(cls(config), seed=seed)


@pytest.mark.parametrize("kind", ["siglip", "siglip-no-pool-head", "clip"])
def test_a_towers_classifier_opens_with_its_classifier(tmp_path: Path, kind: str) -> None:
    """SiglipForImageClassification (the mean of the tokens after the final norm) and
    CLIPForImageClassification (the mean of the patch tokens before it) open as a ViT whose
    head is the file's classifier: transformers' logits, its attention, its labels."""
    model = _classifier(kind, seed=3)
    model.save_pretrained(tmp_path / kind)
    loaded = load_checkpoint(tmp_path / kind)
    assert loaded.class_names == list(LABELS.values())
    x = images(2, 32, 32, seed=3)
    with torch.no_grad():
        ref = model(pixel_values=x, output_attentions=True)
    logits, attn = ours(loaded, x)
    scale = float(ref.logits.abs().max())
    assert scale > 0.1  # a head that shows an error
    assert_close("logits", ref.logits / scale, logits / scale, LOGIT_ATOL)
    assert_attention(list(ref.attentions), attn)
    name = type(model).__name__
    assert any(n.startswith("checked against transformers") and name in n for n in loaded.notes)


def test_a_classifier_read_wrong_is_refused_by_the_library_check(tmp_path: Path) -> None:
    """The check compares with the classifier: a setting that moves the logits refuses."""
    _classifier("siglip", seed=4).save_pretrained(tmp_path / "s")
    with pytest.raises(CheckpointError, match=r"differs from transformers .*logits"):
        load_checkpoint(tmp_path / "s", config={"norm_eps": 1e-1})
