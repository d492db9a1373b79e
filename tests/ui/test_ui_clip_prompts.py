"""The window's prompt box: a CLIP's classes are the prompts typed in it.

A tiny Hugging Face CLIPModel folder (random weights, a tokenizer learnt in the test) is dropped
on the real window with a photo; prompts are typed with real key presses, and what the window
shows is compared with ``analyze()`` of the same image after ``apply_prompts`` in the test. A
ViT shows no box; what can't be applied is said in one line (never the bug dialog)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from clip_fixtures import CORPUS, learn_bpe, save_openai_files, tiny_clip
from PySide6.QtCore import QPointF, QSettings, Qt
from PySide6.QtTest import QTest
from test_ui_window import WAIT_MS, click, drop, new_window, select_method, settled, wait_shown

from vitviz.checkpoints import load_checkpoint
from vitviz.explain.methods import get_method
from vitviz.kindapi import kind_of
from vitviz.pipeline.analysis import analyze
from vitviz.ui.main_window import MainWindow
from vitviz.ui.prompt_box import HINT
from vitviz.ui.settings import AppSettings

PROMPTS = ["a photo of a dog", "a photo of a cat on a sofa", "a red car"]
SIDE = 32  # the tiny tower's input (4 × 4 patches of 8)


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CLIPModel saved as Hugging Face saves one, beside the tokenizer's files."""
    from transformers import CLIPImageProcessor

    vocab, merges = learn_bpe(CORPUS, merges=150)
    model = tiny_clip(len(vocab), seed=4)
    with torch.no_grad():
        model.logit_scale.fill_(2.3)
    folder = tmp_path_factory.mktemp("clip") / "tiny-clip"
    model.save_pretrained(folder)
    save_openai_files(folder, vocab, merges)
    CLIPImageProcessor(size={"shortest_edge": SIDE}, crop_size=SIDE).save_pretrained(folder)
    return folder


@pytest.fixture
def settings_path(tmp_path: Path) -> Path:
    return tmp_path / "settings" / "vitviz.ini"


@pytest.fixture
def window(qtbot, settings_path: Path) -> MainWindow:
    w = new_window(qtbot, settings_path)
    bugs: list[tuple[str, str]] = []
    w.notifier.bugReported.connect(lambda summary, details: bugs.append((summary, details)))
    yield w
    assert not bugs, f"the bug dialog was shown: {bugs}"


def open_clip(qtbot, window: MainWindow, folder: Path, image: Path) -> None:
    drop(window, [folder, image])
    wait_shown(qtbot, window, image.name)
    qtbot.waitUntil(lambda: window.model is not None, timeout=WAIT_MS)


def type_prompts(qtbot, window: MainWindow, prompts: list[str]) -> None:
    """Each prompt typed, then Enter (which applies the lines typed so far)."""
    edit = window.viewer.prompt_box.edit
    edit.setFocus()
    for prompt in prompts:
        QTest.keyClicks(edit, prompt)
        QTest.keyClick(edit, Qt.Key.Key_Return)


def wait_prompts(qtbot, window: MainWindow, prompts: list[str]) -> None:
    v = window.viewer
    qtbot.waitUntil(
        lambda: settled(window) and v.image.class_names == prompts and not window._model_pending,
        timeout=WAIT_MS,
    )


def reference(folder: Path, image: Path, gradients: bool = False):
    loaded = load_checkpoint(folder)
    assert kind_of(loaded).apply_prompts(loaded, PROMPTS) is None
    return analyze(loaded, image, gradients=gradients)


def overlay(window: MainWindow) -> np.ndarray:
    return np.asarray(window.viewer.map_view.overlay.image)


def message_after(qtbot, window: MainWindow, action) -> str:
    with qtbot.waitSignal(window.notifier.userMessage, timeout=WAIT_MS) as blocker:
        action()
    qtbot.waitUntil(lambda: not window.client.is_busy(), timeout=WAIT_MS)
    return blocker.args[0]


