"""The library check runs at the size vitviz analyses (DESIGN §4), not the model's own alone.

A Hugging Face folder whose image processor crops to less than its config's image_size (a
DINOv2 of 518 cropped to 224, here 56 and 28), a sidecar's ``preprocessing.image_size`` and the
sizes of ``resize: "fit"`` resample the position table; the probe runs there too. A vitviz
resampling made deliberately wrong (antialias switched) passes at the model's own size, where
nothing is resampled, and is refused at the size analysed: that is what proves the probe runs
there. Tiny models with perturbed weights, made by the library itself.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import timm
import torch
from timm.models import save_for_hf
from transformers import (
    BeitConfig,
    BeitForImageClassification,
    BeitImageProcessor,
    BitImageProcessor,
    Dinov2Config,
    Dinov2Model,
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessor,
)
from zoo_helpers import images, max_diff, randomize_

import vitviz.blocks.vit as vit_blocks
from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.library_check import checked
from vitviz.checkpoints.sidecar import sidecar_path

LOGITS_RTOL = 1e-4
WRONG = {"bicubic": "bicubic_antialias", "bicubic_antialias": "bicubic"}


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VITVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("VITVIZ_NO_LIBRARY_CHECK", raising=False)


def _break_interpolation(monkeypatch: pytest.MonkeyPatch) -> None:
    """vitviz's position-table resampling with its antialias switched (a wrong rule that is
    the right one at the model's own size, where nothing is resampled)."""
    right = vit_blocks.resample_grid_embedding

    def wrong(pos, old_grid, new_grid, antialias=False, method="bicubic"):
        return right(pos, old_grid, new_grid, method=WRONG[method])

    monkeypatch.setattr(vit_blocks, "resample_grid_embedding", wrong)


def _relative(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return max_diff(ours, theirs) / float(theirs.abs().max())


def _dinov2(folder: Path, crop: int) -> Dinov2Model:
    """A DINOv2 of config image_size 56 (patch 14: a 4×4 table), its processor cropping to
    ``crop``."""
    config = Dinov2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=56,
        patch_size=14,
        attn_implementation="eager",
    )
    model = randomize_(Dinov2Model(config), seed=3)
    model.save_pretrained(folder)
    processor = BitImageProcessor(
        size={"shortest_edge": crop + 4}, crop_size={"height": crop, "width": crop}
    )
    processor.save_pretrained(folder)
    return model


def _hf_vit(folder: Path, side: int) -> ViTForImageClassification:
    """A ViT classifier of config image_size 64 (patch 16: a 4×4 table), its processor
    squashing to ``side``."""
    config = ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=64,
        patch_size=16,
        num_labels=3,
        attn_implementation="eager",
    )
    model = randomize_(ViTForImageClassification(config), seed=4)
    model.save_pretrained(folder)
    ViTImageProcessor(size={"height": side, "width": side}).save_pretrained(folder)
    return model


def test_dinov2_cropped_below_its_config_size_is_checked_at_the_crop(tmp_path: Path) -> None:
    model = _dinov2(tmp_path / "dino", crop=28)
    loaded = load_checkpoint(tmp_path / "dino")
    assert loaded.config.image_size == (56, 56) and loaded.preprocessing.image_size == (28, 28)
    note = next(n for n in loaded.notes if n.startswith("checked against transformers"))
    assert "at 56×56 and 28×28" in note, note
    x = images(1, 28, 28, seed=5)  # the size analysed: transformers' DINOv2 always resamples
    with torch.no_grad():
        theirs = model(pixel_values=x).pooler_output
        ours = loaded.model(x)
    assert _relative(ours, theirs) <= LOGITS_RTOL


def test_dinov2_with_a_wrong_resampling_is_refused_at_the_crop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _break_interpolation(monkeypatch)
    _dinov2(tmp_path / "own", crop=56)  # analysed at its own size: nothing resampled, exact
    assert any("checked against" in n for n in load_checkpoint(tmp_path / "own").notes)
    _dinov2(tmp_path / "dino", crop=28)
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(tmp_path / "dino")
    message = str(caught.value)
    assert "at 28×28 (a size analysed; its own is 56×56)" in message, message
    assert "logits" in message and "attention" in message and "\n" not in message


def test_hf_vit_squashed_below_its_config_size_is_checked_there(tmp_path: Path) -> None:
    model = _hf_vit(tmp_path / "vit", side=32)
    loaded = load_checkpoint(tmp_path / "vit")
    assert loaded.preprocessing.image_size == (32, 32)
    assert any("at 64×64 and 32×32" in n for n in loaded.notes), loaded.notes
    x = images(1, 32, 32, seed=6)
    with torch.no_grad():
        theirs = model(pixel_values=x, interpolate_pos_encoding=True).logits
        ours = loaded.model(x)
    assert _relative(ours, theirs) <= LOGITS_RTOL


def test_hf_vit_with_a_wrong_resampling_is_refused_at_the_size_analysed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _break_interpolation(monkeypatch)
    _hf_vit(tmp_path / "vit", side=32)
    with pytest.raises(CheckpointError, match=r"at 32×32 \(a size analysed; its own is 64×64\)"):
        load_checkpoint(tmp_path / "vit")


def test_fit_is_checked_at_a_square_a_portrait_and_a_landscape_size(tmp_path: Path) -> None:
    _hf_vit(tmp_path / "vit", side=64)
    sidecar_path(tmp_path / "vit").write_text(json.dumps({"preprocessing": {"resize": "fit"}}))
    loaded = load_checkpoint(tmp_path / "vit")
    note = next(n for n in loaded.notes if n.startswith("checked against"))
    assert "at 64×64 and 80×48 and 48×80" in note and "resize 'fit'" in note, note


