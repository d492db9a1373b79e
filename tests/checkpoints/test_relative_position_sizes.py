"""Every relative-position checkpoint either analyses at the size it opens with, or is refused
when it is opened (DESIGN §4): never opened to fail every analysis.

Over the relative-position families the suite builds (transformers' BEiT and Data2Vec-vision,
timm's BEiT and its relpos ViTs: MLP, shared MLP, CLS, CLS + mean, table, table with CLS), each
analysed at its own size, at a smaller one (an image processor's crop, a sidecar's
``preprocessing.image_size``) and with ``resize: "fit"`` (a non-square grid). Which open: those
whose library runs there by vitviz's rule (transformers' BEiT, timm's relpos MLP through
``set_input_size``); timm's tables (BEiT, relpos ``bias``), which timm resizes by another rule,
are refused at the other sizes, naming the size.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from test_library_check_sizes import hf_beit
from test_zoo_beit import tiny_beit
from test_zoo_relpos import CASES as RELPOS
from test_zoo_relpos import tiny as tiny_relpos
from timm.models import save_for_hf

from vitviz.checkpoints import CheckpointError, load_checkpoint
from vitviz.checkpoints.sidecar import sidecar_path
from vitviz.imaging.preprocess import fit_size
from vitviz.pipeline.analysis import analyze

FAMILIES = ["hf-beit", "hf-data2vec-vision", "timm-beit", *(f"relpos-{c}" for c in RELPOS)]
SIZES = ["own", "smaller", "fit"]
# (family, size) refused at open: timm resizes these tables by its own rule, not vitviz's
REFUSED = {(f, s) for f in ("timm-beit", "relpos-table", "relpos-table-cls") for s in SIZES[1:]}
PHOTO = (30, 40)  # a 3:4 landscape: "fit" gives it a non-square grid


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VITVIZ_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("VITVIZ_NO_LIBRARY_CHECK", raising=False)


def _folder(tmp_path: Path, family: str, size: str) -> Path:
    """The family's tiny model as its library saves it, analysed at ``size``: its own; smaller
    (a transformers processor's crop 64 -> 32, a timm folder's sidecar 32 -> 16); "fit"."""
    folder = tmp_path / family
    if family.startswith("hf-"):
        crop = 32 if size == "smaller" else 64
        hf_beit(folder, crop=crop, model_type=family.removeprefix("hf-"))
    else:
        name, options = ("beit", {}) if family == "timm-beit" else RELPOS[family[7:]]
        model = tiny_beit(seed=7) if name == "beit" else tiny_relpos(name, 7, **options)
        save_for_hf(model, folder, safe_serialization=True)
        if size == "smaller":
            prep = {"image_size": [16, 16]}
            sidecar_path(folder).write_text(json.dumps({"preprocessing": prep}))
    if size == "fit":
        sidecar_path(folder).write_text(json.dumps({"preprocessing": {"resize": "fit"}}))
    return folder


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("family", FAMILIES)
def test_a_relative_position_checkpoint_analyses_where_it_opens_or_is_refused(
    tmp_path: Path, family: str, size: str
) -> None:
    folder = _folder(tmp_path, family, size)
    try:
        loaded = load_checkpoint(folder)
    except CheckpointError as exc:
        assert (family, size) in REFUSED, f"refused: {exc}"
        assert "a size analysed" in str(exc), exc  # refused for the size, named
        return
    assert (family, size) not in REFUSED, loaded.notes
    prep, p = loaded.preprocessing, loaded.config.patch_size
    photo = np.random.default_rng(3).integers(0, 256, (*PHOTO, 3), dtype=np.uint8)
    analysis = analyze(loaded, photo)  # the core API, at the preprocessing's size
    h, w = fit_size(PHOTO, prep.image_size, p) if prep.resize == "fit" else prep.image_size
    assert analysis.grid == (h // p, w // p)
    checked = next(n for n in loaded.notes if n.startswith("checked against"))
    assert "not checked" not in checked, checked  # every size analysed was checked
