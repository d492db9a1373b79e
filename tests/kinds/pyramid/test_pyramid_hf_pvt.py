"""transformers' PVT v1 folders (``model_type`` "pvt") are refused by name, in one line: its last
stage alone prepends a CLS token its classifier reads, which the pyramid kind's maps (rollout
across stage grids) do not carry; not shown wrong, nor "layout not recognised"."""

from __future__ import annotations

import pytest
from zoo_helpers import randomize_

from vitviz.checkpoints import CheckpointError, load_checkpoint

transformers = pytest.importorskip("transformers")


@pytest.mark.parametrize("cls_name", ["PvtForImageClassification", "PvtModel"])
def test_pvt_v1_refused_naming_its_cls_token(tmp_path, cls_name) -> None:
    config = transformers.PvtConfig(
        image_size=64,
        hidden_sizes=[16, 32, 48, 64],
        depths=[1, 1, 1, 1],
        num_attention_heads=[1, 2, 2, 4],
        mlp_ratios=[2, 2, 2, 2],
        num_labels=5,
    )
    model = getattr(transformers, cls_name)._from_config(config, attn_implementation="eager")
    randomize_(model, seed=2).save_pretrained(tmp_path / "pvt")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path / "pvt")
    message = str(info.value)
    assert "PVT v1 has a CLS token in its last stage only" in message
    assert "\n" not in message and "does not recognise" not in message
