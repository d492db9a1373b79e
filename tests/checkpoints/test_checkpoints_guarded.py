"""One guarded path from a file to the family detectors (reading.checked_state): a detector only
ever sees names as keys and dense tensors with data as values; anything else, and any damaged
container, ends in one line that names the file."""

from __future__ import annotations

import json
import random
import zipfile
from pathlib import Path
from typing import Any

import pytest
import torch
from hostile_checkpoints import (
    ODD_TENSORS,
    TV_SIDECAR,
    file_bytes,
    head_weight_as,
    spanning_disks,
    tv_state,
)
from hostile_images import bitflip

import vitviz.checkpoints.families as families
from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.families import Family, Source

ODD_KEYS = {"none": None, "int": 0, "tuple": ("a", 1), "bytes": b"k", "float": 1.5, "empty": ""}
POSITIONS = ("first", "middle", "last", "only", "in-wrapper")


def _with_key(state: dict[Any, torch.Tensor], key: Any, position: str) -> Any:
    """``state`` with one odd ``key`` (holding a real tensor) at ``position``."""
    items = list(state.items())
    odd = (key, state["class_token"].clone())
    if position == "only":
        return dict([odd])
    at = {"first": 0, "middle": len(items) // 2, "last": len(items)}.get(position, 0)
    mixed = dict([*items[:at], odd, *items[at:]])
    return {"state_dict": mixed, "epoch": 3} if position == "in-wrapper" else mixed


def _write(folder: Path, name: str, data: bytes | Any) -> Path:
    path = folder / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        torch.save(data, path)
    (folder / f"{name}.vitviz.json").write_text(json.dumps(TV_SIDECAR))
    return path


def _refused_in_one_line(path: Path, *words: str) -> str:
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "\n" not in message, message
    assert message.startswith(path.name), message
    for word in words:
        assert word in message, message
    return message


@pytest.fixture
def detectors_see(monkeypatch: pytest.MonkeyPatch) -> list[tuple[type, type]]:
    """Every (key type, value type) any family detector is shown from now on."""
    seen: list[tuple[type, type]] = []

    def spy(detect: Any) -> Any:
        def wrapped(source: Source) -> bool:
            seen.extend((type(k), type(v)) for k, v in source.state.items())
            return detect(source)

        return wrapped

    spied = tuple(Family(f.name, spy(f.detect), f.convert) for f in families.all_families())
    monkeypatch.setattr(families, "all_families", lambda: spied)
    return seen


def test_the_spy_sees_what_a_detector_sees(tmp_path: Path, detectors_see: list) -> None:
    load_checkpoint(_write(tmp_path, "tv.pth", tv_state()))
    assert detectors_see and set(detectors_see) == {(str, torch.Tensor)}


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("kind", list(ODD_KEYS))
def test_a_key_that_is_not_a_name_never_reaches_a_detector(
    tmp_path: Path, detectors_see: list, kind: str, position: str
) -> None:
    path = _write(tmp_path, "odd.pth", _with_key(tv_state(), ODD_KEYS[kind], position))
    said = "(empty)" if kind == "empty" else f"of type {type(ODD_KEYS[kind]).__name__}"
    _refused_in_one_line(path, "key that is not a name", said)
    assert detectors_see == []


@pytest.mark.parametrize("kind", ODD_TENSORS)
def test_a_tensor_no_family_can_use_is_refused_by_name(
    tmp_path: Path, detectors_see: list, kind: str
) -> None:
    path = _write(tmp_path, "odd.pth", head_weight_as(kind))
    _refused_in_one_line(path, "heads.head.weight")
    assert detectors_see == []


@pytest.mark.parametrize("field", ["disk", "disks"])
def test_a_zip_claiming_to_span_disks_is_refused_as_damaged(tmp_path: Path, field: str) -> None:
    """The reported ``zipfile.BadZipFile: zipfiles that span multiple disks are not supported``:
    the zip64 end-of-central-directory locator of torch's zip says disk 1 (or 2 disks)."""
    path = _write(tmp_path, "tv.pth", spanning_disks(file_bytes("tv-zip"), field))
    with pytest.raises(zipfile.BadZipFile, match="span multiple disks"):
        zipfile.ZipFile(path)
    _refused_in_one_line(path, "damaged", "span multiple disks")


# Flipped bits in the last 64 bytes of torch's zip (its end-of-central-directory records, where
# the reported case's flips landed), then anywhere in each container.
TAIL_SEEDS = range(24)
ANYWHERE = [(kind, seed) for kind in ("tv-zip", "tv-legacy", "tv-safetensors") for seed in (1, 2)]


def _flipped(kind: str, seed: int, tail: bool) -> bytes:
    data = file_bytes(kind)
    rng = random.Random(seed)
    if not tail:
        return bitflip(data, rng, rng.randint(1, 8))
    end = bitflip(data[-64:], rng, rng.randint(1, 8))
    return data[:-64] + end


def _loads_or_refuses_in_one_line(path: Path) -> str | None:
    try:
        load_checkpoint(path)
    except CheckpointError as exc:
        assert "\n" not in str(exc) and str(exc).startswith(path.name), str(exc)
        return str(exc)
    return None


def test_bits_flipped_in_a_zips_last_records_end_in_one_line(tmp_path: Path) -> None:
    messages = []
    for seed in TAIL_SEEDS:
        folder = tmp_path / str(seed)
        folder.mkdir()
        path = _write(folder, "tv.pth", _flipped("tv-zip", seed, tail=True))
        messages.append(_loads_or_refuses_in_one_line(path))
    # the set reaches the reported error, and more than one kind of damage
    assert any(m and "span multiple disks" in m for m in messages), messages
    assert len({m for m in messages}) > 2, messages


@pytest.mark.parametrize(("kind", "seed"), ANYWHERE)
def test_bits_flipped_anywhere_end_in_one_line(tmp_path: Path, kind: str, seed: int) -> None:
    suffix = ".safetensors" if kind == "tv-safetensors" else ".pth"
    path = _write(tmp_path, "tv" + suffix, _flipped(kind, seed, tail=False))
    _loads_or_refuses_in_one_line(path)
