"""A timm folder whose pretrained_cfg input_size is not the model's own size (model_args
img_size, the position table): the window analyses at the model's size, the size the library
check ran at, and a note says the pretrained_cfg was set aside (DESIGN §4)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import timm
import torch
from PIL import Image
from safetensors.torch import save_file
from skimage.data import chelsea
from swin_helpers import DEPTHS, EMBED, HEADS
from zoo_helpers import randomize_

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.imaging.preprocess import prepare_image

# (architecture, the model_args it is built with, the pretrained_cfg's other size)
CASES = {
    "vit": (
        "vit_tiny_patch16_224",
        dict(img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2, num_classes=5),
        48,
    ),
    "swin": (
        "swin_tiny_patch4_window7_224",
        dict(
            img_size=32,
            window_size=4,
            embed_dim=EMBED,
            depths=DEPTHS,
            num_heads=HEADS,
            num_classes=5,
        ),
        64,
    ),
    "crossvit": (  # two branches (120 px and 112 px: timm's scale), two position tables
        "crossvit_tiny_240",
        dict(
            img_size=120,
            embed_dim=[24, 48],
            depth=[[1, 2, 0], [1, 1, 0]],
            num_heads=[2, 4],
            num_classes=5,
        ),
        240,
    ),
}


@pytest.fixture(scope="module", params=sorted(CASES))
def folder(request, tmp_path_factory) -> tuple[torch.nn.Module, Path, int, int]:
    """timm's model (perturbed) saved as a folder whose pretrained_cfg says another size."""
    arch, args, other = CASES[request.param]
    model = randomize_(timm.create_model(arch, pretrained=False, **args), seed=3)
    where = tmp_path_factory.mktemp(request.param)
    state = {k: v.contiguous() for k, v in model.state_dict().items()}
    save_file(state, where / "model.safetensors")
    pretrained = {"input_size": [3, other, other], "crop_pct": 0.875, "interpolation": "bicubic"}
    config = {
        "architecture": arch,
        "num_classes": 5,
        "model_args": args,
        "pretrained_cfg": pretrained,
    }
    (where / "config.json").write_text(json.dumps(config))
    return model, where, args["img_size"], other


def test_the_models_own_size_is_analysed_and_the_other_is_noted(folder) -> None:
    _, where, size, other = folder
    loaded = load_checkpoint(where)
    assert loaded.config.image_size == (size, size)
    assert loaded.preprocessing.image_size == (size, size), "not the size the check ran at"
    said = [n for n in loaded.notes if "pretrained_cfg input_size" in n]
    assert len(said) == 1 and f"{other}×{other}" in said[0] and f"{size}×{size}" in said[0]
    assert any(n.startswith("checked against timm") for n in loaded.notes), loaded.notes


def test_what_the_window_analyses_is_what_timm_computes(folder) -> None:
    """The picture as the window prepares it, through vitviz's model and timm's own."""
    model, where, _, _ = folder
    loaded = load_checkpoint(where)
    prep = loaded.preprocessing
    x = prepare_image(Image.fromarray(chelsea()), prep, 1).tensor[None]  # (1, 3, H, W)
    with torch.no_grad():
        theirs = model(x)  # timm's model built at img_size rejects any other size
        ours, _ = loaded.kind.library_outputs(loaded.model, x)
    assert torch.allclose(ours, theirs, rtol=1e-4, atol=1e-5 * theirs.abs().max().item())


def test_a_table_of_another_size_than_the_only_size_given_is_refused_in_one_line(
    tmp_path: Path,
) -> None:
    """No model_args img_size: pretrained_cfg's 48 is all that names a size, and the position
    table is 32 px's: which is meant can't be told, so the file is refused, never resized."""
    arch, args, other = CASES["vit"]
    model = randomize_(timm.create_model(arch, pretrained=False, **args), seed=3)
    save_file(dict(model.state_dict()), tmp_path / "model.safetensors")
    unsized = {k: v for k, v in args.items() if k != "img_size"}
    config = {"architecture": arch, "num_classes": 5, "model_args": unsized,
              "pretrained_cfg": {"input_size": [3, other, other]}}  # fmt: skip
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(tmp_path)
    text = str(info.value)
    assert "pos_embed" in text and "\n" not in text, text
