"""A family brings its own library reference (DESIGN §4): the library check builds and reads the
library's model the way the family's ``LibraryReference`` says, and refuses what differs.

The toy family here is registered by the test alone (no shared module edited); its "library" is
torch, its model vitviz's ViT rebuilt from the file's own tensors by the reference's ``build``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import CLASS_NAMES, TINY, random_vit
from safetensors.torch import load_file, save_file
from torch import Tensor, nn

from vitviz.blocks import VisionTransformer, ViTConfig
from vitviz.checkpoints import families
from vitviz.checkpoints.errors import CheckpointError
from vitviz.checkpoints.families.base import Conversion, Family, Source
from vitviz.checkpoints.families.reference import LibraryReference
from vitviz.checkpoints.library_check import Reference
from vitviz.checkpoints.load import load_checkpoint
from vitviz.checkpoints.native import default_preprocessing

MARKER = "toy_marker"


class ToyLibrary:
    """The toy family's reference: builds from the file, reads its logits and attention, and
    records that it was asked; ``logit_scale`` / ``attention_shift`` make its numbers differ."""

    def __init__(self, logit_scale: float = 1.0, attention_shift: float = 0.0) -> None:
        self.logit_scale = logit_scale
        self.attention_shift = attention_shift
        self.calls: list[str] = []

    def build(self, arch: str, model_args: Mapping[str, Any], cfg: Any, weights: Path) -> nn.Module:
        self.calls.append(f"build {arch}")
        state = load_file(str(weights))
        del state[MARKER]
        model = VisionTransformer(ViTConfig(**TINY))
        model.load_state_dict(state, strict=True)
        return model.eval()

    def read(self, model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor] | None]:
        self.calls.append("read")
        with torch.no_grad():
            out = model.forward_explained(x, capture_attention=True)
        attention = [a + self.attention_shift for a in out.attentions]
        return out.logits * self.logit_scale, attention

    def reference(self, **limits: float) -> LibraryReference:
        return LibraryReference(self.build, self.read, **limits)


def _toy_family(how: LibraryReference, unexpressible: str = "") -> Family:
    def detect(source: Source) -> bool:
        return MARKER in source.state

    def convert(source: Source) -> Conversion:
        source.state.pop(MARKER)
        config = ViTConfig(**TINY)
        state = dict(source.state)
        source.state.clear()
        return Conversion(
            family="toy",
            config=config,
            state=state,
            class_names=list(CLASS_NAMES),
            preprocessing=default_preprocessing(config),
            reference=Reference("torch", "ToyNet", {}, unexpressible=unexpressible, how=how),
        )

    return Family("toy", detect, convert)


@pytest.fixture
def toy_file(tmp_path: Path) -> Path:
    state = {k: v.contiguous() for k, v in random_vit(seed=3).state_dict().items()}
    state[MARKER] = torch.zeros(1)
    path = tmp_path / "toy.safetensors"
    save_file(state, str(path))
    return path


def _register(
    monkeypatch: pytest.MonkeyPatch, how: LibraryReference, unexpressible: str = ""
) -> None:
    """The toy family first, for this test only: no module of vitviz edited."""
    listed = families.all_families
    toy = _toy_family(how, unexpressible)
    monkeypatch.setattr(families, "all_families", lambda: (toy, *listed()))


def test_a_new_family_brings_its_own_library_reference(
    toy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    toy = ToyLibrary(logit_scale=1 + 1e-6)  # within the project's 1e-4
    _register(monkeypatch, toy.reference())
    loaded = load_checkpoint(toy_file)
    assert toy.calls == ["build ToyNet", "read"]
    note = next(n for n in loaded.notes if n.startswith("checked against torch "))
    assert "torch's ToyNet" in note and "attention" in note


@pytest.mark.parametrize(
    ("logit_scale", "attention_shift", "limits", "what"),
    [
        (1 + 1e-3, 0.0, {}, "logits 0.001"),
        (1.0, 1e-3, {}, "attention 0.001"),
        # a family may tighten the limits but never loosen them
        (1 + 1e-3, 0.0, {"logits_rtol": 1e-2}, "logits 0.001 .limit 0.0001"),
        # float32 rounds 1e-6 differently by CPU (9.4e-07 seen): the number, then its limit
        (1 + 1e-6, 0.0, {"logits_rtol": 1e-7}, r"logits [0-9.]+e-0[67] .limit 1e-07"),
    ],
)
def test_a_reference_whose_numbers_differ_is_refused(
    toy_file: Path,
    monkeypatch: pytest.MonkeyPatch,
    logit_scale: float,
    attention_shift: float,
    limits: dict[str, float],
    what: str,
) -> None:
    toy = ToyLibrary(logit_scale, attention_shift)
    _register(monkeypatch, toy.reference(**limits))
    with pytest.raises(CheckpointError, match=rf"differs from torch .*{what}") as info:
        load_checkpoint(toy_file)
    # the float32 miss is read again in float64, where the difference (the function's) stays
    assert toy.calls == ["build ToyNet", "read", "read"]
    assert re.search(rf"in float64 too: .*{what.split(' .limit')[0]}", str(info.value)), info.value


class _UnfitLibrary(ToyLibrary):
    """A reference whose named architecture is not the file's: one block too many."""

    def build(self, arch: str, model_args: Mapping[str, Any], cfg: Any, weights: Path) -> nn.Module:
        self.calls.append(f"build {arch}")
        state = load_file(str(weights))
        del state[MARKER]
        model = VisionTransformer(ViTConfig(**{**TINY, "depth": TINY["depth"] + 1}))
        model.load_state_dict(state, strict=True)  # missing the last block's tensors
        return model.eval()


