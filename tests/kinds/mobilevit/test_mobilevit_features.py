"""The Features view on a MobileViT: the kind refuses PCA (``CANNOT``), so the job hands back
token norms and similarity with ``pca`` None and the reason, and the tab blanks the PCA view
saying why instead of refusing the whole job."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mobilevit_helpers import BARE_SETTINGS, save_bare, tiny_timm_mobilevit
from test_ui_window import WAIT_MS, drop, new_window, wait_shown

from vitviz.explain.feature_methods import high_norm_tokens, similarity_method
from vitviz.kinds.mobilevit.methods import CANNOT
from vitviz.workers import feature_jobs, jobs

pytest.importorskip("timm")


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("mvit_features")
    return save_bare(tiny_timm_mobilevit(seed=7), folder / "mvit.pth", BARE_SETTINGS)


def test_the_features_job_runs_without_pca(ckpt: Path, photo_files) -> None:
    state = jobs.EngineState()
    jobs.load_model(state, ckpt)
    jobs.analyze_image(state, photo_files["chelsea"], "chelsea.png")
    got = feature_jobs.features(state)
    assert got.pca is None and CANNOT["pca"] in got.pca_note
    a = state.analysis
    norms = high_norm_tokens(a, got.layer)
    np.testing.assert_allclose(got.norms, norms["norms"], rtol=1e-6)
    sim = similarity_method(a, None, None, {"layer": got.layer}).numpy()
    np.testing.assert_allclose(got.similarity, sim, atol=1e-6)
    assert np.isfinite(got.similarity).all() and got.norms.size > 0


def test_the_tab_blanks_the_pca_view_and_says_why(qtbot, tmp_path: Path, ckpt: Path,
                                                  photo_files) -> None:  # fmt: skip
    window = new_window(qtbot, tmp_path / "settings.ini")
    image = photo_files["chelsea"]
    drop(window, [image, ckpt])
    wait_shown(qtbot, window, image.name)
    f = window.features
    window.tabs.setCurrentWidget(f)
    qtbot.waitUntil(lambda: f.result is not None and not window.client.is_busy(),
                    timeout=WAIT_MS)  # fmt: skip
    assert CANNOT["pca"] in f.pca_view.notice_text()
    assert not f.pca_view.rgb_overlay.isVisible() and not f.pca_view.overlay.isVisible()
    assert f.norm_view.overlay.isVisible() and f.similarity_view.overlay.isVisible()
