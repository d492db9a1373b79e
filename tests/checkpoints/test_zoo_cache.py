""" "Open from cache" lists what is in the Hugging Face and torch hub caches (env vars respected),
reads no weights, downloads nothing; each entry opens with load_checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torchvision.models.vision_transformer import VisionTransformer

from vitviz.checkpoints import list_cached_checkpoints, load_checkpoint
from vitviz.checkpoints.cache import hf_hub_cache, torch_hub_dir


def _fake_caches(root: Path) -> None:
    hub = root / "hf" / "hub"
    snap = hub / "models--facebook--dinov2-small" / "snapshots" / "0123456789abcdef"
    snap.mkdir(parents=True)
    (snap / "config.json").write_text(json.dumps({"model_type": "dinov2"}))
    (snap / "model.safetensors").write_bytes(b"\0" * 100)
    partial = hub / "models--google--vit-base-patch16-224" / "snapshots" / "fedcba"
    partial.mkdir(parents=True)
    (partial / "config.json").write_text("{}")  # no weights yet: not listed
    (hub / "datasets--someone--data").mkdir()
    ckpts = root / "torch" / "hub" / "checkpoints"
    ckpts.mkdir(parents=True)
    model = VisionTransformer(
        image_size=32,
        patch_size=16,
        num_layers=1,
        num_heads=12,
        hidden_dim=768,
        mlp_dim=64,
        num_classes=2,
    )
    torch.save(model.state_dict(), ckpts / "vit_b_16-c867db91.pth")
    (ckpts / "dino_deitsmall16_pretrain.pth").write_bytes(b"x" * 10)
    (ckpts / "notes.txt").write_text("not a checkpoint")


def test_lists_both_caches_from_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_caches(tmp_path)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    entries = list_cached_checkpoints()
    assert [e.source for e in entries] == ["huggingface", "torch", "torch"]
    hf = entries[0]
    assert hf.label == "facebook/dinov2-small (Hugging Face, 0123456)"
    assert hf.family == "dinov2" and hf.path.name == "0123456789abcdef"
    assert hf.size == 100 + len(json.dumps({"model_type": "dinov2"}))
    by_name = {e.path.name: e for e in entries[1:]}
    assert by_name["dino_deitsmall16_pretrain.pth"].family == "dino"
    assert by_name["dino_deitsmall16_pretrain.pth"].size == 10
    tv = by_name["vit_b_16-c867db91.pth"]
    assert tv.family == "torchvision" and tv.label == "vit_b_16-c867db91.pth (torch hub)"
    loaded = load_checkpoint(tv.path)
    assert loaded.family == "torchvision" and loaded.config.heads == 12


def test_hub_cache_variable_wins_and_missing_caches_are_empty(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "no-torch"))
    assert hf_hub_cache() == tmp_path / "elsewhere"
    assert torch_hub_dir() == tmp_path / "no-torch" / "hub"
    assert list_cached_checkpoints() == []


def test_defaults_follow_xdg_cache_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HF_HUB_CACHE", "HF_HOME", "TORCH_HOME"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert hf_hub_cache() == tmp_path / "huggingface" / "hub"
    assert torch_hub_dir() == tmp_path / "torch" / "hub"