def test_a_reference_that_does_not_take_the_files_tensors_is_refused(
    toy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reading claims an architecture whose model can't hold the file (a wrong --arch):
    refused in one line naming the first missing tensor, never opened with "not checked"."""
    toy = _UnfitLibrary()
    _register(monkeypatch, toy.reference())
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(toy_file)
    text = str(info.value)
    assert "torch's ToyNet does not take this file's tensors" in text, text
    assert "Missing key(s)" in text and "blocks." in text and "\n" not in text, text
    assert toy.calls == ["build ToyNet"]


def test_a_reference_that_cannot_be_built_here_is_a_note(
    toy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library that can't build the architecture at all (an older version without it) says
    so in a note: the reading stands on vitviz's own tests."""

    def build(arch: str, model_args: Mapping[str, Any], cfg: Any, weights: Path) -> nn.Module:
        raise KeyError(f"unknown model {arch}")

    _register(monkeypatch, LibraryReference(build, ToyLibrary().read))
    loaded = load_checkpoint(toy_file)
    assert any(n.startswith("not checked against torch") for n in loaded.notes), loaded.notes


def test_a_setting_the_librarys_model_args_cant_give_is_a_note_naming_it(
    toy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A reading the library's model can't be built like (a setting its keywords don't have):
    the check is skipped with a note naming the setting, nothing built, never silently."""
    toy = ToyLibrary()
    why = "its ToyNet has no keyword for LayerNorm eps 1e-3"
    _register(monkeypatch, toy.reference(), unexpressible=why)
    loaded = load_checkpoint(toy_file)
    assert any(n.startswith("not checked against torch") and why in n for n in loaded.notes)
    assert toy.calls == []


def test_a_setting_the_librarys_model_does_not_have_refuses_the_file(
    toy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A folder's settings name one the library's model has no keyword for ("bogus"): the
    reading could not have followed it either, so the file is refused, not opened unchecked."""

    def build(arch: str, model_args: Mapping[str, Any], cfg: Any, weights: Path) -> nn.Module:
        raise TypeError("ToyNet.__init__() got an unexpected keyword argument 'bogus'")

    _register(monkeypatch, LibraryReference(build, ToyLibrary().read))
    with pytest.raises(CheckpointError, match="torch's ToyNet takes no setting 'bogus'"):
        load_checkpoint(toy_file)


def test_a_check_that_could_not_run_is_not_kept(
    toy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A passing problem (the library could not build the model this time) is not cached: the
    next open checks the file."""
    calls: list[str] = []

    def broken(arch: str, model_args: Mapping[str, Any], cfg: Any, weights: Path) -> nn.Module:
        calls.append("broken")
        raise KeyError(arch)

    _register(monkeypatch, LibraryReference(broken, ToyLibrary().read))
    first = load_checkpoint(toy_file)
    assert any(n.startswith("not checked against torch") for n in first.notes), first.notes
    toy = ToyLibrary()
    monkeypatch.undo()
    _register(monkeypatch, toy.reference())
    second = load_checkpoint(toy_file)
    assert toy.calls == ["build ToyNet", "read"], toy.calls
    assert any(n.startswith("checked against torch") for n in second.notes), second.notes


def test_a_library_that_is_not_installed_is_said(
    toy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vitviz.checkpoints import library_check

    _register(monkeypatch, ToyLibrary().reference())
    monkeypatch.setattr(library_check, "library_version", lambda library: None)
    loaded = load_checkpoint(toy_file)
    assert "not checked against torch: it is not installed" in loaded.notes, loaded.notes


def test_a_check_of_the_logits_alone_says_so(
    toy_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A library whose attention could not be read (its softmaxes not where the family looks)
    is compared on its logits alone, and the note says the attention was not compared."""
    toy = ToyLibrary()

    def read(model: nn.Module, x: Tensor) -> tuple[Tensor, list[Tensor] | None]:
        return toy.read(model, x)[0], None

    _register(monkeypatch, LibraryReference(toy.build, read))
    loaded = load_checkpoint(toy_file)
    note = next(n for n in loaded.notes if n.startswith("checked against torch "))
    assert note.endswith(", attention not compared"), note
