"""Every checkpoint either analyses at the sizes its preprocessing gives, or is refused when it is
opened, naming the size (DESIGN §4): never opened to fail every analysis.

Over the kinds whose networks are tied to their own size (CrossViT, PiT, LeViT, VOLO, PVT v1:
position tables or attention biases learnt at one grid; TNT and MViTv2: the patch grid and the
pooled grids are their own size's; ConViT: a square grid), MobileViT, and CaiT, which runs at
other sizes, beside them:
each tiny model as its library saves it, given a sidecar's other ``preprocessing.image_size``
or ``resize: "fit"``. Where the library's model can't be probed there, vitviz's own runs there
alone; where it can't run, the file is refused in one line naming the size and its network's
reason; where it runs, the file opens and a 3:4 photo is analysed at the size the preprocessing
gives it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from crossvit_helpers import tiny_timm_crossvit
from levit_helpers import tiny_timm_levit
from mobilevit_helpers import BARE_SETTINGS as MOBILEVIT_SETTINGS
from mobilevit_helpers import tiny_timm_mobilevit
from mvit_helpers import tiny_timm_mvit
from pit_helpers import tiny_timm_pit
from test_pyramid_hf_pvt1 import saved_pvt1
from test_zoo_cait import ARGS as CAIT_ARGS
from test_zoo_cait import tiny_cait
from test_zoo_convit import ARGS as CONVIT_ARGS
from test_zoo_convit import tiny_convit
from tnt_helpers import SETTINGS as TNT_SETTINGS
from tnt_helpers import tiny_timm_tnt
from volo_helpers import save_folder as save_volo
from volo_helpers import tiny_timm_volo
from zoo_helpers import save_bare, save_timm_folder

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.sidecar import sidecar_path
from vitviz.imaging.preprocess import input_size_for
from vitviz.pipeline.analysis import analyze

# family -> (own side, the other side a sidecar gives; both multiples of the analysis' stride)
SIDES = {
    "crossvit": (120, 96),
    "pit": (48, 64),
    "levit": (64, 32),
    "volo": (64, 32),
    "convit": (32, 16),
    "tnt": (32, 16),
    "mvit": (64, 32),
    "mobilevit": (64, 32),
    "pvt1": (64, 32),
    "cait": (32, 16),
}
SIZES = ["other", "fit"]
# refused at open: their networks run at their own size only (ConViT: at square grids only)
OWN_ONLY = ("crossvit", "pit", "levit", "volo", "pvt1", "tnt", "mvit")
REFUSED = {*((f, s) for f in OWN_ONLY for s in SIZES), ("convit", "fit")}
# MobileViT under "fit" is left out: its network runs at every size "fit" gives, but its
# analysis refuses the maps of a 3:4 or 4:3 image whose stage maps are no multiple of its
# patches (its fit sizes are multiples of its first attention stage's stride, not of the patch
# grid's): an analysis' own refusal, not a network that can't run (open in the report)
CASES = [(f, s) for f in SIDES for s in SIZES if (f, s) != ("mobilevit", "fit")]
PHOTO = (30, 40)  # a 3:4 landscape: "fit" gives it a non-square input


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VITVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("VITVIZ_NO_LIBRARY_CHECK", raising=False)


def _saved(family: str, where: Path) -> tuple[Path, dict[str, Any]]:
    """The family's tiny model as its library saves it (a timm or transformers folder, or a
    bare file where the suite opens it so), and the sidecar settings it already needs."""
    if family == "crossvit":
        return save_timm_folder(tiny_timm_crossvit(), where), {}
    if family == "pit":
        return save_timm_folder(tiny_timm_pit(), where), {}
    if family == "levit":
        return save_timm_folder(tiny_timm_levit(), where), {}
    if family == "volo":
        return save_volo(tiny_timm_volo(), where), {}
    if family == "convit":
        return save_timm_folder(tiny_convit(), where, **CONVIT_ARGS), {}
    if family == "cait":
        return save_timm_folder(tiny_cait(), where, **CAIT_ARGS), {}
    if family == "pvt1":
        return saved_pvt1(where, "PvtForImageClassification")[1], {}
    bare = where.with_suffix(".pth")
    if family == "tnt":
        return save_bare(tiny_timm_tnt(), bare), dict(TNT_SETTINGS)
    if family == "mvit":
        return save_bare(tiny_timm_mvit(), bare), {}
    return save_bare(tiny_timm_mobilevit(), bare), dict(MOBILEVIT_SETTINGS)


def _checkpoint(tmp_path: Path, family: str, size: str) -> Path:
    """The family's checkpoint whose sidecar gives the other side, or ``resize: "fit"``."""
    path, settings = _saved(family, tmp_path / family)
    other = SIDES[family][1]
    prep = {"resize": "fit"} if size == "fit" else {"image_size": [other, other]}
    sidecar_path(path).write_text(json.dumps({**settings, "preprocessing": prep}))
    return path


@pytest.mark.parametrize(("family", "size"), CASES)
def test_a_checkpoint_analyses_at_the_sizes_it_opens_with_or_is_refused(
    tmp_path: Path, family: str, size: str
) -> None:
    path = _checkpoint(tmp_path, family, size)
    try:
        loaded = load_checkpoint(path)
    except CheckpointError as exc:
        line = str(exc)
        assert (family, size) in REFUSED, f"refused: {line}"
        assert "\n" not in line and "can't run at" in line, line  # one line, for the size
        own = SIDES[family][0]
        assert f"its own is {own}×{own}" in line, line
        if size == "other":
            other = SIDES[family][1]
            assert f"run at {other}×{other} (the size analysed" in line, line
        return
    assert (family, size) not in REFUSED, loaded.notes
    photo = np.random.default_rng(3).integers(0, 256, (*PHOTO, 3), dtype=np.uint8)
    stride = loaded.kind.input_stride(loaded.model)
    analysis = analyze(loaded, photo)  # the core API, at the preprocessing's size
    want = input_size_for(loaded.preprocessing, PHOTO, stride)
    assert tuple(analysis.input.shape[-2:]) == tuple(want)  # (C, H, W): what the model saw
    assert torch.isfinite(analysis.logits).all()


def test_the_fit_note_says_what_was_checked(tmp_path: Path) -> None:
    """A CaiT under ``resize: "fit"``: timm's model is checked at its own size alone, the square
    image's; the note names that one and says the 3:4 and 4:3 sizes were not."""
    loaded = load_checkpoint(_checkpoint(tmp_path, "cait", "fit"))
    note = next(n for n in loaded.notes if n.startswith("checked against"))
    assert "not checked at 40×24 and 24×40" in note, note
    assert "the size of a square image checked, of a 3:4 or 4:3 image not" in note, note
    assert "4:3 images checked" not in note, note


def test_the_refusal_is_cached_with_the_check(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second open of a refused file takes the refusal from the check's cached result: the
    network is not run again at the size it can't take."""
    from vitviz.checkpoints import library_check

    path = _checkpoint(tmp_path, "levit", "other")
    with pytest.raises(CheckpointError, match="can't run at 32×32"):
        load_checkpoint(path)
    runs: list[object] = []
    monkeypatch.setattr(library_check, "cannot_run", lambda *a: runs.append(a))
    with pytest.raises(CheckpointError, match="can't run at 32×32"):
        load_checkpoint(path)
    assert runs == []
