"""The kind is resolved once, where a model enters vitviz, and carried (DESIGN §3): a loaded
checkpoint holds the kind its loader resolved, a LoadedModel built by hand asks the registry
once, and the analysis, the method table, export, the CLI and the engine's jobs use the kind
carried, never ``kind_of`` again. Checked with the toy kind of test_toy_kind.py, registered at
run time, so a path that re-resolves (or resolves to a built-in kind) fails here.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import test_toy_kind as toy_kind_tests
from test_toy_kind import CLASSES, PoolConfig, PoolKind, PoolNet

from vitviz.checkpoints import LoadedModel, load_checkpoint
from vitviz.imaging import Preprocessing
from vitviz.kindapi import registry

# the toy kind's fixtures (registered at run time, unregistered after each test)
toy = toy_kind_tests.toy
toy_ckpt = toy_kind_tests.toy_ckpt
images = toy_kind_tests.images


def _forbid_kind_of(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every ``kind_of`` vitviz holds (the registry's, and each module's imported name)
    raises: what runs after this must use a kind it carries."""

    def refused(subject: object) -> None:
        raise AssertionError(f"kind_of({type(subject).__name__}) asked again")

    original = registry.kind_of
    for name, module in list(sys.modules.items()):
        if name.startswith("vitviz") and getattr(module, "kind_of", None) is original:
            monkeypatch.setattr(module, "kind_of", refused)


def test_a_loaded_checkpoint_carries_the_kind_its_loader_resolved(toy_ckpt: Path) -> None:
    loaded = load_checkpoint(toy_ckpt)
    assert loaded.resolved_kind is not None  # set at load, before anything asks for it
    assert loaded.kind is loaded.resolved_kind
    assert loaded.kind.name == PoolKind.name and isinstance(loaded.kind, PoolKind)


def test_a_loaded_model_built_by_hand_resolves_its_kind_once(
    toy: PoolKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = []
    original = registry.kind_of

    def counted(subject: object) -> object:
        calls.append(subject)
        return original(subject)

    monkeypatch.setattr("vitviz.kindapi.kind_of", counted)
    loaded = LoadedModel(
        model=PoolNet(PoolConfig()).eval(),
        class_names=list(CLASSES),
        preprocessing=Preprocessing(image_size=(32, 32), channels=3),
        family="code",
    )
    assert loaded.kind is toy and loaded.kind is toy and loaded.architecture_name
    assert len(calls) == 1


def test_analysis_maps_and_export_use_the_kind_carried(
    toy_ckpt: Path, images: list[Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    from vitviz.explain.methods import get_method
    from vitviz.pipeline.analysis import analyze
    from vitviz.pipeline.export import compute_maps, npz_arrays

    loaded = load_checkpoint(toy_ckpt)
    _forbid_kind_of(monkeypatch)
    a = analyze(loaded, images[0])
    assert a.kind == PoolKind.name
    assert get_method("attention").unavailable(a) is None
    assert get_method("relevance").unavailable(a) is not None  # the toy's CANNOT, not a ViT's
    maps = compute_maps(a)
    arrays = npz_arrays(a, maps)
    assert str(arrays["kind"]) == PoolKind.name


def test_the_cli_and_the_engine_use_the_kind_carried(
    toy_ckpt: Path, images: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from vitviz.cli import main
    from vitviz.workers import jobs
    from vitviz.workers.messages import MapParams

    _forbid_kind_of(monkeypatch)
    out = tmp_path / "explain"
    argv = ["explain", str(images[0]), "--checkpoint", str(toy_ckpt), "--out", str(out)]
    assert main([*argv, "--method", "attention"]) == 0
    with np.load(out / f"{images[0].stem}.npz") as z:
        assert str(z["kind"]) == PoolKind.name
    state = jobs.EngineState()
    jobs.load_model(state, toy_ckpt)
    assert state.kind is state.loaded.kind and state.kind.name == PoolKind.name
    jobs.analyze_image(state, images[0], images[0].name)
    result = jobs.compute_maps(state, MapParams(method="attention"))
    assert result is not None
    jobs.export(state, tmp_path / "view.npz", "npz", MapParams(method="attention"), None, "jet", 1)
    assert (tmp_path / "view.npz").is_file()


@pytest.mark.parametrize("which", ["toy", "swin"])
def test_the_table_view_answers_as_the_table_does(
    which: str, toy_ckpt: Path, tmp_path: Path
) -> None:
    """``table_view`` (the CLI's one pass over the table) says for every method what the
    table says asked one by one: its refusal (layers kept or not), the parameters its kind's
    version takes and the refusal of each one it doesn't (a Swin's rollout: discard_ratio)."""
    import torch
    from swin_helpers import tiny_torchvision_swin

    from vitviz.explain.methods import all_methods, table_view

    if which == "swin":
        toy_ckpt = tmp_path / "swin.pth"
        torch.save(tiny_torchvision_swin(window=4).state_dict(), toy_ckpt)
    loaded = load_checkpoint(toy_ckpt)
    kind, model = loaded.kind, loaded.model
    depth = kind.parameter_bounds(model)[0]
    refused = 0
    for layers in (None, (depth - 1,)):
        view = table_view(kind, model, True, layers)
        assert view.bounds == kind.parameter_bounds(model) and view.layers == layers
        for m in all_methods():
            want = m.unavailable_on(model, True, layers, depth if layers else None, kind=kind)
            assert view.unavailable[m.name] == want, m.name
            assert view.taken[m.name] == m.taken_parameters(kind), m.name
            for p in m.parameters:
                assert view.refusals[m.name].get(p.name) == m.parameter_refusal(kind, p.name)
                refused += p.name in view.refused[m.name]
        assert [m.name for m in view.usable] == [
            m.name for m in all_methods() if view.unavailable[m.name] is None
        ]
        assert "attention" in {m.name for m in view.usable}
        assert "relevance" not in {m.name for m in view.usable}  # neither the toy nor a Swin
    assert refused > 0 or which == "toy"  # a Swin's versions refuse some parameters
