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

Then the same for the other views of DESIGN §5, each against its own baseline (its views
repainted with no change): the Features tab shown, a click there (``features.set_query``)
until the new similarity map is applied (looked up by the window in the block's table, or
computed by the engine) and its views (PCA, similarity, token norm, logit lens) are painted;
then File ▸ Compare with… a second model of the same shape (other random weights, from a
checkpoint file), a click in the compare window (``compare.set_query``: the patch becomes
both models' query) until both maps and the head similarity are applied and its views (A, B,
the head-similarity grid) are painted.

Targets (absolute): median ≤ 16 ms and p95 ≤ 33 ms for each kind of change in the viewer and
for the Features tab's similarity query; for a Swin-T a query change's median ≤ 20 ms; a
synced change in the compare window: median ≤ 33 ms.

    .venv/bin/python benchmarks/ui_latency.py [--quick] [--no-check] [--repeats N] [--profile]
        [--model vit-base|swin-t] [--views viewer,features,compare]
"""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from _common import Check, environment, finish, fmt_seconds, parser, print_table

TARGET_MEDIAN_MS = 16.0
TARGET_P95_MS = 33.0
SWIN_QUERY_MEDIAN_MS = 20.0  # a Swin-T's query change
FEATURES_QUERY_MEDIAN_MS = 16.0  # a click in the Features tab (the similarity map follows)
COMPARE_MEDIAN_MS = 33.0  # a click in the compare window (both models' maps follow)


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


def build(variant: str, seed: int) -> Any:  # a torch module (torch is imported late)
    """A randomly initialised model of ``variant`` (``swin-t``: a Swin-T at 224)."""
    import torch

    from vitviz.blocks import create_model

    torch.manual_seed(seed)
    if variant == "swin-t":
        from vitviz.kinds.swin.config import SwinConfig
        from vitviz.kinds.swin.network import SwinTransformer

        return SwinTransformer(SwinConfig()).eval()  # Swin-T at 224 (the defaults)
    return create_model(variant).eval()


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
        from vitviz.checkpoints import LoadedModel
        from vitviz.imaging import Preprocessing
        from vitviz.workers import jobs

        model = build(variant, seed=0)
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

    def wait_result(self, channel: str, done: Callable[[], bool]) -> None:
        """Block until ``done()`` after a result on ``channel`` (woken by it, not by polling)."""
        from PySide6.QtCore import QEventLoop

        if done():
            return
        loop = QEventLoop()

        def on_result(got: str, _result: object) -> None:
            if got == channel and done():
                loop.quit()

        self.window.client.resultReady.connect(on_result)
        try:
            loop.exec()
        finally:
            self.window.client.resultReady.disconnect(on_result)

    def watch(self, views: list) -> None:
        for view in views:
            view.viewport().installEventFilter(self.paint_counter)

    def repaint(self, views: list | None = None) -> None:
        """Let Qt paint what changed, then paint every visible view it did not."""
        views = self.views if views is None else views
        self.painted.clear()
        self.app.processEvents()
        for view in views:
            if view.viewport() not in self.painted:
                view.viewport().repaint()
        missing = [v for v in views if v.viewport() not in self.painted]
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
        patch = self.next_patch(self.window.viewer.query)
        self.window.viewer.set_query(patch)
        self.wait_maps(patch)
        self.repaint()

    def next_patch(self, current: tuple[int, int] | None) -> tuple[int, int]:
        gh, gw = self.grid
        self.step += 1
        patch = ((self.step * 5) % gh, (self.step * 3) % gw)
        return ((patch[0] + 1) % gh, patch[1]) if patch == current else patch

    # -- the Features tab (DESIGN §5) ------------------------------------------------------------
    def open_features(self) -> None:
        """The Features tab shown, its first maps applied; its views watched."""
        w = self.window
        f = w.features
        w.tabs.setCurrentWidget(f)
        self.wait(lambda: f.result is not None and not w.client.is_busy())
        self.feature_views = [f.pca_view, f.similarity_view, f.norm_view, f.logit_lens]
        self.watch(self.feature_views)

    def features_baseline(self) -> None:
        self.repaint(self.feature_views)

    def features_query(self) -> None:
        """A click in the Features tab: the similarity map follows the clicked patch."""
        self.click(self.window.features, "features", self.feature_views)

    # -- File ▸ Compare with… (DESIGN §5) --------------------------------------------------------
    def open_compare(self, variant: str, folder: Path) -> None:
        """Model B (the same variant, other random weights) beside A in the compare window."""
        from vitviz.checkpoints import save_checkpoint

        path = save_checkpoint(build(variant, seed=1), folder / "b.safetensors")
        w = self.window
        w.compare_with(path)
        self.wait(lambda: w.compare is not None and w.compare.result is not None)
        self.wait(lambda: not w.client.is_busy())
        c = w.compare
        self.compare_views = [c.view_a, c.view_b, c.heads]
        self.watch(self.compare_views)

    def compare_baseline(self) -> None:
        self.repaint(self.compare_views)

    def compare_query(self) -> None:
        """A click in the compare window: the patch becomes both models' query."""
        self.click(self.window.compare, "compare", self.compare_views)

    def click(self, panel: Any, channel: str, views: list) -> None:
        """A click on the next patch in ``panel`` (its ``set_query``), ``channel``'s result for
        that patch awaited, then ``views`` painted."""
        patch = self.next_patch(panel.query)
        panel.set_query(patch)
        self.wait_result(channel, lambda: panel.result is not None and panel.result.query == patch)
        self.repaint(views)

    def close(self) -> None:
        self.window.close()
        self.app.processEvents()


