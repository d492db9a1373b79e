"""UI latency: a change of head, of layer or of query patch until every visible view has repainted.

The real window (offscreen), ViT-B/16 at 224 with random weights (``--model swin-t``: a Swin-T
at 224, whose query is a first-stage cell picked in every block), one 400 × 300 image. Each timed
change is what a click or a key does: ``controls.step_head(1)``, ``controls.select(layer=...)``,
``viewer.set_query(patch)``. A query change runs until its new maps (every layer and head) are
applied, whether the window computes them itself or the engine thread does. Then the event loop
runs once, as after a real click: Qt paints each view whose content changed. Every visible view
(model input, large map, head grid, predictions) that Qt did not paint is then repainted
synchronously (``viewport().repaint()``), so each is painted at least once after the change; a
paint counter on each viewport checks this and the table shows the paints per change. The clock
stops when the last paint returns. Baseline: the same with no change (Qt paints nothing, every
view is repainted). 100 changes of each kind, taken in turns.

Targets (absolute): median ≤ 16 ms and p95 ≤ 33 ms for each kind of change; for a
Swin-T a query change's median ≤ 20 ms.

    .venv/bin/python benchmarks/ui_latency.py [--quick] [--no-check] [--repeats N] [--profile]
        [--model vit-base|swin-t]
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
from _common import Check, environment, finish, fmt_seconds, parser, print_table

TARGET_MEDIAN_MS = 16.0
TARGET_P95_MS = 33.0
SWIN_QUERY_MEDIAN_MS = 20.0  # a Swin-T's query change


def p95(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[max(1, -(-95 * len(ordered) // 100)) - 1]  # nearest rank


def sample_image(height: int = 300, width: int = 400) -> np.ndarray:
    """A smooth, colourful (h, w, 3) uint8 picture (no downloads, no test data needed)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    r = 128 + 120 * np.sin(x / 23.0) * np.cos(y / 31.0)
    g = 128 + 120 * np.sin((x + y) / 41.0)
    b = 128 + 120 * np.cos(np.hypot(x - width / 2, y - height / 2) / 19.0)
    return np.clip(np.stack([r, g, b], axis=-1), 0, 255).astype(np.uint8)


