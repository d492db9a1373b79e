"""A long method's forward passes (Score-CAM's, DESIGN §5) run on the engine thread report their
count to the window and stop when cancelled: the cancelled request's result never comes."""

from __future__ import annotations

import threading

import torch
from conftest import random_vit

from vitviz.explain.cam_layer import CamCancelledError
from vitviz.explain.scorecam import score_cam
from vitviz.kinds.vit import KIND as VIT
from vitviz.workers.engine import EngineClient


def _scorecam_job(
    started: threading.Event | None = None,
    hold: threading.Event | None = None,
    stopped: list[str] | None = None,
):
    model = random_vit(1, image_size=(32, 32))
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(0))

    def job(_state):
        if started is not None:
            started.set()
            assert hold is not None and hold.wait(10)
        try:
            return score_cam(VIT, model, x, "-1.norm1", 0)
        except CamCancelledError as exc:
            if stopped is not None:
                stopped.append(str(exc))
            raise

    return job, int(model.config.dim)


def test_the_passes_are_counted_to_the_window(qtbot) -> None:
    client = EngineClient()
    try:
        seen: list[tuple[str, int, int]] = []
        client.passProgress.connect(lambda ch, d, t: seen.append((ch, d, t)))
        job, channels = _scorecam_job()
        with qtbot.waitSignal(client.resultReady, timeout=30_000) as got:
            client.submit("maps", job)
        assert got.args[0] == "maps" and tuple(got.args[1].shape) == (4, 4)
        qtbot.waitUntil(lambda: seen and seen[-1][1] == channels)
        assert seen[0] == ("maps", 0, channels) and seen[-1] == ("maps", channels, channels)
    finally:
        client.shutdown()


def test_a_cancelled_request_stops_and_gives_no_map(qtbot) -> None:
    client = EngineClient()
    try:
        results: list[object] = []
        client.resultReady.connect(lambda ch, r: results.append(r))
        started, hold = threading.Event(), threading.Event()
        stopped: list[str] = []
        job, channels = _scorecam_job(started, hold, stopped)
        client.submit("maps", job)
        assert started.wait(10)
        client.cancel("maps")  # before its first batch of passes
        hold.set()
        qtbot.waitUntil(lambda: not client.is_busy(), timeout=30_000)
        assert results == [] and stopped == [f"cancelled after 0 of {channels} forward passes"]
    finally:
        client.shutdown()
