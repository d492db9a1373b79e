"""A timm folder's config.json and a sidecar's ``arch`` of the wrong type or size are refused in
one line naming the field, before any family reads them (found by benchmarks/fuzz.py's kind
cases: a string pretrained_cfg or a list of model_args reached the families' ``dict(...)`` and
came back as the loader's catch-all; model_args depth 10**6 hung timm's TNT and ConViT builds;
zero input channels or heads printed torch's warning; an int architecture or arch raised
AttributeError; a 100000-pixel input size allocated 120 GB for the library check's probe)."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import pytest

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.sidecar import check_settings
from vitviz.checkpoints.timm_folder import MAX_MODEL_SIDE, check_timm_config

BASE = {
    "architecture": "tnt_b_patch16_224",
    "num_classes": 3,
    "pretrained_cfg": {"input_size": [3, 32, 32]},
    "model_args": {"embed_dim": 24, "depth": 2, "depths": [1, 2, 1]},
}


def _refusal(change: dict) -> str:
    cfg = json.loads(json.dumps(BASE))
    for key, value in change.items():
        if "." in key:
            outer, inner = key.split(".")
            cfg[outer][inner] = value
        else:
            cfg[key] = value
    with pytest.raises(CheckpointError) as info:
        check_timm_config(cfg, "ckpt")
    text = str(info.value)
    assert "\n" not in text and text.startswith("ckpt/config.json: its "), text
    return text


def test_a_well_formed_config_passes() -> None:
    check_timm_config(json.loads(json.dumps(BASE)), "ckpt")
    check_timm_config({"architecture": "x", "pretrained_cfg": {"input_size": None}}, "ckpt")
    check_timm_config({"architecture": "x", "model_args": {"local_up_to_layer": 0}}, "ckpt")
    # CrossViT's depth: per multi-scale block, each branch's blocks and the fusion's (0 there)
    check_timm_config({"architecture": "x", "model_args": {"depth": [[1, 2, 0], [1, 1, 0]]}}, "c")


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"architecture": 123}, "architecture is 123"),
        ({"architecture": ["volo_d1_224"]}, "architecture is ['volo_d1_224']"),
        ({"pretrained_cfg": "imagenet"}, "pretrained_cfg is 'imagenet'"),
        ({"model_args": [1, 2]}, "model_args is [1, 2]"),
        ({"pretrained_cfg.input_size": [3, math.nan, math.nan]}, "input_size is [3, nan, nan]"),
        ({"pretrained_cfg.input_size": [3, 0, 0]}, "input_size is [3, 0, 0]"),
        ({"pretrained_cfg.input_size": "abc"}, "input_size is 'abc'"),
        ({"model_args.depth": 10**6}, "depth 1000000 is not a whole number from 0 to 1000"),
        ({"model_args.depths": [1, -1, 1]}, "depths [1, -1, 1] is not a whole number from 0"),
        ({"model_args.depth": [[1, 2.5]]}, "depth [[1, 2.5]]"),
        ({"model_args.in_chans": 0}, "in_chans 0"),
        ({"model_args.num_heads": 0}, "num_heads 0"),
        ({"model_args.num_kv_heads": [4, 2.5]}, "num_kv_heads [4, 2.5]"),
        ({"model_args.embed_dim": 10**7}, "embed_dim 10000000"),
        ({"model_args.img_size": 10**6}, f"to {MAX_MODEL_SIDE} pixels a side"),
        ({"model_args.patch_size": True}, "patch_size True"),
    ],
)
def test_a_field_of_the_wrong_type_or_size_is_named(change: dict, named: str) -> None:
    assert named in _refusal(change)


def test_a_sidecars_arch_must_be_a_name() -> None:
    with pytest.raises(CheckpointError, match="the setting arch must be a model name, not 5"):
        check_settings({"arch": 5}, "bare.pth")
    check_settings({"arch": "mvitv2_tiny"}, "bare.pth")


def test_a_tnt_folder_whose_depth_would_hang_timm_is_refused_at_once(tmp_path: Path) -> None:
    """The folder's own loader: before, timm began building a million TNT blocks (a hang)."""
    timm = pytest.importorskip("timm")
    from timm.models import save_for_hf

    model = timm.create_model(
        "tnt_b_patch16_224", pretrained=False, num_classes=3, img_size=32, patch_size=8,
        embed_dim=24, inner_dim=8, depth=2, num_heads_outer=3, num_heads_inner=2,
    )  # fmt: skip
    args = dict(patch_size=8, embed_dim=24, inner_dim=8, depth=10**6, num_heads_outer=3)
    save_for_hf(model, tmp_path / "tnt", safe_serialization=True, model_args=args)
    start = time.perf_counter()
    with pytest.raises(CheckpointError, match="model_args depth 1000000") as info:
        load_checkpoint(tmp_path / "tnt")
    assert "\n" not in str(info.value)
    assert time.perf_counter() - start < 5