def _timm_folder(folder: Path, image_size: int | None) -> torch.nn.Module:
    """timm's ViT at 64×64 (patch 16), saved as timm saves it; a sidecar analysing it at
    ``image_size`` when given."""
    torch.manual_seed(7)
    model = timm.create_model(
        "vit_tiny_patch16_224", pretrained=False, img_size=64, num_classes=3, depth=2
    )
    randomize_(model, seed=7, noise_dtype=torch.float32)
    save_for_hf(model, folder, safe_serialization=True)
    if image_size is not None:
        settings = {"preprocessing": {"image_size": [image_size, image_size]}}
        sidecar_path(folder).write_text(json.dumps(settings))
    return model


def test_a_sidecars_image_size_is_checked_against_timms_dynamic_size(tmp_path: Path) -> None:
    model = _timm_folder(tmp_path / "t", image_size=32)
    loaded = load_checkpoint(tmp_path / "t")
    assert loaded.preprocessing.image_size == (32, 32)
    assert any("at 64×64 and 32×32" in n for n in loaded.notes), loaded.notes
    dynamic = timm.create_model(
        "vit_tiny_patch16_224",
        pretrained=False,
        img_size=64,
        num_classes=3,
        depth=2,
        dynamic_img_size=True,
    ).eval()
    dynamic.load_state_dict(model.state_dict())
    x = images(1, 32, 32, seed=8)
    with torch.no_grad():
        assert _relative(loaded.model(x), dynamic(x)) <= LOGITS_RTOL


def test_a_sidecars_image_size_with_a_wrong_resampling_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _break_interpolation(monkeypatch)
    _timm_folder(tmp_path / "own", image_size=None)
    assert any("checked against timm" in n for n in load_checkpoint(tmp_path / "own").notes)
    _timm_folder(tmp_path / "t", image_size=32)
    with pytest.raises(CheckpointError, match=r"differs from timm .* at 32×32 \(a size analysed"):
        load_checkpoint(tmp_path / "t")


def test_the_probe_sizes_key_the_cached_result(tmp_path: Path) -> None:
    _dinov2(tmp_path / "dino", crop=28)
    loaded = load_checkpoint(tmp_path / "dino")  # checked at both sizes, and kept
    both = checked(
        loaded.model, tmp_path / "dino", loaded.reference, kind=loaded.kind, sizes=[(28, 28)]
    )
    own = checked(loaded.model, tmp_path / "dino", loaded.reference, kind=loaded.kind)
    assert both is not None and both.sizes == ((56, 56), (28, 28))
    assert own is not None and own.sizes == ((56, 56),)  # not the result of the other key


def test_a_library_that_runs_at_its_own_size_only_leaves_the_size_analysed_unchecked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _dinov2(tmp_path / "dino", crop=28)
    loaded = load_checkpoint(tmp_path / "dino")
    ref = loaded.reference
    own_only = dataclasses.replace(ref, how=dataclasses.replace(ref.how, any_size=None))
    _break_interpolation(monkeypatch)  # not reached: the size analysed is not probed
    result = checked(
        loaded.model, tmp_path / "dino", own_only, force=True, kind=loaded.kind, sizes=[(28, 28)]
    )
    assert result is not None and result.ok and result.sizes == ((56, 56),)
    said = "not checked at 28×28, a size analysed: transformers' model here runs at its own size"
    assert said in result.note(), result.note()


def test_a_beit_cropped_below_its_config_size_says_the_crop_is_unchecked(tmp_path: Path) -> None:
    """A BEiT folder (a relative position bias in every layer) whose processor crops 64 to 32:
    transformers' model runs at the crop (interpolate_pos_encoding resamples its bias tables),
    vitviz's network does not resample a relative position bias. So it is checked at its own
    64×64 only, the note naming the crop and why; an analysis at the crop is refused in one
    line (not shown wrong)."""
    config = BeitConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=64,
        patch_size=16,
        num_labels=3,
        use_absolute_position_embeddings=False,
        use_relative_position_bias=True,
        use_mean_pooling=True,
        layer_scale_init_value=0.1,
        attn_implementation="eager",
    )
    model = randomize_(BeitForImageClassification(config), seed=5)
    model.save_pretrained(tmp_path / "beit")
    crop = {"height": 32, "width": 32}
    processor = BeitImageProcessor(
        size={"height": 40, "width": 40}, crop_size=crop, do_center_crop=True
    )
    processor.save_pretrained(tmp_path / "beit")
    loaded = load_checkpoint(tmp_path / "beit")
    assert loaded.config.image_size == (64, 64) and loaded.preprocessing.image_size == (32, 32)
    note = next(n for n in loaded.notes if n.startswith("checked against transformers"))
    assert "at 64×64: logits" in note, note
    assert "not checked at 32×32, a size analysed: the probe fails there" in note, note
    assert "relative position bias learnt on 16 patches" in note and "\n" not in note, note
    x = images(1, 32, 32, seed=9)
    with torch.no_grad():  # the library's model runs there: the limit is vitviz's network
        assert model(pixel_values=x, interpolate_pos_encoding=True).logits.shape == (1, 3)
        with pytest.raises(ValueError, match="analyse it at the model's own input size"):
            loaded.model(x)
