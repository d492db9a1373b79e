"""The window side of model code: the dialog builds the spec, the engine jobs open and analyse it,
bad files give short messages and the window keeps working."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch
from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QDialog, QDialogButtonBox
from test_modelcode_errors import NO_ATTENTION
from test_modelcode_layouts import LAYOUT_IDS, LAYOUTS, Layout, write_model
from test_modelcode_sizing import TABLE_NOTE, TUTORIAL
from test_modelcode_sizing import write as write_sized

from vitviz.modelcode import make_spec
from vitviz.ui.model_code_dialog import TRUST_TEXT, ModelCodeDialog
from vitviz.ui.settings import AppSettings
from vitviz.workers import jobs
from vitviz.workers.messages import ImageResult, MapParams

WAIT_MS = 20_000


def make_settings(path: Path) -> AppSettings:
    return AppSettings(QSettings(str(path), QSettings.Format.IniFormat))


def open_dialog(qtbot, settings: AppSettings) -> ModelCodeDialog:
    dialog = ModelCodeDialog(settings=settings)
    qtbot.addWidget(dialog)
    dialog.show()
    return dialog


def ok_button(dialog: ModelCodeDialog):
    return dialog.buttons.button(QDialogButtonBox.StandardButton.Ok)


def fill(dialog: ModelCodeDialog, layout: Layout, file: Path, weights: Path) -> None:
    """What a user types: the file, the name, the arguments, the weights and the settings."""
    dialog.set_file(file)
    dialog.name.setCurrentText(layout.name)
    dialog.args.setPlainText(json.dumps(layout.args))
    dialog.checkpoint.edit.setText(str(weights))
    s = layout.settings
    if "image_size" in s:
        dialog.image_size.setValue(s["image_size"])
    if "mean" in s:
        dialog.mean.setText(", ".join(map(str, s["mean"])))
        dialog.std.setText(" ".join(map(str, s["std"])))


@pytest.mark.parametrize("layout", LAYOUTS, ids=LAYOUT_IDS)
def test_dialog_spec_opens_and_analyses_the_model(qtbot, tmp_path, photo_files, layout: Layout):
    written = write_model(layout, tmp_path / "model")
    dialog = open_dialog(qtbot, make_settings(tmp_path / "settings.ini"))
    fill(dialog, layout, written.file, written.weights)
    assert dialog.path_label.text() == str(written.file.resolve())
    assert dialog.trust.text() == TRUST_TEXT and not dialog.trust.isChecked()
    assert not ok_button(dialog).isEnabled()  # not without the user's trust
    dialog.trust.setChecked(True)
    assert ok_button(dialog).isEnabled(), dialog.error.text()
    with qtbot.waitSignal(dialog.accepted):
        qtbot.mouseClick(ok_button(dialog), Qt.MouseButton.LeftButton)
    assert dialog.result() == QDialog.DialogCode.Accepted
    spec = dialog.spec()
    assert spec == make_spec(
        written.file.resolve(), layout.name, layout.args, written.weights, layout.settings
    )

    state = jobs.EngineState()
    summary = jobs.load_model_code(state, spec)
    assert (summary.family, summary.depth, summary.heads) == (
        "model-code",
        layout.depth,
        layout.heads,
    )
    assert summary.num_prefix_tokens == layout.prefix and summary.patch_size == 8
    result = jobs.analyze_image(state, photo_files["chelsea"], "chelsea.png")
    assert isinstance(result, ImageResult)
    assert (result.num_layers, result.num_heads, result.grid) == (
        layout.depth,
        layout.heads,
        (4, 4),
    )
    assert result.class_names == [f"class {i}" for i in range(layout.num_classes)]
    maps = jobs.compute_maps(state, MapParams(method="relevance"))
    assert maps.error is None and maps.method_map.shape == (4, 4)
    assert np.isfinite(maps.method_map).all()
    assert maps.head_maps.shape == (layout.depth, layout.heads, 4, 4)


def test_trust_is_asked_once_per_file_version(qtbot, tmp_path):
    layout = LAYOUTS[0]
    written = write_model(layout, tmp_path / "model")
    settings = make_settings(tmp_path / "settings.ini")
    first = open_dialog(qtbot, settings)
    fill(first, layout, written.file, written.weights)
    first.trust.setChecked(True)
    first.accept()
    assert first.spec() is not None

    again = open_dialog(qtbot, settings)  # the last file comes back with its values
    assert again.file.path() == written.file.resolve()
    assert again.trust.isChecked() and "trusted this version" in again.trust_note.text()
    assert json.loads(again.args.toPlainText()) == layout.args
    assert again.checkpoint.path() == written.weights
    assert ok_button(again).isEnabled()

    written.file.write_text(written.file.read_text() + "\nprint('changed')\n")
    changed = open_dialog(qtbot, settings)
    assert not changed.trust.isChecked()
    assert "changed since you last trusted it" in changed.trust_note.text()
    assert not ok_button(changed).isEnabled()
    changed.accept()  # refused without trust
    assert changed.spec() is None


def test_dialog_explains_what_is_missing(qtbot, tmp_path):
    dialog = open_dialog(qtbot, make_settings(tmp_path / "settings.ini"))
    assert dialog.error.text() == "Choose the Python file that defines the model."
    written = write_model(LAYOUTS[0], tmp_path / "model")
    dialog.set_file(written.file)
    assert dialog.name.currentText() == "VisionTransformer"  # the last nn.Module class
    assert [dialog.name.itemText(i) for i in range(dialog.name.count())] == [
        "Attention",
        "Block",
        "VisionTransformer",
    ]
    dialog.args.setPlainText("{dim: 3}")
    assert "not valid JSON" in dialog.error.text()
    dialog.args.setPlainText("{}")
    dialog.mean.setText("0.5, 0.5")
    assert "mean must be three numbers" in dialog.error.text()
    dialog.mean.setText("")
    dialog.checkpoint.edit.setText(str(tmp_path / "missing.pth"))
    assert "does not exist" in dialog.error.text()
    dialog.checkpoint.edit.setText("")
    assert "trust" in dialog.error.text()
    dialog.trust.setChecked(True)
    assert dialog.error.text() == "" and ok_button(dialog).isEnabled()


def test_jobs_turn_bad_files_into_short_messages(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nraise RuntimeError('no GPU here')\n")
    state = jobs.EngineState()
    with pytest.raises(jobs.UserFacingError) as info:
        jobs.load_model_code(state, make_spec(bad, "ViT"))
    assert info.value.kind == "checkpoint"
    assert str(info.value) == (
        "bad.py could not be imported: RuntimeError: no GPU here "
        "(bad.py, line 2: raise RuntimeError('no GPU here'))"
    )
    assert state.loaded is None


def test_the_window_survives_bad_files_and_shows_the_model(qtbot, tmp_path, photo_files):
    from vitviz.ui.main_window import MainWindow

    window = MainWindow(make_settings(tmp_path / "settings.ini"))
    qtbot.addWidget(window)
    bugs: list[str] = []
    window.notifier.bugReported.connect(lambda summary, details: bugs.append(details))
    window.show()
    window.start([])

    def open_code(spec) -> None:  # what the "Open model code…" action does with the spec
        window.model_label.setText(f"loading {spec.file.name}…")
        window.client.submit("model", partial(jobs.load_model_code, spec=spec))

    bad = tmp_path / "bad.py"
    bad.write_text("x = undefined_name\n")
    open_code(make_spec(bad, "ViT"))
    qtbot.waitUntil(lambda: "could not be imported" in window.message_bar.text(), timeout=WAIT_MS)
    assert "NameError: name 'undefined_name' is not defined (bad.py, line 1" in (
        window.message_bar.text()
    )
    mlp = tmp_path / "mlp.py"
    mlp.write_text(NO_ATTENTION)
    open_code(make_spec(mlp, "PatchMLP"))
    qtbot.waitUntil(lambda: "no attention was seen" in window.message_bar.text(), timeout=WAIT_MS)
    assert window.model is None and window.model_label.text() == "no model"

    layout = LAYOUTS[LAYOUT_IDS.index("deit_distilled")]
    written = write_model(layout, tmp_path / "model")
    open_code(make_spec(written.file, layout.name, layout.args, written.weights))
    qtbot.waitUntil(lambda: window.model is not None, timeout=WAIT_MS)
    assert window.model.family == "model-code" and window.model.depth == 2
    window.open_image(photo_files["chelsea"])
    qtbot.waitUntil(
        lambda: (
            window.viewer.image is not None
            and window.viewer.maps is not None
            and not window.client.is_busy()
        ),
        timeout=WAIT_MS,
    )
    assert window.viewer.image.num_prefix_tokens == 2
    assert window.viewer.maps.head_maps.shape == (2, 2, 4, 4)
    assert not bugs


def test_the_model_info_says_how_the_image_size_was_found(qtbot, tmp_path):
    """A tutorial model taking ``img=48``, opened with no settings: the info shows the note."""
    from PySide6.QtWidgets import QPlainTextEdit

    from vitviz.ui.model_info_dialog import ModelInfoDialog

    file, weights, _ = write_sized(tmp_path, TUTORIAL)
    summary = jobs.load_model_code(jobs.EngineState(), make_spec(file, "ViT", checkpoint=weights))
    assert summary.image_size == (48, 48)
    dialog = ModelInfoDialog(summary)
    qtbot.addWidget(dialog)
    facts = dialog.findChild(QPlainTextEdit).toPlainText()
    assert f"note: {TABLE_NOTE}" in facts and "trained at 48×48" in facts


def test_a_one_channel_training_checkpoint_opens_from_the_dialog(qtbot, tmp_path, photo_files):
    """The dialog takes one number for mean and std; the engine opens a one-channel model from
    its training checkpoint with the class names beside the weights, and the info says so."""
    from PySide6.QtWidgets import QPlainTextEdit
    from test_modelcode_tutorials import FASHION, build, training_checkpoint, write_source
    from tutorial_families import MNIST_CONV

    from vitviz.ui.model_info_dialog import ModelInfoDialog

    path = write_source(tmp_path / "mnist", MNIST_CONV)
    model = build(path, "MnistViT", {})
    ckpt = training_checkpoint(model, model_state=model.state_dict(), classes=FASHION)
    torch.save(ckpt, tmp_path / "best.pth")
    dialog = open_dialog(qtbot, make_settings(tmp_path / "settings.ini"))
    dialog.set_file(path)
    dialog.name.setCurrentText("MnistViT")
    dialog.args.setPlainText("{}")
    dialog.checkpoint.edit.setText(str(tmp_path / "best.pth"))
    dialog.mean.setText("0.2860")
    dialog.std.setText("0.3530")
    dialog.trust.setChecked(True)
    assert ok_button(dialog).isEnabled(), dialog.error.text()
    with qtbot.waitSignal(dialog.accepted):
        qtbot.mouseClick(ok_button(dialog), Qt.MouseButton.LeftButton)
    spec = dialog.spec()
    assert spec is not None and (spec.mean, spec.std) == ((0.286,), (0.353,))
    state = jobs.EngineState()
    summary = jobs.load_model_code(state, spec)
    result = jobs.analyze_image(state, photo_files["chelsea"], "chelsea.png")
    assert isinstance(result, ImageResult) and result.class_names == FASHION
    info = ModelInfoDialog(summary)
    qtbot.addWidget(info)
    facts = info.findChild(QPlainTextEdit).toPlainText()
    assert "weights from the key 'model_state' of the checkpoint" in facts
    assert "1-channel inputs (from the patch Conv2d): images are fed as grayscale" in facts


def test_the_predictions_say_the_probabilities_are_the_models_own(qtbot, tmp_path, photo_files):
    from test_modelcode_tutorials import build, write_source
    from tutorial_families import RETURNS

    from vitviz.ui.charts import PredictionsChart

    path = write_source(tmp_path, RETURNS)
    model = build(path, "TupleViT", {"output": "softmax"})
    torch.save(model.state_dict(), tmp_path / "w.pth")
    state = jobs.EngineState()
    jobs.load_model_code(
        state, make_spec(path, "TupleViT", {"output": "softmax"}, tmp_path / "w.pth")
    )
    result = jobs.analyze_image(state, photo_files["chelsea"], "chelsea.png")
    assert result.scores == "probabilities"
    chart = PredictionsChart()
    qtbot.addWidget(chart)
    chart.set_predictions(result.probs, result.class_names, None, scores=result.scores)
    assert chart.getAxis("bottom").labelText == "probability (the model's own output)"
    chart.set_predictions(result.probs, result.class_names, None)
    assert chart.getAxis("bottom").labelText == "probability"