@dataclass
class Case:
    """One timed change: its function and its targets in ms (None: none)."""

    run: Callable[[], None]
    median_ms: float | None = None
    p95_ms: float | None = None


def time_cases(
    cases: dict[str, Case], repeats: int, warmup: int, rig: Rig
) -> tuple[dict[str, list[float]], dict[str, int]]:
    """Each case ``repeats`` times, in turns, after ``warmup`` turns; times (s) and paints."""
    for _ in range(warmup):
        for case in cases.values():
            case.run()
    times: dict[str, list[float]] = {name: [] for name in cases}
    paints = dict.fromkeys(cases, 0)
    for _ in range(repeats):
        for name, case in cases.items():
            before = rig.paints
            start = time.perf_counter()
            case.run()
            times[name].append(time.perf_counter() - start)
            paints[name] += rig.paints - before
    return times, paints


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument("--profile", action="store_true", help="cProfile the timed loop; print the top")
    p.add_argument("--model", choices=("vit-base", "swin-t"), default="vit-base")
    p.add_argument(
        "--views",
        default="viewer,features,compare",
        help="which windows' changes to time, comma-separated (default: all three)",
    )
    args = p.parse_args(argv)
    swin = args.model == "swin-t"
    variant = args.model if swin or not args.quick else "cifar10-tutorial"
    repeats = args.repeats or (5 if args.quick else 100)
    warmup = args.warmup if args.warmup is not None else (1 if args.quick else 5)
    shown = set(args.views.split(","))

    query_target = SWIN_QUERY_MEDIAN_MS if swin else TARGET_MEDIAN_MS
    phases: list[tuple[str, Callable[[Rig, Path], dict[str, Case]]]] = [
        (
            "viewer",
            lambda rig, _tmp: {
                "baseline: repaint, no change": Case(rig.baseline),
                "head (step_head)": Case(rig.head, TARGET_MEDIAN_MS, TARGET_P95_MS),
                "layer (select)": Case(rig.layer, TARGET_MEDIAN_MS, TARGET_P95_MS),
                "query patch (set_query)": Case(rig.query, query_target, TARGET_P95_MS),
            },
        ),
        (
            "features",
            lambda rig, _tmp: (
                rig.open_features(),
                {
                    "features baseline: repaint, no change": Case(rig.features_baseline),
                    "features: similarity query (click)": Case(
                        rig.features_query, FEATURES_QUERY_MEDIAN_MS, TARGET_P95_MS
                    ),
                },
            )[1],
        ),
        (
            "compare",
            lambda rig, tmp: (
                rig.open_compare(variant, tmp),
                {
                    "compare baseline: repaint, no change": Case(rig.compare_baseline),
                    "compare: synced query (click)": Case(rig.compare_query, COMPARE_MEDIAN_MS),
                },
            )[1],
        ),
    ]
    times: dict[str, list[float]] = {}
    paints: dict[str, int] = {}
    cases: dict[str, Case] = {}
    with tempfile.TemporaryDirectory() as tmp:
        rig = Rig(variant, Path(tmp) / "settings.ini")
        profiler = None
        if args.profile:
            import cProfile

            profiler = cProfile.Profile()
        for name, make in phases:
            if name not in shown:
                continue
            made = make(rig, Path(tmp))
            if profiler is not None:
                profiler.enable()
            t, n = time_cases(made, repeats, warmup, rig)
            if profiler is not None:
                profiler.disable()
            cases.update(made)
            times.update(t)
            paints.update(n)
        if profiler is not None:
            import pstats

            pstats.Stats(profiler, stream=sys.stderr).sort_stats("cumulative").print_stats(35)
        image = rig.window.viewer.image
        size = rig.window.size()
        rig.close()

    rows, checks = [], []
    base = 1.0
    for name, ts in times.items():
        case = cases[name]
        med, q95 = statistics.median(ts), p95(ts)
        is_base = name.split(":")[0].endswith("baseline")
        if is_base:
            base = med  # the baseline of the rows after it (its window's)
        said, ok = [], True
        if case.median_ms is not None:
            checks.append(Check(f"{name} median (ms)", med * 1e3, case.median_ms, True))
            said.append(f"median ≤ {case.median_ms:g} ms")
            ok = ok and checks[-1].ok
        if case.p95_ms is not None:
            checks.append(Check(f"{name} p95 (ms)", q95 * 1e3, case.p95_ms, True))
            said.append(f"p95 ≤ {case.p95_ms:g} ms")
            ok = ok and checks[-1].ok
        rows.append(
            [
                name,
                fmt_seconds(med),
                fmt_seconds(q95),
                fmt_seconds(max(ts)),
                "1.0×" if is_base else f"{med / base:.1f}×",
                f"{paints[name] / len(ts):.1f}",
                "baseline" if is_base else " / ".join(said),
                "" if is_base else ("ok" if ok else "MISSED"),
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
        ["change", "median", "p95", "max", "vs baseline", "paints / change", "target", "verdict"],
        rows,
    )
    print()
    return finish([] if args.quick else checks, args.no_check)


if __name__ == "__main__":
    sys.exit(main())
