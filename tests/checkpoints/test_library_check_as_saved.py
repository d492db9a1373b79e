"""The library check builds the library's model as the file has it: a base model saved without
its pooler is compared with the library's model without one (DESIGN §4), and transformers' load
report stays off the terminal.

Every reference is transformers' own model with every parameter perturbed.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers as tr
from zoo_helpers import LOGIT_ATOL, assert_attention, assert_close, images, ours, randomize_

from vitviz.checkpoints import load_checkpoint

TOWER = dict(
    image_size=32, patch_size=8, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
    intermediate_size=96,
)  # fmt: skip
BASES = [
    (tr.ViTModel, tr.ViTConfig, {}),
    (tr.DeiTModel, tr.DeiTConfig, {}),
    (tr.IJepaModel, tr.IJepaConfig, {}),
    (tr.Data2VecVisionModel, tr.Data2VecVisionConfig, {"use_relative_position_bias": True}),
]


@pytest.mark.parametrize(("cls", "config_cls", "extra"), BASES, ids=[b[0].__name__ for b in BASES])
def test_a_base_model_saved_without_its_pooler_opens_checked(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], cls, config_cls, extra
) -> None:
    """``add_pooling_layer=False`` (DINO and MAE backbones): the library check builds the model
    without a pooler too, compares like with like, and keeps transformers' load report off the
    terminal."""
    config = config_cls(**TOWER, **extra)
    config._attn_implementation = "eager"
    torch.manual_seed(5)
    model = randomize_(cls(config, add_pooling_layer=False), seed=5)
    model.save_pretrained(tmp_path / "base")
    capfd.readouterr()
    loaded = load_checkpoint(tmp_path / "base")
    printed = capfd.readouterr()
    assert "LOAD REPORT" not in printed.out + printed.err
    assert "MISSING" not in printed.out + printed.err
    note = next(n for n in loaded.notes if n.startswith("checked against transformers"))
    assert cls.__name__ in note
    x = images(1, 32, 32, seed=5)
    with torch.no_grad():
        ref = model(pixel_values=x, output_attentions=True)
    logits, attn = ours(loaded, x)
    assert_close("features", ref.last_hidden_state[:, 0] if cls is not tr.IJepaModel
                 else ref.last_hidden_state.mean(1), logits, LOGIT_ATOL)  # fmt: skip
    assert_attention(list(ref.attentions), attn)


def test_a_part_the_file_lacks_is_not_compared_with_a_random_one(tmp_path: Path) -> None:
    """A ViTForImageClassification folder whose classifier was cut out: the library's model
    would hold a fresh random classifier, so no comparison is made and the note says so."""
    from safetensors.torch import load_file, save_file

    config = tr.ViTConfig(**TOWER, num_labels=3)
    config._attn_implementation = "eager"
    torch.manual_seed(6)
    randomize_(tr.ViTForImageClassification(config), seed=6).save_pretrained(tmp_path / "cut")
    weights = tmp_path / "cut" / "model.safetensors"
    state = {k: v for k, v in load_file(weights).items() if not k.startswith("classifier.")}
    save_file(state, weights, metadata={"format": "pt"})
    loaded = load_checkpoint(tmp_path / "cut")
    assert loaded.config.num_classes == 0
    assert any(n.startswith("not checked against transformers") for n in loaded.notes)
