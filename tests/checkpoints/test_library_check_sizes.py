"""The library check runs at the size vitviz analyses (DESIGN §4), not the model's own alone.

A Hugging Face folder whose image processor crops to less than its config's image_size (a
DINOv2 of 518 cropped to 224, here 56 and 28), a sidecar's ``preprocessing.image_size`` and the
sizes of ``resize: "fit"`` resample the position table, and a BEiT's relative position bias
tables; the probe runs there too. A vitviz resampling made deliberately wrong (antialias
switched; a bias table's align_corners or mode) passes at the model's own size, where nothing
is resampled, and is refused at the size analysed: that is what proves the probe runs there.
timm's classes without a dynamic size (BEiT, the relpos ViTs) are checked there through their
set_input_size. Tiny models with perturbed weights, made by the library itself.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
from pathlib import Path

import numpy as np
import pytest
import timm
import torch
from test_zoo_beit import tiny_beit
from test_zoo_relpos import tiny as tiny_relpos
from timm.models import save_for_hf
from transformers import (
    BeitConfig,
    BeitForImageClassification,
    BeitImageProcessor,
    BitImageProcessor,
    Data2VecVisionConfig,
    Data2VecVisionForImageClassification,
    Dinov2Config,
    Dinov2Model,
    ViTConfig,
    ViTForImageClassification,
    ViTImageProcessor,
)
from zoo_helpers import images, max_diff, randomize_

import vitviz.blocks.layers as vit_layers
import vitviz.blocks.vit as vit_blocks
from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.families.timm_library import set_to_size
from vitviz.checkpoints.library_check import checked
from vitviz.checkpoints.sidecar import sidecar_path
from vitviz.pipeline.analysis import analyze

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


def hf_beit(
    folder: Path, crop: int, model_type: str = "beit", absolute: bool = False, seed: int = 5
) -> torch.nn.Module:
    """A transformers BEiT (or Data2Vec-vision) classifier of config image_size 64 (patch 16: a
    4×4 grid, a 7×7 table of offsets in each layer's relative position bias; an absolute table
    too when ``absolute``), mean pooling, its processor cropping to ``crop``."""
    names = {
        "beit": (BeitConfig, BeitForImageClassification),
        "data2vec-vision": (Data2VecVisionConfig, Data2VecVisionForImageClassification),
    }
    config = names[model_type][0](
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=64,
        patch_size=16,
        num_labels=3,
        use_absolute_position_embeddings=absolute,
        use_relative_position_bias=True,
        use_mean_pooling=True,
        layer_scale_init_value=0.1,
        attn_implementation="eager",
    )
    model = randomize_(names[model_type][1](config), seed=seed)
    model.save_pretrained(folder)
    side = {"height": crop + 8, "width": crop + 8}
    crop_size = {"height": crop, "width": crop}
    BeitImageProcessor(size=side, crop_size=crop_size, do_center_crop=True).save_pretrained(folder)
    return model


def _break_bias_resampling(monkeypatch: pytest.MonkeyPatch, **wrong: object) -> None:
    """vitviz's resampling of a relative position bias table with one of transformers' settings
    changed (``wrong``: align_corners=True, or mode 'bicubic'): a wrong rule that is the right
    one at the model's own size, where no table is resampled."""
    right, interpolate = vit_layers.resample_table, torch.nn.functional.interpolate

    def changed(*args: object, **kwargs: object) -> torch.Tensor:
        return interpolate(*args, **{**kwargs, **wrong})

    def wrong_rule(table, old_grid, new_grid, cls):
        with monkeypatch.context() as inside:
            inside.setattr(torch.nn.functional, "interpolate", changed)
            return right(table, old_grid, new_grid, cls)

    monkeypatch.setattr(vit_layers, "resample_table", wrong_rule)


@pytest.mark.parametrize(
    ("model_type", "absolute"),
    [("beit", False), ("data2vec-vision", True)],
    ids=["beit", "data2vec-absolute-table"],
)
def test_a_beit_cropped_below_its_config_size_is_checked_at_the_crop(
    tmp_path: Path, model_type: str, absolute: bool
) -> None:
    """A BEiT folder (a relative position bias in every layer) whose processor crops 64 to 32:
    transformers' model resamples its bias tables there (interpolate_pos_encoding), and so does
    vitviz's network, by the same rule (DESIGN §3): checked at 64×64 and 32×32, equal to
    transformers' at the crop, and analysed there."""
    model = hf_beit(tmp_path / "beit", crop=32, model_type=model_type, absolute=absolute)
    loaded = load_checkpoint(tmp_path / "beit")
    assert loaded.config.image_size == (64, 64) and loaded.preprocessing.image_size == (32, 32)
    note = next(n for n in loaded.notes if n.startswith("checked against transformers"))
    assert "at 64×64 and 32×32: logits" in note and "not checked" not in note, note
    x = images(1, 32, 32, seed=9)
    with torch.no_grad():
        theirs = model(pixel_values=x, interpolate_pos_encoding=True).logits
        ours = loaded.model(x)
    assert _relative(ours, theirs) <= LOGITS_RTOL
    photo = np.random.default_rng(9).integers(0, 256, (50, 60, 3), dtype=np.uint8)
    assert analyze(loaded, photo).grid == (2, 2)  # at the size analysed, the crop


