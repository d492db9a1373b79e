"""Hugging Face transformers PVT v2 folders open as the pyramid kind, exactly: logits within 1e-4
(relative) and every block's attention within 1e-5 of transformers' eager forward, with random,
perturbed weights; a classifier and a base model (its pooled map), strided and linear
reduction; an activation vitviz does not model is refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from zoo_helpers import max_diff, randomize_

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.kindapi import kind_of
from vitviz.kinds.pyramid.families.huggingface import LIBRARY_MODEL

transformers = pytest.importorskip("transformers")


def _saved(folder: Path, cls_name: str, linear: bool) -> tuple[torch.nn.Module, Path]:
    config = transformers.PvtV2Config(
        image_size=64,
        hidden_sizes=[16, 32, 48, 64],
        depths=[1, 2, 1, 1],
        num_attention_heads=[1, 2, 2, 4],
        mlp_ratios=[2, 2, 2, 2],
        num_labels=5,
        linear_attention=linear,
    )
    cls = getattr(transformers, cls_name)
    model = randomize_(cls._from_config(config, attn_implementation="eager"), seed=3)
    model.save_pretrained(folder)
    return model, folder


@pytest.mark.parametrize("linear", [False, True], ids=["sr", "linear"])
@pytest.mark.parametrize("cls_name", ["PvtV2ForImageClassification", "PvtV2Model"])
def test_exact_against_transformers(tmp_path, cls_name, linear) -> None:
    model, folder = _saved(tmp_path / "pvt", cls_name, linear)
    loaded = load_checkpoint(folder)
    assert kind_of(loaded).name == "pyramid" and loaded.model.config.heads == (1, 2, 2, 4)
    assert loaded.model.config.linear is linear and loaded.model.config.scale_after
    assert any("checked against transformers" in n for n in loaded.notes), loaded.notes
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    ref_logits, ref_attn = LIBRARY_MODEL.read(model, x)
    with torch.no_grad():
        fused = loaded.model(x)
        logits, attn = kind_of(loaded).library_outputs(loaded.model, x)
    scale = float(ref_logits.abs().max())
    assert fused.shape == ref_logits.shape
    assert max_diff(fused, ref_logits) / scale <= 1e-4
    assert max_diff(logits, ref_logits) / scale <= 1e-4
    assert [a.shape for a in attn] == [a.shape for a in ref_attn] and len(attn) == 5
    assert max(max_diff(a, b) for a, b in zip(attn, ref_attn, strict=True)) <= 1e-5


def test_other_activation_refused(tmp_path) -> None:
    _, folder = _saved(tmp_path / "pvt", "PvtV2ForImageClassification", False)
    cfg = json.loads((folder / "config.json").read_text())
    cfg["hidden_act"] = "relu"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="hidden_act 'relu' is not supported"):
        load_checkpoint(folder)
