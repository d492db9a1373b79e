"""Set-up the `vitviz-cli faithfulness` tests share (the ViT's in tests/cli, the Swin's in
tests/kinds/swin): the shipped sample scenes copied with their masks, the command run on them,
and the files it writes."""

from __future__ import annotations

import shutil
from pathlib import Path

from vitviz.cli import main

SAMPLES = Path(__file__).resolve().parents[2] / "resources" / "samples"
# what a run writes to --out, sorted by name
OUTPUTS = [
    "faithfulness.csv",
    "faithfulness.json",
    "faithfulness.png",
    "images.parquet",
    "run.json",
]


def copy_samples(tmp_path: Path) -> list[Path]:
    """Two shipped sample scenes (star, ring) with their masks beside them, under
    ``tmp_path``/samples; returns the two images."""
    folder = tmp_path / "samples"
    folder.mkdir()
    for stem in ("star", "ring"):
        for name in (f"{stem}.png", f"{stem}_mask.png"):
            shutil.copy(SAMPLES / name, folder / name)
    return [folder / "star.png", folder / "ring.png"]


def run_faithfulness(steps: int, ckpt: Path, images: list[Path], out: Path, *extra: str) -> int:
    """`vitviz-cli faithfulness` of ``images`` with ``ckpt`` on the CPU, ``steps`` steps, into
    ``out``, with ``extra`` arguments; returns its exit code."""
    argv = ["faithfulness", *map(str, images), "--checkpoint", str(ckpt), "--device", "cpu"]
    return main([*argv, "--out", str(out), "--steps", str(steps), *extra])
