"""A folder's image processor read as transformers reads it: transformers 5 writes a processor's
settings (CLIPProcessor, ...) to processor_config.json, the image processor's under its
``image_processor`` key, and no preprocessor_config.json. Every family that reads a processor
gets it through one reader (checkpoints/folders.read_image_processor)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from clip_fixtures import CORPUS, hf_tokenizer, learn_bpe, tiny_clip
from swin_helpers import tiny_hf_swin
from zoo_helpers import randomize_

from vitviz.checkpoints import load_checkpoint
from vitviz.checkpoints.errors import CheckpointError

HALF = [0.5, 0.5, 0.5]
QUARTER = [0.25, 0.25, 0.25]


def _processor(mean: list[float], side: int) -> dict:
    return {
        "image_processor_type": "ViTImageProcessor",
        "do_resize": True,
        "size": {"height": side, "width": side},
        "do_normalize": True,
        "image_mean": mean,
        "image_std": [0.2, 0.2, 0.2],
        "resample": 3,
    }


def _write(folder: Path, name: str, value: dict) -> None:
    (folder / name).write_text(json.dumps(value), encoding="utf-8")


@pytest.fixture(scope="module")
def vit_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A transformers ViTModel folder with no image processor files (each test adds its own)."""
    from transformers import ViTConfig, ViTModel

    config = ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                       intermediate_size=64, patch_size=8, image_size=32)  # fmt: skip
    folder = tmp_path_factory.mktemp("vit")
    randomize_(ViTModel(config)).save_pretrained(folder)
    return folder


def _copy(folder: Path, to: Path) -> Path:
    to.mkdir()
    for name in ("config.json", "model.safetensors"):
        (to / name).write_bytes((folder / name).read_bytes())
    return to


def test_a_clip_processor_saved_by_transformers_sets_the_preprocessing(tmp_path: Path) -> None:
    """CLIPProcessor.save_pretrained with mean 0.5: vitviz normalises as the library's own
    image processor, read back from the folder, does (not with CLIP's 0.481 …)."""
    from transformers import AutoImageProcessor, CLIPImageProcessor, CLIPProcessor

    vocab, merges = learn_bpe(CORPUS, merges=150)
    tiny_clip(len(vocab), seed=2).save_pretrained(tmp_path)
    image = CLIPImageProcessor(size={"shortest_edge": 32}, crop_size=32, image_mean=HALF,
                               image_std=QUARTER, resample=2)  # fmt: skip
    CLIPProcessor(image_processor=image, tokenizer=hf_tokenizer(vocab, merges)).save_pretrained(
        tmp_path
    )
    library = AutoImageProcessor.from_pretrained(tmp_path)
    loaded = load_checkpoint(tmp_path)
    assert list(loaded.preprocessing.mean) == pytest.approx(library.image_mean) == HALF
    assert list(loaded.preprocessing.std) == pytest.approx(library.image_std) == QUARTER
    assert loaded.preprocessing.interpolation == "bilinear"
    assert not any("defaults are used" in note for note in loaded.notes)


def test_processor_config_is_read_first_as_transformers_does(vit_folder, tmp_path) -> None:
    from transformers import AutoImageProcessor

    folder = _copy(vit_folder, tmp_path / "both")
    _write(folder, "preprocessor_config.json", _processor(QUARTER, 32))
    _write(folder, "processor_config.json", {"image_processor": _processor(HALF, 48)})
    loaded = load_checkpoint(folder)
    library = AutoImageProcessor.from_pretrained(folder)
    assert list(loaded.preprocessing.mean) == pytest.approx(library.image_mean) == HALF
    assert tuple(loaded.preprocessing.image_size) == (48, 48)
    assert loaded.preprocessing.interpolation == "bicubic"


def test_a_swin_folder_reads_processor_config(tmp_path: Path) -> None:
    folder = tmp_path / "swin"
    tiny_hf_swin(window=4, image_size=64, version=1).save_pretrained(folder)
    _write(folder, "processor_config.json", {"image_processor": _processor(HALF, 64)})
    loaded = load_checkpoint(folder)
    assert list(loaded.preprocessing.mean) == pytest.approx(HALF)


def test_a_processor_config_without_an_image_processor_is_named(vit_folder, tmp_path) -> None:
    folder = _copy(vit_folder, tmp_path / "tokenizer-only")
    _write(folder, "processor_config.json", {"processor_class": "SomeProcessor"})
    notes = load_checkpoint(folder).notes
    assert (
        "no preprocessor_config.json, and processor_config.json has no image_processor: "
        "the vit image processor's defaults are used"
    ) in notes
    bare = load_checkpoint(_copy(vit_folder, tmp_path / "bare")).notes
    assert (
        "no preprocessor_config.json or processor_config.json: "
        "the vit image processor's defaults are used"
    ) in bare


def test_an_image_processor_that_is_not_an_object_is_refused_in_one_line(vit_folder, tmp_path):
    folder = _copy(vit_folder, tmp_path / "broken")
    _write(folder, "processor_config.json", {"image_processor": [0.5]})
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(folder)
    why = "broken/processor_config.json: its image_processor is not a JSON object."
    assert str(info.value) == why
