"""vitviz's own checkpoint format (DESIGN §4, §8): self-describing, exact, atomic."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import CLASS_NAMES, random_vit
from safetensors import safe_open
from safetensors.torch import load_file, save_file

import vitviz.checkpoints.native as native
from vitviz.blocks import create_model
from vitviz.checkpoints import CheckpointError, load_checkpoint, read_checkpoint, save_checkpoint
from vitviz.checkpoints.atomic import atomic_path
from vitviz.imaging import Preprocessing


def _inputs(seed: int = 1, size: tuple[int, int] = (32, 32)) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(3, 3, *size, generator=g)


def test_one_safetensors_file_whose_metadata_describes_the_model(tmp_path: Path) -> None:
    model = random_vit()
    prep = Preprocessing(
        image_size=(32, 32),
        resize="squash",
        mean=(0.4, 0.45, 0.5),
        std=(0.2, 0.25, 0.3),
        interpolation="bilinear",
    )
    path = save_checkpoint(
        model,
        tmp_path / "m.safetensors",
        class_names=CLASS_NAMES,
        preprocessing=prep,
        provenance={"epochs": 3, "dataset": "shapes"},
    )
    assert path == tmp_path / "m.safetensors"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.safetensors"]

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        keys = set(f.keys())
    assert keys == set(model.state_dict())
    assert json.loads(meta["config"]) == model.config.to_dict()
    assert json.loads(meta["class_names"]) == CLASS_NAMES
    assert json.loads(meta["preprocessing"]) == prep.to_dict()
    provenance = json.loads(meta["provenance"])
    assert provenance["epochs"] == 3
    assert provenance["dataset"] == "shapes"
    # The tensors are the model's, bit for bit.
    for key, value in load_file(str(path)).items():
        assert torch.equal(value, model.state_dict()[key]), key


def test_save_then_load_gives_the_same_model(tmp_path: Path) -> None:
    model = random_vit(seed=3)
    prep = Preprocessing(image_size=(32, 32), resize="fit", crop_pct=0.875)
    path = save_checkpoint(
        model,
        tmp_path / "m.safetensors",
        class_names=CLASS_NAMES,
        preprocessing=prep,
        provenance={"note": "unit test"},
    )
    loaded = load_checkpoint(path)

    assert loaded.family == "vitviz"
    assert loaded.path == path
    assert loaded.config == model.config
    assert loaded.class_names == CLASS_NAMES
    assert loaded.preprocessing == prep
    assert loaded.provenance["note"] == "unit test"
    x = _inputs()
    with torch.no_grad():
        assert torch.equal(loaded.model(x), model(x))
        # Also on a non-square input, where the position embedding is interpolated.
        y = _inputs(2, (16, 40))
        assert torch.equal(loaded.model(y), model(y))


def test_tutorial_variant_round_trips_with_default_names_and_preprocessing(
    tmp_path: Path,
) -> None:
    torch.manual_seed(0)
    model = create_model("cifar10-tutorial").eval()
    loaded = load_checkpoint(save_checkpoint(model, tmp_path / "tut.safetensors"))
    assert loaded.config == model.config
    assert len(loaded.class_names) == 10
    assert len(set(loaded.class_names)) == 10
    assert tuple(loaded.preprocessing.image_size) == (32, 32)
    x = _inputs()
    with torch.no_grad():
        assert torch.equal(loaded.model(x), model(x))


def test_loaded_model_is_in_eval_mode_even_if_saved_while_training(tmp_path: Path) -> None:
    model = random_vit(drop_rate=0.5, attn_drop_rate=0.5, drop_path_rate=0.5).train()
    loaded = load_checkpoint(save_checkpoint(model, tmp_path / "m.safetensors"))
    assert not any(m.training for m in loaded.model.modules())
    x = _inputs()
    with torch.no_grad():
        # Dropout would make two calls differ.
        assert torch.equal(loaded.model(x), loaded.model(x))
        assert torch.equal(loaded.model(x), model.eval()(x))


@pytest.mark.parametrize("names", [CLASS_NAMES[:4], [*CLASS_NAMES, "extra"], []])
def test_wrong_number_of_class_names_is_refused(tmp_path: Path, names: list[str]) -> None:
    model = random_vit()
    target = tmp_path / "m.safetensors"
    with pytest.raises(ValueError, match=rf"{len(names)} class names.*5 classes"):
        save_checkpoint(model, target, class_names=names)
    assert not target.exists()
    assert list(tmp_path.iterdir()) == []


def test_failed_save_keeps_the_previous_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old_model = random_vit(seed=1)
    target = save_checkpoint(old_model, tmp_path / "run.safetensors", class_names=CLASS_NAMES)
    before = target.read_bytes()

    def half_then_crash(tensors, filename, metadata=None):
        save_file(tensors, filename, metadata=metadata)
        data = Path(filename).read_bytes()
        Path(filename).write_bytes(data[: len(data) // 2])
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(native, "save_file", half_then_crash)
    with pytest.raises(OSError, match="simulated"):
        save_checkpoint(random_vit(seed=2), target, class_names=CLASS_NAMES)

    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["run.safetensors"]  # no temporary left
    loaded = load_checkpoint(target)
    x = _inputs()
    with torch.no_grad():
        assert torch.equal(loaded.model(x), old_model(x))


def test_failed_first_save_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def crash(tensors, filename, metadata=None):
        Path(filename).write_bytes(b"\x00" * 100)
        raise KeyboardInterrupt

    monkeypatch.setattr(native, "save_file", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(random_vit(), tmp_path / "sub" / "m.safetensors")
    assert list((tmp_path / "sub").iterdir()) == []


def test_atomic_path_replaces_only_on_success(tmp_path: Path) -> None:
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        assert tmp.parent == tmp_path
        assert tmp != target
        tmp.write_bytes(b"half")
        raise RuntimeError("crash")
    assert target.read_bytes() == b"old"
    with atomic_path(target) as tmp:
        tmp.write_bytes(b"new")
        assert target.read_bytes() == b"old"  # not visible until the block ends
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_overwriting_a_checkpoint_replaces_it(tmp_path: Path) -> None:
    target = tmp_path / "m.safetensors"
    save_checkpoint(random_vit(seed=1), target)
    second = random_vit(seed=2)
    save_checkpoint(second, target, provenance={"step": 2})
    loaded = load_checkpoint(target)
    assert loaded.provenance["step"] == 2
    x = _inputs()
    with torch.no_grad():
        assert torch.equal(loaded.model(x), second(x))
    assert [p.name for p in tmp_path.iterdir()] == ["m.safetensors"]


def _resave(src: Path, dst: Path, **meta_changes: str | None) -> Path:
    with safe_open(str(src), framework="pt") as f:
        meta = dict(f.metadata())
    for k, v in meta_changes.items():
        if v is None:
            meta.pop(k, None)
        else:
            meta[k] = v
    save_file(load_file(str(src)), str(dst), metadata=meta)
    return dst


def test_future_format_version_gives_a_clear_message(tiny_ckpt: Path) -> None:
    future = _resave(tiny_ckpt, tiny_ckpt.with_name("future.safetensors"), format_version="99")
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(future)
    msg = str(info.value)
    assert "99" in msg
    assert "version" in msg.lower()
    assert "update" in msg.lower()


def test_damaged_native_metadata_is_a_checkpoint_error(tiny_ckpt: Path) -> None:
    bad = _resave(tiny_ckpt, tiny_ckpt.with_name("bad.safetensors"), config="{not json")
    with pytest.raises(CheckpointError, match="metadata"):
        load_checkpoint(bad)
    missing = _resave(tiny_ckpt, tiny_ckpt.with_name("noconfig.safetensors"), config=None)
    with pytest.raises(CheckpointError):
        load_checkpoint(missing)


def test_read_checkpoint_exposes_the_native_metadata(tiny_ckpt: Path, tiny_model) -> None:
    raw = read_checkpoint(tiny_ckpt)
    assert raw.path == tiny_ckpt
    assert raw.metadata["format"] == "vitviz"
    assert json.loads(raw.metadata["class_names"]) == CLASS_NAMES
    assert set(raw.state) == set(tiny_model.state_dict())


def test_saved_files_get_the_usual_permissions(tmp_path: Path, tiny_model) -> None:
    import os

    umask = os.umask(0o022)
    try:
        path = save_checkpoint(tiny_model, tmp_path / "m.safetensors")
    finally:
        os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o644