def test_typed_prompts_are_ranked_and_explained(qtbot, window, clip_folder, photo_files) -> None:
    image = photo_files["chelsea"]
    open_clip(qtbot, window, clip_folder, image)
    v, box, chart = window.viewer, window.viewer.prompt_box, window.viewer.predictions
    # no prompts yet: the box with its hint, attention maps, no predictions (no head)
    assert not box.isHidden() and box.edit.placeholderText() == HINT
    assert chart.indices == [] and v.image.class_names == []
    assert v.maps is not None and v.maps.params.method == "attention"
    assert "type prompts" in v.predictions_title.text()
    assert v.controls.class_label.text() == "(no prompts yet)"

    type_prompts(qtbot, window, PROMPTS)
    wait_prompts(qtbot, window, PROMPTS)
    ref = reference(clip_folder, image)
    order = [int(i) for i in np.argsort(-ref.probs.numpy(), kind="stable")]
    assert chart.labels == [PROMPTS[i] for i in order]
    np.testing.assert_allclose(chart.probs, ref.probs.numpy()[order], atol=1e-6)
    assert "softmax over the prompts" in chart.getAxis("bottom").labelText
    assert "that prompt" in v.predictions_title.text()
    assert "3 scored" in box.title.text()
    assert window.model.prompts == tuple(PROMPTS) and window.model.num_classes == 3

    # the second prompt's relevance: click its bar
    select_method(qtbot, window, "relevance")
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    row = chart.indices.index(1)
    with qtbot.waitSignal(chart.classClicked, timeout=WAIT_MS) as blocker:
        click(chart, chart.getPlotItem().vb.mapViewToScene(QPointF(0.01, row)))
    assert blocker.args == [1] and v.target_class == 1
    assert v.controls.class_label.text() == PROMPTS[1]
    qtbot.waitUntil(lambda: settled(window) and v.maps.target_class == 1, timeout=WAIT_MS)
    grad = reference(clip_folder, image, gradients=True)
    want = get_method("relevance")(grad, None, 1, {}).numpy()
    other = get_method("relevance")(grad, None, 0, {}).numpy()
    assert not np.allclose(want, other, atol=1e-3)  # the prompt matters
    np.testing.assert_allclose(overlay(window), want, atol=1e-5)


def test_prompts_are_remembered_per_checkpoint(
    qtbot, window, clip_folder, photo_files, settings_path
) -> None:
    image = photo_files["coffee"]
    open_clip(qtbot, window, clip_folder, image)
    type_prompts(qtbot, window, PROMPTS[::-1])
    wait_prompts(qtbot, window, PROMPTS[::-1])
    settings = AppSettings(QSettings(str(settings_path), QSettings.Format.IniFormat))
    assert settings.prompts_for(clip_folder) == tuple(PROMPTS[::-1])

    again = new_window(qtbot, settings_path)  # the next session opens the same checkpoint
    open_clip(qtbot, again, clip_folder, image)
    wait_prompts(qtbot, again, PROMPTS[::-1])
    assert again.viewer.prompt_box.prompts() == tuple(PROMPTS[::-1])


def test_a_vit_shows_no_prompt_box_and_refuses_prompts(
    qtbot, window, tiny_ckpt, photo_files
) -> None:
    image = photo_files["chelsea"]
    drop(window, [image, tiny_ckpt])
    wait_shown(qtbot, window, image.name)
    assert window.viewer.prompt_box.isHidden()
    assert "that class" in window.viewer.predictions_title.text()
    text = message_after(qtbot, window, lambda: window.apply_prompts(("a dog",)))
    assert "\n" not in text and "a ViT's classes are its head's" in text


def test_what_cant_be_applied_is_said_in_one_line(
    qtbot, window, clip_folder, photo_files, tmp_path
) -> None:
    image = photo_files["chelsea"]
    open_clip(qtbot, window, clip_folder, image)
    box = window.viewer.prompt_box
    text = message_after(qtbot, window, box.apply_button.click)  # nothing typed
    assert "\n" not in text and "type at least one" in text
    QTest.keyClicks(box.edit, "   ")
    text = message_after(qtbot, window, box.apply_button.click)  # blank lines only
    assert "type at least one" in text
    assert window.viewer.image.class_names == []

    bare = tmp_path / "no-tokenizer"  # the weights alone: no vocab.json, merges.txt
    shutil.copytree(clip_folder, bare, ignore=shutil.ignore_patterns("vocab.json", "merges.txt"))
    drop(window, [bare])
    qtbot.waitUntil(
        lambda: window.model is not None and window.model.path == bare and settled(window),
        timeout=WAIT_MS,
    )
    assert not box.isHidden()
    QTest.keyClicks(box.edit, "a photo of a dog")
    text = message_after(qtbot, window, box.apply_button.click)
    assert "\n" not in text and "no tokenizer files" in text
    assert window.viewer.image.class_names == [] and window.viewer.predictions.indices == []


