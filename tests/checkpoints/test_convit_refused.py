"""timm's ConViT is refused by name in one line, bare or folder, at timm's own shapes and at
shapes no timm name has (a user's own ConViT: its GPSA tensors say what it is), never as a ViT
whose blocks are "not numbered"."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
from timm.models import save_for_hf

from vitviz.checkpoints import CheckpointError, load_checkpoint

SHAPES = {
    "timm's convit_tiny": {},
    "a ConViT of its own shapes": dict(embed_dim=8, num_heads=4, depth=3, local_up_to_layer=2),
}


@pytest.mark.parametrize("shapes", list(SHAPES))
@pytest.mark.parametrize("form", ["bare", "folder"])
def test_convit_is_refused_by_name(tmp_path: Path, shapes: str, form: str) -> None:
    with torch.device("meta"):
        model = timm.create_model("convit_tiny", num_classes=5, img_size=32, **SHAPES[shapes])
    if form == "bare":
        path = tmp_path / "convit.pth"
        torch.save({k: torch.zeros(v.shape) for k, v in model.state_dict().items()}, path)
    else:
        path = tmp_path / "convit"
        model = model.to_empty(device="cpu")
        save_for_hf(model, path)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    text = str(info.value)
    assert "\n" not in text and "gated positional self-attention" in text, text
    assert "which vitviz does not model" in text
