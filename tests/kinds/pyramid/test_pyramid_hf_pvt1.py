"""transformers' PVT v1 folders open as the pyramid kind, exactly: logits within 1e-4 (relative)
and every block's attention (the last stage's with its CLS token) within 1e-5 of transformers'
eager forward, with random, perturbed weights; a classifier and a base model (its final-normed
CLS); another image size, another activation and a reduced last stage are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from zoo_helpers import max_diff, randomize_

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.kindapi import kind_of
from vitviz.kinds.pyramid.families.hf_pvt import LIBRARY_MODEL

transformers = pytest.importorskip("transformers")


def pvt1_config(**changes: object) -> object:
    settings = dict(
        image_size=64,
        hidden_sizes=[16, 32, 48, 64],
        depths=[1, 2, 1, 2],
        num_attention_heads=[1, 2, 2, 4],
        mlp_ratios=[2, 2, 2, 2],
        num_labels=5,
    )
    return transformers.PvtConfig(**{**settings, **changes})


def saved_pvt1(folder: Path, cls_name: str, seed: int = 2) -> tuple[torch.nn.Module, Path]:
    """transformers' tiny PVT v1 of class ``cls_name``, perturbed, saved to ``folder``."""
    cls = getattr(transformers, cls_name)
    model = randomize_(cls._from_config(pvt1_config(), attn_implementation="eager"), seed=seed)
    model.save_pretrained(folder)
    return model, folder


@pytest.mark.parametrize("cls_name", ["PvtForImageClassification", "PvtModel"])
def test_exact_against_transformers(tmp_path, cls_name) -> None:
    model, folder = saved_pvt1(tmp_path / "pvt", cls_name)
    loaded = load_checkpoint(folder)
    cfg = loaded.model.config
    assert kind_of(loaded).name == "pyramid" and cfg.cls_last and cfg.pos_embed
    assert cfg.heads == (1, 2, 2, 4) and cfg.sr_ratios == (8, 4, 2, 1)
    assert any("checked against transformers" in n for n in loaded.notes), loaded.notes
    x = torch.randn(1, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    ref_logits, ref_attn = LIBRARY_MODEL.read(model, x)
    with torch.no_grad():
        fused = loaded.model(x)
        logits, attn = kind_of(loaded).library_outputs(loaded.model, x)
    scale = float(ref_logits.abs().max())
    assert fused.shape == ref_logits.shape == (1, 5 if "Classification" in cls_name else 64)
    assert max_diff(fused, ref_logits) / scale <= 1e-4
    assert max_diff(logits, ref_logits) / scale <= 1e-4
    assert [a.shape for a in attn] == [a.shape for a in ref_attn] and len(attn) == 6
    assert attn[-1].shape == (1, 4, 5, 5)  # the last stage: the CLS and a 2×2 grid
    assert max(max_diff(a, b) for a, b in zip(attn, ref_attn, strict=True)) <= 1e-5


def test_other_image_size_refused(tmp_path) -> None:
    _, folder = saved_pvt1(tmp_path / "pvt", "PvtForImageClassification")
    model = load_checkpoint(folder).model
    with pytest.raises(ValueError, match="position tables are for 64×64 px images"):
        model(torch.zeros(1, 3, 96, 96))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("hidden_act", "relu", "hidden_act 'relu' is not supported"),
        ("sequence_reduction_ratios", [8, 4, 2, 2], "reduce the last stage"),
    ],
)
def test_settings_vitviz_cannot_run_refused(tmp_path, key, value, message) -> None:
    _, folder = saved_pvt1(tmp_path / "pvt", "PvtForImageClassification")
    cfg = json.loads((folder / "config.json").read_text())
    cfg[key] = value
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=message) as info:
        load_checkpoint(folder)
    assert "\n" not in str(info.value)


def test_missing_tensor_refused(tmp_path) -> None:
    from safetensors.torch import load_file, save_file

    _, folder = saved_pvt1(tmp_path / "pvt", "PvtForImageClassification")
    state = load_file(folder / "model.safetensors")
    del state["pvt.encoder.patch_embeddings.3.cls_token"]
    save_file(state, folder / "model.safetensors")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(folder)
    assert "cls_token" in str(info.value) and "\n" not in str(info.value)


def test_bare_file_without_its_config_refused(tmp_path) -> None:
    """A PVT v1's tensors alone don't say its head counts or its kernels: one line asks for
    the folder transformers saved."""
    _, folder = saved_pvt1(tmp_path / "pvt", "PvtForImageClassification")
    bare = tmp_path / "pvt1.safetensors"
    bare.write_bytes((folder / "model.safetensors").read_bytes())
    with pytest.raises(CheckpointError, match="looks like a Hugging Face PVT v1") as info:
        load_checkpoint(bare)
    assert "config.json" in str(info.value) and "\n" not in str(info.value)