class Rig:
    """The window with a model and an image on screen, and the timed changes."""

    def __init__(self, variant: str, settings_file: Path) -> None:
        import pyqtgraph as pg
        from PySide6.QtCore import QSettings
        from PySide6.QtWidgets import QApplication

        self.app = QApplication.instance() or QApplication([])
        pg.setConfigOptions(imageAxisOrder="row-major", antialias=True)  # as vitviz.app does
        from vitviz.ui.main_window import MainWindow
        from vitviz.ui.paint_counter import PaintCounter
        from vitviz.ui.settings import AppSettings

        self.window = MainWindow(
            AppSettings(QSettings(str(settings_file), QSettings.Format.IniFormat))
        )
        self.window.resize(1400, 900)
        self.window.show()
        self.window.start([])
        self._load(variant)
        v = self.window.viewer
        self.views = [v.input_view, v.map_view, v.head_grid, v.predictions]
        self.paint_counter = PaintCounter()
        self.painted = self.paint_counter.counts
        for view in self.views:
            view.viewport().installEventFilter(self.paint_counter)
        self.paints = 0  # paint events of the visible views, summed over the changes
        self.layers = v.image.num_layers
        self.grid = v.image.grid
        self.step = 0

    def _load(self, variant: str) -> None:
        import torch

        from vitviz.blocks import create_model
        from vitviz.checkpoints import LoadedModel
        from vitviz.imaging import Preprocessing
        from vitviz.workers import jobs

        torch.manual_seed(0)
        if variant == "swin-t":
            from vitviz.kinds.swin.config import SwinConfig
            from vitviz.kinds.swin.network import SwinTransformer

            model = SwinTransformer(SwinConfig()).eval()  # Swin-T at 224 (the defaults)
        else:
            model = create_model(variant).eval()
        cfg = model.config
        loaded = LoadedModel(
            model=model,
            class_names=[f"class {i}" for i in range(cfg.num_classes)],
            preprocessing=Preprocessing(image_size=cfg.image_size),
            family="vitviz",
        )
        w = self.window
        w.client.submit("model", partial(jobs.use_model, loaded=loaded))
        self.wait(lambda: w.model is not None)
        w.open_image(sample_image(), "sample")
        self.wait(self.settled)

    # -- waiting ---------------------------------------------------------------------------------
    def settled(self) -> bool:
        v = self.window.viewer
        return (
            not self.window.client.is_busy()
            and v.maps is not None
            and v.maps.params == v.controls.params(v.query, v.target_class)
        )

    def wait(self, done: Callable[[], bool], timeout: float = 300.0) -> None:
        from PySide6.QtCore import QEventLoop

        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                raise TimeoutError("the window did not settle")
            self.app.processEvents(QEventLoop.ProcessEventsFlag.WaitForMoreEvents, 50)

    def wait_maps(self, query: tuple[int, int] | None) -> None:
        """Block until maps for ``query`` are applied (woken by the result, not by polling)."""
        from PySide6.QtCore import QEventLoop

        v = self.window.viewer
        if v.maps is not None and v.maps.params.query == query:
            return
        loop = QEventLoop()

        def on_result(channel: str, _result: object) -> None:
            if channel == "maps" and v.maps is not None and v.maps.params.query == query:
                loop.quit()

        self.window.client.resultReady.connect(on_result)
        try:
            loop.exec()
        finally:
            self.window.client.resultReady.disconnect(on_result)

    def repaint(self) -> None:
        """Let Qt paint what changed, then paint every visible view it did not."""
        self.painted.clear()
        self.app.processEvents()
        for view in self.views:
            if view.viewport() not in self.painted:
                view.viewport().repaint()
        missing = [v for v in self.views if v.viewport() not in self.painted]
        if missing:
            raise RuntimeError(f"not painted after a change: {missing}")
        self.paints += sum(self.painted.values())

    # -- the changes -----------------------------------------------------------------------------
    def baseline(self) -> None:
        self.repaint()

    def head(self) -> None:
        self.window.viewer.controls.step_head(1)
        self.repaint()

    def layer(self) -> None:
        ctl = self.window.viewer.controls
        ctl.select(layer=(ctl.selected_layer() + 1) % self.layers)
        self.repaint()

    def query(self) -> None:
        gh, gw = self.grid
        self.step += 1
        patch = ((self.step * 5) % gh, (self.step * 3) % gw)
        if patch == self.window.viewer.query:
            patch = ((patch[0] + 1) % gh, patch[1])
        self.window.viewer.set_query(patch)
        self.wait_maps(patch)
        self.repaint()

    def close(self) -> None:
        self.window.close()
        self.app.processEvents()


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--profile", action="store_true", help="cProfile the timed loop; print the top")
    p.add_argument("--model", choices=("vit-base", "swin-t"), default="vit-base")
    args = p.parse_args(argv)
    swin = args.model == "swin-t"
    variant = args.model if swin or not args.quick else "cifar10-tutorial"
    repeats = args.repeats or (5 if args.quick else 100)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 5)

    with tempfile.TemporaryDirectory() as tmp:
        rig = Rig(variant, Path(tmp) / "settings.ini")
        cases: dict[str, Callable[[], None]] = {
            "baseline: repaint, no change": rig.baseline,
            "head (step_head)": rig.head,
            "layer (select)": rig.layer,
            "query patch (set_query)": rig.query,
        }
        for _ in range(warmup):
            for fn in cases.values():
                fn()
        profiler = None
        if args.profile:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        times: dict[str, list[float]] = {name: [] for name in cases}
        paints = dict.fromkeys(cases, 0)
        for _ in range(repeats):
            for name, fn in cases.items():
                before = rig.paints
                start = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - start)
                paints[name] += rig.paints - before
        if profiler is not None:
            import pstats

            profiler.disable()
            pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(35)
        image = rig.window.viewer.image
        size = rig.window.size()
        rig.close()

    base = statistics.median(times["baseline: repaint, no change"])
    rows, checks = [], []
    for name, ts in times.items():
        med, q95 = statistics.median(ts), p95(ts)
        is_base = name.startswith("baseline")
        target = SWIN_QUERY_MEDIAN_MS if swin and name.startswith("query") else TARGET_MEDIAN_MS
        if not is_base:
            checks.append(Check(f"{name} median (ms)", med * 1e3, target, True))
            checks.append(Check(f"{name} p95 (ms)", q95 * 1e3, TARGET_P95_MS, True))
        verdict = "" if is_base else ("ok" if checks[-1].ok and checks[-2].ok else "MISSED")
        rows.append(
            [
                name,
                fmt_seconds(med),
                fmt_seconds(q95),
                fmt_seconds(max(ts)),
                "1.0×" if is_base else f"{med / base:.1f}×",
                f"{paints[name] / len(ts):.1f}",
                "baseline" if is_base else f"≤ {target:g} ms / ≤ {TARGET_P95_MS:g} ms",
                verdict,
            ]
        )

    print("# UI latency: change → every visible view repainted (offscreen, real MainWindow)")
    print(environment())
    print(
        f"model {variant}: {image.num_layers} layers × {image.num_heads} heads, grid "
        f"{image.grid[0]}×{image.grid[1]}; window {size.width()}×{size.height()}; "
        f"{repeats} changes of each kind, in turns, after {warmup} warm-up turns"
        + (" (--quick: timings are not meaningful)" if args.quick else "")
    )
    print()
    print_table(
        [
            "change",
            "median",
            "p95",
            "max",
            "vs baseline",
            "paints / change",
            "target (median / p95)",
            "verdict",
        ],
        rows,
    )
    print()
    return finish([] if args.quick else checks, args.no_check)


if __name__ == "__main__":
    sys.exit(main())
