"""The method table dispatches by model kind: an entry's version per kind comes from
``kind_of(analysis).implementation(name)``; which kinds a method applies to is what the registry
implements; a kind says why it lacks a method and which parameters its version takes; one npz
vocabulary for every kind."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from swin_helpers import tiny_torchvision_swin
from torch import Tensor

from vitviz import cli
from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kindapi import (
    KindMethod,
    LayerGrid,
    TokenGeometry,
    get_kind,
    register_kind,
    unregister_kind,
)
from vitviz.kinds.swin.analysis import analyze_swin
from vitviz.kinds.swin.faithfulness import first_stage_map

GRID = (2, 3)


@dataclass
class ToyAnalysis:
    kind: str = "toy"
    input: Tensor = field(default_factory=lambda: torch.zeros(3, 8, 12))
    logits: Tensor = field(default_factory=lambda: torch.tensor([0.0, 2.0]))
    loaded: Any = None

    @property
    def probs(self) -> Tensor:
        return self.logits.softmax(-1)

    @property
    def top_class(self) -> int:
        return int(self.logits.argmax())


def _toy_rollout(a: Any, q: Any, c: Any, p: Mapping[str, Any]) -> Tensor:
    return torch.full(GRID, 1.0) * (2.0 if p["fusion"] == "max" else 1.0)


class ToyKind:
    """A kind with a version of rollout only, which takes the fusion and no discard ratio."""

    name = "toy"
    label = "Toy Transformer"

    def owns(self, model: Any) -> bool:
        return False

    def implementation(self, method: str) -> KindMethod | None:
        if method != "rollout":
            return None
        return KindMethod(
            _toy_rollout, takes=frozenset({"fusion"}), refusals={"discard_ratio": "no discard"}
        )

    def missing_method(self, method: str) -> str | None:
        return None if method == "rollout" else "a toy has no attention to speak of"

    def parameter_bounds(self, subject: Any) -> tuple[int, int]:
        return 1, 1

    def token_geometry(self, analysis: Any) -> TokenGeometry:
        return TokenGeometry((8, 12), GRID, 4, (LayerGrid(GRID, 4),))


@pytest.fixture
def toy_kind():
    kind = register_kind(ToyKind())  # type: ignore[arg-type]
    try:
        yield kind
    finally:
        unregister_kind("toy")


def test_a_kind_registered_at_run_time_runs_its_version(toy_kind, capsys) -> None:
    rollout, relevance = get_method("rollout"), get_method("relevance")
    assert "toy" in rollout.applies_to and "toy" not in relevance.applies_to
    a = ToyAnalysis()
    assert rollout.unavailable(a) is None
    assert torch.equal(rollout(a, params={"fusion": "max"}), torch.full(GRID, 2.0))
    why = relevance.unavailable(a)
    assert why is not None and "not to this toy model" in why and "no attention to speak" in why
    with pytest.raises(ValueError, match="no attention to speak of"):
        relevance(a)
    refusal = rollout.parameter_refusal(toy_kind, "discard_ratio")
    assert refusal == (
        "rollout.discard_ratio does not apply to a Toy Transformer: no discard; "
        "its rollout takes fusion"
    )
    assert rollout.parameter_refusal(toy_kind, "fusion") is None
    with pytest.raises(ValueError, match="does not apply to a Toy"):
        rollout(a, params={"discard_ratio": 0.5})
    assert rollout(a, params={"discard_ratio": 0.5}, strict=False).shape == GRID
    assert rollout.values_for(toy_kind, {"discard_ratio": 0.5}, strict=False) == {"fusion": "mean"}
    assert cli.main(["methods", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    rows = rows["methods"] if isinstance(rows, dict) else rows
    by_name = {r["name"]: r for r in rows}
    assert by_name["rollout"]["applies_to"] == [
        "cait",
        "clip",
        "convit",
        "levit",
        "pit",
        "pyramid",
        "swin",
        "tnt",
        "toy",
        "vit",
        "xcit",
    ]
    assert "toy" not in by_name["relevance"]["applies_to"]


def test_a_version_that_gives_a_map_off_every_grid_is_caught(toy_kind, monkeypatch) -> None:
    bad = KindMethod(lambda a, q, c, p: torch.zeros(5, 5))
    monkeypatch.setattr(ToyKind, "implementation", lambda self, m: bad)
    with pytest.raises(RuntimeError, match=r"gave a \(5, 5\) map"):
        get_method("rollout")(ToyAnalysis())


@pytest.fixture(scope="module")
def swin_loaded(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("swin") / "swin_tiny.pth"
    torch.save(tiny_torchvision_swin(seed=2).state_dict(), path)
    return load_checkpoint(path)


def test_the_table_runs_a_swin_through_its_kind(swin_loaded) -> None:
    x = torch.randn(3, 32, 40, generator=torch.Generator().manual_seed(1))
    a = analyze_swin(swin_loaded, x)
    swin = get_kind("swin")
    rollout = get_method("rollout")
    torch.testing.assert_close(rollout(a, params={"fusion": "max"}), a.rollout("max"))
    with pytest.raises(ValueError, match=r"does not apply to a Swin.*discard step"):
        rollout(a, params={"discard_ratio": 0.2})
    torch.testing.assert_close(rollout(a, params={"discard_ratio": 0.2}, strict=False), a.rollout())
    assert rollout.taken_parameters(swin) == ("fusion",)
    # the gradient rollout of another class: the pass again, with that class's gradients
    other = (a.top_class + 1) % 5
    want = analyze_swin(swin_loaded, x, gradients=True, target_class=other).gradient_rollout()
    torch.testing.assert_close(get_method("gradient-rollout")(a, None, other), want)
    # a coarser map to the clickable grid: what the Swin's own faithfulness did
    cam = get_method("gradcam")(a)
    assert tuple(cam.shape) == tuple(a.stage_grids[-1])
    geometry = swin.token_geometry(a)
    torch.testing.assert_close(geometry.on_grid(cam), first_stage_map(cam, a.stage_grids))
    with pytest.raises(ValueError, match="none of the model's token grids"):
        geometry.on_grid(torch.zeros(3, 3))
    why = get_method("dino-masks").unavailable(a)
    assert why is not None and "not to this swin model" in why and "CLS token" in why
    # random: the table's own version over the first stage's grid, in the window too
    from types import SimpleNamespace

    from vitviz.explain.random_map import random_map
    from vitviz.kinds.swin import engine_data

    want = random_map(tuple(a.stage_grids[0]), 3)
    assert torch.equal(get_method("random")(a, (1, 1), None, {"seed": 3}), want)
    session = SimpleNamespace(loaded=swin_loaded, analysis=a)
    shown = engine_data.method_map(session, "random", (1, 1), None, {"seed": 3})
    np.testing.assert_array_equal(shown, want.numpy())


def test_one_npz_vocabulary_for_every_kind(swin_loaded, tmp_path: Path, photo_files) -> None:
    """The same method writes the same key: a Swin's npz holds the shared keys (`rollout`,
    `gradient_rollout`, `relevance` NaN: it can't run on a Swin), `kind`, its own arrays."""
    from vitviz.pipeline.export import SHARED_NPZ_KEYS

    path = tmp_path / "swin.pth"
    torch.save(tiny_torchvision_swin(seed=2).state_dict(), path)
    image = photo_files["chelsea"]
    out = tmp_path / "out"
    argv = ["explain", str(image), "--checkpoint", str(path), "--out", str(out), "--method"]
    assert cli.main([*argv, "rollout", "gradcam"]) == 0
    with np.load(out / f"{image.stem}.npz") as z:
        got = {k: z[k] for k in z.files}
    assert set(SHARED_NPZ_KEYS) <= set(got) and list(got)[-2:] == ["map_rollout", "map_gradcam"]
    assert str(got["kind"]) == "swin" and "map_rollout" in got and "map_gradcam" in got
    assert np.isnan(got["relevance"]).all() and "window_attention_0_0" in got
    a = analyze_swin(load_checkpoint(path), image, gradients=True)
    np.testing.assert_allclose(got["rollout"], a.rollout().numpy(), atol=1e-6)
    np.testing.assert_array_equal(got["rollout"], got["map_rollout"])
    np.testing.assert_allclose(got["gradient_rollout"], a.gradient_rollout().numpy(), atol=1e-6)
    assert got["relevance"].shape == tuple(a.stage_grids[0])