def test_only_a_tower_that_reads_prompts_shows_the_box(clip_folder) -> None:
    """The engine's summary says whether the model takes prompts: a CLIP with its text tower
    does (a missing tokenizer is said when prompts are applied), an image tower alone doesn't
    (no box), nor a ViT."""
    from vitviz.workers import jobs

    loaded = load_checkpoint(clip_folder)
    assert jobs.summarize(loaded, "cpu").takes_prompts
    state = jobs.EngineState(loaded=loaded)
    summary = jobs.apply_prompts(state, ("  a red car ", "", "a dog", "a red car"))
    assert summary.prompts == ("a red car", "a dog") and summary.num_classes == 2
    loaded.model.tokenizer = None
    assert jobs.summarize(loaded, "cpu").takes_prompts
    loaded.model.text = None  # an image tower alone (CLIPVisionModel)
    assert not jobs.summarize(loaded, "cpu").takes_prompts


def test_the_box_keeps_its_keys(qtbot, window, clip_folder, photo_files) -> None:
    """Arrows move the cursor in the box (not the head or layer: the window's shortcuts), and
    Ctrl+V pastes text into it (not an image into the window)."""
    from PySide6.QtWidgets import QApplication

    image = photo_files["chelsea"]
    open_clip(qtbot, window, clip_folder, image)
    ctl, edit = window.viewer.controls, window.viewer.prompt_box.edit
    layer, head = ctl.selected_layer(), ctl.selected_head()
    window.activateWindow()
    edit.setFocus()
    qtbot.waitUntil(edit.hasFocus, timeout=WAIT_MS)
    QTest.keyClicks(edit, "a dog")
    for key in (Qt.Key.Key_Left, Qt.Key.Key_Left, Qt.Key.Key_Right):
        QTest.keyClick(edit, key)
    assert edit.textCursor().position() == 4
    for key in (Qt.Key.Key_Up, Qt.Key.Key_Down, Qt.Key.Key_PageUp, Qt.Key.Key_PageDown):
        QTest.keyClick(edit, key)
    assert (ctl.selected_layer(), ctl.selected_head()) == (layer, head)
    QApplication.clipboard().setText(" on a sofa")
    QTest.keyClick(edit, Qt.Key.Key_End)
    QTest.keyClick(edit, Qt.Key.Key_V, Qt.KeyboardModifier.ControlModifier)
    assert edit.toPlainText() == "a dog on a sofa"
    assert not window.message_bar.text() and not window.client.is_busy()


def test_new_prompts_never_rerun_the_image_tower(qtbot, window, clip_folder, photo_files):
    """With attention shown, typing prompts scores the image embedding kept from the image's
    pass: the image tower does not run again, and the chart equals a fresh analysis's."""
    image = photo_files["chelsea"]
    open_clip(qtbot, window, clip_folder, image)
    model = window.client._engine.state.loaded.model
    runs = []
    original = model.forward_features
    model.forward_features = lambda *a, **k: runs.append(1) or original(*a, **k)
    original_explained = model.forward_explained
    model.forward_explained = lambda *a, **k: runs.append(1) or original_explained(*a, **k)
    type_prompts(qtbot, window, PROMPTS)
    wait_prompts(qtbot, window, PROMPTS)
    assert runs == []  # three prompt sets applied, no forward pass of the image tower
    ref = reference(clip_folder, image)
    chart = window.viewer.predictions
    order = [int(i) for i in np.argsort(-ref.probs.numpy(), kind="stable")]
    np.testing.assert_allclose(chart.probs, ref.probs.numpy()[order], atol=1e-6)
    # a gradient map of a new prompt is one backward pass through the graph the image's pass
    # kept: the tower does not run, and the map is a fresh analysis's
    select_method(qtbot, window, "relevance")
    qtbot.waitUntil(lambda: settled(window), timeout=WAIT_MS)
    assert runs == []
    shown = window.client._engine.state.analysis
    torch.testing.assert_close(shown.relevance(), ref.relevance(), rtol=1e-5, atol=1e-6)
