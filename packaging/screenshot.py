"""Make the README's screenshot: the main window with an image, a model and its maps.

Runs the real window offscreen (no display needed), opens an image and a checkpoint the way
``vitviz IMAGE CHECKPOINT`` does, waits until the predictions and maps are on screen, grabs the
window and writes a small palette PNG (default ``resources/screenshot.png``, kept < 300 KB).

Defaults: the shipped model and first sample image (vitviz.core.resources) where they exist; else a
generated tiny ViT (random weights scaled so its attention is peaked) and scikit-image's
"chelsea" photo (or a generated picture without scikit-image).

    .venv/bin/python packaging/screenshot.py [--image IMG] [--checkpoint CKPT] [--out PNG]

``--layer N`` selects layer (a Swin's block) N, counted from 0 as everywhere.

``--head-scale per-head`` shows the head grid with each tile on its own scale; ``--tab training
--run DIR`` shows a finished run's curves (a run folder of ``vitviz-cli train``) selected in
the Training tab. ``--prompt TEXT`` (repeatable) types prompts into the prompt box of a model
that takes them (a CLIP) and applies them; ``--class N`` explains class (prompt) N, 0-based.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

MAX_BYTES = 300_000


def default_checkpoint(folder: Path) -> Path:
    from vitviz.core import resources

    shipped = resources.default_model_path()
    if shipped is not None:
        return shipped
    import torch
    from torch import nn

    from vitviz.blocks import create_model
    from vitviz.checkpoints import save_checkpoint

    torch.manual_seed(3)
    model = create_model("cifar10-tutorial", image_size=64).eval()
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():  # larger random weights: peaked attention, distinct predictions
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                ln = isinstance(module, nn.LayerNorm) and name == "weight"
                p.copy_((1.0 if ln else 0.0) + 0.25 * torch.randn(p.shape, generator=g))
    names = [f"class {i}" for i in range(10)]  # untrained: no real class names
    return save_checkpoint(model, folder / "demo-tiny.safetensors", class_names=names)


def default_image(folder: Path) -> Path:
    import numpy as np
    from PIL import Image

    from vitviz.core import resources

    samples = resources.sample_images()
    if samples:
        return samples[0]
    try:
        import skimage.data

        rgb = skimage.data.chelsea()
    except ImportError:
        y, x = np.mgrid[0:300, 0:450]
        rgb = np.stack([x * 255 // 450, y * 255 // 300, (x ^ y) % 256], -1).astype(np.uint8)
    path = folder / "chelsea.png"
    Image.fromarray(rgb).save(path)
    return path


def shoot(
    image: Path,
    checkpoint: Path,
    out: Path,
    size: tuple[int, int],
    method: str,
    faithfulness: bool = False,
    tab: str = "viewer",
    layer: int | None = None,
    query: tuple[int, int] | None = None,
    head_scale: str = "shared",
    run: Path | None = None,
    prompts: tuple[str, ...] = (),
    target_class: int | None = None,
) -> Path:
    import pyqtgraph as pg
    from PIL import Image
    from PySide6.QtCore import QBuffer, QIODevice, QSettings
    from PySide6.QtWidgets import QApplication

    app = QApplication.instance() or QApplication(sys.argv[:1])
    app.setApplicationName("vitviz")
    pg.setConfigOptions(imageAxisOrder="row-major", antialias=True)  # as vitviz.app does
    from vitviz.ui.main_window import MainWindow
    from vitviz.ui.settings import AppSettings

    with tempfile.TemporaryDirectory() as tmp:
        os.environ["VITVIZ_DATA_DIR"] = str(Path(tmp) / "data")  # the runs list: --run alone
        if run is not None:
            (Path(tmp) / "data" / "runs").mkdir(parents=True)
            (Path(tmp) / "data" / "runs" / run.name).symlink_to(run.resolve())
        settings = AppSettings(QSettings(str(Path(tmp) / "s.ini"), QSettings.Format.IniFormat))
        window = MainWindow(settings)
        window.resize(*size)
        window.show()
        window.start([str(checkpoint), str(image)])
        v = window.viewer
        ctl = v.controls
        v.head_panel.set_scale_name(head_scale)

        def settled() -> bool:
            return (
                not window.client.is_busy()
                and v.maps is not None
                and v.maps.params == ctl.params(v.query, v.target_class)
            )

        def wait(done, timeout: float = 120.0) -> None:
            deadline = time.monotonic() + timeout
            while not done():
                if time.monotonic() > deadline:
                    raise TimeoutError("the window did not show the maps in time")
                app.processEvents()
                time.sleep(0.01)

        wait(settled)
        if prompts:  # typed into the prompt box, then applied (the image is analysed again)
            v.prompt_box.set_text(prompts)
            v.prompt_box.apply()
            wait(lambda: settled() and v.image.class_names == list(prompts))
        errors = window.message_bar.text()
        if errors:
            raise RuntimeError(f"the window reported: {errors}")
        # the last layer (or --layer), mean of heads; --query: that patch is the query
        ctl.select(layer=v.image.num_layers - 1 if layer is None else layer, head=-1)
        if query is not None:
            v.set_query(query)
        wait(lambda: ctl.method.findData(method) >= 0)  # the method table has arrived
        ctl.method.setCurrentIndex(ctl.method.findData(method))
        wait(settled)
        if target_class is not None:  # as a click on its bar
            v.set_target_class(target_class)
            wait(settled)
        if faithfulness:  # the Faithfulness tab with the shown method's curves
            v.right_tabs.setCurrentWidget(v.faithfulness)
            v.faithfulness.measure.click()
            wait(lambda: v.faithfulness.result is not None and not window.client.is_busy())
        if tab == "training":
            window.tabs.setCurrentWidget(window.training)
            if run is not None:
                window.training.refresh_runs()
                window.training.runs.setCurrentRow(0)
        elif tab == "statistics":
            v.right_tabs.setCurrentWidget(v.stats_panel)
        for _ in range(5):  # let every view repaint
            app.processEvents()
            time.sleep(0.05)
        pixmap = window.grab()
        window.close()
        app.processEvents()

    buffer = QBuffer()
    buffer.open(QIODevice.OpenModeFlag.WriteOnly)
    pixmap.save(buffer, "PNG")
    import io

    shot = Image.open(io.BytesIO(bytes(buffer.data()))).convert("RGB")
    out.parent.mkdir(parents=True, exist_ok=True)
    shot.save(out, optimize=True)
    for colors in (256, 128, 64):  # too large as RGB: a palette PNG
        if out.stat().st_size <= MAX_BYTES:
            break
        shot.quantize(colors=colors, method=Image.Quantize.FASTOCTREE).save(out, optimize=True)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--image", type=Path, help="image to show (default: a sample or chelsea)")
    p.add_argument("--checkpoint", type=Path, help="checkpoint (default: shipped or tiny demo)")
    p.add_argument("--out", type=Path, default=REPO / "resources" / "screenshot.png")
    p.add_argument("--size", default="1400x900", help="window size, WxH (default 1400x900)")
    p.add_argument("--method", default="attention", help="a name of `vitviz-cli methods`")
    p.add_argument(
        "--faithfulness", action="store_true", help="show the Faithfulness tab, measured"
    )
    p.add_argument("--tab", choices=("viewer", "training", "statistics"), default="viewer")
    p.add_argument("--layer", type=int, help="layer (a Swin's block) to select, from 0")
    p.add_argument("--query", help="ROW,COL: the patch (first-stage cell for a Swin) to query")
    p.add_argument("--head-scale", choices=("shared", "per-head"), default="shared")
    p.add_argument("--run", type=Path, help="a finished run's folder to show (--tab training)")
    p.add_argument(
        "--prompt",
        dest="prompts",
        action="append",
        default=[],
        metavar="TEXT",
        help="a prompt typed into the prompt box (repeatable; a model that takes prompts)",
    )
    p.add_argument(
        "--class", dest="target_class", type=int, help="the class (prompt) to explain, 0-based"
    )
    args = p.parse_args(argv)
    width, height = (int(v) for v in args.size.lower().split("x"))
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        checkpoint = args.checkpoint or default_checkpoint(folder)
        image = args.image or default_image(folder)
        size = (width, height)
        query = None if args.query is None else tuple(int(v) for v in args.query.split(","))
        out = shoot(
            image,
            checkpoint,
            args.out,
            size,
            args.method,
            args.faithfulness,
            args.tab,
            args.layer,
            query,
            args.head_scale,
            args.run,
            tuple(args.prompts),
            args.target_class,
        )
    print(f"wrote {out} ({out.stat().st_size / 1000:.0f} KB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
