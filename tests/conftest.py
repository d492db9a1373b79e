"""Shared fixtures for core tests: a tiny random ViT, its native checkpoint, real photos."""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from vitviz.blocks import VisionTransformer, ViTConfig
from vitviz.blocks.norms import RMSNorm

# vitviz's cache (library-check results) goes to a folder of this run, not the user's.
_CACHE = tempfile.mkdtemp(prefix="vitviz-test-cache-")
os.environ.setdefault("VITVIZ_CACHE_DIR", _CACHE)
atexit.register(shutil.rmtree, _CACHE, ignore_errors=True)

# Under pytest-xdist each worker would run torch's pool of a thread per core, and the python
# processes tests start would too: two workers on two cores then fight over the cores (the tiny
# models' ops run fastest on one thread; a subset of the suite took 2.3 times as long).
if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

TINY = dict(image_size=32, patch_size=8, dim=32, depth=2, heads=2, num_classes=5)
CLASS_NAMES = ["tabby", "rocket", "coffee", "astronaut", "teapot"]


def random_vit(seed: int = 0, **overrides) -> VisionTransformer:
    """A tiny ViT with weights large enough for peaked attention and distinct logits."""
    torch.manual_seed(seed)
    model = VisionTransformer(ViTConfig(**{**TINY, **overrides}))
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            for name, p in module.named_parameters(recurse=False):
                norm = isinstance(module, (nn.LayerNorm, RMSNorm))
                offset = 1.0 if norm and name == "weight" else 0.0
                p.copy_(offset + 0.3 * torch.randn(p.shape, generator=g))
    return model.eval()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Once every test module is imported, what exists (modules, torch, Qt, the tests' tables)
    lives to the end of the run: ``gc.freeze`` takes it out of the collector's walk, so a full
    collection (each Qt test below runs two) walks only what tests made since: about 0.02 s
    instead of 0.15 s. Nothing a test makes is frozen; what it leaves is collected as before."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _collect_garbage_on_the_gui_thread(request: pytest.FixtureRequest):
    """In a Qt test, no cyclic garbage is collected by a worker thread (as vitviz.app arranges
    for the real app): a Qt object freed there runs its destructor off the GUI thread and can
    deadlock against it. What the test left behind is collected here, on the main thread."""
    if "qtbot" not in request.fixturenames:
        yield
        return
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.collect()


@pytest.fixture
def tiny_model() -> VisionTransformer:
    return random_vit()


@pytest.fixture
def tiny_ckpt(tmp_path: Path, tiny_model: VisionTransformer) -> Path:
    """A native checkpoint of ``tiny_model`` with CLASS_NAMES."""
    from vitviz.checkpoints import save_checkpoint

    return save_checkpoint(tiny_model, tmp_path / "tiny.safetensors", class_names=CLASS_NAMES)


def _photo(name: str) -> np.ndarray:
    import skimage.data

    return getattr(skimage.data, name)()


@pytest.fixture(scope="session")
def photo_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Real photos written to disk: chelsea.png (451×300), rocket.jpg, coffee.png."""
    folder = tmp_path_factory.mktemp("photos")
    out = {}
    for name, suffix in (("chelsea", ".png"), ("rocket", ".jpg"), ("coffee", ".png")):
        path = folder / f"{name}{suffix}"
        Image.fromarray(_photo(name)).save(path)
        out[name] = path
    return out


# ---- Qt tests (UI helper's block) ---------------------------------------------------------------
# Widget tests run without a display unless the caller chose a platform. Nothing above imports Qt,
# and pytest-qt creates the QApplication only when a test first asks for it, so this is early
# enough. The ``xvfb`` marker tags the test that starts a real X server (CI installs Xvfb).
import os  # noqa: E402

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "xvfb: starts a real X server (Xvfb) and the app on it; fails if Xvfb is missing"
    )
