"""Hugging Face transformers Hiera folders open as the pyramid kind's Hiera, exactly: logits within
1e-4 (relative) and every layer's attention within 1e-5 of transformers' eager forward, with
random, perturbed weights, for the classifier and the base model (its pooled, normed output);
the load-time library check passes. The same tensors under timm's names give timm's own Hiera
the same logits, and the timm form of them opens to the same maps (rollout, gradient rollout,
relevance, attention), whose definitions tests/kinds/pyramid/test_pyramid_hiera.py checks in
float64. What
vitviz's Hiera computes differently is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from zoo_helpers import max_diff, randomize_

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kindapi import kind_of
from vitviz.kinds.pyramid.analysis import analyze_pyramid
from vitviz.kinds.pyramid.families.hf_hiera import LIBRARY_MODEL as HF_HIERA
from vitviz.kinds.pyramid.families.timm_hiera import LIBRARY_MODEL as TIMM_HIERA
from vitviz.kinds.pyramid.hiera_network import HieraViT

transformers = pytest.importorskip("transformers")

SIZE = 64


def _saved(folder: Path, cls_name: str, seed: int = 3) -> tuple[torch.nn.Module, Path]:
    config = transformers.HieraConfig(
        embed_dim=16,
        image_size=[SIZE, SIZE],
        depths=[1, 2, 1, 1],
        num_heads=[1, 2, 4, 8],
        num_labels=5,
    )
    cls = getattr(transformers, cls_name)
    model = randomize_(cls._from_config(config, attn_implementation="eager"), seed=seed).eval()
    model.save_pretrained(folder)
    return model, folder


def _x(seed: int = 5) -> torch.Tensor:
    return torch.randn(1, 3, SIZE, SIZE, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("cls_name", ["HieraForImageClassification", "HieraModel"])
def test_exact_against_transformers(tmp_path, cls_name) -> None:
    model, folder = _saved(tmp_path / "hiera", cls_name)
    loaded = load_checkpoint(folder)
    assert kind_of(loaded).name == "pyramid" and loaded.family == "huggingface-hiera"
    cfg = loaded.model.config
    assert isinstance(loaded.model, HieraViT) and cfg.heads == (1, 2, 4, 8)
    assert cfg.depths == (1, 2, 1, 1) and cfg.dims == (16, 32, 64, 128)
    assert cfg.num_classes == (5 if cls_name.endswith("Classification") else 0)
    assert any("checked against transformers" in n for n in loaded.notes), loaded.notes
    x = _x()
    ref_logits, ref_attn = HF_HIERA.read(model, x)
    with torch.no_grad():
        fused = loaded.model(x)
        logits, attn = kind_of(loaded).library_outputs(loaded.model, x)
    scale = float(ref_logits.abs().max())
    assert fused.shape == ref_logits.shape == logits.shape
    assert max_diff(fused, ref_logits) / scale <= 1e-4
    assert max_diff(logits, ref_logits) / scale <= 1e-4
    # every layer's, in timm's layout: (B, h, units, t_q, t_k) within mask units, else 4-D
    assert [tuple(a.shape) for a in ref_attn] == [
        (1, 1, 4, 64, 64), (1, 2, 4, 16, 64), (1, 2, 4, 16, 16), (1, 4, 4, 4, 16), (1, 8, 4, 16),
    ]  # fmt: skip
    assert [a.shape for a in attn] == [a.shape for a in ref_attn]
    assert max(max_diff(a, b) for a, b in zip(attn, ref_attn, strict=True)) <= 1e-5
    # the library's own per-stage outputs are the last layer of each stage
    with torch.no_grad():
        staged = model(pixel_values=x, output_attentions=True).attentions
    assert torch.equal(staged[1], ref_attn[2]) and torch.equal(staged[3].squeeze(2), ref_attn[4])


def test_same_model_as_timms_form(tmp_path) -> None:
    timm = pytest.importorskip("timm")
    model, folder = _saved(tmp_path / "hiera", "HieraForImageClassification", seed=7)
    loaded = load_checkpoint(folder)
    state = loaded.model.state_dict()
    theirs = timm.create_model(
        "hiera_tiny_224", img_size=SIZE, embed_dim=16, num_heads=1, stages=(1, 2, 1, 1),
        num_classes=5,
    ).eval()  # fmt: skip
    theirs.load_state_dict(state, strict=True)
    x = _x(2)
    timm_logits, timm_attn = TIMM_HIERA.read(theirs, x)
    hf_logits, hf_attn = HF_HIERA.read(model, x)
    assert max_diff(timm_logits, hf_logits) / float(hf_logits.abs().max()) <= 1e-4
    assert max(max_diff(a, b) for a, b in zip(timm_attn, hf_attn, strict=True)) <= 1e-5
    bare = tmp_path / "hiera.pth"
    torch.save(state, bare)
    side = {"stage_heads": [1, 2, 4, 8], "preprocessing": {"image_size": [SIZE, SIZE]}}
    bare.with_name(bare.name + ".vitviz.json").write_text(json.dumps(side))
    as_timm = load_checkpoint(bare)
    assert as_timm.family == "timm-hiera" and as_timm.model.config.to_dict() == (
        loaded.model.config.to_dict()
    )
    image = _x(1)[0]
    a = analyze_pyramid(loaded, image, gradients=True)
    b = analyze_pyramid(as_timm, image, gradients=True)
    assert a.stage_grids == b.stage_grids == [(16, 16), (8, 8), (4, 4), (2, 2)]
    for name, query, opts in (
        ("rollout", None, {}),
        ("gradient-rollout", None, {}),
        ("relevance", (9, 4), {}),
        ("attention", (9, 4), {"layer": 1, "head": 0}),
    ):
        mine = get_method(name)(a, query, None, opts).numpy()
        ref = get_method(name)(b, query, None, opts).numpy()
        assert mine.shape == (16, 16) and np.isfinite(mine).all(), name
        assert float(mine.max()) > 0, name
        np.testing.assert_allclose(mine, ref, atol=1e-6, err_msg=name)


@pytest.mark.parametrize(
    ("field", "value", "match"),
    [
        ("masked_unit_attention", [False, True, False, False], "after a global stage"),
        ("num_query_pool", 2, "num_query_pool 2 of 3"),
        ("masked_unit_size", [16, 16], r"mask unit \(16, 16\) is not q_stride"),
        ("hidden_act", "relu", "hidden_act 'relu'"),
        ("architectures", ["HieraForPreTraining"], "MAE pre-training"),
    ],
)
def test_what_vitviz_computes_otherwise_is_refused(tmp_path, field, value, match) -> None:
    _, folder = _saved(tmp_path / "hiera", "HieraForImageClassification")
    cfg = json.loads((folder / "config.json").read_text())
    cfg[field] = value
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=match):
        load_checkpoint(folder)