@pytest.mark.parametrize(
    "wrong", [{"align_corners": True}, {"mode": "bicubic"}], ids=["align-corners", "bicubic"]
)
def test_a_beit_with_a_wrong_bias_resampling_is_refused_at_the_crop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, wrong: dict
) -> None:
    _break_bias_resampling(monkeypatch, **wrong)
    hf_beit(tmp_path / "own", crop=64)  # analysed at its own size: no table resampled, exact
    assert any("checked against" in n for n in load_checkpoint(tmp_path / "own").notes)
    hf_beit(tmp_path / "beit", crop=32)
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(tmp_path / "beit")
    message = str(caught.value)
    assert "at 32×32 (a size analysed; its own is 64×64)" in message, message
    assert "logits" in message and "attention" in message and "\n" not in message, message


def test_a_beit_with_fit_is_checked_at_non_square_sizes(tmp_path: Path) -> None:
    """transformers' BEiT runs at any size (its bias tables resampled to the (2gh − 1) ×
    (2gw − 1) offsets of a non-square grid): the sizes of resize 'fit' are checked there."""
    model = hf_beit(tmp_path / "beit", crop=64)
    sidecar_path(tmp_path / "beit").write_text(json.dumps({"preprocessing": {"resize": "fit"}}))
    loaded = load_checkpoint(tmp_path / "beit")
    note = next(n for n in loaded.notes if n.startswith("checked against"))
    assert "at 64×64 and 80×48 and 48×80" in note and "not checked" not in note, note
    x = images(1, 48, 80, seed=10)
    with torch.no_grad():
        theirs = model(pixel_values=x, interpolate_pos_encoding=True).logits
        assert _relative(loaded.model(x), theirs) <= LOGITS_RTOL


def _timm_relative(folder: Path, name: str, image_size: int | None, **options) -> torch.nn.Module:
    """A tiny timm relative-position model (32×32, patch 8) as timm saves it, a sidecar
    analysing it at ``image_size`` when given."""
    model = tiny_beit(seed=6, **options) if name == "beit" else tiny_relpos(name, 6, **options)
    save_for_hf(model, folder, safe_serialization=True)
    if image_size is not None:
        settings = {"preprocessing": {"image_size": [image_size, image_size]}}
        sidecar_path(folder).write_text(json.dumps(settings))
    return model


def test_timms_beit_has_no_dynamic_size_and_resizes_its_tables_by_another_rule(
    tmp_path: Path,
) -> None:
    """timm's Beit takes no dynamic_img_size; it runs at another size once set_input_size has
    resized each bias table by timm's own interpolation (resize_rel_pos_bias_table), which is
    not transformers' bilinear one that vitviz follows. The check runs timm's model so set, so
    a timm BEiT analysed at 16×16 is refused there, naming the size (not opened to show
    numbers timm's model does not give); at its own size it opens checked."""
    from timm.models.beit import Beit

    assert "dynamic_img_size" not in inspect.signature(Beit.__init__).parameters
    _timm_relative(tmp_path / "own", "beit", image_size=None)
    own = load_checkpoint(tmp_path / "own")
    assert any(n.startswith("checked against timm") for n in own.notes), own.notes
    _timm_relative(tmp_path / "small", "beit", image_size=16)
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(tmp_path / "small")
    message = str(caught.value)
    assert "differs from timm" in message, message
    assert "at 16×16 (a size analysed; its own is 32×32)" in message, message


def test_a_timm_relpos_mlp_at_another_size_is_checked_through_set_input_size(
    tmp_path: Path,
) -> None:
    """A relpos ViT's bias MLP is evaluated at the new grid's offsets, by timm's set_input_size
    as by vitviz: checked there, and equal to timm's model so set."""
    model = _timm_relative(tmp_path / "t", "vit_relpos_small_patch16_224", image_size=16)
    loaded = load_checkpoint(tmp_path / "t")
    assert any("at 32×32 and 16×16: logits" in n for n in loaded.notes), loaded.notes
    sized = set_to_size(copy.deepcopy(model), (16, 16))
    x = images(1, 16, 16, seed=11)
    with torch.no_grad():
        assert _relative(loaded.model(x), sized(x)) <= LOGITS_RTOL
