"""transformers' LeViT folders opened by vitviz (LevitForImageClassificationWithTeacher,
LevitForImageClassification, LevitModel; tiny, perturbed weights and BatchNorm statistics, 64 px):
logits within 1e-4 (relative) and every attention layer's probabilities within 1e-5 of
transformers' own model, read by hooks on its attention modules; the library check ran; a
folder with a tensor vitviz has no place for is refused in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from levit_helpers import GRIDS, SIZE, randomize_levit_
from zoo_helpers import images

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.kinds.levit.hf_family import LIBRARY_MODEL

tr = pytest.importorskip("transformers")

CLASSES = ("LevitForImageClassificationWithTeacher", "LevitForImageClassification", "LevitModel")


def tiny_hf_levit(cls_name: str, seed: int = 3):
    config = tr.LevitConfig(
        image_size=SIZE, hidden_sizes=[16, 24, 32], num_attention_heads=[2, 3, 4],
        depths=[1, 2, 1], key_dim=[4, 4, 4], num_labels=5,
        down_ops=[["Subsample", 4, 16 // 4, 4, 2, 2], ["Subsample", 4, 24 // 4, 4, 2, 2]],
    )  # fmt: skip
    return randomize_levit_(getattr(tr, cls_name)(config), seed)


@pytest.mark.parametrize("cls_name", CLASSES)
def test_a_transformers_folder_opens_exactly(tmp_path: Path, cls_name: str) -> None:
    ref = tiny_hf_levit(cls_name)
    ref.save_pretrained(tmp_path / "levit", safe_serialization=True)
    loaded = load_checkpoint(tmp_path / "levit")
    cfg = loaded.model.config
    assert loaded.kind.name == "levit" and cfg.distilled == cls_name.endswith("Teacher")
    assert cfg.num_classes == (0 if cls_name == "LevitModel" else 5)
    assert any("checked against transformers" in n for n in loaded.notes), loaded.notes
    x = images(2, SIZE, SIZE, seed=4)
    with torch.no_grad():
        out = ref(pixel_values=x)
    want = out.pooler_output if cls_name == "LevitModel" else out.logits
    theirs, attn = LIBRARY_MODEL.read(ref, x)
    torch.testing.assert_close(theirs, want, rtol=0, atol=0)  # the hooks change nothing
    with torch.no_grad():
        got = loaded.model.forward_explained(x)
    scale = float(want.abs().max())
    assert float((got.logits - want).abs().max()) / scale < 1e-4
    assert len(got.attentions) == len(attn) == 6
    for a, b in zip(got.attentions, attn, strict=True):
        assert a.shape == b.shape and float((a - b).abs().max()) < 1e-5
    assert [tuple(g) for g in got.stage_grids] == GRIDS


def test_a_tensor_vitviz_has_no_place_for_is_refused(tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    ref = tiny_hf_levit("LevitForImageClassification")
    ref.save_pretrained(tmp_path / "levit", safe_serialization=True)
    weights = tmp_path / "levit" / "model.safetensors"
    state = load_file(weights)
    state["levit.encoder.stages.0.layers.0.module.q_norm.weight"] = torch.ones(4)
    save_file(state, weights)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path / "levit")
    text = str(info.value)
    assert "\n" not in text and "q_norm" in text, text
