"""``vitviz --self-test``: prove an installation (or the bundle) works, without a screen.

Loads the shipped model, analyses every sample image, checks each prediction against the
sample's own class (its file name) and that every map is finite, then opens the real window
offscreen on the first sample and checks it shows the same prediction. Prints what it checked;
exit status 0 when all is well, 1 with what failed otherwise.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable


def _core_checks(say: Callable[[str], None]) -> list[str]:
    import torch

    from vitviz.checkpoints import load_checkpoint
    from vitviz.core import resources
    from vitviz.pipeline.analysis import analyze

    problems: list[str] = []
    model_path = resources.default_model_path()
    if model_path is None:
        return ["the default model is missing from the resources folder"]
    loaded = load_checkpoint(model_path)
    samples = resources.sample_images()
    if not samples:
        return ["no sample images in the resources folder"]
    say(
        f"model {model_path.name}: {loaded.config.depth} layers × {loaded.config.heads} heads, "
        f"{len(loaded.class_names)} classes"
    )
    correct = 0
    for path in samples:
        a = analyze(loaded, path)
        top = a.top_k(1)[0]
        ok = top.name == path.stem
        correct += ok
        maps = [a.rollout(), a.relevance(), a.all_attention_maps()]
        if not all(bool(torch.isfinite(m).all()) for m in maps):
            problems.append(f"{path.name}: a map has non-finite values")
        say(f"  {path.name}: {top.name} ({top.probability:.1%}) {'ok' if ok else 'WRONG'}")
    if correct < len(samples):
        problems.append(f"{len(samples) - correct} of {len(samples)} samples predicted wrongly")
    return problems


def _window_check(say: Callable[[str], None]) -> list[str]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    import pyqtgraph as pg
    from PySide6.QtCore import QSettings
    from PySide6.QtWidgets import QApplication

    from vitviz.core import resources
    from vitviz.ui.main_window import MainWindow, dispose
    from vitviz.ui.settings import AppSettings

    app = QApplication.instance() or QApplication([])
    pg.setConfigOptions(imageAxisOrder="row-major")
    scratch = tempfile.mkdtemp(prefix="vitviz-self-test-")  # leaves the user's settings alone
    settings = AppSettings(
        QSettings(os.path.join(scratch, "settings.ini"), QSettings.Format.IniFormat)
    )
    window = MainWindow(settings)
    window.show()
    window.start([], defaults=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (window.viewer.maps is None or window.client.is_busy()):
        app.processEvents()
        time.sleep(0.01)
    image = window.viewer.image
    problems = []
    if image is None or window.viewer.maps is None:
        problems.append("the window showed no analysed sample within 60 s")
    else:
        shown = image.class_names[image.top_class]
        expected = resources.sample_images()[0].stem
        say(f"window: {image.label} shown, predicted {shown}")
        if shown != expected:
            problems.append(f"the window shows {shown} for {image.label}, expected {expected}")
    window.close()
    dispose(window)
    shutil.rmtree(scratch, ignore_errors=True)
    return problems


def run() -> int:
    def say(text: str) -> None:
        print(text, flush=True)

    say("vitviz self-test")
    try:
        problems = _core_checks(say)
        if not problems:
            problems += _window_check(say)
    except Exception:  # noqa: BLE001 - the self-test reports every failure, it never crashes
        problems = ["unexpected error:\n" + traceback.format_exc()]
    if problems:
        for p in problems:
            say(f"FAILED: {p}")
        return 1
    say("self-test passed")
    return 0


if __name__ == "__main__":
    sys.exit(run())
