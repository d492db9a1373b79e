"""A long CAM's forward passes (DESIGN §5) count up on a terminal's stderr, in one line that is
cleared at the end, and say nothing where stderr is a file."""

from __future__ import annotations

import io

import torch
from conftest import random_vit

from vitviz.cli.pass_progress import passes_shown
from vitviz.explain.cam_layer import CAM_BATCH
from vitviz.explain.scorecam import score_cam
from vitviz.kinds.vit import KIND as VIT


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def _scorecam() -> None:
    model = random_vit(1, image_size=(32, 32))
    x = torch.randn(1, 3, 32, 32)
    score_cam(VIT, model, x, "-1.norm1", 0)


def test_the_passes_count_up_on_a_terminal(monkeypatch) -> None:
    err = _Terminal()
    monkeypatch.setattr("sys.stderr", err)
    with passes_shown("star.png"):
        _scorecam()
    channels = int(random_vit(1, image_size=(32, 32)).config.dim)
    shown = err.getvalue()
    for done in (0, CAM_BATCH, channels):
        assert f"\rstar.png: {done}/{channels} forward passes" in shown
    assert shown.endswith("\r\033[K")


def test_nothing_is_said_where_stderr_is_a_file(monkeypatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr("sys.stderr", err)
    with passes_shown("star.png"):
        _scorecam()
    assert err.getvalue() == ""
