"""Malformed MobileViT checkpoints refused in one line naming the fault (found by
benchmarks/fuzz.py's kind cases): a transformers config.json whose fields transformers itself
can't read (before: AttributeError and huggingface_hub's validation error escaped the loader,
or IndexError came back as its catch-all), and a bare file whose settings give an input of
100000 pixels a side or a patch larger than the input (before: the library check's probe
tried to allocate 120 GB, or timm's interpolate petabytes)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from mobilevit_helpers import BARE_SETTINGS, save_bare, tiny_hf_mobilevit, tiny_timm_mobilevit

from vitviz.checkpoints import CheckpointError, load_checkpoint

pytest.importorskip("transformers")
pytest.importorskip("timm")


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mobilevit") / "hf"
    tiny_hf_mobilevit(seed=3).save_pretrained(folder)
    return folder


def _refusal(path: Path, settings: dict | None = None) -> str:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path, settings)
    text = str(info.value)
    assert "\n" not in text and "could not convert these weights" not in text, text
    return text


@pytest.mark.parametrize(
    ("field", "value", "named"),
    [
        ("hidden_sizes", [16], "hidden_sizes is [16], not a list of 3"),
        ("neck_hidden_sizes", [8, 8], "neck_hidden_sizes is [8, 8], not a list of 7"),
        ("architectures", 5, "architectures is 5"),
        ("num_channels", 1, "takes RGB images"),
        ("id2label", ["a", "b"], "transformers can't read its config.json (AttributeError"),
        ("qkv_bias", "no", "transformers can't read its config.json"),
        ("expand_ratio", 0, "expand_ratio"),
    ],
)
def test_a_config_transformers_cant_read_is_refused(
    hf_folder: Path, tmp_path: Path, field: str, value: object, named: str
) -> None:
    folder = shutil.copytree(hf_folder, tmp_path / "hf")
    cfg = json.loads((folder / "config.json").read_text())
    cfg[field] = value
    (folder / "config.json").write_text(json.dumps(cfg))
    assert named in _refusal(folder)


def test_the_untouched_folder_opens(hf_folder: Path) -> None:
    assert load_checkpoint(hf_folder).config.num_classes == 5


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"image_size": [100000, 100000]}, "input size 100000×100000 is larger than vitviz runs"),
        ({"patch_size": 10**7}, "patch size 10000000 is larger than its input size"),
    ],
)
def test_a_bare_files_absurd_sizes_are_refused_before_anything_runs(
    tmp_path: Path, change: dict, named: str
) -> None:
    path = save_bare(tiny_timm_mobilevit(seed=1), tmp_path / "m.pth", BARE_SETTINGS | change)
    assert named in _refusal(path)
