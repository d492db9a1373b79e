"""Checks the timm zoo tests of the staged and two-branch kinds (CrossViT, VOLO, LeViT, MViTv2,
TNT, PiT) share: logits within 1e-4 of timm's (relative to its largest), every attention within
1e-5, the library check's note, a broken state dict refused in one line, vitviz's own file
opening to the same network. Each kind's test calls them with its own model, layers and words,
so every check still runs, and can fail, for each kind."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import Tensor, nn
from zoo_helpers import images

from vitviz.checkpoints import CheckpointError, load_checkpoint

LOGITS_RTOL, ATTENTION_ATOL = 1e-4, 1e-5


def assert_logits_close(got: Tensor, want: Tensor, scale: float | None = None) -> float:
    """``got`` within 1e-4 of ``want`` relative to ``scale`` (default: ``want``'s largest
    magnitude); returns that scale, for the next pass's check."""
    scale = float(want.abs().max()) if scale is None else scale
    err = float((got - want).abs().max()) / scale
    assert err < LOGITS_RTOL, err
    return scale


def assert_attentions_close(got: Sequence[Tensor], want: Sequence[Tensor], count: int) -> None:
    """``count`` attention tensors each of ``want``'s shape and within 1e-5 of it."""
    assert len(got) == len(want) == count
    for i, (a, b) in enumerate(zip(got, want, strict=True)):
        assert a.shape == b.shape, (i, a.shape, b.shape)
        assert float((a - b).abs().max()) < ATTENTION_ATOL, i


def assert_checked_against_timm(loaded: Any) -> None:
    """The library check ran on ``loaded`` (its notes say so)."""
    assert any("checked against timm" in n for n in loaded.notes), loaded.notes


def assert_opens_as_the_reference(loaded: Any, ref: nn.Module, size: int, seed: int = 2) -> None:
    """``loaded``'s logits on one ``size``-px image equal ``ref``'s within 1e-4."""
    x = images(1, size, size, seed=seed)
    with torch.no_grad():
        want, got = ref(x), loaded.model(x)
    assert_logits_close(got, want)


def broken(state: dict[str, Tensor], change: tuple) -> dict[str, Tensor]:
    """A copy of ``state`` with ``change`` made: ("drop", key), ("drop_prefix", prefix) or
    ("set", key, tensor)."""
    state = dict(state)
    if change[0] == "drop":
        del state[change[1]]
    elif change[0] == "drop_prefix":
        state = {k: v for k, v in state.items() if not k.startswith(change[1])}
    else:
        assert change[0] == "set", change
        state[change[1]] = change[2]
    return state


def save_state(
    state: dict[str, Tensor], path: Path, settings: dict[str, Any] | None = None
) -> Path:
    """``state`` saved by torch at ``path``, with ``settings`` beside it (its .vitviz.json)."""
    torch.save(state, path)
    if settings is not None:
        path.with_name(path.name + ".vitviz.json").write_text(json.dumps(settings))
    return path


def refused_in_one_line(
    path: Path,
    *words: str,
    settings: dict[str, Any] | None = None,
    error: type[Exception] = CheckpointError,
) -> str:
    """Opening ``path`` (with ``settings``) raises ``error`` whose message is one line naming
    every one of ``words``; returns the message."""
    with pytest.raises(error) as info:
        load_checkpoint(path, settings)
    text = str(info.value)
    assert "\n" not in text and all(w in text for w in words), text
    return text


def assert_library_check_names(loaded: Any, words: str) -> None:
    """Exactly one note is the library check's, and it names ``words`` (timm's model built with
    the file's sizes)."""
    checked = [n for n in loaded.notes if "checked against timm" in n]
    assert len(checked) == 1 and checked[0].startswith("checked against timm"), loaded.notes
    assert words in checked[0], checked[0]


def assert_own_file_opens_as_it_was(ref: nn.Module, bare: Path, tmp_path: Path, size: int) -> None:
    """``vitviz-cli info`` describes ``bare`` (a file of ``ref``); ``vitviz-cli convert``
    writes vitviz's own file of it, which opens with the same config and ``ref``'s logits."""
    from vitviz.cli import main

    assert main(["info", str(bare)]) == 0
    assert main(["convert", str(bare), str(tmp_path / "own.safetensors")]) == 0
    own, first = load_checkpoint(tmp_path / "own.safetensors"), load_checkpoint(bare)
    assert own.family == "vitviz" and own.model.config == first.model.config
    assert_opens_as_the_reference(own, ref, size, seed=6)
