"""Start-up: process start to the first window paint, and to the first prediction on screen.

Each run spawns ``python -m vitviz IMAGE CHECKPOINT --quit-after-ms 0`` with ``VITVIZ_TIMING=1``
and ``VITVIZ_TIMING_T0`` set to ``time.time()`` just before the spawn; the app prints
``first-paint <s>`` once its window has painted and ``first-prediction <s>`` once the predictions
of the image have painted (see vitviz/app.py), then closes itself. The checkpoint is a small
native one (the tutorials' CIFAR-10 ViT, random weights), the image a generated 400 × 300 PNG;
settings go to a private folder (XDG_CONFIG_HOME). Baseline, in the same run and the same way:
a bare PySide6 window (``QApplication`` + ``QWidget.show()``) printing its own first paint.
Runs take turns (baseline, vitviz, baseline, ...).

Targets (on 2 cores): first paint ≤ 1.5 s, first prediction ≤ 5 s (medians). The
window must paint before torch is imported (DESIGN §2.6): a run where it does not is wrong.

    .venv/bin/python benchmarks/startup.py [--quick] [--no-check] [--repeats N] [--platform P]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import REPO_ROOT, Check, environment, finish, fmt_seconds, parser, print_table

TARGET_PAINT_S = 1.5
TARGET_PREDICTION_S = 5.0
BASELINE = """
import os, sys, time
t0 = float(os.environ["VITVIZ_TIMING_T0"])
from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QApplication, QWidget
app = QApplication(sys.argv[:1])
window = QWidget()
window.setWindowTitle("baseline")
window.resize(1400, 900)
class Watch(QObject):
    def eventFilter(self, obj, event):
        if event.type() == QEvent.Type.Paint:
            window.removeEventFilter(self)
            QTimer.singleShot(0, lambda: (print(f"first-paint {time.time() - t0:.4f}",
                                                flush=True), window.close()))
        return False
watch = Watch()
window.installEventFilter(watch)
window.show()
sys.exit(app.exec())
"""


def make_inputs(folder: Path) -> tuple[Path, Path]:
    """A small native checkpoint and a 400 × 300 PNG."""
    import torch
    from PIL import Image

    from vitviz.blocks import create_model
    from vitviz.checkpoints import save_checkpoint

    torch.manual_seed(0)
    ckpt = save_checkpoint(
        create_model("cifar10-tutorial").eval(),
        folder / "small.safetensors",
        class_names=[f"class {i}" for i in range(10)],
    )
    y, x = np.mgrid[0:300, 0:400]
    rgb = np.stack([x * 255 // 400, y * 255 // 300, (x + y) % 256], axis=-1).astype(np.uint8)
    image = folder / "sample.png"
    Image.fromarray(rgb).save(image)
    return image, ckpt


def spawn(cmd: list[str], env: dict[str, str], timeout: float = 120.0) -> dict[str, float]:
    """Run ``cmd`` with VITVIZ_TIMING_T0 = now; the ``first-*`` seconds it printed."""
    env = {**env, "VITVIZ_TIMING_T0": repr(time.time())}
    proc = subprocess.run(
        cmd, env=env, capture_output=True, text=True, timeout=timeout, check=False, cwd=REPO_ROOT
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{cmd} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    out: dict[str, float] = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) >= 2 and parts[0].startswith("first-"):
            out[parts[0]] = float(parts[1])
            out[parts[0] + " torch"] = float("torch loaded" in line)
    return out


def main(argv: list[str] | None = None) -> int:
    p = parser(__doc__.splitlines()[0])
    p.add_argument(
        "--platform", default=None, help="QT_QPA_PLATFORM for the runs (default: offscreen)"
    )
    args = p.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 7)
    warmup = args.warmup if args.warmup is not None else (0 if args.quick else 1)

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        image, ckpt = make_inputs(folder)
        env = {
            **os.environ,
            "QT_QPA_PLATFORM": args.platform or os.environ.get("QT_QPA_PLATFORM", "offscreen"),
            "XDG_CONFIG_HOME": str(folder / "config"),
            "VITVIZ_TIMING": "1",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.getenv("PYTHONPATH")])),
        }
        app_cmd = [sys.executable, "-m", "vitviz", str(image), str(ckpt), "--quit-after-ms", "0"]
        base_cmd = [sys.executable, "-c", BASELINE]
        runs: dict[str, list[dict[str, float]]] = {"baseline": [], "vitviz": []}
        for i in range(warmup + repeats):
            base, app = spawn(base_cmd, env), spawn(app_cmd, env)
            if i >= warmup:
                runs["baseline"].append(base)
                runs["vitviz"].append(app)
            print(f"run {i + 1}/{warmup + repeats} done", file=sys.stderr)

    wrong = []
    for r in runs["vitviz"]:
        if set(r) != {
            "first-paint",
            "first-paint torch",
            "first-prediction",
            "first-prediction torch",
        }:
            wrong.append(f"a vitviz run did not print both timestamps: {r}")
        elif r["first-paint torch"]:
            wrong.append("torch was imported before the window's first paint")
    base_paint = [r["first-paint"] for r in runs["baseline"]]
    paint = [r["first-paint"] for r in runs["vitviz"] if "first-paint" in r]
    pred = [r["first-prediction"] for r in runs["vitviz"] if "first-prediction" in r]

    rows, checks = [], []
    base_med = statistics.median(base_paint)
    rows.append(
        [
            "baseline: bare PySide6 window, first paint",
            fmt_seconds(base_med),
            fmt_seconds(min(base_paint)),
            fmt_seconds(max(base_paint)),
            "1.0×",
            "baseline",
            "",
        ]
    )
    for name, times, target in (
        ("vitviz: first paint", paint, TARGET_PAINT_S),
        ("vitviz: first prediction shown", pred, TARGET_PREDICTION_S),
    ):
        if not times:
            continue
        med = statistics.median(times)
        check = Check(f"{name} (s)", med, target, True)
        checks.append(check)
        rows.append(
            [
                name,
                fmt_seconds(med),
                fmt_seconds(min(times)),
                fmt_seconds(max(times)),
                f"{med / base_med:.1f}×",
                f"≤ {target:g} s",
                check.verdict,
            ]
        )

    print("# Start-up: process start → first window paint / first prediction shown")
    print(environment())
    print(
        f"platform {env['QT_QPA_PLATFORM']}; {repeats} runs each, in turns, after {warmup} "
        "untimed; checkpoint: cifar10-tutorial (native, random weights), image 400×300 PNG"
        + (" (--quick: timings are not meaningful)" if args.quick else "")
    )
    print()
    print_table(["", "median", "min", "max", "vs baseline", "target", "verdict"], rows)
    print()
    return finish([] if args.quick else checks, args.no_check, wrong)


if __name__ == "__main__":
    sys.exit(main())
